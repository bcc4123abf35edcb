//! The writer thread: drains the recorder's queue into the trace file, interning stacks and
//! signatures, storing blobs once, anchoring clocks, counting drops, and aggregating executes
//! once the trace passes its size cap. Any I/O error is reported once on stderr; the workload goes
//! on without a trace.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tpuscope_core::TraceWriter;
use tpuscope_core::event::{Clock, Dropped, End, ExecuteSummary, Manifest, Record};

use crate::live::{self, Hub, Tee};
use crate::recorder::{Event, Recorder};

/// The trace file, teed to live viewers (`live`).
type Out = Tee<BufWriter<File>>;

const CLOCK_INTERVAL: Duration = Duration::from_secs(1);
const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
const IDLE_WAIT: Duration = Duration::from_millis(5);
const SUMMARY_INTERVAL: Duration = Duration::from_secs(1);

/// Chooses a trace path that does not exist yet. `out` may be a directory, a file, or absent.
/// Names carry the host and the process index, so the traces of a job's hosts collected into one
/// directory sort by host and stay apart.
pub fn choose_trace_path(
    out: Option<&Path>,
    host: &str,
    process_index: u32,
    pid: u32,
    wall_secs: u64,
) -> PathBuf {
    let stamp = wall_secs;
    let name = format!("tpuscope-{host}-p{process_index}-{pid}-{stamp}.tps");
    match out {
        Some(p) if p.is_dir() => p.join(name),
        Some(p) if !p.exists() => p.to_path_buf(),
        // The file exists (another process of the same run took it): a sibling named for this process.
        Some(p) => {
            let stem = p.file_stem().and_then(|s| s.to_str()).unwrap_or("trace");
            let dir = p.parent().unwrap_or(Path::new("."));
            dir.join(format!("{stem}.{host}-p{process_index}-{pid}.tps"))
        }
        None => PathBuf::from(name),
    }
}

/// Opens `path` without ever truncating an existing file: if it exists, `.1`, `.2`, … are tried.
fn create_new(path: &Path) -> io::Result<(File, PathBuf)> {
    let mut candidate = path.to_path_buf();
    for n in 1..1000 {
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&candidate)
        {
            Ok(f) => return Ok((f, candidate)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let mut s = path.as_os_str().to_owned();
                s.push(format!(".{n}"));
                candidate = PathBuf::from(s);
            }
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "no free trace file name",
    ))
}

/// Handle to stop the writer and wait for it to finish the file.
pub struct WriterHandle {
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
    pub path: PathBuf,
}

impl WriterHandle {
    /// Asks the writer to drain, write the end record and close; waits at most `timeout`.
    pub fn shutdown(&self, timeout: Duration) {
        self.stop.store(true, Ordering::SeqCst);
        let Ok(mut guard) = self.thread.lock() else {
            return;
        };
        let Some(handle) = guard.take() else { return };
        let deadline = Instant::now() + timeout;
        while !handle.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        if handle.is_finished() {
            let _ = handle.join();
        }
    }
}

/// Says a write failure once on stderr and stops recording; the workload keeps running.
fn give_up(recorder: &Recorder, path: &Path, what: &str, err: &io::Error) {
    eprintln!(
        "tpuscope: cannot {what} trace {}: {err}; recording stops, the workload continues untraced",
        path.display()
    );
    recorder.set_enabled(false);
    while recorder.pop().is_some() {}
}

/// Opens the trace and starts the writer thread. On failure, says so once and disables recording.
pub fn start(
    recorder: &'static Recorder,
    manifest: Manifest,
    path: PathBuf,
    size_cap_bytes: u64,
) -> Option<WriterHandle> {
    start_with_live(recorder, manifest, path, size_cap_bytes, None)
}

