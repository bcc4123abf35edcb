//! `tpuscope attach <pid>`: the live view of a running process, or (with `--snapshot --json`)
//! its state once, in the shape of `report --format json`.
//!
//! A process started under tpuscope serves a live socket: attach connects to it. Any other
//! process of this user that has a PJRT plugin loaded is attached to in place (`inject.rs`):
//! the collector is loaded into it and hooks the plugin's table until this command exits.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tpuscope_analyzers::present;
use tpuscope_analyzers::report;
use tpuscope_analyzers::units::plural;

use crate::live_stream;
use crate::report_cmd::term::Style;
use crate::report_cmd::text;

mod inject;

/// How long `--snapshot` waits for more of the process's backlog before it gives up (the
/// backlog comes at once: it is the trace file so far, read back by the collector).
const SNAPSHOT_SILENCE: Duration = Duration::from_secs(10);
/// How long `--snapshot` records a process it attached to just now, unless `--duration` says.
const FRESH_SNAPSHOT_WINDOW: Duration = Duration::from_secs(5);
/// How long an attach session whose tpuscope is gone may take to end (its trace drained and
/// closed, its socket removed) before a new attach goes ahead anyway.
const SESSION_END_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, clap::Args)]
pub struct AttachArgs {
    /// The process id (see `tpuscope ps --all`).
    pub pid: u32,
    /// Print the current state once and exit instead of opening the live view.
    #[arg(long)]
    pub snapshot: bool,
    /// With --snapshot: JSON, the shape of `tpuscope report --format json` plus `pid`.
    #[arg(long, requires = "snapshot")]
    pub json: bool,
    /// Stay this many seconds, then leave (detach). Default: until `q`, Ctrl-C or SIGTERM; with
    /// --snapshot of a process not started under tpuscope, 5 s.
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Where to record a process not started under tpuscope (a new file; never replaced).
    /// Default: `tpuscope-attach-<pid>-<time>.tps` in the current directory.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Wait for the process to load a PJRT plugin instead of failing when it has none yet.
    #[arg(long)]
    pub wait: bool,
    /// The PJRT plugin to hook when the process loaded several (a path from `tpuscope ps --all`).
    #[arg(long, value_name = "PATH")]
    pub plugin: Option<PathBuf>,
}

/// When to leave: a deadline, SIGINT/SIGTERM/SIGHUP, or the process's exit.
pub struct Leave {
    deadline: Option<Instant>,
    signalled: Arc<AtomicBool>,
    /// The process attached to.
    pid: u32,
}

impl Leave {
    fn new(pid: u32, duration: Option<Duration>) -> Result<Leave> {
        let signalled = Arc::new(AtomicBool::new(false));
        for sig in [
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
            signal_hook::consts::SIGHUP,
        ] {
            signal_hook::flag::register(sig, Arc::clone(&signalled))
                .context("cannot install signal handlers")?;
        }
        Ok(Leave {
            deadline: duration.map(|d| Instant::now() + d),
            signalled,
            pid,
        })
    }

    /// Whether it is time to go (the live view stays when the process ends: it shows the end).
    pub fn due(&self) -> bool {
        self.signalled.load(Ordering::Relaxed) || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Sleeps until it is time to go or the process has exited.
    fn wait(&self) {
        while !self.due() && alive(self.pid) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Whether process `pid` runs (a zombie has exited: only its parent has not reaped it yet).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| !matches!(state, "Z" | "X" | "x"))
    })
}

pub fn attach(args: &AttachArgs) -> Result<i32> {
    let duration = args
        .duration
        .map(|s| {
            Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .with_context(|| format!("--duration {s}: not a positive number of seconds"))
        })
        .transpose()?;
    let attached_now = match existing_session(args.pid) {
        Existing::Own if args.out.is_some() => bail!(
            "process {} already records to its own trace (it runs under tpuscope): --out applies to processes tpuscope attaches to in place",
            args.pid
        ),
        Existing::Attached { owner } if args.out.is_some() => bail!(
            "process {} is already attached by another tpuscope (pid {owner}), which records it: --out starts a new session; wait until that one ends, or attach without --out to watch it",
            args.pid
        ),
        Existing::Own | Existing::Attached { .. } => None,
        Existing::None => Some(inject::attach_in_place(args)?),
    };
    let (trace, holder) = attached_now.unzip();
    let result = watch(args, duration, trace.as_deref());
    // A session started here ends here: its trace is closed when this command returns.
    if let (Some(holder), Some(trace)) = (holder, &trace) {
        holder.end_session(args.pid, trace);
    }
    result
}

