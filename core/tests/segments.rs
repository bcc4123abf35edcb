//! Merged job files (format 1.1, docs/trace-format.md section 11): one `Trace` per host segment,
//! ids per segment, cuts, and the committed `v1.1-merged.tps` golden file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use tpuscope_core::event::{Clock, Manifest, Record, SEGMENT_KIND, SEGMENT_MINOR, Segment};
use tpuscope_core::format::{FORMAT_MAJOR, HEADER_LEN, encode_frame, encode_header};
use tpuscope_core::{Completeness, TraceWriter, align, read_trace, read_traces};

const MERGED: &str = "v1.1-merged.tps";

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/golden")
}

/// The segment of `bytes` (a whole plain trace), as `tpuscope merge` writes it.
fn segment(index: u32, name: &str, bytes: &[u8]) -> Vec<u8> {
    let t = read_trace(bytes).unwrap();
    let m = t.manifest.clone().unwrap();
    let a = align::alignment(&t);
    let seg = Segment {
        index,
        host: m.host,
        process_index: m.process_index,
        job_id: "golden-job".into(),
        offset_ns: a.offset_ns,
        alignment: a.method.into(),
        anchors: a.anchors,
        spread_ns: a.spread_ns,
        source: name.into(),
        source_completeness: "complete".into(),
        pid: m.pid,
    };
    let mut out = Vec::new();
    encode_frame(&mut out, SEGMENT_KIND, 0, &seg.payload());
    out.extend_from_slice(&bytes[HEADER_LEN..]);
    out
}

fn merged(parts: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = encode_header(FORMAT_MAJOR, SEGMENT_MINOR).to_vec();
    for (i, (name, bytes)) in parts.iter().enumerate() {
        out.extend(segment(i as u32, name, bytes));
    }
    out
}

/// A small host trace whose string 1 is `text`, with clock anchors at `mono → wall`.
fn host(host: &str, index: u32, text: &str, mono0: u64) -> Vec<u8> {
    let m = Manifest {
        pid: 7 + index,
        host: host.into(),
        process_index: index,
        start_mono_ns: mono0,
        start_wall_ns: 1_000_000_000_000,
        ..Manifest::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &m).unwrap();
    assert_eq!(w.intern_string(text).unwrap(), 1);
    for k in 0..3 {
        w.write(&Record::Clock(Clock {
            mono_ns: mono0 + k * 1_000_000_000,
            wall_ns: 1_000_000_000_000 + k * 1_000_000_000,
        }))
        .unwrap();
    }
    w.write(&Record::End(Default::default())).unwrap();
    w.into_inner()
}

#[test]
fn segments_read_as_separate_traces_with_their_own_ids_and_offsets() {
    let (a, b) = (
        host("a", 0, "alpha", 5_000),
        host("b", 1, "beta", 9_000_000_000),
    );
    let bytes = merged(&[("a.tps", &a), ("b.tps", &b)]);
    let ts = read_traces(&bytes).unwrap();
    assert_eq!(ts.len(), 2);
    assert_eq!(ts[0].header.minor, SEGMENT_MINOR);
    // Ids are per segment: string 1 is each host's own.
    assert_eq!((ts[0].string(1), ts[1].string(1)), ("alpha", "beta"));
    for (t, (host, mono0)) in ts.iter().zip([("a", 5_000i64), ("b", 9_000_000_000)]) {
        assert_eq!(t.manifest.as_ref().unwrap().host, host);
        assert_eq!(t.completeness, Completeness::Complete);
        let s = t.segment.as_ref().unwrap();
        assert_eq!((s.alignment.as_str(), s.anchors), ("clock_anchors", 3));
        assert_eq!(s.offset_ns, 1_000_000_000_000 - mono0);
        assert_eq!(align::job_offset_ns(t), s.offset_ns);
        assert_eq!(t.unknown_records, 0);
    }
    // The plain reader gives the first host only, never a mix.
    let first = read_trace(&bytes).unwrap();
    assert_eq!(first.string(1), "alpha");
    assert_eq!(first.events, ts[0].events);
    // A plain trace is one segment without a Segment.
    let plain = read_traces(&a).unwrap();
    assert_eq!(plain.len(), 1);
    assert!(plain[0].segment.is_none());
    assert_eq!(plain[0].events, ts[0].events);
}

#[test]
fn a_cut_merged_file_keeps_every_whole_segment() {
    let (a, b) = (host("a", 0, "alpha", 5_000), host("b", 1, "beta", 77));
    let bytes = merged(&[("a.tps", &a), ("b.tps", &b)]);
    let whole = read_traces(&bytes).unwrap();
    let second_at = HEADER_LEN + segment(0, "a.tps", &a).len();
    let marker_len = segment(1, "b.tps", &b).len() - (b.len() - HEADER_LEN);
    for cut in HEADER_LEN..bytes.len() {
        let ts = read_traces(&bytes[..cut]).unwrap();
        assert!(ts.len() <= 2, "cut {cut}");
        if cut < second_at + marker_len {
            // Host b's marker is not whole: only host a.
            assert_eq!(ts.len(), 1, "cut {cut}");
        } else {
            // Host a is untouched by a cut inside host b's segment.
            assert_eq!(ts.len(), 2, "cut {cut}");
            assert_eq!(ts[0].events, whole[0].events);
            assert_eq!(ts[0].completeness, Completeness::Complete);
            assert_ne!(ts[1].completeness, Completeness::Complete, "cut {cut}");
        }
    }
}

/// `TPUSCOPE_REGEN_GOLDEN=1` writes the file when it does not exist yet; a released file is
/// never rewritten (docs/trace-format.md, section 10).
#[test]
fn merged_golden_reads_exactly() {
    let all = std::fs::read(golden_dir().join("v1.0-all-kinds.tps")).unwrap();
    let unknown = std::fs::read(golden_dir().join("v1.0-unknown-kind.tps")).unwrap();
    let generated = merged(&[
        ("v1.0-all-kinds.tps", &all),
        ("v1.0-unknown-kind.tps", &unknown),
    ]);
    let path = golden_dir().join(MERGED);
    let regen = std::env::var_os("TPUSCOPE_REGEN_GOLDEN").is_some_and(|v| v == "1");
    if regen && !path.exists() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        committed, generated,
        "{MERGED}: the merged layout changed; released golden files are never rewritten"
    );
    let ts = read_traces(&committed).unwrap();
    assert_eq!(ts.len(), 2);
    // Each segment reads exactly as its source file does on its own.
    for (t, src) in ts.iter().zip([&all, &unknown]) {
        let alone = read_trace(src).unwrap();
        assert_eq!(t.manifest, alone.manifest);
        assert_eq!(t.events, alone.events);
        assert_eq!(t.strings, alone.strings);
        assert_eq!(t.stacks.len(), alone.stacks.len());
        assert_eq!(t.blobs.len(), alone.blobs.len());
        assert_eq!(t.unknown_records, alone.unknown_records);
        assert_eq!(t.completeness, alone.completeness);
    }
    let s: Vec<&Segment> = ts.iter().map(|t| t.segment.as_ref().unwrap()).collect();
    assert_eq!((s[0].index, s[1].index), (0, 1));
    assert_eq!(s[0].source, "v1.0-all-kinds.tps");
    assert_eq!(s[1].job_id, "golden-job");
}
