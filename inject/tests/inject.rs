//! The injector on real processes: python3 targets, a C library compiled here, the CPU plugin.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tpuscope_inject::{InjectError, InjectRequest, Injected, inject};

const PYTHON: &str = "/usr/bin/python3";

/// Prints 0..199 every 10 ms, with a worker thread parked in a queue (a futex).
const THREADED: &str = "import queue, threading, time
q = queue.Queue()
threading.Thread(target=q.get, daemon=True).start()
for i in range(200):
    print(i, flush=True)
    time.sleep(0.01)
";
/// The same on the main thread only: it is parked in clock_nanosleep.
const SINGLE: &str = "import time
for i in range(200):
    print(i, flush=True)
    time.sleep(0.01)
";

/// The same with relative sleeps (glibc usleep: nanosleep).
const SINGLE_USLEEP: &str = "import ctypes
libc = ctypes.CDLL(None)
for i in range(200):
    print(i, flush=True)
    libc.usleep(10000)
";

/// A test whose environment is missing: skipped here, a failure in CI (`CI=true`).
fn missing(why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true and the environment is missing: {why}"
    );
    eprintln!("skipped: {why}");
}

fn counter_output() -> String {
    (0..200).map(|i| format!("{i}\n")).collect()
}

/// The test library, compiled from tests/fixtures/test_entry.c.
fn test_library(dir: &Path) -> PathBuf {
    let out = dir.join("libtest_entry.so");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/test_entry.c");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc (needed to build the test library) did not run");
    assert!(status.success(), "cc failed on {}", src.display());
    out
}

struct Target {
    child: Child,
    stdout: Option<JoinHandle<String>>,
}

impl Target {
    /// Starts `python3 -c script` and waits for its first line of output.
    fn python(script: &str) -> Self {
        let mut child = Command::new(PYTHON)
            .args(["-c", script])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 did not start");
        let mut out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = std::thread::spawn(move || {
            let mut all = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match out.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        all.extend_from_slice(&buf[..n]);
                        let _ = tx.send(());
                    }
                }
            }
            String::from_utf8_lossy(&all).into_owned()
        });
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the target printed nothing");
        Self {
            child,
            stdout: Some(stdout),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn finish(mut self) -> (ExitStatus, String) {
        let status = self.child.wait().unwrap();
        (status, self.stdout.take().unwrap().join().unwrap())
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.try_wait();
    }
}

fn request<'a>(library: &'a Path, entry: &'a str, request: &'a [u8]) -> InjectRequest<'a> {
    InjectRequest {
        library,
        entry,
        request,
        reply_cap: 256,
        timeout: Duration::from_secs(5),
    }
}

fn inject_pong(pid: u32, lib: &Path) -> Injected {
    let got = inject(pid, &request(lib, "test_entry", b"hello")).unwrap();
    assert_eq!(got.ret, 7);
    assert_eq!(got.reply, "pong:hello");
    got
}

#[test]
fn a_threaded_target_runs_the_entry_and_finishes_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let lib = test_library(dir.path());
    let target = Target::python(THREADED);
    let pid = target.pid();
    std::thread::sleep(Duration::from_millis(200));
    let first = inject_pong(pid, &lib);
    // A worker parked in its futex is preferred to the main thread.
    assert_ne!(
        first.thread, pid,
        "the main thread was chosen over the parked worker"
    );
    // Again: the library is loaded already; the same works twice.
    let second = inject_pong(pid, &lib);
    eprintln!(
        "stall (threaded target, thread {}): first {:?}, second {:?}",
        first.thread, first.stall, second.stall
    );
    let (status, out) = target.finish();
    assert!(status.success(), "target exit: {status}");
    assert_eq!(out, counter_output());
}

#[test]
fn a_single_threaded_target_sleeping_is_interrupted_and_resumes_its_sleep() {
    let dir = tempfile::tempdir().unwrap();
    let lib = test_library(dir.path());
    let target = Target::python(SINGLE);
    let pid = target.pid();
    std::thread::sleep(Duration::from_millis(200));
    let got = inject_pong(pid, &lib);
    assert_eq!(got.thread, pid);
    eprintln!(
        "stall (single-threaded target in clock_nanosleep): {:?}",
        got.stall
    );
    let (status, out) = target.finish();
    assert!(status.success(), "target exit: {status}");
    assert_eq!(out, counter_output());
}

