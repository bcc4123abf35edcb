//! The fault plugin in front of the real XLA CPU plugin, driven directly through the PJRT table
//! (no collector). Each scenario runs in its own process: the plugin reads its environment once.
#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use tpuscope_pjrt::abi::*;
use tpuscope_pjrt::driver::{
    self, Driver, ExecuteWith, OptionValue, SINGLE_DEVICE_COMPILE_OPTIONS,
};

fn no_events() -> ExecuteWith {
    ExecuteWith::default()
}

/// A client with one CPU device, and that device.
fn client(d: &Driver, exp: &mut Expected) -> (*mut PjrtClient, *mut PjrtDevice) {
    exp.add("Client_Create", 1);
    let c = d
        .client_create(&[("cpu_device_count", OptionValue::Int(1))])
        .unwrap();
    // SAFETY: `c` is live.
    let devs = unsafe { d.addressable_devices(c) }.unwrap();
    (c, devs[0])
}

/// Every counted call once or more, through the plugin; the counts file written on demand and
/// at exit equals what the scenario did.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one fault scenario driven end to end through a real plugin"
)]
fn counts_match_the_calls_made() {
    let dir = tempfile::tempdir().unwrap();
    let counts = dir.path().join("counts.json");
    let expected = dir.path().join("expected.json");
    let cpu = cpu_plugin();
    if let Some(_out) = run_in_child(
        "counts_match_the_calls_made",
        &[
            (ENV_REAL, cpu.to_str().unwrap()),
            (ENV_COUNTS, counts.to_str().unwrap()),
            (ENV_EXPECTED, expected.to_str().unwrap()),
        ],
    ) {
        // The child's last word is the atexit write, after it saved what it expects.
        let want = read_counts(&expected);
        let got = read_counts(&counts);
        assert_eq!(got, want, "counts written at exit");
        assert!(
            want["Client_Compile"] == 1 && want["Event_Await"] >= 2,
            "{want:?}"
        );
        return;
    }

    let counts = std::path::PathBuf::from(std::env::var_os(ENV_COUNTS).unwrap());
    let expected = std::path::PathBuf::from(std::env::var_os(ENV_EXPECTED).unwrap());
    let plugin = Plugin::load();
    let d = plugin.driver();
    let api = d.api();
    let mut exp = Expected::new();
    let (client, dev) = client(&d, &mut exp);
    let vals = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.5];
    let bytes = f32_bytes(&vals);

    // SAFETY: every handle comes from this client and is destroyed only at the end.
    unsafe {
        let x = h2d(&d, &mut exp, client, dev, &bytes, &[2, 3]).unwrap();
        // The CPU plugin answers UNIMPLEMENTED; the call is counted either way.
        exp.add("Device_MemoryStats", 1);
        let _ = d.memory_stats(dev);

        exp.add("Client_Compile", 1);
        let exe = d
            .compile(
                client,
                ADD_MLIR.as_bytes(),
                "mlir",
                SINGLE_DEVICE_COMPILE_OPTIONS,
            )
            .unwrap();
        let inner = d.get_executable(exe).unwrap();
        exp.add("Executable_OptimizedProgram", 2);
        let (fmt, _) = d.optimized_program(inner).unwrap();
        assert_eq!(fmt, "hlo_with_config");
        exp.add("Executable_Serialize", 1);
        let ser = d.serialize(inner).unwrap();
        d.executable_destroy(inner).unwrap();
        exp.add("Executable_DeserializeAndLoad", 1);
        let loaded = d.deserialize_and_load(client, &ser).unwrap();
        d.loaded_executable_destroy(loaded).unwrap();

        // Compile-only against the client's topology: `PJRT_Compile`.
        let topo = d.client_topology(client).unwrap();
        exp.add("Compile", 1);
        let compiled = d
            .compile_only(
                topo,
                client,
                ADD_MLIR.as_bytes(),
                "mlir",
                SINGLE_DEVICE_COMPILE_OPTIONS,
            )
            .unwrap();
        assert!(!compiled.is_null());
        d.executable_destroy(compiled).unwrap();

        exp.add("LoadedExecutable_Execute", 1);
        let r = d
            .execute(
                exe,
                &[vec![x]],
                ExecuteWith {
                    completion_events: true,
                    options_struct_size: None,
                },
            )
            .unwrap();
        exp.add("Event_Await", 1);
        d.event_await(r.events[0]).unwrap();
        d.event_destroy(r.events[0]).unwrap();
        let out = r.outputs[0][0];
        let doubled: Vec<f32> = vals.iter().map(|v| v * 2.0).collect();
        assert_eq!(bytes_f32(&to_host(&d, &mut exp, out).unwrap()), doubled);

        // The zero-copy read path JAX takes on the CPU plugin.
        let mut on_cpu = BufferIsOnCpuArgs::new();
        on_cpu.buffer = out;
        exp.add("Buffer_IsOnCpu", 1);
        d.check(raw(api.buffer_is_on_cpu, &mut on_cpu)).unwrap();
        assert!(on_cpu.is_on_cpu);
        let mut ready = BufferReadyEventArgs::new();
        ready.buffer = out;
        exp.add("Buffer_ReadyEvent", 1);
        d.check(raw(api.buffer_ready_event, &mut ready)).unwrap();
        exp.add("Event_Await", 1);
        d.event_await(ready.event).unwrap();
        d.event_destroy(ready.event).unwrap();
        let mut inc = BufferExternalReferenceCountArgs::new();
        inc.buffer = out;
        exp.add("Buffer_IncreaseExternalReferenceCount", 1);
        d.check(raw(api.buffer_increase_external_reference_count, &mut inc))
            .unwrap();
        let mut opaque = BufferOpaqueDeviceMemoryDataPointerArgs::new();
        opaque.buffer = out;
        exp.add("Buffer_OpaqueDeviceMemoryDataPointer", 1);
        d.check(raw(
            api.buffer_opaque_device_memory_data_pointer,
            &mut opaque,
        ))
        .unwrap();
        let host = std::slice::from_raw_parts(opaque.device_memory_ptr.cast::<f32>(), 6);
        assert_eq!(host, doubled.as_slice());
        let mut dec = BufferExternalReferenceCountArgs::new();
        dec.buffer = out;
        d.check(raw(api.buffer_decrease_external_reference_count, &mut dec))
            .unwrap();
        let mut unsafe_ptr = BufferUnsafePointerArgs::new();
        unsafe_ptr.buffer = out;
        exp.add("Buffer_UnsafePointer", 1);
        d.check(raw(api.buffer_unsafe_pointer, &mut unsafe_ptr))
            .unwrap();
        assert_ne!(unsafe_ptr.buffer_pointer, 0);

        // Raw copy of the second half.
        let mut half = [0f32; 3];
        let mut cr = BufferCopyRawToHostArgs::new();
        cr.buffer = out;
        cr.dst = half.as_mut_ptr().cast();
        cr.offset = 12;
        cr.transfer_size = 12;
        exp.add("Buffer_CopyRawToHost", 1);
        d.check(raw(api.buffer_copy_raw_to_host, &mut cr)).unwrap();
        if !cr.event.is_null() {
            exp.add("Event_Await", 1);
            d.event_await(cr.event).unwrap();
            d.event_destroy(cr.event).unwrap();
        }
        assert_eq!(half.as_slice(), &doubled[3..]);

        // On demand: the file says exactly this much so far.
        assert_eq!(plugin.write_counts(), 0);
        assert_eq!(read_counts(&counts), exp.0, "counts written on demand");

        // More calls after the on-demand write: the exit write must include them.
        exp.add("Buffer_Destroy", 2);
        d.buffer_destroy(out).unwrap();
        d.buffer_destroy(x).unwrap();
        exp.add("LoadedExecutable_Execute", 1);
        let x2 = h2d(&d, &mut exp, client, dev, &bytes, &[2, 3]).unwrap();
        let r2 = d.execute(exe, &[vec![x2]], no_events()).unwrap();
        exp.add("Buffer_Destroy", 2);
        d.buffer_destroy(r2.outputs[0][0]).unwrap();
        d.buffer_destroy(x2).unwrap();
        d.loaded_executable_destroy(exe).unwrap();
        d.client_destroy(client).unwrap();
    }
    exp.save(&expected);
}

