//! What the collector's integration tests and its benchmark share: finding the test envs, the
//! XLA CPU plugin and the built collector cdylib, loading PJRT libraries, re-running the current
//! binary as a child (the collector reads its configuration once per process), and reading back
//! the trace a child wrote. The benchmark includes this file with `#[path]`.
//!
//! The plugin comes from `TPUSCOPE_TEST_CPU_PLUGIN` or the jax test env
//! (`~/.cache/tpuscope/envs/jax`, see `scripts/setup-envs.sh`); callers fail when it is absent.
// Each test binary uses a part of this module.
#![allow(dead_code, unsafe_code, clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use tpuscope_collector::ffi::pjrt::driver::{
    Driver, ExecuteWith, OptionValue, SINGLE_DEVICE_COMPILE_OPTIONS,
};
use tpuscope_collector::ffi::pjrt::{
    PjrtApi, PjrtBuffer, PjrtClient, PjrtExecutable, PjrtLoadedExecutable, PjrtTopologyDescription,
};

/// A tiny StableHLO module in MLIR text: `f(x) = x + x` on f32[2,3].
pub const ADD_MLIR: &str = r#"
module @add_self {
  func.func public @main(%arg0: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  }
}
"#;

/// Where `scripts/setup-envs.sh` puts the test envs (`TPUSCOPE_ENVS` overrides).
pub fn envs_root() -> PathBuf {
    std::env::var_os("TPUSCOPE_ENVS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/tpuscope/envs")
        })
}

/// A file named `file` under `<env>/lib/python*/site-packages/<pkg_dir>/`.
pub fn find_in_env(env: &str, pkg_dir: &str, file: &str) -> Option<PathBuf> {
    let lib = envs_root().join(env).join("lib");
    std::fs::read_dir(lib)
        .ok()?
        .flatten()
        .map(|py| py.path().join("site-packages").join(pkg_dir).join(file))
        .find(|p| p.is_file())
}

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

/// The XLA CPU plugin: `TPUSCOPE_TEST_CPU_PLUGIN`, else the jax test env's; fails without it.
pub fn cpu_plugin() -> PathBuf {
    if let Some(p) = std::env::var_os("TPUSCOPE_TEST_CPU_PLUGIN") {
        return PathBuf::from(p);
    }
    find_in_env("jax", "lammps_jax_pjrt_cpu", "pjrt_c_api_cpu_plugin.so").unwrap_or_else(|| {
        panic!(
            "the XLA CPU plugin is missing: set TPUSCOPE_TEST_CPU_PLUGIN to \
             pjrt_c_api_cpu_plugin.so (pip package lammps-jax-pjrt-cpu==0.11.2) or run \
             scripts/setup-envs.sh jax"
        )
    })
}

/// The newest collector cdylib of this binary's profile: `target/<profile>/deps/` (which
/// `cargo test` and `cargo bench` refresh) or `target/<profile>/` (which only `cargo build`
/// refreshes). Fails when there is none, or when it is older than the collector's or core's
/// sources (it would test old code).
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
    for src in [root.join("src"), root.join("../core/src")] {
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

type GetPjrtApiFn = unsafe extern "C" fn() -> *const PjrtApi;

/// Loads a PJRT plugin (or the collector) for the rest of the process.
pub fn open(path: &Path) -> &'static libloading::Library {
    // SAFETY: loading a PJRT plugin runs its initializers; the library is leaked (never
    // unloaded) because its table points into it.
    let lib = unsafe { libloading::Library::new(path) }
        .unwrap_or_else(|e| panic!("dlopen {}: {e}", path.display()));
    Box::leak(Box::new(lib))
}

/// What the library's `GetPjrtApi` returns (NULL included).
pub fn get_api(lib: &libloading::Library) -> *const PjrtApi {
    // SAFETY: the symbol has this signature in the collector and in every PJRT plugin.
    unsafe {
        let get = lib
            .get::<GetPjrtApiFn>(b"GetPjrtApi\0")
            .unwrap_or_else(|e| panic!("GetPjrtApi: {e}"));
        get()
    }
}

/// Loads a library and returns its table; fails if `GetPjrtApi` returns NULL.
pub fn load_api(path: &Path) -> &'static PjrtApi {
    let api = get_api(open(path));
    assert!(
        !api.is_null(),
        "GetPjrtApi of {} returned NULL",
        path.display()
    );
    // SAFETY: a non-NULL table lives as long as its library, which is never unloaded.
    unsafe { &*api }
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

/// Little-endian bytes of `v`.
pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// Runs an `ADD_MLIR` executable on `x` (which holds `vals`) with a completion event, as JAX
/// does: waits for the event, checks the output is `vals` doubled and destroys it.
///
/// # Safety
/// `exe` and `x` must be live handles of `d`'s plugin.
pub unsafe fn execute_doubles(
    d: &Driver,
    exe: *mut PjrtLoadedExecutable,
    x: *mut PjrtBuffer,
    vals: &[f32],
    options_struct_size: Option<usize>,
) {
    let with = ExecuteWith {
        completion_events: true,
        options_struct_size,
    };
    // SAFETY: caller guarantee; the event and the output are ours to wait for and destroy.
    unsafe {
        let r = d.execute(exe, &[vec![x]], with).unwrap();
        assert_eq!(r.events.len(), 1);
        d.event_await(r.events[0]).unwrap();
        d.event_destroy(r.events[0]).unwrap();
        let got = to_f32(&d.buffer_to_host(r.outputs[0][0]).unwrap());
        assert_eq!(got, vals.iter().map(|v| v * 2.0).collect::<Vec<_>>());
        d.buffer_destroy(r.outputs[0][0]).unwrap();
    }
}

/// A client of the CPU plugin (through `d`) with `devices` devices.
pub fn cpu_client(d: &Driver, devices: i64) -> *mut PjrtClient {
    d.client_create(&[("cpu_device_count", OptionValue::Int(devices))])
        .unwrap_or_else(|e| panic!("client create: {e}"))
}

/// `ADD_MLIR` compiled for one device.
///
/// # Safety
/// `client` must be live.
pub unsafe fn compile_add(d: &Driver, client: *mut PjrtClient) -> *mut PjrtLoadedExecutable {
    // SAFETY: caller guarantee.
    unsafe {
        d.compile(
            client,
            ADD_MLIR.as_bytes(),
            "mlir",
            SINGLE_DEVICE_COMPILE_OPTIONS,
        )
    }
    .unwrap_or_else(|e| panic!("compile: {e}"))
}

/// `ADD_MLIR` compiled for one device of `topo` without loading it (`PJRT_Compile`).
///
/// # Safety
/// `topo` and `client` must be live.
pub unsafe fn compile_only_add(
    d: &Driver,
    topo: *mut PjrtTopologyDescription,
    client: *mut PjrtClient,
) -> *mut PjrtExecutable {
    let (code, opts) = (ADD_MLIR.as_bytes(), SINGLE_DEVICE_COMPILE_OPTIONS);
    // SAFETY: caller guarantee.
    unsafe { d.compile_only(topo, client, code, "mlir", opts) }
        .unwrap_or_else(|e| panic!("compile-only: {e}"))
}
