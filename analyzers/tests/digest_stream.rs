//! `tpuscope report` streams a trace into digests and never holds its events; a trace decoded
//! whole gives its digests from `Trace::events`. Both must give the same report, on every sample
//! trace, on a merged (many-segment) trace and on traces cut short; and a clean merged file read
//! segment by segment on several threads, its hosts analysed on several threads, gives the same
//! report again, and so does each host analysed on the thread that read it (`AnalysedRun`,
//! what `report` of a job file does). A read saved as bytes (`saved::write`, what `report` caches) and read back gives
//! the same report as the read itself; bytes it did not write read back as nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tpuscope_analyzers::column::Spill;
use tpuscope_analyzers::digest::{Digest, DigestBuilder, read_stream};
use tpuscope_analyzers::report::{AnalysedRun, Input, Options, build, build_analysed};
use tpuscope_analyzers::saved;
use tpuscope_core::{Trace, TraceStream, read_traces};

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

/// A merged file's segments read on 3 threads, each one's digest made as it streams by, then
/// `then(index, trace, digest)`; `None` when one shows damage.
fn read_segments<R: Send>(
    path: &Path,
    ranges: &[(u64, u64)],
    then: impl Fn(usize, Trace, Digest) -> R + Sync,
) -> Option<Vec<R>> {
    tpuscope_core::stream::read_segments_then(
        path,
        ranges,
        3,
        DigestBuilder::default,
        DigestBuilder::decodes,
        |b, r| b.push_skimmed(r),
        |i, t, b| {
            let (t, d) = b.finish_for(t);
            then(i, t, d)
        },
    )
    .unwrap()
}

/// The report of a merged file read segment by segment on threads, its hosts analysed on
/// threads too, when it is one (clean).
fn by_segments(name: &str, path: &Path) -> Option<serde_json::Value> {
    let ranges = tpuscope_core::stream::segment_ranges(path).unwrap()?;
    let read = read_segments(path, &ranges, |_, t, d| (t, d))?;
    let held = report_json_on(&inputs_of(name, &read), 3);
    // Each host analysed on the thread that read it, its launches dropped then: the same.
    let analysed = read_segments(path, &ranges, |i, t, d| {
        AnalysedRun::new(i, format!("{name}#{i}"), t, d)
    })
    .expect("read clean once, read clean again");
    let report = build_analysed(analysed, &Options::default()).expect("hosts in their order");
    assert_eq!(
        held,
        serde_json::to_value(report).unwrap(),
        "{name}: hosts analysed as read"
    );
    // Analysed in an order the report does not put them in (the first host given the last
    // process index): refused, not misnumbered.
    let mut out_of_order = read.clone();
    for (k, (t, _)) in out_of_order.iter_mut().enumerate() {
        if let Some(s) = t.segment.as_mut() {
            s.process_index = if k == 0 { n_u32(read.len()) } else { 0 };
        }
    }
    let runs: Vec<AnalysedRun> = out_of_order
        .iter()
        .enumerate()
        .map(|(k, (t, d))| AnalysedRun::new(k, format!("{name}#{k}"), t.clone(), d.clone()))
        .collect();
    assert!(
        build_analysed(runs, &Options::default()).is_none(),
        "{name}: hosts analysed out of order were taken"
    );
    Some(held)
}

fn n_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap()
}

/// Each read trace with its digest as a report's input, named `name#segment`.
fn inputs_of<'a>(name: &str, read: &'a [(Trace, Digest)]) -> Vec<Input<'a>> {
    read.iter()
        .enumerate()
        .map(|(i, (t, d))| Input {
            digest: Some(d),
            ..Input::new(format!("{name}#{i}"), t)
        })
        .collect()
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
                by_segments(&name, &scratch).is_none(),
                "{name}: damaged, yet read by segments"
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

