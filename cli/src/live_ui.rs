//! The live view's event loop: bytes from a workload's live socket go into a growing trace, the
//! analyzers turn a copy of it into a model at most twice a second on a thread of their own, and
//! the TUI draws the latest model.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Child;
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use tpuscope_analyzers::digest::Digest;
use tpuscope_analyzers::report;
use tpuscope_core::event::Record;
use tpuscope_tui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use tpuscope_tui::{Action, App, EVENT_SCAN_LIMIT, Extra, Model, Run, RunState, term};

use crate::hangup::Hangup;
use crate::live_stream::{self, Chunk};
use crate::torch_logs::LogCache;

/// How often at most the model is rebuilt while events stream in.
const REBUILD_EVERY: Duration = Duration::from_millis(500);
/// A rebuild costs O(launches so far): the next one waits this many times as long as the last
/// took, so that the analysis thread spends most of its time taking the stream in however
/// long the run (the view then shows the run a few rebuilds late, never stops).
const REBUILD_SPACING: u32 = 3;
/// How long the loop waits for a key before looking at the stream again.
const POLL: Duration = Duration::from_millis(100);
/// The same while the analysis thread's queue is full and more of the stream waits: the loop
/// hands it over as soon as there is room (a backlog of hundreds of MB comes in at the
/// thread's pace, not at 16 chunks per [`POLL`]).
const POLL_BUSY: Duration = Duration::from_millis(2);
/// Redraw at least this often (uptime), even with nothing new.
const IDLE_REDRAW: Duration = Duration::from_secs(1);
/// Workload output lines kept for the pane (the log file has all of them).
const OUTPUT_LINES: usize = 5000;

/// What feeds the view.
struct Feed {
    rx: Option<Receiver<Chunk>>,
    /// A chunk the model thread had no room for yet (its queue is bounded: a slow analysis
    /// slows the reader down instead of piling bytes up).
    held: Option<Vec<u8>>,
    ended: bool,
    error: Option<String>,
    new_data: bool,
}

impl Feed {
    fn new(rx: Option<Receiver<Chunk>>) -> Feed {
        Feed {
            rx,
            held: None,
            ended: false,
            error: None,
            new_data: false,
        }
    }

    /// Hands what arrived to the model thread, which decodes it, as far as it has room.
    fn drain(&mut self, models: &Rebuilder) {
        if let Some(d) = self.held.take() {
            if let Err(d) = models.push(d) {
                self.held = Some(d);
                return;
            }
            self.new_data = true;
        }
        let Some(rx) = &self.rx else { return };
        loop {
            match rx.try_recv() {
                Ok(Chunk::Data(d)) => {
                    if let Err(d) = models.push(d) {
                        self.held = Some(d);
                        return;
                    }
                    self.new_data = true;
                }
                Ok(Chunk::End(err)) => {
                    self.ended = true;
                    self.error = err;
                    self.new_data = true;
                    self.rx = None;
                    models.closed();
                    return;
                }
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.ended = true;
                    self.rx = None;
                    models.closed();
                    return;
                }
            }
        }
    }
}

fn now_ms(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The workload's monotonic clock now, from its latest clock anchor (kept whole in the
/// digest) and the wall clock.
fn trace_now_ns(digest: &Digest) -> Option<u64> {
    let (mono, wall) = digest.others().rev().find_map(|(_, r)| match r {
        Record::Clock(c) => Some((c.mono_ns, c.wall_ns)),
        _ => None,
    })?;
    let now_wall = u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()?
            .as_nanos(),
    )
    .ok()?;
    Some(mono.saturating_add(now_wall.saturating_sub(wall)))
}

