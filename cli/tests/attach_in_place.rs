//! `tpuscope attach PID` on processes NOT started under tpuscope: a real JAX loop on the real
//! CPU plugin, started plainly. The attach sees compiles after it and executes of an executable
//! compiled before it; detach and attach again works; the workload's output and exit code are
//! those of a run nobody attached to. Also the refusals: no plugin, another uid, a dead pid, an
//! existing --out file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::attach::{CLOSE_WAIT, Recipe, closed_trace};
use common::tmux::{Tmux, shell_quote};
use common::*;
use tpuscope_core::event::Record;

/// What one attach session recorded, checked against what the workload does: compiles of
/// `graph` after the attach, and `before` (compiled before it, run every iteration) identified
/// at its first execute (its executes named).
fn check_session(trace_path: &Path, graph: &str, before: &str) {
    let trace = closed_trace(trace_path, CLOSE_WAIT);
    let m = trace.manifest.as_ref().unwrap();
    assert_eq!(m.role, "attach");
    assert!(m.process_start_wall_ns > 0 && m.process_start_wall_ns < m.start_wall_ns);
    assert!(
        trace.end.is_some(),
        "the session's trace was not closed at detach"
    );
    let seen: Vec<_> = trace
        .events
        .iter()
        .filter_map(|r| match r {
            Record::ExecutableSeen(x) => Some(x),
            _ => None,
        })
        .collect();
    let before = seen
        .iter()
        .find(|x| x.executable_name == format!("jit_{before}"))
        .unwrap_or_else(|| panic!("jit_{before} compiled before the attach was not identified"));
    assert!(before.optimized_hash != 0 && trace.blobs.contains_key(&before.optimized_hash));
    let executes: HashSet<u64> = trace
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Execute(e) => Some(e.executable_id),
            _ => None,
        })
        .collect();
    assert!(executes.contains(&before.executable_id));
    let compiles: Vec<_> = compiles(&trace)
        .into_iter()
        .filter(|c| c.executable_name == format!("jit_{graph}"))
        .collect();
    assert!(
        !compiles.is_empty(),
        "no compile of {graph} after the attach in {}",
        trace_path.display()
    );
    // What a compile produced is never "seen before attach" afterwards. An executable seen
    // before a compile may share its id: the workload drops each old `train_step`, and the
    // plugin may hand the freed address to the next compile.
    for c in &compiles {
        assert!(
            seen.iter()
                .all(|x| x.executable_id != c.executable_id || x.t_ns < c.t_ns),
            "{} compiled at {} was then identified as seen before the attach",
            c.executable_name,
            c.t_ns
        );
    }
    assert!(
        trace
            .events
            .iter()
            .any(|r| matches!(r, Record::Note(n) if n.topic == "detach")),
        "no detach note"
    );
}

