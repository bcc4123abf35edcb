//! The collector switched on by `tpuscope env`'s variables alone, as a fixed entrypoint would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

#[test]
fn exports_from_tpuscope_env_trace_a_plain_python_run() {
    let py = venv_python("jax");
    let dir = tempfile::tempdir().unwrap();
    let out = run_tpuscope(
        &[
            "env",
            "--python",
            py.to_str().unwrap(),
            "--out",
            dir.path().to_str().unwrap(),
        ],
        &[],
        dir.path(),
    );
    assert!(out.status.success(), "{}", show(&out));
    let exports = String::from_utf8(out.stdout).unwrap();
    assert!(
        exports.contains("export TPUSCOPE_REAL_PLUGIN="),
        "{exports}"
    );
    // The job's own command, unchanged, after the exports (as a container entrypoint would run it).
    let script = format!(
        "{exports}\nexec {} {}",
        py.display(),
        workload("jax_shapes.py").display()
    );
    let run = std::process::Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", show(&run));
    let trace = only_trace(dir.path());
    assert_eq!(trace.completeness, tpuscope_core::Completeness::Complete);
    assert!(
        count(&trace, "compile") >= 4 && count(&trace, "transfer_d2h") == 24,
        "{:?}",
        kinds(&trace)
    );
    // The agent came along through PYTHONPATH: the JAX compiles carry the user's stack.
    assert!(
        trace
            .events
            .iter()
            .any(|r| matches!(r, tpuscope_core::Record::Compile(c) if c.stack != 0))
    );
}
