//! Transfers, host syncs and memory samples, end to end: the built collector cdylib in front of
//! the real XLA CPU plugin (API 0.115), driven through its C API and by a JAX program.
//!
//! The collector reads its configuration once per process, so every scenario runs in a child
//! process: this test binary re-executed with `TPUSCOPE_TRANSFERS_SCENARIO` set, which runs only
//! the `child` test, exits normally (the trace gets its end record) and leaves one trace in
//! `TPUSCOPE_OUT`; the parent reads it back.
//!
//! The plugin comes from `TPUSCOPE_TEST_CPU_PLUGIN` or the jax test env
//! (`~/.cache/tpuscope/envs/jax`, see `scripts/setup-envs.sh`); tests fail when it is absent.
#![allow(unsafe_code, clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::ffi::{OsStr, c_void};
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::sync::mpsc::{SyncSender, sync_channel};
use std::time::{Duration, Instant};

use common::{collector_so, cpu_client, cpu_plugin, env_python, load_api, run_self, trace_in};
use tpuscope_core::event::{Direction, MemoryOrigin, Record, Transfer};
use tpuscope_pjrt::abi::{
    AsyncH2dDestroyArgs, AsyncH2dRetrieveBufferArgs, AsyncH2dTransferDataArgs,
    BufferCopyRawToHostArgs, BufferExternalReferenceCountArgs, BufferIsOnCpuArgs,
    BufferOpaqueDeviceMemoryDataPointerArgs, BufferReadyEventArgs, BufferToHostBufferArgs,
    ClientCreateBuffersForAsyncH2dArgs, EventCreateArgs, EventIsReadyArgs, EventOnReadyArgs,
    PjrtApi, PjrtArgs, PjrtBuffer, PjrtError, PjrtEvent, PjrtFn, ShapeSpec, buffer_type,
};
use tpuscope_pjrt::driver::{Driver, ExecuteWith, SINGLE_DEVICE_COMPILE_OPTIONS};

const SCENARIO_ENV: &str = "TPUSCOPE_TRANSFERS_SCENARIO";

// ------------------------------------------------------------- parent side

/// Runs `scenario` in a child process with the collector configured; returns the trace.
fn run_scenario(scenario: &str) -> tpuscope_core::Trace {
    let out = tempfile::tempdir().unwrap();
    let plugin = cpu_plugin();
    let (stdout, stderr) = run_self(
        scenario,
        &["--exact", "child", "--nocapture", "--test-threads=1"],
        [
            (SCENARIO_ENV, OsStr::new(scenario)),
            ("TPUSCOPE_REAL_PLUGIN", plugin.as_os_str()),
            ("TPUSCOPE_OUT", out.path().as_os_str()),
            ("TPUSCOPE_MEMORY_INTERVAL_MS", OsStr::new("5")),
        ],
    );
    println!("--- child {scenario} stdout\n{stdout}\n--- child stderr\n{stderr}");
    read_single_trace(out.path())
}

/// The one trace in `dir`, which must have its end record.
fn read_single_trace(dir: &Path) -> tpuscope_core::Trace {
    let t = trace_in(dir);
    assert!(t.end.is_some(), "the trace has no end record");
    t
}

/// Transfers of one direction, in time order.
fn transfers(t: &tpuscope_core::Trace, dir: Direction) -> Vec<&Transfer> {
    let mut v: Vec<&Transfer> = t
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Transfer(x) if x.direction == dir as i32 => Some(&**x),
            _ => None,
        })
        .collect();
    v.sort_by_key(|x| x.t_ns);
    v
}

fn notes<'a>(t: &'a tpuscope_core::Trace, topic: &str) -> Vec<&'a str> {
    t.events
        .iter()
        .filter_map(|r| match r {
            Record::Note(n) if n.topic == topic => Some(n.message.as_str()),
            _ => None,
        })
        .collect()
}