/// Transfers the streamed read takes in place (plain), ones it must decode (an error, dims in
/// two fields) and one that does not decode (an api that is not UTF-8, its CRC sound): the
/// report, its count of undecodable records included, is the whole read's.
#[test]
fn transfers_read_in_place_or_not_report_as_decoded_ones() {
    use prost::Message;
    use tpuscope_core::event::{Direction, ErrorInfo, RecordKind, Transfer};
    use tpuscope_core::format::encode_frame;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/real");
    let mut bytes = std::fs::read(root.join("jax_lr.tps")).unwrap();
    let kind = RecordKind::Transfer as u16;
    let base = Transfer {
        t_ns: 1,
        direction: Direction::H2d as i32,
        api: "PJRT_Client_BufferFromHostBuffer".into(),
        dims: vec![4, 7],
        dtype: "f32".into(),
        ..Transfer::default()
    };
    let failed = Transfer {
        error: Some(ErrorInfo {
            code: 8,
            message: "out of memory".into(),
        }),
        ..base.clone()
    };
    let read = Transfer {
        direction: Direction::D2h as i32,
        sync: true,
        ..base.clone()
    };
    for t in [&base, &failed, &read] {
        encode_frame(&mut bytes, kind, 0, &t.encode_to_vec());
    }
    // Two dims fields: decoded by prost.
    let mut two = base.encode_to_vec();
    two.extend([0x38, 9]);
    encode_frame(&mut bytes, kind, 0, &two);
    // Field 5 (api) of two bytes that are not UTF-8.
    encode_frame(&mut bytes, kind, 0, &[0x2a, 2, 0xff, 0xfe]);
    let dir = tempfile::tempdir().unwrap();
    let (whole, streamed) = both("extra.tps", &bytes, &dir.path().join("t.tps")).unwrap();
    assert_eq!(whole, streamed);
    let whole_trace = &read_traces(&bytes).unwrap()[0];
    assert_eq!(whole_trace.undecodable_records, 1);
    let streamed = read_stream(TraceStream::open(&dir.path().join("t.tps")).unwrap()).unwrap();
    let (t, d) = &streamed[0];
    assert_eq!(t.undecodable_records, 1);
    assert_eq!(d.events, whole_trace.events.len());
}

/// What `saved::write` writes of reads.
fn saved_bytes(read: &[(Trace, Digest)]) -> Vec<u8> {
    let mut out = Vec::new();
    saved::write(read.iter().map(|(t, d)| (t, d)), &mut out).unwrap();
    out
}

/// The report of reads, as pretty JSON.
fn report_of_reads(name: &str, read: &[(Trace, Digest)]) -> String {
    let inputs = inputs_of(name, read);
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
        let bytes = saved_bytes(&read);
        let back =
            saved::decode(&bytes, None).unwrap_or_else(|| panic!("{name}: did not read back"));
        assert_eq!(back.len(), read.len(), "{name}");
        let (a, b) = (report_of_reads(&name, &back), report_of_reads(&name, &read));
        if let Some((x, y)) = a.lines().zip(b.lines()).find(|(x, y)| x != y) {
            panic!("{name}: read back gives {x:?} where the read gave {y:?}");
        }
        assert_eq!(a, b, "{name}");
        // The same read gives the same bytes.
        assert_eq!(saved_bytes(&back), bytes, "{name}");
        saved_some += 1;
    }
    assert!(saved_some >= 8, "{saved_some} samples read");
}

#[test]
fn bytes_it_did_not_write_read_back_as_nothing() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/real/jax_lr.tps");
    let read = read_stream(TraceStream::open(&path).unwrap()).unwrap();
    let bytes = saved_bytes(&read);
    assert!(saved::decode(&bytes, None).is_some());
    // Every cut, and a changed byte at many places: the sum or a length catches it.
    for n in (0..bytes.len()).step_by(97) {
        assert!(saved::decode(&bytes[..n], None).is_none(), "cut at {n}");
    }
    for at in (0..bytes.len()).step_by(101) {
        let mut b = bytes.clone();
        b[at] ^= 0x40;
        assert!(saved::decode(&b, None).is_none(), "byte {at} changed");
    }
    // Another version, its sum right: not read.
    let mut b = bytes[..bytes.len() - 8].to_vec();
    b[0] = 99;
    let sum = xxhash_rust::xxh3::xxh3_64(&b);
    b.extend_from_slice(&sum.to_le_bytes());
    assert!(saved::decode(&b, None).is_none());
}

