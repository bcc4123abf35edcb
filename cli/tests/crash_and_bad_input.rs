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
    let out = run_tpuscope(&["run", "--", "/no/such/python3", "x.py"], &[], dir.path());
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no such command"), "{err}");

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