/// Live-buffer samples of a device, in time order: (bytes in use, peak, live count).
fn live_samples(t: &tpuscope_core::Trace, device: i32) -> Vec<(i64, i64, i64)> {
    let mut v: Vec<_> = t
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Memory(m)
                if m.device == device && m.origin == MemoryOrigin::LiveBuffers as i32 =>
            {
                Some((
                    m.t_ns,
                    m.bytes_in_use,
                    m.peak_bytes_in_use.unwrap_or(-1),
                    m.live_buffers.unwrap_or(-1),
                ))
            }
            _ => None,
        })
        .collect();
    v.sort_by_key(|s| s.0);
    v.into_iter().map(|(_, b, p, n)| (b, p, n)).collect()
}

/// Shapes the `transfers_and_memory` child sends to the devices: (dtype, dims, bytes, device).
const H2D: &[(i32, &[i64], u64, usize)] = &[
    (buffer_type::F32, &[2, 3], 24, 0),
    (buffer_type::S32, &[4], 16, 1),
    (buffer_type::F64, &[3, 5], 120, 0),
];

#[test]
fn h2d_d2h_transfers_and_live_buffer_memory() {
    let t = run_scenario("transfers_and_memory");

    let h2d = transfers(&t, Direction::H2d);
    assert_eq!(h2d.len(), H2D.len(), "{h2d:#?}");
    for (x, (dtype, dims, bytes, dev)) in h2d.iter().zip(H2D) {
        assert_eq!(x.api, "PJRT_Client_BufferFromHostBuffer");
        assert_eq!(x.dtype, tpuscope_pjrt::abi::dtype_name(*dtype));
        assert_eq!(x.dims, *dims);
        assert_eq!(x.bytes, *bytes);
        assert_eq!(x.device, *dev as i32);
        assert!(!x.sync && x.blocked_ns == 0 && x.buffer_id != 0 && x.error.is_none());
    }

    // Two awaited ToHostBuffer reads, one never awaited (blocked 0), one CopyRawToHost; the
    // size queries are not transfers.
    let d2h = transfers(&t, Direction::D2h);
    let apis: Vec<&str> = d2h.iter().map(|x| x.api.as_str()).collect();
    assert_eq!(
        apis,
        [
            "PJRT_Buffer_ToHostBuffer",
            "PJRT_Buffer_ToHostBuffer",
            "PJRT_Buffer_ToHostBuffer",
            "PJRT_Buffer_CopyRawToHost"
        ],
        "{d2h:#?}"
    );
    let expect = [
        ("f32", vec![2, 3], 24),
        ("f64", vec![3, 5], 120),
        ("s32", vec![4], 16),
        ("f64", vec![3, 5], 40),
    ];
    for (x, (dtype, dims, bytes)) in d2h.iter().zip(&expect) {
        assert!(x.sync, "every D2H read is a host sync: {x:?}");
        assert_eq!((x.dtype.as_str(), &x.dims, x.bytes), (*dtype, dims, *bytes));
        assert!(x.blocked_ns <= x.dur_ns, "{x:?}");
        assert!(x.error.is_none());
    }
    assert_eq!(d2h[2].blocked_ns, 0, "never awaited: {:?}", d2h[2]);
    assert_eq!(d2h[1].device, 0);
    assert_eq!(d2h[2].device, 1);

    // `buffer_from_host` awaits each done-with-host-buffer event: plain awaits are syncs.
    let awaits = t
        .events
        .iter()
        .filter(|r| matches!(r, Record::Sync(s) if s.reason == "PJRT_Event_Await"))
        .count();
    assert!(awaits >= H2D.len(), "{awaits} awaits");

    // The CPU plugin has no memory stats: noted once, then never asked again.
    let unimpl = notes(&t, "memory_stats_unimplemented");
    assert_eq!(unimpl.len(), 1, "{unimpl:?}");
    assert!(unimpl[0].contains("error 12"), "{}", unimpl[0]);
    assert!(
        !t.events.iter().any(
            |r| matches!(r, Record::Memory(m) if m.origin == MemoryOrigin::PluginStats as i32)
        ),
        "no plugin_stats samples on the CPU plugin"
    );

    // Live buffers rise as buffers are created and fall as they are destroyed.
    let dev0 = live_samples(&t, 0);
    println!("device 0 live-buffer samples (bytes, peak, count): {dev0:?}");
    let max0 = dev0.iter().map(|s| s.0).max().unwrap();
    assert_eq!(max0, 144);
    assert_eq!(dev0.iter().map(|s| s.1).max().unwrap(), 144);
    let top = dev0.iter().position(|s| s.0 == 144).unwrap();
    assert!(dev0[..top].iter().all(|s| s.0 < 144));
    assert_eq!(*dev0.last().unwrap(), (0, 144, 0));
    assert!(
        dev0[top..].windows(2).all(|w| w[1].0 <= w[0].0),
        "falls: {dev0:?}"
    );
    // The destroys were spaced out: an intermediate level was seen on the way down.
    assert!(
        dev0[top..].iter().any(|s| s.0 == 120 || s.0 == 24),
        "{dev0:?}"
    );
    let dev1 = live_samples(&t, 1);
    println!("device 1 live-buffer samples: {dev1:?}");
    assert_eq!(dev1.iter().map(|s| s.0).max().unwrap(), 16);
    assert_eq!(*dev1.last().unwrap(), (0, 16, 0));
}