/// The model of the run so far (the trace's tables, the digest of its events, its latest
/// events), with the report `tpuscope report` gives for the same trace (dynamo's logs joined:
/// the run records where they go).
fn build_model(
    run: Run<'_>,
    label: &str,
    state: RunState,
    output: &[String],
    logs: &mut LogCache,
) -> Model {
    let logs = logs.find(run.trace, label);
    let rep = report::build_one_digested(label, run.trace, Some(run.digest), logs);
    let now = if state == RunState::Live {
        trace_now_ns(run.digest)
    } else {
        None
    };
    Model::build_run(
        run,
        rep,
        now,
        Extra {
            viewer_lost: 0,
            state,
            output: output.to_vec(),
        },
    )
}

/// Decodes the stream and builds models on a thread of its own, so that keys and redraws stay
/// quick while a large trace is analysed (hundreds of ms past ~200k events): the loop only
/// forwards bytes, and shows the previous model meanwhile.
struct Rebuilder {
    jobs: SyncSender<ToModel>,
    done: Receiver<FromModel>,
    busy: bool,
    /// When the model being built was asked for.
    asked: Instant,
    /// The least time from one request to the next: [`REBUILD_EVERY`], or
    /// [`REBUILD_SPACING`] times what the last rebuild took.
    gap: Duration,
}

enum ToModel {
    /// More of the stream (a trace, in order).
    Data(Vec<u8>),
    /// The stream ended.
    Closed,
    /// Build a model of everything so far.
    Build {
        state: RunState,
        output: Vec<String>,
    },
}

enum FromModel {
    /// The model asked for (`None` before the stream held a trace header).
    Model(Option<Box<Model>>),
    /// The stream is not a trace (or a newer version): nothing more will decode.
    Broken(String),
}

impl Rebuilder {
    fn new(label: &str) -> Result<Rebuilder> {
        let (jobs, job_rx) = mpsc::sync_channel::<ToModel>(live_stream::CHANNEL_CHUNKS);
        let (done_tx, done) = mpsc::channel();
        let label = label.to_string();
        let mut fold = live_stream::Folded::new(EVENT_SCAN_LIMIT)?;
        // Read on this thread, like the analysis: the event loop never waits on the logs.
        let mut logs = LogCache::default();
        std::thread::Builder::new()
            .name("tpuscope-live-model".into())
            .spawn(move || {
                let mut broken = false;
                for job in job_rx {
                    let reply = match job {
                        ToModel::Data(_) if broken => continue,
                        ToModel::Data(d) => match fold.feed(&d) {
                            Ok(()) => continue,
                            Err(e) => {
                                // What was decoded stays on screen.
                                broken = true;
                                FromModel::Broken(e.to_string())
                            }
                        },
                        ToModel::Closed => match live_stream::closed_early(fold.decoder()) {
                            Some(why) => FromModel::Broken(why),
                            None => continue,
                        },
                        ToModel::Build { state, output } => {
                            FromModel::Model(fold.so_far().map(|(trace, digest, recent)| {
                                let run = Run {
                                    trace,
                                    digest: &digest,
                                    recent,
                                };
                                Box::new(build_model(run, &label, state, &output, &mut logs))
                            }))
                        }
                    };
                    if done_tx.send(reply).is_err() {
                        break;
                    }
                }
            })
            .context("cannot start the live view's analysis thread")?;
        Ok(Rebuilder {
            jobs,
            done,
            busy: false,
            asked: Instant::now(),
            gap: REBUILD_EVERY,
        })
    }

