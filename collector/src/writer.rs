//! The writer thread: drains the recorder's queue into the trace file, interning stacks and
//! signatures, storing blobs once, anchoring clocks, counting drops, and aggregating executes
//! once the trace passes its size cap. Any I/O error is reported once on stderr; the workload goes
//! on without a trace.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tpuscope_core::TraceWriter;
use tpuscope_core::event::{
    Clock, Dropped, End, ExecuteSummary, KindCount, Manifest, Record, RecordKind, RecordingStopped,
};
use tpuscope_core::format::{self, FRAME_HEADER_LEN, HEADER_LEN};

use crate::live::{self, Hub, Tee};
use crate::recorder::{Event, Recorder};

/// The trace file, teed to live viewers (`live`).
type Out = Tee<BufWriter<TraceFile>>;

/// Room kept below the file size limit for the stop record, the one written at exit and the end
/// record (together under 2 KiB; the rest is slack for the records written between two checks).
const LIMIT_RESERVE: u64 = 64 << 10;
/// After a failed write, room left below where the file stopped growing for the closing records
/// (whole frames before it are cut off and counted as not recorded).
const FAILURE_ROOM: u64 = 4 << 10;
/// Events are sized exactly (encoded once more) only this close to the budget.
const NEAR_BUDGET: u64 = 1 << 20;

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
        // Readable too: after a failed write the writer looks for the last whole frame.
        match OpenOptions::new()
            .read(true)
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

/// The file under the write buffer: counts the bytes that reached it, and once recording stopped
/// after a failed write it swallows what the buffer still holds, so nothing lands after the stop
/// record (the stop record itself is written with `write_all_at`).
pub struct TraceFile {
    file: File,
    on_disk: Cell<u64>,
    dead: Cell<bool>,
    /// Unit tests: the file "fills up" here (writes stop part way, then fail with EFBIG).
    full_at: Option<u64>,
}

impl TraceFile {
    fn new(file: File, full_at: Option<u64>) -> Self {
        TraceFile {
            file,
            on_disk: Cell::new(0),
            dead: Cell::new(false),
            full_at,
        }
    }
}

impl Write for TraceFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.dead.get() {
            return Ok(buf.len());
        }
        let mut buf = buf;
        if let Some(full) = self.full_at {
            let room = full.saturating_sub(self.on_disk.get()) as usize;
            if room == 0 {
                return Err(io::Error::from_raw_os_error(libc::EFBIG));
            }
            buf = buf.get(..room.min(buf.len())).unwrap_or(buf);
        }
        let n = self.file.write(buf)?;
        self.on_disk.set(self.on_disk.get() + n as u64);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
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
    let set_by_test = NEXT_TEST_HOOKS.with(Cell::take);
    let out = Tee::new(
        BufWriter::with_capacity(
            1 << 16,
            TraceFile::new(file, set_by_test.and_then(|t| t.full_at)),
        ),
        hub,
        Some(history),
    );
    // Flushed at once: a live viewer's stream starts with the header and manifest.
    // Packed (format 1.2): one frame and one CRC for the records of each flush.
    let trace = match TraceWriter::new(out, &manifest).and_then(|t| {
        let mut t = t.packed();
        t.flush().map(|()| t)
    }) {
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
            // A write past `ulimit -f` then fails with EFBIG instead of killing the workload.
            crate::ffi::os::block_file_size_signal();
            let test = set_by_test.unwrap_or_else(TestHooks::from_env);
            let limit = match test.limit {
                Some(l) => l,
                None => crate::ffi::os::file_size_limit(),
            };
            let mut w = Writer::new(trace, size_cap_bytes, thread_path, limit);
            w.panic_after = test.panic_after;
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| w.run(recorder, &stop2))) {
                writer_panicked(&mut w, recorder, &*panic);
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

/// The text of a panic payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// The writer thread panicked: recording stops (hooks pass calls through; the queue is no longer
/// filled), the trace gets a stop record if it can, and stderr one line.
fn writer_panicked(w: &mut Writer, recorder: &Recorder, panic: &(dyn std::any::Any + Send)) {
    recorder.set_enabled(false);
    while recorder.pop().is_some() {}
    let reason = format!("the collector's writer failed: {}", panic_text(panic));
    eprintln!(
        "tpuscope: {reason}; recording stops, the workload continues untraced (trace {})",
        w.path.display()
    );
    // The writer's state is whatever the panic left: write the stop record past the last frame
    // known to be whole, as after a failed write.
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // Whole frames the buffer holds can still go out (the file was not full).
        w.stop_after_failure(reason, recorder, true);
        w.finish_stopped(recorder);
    }));
}