#[test]
fn zero_copy_reads_and_ready_waits() {
    let t = run_scenario("reads_and_waits");

    let d2h = transfers(&t, Direction::D2h);
    println!("{d2h:#?}");
    assert_eq!(
        d2h.len(),
        2,
        "one ready read and one read during a computation"
    );
    for x in &d2h {
        assert_eq!(x.api, "zero_copy_read");
        assert!(x.sync);
        assert_eq!(x.dtype, "f32");
    }
    assert_eq!((d2h[0].dims.as_slice(), d2h[0].bytes), (&[2i64, 3][..], 24));
    assert_eq!(
        (d2h[1].dims.as_slice(), d2h[1].bytes),
        (&[HEAVY_N, HEAVY_N][..], (HEAVY_N * HEAVY_N * 4) as u64)
    );
    // The second read waited for the computation (tens of ms here), the first for nothing.
    assert!(d2h[0].blocked_ns < 5_000_000, "{:?}", d2h[0]);
    assert!(d2h[1].blocked_ns > 2_000_000, "{:?}", d2h[1]);
    assert!(d2h[1].blocked_ns <= d2h[1].dur_ns);

    let syncs: Vec<_> = t
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Sync(s) => Some(s),
            _ => None,
        })
        .collect();
    println!("{syncs:#?}");
    let waits: Vec<_> = syncs
        .iter()
        .filter(|s| s.reason == "block_until_ready")
        .collect();
    // The warm-up run and the measured one; the reads' waits belong to the reads.
    assert_eq!(
        waits.len(),
        2,
        "two waits on a computing buffer: {syncs:#?}"
    );
    for w in waits {
        assert!(w.dur_ns > 2_000_000, "{w:?}");
        assert_ne!(w.buffer_id, 0);
    }
}

#[test]
fn async_host_to_device_transfer_manager() {
    let t = run_scenario("async_h2d");
    let h2d = transfers(&t, Direction::H2d);
    println!("{h2d:#?}");
    let data: Vec<_> = h2d
        .iter()
        .filter(|x| x.api == "PJRT_AsyncHostToDeviceTransferManager_TransferData")
        .collect();
    assert_eq!(data.len(), 2, "two chunks");
    for (x, bytes) in data.iter().zip([16u64, 16]) {
        assert_eq!(
            (x.dtype.as_str(), x.dims.as_slice(), x.bytes),
            ("f32", &[8i64][..], bytes)
        );
        assert_eq!(x.device, 0);
        assert!(!x.sync && x.error.is_none());
    }
    // The retrieved buffer counted as live on device 0 (32 bytes), then freed.
    let dev0 = live_samples(&t, 0);
    println!("device 0 live-buffer samples: {dev0:?}");
    assert_eq!(dev0.iter().map(|s| s.0).max(), Some(32));
    assert_eq!(dev0.last().map(|s| s.0), Some(0));
}

/// Reads the `many_reads` child makes.
const MANY: usize = 3000;

#[test]
fn many_reads_count_once_each() {
    let t = run_scenario("many_reads");
    let d2h = transfers(&t, Direction::D2h);
    assert_eq!(d2h.len(), MANY);
    assert!(
        d2h.iter()
            .all(|x| x.api == "zero_copy_read" && x.bytes == 24 && x.sync)
    );
    assert_eq!(t.end.as_ref().map(|e| e.dropped_total), Some(0));
}

