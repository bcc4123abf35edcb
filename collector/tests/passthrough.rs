//! Drives the built collector (`libtpuscope_collector.so`, loaded with `dlopen` like a frontend
//! would) in front of the real XLA CPU plugin, then reads the trace it wrote.
//!
//! The collector reads its configuration once per process, so each scenario runs in a child
//! process: the test binary re-executes itself with `TPUSCOPE_PT_CHILD` naming the scenario.
#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tpuscope_collector::ffi::pjrt::driver::{
    Driver, ExecuteWith, OptionValue, SINGLE_DEVICE_COMPILE_OPTIONS, Status,
};
use tpuscope_collector::ffi::pjrt::{
    self, ExecuteOptions, LoadedExecutableExecuteArgs, PjrtApi, PjrtArgs, PjrtBuffer, buffer_type,
};
use tpuscope_core::Record;
use tpuscope_core::writer::blob_hash;

const CHILD_ENV: &str = "TPUSCOPE_PT_CHILD";

const ADD_MLIR: &str = r#"
module @add_self {
  func.func public @main(%arg0: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<2x3xf32>
    return %0 : tensor<2x3xf32>
  }
}
"#;

const BAD_MLIR: &str = "module @broken { func.func public @main( this is not mlir";

fn envs_root() -> PathBuf {
    std::env::var_os("TPUSCOPE_ENVS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/tpuscope/envs")
        })
}

fn cpu_plugin() -> PathBuf {
    if let Some(p) = std::env::var_os("TPUSCOPE_TEST_CPU_PLUGIN") {
        return PathBuf::from(p);
    }
    let lib = envs_root().join("jax").join("lib");
    for py in std::fs::read_dir(&lib).into_iter().flatten().flatten() {
        let p = py
            .path()
            .join("site-packages/lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so");
        if p.is_file() {
            return p;
        }
    }
    panic!(
        "the XLA CPU plugin is missing: set TPUSCOPE_TEST_CPU_PLUGIN to pjrt_c_api_cpu_plugin.so \
         (pip package lammps-jax-pjrt-cpu==0.11.2) or run scripts/setup-envs.sh jax"
    )
}

/// `target/<profile>/libtpuscope_collector.so`, next to the `deps/` directory of this test binary.
fn collector_so() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let so = profile_dir.join("libtpuscope_collector.so");
    let hint = if cfg!(debug_assertions) {
        "cargo build -p tpuscope-collector"
    } else {
        "cargo build --release -p tpuscope-collector"
    };
    assert!(so.is_file(), "{} is missing: run {hint}", so.display());
    // `cargo test` builds the crate as an rlib only: a cdylib older than the sources would test
    // old code.
    let built = std::fs::metadata(&so).and_then(|m| m.modified()).unwrap();
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

fn newest_file(dir: &Path) -> Option<(PathBuf, std::time::SystemTime)> {
    let mut best: Option<(PathBuf, std::time::SystemTime)> = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let cand = if p.is_dir() {
            newest_file(&p)
        } else {
            e.metadata().and_then(|m| m.modified()).ok().map(|t| (p, t))
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

fn open(path: &Path) -> &'static libloading::Library {
    // SAFETY: loading a PJRT plugin (or the collector) runs its initializers; never unloaded.
    Box::leak(Box::new(unsafe { libloading::Library::new(path) }.unwrap()))
}

fn get_api(lib: &libloading::Library) -> *const PjrtApi {
    // SAFETY: the symbol has this signature in the collector and in every PJRT plugin.
    unsafe { lib.get::<GetPjrtApiFn>(b"GetPjrtApi\0").unwrap()() }
}

/// Runs `scenario` in a child process (this test binary, filtered to `test_name`) with `envs`.
fn run_child(test_name: &str, scenario: &str, envs: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, scenario)
        .env("TPUSCOPE_QUIET", "1");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    println!(
        "--- child {scenario} stdout ---\n{stdout}\n--- child {scenario} stderr ---\n{stderr}"
    );
    assert!(
        out.status.success(),
        "child {scenario} failed: {}",
        out.status
    );
    stdout + &stderr
}