/// Faults the tests inject. Debug builds read them from the environment (release builds never):
/// `TPUSCOPE_TEST_WRITER_PANIC_AFTER=N` makes the writer panic at its N-th event;
/// `TPUSCOPE_TEST_IGNORE_FILE_LIMIT=1` makes it blind to `ulimit -f` (the write then fails with
/// EFBIG, as with a full disk). Unit tests set them directly.
#[derive(Clone, Copy, Default)]
struct TestHooks {
    panic_after: Option<u64>,
    /// Overrides the file size limit (`Some(None)`: none known).
    limit: Option<Option<u64>>,
    /// Unit tests: the file takes no more than this many bytes (see `TraceFile::full_at`).
    full_at: Option<u64>,
}

thread_local! {
    /// Unit tests: the hooks the next writer started from this thread gets.
    static NEXT_TEST_HOOKS: Cell<Option<TestHooks>> = const { Cell::new(None) };
}

impl TestHooks {
    fn from_env() -> Self {
        if !cfg!(debug_assertions) {
            return TestHooks::default();
        }
        let var = |k: &str| std::env::var(k).ok();
        TestHooks {
            panic_after: var("TPUSCOPE_TEST_WRITER_PANIC_AFTER")
                .and_then(|v| v.trim().parse().ok()),
            limit: var("TPUSCOPE_TEST_IGNORE_FILE_LIMIT")
                .filter(|v| v.trim() == "1")
                .map(|_| None),
            full_at: None,
        }
    }
}

/// Recording stopped before exit: what the trace says about it, and what was not recorded since.
struct Stopped {
    record: RecordingStopped,
    /// Where the closing records go when the buffered writer cannot be used (after a failed
    /// write or a panic); `None`: through the trace writer. `Some(None)`: nowhere.
    raw_at: Option<Option<u64>>,
    dropped_at_stop: u64,
    not_recorded: BTreeMap<&'static str, u64>,
}

struct Writer {
    trace: TraceWriter<Out>,
    size_cap_bytes: u64,
    /// Past the size cap: per-executable execute aggregates, flushed every `SUMMARY_INTERVAL`.
    summaries: HashMap<u64, ExecuteSummary>,
    last_dropped: u64,
    events_written: u64,
    path: PathBuf,
    /// The file size limit and the bytes the trace may take below it (`LIMIT_RESERVE` left for
    /// the records that say recording stopped).
    limit: Option<(u64, u64)>,
    /// A frame boundary known to be in the file (the trace's size at the last successful flush).
    flushed: u64,
    stopped: Option<Stopped>,
    scratch: Vec<u8>,
    /// Debug builds: panic at this event (see `test_panic_after`).
    panic_after: Option<u64>,
}

impl Writer {
    fn new(
        trace: TraceWriter<Out>,
        size_cap_bytes: u64,
        path: PathBuf,
        limit: Option<u64>,
    ) -> Self {
        Writer {
            trace,
            size_cap_bytes,
            summaries: HashMap::new(),
            last_dropped: 0,
            events_written: 0,
            path,
            limit: limit.map(|l| (l, l.saturating_sub(LIMIT_RESERVE.min(l / 4)))),
            flushed: 0,
            stopped: None,
            scratch: Vec::new(),
            panic_after: None,
        }
    }