#[test]
fn jax_host_reads_are_d2h_syncs() {
    let python = env_python("jax");
    const K: usize = 5;
    let script = format!(
        r#"
import jax, jax.numpy as jnp
x = jnp.arange(12.0).reshape(3, 4)
f = jax.jit(lambda a, i: (a * i).sum())
vals = []
for i in range({K}):
    vals.append(float(f(x, i)))
assert vals == [66.0 * i for i in range({K})], vals
y = f(x, 1.0)
y.block_until_ready()
print("ok", vals)
"#
    );
    let out = tempfile::tempdir().unwrap();
    let res = Command::new(&python)
        .args(["-c", &script])
        .env(
            "PJRT_NAMES_AND_LIBRARY_PATHS",
            format!("tpuscope:{}", collector_so().display()),
        )
        .env("JAX_PLATFORMS", "tpuscope")
        .env("TPUSCOPE_REAL_PLUGIN", cpu_plugin())
        .env("TPUSCOPE_OUT", out.path())
        .env("TPUSCOPE_QUIET", "1")
        .output()
        .unwrap();
    println!(
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&res.stdout),
        String::from_utf8_lossy(&res.stderr)
    );
    assert!(res.status.success(), "{}", res.status);
    let t = read_single_trace(out.path());

    let d2h = transfers(&t, Direction::D2h);
    println!("{d2h:#?}");
    assert_eq!(d2h.len(), K, "exactly one d2h sync per host read");
    for x in &d2h {
        assert!(x.sync);
        assert_eq!(x.api, "zero_copy_read");
        assert_eq!((x.dtype.as_str(), x.dims.len(), x.bytes), ("f32", 0, 4));
        // Each read has the user's line on its stack.
        let frames = &t.stacks.get(&x.stack).expect("a Python stack").frames;
        assert!(
            frames
                .iter()
                .any(|f| t.string(f.file) == "<string>" && f.line == 7),
            "{:?}",
            frames
                .iter()
                .map(|f| format!("{}:{}", t.string(f.file), f.line))
                .collect::<Vec<_>>()
        );
    }
    let syncs: Vec<_> = t
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Sync(s) => Some(s),
            _ => None,
        })
        .collect();
    let awaits = syncs
        .iter()
        .filter(|s| s.reason == "PJRT_Event_Await")
        .count();
    let waits = syncs
        .iter()
        .filter(|s| s.reason == "block_until_ready")
        .count();
    println!("JAX workload: {awaits} PJRT_Event_Await syncs, {waits} block_until_ready waits");
    assert_eq!(
        awaits, 0,
        "JAX 0.10.2 never calls PJRT_Event_Await on this plugin"
    );
    assert!(waits <= 1);
    let h2d = transfers(&t, Direction::H2d);
    println!("JAX workload: {} h2d transfers", h2d.len());
}

// -------------------------------------------------------------- child side

/// The collector's table (loading the collector, which loads the real plugin).
fn collector_api() -> &'static PjrtApi {
    static API: OnceLock<usize> = OnceLock::new();
    let p = *API.get_or_init(|| load_api(&collector_so()) as *const PjrtApi as usize);
    // SAFETY: the collector's table lives for the process.
    unsafe { &*(p as *const PjrtApi) }
}

/// Calls a slot of the collector's table, panicking on a PJRT error.
///
/// # Safety
/// `a` must be valid for the slot.
unsafe fn call<A>(d: &Driver, f: Option<PjrtFn<A>>, a: &mut A) {
    let f = f.expect("slot");
    // SAFETY: caller guarantee.
    unsafe { d.check(f(a)) }.unwrap();
}

#[test]
fn child() {
    let Ok(scenario) = std::env::var(SCENARIO_ENV) else {
        return;
    };
    match scenario.as_str() {
        "transfers_and_memory" => child_transfers_and_memory(),
        "reads_and_waits" => child_reads_and_waits(),
        "async_h2d" => child_async_h2d(),
        "many_reads" => child_many_reads(),
        other => panic!("unknown scenario {other}"),
    }
    // A normal exit: the collector's exit handlers close the trace.
    std::process::exit(0);
}

