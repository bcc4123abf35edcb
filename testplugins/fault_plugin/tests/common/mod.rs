//! Helpers of the fault plugin's tests: where the built plugin and the real CPU plugin are, a
//! re-exec of the test binary per scenario (the plugin reads its environment once per
//! process), and raw PJRT calls whose side calls (event awaits) the tests must count.
#![allow(dead_code, unsafe_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::ptr;

use tpuscope_pjrt::abi::*;
use tpuscope_pjrt::driver::{self, Driver};

pub const ENV_REAL: &str = "TPUSCOPE_FAULT_REAL_PLUGIN";
pub const ENV_SPEC: &str = "TPUSCOPE_FAULT_SPEC";
pub const ENV_COUNTS: &str = "TPUSCOPE_FAULT_COUNTS";
/// Set in a re-executed test binary to the name of the scenario it runs.
pub const ENV_CHILD: &str = "TPUSCOPE_FAULT_TEST_CHILD";
/// Where a child writes the counts it expects the plugin to report at exit.
pub const ENV_EXPECTED: &str = "TPUSCOPE_FAULT_TEST_EXPECTED";

/// Every key of the counts file, in the plugin's order.
pub const COUNT_KEYS: &[&str] = &[
    "Client_Create",
    "Client_Compile",
    "Compile",
    "LoadedExecutable_Execute",
    "Client_BufferFromHostBuffer",
    "Buffer_ToHostBuffer",
    "Buffer_ToHostBuffer_SizeQuery",
    "Buffer_CopyRawToHost",
    "Event_Await",
    "Buffer_IsOnCpu",
    "Buffer_ReadyEvent",
    "Buffer_IncreaseExternalReferenceCount",
    "Buffer_OpaqueDeviceMemoryDataPointer",
    "Buffer_UnsafePointer",
    "Executable_Serialize",
    "Executable_DeserializeAndLoad",
    "Buffer_Destroy",
    "Executable_OptimizedProgram",
    "Device_MemoryStats",
    "Injected_Errors",
    "Injected_ErrorsDestroyed",
    "Injected_Delays",
];

/// `f(x) = x + x` on f32[2,3], as StableHLO text (the CPU plugin takes MLIR text as "mlir").
pub const ADD_MLIR: &str = r#"
module @add_self {
  func.func public @main(%arg0: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  }
}
"#;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The built fault plugin. `cargo test` rebuilds it before the integration tests (the crate is
/// also an rlib for that) but leaves the fresh copy in `deps/`, beside the test binary; only
/// `cargo build` copies it up to `target/debug`.
pub fn fault_plugin() -> PathBuf {
    const NAME: &str = "libtpuscope_fault_plugin.so";
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let p = [
        deps.join(NAME),
        deps.parent().unwrap().join(NAME),
        repo_root().join("target/debug").join(NAME),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or_else(|| repo_root().join("target/debug").join(NAME));
    assert!(
        p.is_file(),
        "{} missing: build it with `cargo build -p tpuscope-fault-plugin`",
        p.display()
    );
    p
}

fn envs_root() -> PathBuf {
    std::env::var_os("TPUSCOPE_ENVS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/tpuscope/envs")
        })
}

/// The XLA CPU plugin: `TPUSCOPE_TEST_CPU_PLUGIN`, else the one in the jax test env.
pub fn cpu_plugin() -> PathBuf {
    if let Some(p) = std::env::var_os("TPUSCOPE_TEST_CPU_PLUGIN") {
        return PathBuf::from(p);
    }
    let lib = envs_root().join("jax/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|rd| {
        rd.flatten()
            .map(|py| {
                py.path()
                    .join("site-packages/lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so")
            })
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "the XLA CPU plugin is missing: set TPUSCOPE_TEST_CPU_PLUGIN to \
             pjrt_c_api_cpu_plugin.so (pip package lammps-jax-pjrt-cpu==0.11.2) or run \
             scripts/setup-envs.sh jax"
        )
    })
}

