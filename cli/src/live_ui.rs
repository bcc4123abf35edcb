//! The live view's event loop: bytes from a workload's live socket go into a growing trace, the
//! analyzers turn it into a model at most twice a second, and the TUI draws it.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use tpuscope_analyzers::report::{self, Input};
use tpuscope_core::event::Record;
use tpuscope_core::{Trace, TraceBuilder};
use tpuscope_tui::crossterm::event::{self, Event, KeyCode, KeyEventKind};
use tpuscope_tui::{Action, App, Extra, Model, RunState, term};

use crate::live_stream::{self, Chunk};

/// How often the model is rebuilt while events stream in: analysis costs O(trace).
const REBUILD_EVERY: Duration = Duration::from_millis(500);
/// How long the loop waits for a key before looking at the stream again.
const POLL: Duration = Duration::from_millis(100);
/// Redraw at least this often (uptime), even with nothing new.
const IDLE_REDRAW: Duration = Duration::from_secs(1);
/// Workload output lines kept for the pane (the log file has all of them).
const OUTPUT_LINES: usize = 5000;

/// What feeds the view.
struct Feed {
    rx: Option<Receiver<Chunk>>,
    builder: TraceBuilder,
    ended: bool,
    error: Option<String>,
    new_data: bool,
}

impl Feed {
    fn new(rx: Option<Receiver<Chunk>>) -> Feed {
        Feed {
            rx,
            builder: TraceBuilder::new(),
            ended: false,
            error: None,
            new_data: false,
        }
    }

    fn drain(&mut self) {
        let Some(rx) = &self.rx else { return };
        loop {
            match rx.try_recv() {
                Ok(Chunk::Data(d)) => {
                    if let Err(e) = self.builder.push(&d) {
                        self.error = Some(e.to_string());
                        self.ended = true;
                        self.rx = None;
                        return;
                    }
                    self.new_data = true;
                }
                Ok(Chunk::End(err)) => {
                    self.ended = true;
                    self.error = err;
                    self.new_data = true;
                    self.rx = None;
                    return;
                }
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Disconnected) => {
                    self.ended = true;
                    self.rx = None;
                    return;
                }
            }
        }
    }
}

fn now_ms(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The workload's monotonic clock now, from its latest clock anchor and the wall clock.
fn trace_now_ns(trace: &Trace) -> Option<u64> {
    let (mono, wall) = trace.events.iter().rev().find_map(|r| match r {
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

fn build_model(trace: &Trace, label: &str, state: RunState, output: &[String]) -> Model {
    let rep = report::analyze(&[Input {
        path: label.to_string(),
        trace,
    }]);
    let now = if state == RunState::Live {
        trace_now_ns(trace)
    } else {
        None
    };
    Model::build(
        trace,
        rep,
        now,
        Extra {
            viewer_lost: 0,
            state,
            output: output.to_vec(),
        },
    )
}

/// The workload started by `tpuscope run`, while the view shows it.
pub struct Workload {
    pub child: Child,
    pub output: Receiver<String>,
    /// Set by SIGTERM/SIGHUP sent to tpuscope: passed on to the workload, and the view closes.
    pub terminate: Arc<AtomicBool>,
}

/// Runs the view until the user quits; returns the workload's exit status if it ended meanwhile.
fn run_loop(
    label: &str,
    mut feed: Feed,
    mut workload: Option<&mut Workload>,
) -> Result<Option<std::process::ExitStatus>> {
    term::install_panic_hook();
    let mut terminal = term::init().context("cannot open the terminal for the live view")?;
    let start = Instant::now();
    let mut app = App::new();
    let mut output: Vec<String> = Vec::new();
    let mut last_rebuild: Option<Instant> = None;
    let mut last_draw = Instant::now() - IDLE_REDRAW;
    let mut exited = None;
    let mut need_draw = true;
    let result = loop {
        feed.drain();
        if let Some(w) = workload.as_deref_mut() {
            while let Ok(line) = w.output.try_recv() {
                output.push(line);
                feed.new_data = true;
            }
            if output.len() > OUTPUT_LINES {
                output.drain(..output.len() - OUTPUT_LINES);
            }
            if w.terminate.swap(false, Ordering::SeqCst) {
                let pid = nix::unistd::Pid::from_raw(i32::try_from(w.child.id()).unwrap_or(0));
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
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
        let due = last_rebuild.is_none_or(|t| t.elapsed() >= REBUILD_EVERY);
        if feed.new_data && due && !app.paused() {
            let state = if feed.ended || exited.is_some() {
                RunState::Ended
            } else {
                RunState::Live
            };
            if let Some(trace) = feed.builder.trace() {
                app.set_model(build_model(trace, label, state, &output), now_ms(start));
            }
            feed.new_data = false;
            last_rebuild = Some(Instant::now());
            need_draw = true;
        }
        app.tick(now_ms(start));
        if need_draw || last_draw.elapsed() >= IDLE_REDRAW {
            terminal
                .draw(|f| tpuscope_tui::draw_app(f, &mut app))
                .context("drawing the live view")?;
            last_draw = Instant::now();
            need_draw = false;
        }
        if event::poll(POLL).context("reading the terminal")? {
            match event::read().context("reading the terminal")? {
                Event::Key(k) if k.kind != KeyEventKind::Release => {
                    need_draw = true;
                    if app.handle_key(k, now_ms(start)) == Action::Quit
                        || (k.code == KeyCode::Char('q') && !app.editing_filter())
                    {
                        break Ok(exited);
                    }
                }
                Event::Resize(..) => need_draw = true,
                _ => {}
            }
        }
    };
    term::restore();
    result
}

/// `tpuscope attach <pid>`.
pub fn attach(pid: u32, stream: UnixStream) -> Result<i32> {
    let feed = Feed::new(Some(live_stream::spawn_reader(stream)));
    run_loop(&format!("pid {pid}"), feed, None)?;
    Ok(0)
}

/// `tpuscope run` in a terminal: the view of the workload while it runs. When the user leaves
/// the view before the workload ends, its output continues on the terminal.
pub fn run_workload(mut w: Workload) -> Result<std::process::ExitStatus> {
    let feed = Feed::new(None);
    let label = format!("pid {}", w.child.id());
    if let Some(status) = run_loop(&label, feed, Some(&mut w))? {
        return Ok(status);
    }
    // The view is closed but the workload runs on: pass its output through until it ends.
    let mut out = std::io::stdout();
    loop {
        while let Ok(line) = w.output.try_recv() {
            let _ = writeln!(out, "{line}");
        }
        if let Some(status) = w.child.try_wait().context("waiting for the workload")? {
            while let Ok(line) = w.output.try_recv() {
                let _ = writeln!(out, "{line}");
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
