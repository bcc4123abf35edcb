//! `tpuscope attach` when things go wrong, on a real JAX loop started without tpuscope: the
//! attaching tpuscope killed with SIGKILL at every millisecond of its first 150 (the injection
//! lands in there) never harms the target; attaching again right after a detach works; a
//! thread id, a stopped process and a target killed while attached are each said as what they
//! are.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::attach::{Recipe, Target};
use common::*;

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
    })
}

/// `tpuscope attach PID ARGS` started in the target's directory, not waited for.
fn spawn_attach(target: &Target, args: &[&str]) -> std::process::Child {
    Command::new(tpuscope())
        .arg("attach")
        .arg(target.pid().to_string())
        .args(args)
        .env("XDG_RUNTIME_DIR", target.dir.path())
        .current_dir(target.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn kill_9_of_attach_at_every_millisecond_never_harms_the_target() {
    let recipe = Recipe::jax();
    let reference = recipe.plain_stdout();
    let mut target = recipe.start();
    let (mut sessions, mut deaths) = (0, 0);
    for ms in 0..=150u64 {
        let trace = target.path(&format!("k{ms}.tps"));
        let mut attach = spawn_attach(
            &target,
            &[
                "--snapshot",
                "--duration",
                "1",
                "--out",
                trace.to_str().unwrap(),
            ],
        );
        std::thread::sleep(Duration::from_millis(ms));
        let _ = attach.kill();
        let _ = attach.wait();
        // A session that started ends by itself once its tpuscope is gone.
        assert!(
            target.wait_detached(Duration::from_secs(15)),
            "the session of the tpuscope killed at {ms} ms never ended"
        );
        if trace.exists() {
            sessions += 1;
        }
        if !alive(target.pid()) {
            deaths += 1;
            break;
        }
    }
    eprintln!(
        "151 kills 0-150 ms after the start: {sessions} sessions had started; {deaths} target deaths"
    );
    assert_eq!(deaths, 0);
    assert!(
        sessions > 0,
        "no kill landed after the injection: the sweep missed it"
    );
    let end = target.finish();
    assert!(end.status.success(), "{end:?}");
    assert_eq!(end.stdout, reference, "the target printed something else");
}

#[test]
fn attaching_again_right_after_a_detach_works() {
    let recipe = Recipe::jax();
    let mut target = recipe.start();
    for round in 0..5 {
        let trace = target.path(&format!("again{round}.tps"));
        let out = target.attach(&[
            "--snapshot",
            "--duration",
            "0.5",
            "--out",
            trace.to_str().unwrap(),
        ]);
        // No wait for the previous session's end: the next attach waits for it itself.
        assert!(out.status.success(), "round {round}: {}", show(&out));
        assert!(trace.exists(), "round {round}: no new session");
    }
    assert!(target.wait_detached(Duration::from_secs(10)));
    assert!(target.finish().status.success());
}

#[test]
fn a_thread_id_a_stopped_process_and_a_target_killed_while_attached_are_said_as_such() {
    let recipe = Recipe::jax();
    let mut target = recipe.start();
    let pid = target.pid();

    let tid = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|&t| t != pid)
        .expect("a JAX process has threads");
    let out = Command::new(tpuscope())
        .args(["attach", &tid.to_string(), "--snapshot"])
        .env("XDG_RUNTIME_DIR", target.dir.path())
        .current_dir(target.dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{tid} is a thread of process {pid}")),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    let stop = |sig: &str| {
        assert!(
            Command::new("kill")
                .args([sig, &pid.to_string()])
                .status()
                .unwrap()
                .success()
        );
    };
    stop("-STOP");
    let started = Instant::now();
    let out = target.attach(&["--snapshot"]);
    stop("-CONT");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is stopped"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // Killed while a snapshot records it: what it recorded until then, and why it ended.
    let trace = target.path("killed.tps");
    let attach = Command::new(tpuscope())
        .args(["attach", &pid.to_string(), "--snapshot", "--duration", "5"])
        .args(["--out", trace.to_str().unwrap()])
        .env("XDG_RUNTIME_DIR", target.dir.path())
        .current_dir(target.dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !trace.exists() {
        assert!(Instant::now() < deadline, "the attach never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    stop("-KILL");
    let out = attach.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        err.contains(&format!("process {pid} exited while attached")),
        "{err}"
    );
    assert!(
        !err.contains(&format!("reading {}", trace.display())),
        "{err}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(&format!("pid {pid}: ")), "{text}");
    let _ = target.finish();
}
