#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A finished trace file is read as it streams by: its records are never held, yet the window
//! draws and describes it exactly as it does the same trace decoded whole.

use std::path::{Path, PathBuf};

use tpuscope_analyzers::digest::Digest;
use tpuscope_core::read_traces_file;
use tpuscope_gui::data::{self, Held};
use tpuscope_gui::lanes::LaneBuilder;

fn samples() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for dir in [
        "sample_traces/real",
        "sample_traces/golden",
        "sample_traces/torch_trace",
    ] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "tps") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_file_read_folded_draws_and_describes_every_record_as_the_trace_held_whole() {
    let mut folded = 0;
    for path in samples() {
        let Ok(whole) = read_traces_file(&path) else {
            // A newer format: refused either way.
            let s = data::open_all(std::slice::from_ref(&path), false);
            assert!(s.iter().all(|s| s.error.is_some()), "{}", path.display());
            continue;
        };
        let sources = data::open_all(std::slice::from_ref(&path), false);
        assert_eq!(sources.len(), whole.len(), "{}", path.display());
        for (s, t) in sources.iter().zip(&whole) {
            let run = s.run().expect("a run");
            let what = format!("{} ({})", path.display(), s.label);
            if matches!(s.held, Some(Held::Static(_))) && run.trace.events.is_empty() {
                folded += 1;
            }
            assert_eq!(run.digest.events, t.events.len(), "{what}");
            let (d, lanes) = LaneBuilder::of(t);
            assert_eq!(*run.lanes, lanes, "{what}: lanes");
            let d2 = Digest::of(t);
            assert_eq!(d.others, d2.others, "{what}");
            assert_eq!(run.digest.others, d.others, "{what}: kept records");
            assert_eq!(
                run.digest.launches().collect::<Vec<_>>(),
                d.launches().collect::<Vec<_>>(),
                "{what}: launches"
            );
            for (e, r) in t.events.iter().enumerate() {
                let back = run.record(e).expect("read back");
                assert!(*back == *r, "{what}: record {e} read back differs");
            }
            assert!(run.record(t.events.len()).is_err(), "{what}");
        }
    }
    // Most samples are finished files: read folded, not held.
    assert!(folded >= 8, "only {folded} runs were read folded");
}

/// A record is read back only from the file that was read: once it is replaced (a new run
/// written to the same path), the window says so instead of describing another run's record.
#[test]
fn a_record_is_not_read_back_from_a_file_replaced_since() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.tps");
    std::fs::copy(root.join("sample_traces/real/jax_lr.tps"), &path).unwrap();
    let sources = data::open_all(std::slice::from_ref(&path), false);
    let run = sources[0].run().unwrap();
    // Executes: not kept in the digest, so read back from the file.
    let launches: Vec<usize> = run.digest.launches().map(|l| l.event as usize).collect();
    let (e, later) = (launches[0], launches[launches.len() / 2]);
    assert!(run.digest.other(e).is_none() && run.digest.other(later).is_none());
    assert!(run.record(e).is_ok());
    std::fs::remove_file(&path).unwrap();
    std::fs::copy(root.join("sample_traces/real/jax_shapes.tps"), &path).unwrap();
    let other = run.record(later).unwrap_err();
    assert!(other.contains("changed since it was opened"), "{other}");
}

/// A trace followed as it grows folds its events as they come: the window draws and describes
/// each record (read back from the file) as it would the trace held whole, before and after
/// it grows, and once its end record makes it finished.
#[test]
fn a_followed_trace_is_folded_as_it_grows_and_reads_its_records_back() {
    use tpuscope_core::TraceWriter;
    use tpuscope_core::event::{End, Execute, ExecuteComplete, Manifest, Record};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.tps");
    // Packed as the collector writes it (format 1.2): records read back count from their
    // pack's first.
    let mut w = TraceWriter::new(std::fs::File::create(&path).unwrap(), &Manifest::default())
        .unwrap()
        .packed();
    let mut seq = 0;
    let mut write_steps = |w: &mut TraceWriter<std::fs::File>, n: u64| {
        for _ in 0..n {
            seq += 1;
            let t = 1_000_000 + seq * 100_000;
            w.write(&Record::Execute(Execute {
                t_ns: t,
                thread: 1,
                dur_ns: 10_000,
                executable_id: 7,
                num_devices: 1,
                seq,
                completion_tracked: true,
                ..Execute::default()
            }))
            .unwrap();
            w.write(&Record::ExecuteComplete(ExecuteComplete {
                t_ns: t + 50_000,
                seq,
                device_index: 0,
                error: None,
            }))
            .unwrap();
        }
        w.flush().unwrap();
    };
    let check = |s: &data::Source, events: usize| {
        let run = s.run().unwrap();
        let whole = read_traces_file(&path).unwrap().remove(0);
        assert_eq!(whole.events.len(), events);
        assert_eq!(run.digest.events, events);
        let (_, lanes) = LaneBuilder::of(&whole);
        assert_eq!(*run.lanes, lanes);
        assert!(run.trace.events.is_empty(), "events are folded, not held");
        for (e, r) in whole.events.iter().enumerate() {
            assert!(*run.record(e).unwrap() == *r, "record {e}");
        }
    };
    write_steps(&mut w, 700);
    let mut s = data::Source::open(&path, true);
    assert!(s.is_live(), "{:?}", s.error);
    check(&s, 1400);
    write_steps(&mut w, 300);
    assert!(s.poll() > 0);
    check(&s, 2000);
    w.write(&Record::End(End::default())).unwrap();
    w.flush().unwrap();
    drop(w);
    s.poll();
    assert!(!s.is_live(), "the end record ends following");
    check(&s, 2000);
    // Finished: read folded as it streams by, on all cores, and read back the same.
    let s = data::Source::open(&path, false);
    assert!(!s.is_live());
    check(&s, 2000);
}