    /// Queues more of the stream; gives it back when the queue is full.
    fn push(&self, bytes: Vec<u8>) -> Result<(), Vec<u8>> {
        match self.jobs.try_send(ToModel::Data(bytes)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(ToModel::Data(b))) => Err(b),
            // The thread is gone (it said why): nothing to keep.
            Err(_) => Ok(()),
        }
    }

    /// The stream ended: the thread says so if no trace came.
    fn closed(&self) {
        let _ = self.jobs.try_send(ToModel::Closed);
    }

    /// Asks for a model of everything pushed so far (not now if the queue is full: the loop
    /// asks again).
    fn start(&mut self, state: RunState, output: &[String]) {
        let job = ToModel::Build {
            state,
            output: output.to_vec(),
        };
        self.busy = self.jobs.try_send(job).is_ok();
        if self.busy {
            self.asked = Instant::now();
        }
    }

    /// What the thread has to say, if anything yet.
    fn poll(&mut self) -> Option<FromModel> {
        match self.done.try_recv() {
            Ok(r) => {
                if matches!(r, FromModel::Model(_)) {
                    self.busy = false;
                    self.gap = REBUILD_EVERY.max(self.asked.elapsed() * REBUILD_SPACING);
                }
                Some(r)
            }
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                // A panic in the analysis: keep the last model rather than take the view down.
                self.busy = false;
                Some(FromModel::Broken("the live analysis stopped".into()))
            }
        }
    }
}

/// The workload started by `tpuscope run`, while the view shows it.
pub struct Workload {
    pub child: Child,
    /// Its output: the log file it writes (it owns its output: the file outlives tpuscope).
    pub output: LogTail,
    /// SIGTERM, SIGINT and SIGQUIT sent to tpuscope, passed on to the workload (which runs in a
    /// process group of its own, out of the terminal's reach); SIGTERM also closes the view.
    pub signals: crate::run::Forwarded,
}

/// Reads what the workload appended to its log since the last look.
pub struct LogTail {
    file: std::fs::File,
    /// The end of a line not yet complete.
    partial: Vec<u8>,
}

/// Bytes read from the log at most per look, so that a workload printing fast never holds up
/// keys and redraws (the rest is read at the next look).
const TAIL_STEP: usize = 1 << 20;

impl LogTail {
    pub fn new(file: std::fs::File) -> LogTail {
        LogTail {
            file,
            partial: Vec::new(),
        }
    }

    /// New bytes, at most [`TAIL_STEP`] (nothing on a read error: the next look tries again).
    fn bytes(&mut self) -> Vec<u8> {
        use std::io::Read;
        let mut buf = Vec::new();
        let _ = (&mut self.file)
            .take(TAIL_STEP as u64)
            .read_to_end(&mut buf);
        buf
    }

    /// The complete lines appended since the last look.
    fn lines(&mut self) -> Vec<String> {
        let bytes = self.bytes();
        self.partial.extend_from_slice(&bytes);
        let Some(end) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return Vec::new();
        };
        let rest = self.partial.split_off(end + 1);
        let done = std::mem::replace(&mut self.partial, rest);
        String::from_utf8_lossy(&done)
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Copies what was appended to `out` as it is (a line the view had begun first); false once
    /// `out` fails (the terminal is gone).
    fn copy_to(&mut self, out: &mut impl Write) -> bool {
        let mut bytes = std::mem::take(&mut self.partial);
        bytes.extend(self.bytes());
        bytes.is_empty() || (out.write_all(&bytes).is_ok() && out.flush().is_ok())
    }
}

/// How the view ended.
struct Left {
    /// The workload's status, when it ended while the view was open.
    exited: Option<std::process::ExitStatus>,
    /// The terminal went away.
    terminal_lost: bool,
}

