//! Attaching in place to a process that was not started under tpuscope: find the PJRT plugin it
//! loaded, load the collector into it (`tpuscope-inject`) and call `tpuscope_attach`, which
//! hooks the plugin's table and records until this process exits.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use tpuscope_inject::{InjectRequest, MappedPlugin};

use super::AttachArgs;
use crate::locate;

/// The bound on each wait for the target during the injection.
const INJECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often `--wait` looks for a plugin.
const WAIT_POLL: Duration = Duration::from_millis(250);
/// How long the collector's socket may take to appear after the attach returned.
const SOCKET_WAIT: Duration = Duration::from_secs(3);
/// How long a session may take to close its trace once `tpuscope attach` ends it.
const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// The process a session in place watches: the session ends when it exits. A child of ours
/// (`tpuscope __attach-hold`) that lives until we close its standard input, or die: ending the
/// session is then ours to do, and to wait for, before we exit.
pub struct Holder {
    child: Child,
}

impl Holder {
    fn start() -> Result<Holder> {
        let exe = std::env::current_exe().context("cannot find tpuscope's own executable")?;
        let child = Command::new(exe)
            .arg("__attach-hold")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start the process an attach session watches")?;
        Ok(Holder { child })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Ends the session in `pid` and waits until its trace is closed: a viewer connected
    /// before the end is sent the rest of the trace, its end record last, and then the end of
    /// the stream (at most [`CLOSE_WAIT`]). Says so when the wait runs out; nothing to wait for
    /// when the process is gone or its session ended already.
    pub fn end_session(mut self, pid: u32, trace: &Path) {
        let viewer = UnixStream::connect(tpuscope_core::live::socket_path(pid)).ok();
        self.release();
        let Some(mut viewer) = viewer else { return };
        let deadline = Instant::now() + CLOSE_WAIT;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || viewer.set_read_timeout(Some(left)).is_err() {
                break;
            }
            match std::io::Read::read(&mut viewer, &mut buf) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        eprintln!(
            "tpuscope: process {pid} is still closing its trace {} ({} s after the detach); it ends on its own",
            trace.display(),
            CLOSE_WAIT.as_secs()
        );
    }

    /// Closes the holder's input and reaps it.
    fn release(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.release();
    }
}

/// Starts a session in the target; returns the trace it records to and the process whose exit
/// ends it. The session's live socket is open when this returns (see [`connect`]).
pub fn attach_in_place(args: &AttachArgs) -> Result<(PathBuf, Holder)> {
    let pid = args.pid;
    tpuscope_inject::check_target(pid).map_err(|e| anyhow!(e))?;
    let plugin = choose_plugin(pid, args)?;
    let collector = locate::collector_path()?;
    let agent = locate::agent_dir().ok();
    let out = trace_path(args.out.as_deref(), pid)?;
    // For the trace's manifest; the agent confirms it later.
    let frontend = crate::ps::frontend_from_maps(pid);
    let holder = Holder::start()?;
    let mut request = format!(
        "plugin={}\nout={}\nowner={}\ncollector={}\n",
        plugin.display(),
        out.display(),
        holder.pid(),
        collector.display()
    );
    if let Some(a) = &agent {
        request.push_str(&format!("agent={}\n", a.display()));
    }
    request.push_str(&format!(
        "socket_dir={}\n",
        tpuscope_core::live::socket_dir().display()
    ));
    if let Some(f) = frontend {
        request.push_str(&format!("frontend={f}\n"));
    }
    let started = Instant::now();
    let done = tpuscope_inject::inject(
        pid,
        &InjectRequest {
            library: &collector,
            entry: "tpuscope_attach",
            request: request.as_bytes(),
            reply_cap: 1024,
            timeout: INJECT_TIMEOUT,
        },
    )
    .map_err(|e| anyhow!(e))?;
    let trace = match done.ret {
        0 | 1 => done
            .reply
            .strip_prefix("trace=")
            .map(PathBuf::from)
            .unwrap_or_else(|| out.clone()),
        _ => bail!(
            "the collector could not attach to process {pid}: {}",
            done.reply
        ),
    };
    eprintln!(
        "tpuscope: attached to pid {pid} ({}) in {} ms; its thread {} was stopped {:.2} ms; \
         recording to {}; tpuscope detaches when it exits",
        plugin.file_name().unwrap_or_default().to_string_lossy(),
        started.elapsed().as_millis(),
        done.thread,
        done.stall.as_secs_f64() * 1e3,
        trace.display()
    );
    Ok((trace, holder))
}

/// The plugin to hook: `--plugin`, else the only one the process mapped. With `--wait`, waits
/// for the process to map one.
fn choose_plugin(pid: u32, args: &AttachArgs) -> Result<PathBuf> {
    let mut said_waiting = false;
    loop {
        // The collector itself is mapped after an earlier attach (it stays loaded), or when the
        // process runs under tpuscope without a live socket: the collector tells those apart.
        let mapped = tpuscope_inject::pjrt_plugins(pid).map_err(|e| anyhow!(e))?;
        let plugins: Vec<&MappedPlugin> = mapped.iter().filter(|p| !p.is_tpuscope).collect();
        if let Some(want) = &args.plugin {
            return plugins
                .iter()
                .find(|p| p.path == *want || p.path.file_name() == want.file_name())
                .map(|p| p.path.clone())
                .ok_or_else(|| {
                    anyhow!(
                        "process {pid} has not loaded {} (its PJRT plugins: {})",
                        want.display(),
                        list(&plugins)
                    )
                });
        }
        match plugins.as_slice() {
            [one] => return Ok(one.path.clone()),
            [] if args.wait => {
                if !said_waiting {
                    eprintln!("tpuscope: waiting for process {pid} to load a PJRT plugin…");
                    said_waiting = true;
                }
                std::thread::sleep(WAIT_POLL);
                tpuscope_inject::check_target(pid).map_err(|e| anyhow!(e))?;
            }
            [] => bail!(
                "process {pid} has no PJRT plugin loaded (yet): frontends load it at their first device use; pass --wait to wait for it, or start the job under `tpuscope run -- <command>` (JAX's built-in CPU backend and torch_xla's PJRT_DEVICE=CPU use no plugin: nothing to attach to)"
            ),
            many => bail!(
                "process {pid} loaded {} PJRT plugins ({}): choose one with --plugin",
                many.len(),
                list(many)
            ),
        }
    }
}

fn list(plugins: &[&MappedPlugin]) -> String {
    if plugins.is_empty() {
        return "none".into();
    }
    plugins
        .iter()
        .map(|p| p.path.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--out` as an absolute path (the target resolves relative paths against its own directory),
/// refused if it exists; else a new name in the current directory.
fn trace_path(out: Option<&Path>, pid: u32) -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("reading the current directory")?;
    let path = match out {
        Some(p) => cwd.join(p),
        None => {
            let secs = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            cwd.join(format!("tpuscope-attach-{pid}-{secs}.tps"))
        }
    };
    if path.symlink_metadata().is_ok() {
        bail!(
            "{} exists: tpuscope never replaces a file; choose another --out",
            path.display()
        );
    }
    Ok(path)
}

/// The session's live socket, which the collector binds while it attaches.
pub fn connect(pid: u32) -> Result<UnixStream> {
    let path = tpuscope_core::live::socket_path(pid);
    let deadline = Instant::now() + SOCKET_WAIT;
    loop {
        match UnixStream::connect(&path) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                return Err(e).with_context(|| {
                    format!(
                        "process {pid} was attached but its live socket {} did not open",
                        path.display()
                    )
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}