#[test]
fn a_missing_library_or_entry_is_reported_and_the_target_is_unharmed() {
    let dir = tempfile::tempdir().unwrap();
    let lib = test_library(dir.path());
    let target = Target::python(THREADED);
    let pid = target.pid();
    let missing = dir.path().join("no_such_lib.so");
    match inject(pid, &request(&missing, "test_entry", b"x")) {
        Err(e @ InjectError::DlopenFailed { .. }) => {
            let text = e.to_string();
            assert!(text.contains("no_such_lib.so"), "{text}");
            assert!(text.contains("No such file"), "no dlerror text: {text}");
        }
        other => panic!("expected DlopenFailed, got {other:?}"),
    }
    match inject(pid, &request(&lib, "no_such_entry", b"x")) {
        Err(e @ InjectError::EntryMissing { .. }) => {
            assert!(e.to_string().contains("no_such_entry"), "{e}");
        }
        other => panic!("expected EntryMissing, got {other:?}"),
    }
    let (status, out) = target.finish();
    assert!(status.success(), "target exit: {status}");
    assert_eq!(out, counter_output());
}

#[test]
fn a_target_traced_by_another_tracer_is_refused() {
    if Command::new("strace").arg("-V").output().is_err() {
        missing("strace is not installed");
        return;
    }
    let mut target = Command::new(PYTHON)
        .args(["-c", "import time; time.sleep(20)"])
        .spawn()
        .unwrap();
    let pid = target.id();
    let mut strace = Command::new("strace")
        .args(["-o", "/dev/null", "-p", &pid.to_string()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let traced = || {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap()
            .contains(&format!("TracerPid:\t{}", strace.id()))
    };
    while !traced() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let got = inject(pid, &request(Path::new("/nonexistent.so"), "e", b""));
    let _ = strace.kill();
    let _ = strace.wait();
    let _ = target.kill();
    let _ = target.wait();
    match got {
        Err(InjectError::AlreadyTraced { tracer, .. }) => assert_eq!(tracer, strace.id()),
        other => panic!("expected AlreadyTraced, got {other:?}"),
    }
}

#[test]
fn a_call_that_times_out_is_abandoned_and_the_target_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let lib = test_library(dir.path());
    // The main thread is the only one: it runs slow_entry (a 30 s sleep) until the timeout.
    // Its own sleeps are relative (usleep), which the kernel restarts from the thread's restart
    // block (Python's time.sleep sleeps to an absolute time and needs none).
    let target = Target::python(SINGLE_USLEEP);
    let pid = target.pid();
    std::thread::sleep(Duration::from_millis(200));
    let mut req = request(&lib, "slow_entry", b"");
    req.timeout = Duration::from_millis(500);
    let started = Instant::now();
    let got = inject(pid, &req);
    eprintln!("timed-out injection returned after {:?}", started.elapsed());
    match got {
        Err(e @ InjectError::TimedOut { .. }) => assert!(e.to_string().contains("restored"), "{e}"),
        other => panic!("expected TimedOut, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    // Its own sleep resumed, not the rest of slow_entry's 30 s.
    let finishing = Instant::now();
    let (status, out) = target.finish();
    assert!(
        finishing.elapsed() < Duration::from_secs(15),
        "took {:?}",
        finishing.elapsed()
    );
    assert!(status.success(), "target exit: {status}");
    assert_eq!(out, counter_output());
}

#[test]
fn a_dead_pid_is_no_such_process() {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let lib = Path::new("/nonexistent.so");
    match inject(pid, &request(lib, "test_entry", b"")) {
        Err(InjectError::NoSuchProcess { pid: p }) => assert_eq!(p, pid),
        other => panic!("expected NoSuchProcess, got {other:?}"),
    }
}

#[test]
fn a_target_exiting_during_the_attach_is_a_clean_error() {
    // Busy (no parked thread) for 300 ms after its first line, then exits: the scan is running.
    let target = Target::python(
        "import time\nprint('busy', flush=True)\nt = time.time() + 0.3\nwhile time.time() < t: pass\n",
    );
    let pid = target.pid();
    let started = Instant::now();
    let got = inject(pid, &request(Path::new("/nonexistent.so"), "e", b""));
    assert!(
        matches!(
            got,
            Err(InjectError::TargetExited { .. } | InjectError::Zombie { .. })
        ),
        "expected TargetExited, got {got:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn another_users_process_is_refused() {
    if !nix_is_root() {
        missing("not root, cannot start a process as another uid");
        return;
    }
    let mut child = Command::new("sleep").arg("10").uid(65534).spawn().unwrap();
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(100));
    let got = tpuscope_inject::check_target(pid);
    let injected = inject(pid, &request(Path::new("/nonexistent.so"), "e", b""));
    let _ = child.kill();
    let _ = child.wait();
    match got {
        Err(e @ InjectError::OtherUser { .. }) => {
            assert!(e.to_string().contains("uid 65534"), "{e}");
        }
        other => panic!("expected OtherUser, got {other:?}"),
    }
    assert!(
        matches!(injected, Err(InjectError::OtherUser { .. })),
        "{injected:?}"
    );
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

#[test]
fn a_busy_target_without_a_parked_thread_is_refused_in_bounded_time() {
    let mut child = Command::new(PYTHON)
        .args(["-c", "while True: pass"])
        .spawn()
        .unwrap();
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let got = inject(pid, &request(Path::new("/nonexistent.so"), "e", b""));
    let took = started.elapsed();
    let alive = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    match got {
        Err(e @ InjectError::NoParkedThread { .. }) => {
            assert!(e.to_string().contains("retry"), "{e}")
        }
        other => panic!("expected NoParkedThread, got {other:?}"),
    }
    assert!(took < Duration::from_secs(4), "took {took:?}");
    assert!(alive, "the busy target died");
}

/// The CPU plugin of the jax env, and that env's python; `None` (with the reason printed) when
/// the env is missing.
fn cpu_plugin_env() -> Option<(PathBuf, PathBuf)> {
    let home = std::env::var_os("HOME")?;
    let python = Path::new(&home).join(".cache/tpuscope/envs/jax/bin/python");
    if !python.exists() {
        missing(&format!("{} is missing", python.display()));
        return None;
    }
    let plugin = match std::env::var_os("TPUSCOPE_TEST_CPU_PLUGIN") {
        Some(p) => PathBuf::from(p),
        None => {
            let out = Command::new(&python)
                .args([
                    "-c",
                    "import lammps_jax_pjrt_cpu as m, os; print(os.path.join(os.path.dirname(m.__file__), 'pjrt_c_api_cpu_plugin.so'))",
                ])
                .output()
                .ok()?;
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
    };
    if !plugin.is_file() {
        missing(&format!("the CPU plugin {} is missing", plugin.display()));
        return None;
    }
    Some((python, plugin))
}

/// A JAX loop on the CPU plugin (registered as the platform `tpuscope`, as the cli tests do).
const JAX_LOOP: &str = "import time, jax, jax.numpy as jnp
f = jax.jit(lambda x: x * 0.5 + 1.0)
x = jnp.zeros(8)
for i in range(150):
    x = f(x)
    print(i, float(x.sum()), flush=True)
    time.sleep(0.01)
";

fn jax_command(python: &Path, plugin: &Path) -> Command {
    let mut c = Command::new(python);
    c.args(["-c", JAX_LOOP])
        .env(
            "PJRT_NAMES_AND_LIBRARY_PATHS",
            format!("tpuscope:{}", plugin.display()),
        )
        .env("JAX_PLATFORMS", "tpuscope");
    c
}

#[test]
fn a_jax_loop_on_the_cpu_plugin_runs_the_entry_and_its_output_is_unchanged() {
    let Some((python, plugin)) = cpu_plugin_env() else {
        return;
    };
    let direct = jax_command(&python, &plugin).output().unwrap();
    assert!(
        direct.status.success(),
        "{}",
        String::from_utf8_lossy(&direct.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let lib = test_library(dir.path());
    let mut child = jax_command(&python, &plugin)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 1];
    out.read_exact(&mut first).unwrap();
    let reader = std::thread::spawn(move || {
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        rest
    });
    let mut stalls: Vec<Duration> = (0..5)
        .map(|_| {
            let got = inject_pong(child.id(), &lib);
            std::thread::sleep(Duration::from_millis(50));
            got.stall
        })
        .collect();
    stalls.sort();
    eprintln!(
        "stall (JAX on the CPU plugin, 5 injections): median {:?}, max {:?}",
        stalls[2], stalls[4]
    );
    let status = child.wait().unwrap();
    let all = format!("{}{}", first[0] as char, reader.join().unwrap());
    assert!(status.success(), "target exit: {status}");
    assert_eq!(all, String::from_utf8_lossy(&direct.stdout));
}

#[test]
fn pjrt_plugins_lists_the_mapped_cpu_plugin_and_nothing_in_sleep() {
    let mut sleep = Command::new("sleep").arg("10").spawn().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let none = tpuscope_inject::pjrt_plugins(sleep.id());
    let _ = sleep.kill();
    let _ = sleep.wait();
    assert_eq!(none.unwrap(), vec![]);

    let Some((python, plugin)) = cpu_plugin_env() else {
        return;
    };
    let script = format!(
        "import ctypes, time\nctypes.CDLL({:?})\nprint('ready', flush=True)\ntime.sleep(30)\n",
        plugin.display().to_string()
    );
    let mut child = Command::new(&python)
        .args(["-c", &script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = [0u8; 6];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut line)
        .unwrap();
    let started = Instant::now();
    let found = tpuscope_inject::pjrt_plugins(child.id());
    eprintln!("pjrt_plugins took {:?}", started.elapsed());
    let _ = child.kill();
    let _ = child.wait();
    let found = found.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        std::fs::canonicalize(&found[0].path).unwrap(),
        std::fs::canonicalize(&plugin).unwrap()
    );
    assert!(!found[0].is_tpuscope);
}