/// A long file read in chunks on several threads (`read_file_stream`, as `report` reads one)
/// gives what one pass gives, digests and tables byte for byte (as the cache of reads writes
/// them): each sample's body repeated past two chunks (its executes' numbers repeat too, so
/// completions must find their launch as one pass finds it), with a damaged byte in the middle.
#[test]
fn a_long_trace_read_on_all_cores_digests_as_one_pass() {
    use tpuscope_analyzers::digest::read_file_stream;
    use tpuscope_core::chunked::CHUNK_BYTES;
    let saved = |read: &[(Trace, Digest)]| {
        let mut out = Vec::new();
        saved::write(read.iter().map(|(t, d)| (t, d)), &mut out).unwrap();
        out
    };
    let dir = tempfile::tempdir().unwrap();
    let mut compared = 0;
    for p in samples() {
        let one = std::fs::read(&p).unwrap();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let Ok(header) = tpuscope_core::reader::parse_header(&one) else {
            continue;
        };
        let body = &one[header.len..];
        if body.is_empty() {
            continue;
        }
        let mut bytes = one.clone();
        while (bytes.len() as u64) < 2 * CHUNK_BYTES + 77_777 {
            bytes.extend_from_slice(body);
        }
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x5a;
        let path = dir.path().join(&name);
        std::fs::write(&path, &bytes).unwrap();
        let Ok(one_pass) = read_stream(TraceStream::open(&path).unwrap()) else {
            continue;
        };
        let chunked = read_file_stream(TraceStream::open(&path).unwrap(), 3, None)
            .unwrap_or_else(|e| panic!("{name}: one pass read it, chunks did not: {e}"));
        assert!(saved(&one_pass) == saved(&chunked), "{name}");
        compared += 1;
    }
    assert!(compared >= 8, "{compared} samples compared");
}

/// A long trace read with its old launches and batches out of memory, as `report` reads one,
/// digests as one read in memory, byte for byte as the cache of reads writes them: 300 000
/// launches on two threads whose completions come late, some much later (from spilled chunks),
/// with a batch each.
#[test]
fn a_long_trace_read_spilling_digests_as_one_held_in_memory() {
    use tpuscope_analyzers::digest::read_file_stream;
    use tpuscope_core::Record;
    use tpuscope_core::TraceWriter;
    use tpuscope_core::event::{Direction, Execute, ExecuteComplete, Manifest, Transfer};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.tps");
    let file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut w = TraceWriter::new(file, &Manifest::default()).unwrap();
    let n = 300_000u64;
    let done = |seq: u64, t: u64| {
        Record::ExecuteComplete(ExecuteComplete {
            t_ns: t,
            seq,
            device_index: (seq % 2) as u32,
            ..Default::default()
        })
    };
    for i in 0..n {
        let t = 1_000_000 + i * 5_000;
        w.write(&Record::Execute(Execute {
            t_ns: t,
            dur_ns: 1_000 + i % 700,
            executable_id: 0x1000 + i % 7,
            num_devices: 1,
            seq: i,
            thread: 1 + (i % 2) as u32,
            completion_tracked: true,
            ..Default::default()
        }))
        .unwrap();
        w.write(&Record::Transfer(Box::new(Transfer {
            t_ns: t + 100,
            direction: Direction::H2d as i32,
            api: "PJRT_Client_BufferFromHostBuffer".into(),
            bytes: 4096,
            dtype: "f32".into(),
            dims: vec![32, (i % 3) as i64 + 1],
            ..Default::default()
        })))
        .unwrap();
        if i >= 3 {
            w.write(&done(i - 3, t + 1_200)).unwrap();
        }
        if i % 50_000 == 49_999 {
            w.write(&done(i - 140_000.min(i), t + 1_500)).unwrap();
        }
    }
    w.flush().unwrap();
    drop(w);
    let saved = |read: &[(Trace, Digest)]| {
        let mut out = Vec::new();
        saved::write(read.iter().map(|(t, d)| (t, d)), &mut out).unwrap();
        out
    };
    let held = read_file_stream(TraceStream::open(&path).unwrap(), 2, None).unwrap();
    let spill = Arc::new(BytesSpill::default());
    let store: Arc<dyn Spill> = spill.clone();
    let spilled = read_file_stream(TraceStream::open(&path).unwrap(), 2, Some(store)).unwrap();
    let launches: usize = held.iter().map(|(_, d)| d.launches.len()).sum();
    assert_eq!(launches, n as usize);
    assert!(saved(&held) == saved(&spilled));
    let out = spill.0.lock().unwrap().len();
    assert!(
        out > launches * 20,
        "{out} bytes spilled of {launches} launches"
    );
}

/// A spill in memory (`report`'s is a temporary file: cli/src/spill.rs).
#[derive(Debug, Default)]
struct BytesSpill(std::sync::Mutex<Vec<u8>>);

impl Spill for BytesSpill {
    fn put(&self, bytes: &[u8]) -> Option<u64> {
        let mut all = self.0.lock().ok()?;
        all.extend_from_slice(bytes);
        Some((all.len() - bytes.len()) as u64)
    }

    fn get(&self, at: u64, buf: &mut [u8]) {
        let all = self.0.lock().unwrap();
        buf.copy_from_slice(&all[at as usize..at as usize + buf.len()]);
    }
}