/// Injected errors come back with the exact code and message through the table's
/// `PJRT_Error_*` calls, never reach the real plugin, and are freed by `PJRT_Error_Destroy`;
/// numbering follows the spec per call kind; the real plugin's own errors pass through.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one fault scenario driven end to end through a real plugin"
)]
fn injected_errors_have_exact_code_and_message() {
    let dir = tempfile::tempdir().unwrap();
    let counts = dir.path().join("counts.json");
    let cpu = cpu_plugin();
    let spec = "compile:error@2, execute:error@2-3, h2d:error@2, to_host:error@1, \
                serialize:error@*, deserialize:error@*";
    if run_in_child(
        "injected_errors_have_exact_code_and_message",
        &[
            (ENV_REAL, cpu.to_str().unwrap()),
            (ENV_COUNTS, counts.to_str().unwrap()),
            (ENV_SPEC, spec),
        ],
    )
    .is_some()
    {
        let got = read_counts(&counts);
        assert_eq!(got["Injected_Errors"], 7, "{got:?}");
        assert_eq!(got["Injected_ErrorsDestroyed"], 7, "{got:?}");
        return;
    }

    let counts = std::path::PathBuf::from(std::env::var_os(ENV_COUNTS).unwrap());
    let plugin = Plugin::load();
    let d = plugin.driver();
    let api = d.api();
    let mut exp = Expected::new();
    let (client, dev) = client(&d, &mut exp);
    let bytes = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let injected = |kind: &str, n: u32| driver::Status {
        code: error_code::INVALID_ARGUMENT,
        message: format!("tpuscope fault injection: {kind} call #{n}"),
    };
    let compile = |d: &Driver| {
        // SAFETY: `client` is live.
        unsafe {
            d.compile(
                client,
                ADD_MLIR.as_bytes(),
                "mlir",
                SINGLE_DEVICE_COMPILE_OPTIONS,
            )
        }
    };

    // SAFETY: every handle comes from this client.
    unsafe {
        // compile #1 fine, #2 injected: look at the raw error object the way a frontend would.
        let exe = compile(&d).unwrap();
        let mut p = Program::new();
        p.code = ADD_MLIR.as_ptr().cast_mut().cast();
        p.code_size = ADD_MLIR.len();
        p.format = "mlir".as_ptr().cast();
        p.format_size = 4;
        let mut a = ClientCompileArgs::new();
        a.client = client;
        a.program = &p;
        a.compile_options = SINGLE_DEVICE_COMPILE_OPTIONS.as_ptr().cast();
        a.compile_options_size = SINGLE_DEVICE_COMPILE_OPTIONS.len();
        let err = raw(api.client_compile, &mut a);
        assert!(!err.is_null());
        assert!(a.executable.is_null(), "the real compile must not have run");
        // Asking twice gives the same answer (the object stays valid until destroyed).
        for _ in 0..2 {
            assert_eq!(d.peek_error(err), injected("compile", 2));
        }
        // jaxlib asks every error for payloads: ours has none, and must not reach the real plugin.
        let mut fe = ErrorForEachPayloadArgs::new(err);
        let f = api.error_for_each_payload.expect("ForEachPayload slot");
        assert!(f((&mut fe as *mut ErrorForEachPayloadArgs).cast()).is_null());
        d.destroy_error(err);
        // #3 fine again.
        let exe3 = compile(&d).unwrap();
        d.loaded_executable_destroy(exe3).unwrap();

        // A real plugin error passes through with the plugin's code and message.
        let bad = d
            .compile(
                client,
                b"this is not mlir",
                "mlir",
                SINGLE_DEVICE_COMPILE_OPTIONS,
            )
            .map(|_| ())
            .unwrap_err();
        assert!(!bad.message.contains("fault injection"), "{bad}");
        assert!(!bad.message.is_empty() && bad.code != 0, "{bad}");

        // h2d: #2 fails.
        let x = h2d(&d, &mut exp, client, dev, &bytes, &[2, 3]).unwrap();
        assert_eq!(
            h2d(&d, &mut exp, client, dev, &bytes, &[2, 3]).unwrap_err(),
            injected("h2d", 2)
        );
        let x3 = h2d(&d, &mut exp, client, dev, &bytes, &[2, 3]).unwrap();
        d.buffer_destroy(x3).unwrap();

        // execute: #1 ok, #2 and #3 fail, #4 ok.
        let r1 = d.execute(exe, &[vec![x]], no_events()).unwrap();
        for n in [2, 3] {
            let e = d
                .execute(exe, &[vec![x]], no_events())
                .map(|_| ())
                .unwrap_err();
            assert_eq!(e, injected("execute", n));
        }
        let r4 = d.execute(exe, &[vec![x]], no_events()).unwrap();
        d.buffer_destroy(r4.outputs[0][0]).unwrap();

        // to_host: the size query is not a numbered call; the first copy fails, the next works.
        let out = r1.outputs[0][0];
        assert_eq!(
            to_host(&d, &mut exp, out).unwrap_err(),
            injected("to_host", 1)
        );
        assert_eq!(
            bytes_f32(&to_host(&d, &mut exp, out).unwrap()),
            vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
        );

        // serialize: every call fails.
        let inner = d.get_executable(exe).unwrap();
        assert_eq!(d.serialize(inner).unwrap_err(), injected("serialize", 1));
        d.executable_destroy(inner).unwrap();

        // deserialize: mimics libtpu's refusal (UNIMPLEMENTED); the bytes never reach the plugin.
        let e = d
            .deserialize_and_load(client, b"not an executable")
            .map(|_| ())
            .unwrap_err();
        assert_eq!(
            e,
            driver::Status {
                code: error_code::UNIMPLEMENTED,
                message:
                    "tpuscope fault injection: Deserializing serialized executable not supported"
                        .into(),
            }
        );

        d.buffer_destroy(out).unwrap();
        d.buffer_destroy(x).unwrap();
        d.loaded_executable_destroy(exe).unwrap();
        d.client_destroy(client).unwrap();
    }
    assert_eq!(plugin.write_counts(), 0);
    let got = read_counts(&counts);
    // compile ×4 (incl. the bad program), execute ×4, h2d ×3, copies ×2 + 2 size queries.
    assert_eq!(got["Client_Compile"], 4, "{got:?}");
    assert_eq!(got["LoadedExecutable_Execute"], 4, "{got:?}");
    assert_eq!(got["Client_BufferFromHostBuffer"], 3, "{got:?}");
    assert_eq!(got["Buffer_ToHostBuffer"], 2, "{got:?}");
    assert_eq!(got["Buffer_ToHostBuffer_SizeQuery"], 2, "{got:?}");
    assert_eq!(got["Executable_Serialize"], 1, "{got:?}");
    assert_eq!(got["Executable_DeserializeAndLoad"], 1, "{got:?}");
    // 7 injected: compile 1, h2d 1, execute 2, to_host 1, serialize 1, deserialize 1; each one
    // destroyed through the table.
    assert_eq!(got["Injected_Errors"], 7, "{got:?}");
    assert_eq!(got["Injected_ErrorsDestroyed"], 7, "{got:?}");
}

