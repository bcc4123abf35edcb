//! A killed workload leaves a readable trace; bad input gets one clear line and a non-zero exit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;

#[test]
fn kill_9_mid_run_leaves_every_complete_event_readable() {
    let py = venv_python("jax");
    let cpu = cpu_plugin("jax");
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(&py)
        .arg(workload("threads_stress.py"))
        .env(
            "PJRT_NAMES_AND_LIBRARY_PATHS",
            format!("tpuscope:{}", collector().display()),
        )
        .env("JAX_PLATFORMS", "tpuscope")
        .env("TPUSCOPE_REAL_PLUGIN", &cpu)
        .env("TPUSCOPE_OUT", dir.path())
        .env("TPUSCOPE_STRESS_THREADS", "2")
        .env("TPUSCOPE_STRESS_SECONDS", "120")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the trace holds a good number of events, then kill without warning.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let big = traces_in(dir.path())
            .first()
            .and_then(|p| std::fs::metadata(p).ok())
            .is_some_and(|m| m.len() > 200_000);
        if big {
            break;
        }
        assert!(Instant::now() < deadline, "trace never grew");
        assert!(child.try_wait().unwrap().is_none(), "workload exited early");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let path = traces_in(dir.path()).pop().unwrap();

    let out = run_tpuscope(&["dump", "--json", path.to_str().unwrap()], &[], dir.path());
    assert!(out.status.success(), "{}", show(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("was cut at byte") || stderr.contains("no end record"),
        "{stderr}"
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["kind"], "manifest");
    assert!(lines.iter().any(|l| l["kind"] == "compile"));
    assert!(lines.iter().any(|l| l["kind"] == "execute"));

    // Every complete event frame in the file is in the dump: count them independently.
    let bytes = std::fs::read(&path).unwrap();
    let header = tpuscope_core::reader::parse_header(&bytes).unwrap();
    let mut event_frames = 0;
    for item in tpuscope_core::reader::FrameIter::new(&bytes, header.len) {
        if let tpuscope_core::reader::FrameItem::Frame(f) = item {
            let kind = tpuscope_core::event::RecordKind::from_u16(f.kind).unwrap();
            use tpuscope_core::event::RecordKind as K;
            if !matches!(
                kind,
                K::Manifest | K::StringDef | K::StackDef | K::Blob | K::End
            ) {
                event_frames += 1;
            }
        }
    }
    assert_eq!(lines.len() - 1, event_frames);
}

/// A run killed with SIGKILL under `tpuscope run`: its report says when recording stopped (the
/// last record's end, from the run's start) and in which step (the train step's launches start
/// the steps: the number recorded), in text and JSON, from the trace's own last records.
#[test]
fn a_killed_run_says_when_and_in_which_step_recording_stopped() {
    use tpuscope_core::event::Record;

    let py = venv_python("jax");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("killed.tps");
    let mut run = std::process::Command::new(tpuscope())
        .args(["run", "--quiet", "--no-tui", "--out"])
        .arg(&out)
        .arg("--")
        .arg(&py)
        .arg(workload("jax_until_killed.py"))
        .env("LIVE_GATE_DIR", dir.path())
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = wait_until_ready(
        &mut run,
        &dir.path().join("ready"),
        Duration::from_secs(120),
    );
    // A few more steps, then the kill.
    std::thread::sleep(Duration::from_millis(300));
    // The workload's own pid (it wrote it), not yet reaped: `tpuscope run` waits for it.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
    let ran = run.wait_with_output().unwrap();
    assert!(!ran.status.success(), "{}", show(&ran));

    let trace = tpuscope_core::read_trace_file(&out).unwrap();
    assert!(trace.end.is_none(), "a killed process writes no end record");
    // The trace's own answer: its records' latest end from the manifest's start, and the train
    // step's launches.
    let start = trace.manifest.as_ref().unwrap().start_mono_ns;
    let end = trace
        .events
        .iter()
        .filter_map(|r| Some(r.t_ns()? + r.dur_ns()))
        .max()
        .unwrap();
    let names = tpuscope_analyzers::steps::executable_names(&trace);
    let train_steps = trace
        .events
        .iter()
        .filter(|r| {
            matches!(r, Record::Execute(e)
                if names.get(&e.executable_id).map(String::as_str) == Some("jit_train_step"))
        })
        .count() as u32;
    assert!(train_steps >= 10, "{train_steps} steps before the kill");
    let at_s = (end - start) as f64 / 1e9;

    let report = |format: &str| {
        let o = run_tpuscope(
            &["report", out.to_str().unwrap(), "--format", format],
            &[("NO_COLOR", "1")],
            dir.path(),
        );
        assert!(o.status.success(), "{}", show(&o));
        o
    };
    let json: serde_json::Value = serde_json::from_slice(&report("json").stdout).unwrap();
    let t = &json["traces"][0];
    assert_eq!(
        json["steps"]["detected_by"],
        "dominant executable jit_train_step"
    );
    let last = &t["last_record"];
    assert!(
        (last["at_s"].as_f64().unwrap() - at_s).abs() < 1e-9,
        "{last} vs {at_s}"
    );
    assert_eq!(last["step"], train_steps, "{last}");

    let said = format!(
        "recording stopped {} into the run, in step {train_steps}",
        tpuscope_analyzers::units::duration(at_s * 1e3)
    );
    let text = report("text");
    let stdout = String::from_utf8_lossy(&text.stdout);
    let stderr = String::from_utf8_lossy(&text.stderr);
    // In the header's completeness and in the warning.
    assert!(
        stdout.contains(&format!("partial report; {said}")),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!("{said}; the report covers what it holds")),
        "{stderr}"
    );
}