/// The python of the jax test env; fails with the fix when the env is not set up.
pub fn jax_python() -> PathBuf {
    let out = Command::new(repo_root().join("scripts/env-path.sh"))
        .arg("jax")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the jax test env is missing: {} (create it with scripts/setup-envs.sh jax)",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

pub fn show(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// In the parent: runs only the test `name` in a fresh copy of this test binary, with the
/// plugin's variables replaced by `env`, and returns its output after checking it ran and
/// passed. In that child (`ENV_CHILD` = `name`): returns `None`; the caller runs the scenario.
pub fn run_in_child(name: &str, env: &[(&str, &str)]) -> Option<Output> {
    if std::env::var(ENV_CHILD).as_deref() == Ok(name) {
        return None;
    }
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(ENV_CHILD, name);
    for k in [ENV_REAL, ENV_SPEC, ENV_COUNTS, ENV_EXPECTED] {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    eprintln!("child {name}:\n{}", show(&out));
    assert!(out.status.success(), "child {name} failed");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "child {name} did not run the scenario"
    );
    Some(out)
}

type GetPjrtApiFn = unsafe extern "C" fn() -> *const PjrtApi;
type WriteCountsFn = unsafe extern "C" fn() -> c_int;

/// The fault plugin, loaded into this (child) process.
pub struct Plugin {
    lib: &'static libloading::Library,
}

impl Plugin {
    pub fn load() -> Plugin {
        let path = fault_plugin();
        // SAFETY: loading a PJRT plugin runs its initializers; it stays loaded (leaked) because
        // its table and hooks are used until exit.
        let lib = unsafe { libloading::Library::new(&path) }
            .unwrap_or_else(|e| panic!("dlopen {}: {e}", path.display()));
        Plugin {
            lib: Box::leak(Box::new(lib)),
        }
    }

    pub fn api(&self) -> *const PjrtApi {
        // SAFETY: the plugin exports `GetPjrtApi` with the PJRT signature.
        unsafe {
            let get = self.lib.get::<GetPjrtApiFn>(b"GetPjrtApi\0").unwrap();
            get()
        }
    }

    pub fn driver(&self) -> Driver {
        let api = self.api();
        assert!(
            !api.is_null(),
            "the fault plugin's GetPjrtApi returned NULL"
        );
        // SAFETY: the table lives as long as the (leaked) library.
        unsafe { Driver::new(api) }.unwrap()
    }

    /// `tpuscope_fault_write_counts()`.
    pub fn write_counts(&self) -> c_int {
        // SAFETY: exported by the plugin with this signature.
        unsafe {
            let f = self
                .lib
                .get::<WriteCountsFn>(b"tpuscope_fault_write_counts\0")
                .unwrap();
            f()
        }
    }
}

pub fn read_counts(path: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("counts file {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("counts JSON {text:?}: {e}"))
}

/// The counts a scenario expects, all keys present.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected(pub BTreeMap<String, u64>);

impl Expected {
    pub fn new() -> Expected {
        Expected(COUNT_KEYS.iter().map(|k| (k.to_string(), 0)).collect())
    }

    pub fn add(&mut self, key: &str, n: u64) {
        *self
            .0
            .get_mut(key)
            .unwrap_or_else(|| panic!("unknown key {key}")) += n;
    }

    pub fn save(&self, path: &Path) {
        std::fs::write(path, serde_json::to_string_pretty(&self.0).unwrap()).unwrap();
    }
}

/// Calls one slot with `args`; returns the raw error (the caller checks or destroys it).
///
/// # Safety
/// `args` must be valid for the slot.
pub unsafe fn raw<A>(f: Option<PjrtFn<A>>, args: &mut A) -> *mut PjrtError {
    // SAFETY: caller guarantee.
    unsafe { f.expect("slot")(args) }
}

/// `PJRT_Client_BufferFromHostBuffer` plus the await of its done event, counted in `exp`.
pub fn h2d(
    d: &Driver,
    exp: &mut Expected,
    client: *mut PjrtClient,
    device: *mut PjrtDevice,
    data: &[u8],
    dims: &[i64],
) -> Result<*mut PjrtBuffer, driver::Status> {
    let mut a = ClientBufferFromHostBufferArgs::new();
    a.client = client;
    a.data = data.as_ptr().cast();
    a.type_ = buffer_type::F32;
    a.dims = dims.as_ptr();
    a.num_dims = dims.len();
    a.host_buffer_semantics = host_buffer_semantics::IMMUTABLE_UNTIL_TRANSFER_COMPLETES;
    a.device = device;
    exp.add("Client_BufferFromHostBuffer", 1);
    // SAFETY: handles are live; `data` outlives the awaited transfer.
    unsafe {
        d.check(raw(d.api().client_buffer_from_host_buffer, &mut a))?;
        if !a.done_with_host_buffer.is_null() {
            exp.add("Event_Await", 1);
            d.event_await(a.done_with_host_buffer).unwrap();
            d.event_destroy(a.done_with_host_buffer).unwrap();
        }
    }
    Ok(a.buffer)
}

/// `PJRT_Buffer_ToHostBuffer`: size query, copy, await, counted in `exp`.
pub fn to_host(
    d: &Driver,
    exp: &mut Expected,
    buf: *mut PjrtBuffer,
) -> Result<Vec<u8>, driver::Status> {
    let mut q = BufferToHostBufferArgs::new();
    q.src = buf;
    exp.add("Buffer_ToHostBuffer_SizeQuery", 1);
    // SAFETY: `buf` is live; dst NULL is the size query.
    unsafe { d.check(raw(d.api().buffer_to_host_buffer, &mut q))? };
    let mut out = vec![0u8; q.dst_size];
    let mut a = BufferToHostBufferArgs::new();
    a.src = buf;
    a.dst = out.as_mut_ptr().cast();
    a.dst_size = out.len();
    exp.add("Buffer_ToHostBuffer", 1);
    // SAFETY: `out` holds `dst_size` bytes and outlives the awaited copy.
    unsafe {
        d.check(raw(d.api().buffer_to_host_buffer, &mut a))?;
        if !a.event.is_null() {
            exp.add("Event_Await", 1);
            d.event_await(a.event).unwrap();
            d.event_destroy(a.event).unwrap();
        }
    }
    Ok(out)
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// `PJRT_Error_ForEachPayload` (opaque in the collector's layouts; only the head matters here).
#[repr(C)]
pub struct ErrorForEachPayloadArgs {
    pub struct_size: usize,
    pub extension_start: *mut ExtensionBase,
    pub error: *const PjrtError,
    pub visitor: *mut std::ffi::c_void,
    pub user_arg: *mut std::ffi::c_void,
}

impl ErrorForEachPayloadArgs {
    pub fn new(error: *const PjrtError) -> Self {
        ErrorForEachPayloadArgs {
            struct_size: size_of::<Self>(),
            extension_start: ptr::null_mut(),
            error,
            visitor: ptr::null_mut(),
            user_arg: ptr::null_mut(),
        }
    }
}
