//! What tests that drive a real PJRT plugin share: finding the test envs and the XLA CPU plugin,
//! loading PJRT libraries, and a small program to compile and run through `Driver`. The
//! collector's tests include this file with `#[path]` (test helpers, not a library API).
//!
//! The plugin comes from `TPUSCOPE_TEST_CPU_PLUGIN` or the jax test env
//! (`~/.cache/tpuscope/envs/jax`, see `scripts/setup-envs.sh`); callers fail when it is absent.
// Each test binary uses a part of this module.
#![allow(dead_code, unsafe_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use tpuscope_pjrt::abi::{
    PjrtApi, PjrtBuffer, PjrtClient, PjrtExecutable, PjrtLoadedExecutable, PjrtTopologyDescription,
};
use tpuscope_pjrt::driver::{Driver, ExecuteWith, OptionValue, SINGLE_DEVICE_COMPILE_OPTIONS};

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