    fn run(&mut self, recorder: &Recorder, stop: &AtomicBool) {
        let mut last_clock = Instant::now() - CLOCK_INTERVAL;
        let mut last_flush = Instant::now();
        let mut last_summary = Instant::now();
        let mut dirty = false;
        loop {
            let stopping = stop.load(Ordering::SeqCst);
            let mut drained = 0usize;
            while let Some(ev) = recorder.pop() {
                drained += 1;
                if self.stopped.is_none() && self.limit.is_some() {
                    let size = self.size_of(&ev);
                    if self.over_budget(size)
                        && let Err(e) = self.stop_at_limit(recorder)
                    {
                        self.failed(e, recorder);
                    }
                }
                if let Some(st) = &mut self.stopped {
                    *st.not_recorded.entry(ev.record.kind().name()).or_default() += 1;
                    continue;
                }
                match self.write_event(ev) {
                    Ok(()) => {}
                    // A record too large for a frame was refused before anything was written:
                    // the trace goes on without it.
                    Err(e) if e.kind() == io::ErrorKind::InvalidInput => continue,
                    Err(e) => {
                        self.failed(e, recorder);
                        continue;
                    }
                }
                dirty = true;
                if drained.is_multiple_of(4096) && last_flush.elapsed() >= FLUSH_INTERVAL {
                    break;
                }
            }
            crate::ffi::os::refine_clock();
            if self.stopped.is_none() {
                let periodic = self.periodic(
                    recorder,
                    stopping,
                    (&mut last_clock, &mut last_flush, &mut last_summary),
                    &mut dirty,
                );
                if let Err(e) = periodic {
                    self.failed(e, recorder);
                }
            }
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
        if self.stopped.is_some() {
            self.finish_stopped(recorder);
        } else if let Err(e) = self.finish(recorder) {
            self.failed(e, recorder);
            self.finish_stopped(recorder);
        }
    }

    /// What the loop writes besides events: drop counts, clock anchors, execute summaries,
    /// flushes, live viewers; and the budget check that stops recording below the file size limit.
    fn periodic(
        &mut self,
        recorder: &Recorder,
        stopping: bool,
        (last_clock, last_flush, last_summary): (&mut Instant, &mut Instant, &mut Instant),
        dirty: &mut bool,
    ) -> io::Result<()> {
        if self.over_budget(0) {
            self.stop_at_limit(recorder)?;
            return Ok(());
        }
        let dropped = recorder.dropped();
        if dropped != self.last_dropped {
            let t_ns = crate::recorder::now_ns();
            self.trace.write(&Record::Dropped(Dropped {
                t_ns,
                count: dropped - self.last_dropped,
                total: dropped,
            }))?;
            self.last_dropped = dropped;
            *dirty = true;
        }
        if last_clock.elapsed() >= CLOCK_INTERVAL {
            self.trace.write(&Record::Clock(Clock {
                mono_ns: crate::ffi::os::clock_monotonic_ns(),
                wall_ns: crate::ffi::os::wall_ns(),
            }))?;
            *last_clock = Instant::now();
            *dirty = true;
        }
        if last_summary.elapsed() >= SUMMARY_INTERVAL || stopping {
            self.flush_summaries()?;
            *last_summary = Instant::now();
        }
        if *dirty && (last_flush.elapsed() >= FLUSH_INTERVAL || stopping) {
            self.flush()?;
            *last_flush = Instant::now();
            *dirty = false;
        }
        self.serve_viewers()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.trace.flush()?;
        self.flushed = self.trace.bytes_written();
        Ok(())
    }

    /// A clean exit: summaries, the end record, the file synced.
    fn finish(&mut self, recorder: &Recorder) -> io::Result<()> {
        self.flush_summaries()?;
        self.trace.write(&Record::End(self.end_record(recorder)))?;
        self.flush()?;
        // Dropping the writer then closes the viewers' streams, after the end record.
        self.trace.get_ref().inner().get_ref().file.sync_data()
    }

    fn end_record(&self, recorder: &Recorder) -> End {
        End {
            t_ns: crate::recorder::now_ns(),
            events_written: self.events_written,
            dropped_total: recorder.dropped(),
        }
    }

    /// Whether writing about `more` bytes would cross the budget below the file size limit.
    fn over_budget(&self, more: u64) -> bool {
        self.limit
            .is_some_and(|(_, budget)| self.trace.bytes_written().saturating_add(more) > budget)
    }

    /// About how many bytes `ev` adds to the trace: exact for the record when near the budget
    /// (it is encoded once more), generous for its stack and blobs.
    fn size_of(&mut self, ev: &Event) -> u64 {
        let blobs: u64 = ev
            .blobs
            .iter()
            .flat_map(|b| b.iter())
            .map(|b| (b.data.len() + b.format.len() + 64) as u64)
            .sum();
        let stack: u64 = ev.stack.as_ref().map_or(0, |s| {
            s.iter()
                .map(|f| (f.file.len() + f.function.len() + 64) as u64)
                .sum()
        });
        let sig = ev.signature.as_ref().map_or(0, |s| s.len() as u64 + 32);
        let near = self
            .limit
            .is_some_and(|(_, b)| self.trace.bytes_written() + blobs + NEAR_BUDGET > b);
        let record = if near {
            self.scratch.clear();
            ev.record.encode_payload(&mut self.scratch);
            self.scratch.len() as u64 + 64 + (ev.name.len() + ev.dtype.len()) as u64
        } else {
            NEAR_BUDGET
        };
        blobs + stack + sig + record
    }

    /// The trace reached its budget below the file size limit: it ends with a stop record while
    /// there is room for it, and recording stops (the queue is still drained and counted).
    fn stop_at_limit(&mut self, recorder: &Recorder) -> io::Result<()> {
        let limit = self.limit.map_or(0, |(l, _)| l);
        self.flush_summaries()?;
        let record = self.stop_record(
            format!("the file size limit (ulimit -f) of {limit} bytes was reached"),
            limit,
        );
        self.trace
            .write(&Record::RecordingStopped(record.clone()))?;
        self.flush()?;
        eprintln!(
            "tpuscope: trace {} reached the file size limit (ulimit -f: {limit} bytes); recording \
             stops, the workload continues untraced (the trace says so and counts what is missing)",
            self.path.display()
        );
        self.stopped = Some(Stopped {
            record,
            raw_at: None,
            dropped_at_stop: recorder.dropped(),
            not_recorded: BTreeMap::new(),
        });
        Ok(())
    }

    fn stop_record(&self, reason: String, limit_bytes: u64) -> RecordingStopped {
        RecordingStopped {
            t_ns: crate::recorder::now_ns(),
            reason,
            limit_bytes,
            bytes_written: self.trace.bytes_written(),
            not_recorded: Vec::new(),
            exit_t_ns: 0,
        }
    }

    /// A write failed (the file hit its size limit, the disk is full, an I/O error): said once,
    /// then the stop record goes after the last whole frame in the file.
    fn failed(&mut self, err: io::Error, recorder: &Recorder) {
        if self.stopped.is_some() {
            return;
        }
        eprintln!(
            "tpuscope: cannot write trace {}: {err}; recording stops, the workload continues \
             untraced",
            self.path.display()
        );
        let reason = match (crate::ffi::os::is_file_full(&err), self.limit) {
            (true, Some((limit, _))) if err.raw_os_error() == Some(libc::EFBIG) => {
                format!("the file size limit (ulimit -f) of {limit} bytes was reached ({err})")
            }
            (true, _) => format!("the file could not grow: {err}"),
            (false, _) => format!("a write failed: {err}"),
        };
        self.stop_after_failure(reason, recorder, false);
    }

    /// Cuts the file after its last whole frame and writes the stop record there, bypassing the
    /// write buffer (whose remaining bytes are dropped).
    ///
    /// The file could grow to where the failed write left it, not further: the cut leaves
    /// `FAILURE_ROOM` below that for the closing records, and the events of the frames cut
    /// off (and of those still in the buffer) are counted as not recorded.
    fn stop_after_failure(&mut self, reason: String, recorder: &Recorder, can_grow: bool) {
        if can_grow && self.flush().is_err() {
            return self.stop_after_failure(reason, recorder, false);
        }
        let buffered = self.trace.get_ref().inner().buffer().to_vec();
        let tf = self.trace.get_ref().inner().get_ref();
        tf.dead.set(true);
        let on_disk = tf.on_disk.get();
        // The file header is not a frame: frames start after it.
        let from = self.flushed.max(HEADER_LEN as u64).min(on_disk);
        let (frames, end) = frames_after(&tf.file, from, on_disk, &buffered);
        let room = if can_grow { 0 } else { FAILURE_ROOM };
        let cut = frames
            .iter()
            .map(|&(at, _)| at)
            .chain([from, end])
            .filter(|&at| at > HEADER_LEN as u64 && at + room <= on_disk.max(from))
            .max()
            .or_else(|| (from > HEADER_LEN as u64).then_some(from));
        let mut not_recorded: BTreeMap<&'static str, u64> = BTreeMap::new();
        // The frames cut off, and the records gathered for a pack that never reached the file.
        let cut_off = frames
            .iter()
            .filter(|&&(at, _)| cut.is_none_or(|c| at >= c))
            .map(|&(_, kind)| kind);
        let lost: Vec<u16> = cut_off.chain(self.trace.gathered()).collect();
        for kind in lost {
            if let Some(k) = RecordKind::from_u16(kind).filter(|k| is_event(*k)) {
                *not_recorded.entry(k.name()).or_default() += 1;
                self.events_written = self.events_written.saturating_sub(1);
            }
        }
        let mut record = self.stop_record(reason, self.limit.map_or(0, |(l, _)| l));
        record.bytes_written = cut.unwrap_or(0);
        let tf = self.trace.get_ref().inner().get_ref();
        let raw_at = cut.and_then(|at| {
            tf.file.set_len(at).ok()?;
            let mut frame = Vec::new();
            push_frame(&mut frame, &Record::RecordingStopped(record.clone()));
            tf.file.write_all_at(&frame, at).ok()?;
            Some(at + frame.len() as u64)
        });
        self.stopped = Some(Stopped {
            record,
            raw_at: Some(raw_at),
            dropped_at_stop: recorder.dropped(),
            not_recorded,
        });
    }

    /// At exit after a stop: the stop record again with what was not recorded, and the end record.
    fn finish_stopped(&mut self, recorder: &Recorder) {
        let end = self.end_record(recorder);
        let Some(st) = self.stopped.as_mut() else {
            return;
        };
        let mut record = st.record.clone();
        record.exit_t_ns = end.t_ns;
        record.not_recorded = st
            .not_recorded
            .iter()
            .map(|(k, n)| KindCount {
                kind: (*k).to_string(),
                count: *n,
            })
            .collect();
        let lost = recorder.dropped().saturating_sub(st.dropped_at_stop);
        if lost > 0 {
            record.not_recorded.push(KindCount {
                kind: "dropped".into(),
                count: lost,
            });
        }
        match st.raw_at {
            None => {
                let written = self
                    .trace
                    .write(&Record::RecordingStopped(record))
                    .and_then(|()| self.trace.write(&Record::End(end)))
                    .and_then(|()| self.flush());
                if written.is_ok() {
                    let _ = self.trace.get_ref().inner().get_ref().file.sync_data();
                }
            }
            Some(Some(at)) => {
                let mut frames = Vec::new();
                push_frame(&mut frames, &Record::RecordingStopped(record));
                push_frame(&mut frames, &Record::End(end));
                let file = &self.trace.get_ref().inner().get_ref().file;
                if file.write_all_at(&frames, at).is_ok() {
                    let _ = file.sync_data();
                }
            }
            Some(None) => {}
        }
    }

    /// A new live viewer waits for a flush: its backlog is then everything written so far (each
    /// flush wakes the viewers' senders, which read the file back; see `live`).
    fn serve_viewers(&mut self) -> io::Result<()> {
        if self.trace.get_ref().wants_flush() {
            self.flush()?;
        }
        Ok(())
    }

    fn write_event(&mut self, ev: Event) -> io::Result<()> {
        if self.panic_after.is_some_and(|n| self.events_written >= n) {
            panic!("test panic after {} events", self.events_written);
        }
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
            if b.oversize > 0 {
                // What `put_blob_hashed` writes for a blob too large for a frame; the hook
                // did not copy it.
                self.trace.write(&Record::Note(tpuscope_core::event::Note {
                    t_ns: 0,
                    thread: 0,
                    topic: "blob_too_large".to_owned(),
                    message: format!(
                        "{} blob {:016x} of {} bytes exceeds the trace format's frame limit; not stored",
                        b.role, b.hash, b.oversize
                    ),
                }))?;
                continue;
            }
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

/// Appends the frame of `record` to `out`.
fn push_frame(out: &mut Vec<u8>, record: &Record) {
    let mut payload = Vec::new();
    record.encode_payload(&mut payload);
    format::encode_frame(out, record.kind() as u16, 0, &payload);
}

/// Whether frames of this kind are events (not the manifest, definitions or blobs).
fn is_event(kind: RecordKind) -> bool {
    !matches!(
        kind,
        RecordKind::Manifest | RecordKind::StringDef | RecordKind::StackDef | RecordKind::Blob
    )
}

/// The records (offset of their frame, kind; a pack's each at the pack's offset) of the whole
/// frames of the trace's byte stream from `from` (a frame boundary):
/// the file's bytes up to `on_disk`, then `buffered` (what the write buffer still holds); and
/// where the last of them ends.
fn frames_after(file: &File, from: u64, on_disk: u64, buffered: &[u8]) -> (Vec<(u64, u16)>, u64) {
    let mut bytes = vec![0u8; on_disk.saturating_sub(from) as usize];
    if file.read_exact_at(&mut bytes, from).is_err() {
        return (Vec::new(), from);
    }
    bytes.extend_from_slice(buffered);
    let mut frames = Vec::new();
    let mut at = 0usize;
    while let Some(h) = bytes.get(at..).and_then(format::parse_frame_header) {
        let next = at + FRAME_HEADER_LEN + h.len as usize;
        if next > bytes.len() {
            break;
        }
        if h.kind == format::PACK_KIND {
            // Its records, each at the pack's start (they stand or fall with it).
            let mut rest = bytes.get(at + FRAME_HEADER_LEN..next).unwrap_or_default();
            while let Some((kind, _, after)) = format::pack_entry(rest) {
                frames.push((from + at as u64, kind));
                rest = after;
            }
        } else {
            frames.push((from + at as u64, h.kind));
        }
        at = next;
    }
    (frames, from + at as u64)
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

    fn start_with(rec: &'static Recorder, path: PathBuf, hooks: TestHooks) -> WriterHandle {
        NEXT_TEST_HOOKS.with(|h| h.set(Some(hooks)));
        start(rec, Manifest::default(), path, u64::MAX).unwrap()
    }

    fn execute(i: u64) -> Event {
        Event::new(Record::Execute(Execute {
            t_ns: i,
            dur_ns: 10,
            executable_id: 1,
            ..Default::default()
        }))
    }

    fn not_recorded(s: &RecordingStopped) -> BTreeMap<String, u64> {
        s.not_recorded
            .iter()
            .map(|k| (k.kind.clone(), k.count))
            .collect()
    }

    /// Below a known file size limit the trace stops with room to spare for its stop record; the
    /// events after it are counted by kind, and the file never passes the limit.
    #[test]
    fn at_the_file_size_limit_the_trace_ends_with_a_stop_record_and_counts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let rec: &'static Recorder = Box::leak(Box::new(Recorder::new(1 << 16)));
        let limit = 256 << 10;
        let hooks = TestHooks {
            limit: Some(Some(limit)),
            ..Default::default()
        };
        let h = start_with(rec, dir.path().join("t.tps"), hooks);
        let n = 40_000u64;
        for i in 0..n {
            rec.push(execute(i));
            if i % 1000 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        rec.push(Event::new(Record::Compile(Box::default())));
        h.shutdown(Duration::from_secs(10));
        let len = std::fs::metadata(&h.path).unwrap().len();
        assert!(len <= limit, "{len} > {limit}");
        let trace = tpuscope_core::read_trace_file(&h.path).unwrap();
        assert_eq!(trace.completeness, tpuscope_core::Completeness::Complete);
        let stopped = trace.recording_stopped().expect("a stop record");
        assert!(
            stopped.reason.contains("file size limit"),
            "{}",
            stopped.reason
        );
        assert_eq!(stopped.limit_bytes, limit);
        assert!(stopped.exit_t_ns >= stopped.t_ns);
        let written = trace
            .events
            .iter()
            .filter(|r| matches!(r, Record::Execute(_)))
            .count() as u64;
        let missing = not_recorded(stopped);
        assert!(written > 1000 && written < n, "{written}");
        assert_eq!(
            written + missing.get("execute").copied().unwrap_or(0) + rec.dropped(),
            n
        );
        assert_eq!(missing.get("compile"), Some(&1));
        // Two stop records (at the stop, at exit), then the end record.
        let kinds: Vec<&str> = trace
            .events
            .iter()
            .rev()
            .take(2)
            .map(|r| r.kind().name())
            .collect();
        assert_eq!(kinds, ["recording_stopped", "recording_stopped"]);
        assert!(trace.end.is_some());
    }

    /// A write that fails with no known limit (EFBIG from an unknown `ulimit -f`, a full disk):
    /// the file is cut after its last whole frame and closed with the stop record there.
    #[test]
    fn a_failed_write_cuts_to_the_last_whole_frame_and_writes_the_stop_record() {
        let dir = tempfile::tempdir().unwrap();
        let rec: &'static Recorder = Box::leak(Box::new(Recorder::new(1 << 16)));
        let full_at = 100_003;
        let hooks = TestHooks {
            limit: Some(None),
            full_at: Some(full_at),
            ..Default::default()
        };
        let h = start_with(rec, dir.path().join("t.tps"), hooks);
        let n = 20_000u64;
        for i in 0..n {
            rec.push(execute(i));
            if i % 1000 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        h.shutdown(Duration::from_secs(10));
        let trace = tpuscope_core::read_trace_file(&h.path).unwrap();
        assert_eq!(trace.completeness, tpuscope_core::Completeness::Complete);
        assert!(trace.damage.is_empty(), "{:?}", trace.damage);
        let stopped = trace.recording_stopped().expect("a stop record");
        assert!(
            stopped.reason.contains("File too large"),
            "{}",
            stopped.reason
        );
        // Cut at a frame boundary with room for the closing records below where the file
        // stopped growing: the last such boundary, a pack (format 1.2) at most before it.
        let cut = stopped.bytes_written;
        let pack = (format::PACK_BYTES + FRAME_HEADER_LEN) as u64;
        assert!(
            cut + FAILURE_ROOM <= full_at && cut + FAILURE_ROOM + pack > full_at,
            "{cut}"
        );
        let written = trace
            .events
            .iter()
            .filter(|r| matches!(r, Record::Execute(_)))
            .count() as u64;
        let missing = not_recorded(stopped).get("execute").copied().unwrap_or(0);
        assert!(written > 1000 && missing > 1000, "{written} {missing}");
        // Written, cut off or left in the buffer at the failure, seen after it, dropped: each
        // event is accounted for once (the frame that failed half-written may be lost).
        let accounted = written + missing + rec.dropped();
        assert!(accounted <= n && accounted + 2 >= n, "{accounted} of {n}");
        assert_eq!(trace.end.as_ref().map(|e| e.events_written), Some(written));
    }

    /// A panic in the writer loop: recording stops, the hooks' pushes are refused from then on,
    /// and the trace ends with a stop record that says why.
    #[test]
    fn a_writer_panic_stops_recording_and_the_trace_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let rec: &'static Recorder = Box::leak(Box::new(Recorder::new(1 << 16)));
        let hooks = TestHooks {
            panic_after: Some(50),
            ..Default::default()
        };
        let h = start_with(rec, dir.path().join("t.tps"), hooks);
        for i in 0..100u64 {
            rec.push(execute(i));
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while rec.is_enabled() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(
            !rec.is_enabled(),
            "recording must stop after a writer panic"
        );
        rec.push(execute(1));
        assert!(rec.is_empty());
        h.shutdown(Duration::from_secs(10));
        let trace = tpuscope_core::read_trace_file(&h.path).unwrap();
        let stopped = trace.recording_stopped().expect("a stop record");
        assert!(
            stopped.reason.contains("writer failed"),
            "{}",
            stopped.reason
        );
        let written = trace
            .events
            .iter()
            .filter(|r| matches!(r, Record::Execute(_)))
            .count();
        assert!(written <= 50, "{written}");
        assert!(trace.end.is_some());
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