/// The live view, or the state once (`--snapshot`, or without a terminal); `attached_now` is
/// the trace of the session this command started, if it did.
fn watch(
    args: &AttachArgs,
    duration: Option<Duration>,
    attached_now: Option<&Path>,
) -> Result<i32> {
    // A viewer sees the trace as flushed when it connects, then what follows: a snapshot or a
    // report at the end connects at the end.
    let connect = || -> Result<UnixStream> {
        match attached_now {
            Some(_) => inject::connect(args.pid),
            None => live_stream::connect(args.pid).map(|(s, _)| s),
        }
    };
    // The view reads keys from standard input and draws on standard output.
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout())
        && std::io::IsTerminal::is_terminal(&std::io::stdin());
    if args.snapshot || !terminal {
        // Without a terminal for the view: record until it is time to go, then say what was
        // seen. A snapshot of a process attached just now records a few seconds first.
        let window = match duration {
            Some(d) => Some(d),
            None if args.snapshot => attached_now.is_some().then_some(FRESH_SNAPSHOT_WINDOW),
            None => None,
        };
        if window.is_some() || !args.snapshot {
            Leave::new(args.pid, window)?.wait();
        }
        let state = connect().and_then(|stream| {
            live_stream::snapshot(stream, SNAPSHOT_SILENCE).with_context(|| {
                format!(
                    "reading the live socket {} of process {}",
                    tpuscope_core::live::socket_path(args.pid).display(),
                    args.pid
                )
            })
        });
        return match (state, attached_now) {
            (Ok((trace, digest)), _) => print_state(args, &trace, &digest),
            // The process exited while attached: its trace was closed at exit.
            (Err(e), Some(trace)) if !alive(args.pid) => {
                eprintln!(
                    "tpuscope: process {} exited while attached ({}); its state from {}",
                    args.pid,
                    one_line(&e),
                    trace.display()
                );
                let (traces, digests) = crate::report_cmd::read_digested(trace)?;
                match traces.first().zip(digests.first()) {
                    Some((t, digest)) => print_state(args, t, digest),
                    None => bail!("{}: no trace in it", trace.display()),
                }
            }
            (Err(e), _) => Err(e),
        };
    }
    let leave = Leave::new(args.pid, duration)?;
    crate::live_ui::attach(args.pid, connect()?, &leave)
}

/// The innermost cause of an error, for a clause in one line.
fn one_line(e: &anyhow::Error) -> String {
    e.root_cause().to_string()
}

/// What a process's live socket says before an attach.
enum Existing {
    /// No session: attach in place.
    None,
    /// It records itself (it runs under tpuscope).
    Own,
    /// Another `tpuscope attach` (pid `owner`; 0 when its collector did not say) records it.
    Attached { owner: u32 },
}

/// The `tpuscope attach` behind a session's owner: the owner is its `__attach-hold` child.
fn attach_of(owner: u32) -> u32 {
    let hold = std::fs::read(format!("/proc/{owner}/cmdline"))
        .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == b"__attach-hold"));
    match crate::live_ui::parent_of(owner) {
        Some(parent) if hold => parent,
        _ => owner,
    }
}

/// Asks the process's live socket what records it. A session whose `tpuscope attach` has gone
/// is ending (its trace being closed, its socket about to go): waited for, at most
/// [`SESSION_END_WAIT`], so that attaching again right after a detach works.
fn existing_session(pid: u32) -> Existing {
    let socket = tpuscope_core::live::socket_path(pid);
    let deadline = Instant::now() + SESSION_END_WAIT;
    loop {
        if socket.symlink_metadata().is_err() {
            return Existing::None;
        }
        // Refused: the socket of a session that ended (or of a process that died) not yet
        // removed.
        if let Ok(stream) = UnixStream::connect(&socket) {
            match crate::ps::read_manifest(stream) {
                // It answers without a manifest: the viewer says what is wrong with it.
                None => return Existing::Own,
                Some(m) if m.role != "attach" => return Existing::Own,
                Some(m) if m.attach_owner_pid == 0 || alive(m.attach_owner_pid) => {
                    return Existing::Attached {
                        owner: attach_of(m.attach_owner_pid),
                    };
                }
                // Its tpuscope is gone: the session is ending.
                Some(_) => {}
            }
        }
        if Instant::now() >= deadline {
            // Still there: the attach in place finds out what the process holds.
            return Existing::None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The report of `trace`: JSON with `--json`, else its counts and findings.
fn print_state(
    args: &AttachArgs,
    trace: &tpuscope_core::Trace,
    digest: &tpuscope_analyzers::digest::Digest,
) -> Result<i32> {
    let label = format!("pid {} (live)", args.pid);
    let logs = crate::torch_logs::find(None, None, Some(trace), &label);
    let rep = report::build_one_digested(&label, trace, Some(digest), logs);
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut v = serde_json::to_value(&rep).context("serializing the state")?;
        let Some(obj) = v.as_object_mut() else {
            bail!("the report did not serialize to an object");
        };
        obj.insert("pid".into(), args.pid.into());
        let text = serde_json::to_string_pretty(&v).context("serializing the state")?;
        writeln!(out, "{text}").context("writing to stdout")?;
    } else {
        // The report's counts and its findings, worded as `tpuscope report` words them.
        writeln!(
            out,
            "pid {}: {}, {}, {}",
            args.pid,
            plural(rep.compiles.total, "compile", "compiles"),
            plural(rep.compiles.recompiles, "recompile", "recompiles"),
            plural(rep.sync_total(), "host sync", "host syncs"),
        )
        .context("writing to stdout")?;
        for a in rep.traces.iter().filter_map(|t| t.attached.as_ref()) {
            writeln!(out, "{}", a.line()).context("writing to stdout")?;
        }
        let findings = present::findings(&rep);
        write!(
            out,
            "{}",
            text::section_text(&findings, &Style::for_stdout())
        )
        .context("writing to stdout")?;
    }
    Ok(0)
}
