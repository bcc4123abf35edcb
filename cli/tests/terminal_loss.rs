//! Losing the terminal, or tpuscope itself, never harms the workload: the live view of `run`
//! and of `attach` in a real pseudo-terminal (`common/pty_drive.py`) whose master side is
//! closed (a window or a tmux session killed), or whose tpuscope is sent SIGKILL or SIGTERM.
//! `run` then waits for the workload without spinning and exits with its status; `attach`
//! leaves and the target is restored; a killed `run` leaves the workload running to its end
//! with its output kept.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::attach::{CLOSE_WAIT, Recipe, closed_trace};
use common::*;

/// What `pty_drive.py` saw.
#[derive(Debug)]
struct Drive {
    exit: Option<i64>,
    seconds: f64,
    cpu_ticks: i64,
    drawn: u64,
}

/// Runs `tpuscope ARGS` in a pseudo-terminal, does `action` `delay` seconds in, and waits at
/// most `timeout` seconds for it to exit.
fn drive(
    action: &str,
    delay: f64,
    timeout: f64,
    args: &[&str],
    env: &[(&str, &str)],
    cwd: &Path,
) -> Drive {
    let script = repo_root().join("cli/tests/common/pty_drive.py");
    let mut c = Command::new("python3");
    c.arg(script)
        .args([action, &delay.to_string(), &timeout.to_string(), "--"])
        .arg(tpuscope())
        .args(args)
        .current_dir(cwd);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Drive {
        exit: v["exit"].as_i64(),
        seconds: v["seconds"].as_f64().unwrap(),
        cpu_ticks: v["cpu_ticks"].as_i64().unwrap(),
        drawn: v["drawn"].as_u64().unwrap(),
    }
}

/// The log `tpuscope run` kept of the workload's output in `dir` (the workload loads no plugin:
/// there is no trace to rename it after).
fn the_log(dir: &Path) -> String {
    let logs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    std::fs::read_to_string(&logs[0]).unwrap()
}

fn hangup_run(action: &str, seconds: &str) -> (Drive, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let python = venv_python("jax");
    let script = workload("hangup_workload.py");
    let mark = dir.path().join("mark");
    let d = drive(
        action,
        3.0,
        60.0,
        &[
            "run",
            "--out",
            dir.path().to_str().unwrap(),
            "--",
            python.to_str().unwrap(),
            script.to_str().unwrap(),
        ],
        &[
            ("HANGUP_MARK", mark.to_str().unwrap()),
            ("HANGUP_SECONDS", seconds),
        ],
        dir.path(),
    );
    (d, dir)
}

#[test]
fn run_waits_quietly_for_the_workload_when_its_terminal_goes_away() {
    let (d, dir) = hangup_run("close", "8");
    assert!(d.drawn > 0, "the live view drew nothing: {d:?}");
    // The workload's own status, after its own end (8 s from its start, the close at 3 s).
    assert_eq!(d.exit, Some(7), "{d:?}");
    assert!(
        d.seconds > 2.0,
        "tpuscope did not wait for the workload: {d:?}"
    );
    // Waiting costs nothing: no spinning on the dead terminal (100 ticks = 1 CPU-s).
    assert!(
        d.cpu_ticks < 50,
        "tpuscope used {} ticks while waiting: {d:?}",
        d.cpu_ticks
    );
    let log = the_log(dir.path());
    assert!(
        log.contains("line 60") && log.trim_end().ends_with("DONE"),
        "{log}"
    );
    assert!(dir.path().join("mark").exists());
}

#[test]
fn kill_9_of_run_leaves_the_workload_running_to_its_end_with_its_output() {
    let (d, dir) = hangup_run("kill9", "6");
    assert_eq!(d.exit, Some(-9), "{d:?}");
    let mark = dir.path().join("mark");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !mark.exists() {
        assert!(
            Instant::now() < deadline,
            "the workload never finished after tpuscope was killed: {}",
            the_log(dir.path())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));
    let log = the_log(dir.path());
    assert!(
        log.contains("line 50") && log.trim_end().ends_with("DONE"),
        "{log}"
    );
}

#[test]
fn sigterm_to_run_is_passed_on_and_its_status_is_the_workloads() {
    let (d, dir) = hangup_run("term", "20");
    // Python dies of the SIGTERM passed on: 128 + 15, as a shell reports it.
    assert_eq!(d.exit, Some(143), "{d:?}");
    assert!(d.seconds < 10.0, "{d:?}");
    assert!(
        !dir.path().join("mark").exists(),
        "the workload was not stopped"
    );
}

#[test]
fn attach_leaves_and_restores_the_target_when_its_terminal_goes_away_or_on_sigterm() {
    let recipe = Recipe::jax();
    let reference = recipe.plain_stdout();
    let mut target = recipe.start();
    let pid = target.pid().to_string();
    let xdg = target.dir.path().to_str().unwrap().to_string();
    for (i, action) in ["close", "term"].into_iter().enumerate() {
        let out = target.path(&format!("session{i}.tps"));
        let d = drive(
            action,
            4.0,
            20.0,
            &["attach", &pid, "--out", out.to_str().unwrap()],
            &[("XDG_RUNTIME_DIR", &xdg)],
            target.dir.path(),
        );
        assert!(d.drawn > 0, "the live view drew nothing: {d:?}");
        assert!(d.exit.is_some() && d.seconds < 5.0, "{action}: {d:?}");
        assert!(d.cpu_ticks < 100, "{action}: {d:?}");
        assert!(
            target.wait_detached(Duration::from_secs(10)),
            "{action}: the target was never restored"
        );
        let t = closed_trace(&out, CLOSE_WAIT);
        assert!(
            t.end.is_some(),
            "{action}: the session's trace was not closed"
        );
    }
    target.finish().assert_like_plain_run(&reference, 2);
}
