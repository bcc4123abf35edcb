//! The live socket of a real JAX workload (XLA CPU plugin behind the collector,
//! `tests/workloads/live_wait.py`): viewers attached mid-run receive the trace file's bytes,
//! history, an end-of-backlog mark and live; a viewer that does not read neither holds the
//! workload nor loses anything; another user is refused; the socket is private;
//! `TPUSCOPE_LIVE=0` serves nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{collector_so, env_cpu_plugin, env_python};
use tpuscope_core::event::Record;
use tpuscope_core::live::LiveDecoder;
use tpuscope_core::{Completeness, Trace, read_trace};

const GATE_TIMEOUT: Duration = Duration::from_secs(60);

/// `live_wait.py` under the collector, stopped at its first gate.
struct Workload {
    child: Option<Child>,
    gates: tempfile::TempDir,
    _out: tempfile::TempDir,
    trace: PathBuf,
    pid: u32,
}

impl Workload {
    fn start(steps: u32, env: &[(&str, &str)]) -> Workload {
        let so = collector_so();
        let names = format!("tpuscope:{}", so.display());
        let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/workloads/live_wait.py");
        let gates = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let trace = out.path().join("t.tps");
        let mut cmd = Command::new(env_python("jax"));
        cmd.arg(script)
            .env("TPUSCOPE_QUIET", "1")
            .env("PYTHONPATH", &agent)
            .env("TPUSCOPE_COLLECTOR", &so)
            .env("PJRT_NAMES_AND_LIBRARY_PATHS", &names)
            .env("JAX_PLATFORMS", "tpuscope")
            .env("TPUSCOPE_REAL_PLUGIN", env_cpu_plugin("jax"))
            .env("TPUSCOPE_OUT", &trace)
            .env("LIVE_GATE_DIR", gates.path())
            .env("LIVE_STEPS", steps.to_string())
            .env_remove("TPUSCOPE_SETUP")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = cmd.spawn().unwrap();
        let pid = child.id();
        let mut w = Workload {
            child: Some(child),
            gates,
            _out: out,
            trace,
            pid,
        };
        w.wait_gate("ready");
        w
    }