/// Runs the view until the user quits, it is time to leave, or the terminal is lost.
fn run_loop(
    label: &str,
    mut feed: Feed,
    mut workload: Option<&mut Workload>,
    leave: Option<&crate::attach::Leave>,
    hangup: &Hangup,
) -> Result<Left> {
    term::install_panic_hook();
    let mut terminal = term::init().context("cannot open the terminal for the live view")?;
    let start = Instant::now();
    let mut app = App::new();
    let mut rebuilder = Rebuilder::new(label)?;
    let mut output: Vec<String> = Vec::new();
    let mut last_rebuild: Option<Instant> = None;
    let mut last_draw = Instant::now() - IDLE_REDRAW;
    let mut exited = None;
    let mut need_draw = true;
    let result = loop {
        if hangup.lost() || leave.is_some_and(crate::attach::Leave::due) {
            break Ok(exited);
        }
        feed.drain(&rebuilder);
        if let Some(w) = workload.as_deref_mut() {
            let lines = w.output.lines();
            feed.new_data |= !lines.is_empty();
            output.extend(lines);
            if output.len() > OUTPUT_LINES {
                output.drain(..output.len() - OUTPUT_LINES);
            }
            if w.signals.pass_on(w.child.id()) {
                // SIGTERM: the workload is asked to stop; its end shows on the terminal.
                break Ok(exited);
            }
            if exited.is_none() {
                exited = w.child.try_wait().ok().flatten();
                if exited.is_some() {
                    feed.new_data = true;
                }
            }
            if feed.rx.is_none() && !feed.ended && exited.is_none() {
                // The collector opens its socket when the frontend loads the plugin.
                if let Some(stream) = find_stream(w.child.id()) {
                    feed.rx = Some(live_stream::spawn_reader(stream));
                }
            }
        }
        match rebuilder.poll() {
            Some(FromModel::Model(Some(model))) => {
                app.set_model(*model, now_ms(start));
                need_draw = true;
            }
            Some(FromModel::Broken(e)) => {
                // The first word on why the stream stopped is the one shown (in the output
                // pane, the view's only place for text).
                if feed.error.is_none() {
                    output.push(format!("tpuscope: the live stream stopped: {e}"));
                    feed.error = Some(e);
                }
                feed.ended = true;
                feed.rx = None;
                feed.new_data = true;
            }
            _ => {}
        }
        let due = last_rebuild.is_none_or(|t| t.elapsed() >= rebuilder.gap);
        if feed.new_data && due && !app.paused() && !rebuilder.busy {
            let state = if feed.ended || exited.is_some() {
                RunState::Ended
            } else {
                RunState::Live
            };
            rebuilder.start(state, &output);
            // A full queue takes the request next time round.
            if rebuilder.busy {
                feed.new_data = false;
                last_rebuild = Some(Instant::now());
            }
        }
        app.tick(now_ms(start));
        if need_draw || last_draw.elapsed() >= IDLE_REDRAW {
            if terminal
                .draw(|f| tpuscope_tui::draw_app(f, &mut app))
                .is_err()
            {
                // A terminal that cannot be drawn on is gone (the hang-up may not have been
                // seen yet).
                hangup.mark_lost();
                continue;
            }
            last_draw = Instant::now();
            need_draw = false;
        }
        let wait = if feed.held.is_some() { POLL_BUSY } else { POLL };
        let key = match event::poll(wait).and_then(|ready| ready.then(event::read).transpose()) {
            Ok(k) => k,
            Err(_) => {
                hangup.mark_lost();
                continue;
            }
        };
        match key {
            Some(Event::Key(k)) if k.kind != KeyEventKind::Release => {
                need_draw = true;
                if app.handle_key(k, now_ms(start)) == Action::Quit
                    || (k.code == KeyCode::Char('q') && !app.editing_filter())
                {
                    break Ok(exited);
                }
            }
            Some(Event::Resize(..)) => need_draw = true,
            _ => {}
        }
    };
    term::restore();
    result.map(|exited| Left {
        exited,
        terminal_lost: hangup.lost(),
    })
}

/// `tpuscope attach <pid>`: until the user quits, it is time to leave, or the terminal is lost.
pub fn attach(pid: u32, stream: UnixStream, leave: &crate::attach::Leave) -> Result<i32> {
    let hangup = Hangup::watch()?;
    let feed = Feed::new(Some(live_stream::spawn_reader(stream)));
    run_loop(&format!("pid {pid}"), feed, None, Some(leave), &hangup)?;
    Ok(0)
}