/// [`start`], serving the frames it writes to the live viewers `hub` admits.
pub fn start_with_live(
    recorder: &'static Recorder,
    manifest: Manifest,
    path: PathBuf,
    size_cap_bytes: u64,
    hub: Option<Arc<Hub>>,
) -> Option<WriterHandle> {
    let (file, path) = match create_new(&path) {
        Ok(v) => v,
        Err(e) => {
            give_up(recorder, &path, "create", &e);
            return None;
        }
    };
    let history = live::History {
        fd_path: PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())),
        path: path.clone(),
    };
    let out = Tee::new(BufWriter::with_capacity(1 << 16, file), hub, Some(history));
    let trace = match TraceWriter::new(out, &manifest) {
        Ok(t) => t,
        Err(e) => {
            give_up(recorder, &path, "write", &e);
            return None;
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let thread_path = path.clone();
    let spawned = std::thread::Builder::new()
        .name("tpuscope-writer".into())
        .spawn(move || {
            let mut w = Writer::new(trace, size_cap_bytes);
            if let Err(e) = w.run(recorder, &stop2) {
                give_up(recorder, &thread_path, "write", &e);
            }
        });
    match spawned {
        Ok(h) => Some(WriterHandle {
            stop,
            thread: Mutex::new(Some(h)),
            path,
        }),
        Err(e) => {
            give_up(recorder, &path, "start the writer for", &e);
            None
        }
    }
}

struct Writer {
    trace: TraceWriter<Out>,
    size_cap_bytes: u64,
    /// Past the size cap: per-executable execute aggregates, flushed every `SUMMARY_INTERVAL`.
    summaries: HashMap<u64, ExecuteSummary>,
    last_dropped: u64,
    events_written: u64,
}

impl Writer {
    fn new(trace: TraceWriter<Out>, size_cap_bytes: u64) -> Self {
        Writer {
            trace,
            size_cap_bytes,
            summaries: HashMap::new(),
            last_dropped: 0,
            events_written: 0,
        }
    }

    fn run(&mut self, recorder: &Recorder, stop: &AtomicBool) -> io::Result<()> {
        let mut last_clock = Instant::now() - CLOCK_INTERVAL;
        let mut last_flush = Instant::now();
        let mut last_summary = Instant::now();
        let mut dirty = false;
        loop {
            let stopping = stop.load(Ordering::SeqCst);
            let mut drained = 0usize;
            while let Some(ev) = recorder.pop() {
                self.write_event(ev)?;
                drained += 1;
                dirty = true;
                if drained.is_multiple_of(4096) && last_flush.elapsed() >= FLUSH_INTERVAL {
                    break;
                }
            }
            crate::ffi::os::refine_clock();
            let dropped = recorder.dropped();
            if dropped != self.last_dropped {
                let t_ns = crate::recorder::now_ns();
                self.trace.write(&Record::Dropped(Dropped {
                    t_ns,
                    count: dropped - self.last_dropped,
                    total: dropped,
                }))?;
                self.last_dropped = dropped;
                dirty = true;
            }
            if last_clock.elapsed() >= CLOCK_INTERVAL {
                self.trace.write(&Record::Clock(Clock {
                    mono_ns: crate::ffi::os::clock_monotonic_ns(),
                    wall_ns: crate::ffi::os::wall_ns(),
                }))?;
                last_clock = Instant::now();
                dirty = true;
            }
            if last_summary.elapsed() >= SUMMARY_INTERVAL || stopping {
                self.flush_summaries()?;
                last_summary = Instant::now();
            }
            if dirty && (last_flush.elapsed() >= FLUSH_INTERVAL || stopping) {
                self.trace.flush()?;
                last_flush = Instant::now();
                dirty = false;
            }
            self.serve_viewers()?;
            if stopping && recorder.is_empty() {
                break;
            }
            if drained == 0 {
                // Hooks never wake the writer (that would cost them a syscall): poll.
                if let Ok(guard) = recorder.writer_lock.lock() {
                    let _ = recorder.writer_wakeup.wait_timeout(guard, IDLE_WAIT);
                }
            }
        }
        self.flush_summaries()?;
        self.trace.write(&Record::End(End {
            t_ns: crate::recorder::now_ns(),
            events_written: self.events_written,
            dropped_total: recorder.dropped(),
        }))?;
        self.trace.flush()?;
        // Dropping the writer then closes the viewers' streams, after the end record.
        self.trace.get_ref().inner().get_ref().sync_data()
    }

    /// Registers new live viewers between two frames (their history is the file up to here,
    /// flushed) and wakes the senders of the frames written since the last loop.
    fn serve_viewers(&mut self) -> io::Result<()> {
        if self.trace.get_ref().wants_registration() {
            self.trace.flush()?;
            self.trace
                .get_ref()
                .register_pending(self.trace.bytes_written());
        }
        self.trace.get_ref().wake_viewers();
        Ok(())
    }

    fn write_event(&mut self, ev: Event) -> io::Result<()> {
        let Event {
            mut record,
            name,
            dtype,
            stack,
            signature,
            blobs,
        } = ev;
        fill_names(&mut record, name, dtype);
        for b in blobs.into_iter().flat_map(|b| *b) {
            self.trace
                .put_blob_hashed(b.hash, b.role, &b.format, &b.data)?;
        }
        if let Some(frames) = stack {
            let id = self.trace.intern_stack(&frames)?;
            match &mut record {
                Record::Compile(r) => r.stack = id,
                Record::Load(r) => r.stack = id,
                Record::Transfer(r) => r.stack = id,
                Record::Sync(r) => r.stack = id,
                Record::CacheLoad(r) => r.stack = id,
                Record::Error(r) => r.stack = id,
                _ => {}
            }
        }
        if let (Some(sig), Record::Execute(r)) = (signature, &mut record) {
            r.arg_signature = self.trace.intern_string(&sig)?;
        }
        if self.trace.bytes_written() > self.size_cap_bytes {
            match &record {
                Record::Execute(e) => {
                    let s =
                        self.summaries
                            .entry(e.executable_id)
                            .or_insert_with(|| ExecuteSummary {
                                t_start_ns: e.t_ns,
                                executable_id: e.executable_id,
                                ..Default::default()
                            });
                    s.t_end_ns = e.t_ns + e.dur_ns;
                    s.count += 1;
                    s.total_dur_ns += e.dur_ns;
                    s.errors += u64::from(e.error.is_some());
                    return Ok(());
                }
                Record::ExecuteComplete(c) if c.error.is_none() => return Ok(()),
                _ => {}
            }
        }
        self.trace.write(&record)?;
        self.events_written += 1;
        Ok(())
    }

    fn flush_summaries(&mut self) -> io::Result<()> {
        let mut ids: Vec<u64> = self.summaries.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            if let Some(s) = self.summaries.remove(&id) {
                self.trace.write(&Record::ExecuteSummary(s))?;
                self.events_written += 1;
            }
        }
        Ok(())
    }
}

