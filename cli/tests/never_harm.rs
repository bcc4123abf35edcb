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

#[test]
fn full_disk_mid_run_is_said_once_and_the_trace_keeps_what_was_written() {
    let py = venv_python("jax");
    let dir = tempfile::tempdir().unwrap();
    let c = collector_command(&py, "jax_shapes.py", dir.path());
    // A 48 KiB file size limit makes the trace's writes fail (EFBIG) part way; Python ignores SIGXFSZ.
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
    let ours: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("tpuscope: cannot"))
        .collect();
    assert_eq!(ours.len(), 1, "{err}");
    assert!(ours[0].contains("cannot write trace"), "{err}");
    let trace = only_trace(dir.path());
    assert!(trace.manifest.is_some());
    assert_ne!(trace.completeness, tpuscope_core::Completeness::Complete);
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