fn child_scenario() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn records_a_run_through_the_collector() {
    if child_scenario().as_deref() == Some("run") {
        return run_scenario();
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap().to_string();
    let plugin = cpu_plugin();
    run_child(
        "records_a_run_through_the_collector",
        "run",
        &[
            ("TPUSCOPE_REAL_PLUGIN", plugin.to_str().unwrap()),
            ("TPUSCOPE_OUT", &out),
            ("TPUSCOPE_ROLE", "standin"),
            ("TPUSCOPE_STACKS", "1"),
        ],
    );
}

/// The child side of `records_a_run_through_the_collector`.
fn run_scenario() {
    let out_dir = PathBuf::from(std::env::var("TPUSCOPE_OUT").unwrap());
    let collector = open(&collector_so());
    let table = get_api(collector);
    assert!(!table.is_null());
    assert_eq!(
        get_api(collector),
        table,
        "GetPjrtApi must return the same table"
    );
    // The real plugin, loaded again by the test (same library instance as the collector's).
    let real_table = get_api(open(&cpu_plugin()));
    // SAFETY: both tables live for the process.
    let (c, r) = unsafe {
        (
            Driver::new(table).unwrap(),
            Driver::new(real_table).unwrap(),
        )
    };
    let (capi, rapi) = (c.api(), r.api());
    assert_eq!(capi.struct_size, rapi.struct_size);
    assert_eq!(capi.pjrt_api_version.minor, rapi.pjrt_api_version.minor);
    assert_eq!(capi.extension_start, rapi.extension_start);
    // Hooked slots differ, the others are the plugin's own.
    assert_ne!(
        capi.client_compile.map(|f| f as usize),
        rapi.client_compile.map(|f| f as usize)
    );
    assert_eq!(
        capi.buffer_dimensions.map(|f| f as usize),
        rapi.buffer_dimensions.map(|f| f as usize)
    );

    // A TPU-only create option the stand-in role drops (the CPU plugin would reject it).
    let opts = [
        ("cpu_device_count", OptionValue::Int(2)),
        ("premapped_buffer_size", OptionValue::Int(1 << 20)),
    ];
    match r.client_create(&opts) {
        Ok(cl) => {
            println!("note: the CPU plugin accepted premapped_buffer_size directly");
            // SAFETY: a live client of the real plugin.
            unsafe { r.client_destroy(cl).unwrap() };
        }
        Err(e) => println!("directly, premapped_buffer_size is rejected: {e}"),
    }
    let client = c.client_create(&opts).unwrap();

    // SAFETY: every handle below comes from `client` and is destroyed before the end.
    unsafe {
        assert_eq!(c.platform_name(client).unwrap(), "cpu");
        let devs = c.addressable_devices(client).unwrap();
        assert_eq!(devs.len(), 2);

        let exe = c
            .compile(
                client,
                ADD_MLIR.as_bytes(),
                "mlir",
                SINGLE_DEVICE_COMPILE_OPTIONS,
            )
            .unwrap();
        let exe_dev = c.loaded_addressable_devices(exe).unwrap()[0];
        let vals = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let x = c
            .buffer_from_host(
                client,
                exe_dev,
                &f32_bytes(&vals),
                buffer_type::F32,
                &[2, 3],
            )
            .unwrap();

        // Executes with completion events, like JAX.
        const TRACKED: usize = 3;
        for _ in 0..TRACKED {
            let res = c
                .execute(
                    exe,
                    &[vec![x]],
                    ExecuteWith {
                        completion_events: true,
                        options_struct_size: None,
                    },
                )
                .unwrap();
            assert_eq!(res.events.len(), 1);
            c.event_await(res.events[0]).unwrap();
            c.event_destroy(res.events[0]).unwrap();
            let y = to_f32(&c.buffer_to_host(res.outputs[0][0]).unwrap());
            assert_eq!(y, vals.iter().map(|v| v * 2.0).collect::<Vec<_>>());
            c.buffer_destroy(res.outputs[0][0]).unwrap();
        }
        // torch_xla 2.9's 80-byte options: rejected directly, bridged by the collector.
        let torch_xla = ExecuteWith {
            completion_events: false,
            options_struct_size: Some(pjrt::EXECUTE_OPTIONS_SIZE_CONTEXT),
        };
        let direct = r.execute(exe, &[vec![x]], torch_xla);
        assert!(direct.is_err(), "the plugin accepted 80-byte options");
        let bridged = c.execute(exe, &[vec![x]], torch_xla).unwrap();
        let y = to_f32(&c.buffer_to_host(bridged.outputs[0][0]).unwrap());
        assert_eq!(y, vals.iter().map(|v| v * 2.0).collect::<Vec<_>>());
        c.buffer_destroy(bridged.outputs[0][0]).unwrap();

        // An invalid program: the same error through the collector as directly.
        let direct_err: Status = r
            .compile(
                client,
                BAD_MLIR.as_bytes(),
                "mlir",
                SINGLE_DEVICE_COMPILE_OPTIONS,
            )
            .map(|_| ())
            .unwrap_err();
        let hooked_err: Status = c
            .compile(
                client,
                BAD_MLIR.as_bytes(),
                "mlir",
                SINGLE_DEVICE_COMPILE_OPTIONS,
            )
            .map(|_| ())
            .unwrap_err();
        println!("invalid program: {hooked_err}");
        assert_eq!(direct_err, hooked_err);

        // Compile-only (PJRT_Compile), PJRT_Client_Load, and an execute of the loaded one.
        let topo = c.client_topology(client).unwrap();
        let co = c
            .compile_only(
                topo,
                client,
                ADD_MLIR.as_bytes(),
                "mlir",
                SINGLE_DEVICE_COMPILE_OPTIONS,
            )
            .unwrap();
        let co_loaded = c
            .client_load(client, co, SINGLE_DEVICE_COMPILE_OPTIONS)
            .unwrap();
        let res = c
            .execute(co_loaded, &[vec![x]], ExecuteWith::default())
            .unwrap();
        let y = to_f32(&c.buffer_to_host(res.outputs[0][0]).unwrap());
        assert_eq!(y, vals.iter().map(|v| v * 2.0).collect::<Vec<_>>());
        c.buffer_destroy(res.outputs[0][0]).unwrap();
        let compile_only = (co as u64, co_loaded as u64);
        c.loaded_executable_destroy(co_loaded).unwrap();
        c.executable_destroy(co).unwrap();

        // Persistent cache: store and load.
        let inner = c.get_executable(exe).unwrap();
        let ser = c.serialize(inner).unwrap();
        c.executable_destroy(inner).unwrap();
        let loaded = c.deserialize_and_load(client, &ser).unwrap();
        c.loaded_executable_destroy(loaded).unwrap();

        overhead_report(&c, &r, exe, x);

        c.buffer_destroy(x).unwrap();
        c.loaded_executable_destroy(exe).unwrap();

        // Close the trace, then check it.
        let flush: libloading::Symbol<unsafe extern "C" fn()> =
            collector.get(b"tpuscope_flush_for_tests\0").unwrap();
        flush();
        check_trace(
            &out_dir,
            client as u64,
            exe as u64,
            TRACKED,
            &ser,
            &hooked_err,
            compile_only,
        );
        c.client_destroy(client).unwrap();
    }
}

/// Times `PJRT_LoadedExecutable_Execute` through the collector and directly (same executable,
/// same argument, no completion events), alternating blocks; prints medians.
///
/// # Safety
/// `exe` and `x` must be live.
unsafe fn overhead_report(
    c: &Driver,
    r: &Driver,
    exe: *mut pjrt::PjrtLoadedExecutable,
    x: *mut PjrtBuffer,
) {
    let time_block = |d: &Driver, n: usize, samples: &mut Vec<u64>| {
        let f = d.api().loaded_executable_execute.unwrap();
        let destroy = d.api().buffer_destroy.unwrap();
        let args_list = [x];
        let lists = [args_list.as_ptr()];
        for _ in 0..n {
            let mut out: [*mut PjrtBuffer; 1] = [std::ptr::null_mut()];
            let out_lists = [out.as_mut_ptr()];
            let mut opts = ExecuteOptions::new();
            let mut a = LoadedExecutableExecuteArgs::new();
            a.executable = exe;
            a.options = &mut opts;
            a.argument_lists = lists.as_ptr();
            a.num_devices = 1;
            a.num_args = 1;
            a.output_lists = out_lists.as_ptr();
            let t = Instant::now();
            // SAFETY: all lists live across the call.
            let err = unsafe { f(&mut a) };
            samples.push(t.elapsed().as_nanos() as u64);
            assert!(err.is_null());
            // Wait for the result before the next call, so queues do not build up.
            // SAFETY: the output is a live buffer owned here.
            unsafe {
                d.buffer_to_host(out[0]).unwrap();
                let mut da = pjrt::BufferDestroyArgs::new();
                da.buffer = out[0];
                assert!(destroy(&mut da).is_null());
            }
        }
    };
    let (mut hooked, mut direct) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        time_block(c, 200, &mut hooked);
        time_block(r, 200, &mut direct);
    }
    let median = |v: &mut Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (h, d) = (median(&mut hooked), median(&mut direct));
    println!(
        "execute dispatch, median of {} calls: hooked {h} ns, direct {d} ns, overhead {} ns",
        hooked.len(),
        h as i64 - d as i64
    );
}

