//! `tpuscope report` streams a trace into digests and never holds its events; a trace decoded
//! whole gives its digests from `Trace::events`. Both must give the same report, on every sample
//! trace, on a merged (many-segment) trace and on traces cut short; and a clean merged file read
//! segment by segment on several threads, its hosts analysed on several threads, gives the same
//! report again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use tpuscope_analyzers::digest::{DigestBuilder, read_stream};
use tpuscope_analyzers::report::{Input, Options, build};
use tpuscope_core::{TraceStream, read_traces};

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

fn report_json(inputs: &[Input<'_>]) -> serde_json::Value {
    serde_json::to_value(build(inputs, &Options::default())).unwrap()
}

/// The report with its runs analysed on `threads` threads.
fn report_json_on(inputs: &[Input<'_>], threads: usize) -> serde_json::Value {
    let options = Options {
        threads,
        ..Options::default()
    };
    serde_json::to_value(build(inputs, &options)).unwrap()
}

/// The report of a merged file read segment by segment on threads, its hosts analysed on
/// threads too, when it is one (clean).
fn by_segments(name: &str, path: &Path) -> Option<serde_json::Value> {
    let ranges = tpuscope_core::stream::segment_ranges(path).unwrap()?;
    let read = tpuscope_core::stream::read_segments_each(
        path,
        &ranges,
        3,
        DigestBuilder::default,
        |b, r| b.push(&r),
    )
    .unwrap();
    let read: Vec<_> = read.into_iter().map(|(t, b)| (t, b.finish())).collect();
    let inputs: Vec<Input<'_>> = read
        .iter()
        .enumerate()
        .map(|(i, (t, d))| Input {
            digest: Some(d),
            ..Input::new(format!("{name}#{i}"), t)
        })
        .collect();
    Some(report_json_on(&inputs, 3))
}

/// Both reports of the trace held in `bytes`, or None when it is not readable at all.
fn both(
    name: &str,
    bytes: &[u8],
    scratch: &Path,
) -> Option<(serde_json::Value, serde_json::Value)> {
    let whole = read_traces(bytes).ok()?;
    let inputs: Vec<Input<'_>> = whole
        .iter()
        .enumerate()
        .map(|(i, t)| Input::new(format!("{name}#{i}"), t))
        .collect();
    let a = report_json(&inputs);

    std::fs::write(scratch, bytes).unwrap();
    let streamed = read_stream(TraceStream::open(scratch).unwrap())
        .unwrap_or_else(|e| panic!("{name}: the whole read worked, the streamed one did not: {e}"));
    assert_eq!(streamed.len(), whole.len(), "{name}: segments");
    let inputs: Vec<Input<'_>> = streamed
        .iter()
        .enumerate()
        .map(|(i, (t, d))| {
            assert!(t.events.is_empty(), "{name}: the streamed read kept events");
            Input {
                digest: Some(d),
                ..Input::new(format!("{name}#{i}"), t)
            }
        })
        .collect();
    Some((a, report_json(&inputs)))
}

#[test]
fn a_streamed_report_equals_the_whole_trace_report() {
    let dir = tempfile::tempdir().unwrap();
    let scratch = dir.path().join("t.tps");
    let mut compared = 0;
    let mut by_segment = 0;
    for p in samples() {
        let bytes = std::fs::read(&p).unwrap();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let Some((whole, streamed)) = both(&name, &bytes, &scratch) else {
            // v2.0-newer-major: refused by both readers alike.
            assert!(
                TraceStream::open(&p)
                    .and_then(|s| read_stream(s).map(|_| ()))
                    .is_err(),
                "{name}: refused whole but read streamed"
            );
            continue;
        };
        assert_eq!(whole, streamed, "{name}");
        compared += 1;
        if let Some(parallel) = by_segments(&name, &p) {
            assert_eq!(whole, parallel, "{name} read by segments");
            by_segment += 1;
        }
        // A damaged byte inside a frame: not read by segments (one pass resyncs past it).
        if tpuscope_core::stream::segment_ranges(&p).unwrap().is_some() {
            let mut damaged = bytes.clone();
            let at = damaged.len() / 2;
            damaged[at] ^= 0xff;
            std::fs::write(&scratch, &damaged).unwrap();
            assert!(
                tpuscope_core::stream::segment_ranges(&scratch)
                    .unwrap()
                    .is_none(),
                "{name}: damaged, yet split"
            );
        }
        // Cut short at a few places: the truncation warning and what is left agree too.
        for frac in [3, 2] {
            let cut = &bytes[..bytes.len() * (frac - 1) / frac];
            if let Some((whole, streamed)) = both(&name, cut, &scratch) {
                assert_eq!(whole, streamed, "{name} cut to {}/{frac}", frac - 1);
                compared += 1;
            }
        }
    }
    assert!(compared >= 16, "only {compared} reports compared");
    assert!(by_segment >= 1, "no merged sample was read by segments");
}