/// `delay_ms` sleeps before forwarding: the delayed calls take at least that long and still
/// succeed; the others are not delayed.
#[test]
fn delays_hold_calls_back() {
    let dir = tempfile::tempdir().unwrap();
    let counts = dir.path().join("counts.json");
    let cpu = cpu_plugin();
    if run_in_child(
        "delays_hold_calls_back",
        &[
            (ENV_REAL, cpu.to_str().unwrap()),
            (ENV_COUNTS, counts.to_str().unwrap()),
            (ENV_SPEC, "execute:delay_ms=300@2,h2d:delay_ms=150@*"),
        ],
    )
    .is_some()
    {
        let got = read_counts(&counts);
        // The one h2d and execute #2.
        assert_eq!(got["Injected_Delays"], 2, "{got:?}");
        assert_eq!(got["Injected_Errors"], 0, "{got:?}");
        return;
    }

    let plugin = Plugin::load();
    let d = plugin.driver();
    let mut exp = Expected::new();
    let (client, dev) = client(&d, &mut exp);
    let bytes = f32_bytes(&[1.0; 6]);
    // SAFETY: every handle comes from this client.
    unsafe {
        let t = Instant::now();
        let x = h2d(&d, &mut exp, client, dev, &bytes, &[2, 3]).unwrap();
        assert!(
            t.elapsed() >= Duration::from_millis(150),
            "{:?}",
            t.elapsed()
        );
        let exe = d
            .compile(
                client,
                ADD_MLIR.as_bytes(),
                "mlir",
                SINGLE_DEVICE_COMPILE_OPTIONS,
            )
            .unwrap();
        let mut times = Vec::new();
        for _ in 0..3 {
            let t = Instant::now();
            let r = d.execute(exe, &[vec![x]], no_events()).unwrap();
            times.push(t.elapsed());
            assert_eq!(
                bytes_f32(&to_host(&d, &mut exp, r.outputs[0][0]).unwrap()),
                vec![2.0; 6]
            );
            d.buffer_destroy(r.outputs[0][0]).unwrap();
        }
        println!("execute times: {times:?}");
        assert!(times[1] >= Duration::from_millis(300), "{times:?}");
        // Not delayed: far below the injected delay (a tiny add on the CPU takes ~ms).
        assert!(times[0] < Duration::from_millis(300), "{times:?}");
        assert!(times[2] < Duration::from_millis(300), "{times:?}");
        d.buffer_destroy(x).unwrap();
        d.loaded_executable_destroy(exe).unwrap();
        d.client_destroy(client).unwrap();
    }
}