#[test]
fn jax_attach_detach_and_attach_again_leaves_the_workload_unchanged() {
    let recipe = Recipe::jax();
    let reference = recipe.plain_stdout();
    let mut target = recipe.start();

    let first = target.path("first.tps");
    let out = target.attach(&[
        "--snapshot",
        "--json",
        "--duration",
        "3",
        "--out",
        first.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", show(&out));
    let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(state["pid"], target.pid());
    assert!(state["compiles"]["total"].as_u64().unwrap() >= 1, "{state}");
    let attached = &state["traces"][0]["attached"];
    assert!(
        attached["executables_before"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == "jit_weight_norm"),
        "{attached}"
    );
    assert!(
        attached["process_age_s"].as_f64().unwrap() > 0.0,
        "{attached}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("attached to pid"), "{err}");
    // The session ended with the command: its trace is closed when attach returns.
    assert!(
        closed_trace(&first, Duration::ZERO).end.is_some(),
        "the trace was not closed when attach returned"
    );

    assert!(
        target.wait_detached(Duration::from_secs(10)),
        "never detached"
    );
    check_session(&first, "train_step", "weight_norm");

    // Again: the collector is loaded already; a new session with its own trace.
    let second = target.path("second.tps");
    let out = target.attach(&["--duration", "2", "--out", second.to_str().unwrap()]);
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("pid {}: ", target.pid())),
        "{text}"
    );
    assert!(text.contains("attached to a process"), "{text}");
    assert!(
        closed_trace(&second, Duration::ZERO).end.is_some(),
        "the trace was not closed when attach returned"
    );
    assert!(
        target.wait_detached(Duration::from_secs(10)),
        "never detached"
    );
    check_session(&second, "train_step", "weight_norm");

    target.finish().assert_like_plain_run(&reference, 2);
}

/// `--wait` on a process that has not loaded its plugin yet: attaches once it has, and then
/// sees the compiles from the very first.
#[test]
fn attach_waits_for_the_plugin_with_wait() {
    let mut recipe = Recipe::jax();
    recipe.env.push(("ATTACH_DELAY_S".into(), "2".into()));
    let mut target = recipe.spawn();
    let early = target.attach(&["--snapshot", "--duration", "1"]);
    assert!(!early.status.success(), "{}", show(&early));
    assert!(show(&early).contains("pass --wait"), "{}", show(&early));
    let trace = target.path("waited.tps");
    let out = target.attach(&[
        "--wait",
        "--snapshot",
        "--json",
        "--duration",
        "4",
        "--out",
        trace.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(show(&out).contains("waiting for process"), "{}", show(&out));
    target.wait_ready();
    let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(state["compiles"]["total"].as_u64().unwrap() >= 1, "{state}");
    assert!(target.wait_detached(Duration::from_secs(10)));
    let t = closed_trace(&trace, CLOSE_WAIT);
    assert!(
        compiles(&t)
            .iter()
            .any(|c| c.executable_name == "jit_train_step"),
        "the first compile of train_step, after the attach, is not in the trace"
    );
    assert!(target.finish().status.success());
}

/// The process ends while tpuscope is attached: tpuscope stops waiting and reports the trace the
/// process closed at its exit.
#[test]
fn a_process_that_exits_while_attached_is_reported_from_its_trace() {
    let mut recipe = Recipe::jax();
    recipe.env.push(("ATTACH_MAX_ITERS".into(), "150".into()));
    let mut target = recipe.start();
    let trace = target.path("ended.tps");
    let started = std::time::Instant::now();
    let out = target.attach(&["--duration", "60", "--out", trace.to_str().unwrap()]);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "tpuscope waited for the deadline"
    );
    assert!(
        show(&out).contains("exited while attached"),
        "{}",
        show(&out)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("pid {}: ", target.pid())),
        "{text}"
    );
    let t = tpuscope_core::reader::read_trace_file(&trace).unwrap();
    assert!(
        t.end.is_some(),
        "the trace was not closed at the process's exit"
    );
    assert!(target.finish().status.success());
}

/// The live view in a real terminal on a process started without tpuscope: its header says it
/// is attached, compiles after the attach show up, `q` leaves and detaches.
#[test]
fn the_live_view_attaches_in_place_and_q_detaches() {
    let recipe = Recipe::jax();
    let mut target = recipe.start();
    let trace = target.path("tui.tps");
    let tmux = Tmux::new("attach-in-place");
    tmux.start(&format!(
        "env XDG_RUNTIME_DIR={dir} {bin} attach {pid} --out {out}; echo TPUSCOPE-EXIT=$?; sleep 600",
        dir = shell_quote(target.dir.path()),
        bin = shell_quote(&tpuscope()),
        pid = target.pid(),
        out = shell_quote(&trace),
    ));
    let screen = tmux.wait_for("t:0", "the attached view with a recompile", |s| {
        s.contains("into the run: what ran before is not traced")
            && s.contains("jit_train_step")
            && s.contains("constant_changed")
    });
    assert!(
        screen.contains(&format!("pid {}", target.pid())),
        "{screen}"
    );
    assert!(screen.contains("· attached "), "{screen}");
    tmux.cmd(&["send-keys", "-t", "t:0", "q"]);
    tmux.wait_for("t:0", "tpuscope's exit", |s| s.contains("TPUSCOPE-EXIT=0"));
    assert!(
        target.wait_detached(Duration::from_secs(10)),
        "never detached"
    );
    let t = closed_trace(&trace, CLOSE_WAIT);
    assert!(t.end.is_some());
    assert!(target.finish().status.success());
}

/// SIGTERM to `tpuscope attach` (no terminal): it says what it saw, exits 0, and the process
/// is detached and runs on.
#[test]
fn sigterm_ends_an_attach_and_detaches() {
    let recipe = Recipe::jax();
    let mut target = recipe.start();
    let trace = target.path("term.tps");
    let child = Command::new(tpuscope())
        .args(["attach", &target.pid().to_string(), "--out"])
        .arg(&trace)
        .env("XDG_RUNTIME_DIR", target.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !target.socket().exists() {
        assert!(std::time::Instant::now() < deadline, "never attached");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let tpid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(tpid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("pid {}: ", target.pid())),
        "{text}"
    );
    assert!(
        target.wait_detached(Duration::from_secs(10)),
        "never detached"
    );
    assert!(closed_trace(&trace, CLOSE_WAIT).end.is_some());
    let done = target.finish();
    assert!(done.status.success(), "{done:?}");
}

#[test]
fn attach_refuses_an_existing_out_file_and_leaves_it_alone() {
    let recipe = Recipe::jax();
    let mut target = recipe.start();
    let out_file = target.path("keep.tps");
    std::fs::write(&out_file, "precious").unwrap();
    let out = target.attach(&["--snapshot", "--out", out_file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert_eq!(tpuscope_lines(&out).len(), 1, "{}", show(&out));
    assert!(show(&out).contains("exists"), "{}", show(&out));
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), "precious");
    // Nothing was loaded into the target.
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", target.pid())).unwrap();
    assert!(!maps.contains("libtpuscope_collector"));
    assert!(target.finish().status.success());
}

/// One `tpuscope:` error line and a failure exit, for a target that cannot be attached to.
fn refused(pid: u32, expect: &str) {
    let out = Command::new(tpuscope())
        .args(["attach", &pid.to_string(), "--snapshot"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", show(&out));
    let lines = tpuscope_lines(&out);
    assert_eq!(lines.len(), 1, "{}", show(&out));
    assert!(lines[0].contains(expect), "{}", show(&out));
}

#[test]
fn attach_refuses_a_process_without_a_pjrt_plugin() {
    let mut sleep = Command::new("sleep").arg("30").spawn().unwrap();
    refused(sleep.id(), "no PJRT plugin loaded");
    let _ = sleep.kill();
    let _ = sleep.wait();
}

#[test]
fn attach_refuses_a_dead_pid() {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    refused(pid, "does not exist");
}

#[test]
fn attach_refuses_a_process_of_another_user() {
    if tpuscope_core::live::current_uid() != Some(0) {
        eprintln!("skipped: starting a process as another user needs root");
        return;
    }
    use std::os::unix::process::CommandExt;
    let mut other = Command::new("sleep")
        .arg("30")
        .uid(65534)
        .gid(65534)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    refused(other.id(), "runs as uid 65534");
    let _ = other.kill();
    let _ = other.wait();
}