#[test]
fn not_a_trace_is_one_clear_line_and_nonzero() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.tps");
    std::fs::write(&p, b"hello, this is not a trace at all").unwrap();
    let out = run_tpuscope(&["dump", p.to_str().unwrap()], &[], dir.path());
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not a tpuscope trace"), "{err}");
    // The file is untouched.
    assert_eq!(
        std::fs::read(&p).unwrap(),
        b"hello, this is not a trace at all"
    );
}

#[test]
fn view_of_nothing_but_bad_input_is_one_line_and_nonzero_without_a_window() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.tps");
    std::fs::write(&p, b"hello, this is not a trace at all").unwrap();
    // No display: had it tried to open a window, it would say that instead.
    let out = run_tpuscope(
        &["view", p.to_str().unwrap()],
        &[("DISPLAY", ""), ("WAYLAND_DISPLAY", "")],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not a tpuscope trace"), "{err}");
    assert!(!err.contains("window"), "{err}");
}

#[test]
fn newer_format_version_is_refused_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("new.tps");
    let mut w =
        tpuscope_core::TraceWriter::with_version(Vec::new(), &Default::default(), 99, 0).unwrap();
    w.flush().unwrap();
    std::fs::write(&p, w.into_inner()).unwrap();
    let out = run_tpuscope(&["dump", "--json", p.to_str().unwrap()], &[], dir.path());
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("newer"), "{err}");
}

#[test]
fn missing_trace_file_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_tpuscope(&["dump", "nope.tps"], &[], dir.path());
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).lines().count(),
        1,
        "{}",
        show(&out)
    );
}

#[test]
fn run_without_any_plugin_names_what_to_install() {
    let dir = tempfile::tempdir().unwrap();
    // The machine's own Python has no PJRT plugin installed.
    let python = "/root/.pyenv/versions/3.11.7/bin/python3.11";
    let python = if std::path::Path::new(python).is_file() {
        python
    } else {
        "python3"
    };
    let out = run_tpuscope(&["run", "--", python, "-c", "print('hi')"], &[], dir.path());
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no PJRT plugin found") && err.contains("pip install lammps-jax-pjrt-cpu"),
        "{err}"
    );
    assert!(traces_in(dir.path()).is_empty());
}

#[test]
fn run_of_a_missing_command_or_broken_python_is_one_line() {
    let dir = tempfile::tempdir().unwrap();
    // What is wrong with the command itself, as execvp would find it (before: /etc/passwd
    // was "no PJRT plugin found for python3").
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "not a program").unwrap();
    for (cmd, said) in [
        (
            "/no/such/python3",
            "cannot run /no/such/python3: no such file",
        ),
        ("no-such-command-here", "no such command on PATH"),
        ("/etc", "cannot run /etc: it is a directory"),
        (notes.to_str().unwrap(), "it is not an executable file"),
    ] {
        let out = run_tpuscope(&["run", "--", cmd, "x.py"], &[], dir.path());
        assert_eq!(out.status.code(), Some(2), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(said), "{cmd}: {err}");
    }

    // A command that names no Python: the plugin is looked for with python3 on PATH, and a
    // failure says so (before: "no PJRT plugin found for python3" after `run -- true`).
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let python3 = bin.join("python3");
    std::fs::write(&python3, "#!/bin/sh\necho 'not this one' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(
        &python3,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let out = run_tpuscope(&["run", "--", "true"], &[("PATH", &path)], dir.path());
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("true is not a Python interpreter nor a script with a Python shebang")
            && err.contains("python3 on PATH")
            && err.contains("not this one"),
        "{err}"
    );
    // A bad --metrics address is said before any work (no Python asked).
    let out = run_tpuscope(
        &["run", "--metrics", "nope:xx", "--", "true"],
        &[("PATH", &path)],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("tpuscope: error: --metrics nope:xx: "),
        "{err}"
    );

    // A "python" that cannot start.
    let fake = dir.path().join("python3");
    std::fs::write(&fake, "#!/bin/sh\necho 'broken interpreter' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = run_tpuscope(
        &["run", "--", fake.to_str().unwrap(), "x.py"],
        &[],
        dir.path(),
    );
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("is not a working Python") && err.contains("broken interpreter"),
        "{err}"
    );
}
