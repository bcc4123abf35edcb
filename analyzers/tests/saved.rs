//! A read saved as bytes (`saved::encode`, what `report` caches) and read back gives the same
//! report as the read itself, on every sample trace and on a merged file; bytes it did not
//! write (cut, changed, another version) read back as nothing, never as a wrong report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use tpuscope_analyzers::digest::{Digest, read_stream};
use tpuscope_analyzers::report::{Input, Options, build};
use tpuscope_analyzers::saved;
use tpuscope_core::{Trace, TraceStream};

fn samples() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sample_traces");
    let mut v = Vec::new();
    for dir in ["real", "golden"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "tps") {
                v.push(p);
            }
        }
    }
    v.sort();
    assert!(v.len() >= 8, "sample traces missing: {v:?}");
    v
}

fn report_json(name: &str, read: &[(Trace, Digest)]) -> String {
    let inputs: Vec<Input<'_>> = read
        .iter()
        .enumerate()
        .map(|(i, (t, d))| Input {
            digest: Some(d),
            ..Input::new(format!("{name}#{i}"), t)
        })
        .collect();
    serde_json::to_string_pretty(&build(&inputs, &Options::default())).unwrap()
}

#[test]
fn every_sample_reads_back_to_the_same_report() {
    let mut saved_some = 0;
    for path in samples() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let Ok(stream) = TraceStream::open(&path) else {
            continue;
        };
        let Ok(read) = read_stream(stream) else {
            continue;
        };
        let bytes = saved::encode(&read);
        let back = saved::decode(&bytes).unwrap_or_else(|| panic!("{name}: did not read back"));
        assert_eq!(back.len(), read.len(), "{name}");
        let (a, b) = (report_json(&name, &back), report_json(&name, &read));
        if let Some((x, y)) = a.lines().zip(b.lines()).find(|(x, y)| x != y) {
            panic!("{name}: read back gives {x:?} where the read gave {y:?}");
        }
        assert_eq!(a, b, "{name}");
        // The same read gives the same bytes.
        assert_eq!(saved::encode(&back), bytes, "{name}");
        saved_some += 1;
    }
    assert!(saved_some >= 8, "{saved_some} samples read");
}

#[test]
fn bytes_it_did_not_write_read_back_as_nothing() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/real/jax_lr.tps");
    let read = read_stream(TraceStream::open(&path).unwrap()).unwrap();
    let bytes = saved::encode(&read);
    assert!(saved::decode(&bytes).is_some());
    // Every cut, and a changed byte at many places: the sum or a length catches it.
    for n in (0..bytes.len()).step_by(97) {
        assert!(saved::decode(&bytes[..n]).is_none(), "cut at {n}");
    }
    for at in (0..bytes.len()).step_by(101) {
        let mut b = bytes.clone();
        b[at] ^= 0x40;
        assert!(saved::decode(&b).is_none(), "byte {at} changed");
    }
    // Another version, its sum right: not read.
    let mut b = bytes[..bytes.len() - 8].to_vec();
    b[0] = 99;
    let sum = xxhash_rust::xxh3::xxh3_64(&b);
    b.extend_from_slice(&sum.to_le_bytes());
    assert!(saved::decode(&b).is_none());
}