fn host_bytes(dtype: i32, n: usize) -> Vec<u8> {
    let w = match dtype {
        buffer_type::F64 => 8,
        _ => 4,
    };
    (0..n * w).map(|i| (i % 251) as u8).collect()
}

fn child_transfers_and_memory() {
    let api = collector_api();
    // SAFETY: the table lives for the process.
    let d = unsafe { Driver::new(api) }.unwrap();
    let client = cpu_client(&d, 2);
    let pause = || std::thread::sleep(Duration::from_millis(80));
    // SAFETY: every handle below comes from this client and stays live until destroyed.
    unsafe {
        let devs = d.addressable_devices(client).unwrap();
        let mut bufs = Vec::new();
        for (dtype, dims, _, dev) in H2D {
            let n = dims.iter().product::<i64>() as usize;
            let b = d
                .buffer_from_host(client, devs[*dev], &host_bytes(*dtype, n), *dtype, dims)
                .unwrap();
            bufs.push(b);
            pause();
        }
        // Two reads through the usual size query + copy + await.
        d.buffer_to_host(bufs[0]).unwrap();
        d.buffer_to_host(bufs[2]).unwrap();
        // A read whose event is destroyed without an await.
        let mut dst = vec![0u8; 16];
        let mut a = BufferToHostBufferArgs::new();
        a.src = bufs[1];
        a.dst = dst.as_mut_ptr().cast::<c_void>();
        a.dst_size = dst.len();
        call(&d, api.buffer_to_host_buffer, &mut a);
        std::thread::sleep(Duration::from_millis(10));
        d.event_destroy(a.event).unwrap();
        // A raw copy of 40 bytes, awaited.
        let mut raw = vec![0u8; 40];
        let mut r = BufferCopyRawToHostArgs::new();
        r.buffer = bufs[2];
        r.dst = raw.as_mut_ptr().cast::<c_void>();
        r.offset = 8;
        r.transfer_size = 40;
        call(&d, api.buffer_copy_raw_to_host, &mut r);
        d.event_await(r.event).unwrap();
        d.event_destroy(r.event).unwrap();
        assert_eq!(raw, host_bytes(buffer_type::F64, 15)[8..48]);
        pause();
        for b in bufs {
            d.buffer_destroy(b).unwrap();
            pause();
        }
        d.client_destroy(client).unwrap();
    }
}

/// `PJRT_Device_DefaultMemory_Args` (not in `tpuscope_pjrt::abi`: the collector never calls it).
#[repr(C)]
struct DeviceDefaultMemoryArgs {
    struct_size: usize,
    extension_start: *mut c_void,
    device: *mut c_void,
    memory: *mut c_void,
}

fn child_async_h2d() {
    let api = collector_api();
    // SAFETY: the table lives for the process.
    let d = unsafe { Driver::new(api) }.unwrap();
    let client = cpu_client(&d, 1);
    // SAFETY: every handle below comes from this client and stays live until destroyed.
    unsafe {
        let devs = d.addressable_devices(client).unwrap();
        let mut dm = DeviceDefaultMemoryArgs {
            struct_size: size_of::<DeviceDefaultMemoryArgs>(),
            extension_start: std::ptr::null_mut(),
            device: devs[0].cast(),
            memory: std::ptr::null_mut(),
        };
        let f = api.device_default_memory.unwrap();
        d.check(f((&raw mut dm).cast())).unwrap();
        assert!(!dm.memory.is_null());

        let dims = [8i64];
        let mut spec = ShapeSpec::new();
        spec.dims = dims.as_ptr();
        spec.num_dims = 1;
        spec.element_type = buffer_type::F32;
        let mut c = ClientCreateBuffersForAsyncH2dArgs::new();
        c.client = client;
        c.shape_specs = &mut spec;
        c.num_shape_specs = 1;
        c.memory = dm.memory.cast();
        call(
            &d,
            api.client_create_buffers_for_async_host_to_device,
            &mut c,
        );
        let mgr = c.transfer_manager;
        assert!(!mgr.is_null());
        let mut r = AsyncH2dRetrieveBufferArgs::new();
        r.transfer_manager = mgr;
        r.buffer_index = 0;
        call(
            &d,
            api.async_host_to_device_transfer_manager_retrieve_buffer,
            &mut r,
        );
        let buf = r.buffer_out;
        let data = host_bytes(buffer_type::F32, 8);
        for (off, last) in [(0usize, false), (16, true)] {
            let mut t = AsyncH2dTransferDataArgs::new();
            t.transfer_manager = mgr;
            t.buffer_index = 0;
            t.data = data[off..].as_ptr().cast();
            t.offset = off as i64;
            t.transfer_size = 16;
            t.is_last_transfer = last;
            call(
                &d,
                api.async_host_to_device_transfer_manager_transfer_data,
                &mut t,
            );
            if !t.done_with_h2d_transfer.is_null() {
                d.event_await(t.done_with_h2d_transfer).unwrap();
                d.event_destroy(t.done_with_h2d_transfer).unwrap();
            }
        }
        assert_eq!(d.buffer_to_host(buf).unwrap(), data);
        std::thread::sleep(Duration::from_millis(80));
        let mut x = AsyncH2dDestroyArgs::new();
        x.transfer_manager = mgr;
        call(
            &d,
            api.async_host_to_device_transfer_manager_destroy,
            &mut x,
        );
        d.buffer_destroy(buf).unwrap();
        std::thread::sleep(Duration::from_millis(40));
        d.client_destroy(client).unwrap();
    }
}