    /// Waits until the workload writes gate file `name`; fails if it exits first or times out.
    fn wait_gate(&mut self, name: &str) {
        let path = self.gates.path().join(name);
        let start = Instant::now();
        while !path.exists() {
            let child = self.child.as_mut().unwrap();
            if child.try_wait().unwrap().is_some() || start.elapsed() > GATE_TIMEOUT {
                let _ = child.kill();
                let out = self.child.take().unwrap().wait_with_output().unwrap();
                panic!(
                    "the workload did not reach gate {name} ({:?}, {:?}):\n--- stdout\n{}\n--- stderr\n{}",
                    out.status,
                    start.elapsed(),
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn open_gate(&self, name: &str) {
        std::fs::write(self.gates.path().join(name), b"").unwrap();
    }

    /// Opens the remaining gates and waits for a clean exit; returns the trace file's bytes.
    fn finish(&mut self) -> Vec<u8> {
        self.open_gate("go");
        self.open_gate("exit");
        let mut child = self.child.take().unwrap();
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > GATE_TIMEOUT {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("RESULT live_wait"),
            "workload failed ({:?}):\n--- stdout\n{stdout}\n--- stderr\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read(&self.trace).unwrap()
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Connects a viewer now; its stream is read to the end on a thread.
fn viewer(socket: &Path) -> JoinHandle<Vec<u8>> {
    let mut s =
        UnixStream::connect(socket).unwrap_or_else(|e| panic!("connect {}: {e}", socket.display()));
    s.set_read_timeout(Some(GATE_TIMEOUT)).unwrap();
    std::thread::spawn(move || {
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        got
    })
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

/// A viewer's stream split at its end-of-backlog mark: (the backlog's length, the stream with
/// the mark taken out).
fn split_mark(got: &[u8]) -> (usize, Vec<u8>) {
    let mut d = LiveDecoder::new(1 << 30);
    let p = d.push(got).unwrap();
    assert!(
        p.backlog_end,
        "no end-of-backlog mark in {} bytes",
        got.len()
    );
    let backlog = usize::try_from(d.backlog_end().unwrap()).unwrap();
    let mark = tpuscope_core::live::backlog_end_frame(backlog as u64);
    assert_eq!(&got[backlog..p.consumed], &mark[..]);
    let mut rest = got[..backlog].to_vec();
    rest.extend_from_slice(&got[p.consumed..]);
    (backlog, rest)
}

#[test]
fn two_viewers_attached_mid_run_receive_the_trace_history_and_live() {
    let mut w = Workload::start(600, &[]);
    let socket = tpuscope_core::live::socket_path(w.pid);
    // The socket directory is private, the socket is the user's alone.
    assert_eq!(mode(socket.parent().unwrap()), 0o700);
    assert_eq!(mode(&socket), 0o600);
    assert!(
        std::fs::symlink_metadata(&socket)
            .unwrap()
            .file_type()
            .is_socket()
    );
    let history_at_attach = std::fs::metadata(&w.trace).unwrap().len();
    let viewers = [viewer(&socket), viewer(&socket)];
    w.open_gate("go");
    w.wait_gate("done");
    let file = w.finish();
    assert!(!socket.exists(), "the socket is removed at exit");
    let file_trace = read_trace(&file).unwrap();
    assert_eq!(file_trace.completeness, Completeness::Complete);
    let compiles = |t: &Trace| {
        t.events
            .iter()
            .filter(|r| matches!(r, Record::Compile(_)))
            .count()
    };
    // Live frames, not only history: the three recompiles of phase 2 came after the viewers.
    assert!(compiles(&file_trace) >= 4, "{}", compiles(&file_trace));
    assert!(file.len() as u64 > 10 * history_at_attach);
    for (i, v) in viewers.into_iter().enumerate() {
        let got = v.join().unwrap();
        // The backlog is the file as it was at connect time (the workload was paused at its
        // gate: nothing but clock records since).
        let (backlog, stream) = split_mark(&got);
        assert!(
            backlog as u64 >= history_at_attach && backlog < file.len() / 4,
            "viewer {i}: backlog {backlog}, file {} at attach, {} at the end",
            history_at_attach,
            file.len()
        );
        // With the mark taken out, byte for byte the file: nothing lost, nothing added.
        assert!(
            stream == file,
            "viewer {i}: {} vs {} bytes",
            stream.len(),
            file.len()
        );
        let t = read_trace(&stream).unwrap();
        assert_eq!(t.completeness, Completeness::Complete, "viewer {i}");
        assert_eq!(t.events, file_trace.events, "viewer {i}");
    }
}

#[test]
fn a_viewer_that_does_not_read_holds_the_workload_back_in_nothing_and_loses_nothing() {
    // Phase 2 writes over 1 MB (packed: 3000 steps), far past the socket's own buffer (about
    // 200 KiB), while the viewer reads nothing.
    let mut w = Workload::start(3000, &[]);
    let socket = tpuscope_core::live::socket_path(w.pid);
    let mut stalled = UnixStream::connect(&socket).unwrap();
    w.open_gate("go");
    // A workload that waited on the viewer would never get here.
    let t0 = Instant::now();
    w.wait_gate("done");
    eprintln!("phase 2 with a stalled viewer: {:?}", t0.elapsed());
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        stalled.set_read_timeout(Some(GATE_TIMEOUT)).unwrap();
        stalled.read_to_end(&mut got).unwrap();
        got
    });
    let file = w.finish();
    let got = reader.join().unwrap();
    assert!(file.len() > 1 << 20, "{}", file.len());
    // It caught up from the file: everything, in order.
    let (_, stream) = split_mark(&got);
    assert!(stream == file, "{} vs {} bytes", stream.len(), file.len());
}

/// A user to connect as: `tpuscope-test`, created when absent. `None` (with the reason) when
/// this is not root or the user cannot be made.
fn other_user() -> Result<(u32, u32), String> {
    if tpuscope_core::live::current_uid() != Some(0) {
        return Err("not running as root".into());
    }
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id")
            .args([flag, "tpuscope-test"])
            .output()
            .ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let made = Command::new("useradd")
            .args(["-M", "-r", "-s", "/bin/false", "tpuscope-test"])
            .output()
            .map_err(|e| format!("useradd: {e}"))?;
        // Another test process may have created it meanwhile: only the lookup decides.
        if id("-u").is_none() {
            return Err(format!(
                "useradd tpuscope-test failed: {}",
                String::from_utf8_lossy(&made.stderr)
            ));
        }
    }
    Ok((id("-u").unwrap(), id("-g").unwrap()))
}

/// What a client of `socket` reads first, run as `uid:gid`: "denied", or the byte count.
fn connect_as(python: &Path, socket: &Path, ids: Option<(u32, u32)>) -> String {
    const CLIENT: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
try:
    s.connect(sys.argv[1])
except PermissionError:
    print("denied")
    sys.exit(0)
n = 0
while n < 16:
    b = s.recv(65536)
    if not b:
        break
    n += len(b)
print(n)
"#;
    let mut cmd = Command::new(python);
    cmd.args(["-c", CLIENT]).arg(socket).current_dir("/");
    if let Some((uid, gid)) = ids {
        cmd.uid(uid).gid(gid);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn another_user_is_refused() {
    let ids = match other_user() {
        Ok(ids) => ids,
        Err(why) => {
            eprintln!("SKIPPED another_user_is_refused: {why}");
            return;
        }
    };
    // A Python the other user can run (the test envs live in root's home).
    let python = PathBuf::from("/usr/bin/python3");
    if !python.is_file() {
        eprintln!("SKIPPED another_user_is_refused: no /usr/bin/python3 for the other user");
        return;
    }
    let xdg = tempfile::tempdir().unwrap();
    let mut w = Workload::start(0, &[("XDG_RUNTIME_DIR", xdg.path().to_str().unwrap())]);
    let dir = xdg.path().join("tpuscope");
    let socket = dir.join(format!("{}.sock", w.pid));
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&socket), 0o600);
    // The file system keeps the other user out first.
    assert_eq!(connect_as(&python, &socket, Some(ids)), "denied");
    // With the permissions opened up, the collector's own peer check closes the connection
    // before a byte is sent; the same client as this user gets the trace header.
    for p in [xdg.path(), &dir] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    assert_eq!(connect_as(&python, &socket, Some(ids)), "0");
    let ours: usize = connect_as(&python, &socket, None).parse().unwrap();
    assert!(ours >= 16, "{ours}");
    w.finish();
}

#[test]
fn live_off_serves_nothing_and_still_traces() {
    let xdg = tempfile::tempdir().unwrap();
    let mut w = Workload::start(
        0,
        &[
            ("XDG_RUNTIME_DIR", xdg.path().to_str().unwrap()),
            ("TPUSCOPE_LIVE", "0"),
        ],
    );
    assert!(
        !xdg.path().join("tpuscope").exists(),
        "no socket directory when live is off"
    );
    let file = w.finish();
    let t = read_trace(&file).unwrap();
    assert_eq!(t.completeness, Completeness::Complete);
    assert!(t.events.iter().any(|r| matches!(r, Record::Compile(_))));
}