/// `tpuscope run` in a terminal: the view of the workload while it runs. When the user leaves
/// the view before the workload ends, its output continues on the terminal; when the terminal
/// is lost, tpuscope waits for the workload quietly. Either way the workload's status is the
/// answer.
pub fn run_workload(mut w: Workload) -> Result<std::process::ExitStatus> {
    let hangup = Hangup::watch()?;
    let feed = Feed::new(None);
    let label = format!("pid {}", w.child.id());
    let left = run_loop(&label, feed, Some(&mut w), None, &hangup)?;
    if let Some(status) = left.exited {
        return Ok(status);
    }
    // The view is closed but the workload runs on: pass its output through until it ends.
    let mut out = std::io::stdout();
    let mut printing = !left.terminal_lost;
    loop {
        printing = printing && !hangup.lost() && w.output.copy_to(&mut out);
        w.signals.pass_on(w.child.id());
        if let Some(status) = w.child.try_wait().context("waiting for the workload")? {
            if printing && !hangup.lost() {
                w.output.copy_to(&mut out);
            }
            return Ok(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The live socket of `pid` or of one of its descendants (a shell or launcher in between).
fn find_stream(pid: u32) -> Option<UnixStream> {
    for (p, path) in tpuscope_core::live::pids_with_sockets() {
        if descends_from(p, pid)
            && let Ok(s) = UnixStream::connect(&path)
        {
            return Some(s);
        }
    }
    None
}

/// Whether `p` is `ancestor` or one of its descendants (a shell or launcher may sit between
/// `tpuscope run` and the instrumented process).
pub(crate) fn descends_from(mut p: u32, ancestor: u32) -> bool {
    for _ in 0..64 {
        if p == ancestor {
            return true;
        }
        match parent_of(p) {
            Some(pp) if pp > 1 => p = pp,
            _ => return false,
        }
    }
    false
}

pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(PathBuf::from(format!("/proc/{pid}/stat"))).ok()?;
    // The command name may hold spaces and parentheses: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuscope_analyzers::report::FindingKind;
    use tpuscope_core::Trace;

    /// Queues bytes, waiting while the thread's queue is full.
    fn push_all(r: &Rebuilder, mut bytes: Vec<u8>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(b) = r.push(bytes) {
            assert!(Instant::now() < deadline, "the queue never drained");
            bytes = b;
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits for the thread's next model.
    fn next_model(r: &mut Rebuilder) -> Option<Box<Model>> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match r.poll() {
                Some(FromModel::Model(m)) => return m,
                Some(FromModel::Broken(e)) => panic!("broken: {e}"),
                None => {}
            }
            assert!(Instant::now() < deadline, "no model from the thread");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn the_thread_decodes_the_stream_in_pieces_and_builds_the_same_model_as_in_place() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sample_traces/real/jax_lr.tps");
        let bytes = std::fs::read(&path).unwrap();
        let trace = tpuscope_core::read_trace(&bytes).unwrap();
        let out = ["out".to_string()];
        let mut r = Rebuilder::new("pid 1").unwrap();
        // Nothing yet: no model.
        r.start(RunState::Live, &out);
        assert!(next_model(&mut r).is_none());
        for piece in bytes.chunks(4096) {
            push_all(&r, piece.to_vec());
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        r.start(RunState::Ended, &out);
        while !r.busy {
            assert!(Instant::now() < deadline, "never took the request");
            std::thread::sleep(Duration::from_millis(1));
            r.start(RunState::Ended, &out);
        }
        let model = next_model(&mut r).unwrap();
        assert!(!r.busy);
        // The trace decoded whole, its model built as `tpuscope report` and the replay do: the
        // fold of the stream shows the same thing.
        let here = Model::build(
            &trace,
            report::build_one("pid 1", &trace, None),
            None,
            Extra {
                viewer_lost: 0,
                state: RunState::Ended,
                output: out.to_vec(),
            },
        );
        assert_eq!(*model, here);
        assert_eq!(model.output, ["out"]);
        assert!(model.counters.compiles > 0);
        assert!(!model.events.is_empty());
    }

    #[test]
    fn a_run_longer_than_the_viewer_limit_streams_on_to_its_end() {
        // A loop of 200k launches through a viewer limit of 24 MiB: the plain decoder, which
        // holds every record (~150 bytes each here), stops; the fold, which holds a few dozen
        // bytes a launch, reads it all.
        use tpuscope_core::event::{Execute, Manifest};
        let mut w = tpuscope_core::TraceWriter::new(Vec::new(), &Manifest::default()).unwrap();
        for i in 0..200_000u64 {
            w.write(&Record::Execute(Execute {
                t_ns: i + 1,
                seq: i,
                ..Default::default()
            }))
            .unwrap();
        }
        let bytes = w.into_inner();
        let trace = tpuscope_core::read_trace(&bytes).unwrap();
        let limit = 24 << 20;
        let mut whole = tpuscope_core::live::LiveDecoder::new(limit);
        assert!(live_stream::feed(&mut whole, &bytes).is_err());
        let mut fold = live_stream::Folded::with_limit(EVENT_SCAN_LIMIT, limit);
        for piece in bytes.chunks(4096) {
            fold.feed(piece).unwrap();
        }
        let (tables, digest, recent) = fold.so_far().unwrap();
        assert!(tables.events.is_empty());
        assert_eq!(digest.events, trace.events.len());
        assert_eq!(digest.launches.len(), 200_000);
        assert_eq!(
            recent,
            &trace.events[trace.events.len() - EVENT_SCAN_LIMIT..]
        );
    }

    /// What `tpuscope report` finds in a trace file, dynamo's logs found its way.
    fn report_of_file(trace: &Trace, file: &std::path::Path, label: &str) -> report::Report {
        let logs = crate::torch_logs::find(None, Some(file), Some(trace), label);
        report::build_one(label, trace, logs)
    }

    #[test]
    fn the_live_model_joins_the_logs_the_run_recorded_and_finds_what_report_finds() {
        let (bytes, logs) = crate::live_stream::testing::graph_break_stream();
        let trace = tpuscope_core::read_trace(&bytes).unwrap();
        let mut r = Rebuilder::new("pid 1").unwrap();
        for piece in bytes.chunks(4096) {
            push_all(&r, piece.to_vec());
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        r.start(RunState::Ended, &[]);
        while !r.busy {
            assert!(Instant::now() < deadline, "never took the request");
            std::thread::sleep(Duration::from_millis(1));
            r.start(RunState::Ended, &[]);
        }
        let model = next_model(&mut r).unwrap();

        // `report` on the file next to its logs (the `.torch_trace` sibling).
        let file = logs.with_extension("tps");
        let rep = report_of_file(&trace, &file, "pid 1");
        let kinds: Vec<FindingKind> = rep.findings.iter().map(|f| f.kind).collect();
        assert!(kinds.contains(&FindingKind::GraphBreak), "{kinds:?}");
        assert_eq!(
            model.findings.len(),
            rep.findings.len(),
            "{:?}",
            model.findings
        );
        for (shown, f) in model.findings.iter().zip(&rep.findings) {
            assert!(shown.contains(&f.title), "{shown:?} is not {:?}", f.title);
        }
        // Without the logs the live view found less (what it showed before).
        let alone = report::analyze(&[report::Input::new("pid 1", &trace)]);
        assert!(alone.findings.len() < rep.findings.len());
    }

    #[test]
    fn a_stream_that_is_not_a_trace_is_reported_once() {
        let mut r = Rebuilder::new("pid 1").unwrap();
        push_all(&r, b"definitely not a tpuscope trace header".to_vec());
        push_all(&r, b"more".to_vec());
        let deadline = Instant::now() + Duration::from_secs(30);
        let e = loop {
            if let Some(FromModel::Broken(e)) = r.poll() {
                break e;
            }
            assert!(Instant::now() < deadline, "never reported");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(!e.is_empty());
        r.start(RunState::Ended, &[]);
        assert!(
            next_model(&mut r).is_none(),
            "no model after a broken stream"
        );
    }
}