/// Many JAX-style reads of a ready buffer; prints what the collector adds to each (no Python
/// here, so no stack capture).
fn child_many_reads() {
    let api = collector_api();
    let real = load_real_plugin();
    // SAFETY: the tables live for the process.
    let (d, rd) = unsafe { (Driver::new(api).unwrap(), Driver::new(real).unwrap()) };
    let client = cpu_client(&d, 1);
    // SAFETY: every handle below comes from this client and stays live until destroyed.
    unsafe {
        let devs = d.addressable_devices(client).unwrap();
        let b = d
            .buffer_from_host(
                client,
                devs[0],
                &host_bytes(buffer_type::F32, 6),
                buffer_type::F32,
                &[2, 3],
            )
            .unwrap();
        // The same sequence straight to the plugin, for the baseline.
        let direct = |n: usize| {
            let t0 = Instant::now();
            for _ in 0..n {
                let mut c = BufferIsOnCpuArgs::new();
                c.buffer = b;
                call(&rd, real.buffer_is_on_cpu, &mut c);
                let mut inc = BufferExternalReferenceCountArgs::new();
                inc.buffer = b;
                call(&rd, real.buffer_increase_external_reference_count, &mut inc);
                let mut re = BufferReadyEventArgs::new();
                re.buffer = b;
                call(&rd, real.buffer_ready_event, &mut re);
                let mut ir = EventIsReadyArgs::new();
                ir.event = re.event;
                call(&rd, real.event_is_ready, &mut ir);
                rd.event_destroy(re.event).unwrap();
                let mut dec = BufferExternalReferenceCountArgs::new();
                dec.buffer = b;
                call(&rd, real.buffer_decrease_external_reference_count, &mut dec);
            }
            t0.elapsed() / n as u32
        };
        let base = direct(MANY);
        let t0 = Instant::now();
        for _ in 0..MANY {
            assert!(!read_like_jax(&d, b));
        }
        let hooked = t0.elapsed() / MANY as u32;
        println!(
            "a JAX-style read: {base:?} straight to the plugin, {hooked:?} through the collector"
        );
        d.buffer_destroy(b).unwrap();
        d.client_destroy(client).unwrap();
    }
}

/// Side of the square matrices the heavy program multiplies (three products: ~100 ms here).
const HEAVY_N: i64 = 768;

fn heavy_mlir() -> String {
    let t = format!("tensor<{HEAVY_N}x{HEAVY_N}xf32>");
    format!(
        r#"
module @heavy {{
  func.func public @main(%arg0: {t}) -> {t} {{
    %0 = stablehlo.dot %arg0, %arg0 : ({t}, {t}) -> {t}
    %1 = stablehlo.dot %0, %0 : ({t}, {t}) -> {t}
    %2 = stablehlo.dot %1, %1 : ({t}, {t}) -> {t}
    %3 = stablehlo.dot %2, %2 : ({t}, {t}) -> {t}
    return %3 : {t}
  }}
}}
"#
    )
}

