//! The collector never harms the workload: an unwritable trace, a full disk, a fork.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::*;

/// The workload with the collector in front of the CPU plugin, without `tpuscope run`.
fn collector_command(py: &std::path::Path, script: &str, out: &std::path::Path) -> Command {
    let mut c = Command::new(py);
    c.arg(workload(script))
        .env(
            "PJRT_NAMES_AND_LIBRARY_PATHS",
            format!("tpuscope:{}", collector().display()),
        )
        .env("JAX_PLATFORMS", "tpuscope")
        .env("TPUSCOPE_REAL_PLUGIN", cpu_plugin("jax"))
        .env("TPUSCOPE_OUT", out);
    c
}

fn direct_stdout(py: &std::path::Path, script: &str) -> String {
    let out = Command::new(py)
        .arg(workload(script))
        .env(
            "PJRT_NAMES_AND_LIBRARY_PATHS",
            format!("tpuscope:{}", cpu_plugin("jax").display()),
        )
        .env("JAX_PLATFORMS", "tpuscope")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn unwritable_trace_path_is_said_once_and_the_workload_runs_on() {
    let py = venv_python("jax");
    let out = collector_command(
        &py,
        "jax_shapes.py",
        std::path::Path::new("/proc/tpuscope-no-such-dir/t.tps"),
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        direct_stdout(&py, "jax_shapes.py")
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let ours = tpuscope_lines(&out);
    assert_eq!(ours.len(), 1, "{err}");
    assert!(ours[0].contains("cannot create trace"), "{err}");
}

/// `ulimit -f` in a Python process (which ignores SIGXFSZ): the trace stops below the limit with
/// one line, and says so itself. (With SIGXFSZ at its default, and with a limit the collector
/// does not know: `faults_and_stress.rs`.)
#[test]
fn full_disk_mid_run_is_said_once_and_the_trace_keeps_what_was_written() {
    let py = venv_python("jax");
    let dir = tempfile::tempdir().unwrap();
    let c = collector_command(&py, "jax_shapes.py", dir.path());
    // A 48 KiB file size limit: the trace reaches it part way; Python ignores SIGXFSZ.
    let mut sh = Command::new("bash");
    sh.arg("-c")
        .arg("ulimit -f 48; exec \"$0\" \"$@\"")
        .arg(c.get_program())
        .args(c.get_args());
    for (k, v) in c.get_envs() {
        if let Some(v) = v {
            sh.env(k, v);
        }
    }
    let out = sh.output().unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        direct_stdout(&py, "jax_shapes.py")
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<String> = tpuscope_lines(&out)
        .into_iter()
        .filter(|l| !l.starts_with("tpuscope: tracing to"))
        .collect();
    assert_eq!(ours.len(), 1, "{err}");
    assert!(
        ours[0].contains("reached the file size limit (ulimit -f: 49152 bytes)"),
        "{err}"
    );
    let path = &traces_in(dir.path())[0];
    assert!(std::fs::metadata(path).unwrap().len() <= 48 << 10);
    let trace = only_trace(dir.path());
    assert!(trace.manifest.is_some());
    assert_eq!(trace.completeness, tpuscope_core::Completeness::Complete);
    let stopped = trace
        .recording_stopped()
        .expect("the trace says recording stopped");
    assert_eq!(stopped.limit_bytes, 48 << 10);
    assert!(stopped.exit_t_ns > stopped.t_ns);
    assert!(
        stopped
            .not_recorded
            .iter()
            .any(|k| k.kind == "execute" && k.count > 0),
        "{stopped:?}"
    );
}

#[test]
fn a_forked_child_stays_silent_and_the_parent_keeps_recording() {
    let py = venv_python("jax");
    let dir = tempfile::tempdir().unwrap();
    let out = collector_command(&py, "jax_fork.py", dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("child sum 499500"), "{stdout}");
    assert!(
        stdout.contains("RESULT jax_fork child_status=0 first=256.0 second=288.0"),
        "{stdout}"
    );
    // One trace (the parent's), complete, with both reads.
    let trace = only_trace(dir.path());
    assert_eq!(trace.completeness, tpuscope_core::Completeness::Complete);
    assert_eq!(count(&trace, "transfer_d2h"), 2, "{:?}", kinds(&trace));
}

/// A plugin older than PJRT 0.57 (when the table was rearranged) is not wrapped: one line says so,
/// and the workload runs on the plugin untouched, with no trace.
#[test]
fn a_plugin_older_than_0_57_is_passed_through_with_one_line() {
    let py = venv_python("jax");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(&py)
        .arg(workload("jax_shapes.py"))
        .env(
            "PJRT_NAMES_AND_LIBRARY_PATHS",
            format!("tpuscope:{}", collector().display()),
        )
        .env("JAX_PLATFORMS", "tpuscope")
        .env("TPUSCOPE_REAL_PLUGIN", fault_plugin())
        .env("TPUSCOPE_FAULT_REAL_PLUGIN", cpu_plugin("jax"))
        .env("TPUSCOPE_FAULT_API_MINOR", "54")
        .env("TPUSCOPE_OUT", dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        direct_stdout(&py, "jax_shapes.py")
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let ours = tpuscope_lines(&out);
    assert_eq!(ours.len(), 1, "{err}");
    assert!(ours[0].contains("0.54, older than 0.57"), "{err}");
    assert!(traces_in(dir.path()).is_empty());
}

/// `tpuscope run` with the real CPU plugin and the jax environment, from a temp directory.
fn run_in(dir: &std::path::Path, args: &[&str], script: &std::path::Path) -> std::process::Output {
    Command::new(tpuscope())
        .arg("run")
        .arg("--no-tui")
        .args(args)
        .arg("--")
        .arg(venv_python("jax"))
        .arg(script)
        .current_dir(dir)
        .env("TPUSCOPE_COLLECTOR", collector())
        .output()
        .unwrap()
}

/// The only lines tpuscope wrote; the workload never started when `stdout` is empty.
fn only_line(out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{}", show(out));
    err.into_owned()
}

#[test]
fn run_with_an_unwritable_out_says_so_before_starting() {
    let dir = tempfile::tempdir().unwrap();
    // sysfs takes no new files, not even from root.
    for out in ["/sys/tpuscope-t.tps", "/sys/"] {
        let o = run_in(dir.path(), &["--out", out], &workload("jax_shapes.py"));
        assert_eq!(o.status.code(), Some(2), "{}", show(&o));
        let err = only_line(&o);
        assert!(
            err.starts_with("tpuscope: error: --out /sys") && err.contains("cannot be written"),
            "{err}"
        );
        assert!(!err.contains("never loaded"), "{err}");
        assert!(o.stdout.is_empty(), "the workload ran: {}", show(&o));
    }
}

#[test]
fn a_workload_killed_during_import_is_said_to_be_killed() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("killed.py");
    std::fs::write(
        &script,
        "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\nimport jax\n",
    )
    .unwrap();
    let o = run_in(dir.path(), &[], &script);
    assert_eq!(o.status.code(), Some(128 + 9), "{}", show(&o));
    let ours = tpuscope_lines(&o);
    assert_eq!(ours.len(), 1, "{}", show(&o));
    assert!(
        ours[0].contains("no trace was written")
            && ours[0].contains("killed by signal 9 (SIGKILL) before it loaded a PJRT plugin"),
        "{}",
        ours[0]
    );
    assert!(traces_in(dir.path()).is_empty());
}

#[test]
fn a_plugin_that_is_not_one_is_refused_before_the_workload_starts() {
    let dir = tempfile::tempdir().unwrap();
    let fake = dir.path().join("libfake_plugin.so");
    std::fs::write(&fake, "not a shared library\n").unwrap();
    let o = run_in(
        dir.path(),
        &["--plugin", fake.to_str().unwrap()],
        &workload("jax_shapes.py"),
    );
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = only_line(&o);
    assert!(
        err.starts_with("tpuscope: error: --plugin") && err.contains("is not a PJRT plugin"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "the workload ran: {}", show(&o));

    // A library that is not a PJRT plugin (no GetPjrtApi).
    let libz = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libz.so.1");
    if libz.exists() {
        let o = run_in(
            dir.path(),
            &["--plugin", libz.to_str().unwrap()],
            &workload("jax_shapes.py"),
        );
        assert_eq!(o.status.code(), Some(2), "{}", show(&o));
        let err = only_line(&o);
        assert!(
            err.contains("is not a PJRT plugin") && err.contains("GetPjrtApi"),
            "{err}"
        );
        assert!(o.stdout.is_empty(), "the workload ran: {}", show(&o));
    } else {
        eprintln!("skipped the library case: no {}", libz.display());
    }

    // A directory: said to be one, with the plugin it holds.
    let plugin_dir = dir.path().join("plugins");
    std::fs::create_dir(&plugin_dir).unwrap();
    std::fs::copy(
        cpu_plugin("jax"),
        plugin_dir.join("pjrt_c_api_cpu_plugin.so"),
    )
    .unwrap();
    let o = run_in(
        dir.path(),
        &["--plugin", plugin_dir.to_str().unwrap()],
        &workload("jax_shapes.py"),
    );
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = only_line(&o);
    assert!(
        err.contains("is a directory")
            && err.contains("plugins/pjrt_c_api_cpu_plugin.so")
            && !err.contains("does not exist"),
        "{err}"
    );
}

#[test]
fn a_collector_variable_naming_a_directory_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(tpuscope())
        .args(["run", "--no-tui", "--"])
        .arg(venv_python("jax"))
        .arg(workload("jax_shapes.py"))
        .current_dir(dir.path())
        .env("TPUSCOPE_COLLECTOR", dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = only_line(&o);
    assert!(
        err.contains("is a directory") && err.contains("libtpuscope_collector.so"),
        "{err}"
    );
}
