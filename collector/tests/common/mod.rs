//! What the collector's integration tests and its benchmark share: finding the test envs, the
//! XLA CPU plugin and the built collector cdylib, loading PJRT libraries, re-running the current
//! binary as a child (the collector reads its configuration once per process), and reading back
//! the trace a child wrote. The benchmark includes this file with `#[path]`.
//!
//! Finding the CPU plugin, loading PJRT libraries and driving a small program through them are
//! the pjrt crate's test helpers (`pjrt/tests/common`), included here and re-exported.
// Each test binary uses a part of this module.
#![allow(dead_code, unsafe_code, clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

#[path = "../../../pjrt/tests/common/mod.rs"]
mod plugin;
pub use plugin::*;

/// A test env's interpreter; fails without it.
pub fn env_python(env: &str) -> PathBuf {
    let py = envs_root().join(env).join("bin/python");
    assert!(
        py.is_file(),
        "the {env} test env is missing ({}): run scripts/setup-envs.sh {env}",
        py.display()
    );
    py
}

/// The XLA CPU plugin installed in a test env (lammps-jax-pjrt-cpu); fails without it.
pub fn env_cpu_plugin(env: &str) -> PathBuf {
    find_in_env(env, "lammps_jax_pjrt_cpu", "pjrt_c_api_cpu_plugin.so").unwrap_or_else(|| {
        panic!(
            "the XLA CPU plugin is missing from the {env} env (under {}): run \
             scripts/setup-envs.sh {env}",
            envs_root().join(env).join("lib").display()
        )
    })
}

/// The newest collector cdylib of this binary's profile: `target/<profile>/deps/` (which
/// `cargo test` and `cargo bench` refresh) or `target/<profile>/` (which only `cargo build`
/// refreshes). Fails when there is none, or when it is older than the sources of the collector,
/// core or pjrt (it would test old code).
pub fn collector_so() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let candidates = [
        deps.join("libtpuscope_collector.so"),
        deps.parent().unwrap().join("libtpuscope_collector.so"),
    ];
    let hint = if cfg!(debug_assertions) {
        "cargo build -p tpuscope-collector"
    } else {
        "cargo build --release -p tpuscope-collector"
    };
    let (so, built) = candidates
        .iter()
        .filter_map(|p| Some((p.clone(), modified(p)?)))
        .max_by_key(|(_, t)| *t)
        .unwrap_or_else(|| {
            panic!("the collector cdylib is missing (looked at {candidates:?}): run {hint}")
        });
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for src in [
        root.join("src"),
        root.join("../core/src"),
        root.join("../pjrt/src"),
    ] {
        if let Some((newest, t)) = newest_file(&src) {
            assert!(
                t <= built,
                "{} is older than {}: run {hint}",
                so.display(),
                newest.display()
            );
        }
    }
    so
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn newest_file(dir: &Path) -> Option<(PathBuf, SystemTime)> {
    let mut best: Option<(PathBuf, SystemTime)> = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let cand = if p.is_dir() {
            newest_file(&p)
        } else {
            modified(&p).map(|t| (p, t))
        };
        if let Some((p, t)) = cand
            && best.as_ref().is_none_or(|(_, b)| t > *b)
        {
            best = Some((p, t));
        }
    }
    best
}

/// Runs this binary again with `args` and `envs` (and `TPUSCOPE_QUIET=1`); fails unless it
/// succeeds. Returns its (stdout, stderr).
pub fn run_self<K, V>(
    what: &str,
    args: &[&str],
    envs: impl IntoIterator<Item = (K, V)>,
) -> (String, String)
where
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(args)
        .env("TPUSCOPE_QUIET", "1")
        .envs(envs)
        .output()
        .unwrap_or_else(|e| panic!("child {what}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "child {what} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    (stdout, stderr)
}

/// The traces (`*.tps`) in `dir`, sorted.
pub fn traces_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "tps"))
        .collect();
    v.sort();
    v
}

/// The one trace a run wrote into `dir`, decoded; fails unless there is exactly one.
pub fn trace_in(dir: &Path) -> tpuscope_core::Trace {
    let files = traces_in(dir);
    assert_eq!(files.len(), 1, "traces in {}: {files:?}", dir.display());
    tpuscope_core::read_trace_file(&files[0]).unwrap()
}