fn check_trace(
    out_dir: &Path,
    client_id: u64,
    exe_id: u64,
    tracked: usize,
    serialized: &[u8],
    compile_err: &Status,
    (co_id, co_loaded_id): (u64, u64),
) {
    let files: Vec<PathBuf> = std::fs::read_dir(out_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "tps"))
        .collect();
    assert_eq!(
        files.len(),
        1,
        "expected one trace in {}",
        out_dir.display()
    );
    let trace = tpuscope_core::read_trace_file(&files[0]).unwrap();
    assert!(trace.end.is_some(), "the trace has no end record");
    let manifest = trace.manifest.as_ref().unwrap();
    assert_eq!((manifest.pjrt_api_major, manifest.pjrt_api_minor), (0, 115));
    assert!(
        manifest
            .plugin_attributes
            .iter()
            .any(|kv| kv.key == "xla_version"),
        "{:?}",
        manifest.plugin_attributes
    );

    let client = trace.client.as_ref().unwrap();
    assert_eq!(client.platform_name, "cpu");
    assert_eq!(client.client_id, client_id);
    let ids: Vec<i32> = client.devices.iter().map(|d| d.id).collect();
    assert_eq!(ids, vec![0, 1]);
    assert!(
        client
            .create_options
            .iter()
            .any(|kv| kv.key == "cpu_device_count" && kv.value == "2"),
        "{:?}",
        client.create_options
    );

    let compiles: Vec<_> = trace
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Compile(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(compiles.len(), 3, "{compiles:?}");
    let only = compiles.iter().find(|c| c.api == "PJRT_Compile").unwrap();
    assert!(only.error.is_none());
    assert_eq!(only.executable_id, co_id);
    assert_eq!(only.executable_name, "add_self");
    assert_eq!(only.program_hash, blob_hash(ADD_MLIR.as_bytes()));
    assert_ne!(only.optimized_hash, 0);
    let load = trace.events.iter().find_map(|r| match r {
        Record::Load(l) => Some(l),
        _ => None,
    });
    let load = load.expect("Load");
    assert!(load.error.is_none());
    assert_eq!(
        (load.source_executable_id, load.executable_id),
        (co_id, co_loaded_id)
    );
    assert_eq!(load.executable_name, "add_self");
    let ok = compiles
        .iter()
        .find(|c| c.error.is_none() && c.api == "PJRT_Client_Compile")
        .unwrap();
    assert_eq!(ok.api, "PJRT_Client_Compile");
    assert_eq!(ok.program_format, "mlir");
    assert_eq!(ok.program_size, ADD_MLIR.len() as u64);
    assert_eq!(ok.program_hash, blob_hash(ADD_MLIR.as_bytes()));
    assert_ne!(ok.program_hash, 0);
    assert_eq!(ok.options_hash, blob_hash(SINGLE_DEVICE_COMPILE_OPTIONS));
    assert_eq!(ok.executable_id, exe_id);
    assert_eq!(ok.executable_name, "add_self");
    assert_eq!((ok.num_outputs, ok.num_devices), (1, 1));
    assert_eq!(ok.optimized_format, "hlo_with_config");
    assert_ne!(ok.optimized_hash, 0);
    let opt = trace.blobs.get(&ok.optimized_hash).expect("optimized blob");
    assert_eq!(opt.role, "optimized_program");
    assert_eq!(opt.format, "hlo_with_config");
    assert_eq!(blob_hash(&opt.data), ok.optimized_hash);
    let input = trace.blobs.get(&ok.program_hash).expect("input blob");
    assert_eq!(input.data, ADD_MLIR.as_bytes());
    assert!(trace.blobs.contains_key(&ok.options_hash));
    let mem = ok.memory.as_ref().unwrap();
    assert_eq!((mem.argument_size, mem.output_size), (24, 24));

    let bad = compiles.iter().find(|c| c.error.is_some()).unwrap();
    let e = bad.error.as_ref().unwrap();
    assert_eq!(
        (e.code, &e.message),
        (compile_err.code, &compile_err.message)
    );
    assert_eq!(bad.executable_id, 0);
    assert!(trace.events.iter().any(|r| matches!(r, Record::Error(ev)
        if ev.api == "PJRT_Client_Compile"
            && ev.code == compile_err.code
            && ev.message == compile_err.message)));

    // Executes: `tracked` with completion events, one bridged, one of the compile-only
    // executable, 2000 timed (not tracked).
    let execs: Vec<_> = trace
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Execute(e) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!(execs.len(), tracked + 1 + 1 + 2000, "execute count");
    assert!(execs.iter().all(|e| e.error.is_none()));
    assert_eq!(
        execs
            .iter()
            .filter(|e| e.executable_id == co_loaded_id)
            .count(),
        1
    );
    assert!(
        execs
            .iter()
            .all(|e| e.executable_id == exe_id || e.executable_id == co_loaded_id)
    );
    assert!(execs.iter().all(|e| e.num_devices == 1 && e.num_args == 1));
    assert!(
        execs
            .iter()
            .all(|e| trace.string(e.arg_signature) == "f32[2,3]"),
        "signature: {:?}",
        execs.first().map(|e| trace.string(e.arg_signature))
    );
    let mut seqs: Vec<u64> = execs.iter().map(|e| e.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), execs.len(), "execute seq numbers repeat");
    let with_events: Vec<_> = execs.iter().filter(|e| e.completion_tracked).collect();
    assert_eq!(with_events.len(), tracked);
    for e in &with_events {
        let done = trace.events.iter().find_map(|r| match r {
            Record::ExecuteComplete(c) if c.seq == e.seq => Some(c),
            _ => None,
        });
        let done = done.unwrap_or_else(|| panic!("no ExecuteComplete for seq {}", e.seq));
        assert_eq!(done.device_index, 0);
        assert!(done.error.is_none());
        assert!(done.t_ns >= e.t_ns);
    }
    let completes = trace
        .events
        .iter()
        .filter(|r| matches!(r, Record::ExecuteComplete(_)))
        .count();
    assert_eq!(
        completes, tracked,
        "completion events only where the caller asked"
    );

    let notes: Vec<_> = trace
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Note(n) => Some(n),
            _ => None,
        })
        .collect();
    println!("notes: {notes:?}");
    assert!(
        notes
            .iter()
            .any(|n| n.topic == "abi_bridge" && n.message.contains("premapped_buffer_size"))
    );
    assert!(
        notes
            .iter()
            .any(|n| n.topic == "abi_bridge" && n.message.contains("PJRT_ExecuteOptions"))
    );

    let store = trace.events.iter().find_map(|r| match r {
        Record::CacheStore(s) => Some(s),
        _ => None,
    });
    let store = store.expect("CacheStore");
    assert_eq!(store.bytes, serialized.len() as u64);
    assert_eq!(store.serialized_hash, blob_hash(serialized));
    assert_eq!(store.executable_name, "add_self");
    let load = trace.events.iter().find_map(|r| match r {
        Record::CacheLoad(l) => Some(l),
        _ => None,
    });
    let load = load.expect("CacheLoad");
    assert!(load.ok && load.error.is_none());
    assert_eq!(load.bytes, serialized.len() as u64);
    assert_eq!(load.serialized_hash, store.serialized_hash);
    assert_eq!(load.executable_name, "add_self");
    assert_ne!(load.executable_id, 0);
    assert!(trace.blobs.contains_key(&load.optimized_hash));
    println!(
        "trace: {} events, {} blobs, dropped {}",
        trace.events.len(),
        trace.blobs.len(),
        trace.end.as_ref().map_or(0, |e| e.dropped_total)
    );
}