/// Every record drawn on the timeline is found there from its index (what a click on a sync
/// line or a record in a list shows), on a host lane when it is drawn on one.
#[test]
fn every_drawn_record_is_located_on_its_lane() {
    use std::collections::HashMap;
    use tpuscope_gui::lanes::Timeline;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for name in [
        "jax_lr.tps",
        "torch_xla_item.tps",
        "jax_attach.tps",
        "torch_tpu_cache.tps",
    ] {
        let path = root.join("sample_traces/real").join(name);
        let sources = data::open_all(std::slice::from_ref(&path), false);
        let runs: Vec<(usize, std::sync::Arc<data::Run>)> = sources
            .iter()
            .enumerate()
            .map(|(i, s)| (i, s.run().unwrap()))
            .collect();
        let tl = Timeline::build(&runs);
        // Each drawn record: whether one of its spans is on a host lane.
        let mut drawn: HashMap<(usize, usize), bool> = HashMap::new();
        for l in &tl.lanes {
            for i in 0..l.len() {
                let host = drawn.entry((l.source, l.event(i).unwrap())).or_default();
                *host |= !l.device;
            }
        }
        assert!(drawn.len() > 20, "{name}");
        for (&(source, e), &host) in &drawn {
            let (l, s) = tl
                .locate(source, e)
                .unwrap_or_else(|| panic!("{name}: {e}"));
            assert_eq!(tl.lanes[l].event(s), Some(e), "{name}: {e}");
            assert_eq!(!tl.lanes[l].device, host, "{name}: {e}");
        }
    }
}

/// `--follow` of a file that is not a trace, or is empty, is refused with the reason, as a
/// plain open is: not waited on.
#[test]
fn following_what_is_not_a_trace_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        ("empty.tps", &b""[..]),
        ("notes.txt", &b"not a trace at all"[..]),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        for follow in [true, false] {
            let s = data::Source::open(&path, follow);
            let e = s
                .error
                .as_deref()
                .unwrap_or_else(|| panic!("{name} {follow}"));
            assert!(e.contains("not a tpuscope trace"), "{name} {follow}: {e}");
            assert!(!s.has_trace());
        }
    }
}

/// A cache of reads held in memory: one slot, whatever the path (the cli's is keyed by file).
#[derive(Debug, Default)]
struct MemCache {
    bytes: std::sync::Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    stores: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

struct MemSlot {
    bytes: std::sync::Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    stores: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl tpuscope_gui::kept::ReadCache for MemCache {
    fn slot(&self, _path: &Path) -> Option<Box<dyn tpuscope_gui::kept::CacheSlot>> {
        Some(Box::new(MemSlot {
            bytes: self.bytes.clone(),
            stores: self.stores.clone(),
        }))
    }
}

impl tpuscope_gui::kept::CacheSlot for MemSlot {
    fn open(&self) -> Option<(Box<dyn tpuscope_gui::kept::ReadSeek>, std::ops::Range<u64>)> {
        let bytes = self.bytes.lock().unwrap().clone()?;
        let len = bytes.len() as u64;
        Some((Box::new(std::io::Cursor::new(bytes)), 0..len))
    }