/// Without `TPUSCOPE_FAULT_REAL_PLUGIN`, `GetPjrtApi` returns NULL and says why in one line.
#[test]
fn missing_real_plugin_gives_null_and_one_line() {
    if let Some(out) = run_in_child("missing_real_plugin_gives_null_and_one_line", &[]) {
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<_> = err
            .lines()
            .filter(|l| l.contains("tpuscope fault plugin"))
            .collect();
        assert_eq!(lines.len(), 1, "{err}");
        assert!(
            lines[0].contains("TPUSCOPE_FAULT_REAL_PLUGIN is not set"),
            "{err}"
        );
        return;
    }
    let plugin = Plugin::load();
    assert!(plugin.api().is_null());
    // Asked again: still NULL, and no second message.
    assert!(plugin.api().is_null());
}

/// A spec that does not parse stops the plugin rather than silently injecting nothing.
#[test]
fn bad_spec_gives_null() {
    let cpu = cpu_plugin();
    if let Some(out) = run_in_child(
        "bad_spec_gives_null",
        &[
            (ENV_REAL, cpu.to_str().unwrap()),
            (ENV_SPEC, "compile:explode@1"),
        ],
    ) {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("TPUSCOPE_FAULT_SPEC") && err.contains("compile:explode@1"),
            "{err}"
        );
        return;
    }
    let plugin = Plugin::load();
    assert!(plugin.api().is_null());
    // No counts file configured: nothing to write.
    assert_eq!(plugin.write_counts(), 1);
}
