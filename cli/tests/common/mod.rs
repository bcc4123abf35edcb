//! Shared helpers of the end-to-end tests: the real pinned Python environments, the built
//! binaries, and trace inspection.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod attach;
pub mod graph_break_stream;
pub mod tmux;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tpuscope_core::Trace;
use tpuscope_core::event::{Direction, Record};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The python of a pinned test environment; fails the test when it is not installed.
pub fn venv_python(name: &str) -> PathBuf {
    let out = Command::new(repo_root().join("scripts/env-path.sh"))
        .arg(name)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "test environment '{name}' missing: {} (run scripts/setup-envs.sh {name})",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Path of the CPU plugin inside a test environment.
pub fn cpu_plugin(env: &str) -> PathBuf {
    let py = venv_python(env);
    let out = Command::new(&py)
        .args(["-c", "import importlib.util,os;s=importlib.util.find_spec('lammps_jax_pjrt_cpu');print(os.path.join(list(s.submodule_search_locations)[0],'pjrt_c_api_cpu_plugin.so'))"])
        .output()
        .unwrap();
    let p = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    assert!(
        p.is_file(),
        "CPU plugin not found in env {env}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    p
}

/// libtpu.so of the torch_tpu test environment (libtpu 0.0.52, compile-only without a TPU).
pub fn libtpu() -> PathBuf {
    let py = venv_python("torch_tpu");
    let p = py
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("lib/python3.11/site-packages/libtpu/libtpu.so");
    assert!(
        p.is_file(),
        "libtpu missing at {} (run scripts/setup-envs.sh torch_tpu)",
        p.display()
    );
    p
}

pub fn target_dir() -> PathBuf {
    // The test binary lives in target/<profile>/deps.
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

pub fn tpuscope() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tpuscope"))
}

/// The newest build of a cdylib: `cargo build` puts it in target/<profile>, `cargo test` may only
/// refresh target/<profile>/deps.
fn newest_lib(name: &str) -> PathBuf {
    let candidates = [
        target_dir().join(name),
        target_dir().join("deps").join(name),
    ];
    let newest = candidates
        .iter()
        .filter_map(|p| Some((std::fs::metadata(p).ok()?.modified().ok()?, p.clone())))
        .max()
        .map(|(_, p)| p);
    newest.unwrap_or_else(|| {
        panic!("{name} missing: build the workspace first (cargo build --workspace)")
    })
}

pub fn collector() -> PathBuf {
    newest_lib("libtpuscope_collector.so")
}

pub fn fault_plugin() -> PathBuf {
    newest_lib("libtpuscope_fault_plugin.so")
}

pub fn workload(name: &str) -> PathBuf {
    repo_root().join("tests/workloads").join(name)
}

/// Runs `tpuscope` with arguments and extra environment.
pub fn run_tpuscope(args: &[&str], env: &[(&str, &str)], cwd: &Path) -> Output {
    let mut c = Command::new(tpuscope());
    c.args(args).current_dir(cwd);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Whether `xvfb-run` is here for the tests that open the window. Under CI its absence fails
/// the test (scripts/setup-system.sh installs it); elsewhere the test is skipped, saying so.
pub fn have_xvfb() -> bool {
    let have = Command::new("sh")
        .args(["-c", "command -v xvfb-run"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var_os("CI").is_none(),
            "xvfb-run is needed under CI (scripts/setup-system.sh installs it)"
        );
        eprintln!("skipped: xvfb-run is not installed");
    }
    have
}

pub fn show(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The `.tps` files in a directory.
pub fn traces_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "tps"))
        .collect();
    v.sort();
    v
}

pub fn only_trace(dir: &Path) -> Trace {
    let t = traces_in(dir);
    assert_eq!(t.len(), 1, "expected one trace in {}: {t:?}", dir.display());
    tpuscope_core::read_trace_file(&t[0]).unwrap()
}

/// Number of event records of each dump kind (transfers split by direction).
pub fn kinds(trace: &Trace) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for r in &trace.events {
        let k = match r {
            Record::Transfer(t) if t.direction == Direction::H2d as i32 => {
                "transfer_h2d".to_string()
            }
            Record::Transfer(_) => "transfer_d2h".to_string(),
            other => other.kind().name().to_string(),
        };
        *m.entry(k).or_insert(0) += 1;
    }
    m
}

pub fn count(trace: &Trace, kind: &str) -> usize {
    kinds(trace).get(kind).copied().unwrap_or(0)
}

/// The counts file the fault plugin writes at exit.
pub fn read_counts(path: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

pub fn stdout_lines_with(out: &Output, prefix: &str) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(prefix))
        .map(String::from)
        .collect()
}

/// The compile records of a trace, in file order.
pub fn compiles(trace: &Trace) -> Vec<&tpuscope_core::event::Compile> {
    trace
        .events
        .iter()
        .filter_map(|r| {
            if let Record::Compile(c) = r {
                Some(&**c)
            } else {
                None
            }
        })
        .collect()
}

/// The lines tpuscope itself wrote on the workload's stderr.
pub fn tpuscope_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("tpuscope:"))
        .map(String::from)
        .collect()
}

/// Waits until a gated workload (`tests/workloads/live_*.py`) writes its pid to `ready`; panics
/// with its output if it exits or `timeout` passes first.
pub fn wait_until_ready(
    run: &mut std::process::Child,
    ready: &Path,
    timeout: std::time::Duration,
) -> u32 {
    let start = std::time::Instant::now();
    while !ready.exists() {
        if run.try_wait().unwrap().is_some() || start.elapsed() > timeout {
            let _ = run.kill();
            let status = run.wait().unwrap();
            let read = |r: Option<&mut dyn std::io::Read>| {
                let mut v = Vec::new();
                if let Some(r) = r {
                    let _ = r.read_to_end(&mut v);
                }
                v
            };
            let stdout = read(run.stdout.as_mut().map(|s| s as &mut dyn std::io::Read));
            let stderr = read(run.stderr.as_mut().map(|s| s as &mut dyn std::io::Read));
            let out = Output {
                status,
                stdout,
                stderr,
            };
            panic!("the workload never got ready: {}", show(&out));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    std::fs::read_to_string(ready)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}
