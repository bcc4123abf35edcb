//! Targets for the `tpuscope attach` tests: real workloads started WITHOUT tpuscope (as a user
//! starts a training job), each printing `READY …` once warmed up and looping until its stop
//! file exists, then printing a `RESULT` line that does not depend on how long it looped.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use super::{show, tpuscope, venv_python, workload};

/// How long a target may take to warm up (imports, first compile) on a loaded 2-core machine.
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// How long a detached session may take to close its trace (a loaded 2-core machine).
pub const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// The trace of a session that detached, read once its end record is there, at most
/// `timeout` after the call. The collector removes the session's socket before it drains
/// the queue and writes the end record, so a trace read as soon as the socket is gone can
/// still be open.
pub fn closed_trace(trace: &Path, timeout: Duration) -> tpuscope_core::reader::Trace {
    let start = Instant::now();
    loop {
        let t = tpuscope_core::reader::read_trace_file(trace).unwrap();
        if t.end.is_some() || start.elapsed() > timeout {
            return t;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running target.
pub struct Target {
    child: Child,
    lines: Receiver<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
    /// Holds the stop file, traces and the socket directory.
    pub dir: tempfile::TempDir,
    stdout: Vec<String>,
}

/// The command line of a target: its python, script and environment (without the stop file).
#[derive(Clone)]
pub struct Recipe {
    pub env_name: &'static str,
    pub script: &'static str,
    pub env: Vec<(String, String)>,
}

impl Recipe {
    /// `attach_jax.py` on the jax env's CPU plugin, chosen by environment as a user would.
    pub fn jax() -> Recipe {
        let plugin = super::cpu_plugin("jax");
        Recipe {
            env_name: "jax",
            script: "attach_jax.py",
            env: vec![
                (
                    "PJRT_NAMES_AND_LIBRARY_PATHS".into(),
                    format!("cpuplugin:{}", plugin.display()),
                ),
                ("JAX_PLATFORMS".into(), "cpuplugin".into()),
            ],
        }
    }

    fn command(&self, stop: &Path, xdg: &Path) -> Command {
        let mut c = Command::new(venv_python(self.env_name));
        c.arg(workload(self.script))
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("ATTACH_STOP_FILE", stop)
            .env("XDG_RUNTIME_DIR", xdg)
            .env_remove("PYTHONPATH")
            .env("TPU_SKIP_MDS_QUERY", "1");
        c
    }

    /// A plain run of the recipe that stops right after warming up: its stdout, the reference
    /// an attached run must print exactly.
    pub fn plain_stdout(&self) -> String {
        let dir = tempfile::tempdir().unwrap();
        let stop = dir.path().join("stop");
        std::fs::write(&stop, "").unwrap();
        let out = self.command(&stop, dir.path()).output().unwrap();
        assert!(out.status.success(), "plain run failed: {}", show(&out));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Starts the target and waits for its READY line.
    pub fn start(&self) -> Target {
        let mut t = self.spawn();
        t.wait_ready();
        t
    }

    /// Starts the target without waiting for it.
    pub fn spawn(&self) -> Target {
        let dir = tempfile::tempdir().unwrap();
        let stop = dir.path().join("stop");
        let mut child = self
            .command(&stop, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Target {
            child,
            lines,
            stderr: Some(stderr),
            dir,
            stdout: Vec::new(),
        }
    }

    /// The value of one environment variable of the recipe.
    pub fn var(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// What a target did: its exit status, stdout and stderr.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Finished {
    /// The run exited 0 and printed what a run nobody attached to prints (`reference`), and the
    /// collector said its one line on the workload's stderr once per attach session.
    pub fn assert_like_plain_run(&self, reference: &str, sessions: usize) {
        assert!(self.status.success(), "{self:?}");
        assert_eq!(
            self.stdout, reference,
            "the attached run printed something else"
        );
        assert_eq!(
            self.stderr
                .matches("tpuscope: attached; tracing to")
                .count(),
            sessions,
            "{}",
            self.stderr
        );
    }
}

impl Target {
    /// Waits for the READY line.
    pub fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            match self.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    let ready = line.starts_with("READY");
                    self.stdout.push(line);
                    if ready {
                        return;
                    }
                }
                Err(_) if start.elapsed() > READY_TIMEOUT => {
                    let _ = self.child.kill();
                    panic!("the target never got ready: {:?}", self.finish());
                }
                Err(_) => {
                    if self.child.try_wait().unwrap().is_some() {
                        panic!("the target exited before it got ready: {:?}", self.finish());
                    }
                }
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `tpuscope attach <pid> ARGS…` with the target's socket directory.
    pub fn attach(&self, args: &[&str]) -> Output {
        Command::new(tpuscope())
            .arg("attach")
            .arg(self.pid().to_string())
            .args(args)
            .env("XDG_RUNTIME_DIR", self.dir.path())
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// The live socket of an attach session (gone once it detached).
    pub fn socket(&self) -> PathBuf {
        self.dir
            .path()
            .join("tpuscope")
            .join(format!("{}.sock", self.pid()))
    }

    /// Waits until the attach session ended (its socket removed), at most `timeout`.
    pub fn wait_detached(&self, timeout: Duration) -> bool {
        let start = Instant::now();
        while self.socket().exists() {
            if start.elapsed() > timeout {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Stops the loop and waits for the target to exit.
    pub fn finish(&mut self) -> Finished {
        std::fs::write(self.path("stop"), "").unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                break self.child.wait().unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.stdout.push(line);
        }
        let mut stdout = std::mem::take(&mut self.stdout).join("\n");
        stdout.push('\n');
        Finished {
            status,
            stdout,
            stderr: self
                .stderr
                .take()
                .and_then(|h| h.join().ok())
                .unwrap_or_default(),
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
