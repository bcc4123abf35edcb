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

/// The segment of `bytes` (a whole plain trace), as `tpuscope merge` wrote it before markers
/// said their segment's length (the golden file's layout).
fn segment(index: u32, name: &str, bytes: &[u8]) -> Vec<u8> {
    segment_of(index, name, bytes, false)
}

/// The segment of `bytes`; its marker says the segment's length when `with_len`, as `tpuscope
/// merge` writes it now.
fn segment_of(index: u32, name: &str, bytes: &[u8], with_len: bool) -> Vec<u8> {
    let t = read_trace(bytes).unwrap();
    let m = t.manifest.clone().unwrap();
    let a = align::alignment(&t);
    let mut seg = Segment {
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
        len: 0,
    };
    let body = (bytes.len() - HEADER_LEN) as u64;
    let payload = if with_len {
        seg.payload_with_len(body)
    } else {
        seg.payload()
    };
    let mut out = Vec::new();
    encode_frame(&mut out, SEGMENT_KIND, 0, &payload);
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

/// Markers that say their segment's length are hopped: the segments are found without reading
/// the frames between, and read apart give what one pass gives. Damage inside a segment shows
/// when it is read (then one pass reads the file); lengths that do not add up, a cut, or
/// markers without a length are found by the pass over the frames, as before.
#[test]
fn markers_with_lengths_are_hopped_and_segments_read_as_one_pass_reads_them() {
    use tpuscope_core::stream::{Skimmed, read_segments_then, segment_ranges};
    let hosts = [
        host("a", 0, "alpha", 5_000),
        host("b", 1, "beta", 9_000_000_000),
        host("c", 2, "gamma", 77),
    ];
    let build = |with_len: bool| {
        let mut out = encode_header(FORMAT_MAJOR, SEGMENT_MINOR).to_vec();
        let mut starts = Vec::new();
        for (i, h) in hosts.iter().enumerate() {
            starts.push(out.len() as u64);
            out.extend(segment_of(i as u32, &format!("{i}.tps"), h, with_len));
        }
        let ends: Vec<u64> = starts
            .iter()
            .skip(1)
            .copied()
            .chain([out.len() as u64])
            .collect();
        (out, starts.into_iter().zip(ends).collect::<Vec<_>>())
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("job.tps");
    let (bytes, want) = build(true);
    let whole = read_traces(&bytes).unwrap();
    let lens: Vec<u64> = whole
        .iter()
        .map(|t| t.segment.as_ref().unwrap().len)
        .collect();
    let spans: Vec<u64> = want.iter().map(|(a, b)| b - a).collect();
    assert_eq!(lens, spans, "each marker says its segment's length");
    let read = |p: &std::path::Path, ranges: &[(u64, u64)]| {
        read_segments_then(
            p,
            ranges,
            2,
            Vec::new,
            |_| true,
            |v: &mut Vec<Record>, r| {
                if let Skimmed::Decoded(r) = r {
                    v.push(r);
                }
            },
            |_, t, v| (t, v),
        )
        .unwrap()
    };
    std::fs::write(&path, &bytes).unwrap();
    assert_eq!(segment_ranges(&path).unwrap(), Some(want.clone()));
    let apart = read(&path, &want).expect("a clean file is read apart");
    assert_eq!(apart.len(), whole.len());
    for ((t, events), w) in apart.iter().zip(&whole) {
        assert_eq!(events, &w.events);
        assert_eq!(
            (&t.manifest, &t.segment, &t.strings),
            (&w.manifest, &w.segment, &w.strings)
        );
        assert_eq!(t.completeness, w.completeness);
    }

    // A flipped byte inside host b's frames: the markers still hop, the segment read says so.
    let mut damaged = bytes.clone();
    let inside = (want[1].1 - 20) as usize;
    damaged[inside] ^= 0xff;
    std::fs::write(&path, &damaged).unwrap();
    let ranges = segment_ranges(&path).unwrap().expect("markers intact");
    assert!(read(&path, &ranges).is_none(), "damage read apart");

    // A length one byte off: the pass over the frames finds the segments instead.
    let mut lying = bytes.clone();
    let mut first = whole[0].segment.clone().unwrap();
    first.len += 1;
    let payload = first.payload();
    let mut marker = Vec::new();
    encode_frame(&mut marker, SEGMENT_KIND, 0, &payload);
    let old_marker = (want[1].0 - want[0].0) as usize - (hosts[0].len() - HEADER_LEN);
    assert_eq!(marker.len(), old_marker, "same size, a different length");
    lying[HEADER_LEN..HEADER_LEN + marker.len()].copy_from_slice(&marker);
    std::fs::write(&path, &lying).unwrap();
    assert_eq!(segment_ranges(&path).unwrap(), Some(want.clone()));

    // Cut inside the last segment: its length runs past the end; one pass reads a cut file.
    std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
    assert_eq!(segment_ranges(&path).unwrap(), None);

    // Markers without lengths (merges before them): found by the pass, read the same.
    let (old, old_want) = build(false);
    std::fs::write(&path, &old).unwrap();
    assert_eq!(segment_ranges(&path).unwrap(), Some(old_want.clone()));
    assert!(read(&path, &old_want).is_some());
}