    fn store(
        &self,
        _path: &Path,
        _ended: bool,
        write: &mut dyn FnMut(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) {
        let mut out = Vec::new();
        write(&mut out).unwrap();
        *self.bytes.lock().unwrap() = Some(out);
        self.stores
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The report the window shows of `sources`, as JSON.
fn report_json(sources: &[data::Source]) -> String {
    let labels: Vec<String> = sources.iter().map(|s| s.label.clone()).collect();
    let runs: Vec<_> = sources.iter().map(data::Source::run).collect();
    let a = tpuscope_gui::analysis::Analysis::compute(&labels, &runs, &[]);
    serde_json::to_string_pretty(&a.report).unwrap()
}

/// A finished file opened again from the cache of reads is the run read the first time: the
/// same lanes, digest, records read back and report; bytes that are not what was kept (cut or
/// changed) are not believed: the file is read again.
#[test]
fn a_run_kept_in_the_cache_opens_as_the_run_read() {
    let (mut kept_runs, mut followed) = (0, 0);
    for path in samples() {
        if read_traces_file(&path).is_err() {
            continue;
        }
        let cache = MemCache::default();
        let paths = std::slice::from_ref(&path);
        let read = data::open_all_with(paths, false, Some(&cache));
        let Some(bytes) = cache.bytes.lock().unwrap().clone() else {
            // Not kept: one still written to (no end record) is followed, read again as it grows.
            assert!(read.iter().all(data::Source::is_live), "{}", path.display());
            followed += 1;
            continue;
        };
        let again = data::open_all_with(paths, false, Some(&cache));
        assert_eq!(
            cache.stores.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "{}: read from the cache, not kept again",
            path.display()
        );
        assert_eq!(read.len(), again.len());
        for (a, b) in read.iter().zip(&again) {
            let what = format!("{} ({})", path.display(), a.label);
            assert_eq!(a.label, b.label);
            let (ra, rb) = (a.run().unwrap(), b.run().unwrap());
            assert_eq!(*ra.lanes, *rb.lanes, "{what}: lanes");
            assert_eq!(ra.digest.events, rb.digest.events, "{what}");
            assert_eq!(ra.digest.others, rb.digest.others, "{what}: kept records");
            assert!(
                ra.digest.launches().eq(rb.digest.launches()),
                "{what}: launches"
            );
            assert_eq!(ra.trace.strings, rb.trace.strings, "{what}: strings");
            for e in 0..ra.digest.events {
                let (x, y) = (ra.record(e).unwrap(), rb.record(e).unwrap());
                assert!(*x == *y, "{what}: record {e}");
            }
            kept_runs += 1;
        }
        assert_eq!(
            report_json(&read),
            report_json(&again),
            "{}",
            path.display()
        );
        // A cut or changed cache is read as no cache: the file is read, and kept again.
        for bad in [bytes[..bytes.len() - 1].to_vec(), {
            let mut b = bytes.clone();
            let at = b.len() - 20;
            b[at] ^= 1;
            b
        }] {
            *cache.bytes.lock().unwrap() = Some(bad);
            let reread = data::open_all_with(paths, false, Some(&cache));
            assert_eq!(
                report_json(&read),
                report_json(&reread),
                "{}",
                path.display()
            );
        }
        assert_eq!(cache.stores.load(std::sync::atomic::Ordering::Relaxed), 3);
    }
    assert!(kept_runs >= 8, "only {kept_runs} runs were kept");
    assert!(
        followed >= 1,
        "the killed run's trace is followed, not kept"
    );
}

/// The plugin reused a destroyed executable's address for the next compile: a launch of the
/// new executable, read back from the file, is described as the new one's (as the report
/// counts it), whether the file was read or its read taken from the cache of reads.
#[test]
fn a_launch_at_a_reused_address_is_read_back_as_its_own_executable() {
    use tpuscope_core::TraceWriter;
    use tpuscope_core::event::{Compile, End, Execute, Manifest, Record};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reuse.tps");
    let mut w = TraceWriter::new(std::fs::File::create(&path).unwrap(), &Manifest::default())
        .unwrap()
        .packed();
    let compile = |t_ns, name: &str| {
        Record::Compile(Box::new(Compile {
            t_ns,
            dur_ns: 1_000,
            executable_name: name.into(),
            executable_id: 0x7f00,
            ..Compile::default()
        }))
    };
    let execute = |t_ns| {
        Record::Execute(Execute {
            t_ns,
            executable_id: 0x7f00,
            ..Execute::default()
        })
    };
    for r in [
        compile(1_000, "jit_warm_up"),
        execute(5_000),
        compile(10_000, "jit_train_step"),
        execute(20_000),
        Record::End(End {
            t_ns: 30_000,
            ..End::default()
        }),
    ] {
        w.write(&r).unwrap();
    }
    w.flush().unwrap();
    drop(w);
    let name_of = |run: &data::Run, event: usize| {
        let names = tpuscope_analyzers::steps::executable_names_of(&run.digest);
        match &*run.record(event).unwrap() {
            Record::Execute(e) => names.get(&e.executable_id).cloned(),
            _ => None,
        }
    };
    let cache = MemCache::default();
    let paths = std::slice::from_ref(&path);
    for round in ["read", "kept"] {
        let sources = data::open_all_with(paths, false, Some(&cache));
        let run = sources[0].run().unwrap();
        assert_eq!(name_of(&run, 1).as_deref(), Some("jit_warm_up"), "{round}");
        assert_eq!(
            name_of(&run, 3).as_deref(),
            Some("jit_train_step"),
            "{round}"
        );
    }
    assert_eq!(cache.stores.load(std::sync::atomic::Ordering::Relaxed), 1);
}