/// An `OnReady` callback that frees the error and signals the waiting test thread.
unsafe extern "C" fn signal_ready(err: *mut PjrtError, user_arg: *mut c_void) {
    // SAFETY: `user_arg` is the boxed sender we leaked for this one callback.
    let tx = unsafe { Box::from_raw(user_arg.cast::<SyncSender<()>>()) };
    // SAFETY: the callback owns `err`; the collector's table lives for the process.
    unsafe { Driver::new(collector_api()).unwrap().destroy_error(err) };
    let _ = tx.send(());
}

/// What JAX does to wait for a buffer (`block_until_ready`, and after a zero-copy read):
/// `Buffer_ReadyEvent` → `Event_IsReady` → if not ready, `Event_OnReady` and a wait → destroy.
/// Returns whether it had to wait.
///
/// # Safety
/// `b` must be a live buffer of the collector's table.
unsafe fn wait_ready_like_jax(d: &Driver, b: *mut PjrtBuffer) -> bool {
    let api = collector_api();
    let mut re = BufferReadyEventArgs::new();
    re.buffer = b;
    // SAFETY: `b` is live (caller).
    unsafe { call(d, api.buffer_ready_event, &mut re) };
    let ev: *mut PjrtEvent = re.event;
    let mut ir = EventIsReadyArgs::new();
    ir.event = ev;
    // SAFETY: `ev` is live until destroyed below.
    unsafe { call(d, api.event_is_ready, &mut ir) };
    let waited = !ir.is_ready;
    if waited {
        let (tx, rx) = sync_channel::<()>(1);
        let mut on = EventOnReadyArgs::new();
        on.event = ev;
        on.callback = Some(signal_ready);
        on.user_arg = Box::into_raw(Box::new(tx)).cast::<c_void>();
        // SAFETY: the callback owns the boxed sender.
        unsafe { call(d, api.event_on_ready, &mut on) };
        rx.recv_timeout(Duration::from_secs(60)).unwrap();
    }
    // SAFETY: the event is ours.
    unsafe { d.event_destroy(ev) }.unwrap();
    waited
}

/// A JAX-style zero-copy read: `IsOnCpu` → `IncreaseExternalReferenceCount` →
/// `OpaqueDeviceMemoryDataPointer` → ready wait → `DecreaseExternalReferenceCount`.
///
/// # Safety
/// `b` must be a live buffer of the collector's table.
unsafe fn read_like_jax(d: &Driver, b: *mut PjrtBuffer) -> bool {
    let api = collector_api();
    let mut c = BufferIsOnCpuArgs::new();
    c.buffer = b;
    // SAFETY: `b` is live (caller).
    unsafe { call(d, api.buffer_is_on_cpu, &mut c) };
    assert!(c.is_on_cpu, "CPU plugin buffers are on the host");
    let mut inc = BufferExternalReferenceCountArgs::new();
    inc.buffer = b;
    // SAFETY: as above.
    unsafe { call(d, api.buffer_increase_external_reference_count, &mut inc) };
    let mut p = BufferOpaqueDeviceMemoryDataPointerArgs::new();
    p.buffer = b;
    // SAFETY: as above.
    unsafe { call(d, api.buffer_opaque_device_memory_data_pointer, &mut p) };
    assert!(!p.device_memory_ptr.is_null());
    // SAFETY: as above.
    let waited = unsafe { wait_ready_like_jax(d, b) };
    let mut dec = BufferExternalReferenceCountArgs::new();
    dec.buffer = b;
    // SAFETY: as above; balances the increase.
    unsafe { call(d, api.buffer_decrease_external_reference_count, &mut dec) };
    waited
}