/// Copies the static names a hook passed beside its record into the record's `String` fields
/// (the hook thread allocates none for them).
fn fill_names(record: &mut Record, name: &'static str, dtype: &'static str) {
    if !name.is_empty() {
        let field = match record {
            Record::Sync(r) => &mut r.reason,
            Record::Transfer(r) => &mut r.api,
            Record::Error(r) => &mut r.api,
            Record::Compile(r) => &mut r.api,
            _ => return,
        };
        name.clone_into(field);
    }
    if !dtype.is_empty()
        && let Record::Transfer(r) = record
    {
        dtype.clone_into(&mut r.dtype);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuscope_core::event::{Compile, Execute};

    #[test]
    fn trace_names_carry_host_and_process_index() {
        let dir = tempfile::tempdir().unwrap();
        let p = choose_trace_path(Some(dir.path()), "h1", 3, 42, 1700);
        assert_eq!(p, dir.path().join("tpuscope-h1-p3-42-1700.tps"));
        let taken = dir.path().join("job.tps");
        std::fs::write(&taken, b"").unwrap();
        let p = choose_trace_path(Some(&taken), "h2", 1, 7, 1700);
        assert_eq!(p, dir.path().join("job.h2-p1-7.tps"));
    }

    #[test]
    fn past_the_size_cap_executes_are_aggregated_and_compiles_stay_exact() {
        let dir = tempfile::tempdir().unwrap();
        let rec: &'static Recorder = Box::leak(Box::new(Recorder::new(1 << 16)));
        // A cap below the header + manifest: aggregation from the first event on.
        let h = start(rec, Manifest::default(), dir.path().join("t.tps"), 1).unwrap();
        for i in 0..1000u64 {
            rec.push(Event::new(Record::Execute(Execute {
                t_ns: i,
                dur_ns: 10,
                executable_id: 1 + i % 2,
                ..Default::default()
            })));
        }
        for i in 0..5u64 {
            rec.push(Event::new(Record::Compile(Box::new(Compile {
                t_ns: i,
                ..Default::default()
            }))));
        }
        h.shutdown(Duration::from_secs(10));
        let trace = tpuscope_core::read_trace_file(&h.path).unwrap();
        assert_eq!(trace.completeness, tpuscope_core::Completeness::Complete);
        let mut per_exe = HashMap::new();
        let mut compiles = 0;
        for r in &trace.events {
            match r {
                Record::Execute(_) => panic!("executes past the cap must be aggregated"),
                Record::ExecuteSummary(s) => {
                    *per_exe.entry(s.executable_id).or_insert(0) += s.count;
                    assert_eq!(s.total_dur_ns, s.count * 10);
                }
                Record::Compile(_) => compiles += 1,
                _ => {}
            }
        }
        assert_eq!(per_exe.get(&1), Some(&500));
        assert_eq!(per_exe.get(&2), Some(&500));
        assert_eq!(compiles, 5);
    }

    #[test]
    fn static_names_are_filled_in_by_the_writer() {
        use tpuscope_core::event::{ErrorEvent, Sync};
        let dir = tempfile::tempdir().unwrap();
        let rec: &'static Recorder = Box::leak(Box::new(Recorder::new(64)));
        rec.push(Event::named(
            Record::Sync(Sync::default()),
            "PJRT_Event_Await",
        ));
        let mut t = Event::named(Record::Transfer(Box::default()), "PJRT_Buffer_ToHostBuffer");
        t.dtype = "bf16";
        rec.push(t);
        rec.push(Event::named(
            Record::Error(ErrorEvent::default()),
            "PJRT_Client_Compile",
        ));
        // A record that names itself keeps its own text.
        rec.push(Event::new(Record::Sync(Sync {
            reason: "block_until_ready".into(),
            ..Default::default()
        })));
        let h = start(rec, Manifest::default(), dir.path().join("t.tps"), u64::MAX).unwrap();
        h.shutdown(Duration::from_secs(10));
        let trace = tpuscope_core::read_trace_file(&h.path).unwrap();
        let names: Vec<String> = trace
            .events
            .iter()
            .filter_map(|r| match r {
                Record::Sync(s) => Some(s.reason.clone()),
                Record::Transfer(t) => Some(format!("{} {}", t.api, t.dtype)),
                Record::Error(e) => Some(e.api.clone()),
                _ => None,
            })
            .collect();
        assert_eq!(
            names,
            [
                "PJRT_Event_Await",
                "PJRT_Buffer_ToHostBuffer bf16",
                "PJRT_Client_Compile",
                "block_until_ready"
            ]
        );
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_the_trace_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let rec: &'static Recorder = Box::leak(Box::new(Recorder::new(16)));
        // Fill the queue before the writer runs: 16 fit, 84 are dropped.
        for i in 0..100u64 {
            rec.push(Event::new(Record::Compile(Box::new(Compile {
                t_ns: i,
                ..Default::default()
            }))));
        }
        assert_eq!(rec.dropped(), 84);
        let h = start(rec, Manifest::default(), dir.path().join("t.tps"), u64::MAX).unwrap();
        h.shutdown(Duration::from_secs(10));
        let trace = tpuscope_core::read_trace_file(&h.path).unwrap();
        let compiles = trace
            .events
            .iter()
            .filter(|r| matches!(r, Record::Compile(_)))
            .count();
        assert_eq!(compiles, 16);
        let dropped: u64 = trace
            .events
            .iter()
            .filter_map(|r| {
                if let Record::Dropped(d) = r {
                    Some(d.count)
                } else {
                    None
                }
            })
            .sum();
        assert_eq!(dropped, 84);
        assert_eq!(trace.end.as_ref().map(|e| e.dropped_total), Some(84));
    }
}