#[test]
fn missing_real_plugin_returns_null() {
    if child_scenario().as_deref() == Some("missing") {
        let table = get_api(open(&collector_so()));
        assert!(
            table.is_null(),
            "GetPjrtApi returned a table for a missing plugin"
        );
        return;
    }
    let out = run_child(
        "missing_real_plugin_returns_null",
        "missing",
        &[("TPUSCOPE_REAL_PLUGIN", "/nonexistent/libreal_pjrt.so")],
    );
    assert!(
        out.contains("TPUSCOPE_REAL_PLUGIN") && out.contains("/nonexistent/libreal_pjrt.so"),
        "the error line must name the variable and the path"
    );
}

#[test]
fn disabled_recording_still_wraps_and_bridges() {
    if child_scenario().as_deref() == Some("disabled") {
        let table = get_api(open(&collector_so()));
        // SAFETY: the table lives for the process.
        let c = unsafe { Driver::new(table) }.unwrap();
        let client = c
            .client_create(&[("cpu_device_count", OptionValue::Int(1))])
            .unwrap();
        // SAFETY: handles come from `client`.
        unsafe {
            let exe = c
                .compile(
                    client,
                    ADD_MLIR.as_bytes(),
                    "mlir",
                    SINGLE_DEVICE_COMPILE_OPTIONS,
                )
                .unwrap();
            let dev = c.addressable_devices(client).unwrap()[0];
            let x = c
                .buffer_from_host(
                    client,
                    dev,
                    &f32_bytes(&[1.0; 6]),
                    buffer_type::F32,
                    &[2, 3],
                )
                .unwrap();
            let res = c
                .execute(
                    exe,
                    &[vec![x]],
                    ExecuteWith {
                        completion_events: true,
                        options_struct_size: Some(pjrt::EXECUTE_OPTIONS_SIZE_CONTEXT),
                    },
                )
                .unwrap();
            c.event_await(res.events[0]).unwrap();
            c.event_destroy(res.events[0]).unwrap();
            assert_eq!(
                to_f32(&c.buffer_to_host(res.outputs[0][0]).unwrap()),
                vec![2.0; 6]
            );
            // SAFETY: the real plugin's table lives for the process.
            let r = Driver::new(get_api(open(&cpu_plugin()))).unwrap();
            overhead_report(&c, &r, exe, x);
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plugin = cpu_plugin();
    run_child(
        "disabled_recording_still_wraps_and_bridges",
        "disabled",
        &[
            ("TPUSCOPE_REAL_PLUGIN", plugin.to_str().unwrap()),
            ("TPUSCOPE_OUT", dir.path().to_str().unwrap()),
            ("TPUSCOPE_ENABLE", "0"),
        ],
    );
    let traces = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(traces, 0, "TPUSCOPE_ENABLE=0 must not write a trace");
}