fn child_reads_and_waits() {
    let api = collector_api();
    // SAFETY: the table lives for the process.
    let d = unsafe { Driver::new(api) }.unwrap();
    let client = cpu_client(&d, 1);
    // SAFETY: every handle below comes from this client and stays live until destroyed.
    unsafe {
        let devs = d.addressable_devices(client).unwrap();
        // 1. A read of a ready buffer: no wait.
        let small = d
            .buffer_from_host(
                client,
                devs[0],
                &host_bytes(buffer_type::F32, 6),
                buffer_type::F32,
                &[2, 3],
            )
            .unwrap();
        assert!(!read_like_jax(&d, small), "a transferred buffer is ready");

        let exe = d
            .compile(
                client,
                heavy_mlir().as_bytes(),
                "mlir",
                SINGLE_DEVICE_COMPILE_OPTIONS,
            )
            .unwrap();
        let n = (HEAVY_N * HEAVY_N) as usize;
        let ones: Vec<u8> = (0..n).flat_map(|_| 0.001f32.to_le_bytes()).collect();
        let x = d
            .buffer_from_host(
                client,
                devs[0],
                &ones,
                buffer_type::F32,
                &[HEAVY_N, HEAVY_N],
            )
            .unwrap();
        let run = || {
            let t0 = Instant::now();
            let r = d.execute(exe, &[vec![x]], ExecuteWith::default()).unwrap();
            (r.outputs[0][0], t0.elapsed())
        };
        // Warm up, and measure how long the computation takes end to end.
        let (out, _) = run();
        let t0 = Instant::now();
        wait_ready_like_jax(&d, out);
        let compute = t0.elapsed();
        d.buffer_destroy(out).unwrap();
        let (out, dispatch) = run();
        let t1 = Instant::now();
        // 2. A block_until_ready-style wait on a computing buffer.
        assert!(
            wait_ready_like_jax(&d, out),
            "the heavy output is not ready at once"
        );
        let total = dispatch + t1.elapsed();
        println!("heavy program: compute {compute:?}, dispatch {dispatch:?}, total {total:?}");
        // Tracking the execute's outputs (on-device size, device) must not wait for them.
        assert!(
            dispatch * 4 < total,
            "execute dispatch {dispatch:?} vs total {total:?}: tracking outputs blocked"
        );
        d.buffer_destroy(out).unwrap();
        // 3. A read of a computing buffer: waits inside the read.
        let (out, _) = run();
        assert!(
            read_like_jax(&d, out),
            "the heavy output is not ready at once"
        );
        d.buffer_destroy(out).unwrap();

        // What tracking a new buffer costs: on-device size + device, straight to the plugin.
        let real = load_real_plugin();
        let rd = Driver::new(real).unwrap();
        let iters = 20_000;
        let t0 = Instant::now();
        for _ in 0..iters {
            rd.buffer_on_device_size(small).unwrap();
        }
        let size_ns = t0.elapsed().as_nanos() / iters;
        let t0 = Instant::now();
        for _ in 0..iters {
            let mut a = tpuscope_pjrt::abi::BufferDeviceArgs::new();
            a.buffer = small;
            call(&rd, real.buffer_device, &mut a);
        }
        let device_ns = t0.elapsed().as_nanos() / iters;
        println!(
            "track_new_buffer parts: OnDeviceSizeInBytes {size_ns} ns, Buffer_Device {device_ns} ns per call"
        );

        // What the hooks JAX calls on every execute cost when nothing is pending
        // (Event_IsReady / Event_Destroy: a few thread-local and atomic checks).
        if real.event_create.is_some() {
            let per = |api: &PjrtApi| {
                let dd = Driver::new(api).unwrap();
                let t0 = Instant::now();
                for _ in 0..iters {
                    let mut c = EventCreateArgs::new();
                    call(&dd, api.event_create, &mut c);
                    let mut r = EventIsReadyArgs::new();
                    r.event = c.event;
                    call(&dd, api.event_is_ready, &mut r);
                    dd.event_destroy(c.event).unwrap();
                }
                t0.elapsed().as_nanos() / iters
            };
            let direct = per(real);
            let hooked = per(api);
            println!(
                "Event_Create+IsReady+Destroy: {direct} ns direct, {hooked} ns through the collector"
            );
        }

        d.buffer_destroy(x).unwrap();
        d.buffer_destroy(small).unwrap();
        d.loaded_executable_destroy(exe).unwrap();
        d.client_destroy(client).unwrap();
    }
}

/// The real plugin's own table (the collector loaded the same library; this is the same copy).
fn load_real_plugin() -> &'static PjrtApi {
    load_api(&cpu_plugin())
}
