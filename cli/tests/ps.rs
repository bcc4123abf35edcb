//! `tpuscope ps` against a real JAX workload running under `tpuscope run`
//! (`tests/workloads/live_wait.py`, stopped at a gate), with sockets of dead processes planted
//! beside it. The socket directory is a private `XDG_RUNTIME_DIR`, so other tests' workloads do
//! not show up.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;

const TIMEOUT: Duration = Duration::from_secs(60);

fn ps(xdg: &Path, json: bool) -> Output {
    let mut c = Command::new(tpuscope());
    c.arg("ps").env("XDG_RUNTIME_DIR", xdg);
    if json {
        c.arg("--json");
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    out
}

/// Leaves a socket file with nobody listening at `path`.
fn plant(path: &Path) {
    drop(UnixListener::bind(path).unwrap());
    assert!(path.exists());
}

/// The pid of a process that has exited.
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

#[test]
fn ps_lists_the_running_workload_and_removes_stale_sockets() {
    let py = venv_python("jax");
    let cpu = cpu_plugin("jax");
    let dir = tempfile::tempdir().unwrap();
    let xdg = tempfile::tempdir().unwrap();
    let gates = dir.path().join("gates");
    let traces = dir.path().join("traces");
    std::fs::create_dir(&gates).unwrap();
    std::fs::create_dir(&traces).unwrap();

    let mut run = Command::new(tpuscope())
        .args(["run", "--out", traces.to_str().unwrap(), "--plugin"])
        .arg(&cpu)
        .arg("--")
        .arg(&py)
        .arg(workload("live_wait.py"))
        .env("XDG_RUNTIME_DIR", xdg.path())
        .env("LIVE_GATE_DIR", &gates)
        .env("LIVE_STEPS", "0")
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = gates.join("ready");
    let start = Instant::now();
    let pid: u32 = wait_until_ready(&mut run, &ready, TIMEOUT);
    let sockets = xdg.path().join("tpuscope");
    let socket = sockets.join(format!("{pid}.sock"));
    assert!(socket.exists(), "{} missing", socket.display());

    // A dead process's socket, and one of a live process (this test) nobody listens on: a pid
    // reused after a crash.
    let dead = sockets.join(format!("{}.sock", dead_pid()));
    let reused = sockets.join(format!("{}.sock", std::process::id()));
    plant(&dead);
    plant(&reused);
    let text = ps(xdg.path(), false);
    let stdout = String::from_utf8_lossy(&text.stdout);
    let stderr = String::from_utf8_lossy(&text.stderr);
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with(&pid.to_string()) && l.contains("live_wait.py")),
        "{}",
        show(&text)
    );
    assert!(
        stdout.contains(&format!("socket {}", socket.display())),
        "{stdout}"
    );
    for stale in [&dead, &reused] {
        assert!(!stale.exists(), "{} not removed", stale.display());
        assert!(
            stderr.contains(&format!("removed the stale socket {}", stale.display())),
            "{stderr}"
        );
    }

    plant(&dead);
    let json = ps(xdg.path(), true);
    assert!(!dead.exists());
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 1, "{v:#}");
    let e = &list[0];
    assert_eq!(e["pid"], pid);
    assert!(
        e["command"].as_str().unwrap().contains("live_wait.py"),
        "{e}"
    );
    assert_eq!(
        e["socket"].as_str().map(PathBuf::from),
        Some(socket.clone())
    );
    assert!(socket.exists());
    assert_eq!(e["frontend"], "jax");
    assert_eq!(
        e["plugin"].as_str(),
        cpu.file_name().and_then(|f| f.to_str())
    );
    let uptime = e["uptime_s"].as_f64().unwrap();
    assert!(
        uptime > 0.0 && uptime < start.elapsed().as_secs_f64() + 1.0,
        "{uptime}"
    );
    let trace = PathBuf::from(e["trace"].as_str().unwrap());
    assert_eq!(
        trace.parent().unwrap(),
        traces.canonicalize().unwrap(),
        "{e}"
    );

    std::fs::write(gates.join("go"), b"").unwrap();
    std::fs::write(gates.join("exit"), b"").unwrap();
    let out = run.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(traces_in(&traces), [trace]);

    // Gone: the socket went with it.
    assert!(!socket.exists());
    let json = ps(xdg.path(), true);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v, serde_json::json!([]));
    let text = ps(xdg.path(), false);
    assert_eq!(
        String::from_utf8_lossy(&text.stdout).trim(),
        "no instrumented processes of this user"
    );
}
