//! Drives the built collector (`libtpuscope_collector.so`, loaded with `dlopen` like a frontend
//! would) in front of the real XLA CPU plugin, then reads the trace it wrote.
//!
//! The collector reads its configuration once per process, so each scenario runs in a child
//! process: the test binary re-executes itself with `TPUSCOPE_PT_CHILD` naming the scenario.
#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Instant;

use common::{
    ADD_MLIR, collector_so, compile_add, compile_only_add, cpu_client, cpu_plugin, execute_doubles,
    f32_bytes, get_api, open, run_self, to_f32, trace_in,
};
use tpuscope_core::Record;
use tpuscope_core::writer::blob_hash;
use tpuscope_pjrt::abi::{
    self as pjrt, ExecuteOptions, LoadedExecutableExecuteArgs, PjrtArgs, PjrtBuffer, buffer_type,
};
use tpuscope_pjrt::driver::{
    Driver, ExecuteWith, OptionValue, SINGLE_DEVICE_COMPILE_OPTIONS, Status,
};

const CHILD_ENV: &str = "TPUSCOPE_PT_CHILD";

const BAD_MLIR: &str = "module @broken { func.func public @main( this is not mlir";

/// Runs `scenario` in a child process (this test binary, filtered to `test_name`) with `envs`.
fn run_child(test_name: &str, scenario: &str, envs: &[(&str, &str)]) -> String {
    let (stdout, stderr) = run_self(
        scenario,
        &[test_name, "--exact", "--nocapture", "--test-threads=1"],
        envs.iter().copied().chain([(CHILD_ENV, scenario)]),
    );
    println!(
        "--- child {scenario} stdout ---\n{stdout}\n--- child {scenario} stderr ---\n{stderr}"
    );
    stdout + &stderr
}

fn child_scenario() -> Option<String> {
    std::env::var(CHILD_ENV).ok()
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
#[expect(
    clippy::too_many_lines,
    reason = "one real-plugin session driven end to end; its steps share the client"
)]
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

        let exe = compile_add(&c, client);
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
            execute_doubles(&c, exe, x, &vals, None);
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
        let co = compile_only_add(&c, topo, client);
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

#[expect(
    clippy::too_many_lines,
    reason = "one real-plugin session driven end to end; its steps share the client"
)]
fn check_trace(
    out_dir: &Path,
    client_id: u64,
    exe_id: u64,
    tracked: usize,
    serialized: &[u8],
    compile_err: &Status,
    (co_id, co_loaded_id): (u64, u64),
) {
    // Exactly one trace.
    let trace = trace_in(out_dir);
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
        let client = cpu_client(&c, 1);
        // SAFETY: handles come from `client`.
        unsafe {
            let exe = compile_add(&c, client);
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
            let opts = Some(pjrt::EXECUTE_OPTIONS_SIZE_CONTEXT);
            execute_doubles(&c, exe, x, &[1.0; 6], opts);
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
