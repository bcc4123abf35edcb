//! The tracer dies (SIGKILL) at every instant of an injection: the target never does, and every
//! thread gets exactly its own state back. The target (tests/fixtures/pinned_target.c) checks
//! the general and vector registers of its threads across each blocking read; the tracer is this
//! test binary run again as a child (`tracer_child`), killed after a delay that sweeps the
//! whole injection: before the seize, while `mmap` maps the stub page, while the stub runs
//! `dlopen` and an entry that naps 20 ms, at the hand-off, during the restore, after the detach.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use tpuscope_inject::{InjectRequest, inject};

const CHILD_ENV: &str = "TPUSCOPE_TRACER_CHILD";

fn compile(dir: &Path, fixture: &str, out: &str, shared: bool) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture);
    let out = dir.join(out);
    let mut cc = Command::new("cc");
    if shared {
        cc.args(["-shared", "-fPIC"]);
    }
    let status = cc
        .args(["-O1", "-pthread", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("cc (needed to build the test fixtures) did not run");
    assert!(status.success(), "cc failed on {}", src.display());
    out
}

/// The tracer, run as a child of the test: injects the library named by the environment into
/// the pid it names. Says "go" just before it starts, so that the parent times its kill from
/// there.
#[test]
#[ignore = "run by the sweep as its tracer process"]
fn tracer_child() {
    let spec = std::env::var(CHILD_ENV).expect("run only by the sweep");
    let mut parts = spec.splitn(3, '\n');
    let (pid, lib, entry) = (
        parts.next().unwrap().parse::<u32>().unwrap(),
        PathBuf::from(parts.next().unwrap()),
        parts.next().unwrap().to_string(),
    );
    println!("go");
    std::io::stdout().flush().unwrap();
    let got = inject(
        pid,
        &InjectRequest {
            library: &lib,
            entry: &entry,
            request: b"sweep",
            reply_cap: 64,
            timeout: Duration::from_secs(5),
        },
    );
    let got = got.unwrap();
    assert_eq!((got.ret, got.reply.as_str()), (9, "nap:sweep"));
    println!("done");
}

struct Target {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Target {
    fn start(exe: &Path) -> Self {
        let mut child = Command::new(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(line.starts_with("ready"), "{line:?}");
        Self {
            child,
            stdin,
            stdout,
        }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Stops it; returns its last line and checks it exited 0 (no register of any thread came
    /// back different, no read failed).
    fn finish(mut self) -> String {
        writeln!(self.stdin, "stop").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "the target hangs after {line}");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "target: {status:?}, {line}");
        line
    }
}

/// Starts the tracer child and kills it `delay` after it said "go"; whether it finished first.
fn kill_tracer_after(pid: u32, lib: &Path, delay: Duration) -> bool {
    let mut tracer = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "tracer_child",
            "--ignored",
            "--nocapture",
            "--quiet",
        ])
        .env(CHILD_ENV, format!("{pid}\n{}\nnap_entry", lib.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(tracer.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("go") {
        line.clear();
        assert_ne!(
            out.read_line(&mut line).unwrap(),
            0,
            "the tracer never started"
        );
    }
    std::thread::sleep(delay);
    let _ = tracer.kill();
    let status = tracer.wait().unwrap();
    status.signal().is_none() && status.success()
}

#[test]
fn a_tracer_killed_at_any_instant_leaves_every_thread_its_own_state() {
    let dir = tempfile::tempdir().unwrap();
    let lib = compile(dir.path(), "test_entry.c", "libtest_entry.so", true);
    let exe = compile(dir.path(), "pinned_target.c", "pinned_target", false);
    // 0 to 36 ms after "go" (an injection takes ~30 ms here, 20 of them in the entry) in
    // 0.15 ms steps; a fresh target every 40 kills, so that the first injection into each (the
    // one that maps the stub page) is killed at many points too.
    let delays: Vec<Duration> = (0..=240).map(|i| Duration::from_micros(150 * i)).collect();
    let (mut finished, mut killed) = (0, 0);
    for batch in delays.chunks(40) {
        let mut target = Target::start(&exe);
        for &d in batch {
            if kill_tracer_after(target.child.id(), &lib, d) {
                finished += 1;
            } else {
                killed += 1;
            }
            assert!(
                target.alive(),
                "the target died when its tracer was killed {d:?} in"
            );
        }
        // A thread left in the stub by a dead tracer finishes the entry (20 ms) and goes home.
        std::thread::sleep(Duration::from_millis(50));
        let last = target.finish();
        let reads: u64 = last
            .split_whitespace()
            .find_map(|w| w.strip_prefix("reads="))
            .unwrap()
            .parse()
            .unwrap();
        assert!(reads > 0, "{last}");
    }
    eprintln!("{killed} tracers killed mid-way, {finished} finished first; 0 target deaths");
    assert!(
        killed >= 150,
        "only {killed} of the kills landed before the tracer finished"
    );
}
