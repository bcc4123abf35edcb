//! Runs a child process with a deadline: doctor must answer even when a Python hangs or a plugin
//! spins in its initializers, and whatif's libtpu compiles may hang or abort.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A probe process that ended by itself.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// "exit status 1" / "killed by signal 11 (SIGSEGV)", with the last line of stderr if any.
    pub fn describe_failure(&self) -> String {
        let how = match (self.status.code(), self.status.signal()) {
            (Some(c), _) => format!("exits with status {c}"),
            (None, Some(s)) => format!("crashed (signal {s}{})", signal_name(s)),
            (None, None) => "ended abnormally".to_string(),
        };
        match self.last_stderr_line() {
            Some(l) => format!("{how}: {l}"),
            None => how,
        }
    }

    pub fn last_stderr_line(&self) -> Option<String> {
        self.stderr
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(|l| truncate(l, 200))
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        4 => ", SIGILL",
        6 => ", SIGABRT",
        7 => ", SIGBUS",
        9 => ", SIGKILL",
        11 => ", SIGSEGV",
        _ => "",
    }
}

pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max).collect();
        t.push('…');
        t
    }
}

pub enum RunError {
    /// The program could not be started (missing, not executable, bad interpreter).
    Spawn(std::io::Error),
    /// Still running at the deadline: killed, with its whole process group.
    TimedOut(Duration),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Spawn(e) => write!(f, "cannot start it: {e}"),
            RunError::TimedOut(d) => write!(f, "no answer within {} s (killed)", d.as_secs()),
        }
    }
}

fn drain(r: Option<impl Read + Send + 'static>) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut v);
        }
        let _ = tx.send(v);
    });
    rx
}

/// Names the tpuscope that started a child `tpuscope __…` command (see [`die_with_parent`]).
const PARENT_VAR: &str = "TPUSCOPE_PARENT_PID";

/// In a child `tpuscope __…` command started by [`run`]: dies with the tpuscope that started it
/// (SIGKILL from the kernel when it ends, however it ends), so that a `whatif` or `doctor`
/// stopped by SIGTERM, Ctrl-C or a crash leaves no libtpu compile running on behind it (the
/// children run in a process group of their own, out of the terminal's reach).
pub fn die_with_parent() {
    let Some(parent) = std::env::var(PARENT_VAR)
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
    else {
        return;
    };
    // Without it the child still ends at its deadline.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    // The parent may have died before that: then this process has another parent already.
    if nix::unistd::getppid().as_raw() != parent {
        std::process::exit(1);
    }
}

/// Runs `cmd` (stdin closed, output captured) for at most `timeout`.
pub fn run(cmd: &mut Command, timeout: Duration) -> Result<Finished, RunError> {
    cmd.env(PARENT_VAR, std::process::id().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so a timeout also ends whatever it started.
        .process_group(0);
    let mut child = cmd.spawn().map_err(RunError::Spawn)?;
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            _ => {
                if let Ok(pid) = i32::try_from(child.id()) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                let _ = child.kill();
                let _ = child.wait();
                return Err(RunError::TimedOut(timeout));
            }
        }
    };
    // A grandchild that kept the pipes open must not hold doctor up.
    let grace = Duration::from_secs(2);
    let text = |rx: mpsc::Receiver<Vec<u8>>| {
        String::from_utf8_lossy(&rx.recv_timeout(grace).unwrap_or_default()).into_owned()
    };
    Ok(Finished {
        status,
        stdout: text(out),
        stderr: text(err),
    })
}
