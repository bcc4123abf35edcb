//! What the collector adds to the calls it hooks, measured against the real XLA CPU plugin in the
//! same process.
//!
//! `cargo bench -p tpuscope-collector --bench hooks [-- --json PATH]` (plain `harness = false`
//! main; `scripts/bench.sh` runs it with the rest of the collector benchmarks). Needs the release
//! collector (`cargo build --release -p tpuscope-collector`) and the CPU plugin
//! (`TPUSCOPE_TEST_CPU_PLUGIN`, or the jax test env of `scripts/setup-envs.sh`).
//!
//! The collector reads its environment once per process, so each configuration runs in a child
//! process (this binary again, with `--child MODE`): `record` (the default configuration with
//! stacks off) and `passthrough` (`TPUSCOPE_ENABLE=0`). A child loads the real plugin directly
//! and the collector wrapping it (the same plugin instance) and times the same call through both
//! tables in alternating batches (direct first on even pairs, wrapped first on odd ones), so
//! machine noise hits both sides alike. Per pair: added ns per call = wrapped − direct batch
//! mean; reported as p50 / p99 over the pairs.
//!
//! - plain hook: `PJRT_Event_Await` on an event that is already ready. The collector records a
//!   fixed-size `Sync` event for it; the real call is a few loads. A pause after each pair keeps
//!   the offered event rate below what the writer drains (drops would make the hook cheaper).
//! - execute: `PJRT_LoadedExecutable_Execute` of a 4-argument, 4-output program on f32[16,16],
//!   with a completion event (as JAX asks). "chained": each execute's inputs are the previous
//!   outputs (new buffers every step, like a training loop's parameters: shape cache misses);
//!   "same args": the same four buffers every time (shape cache hits). Only the execute call is
//!   timed; awaiting and destroying outputs happens outside the timed region.
//! - concurrent (`*_mt`): 4 threads at once, each with its own buffers: chained executes, and
//!   zero-copy host reads (`IsOnCpu` → `IncreaseExternalReferenceCount`, JAX's `float(x)` on a
//!   CPU buffer). A lock every hook takes shows up here, not in the one-thread numbers.
//! - writer: in this process (the collector's rlib), a producer pushes events as fast as it can
//!   into a recorder of the default capacity while the writer thread drains it into a trace;
//!   the drain rate is the ceiling above which events are dropped.
//!
//! `--summarize TRACE` prints a trace's event counts as JSON (used for the JAX step benchmark).
//! `--child profile-plain|profile-execute` runs only the wrapped side of one measurement for a few
//! seconds (`TPUSCOPE_BENCH_PROFILE_SECS`), for `perf record` (`scripts/bench/profile.sh`).
// The bench drives the plugin and the collector through their C ABI, like a frontend.
#![allow(unsafe_code)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{cpu_client, cpu_plugin, f32_bytes, get_api, open, run_self, traces_in};
use tpuscope_collector::recorder::{Event, Recorder};
use tpuscope_core::RawStackEntry;
use tpuscope_core::Record;
use tpuscope_core::event::{Execute, ExecuteComplete, Manifest, Sync as SyncRecord};
use tpuscope_pjrt::abi::{
    BufferExternalReferenceCountArgs, BufferIsOnCpuArgs, BufferReadyEventArgs, EventAwaitArgs,
    ExecuteOptions, LoadedExecutableExecuteArgs, PjrtArgs, PjrtBuffer, PjrtClient, PjrtDevice,
    PjrtEvent, PjrtFn, PjrtLoadedExecutable, buffer_type,
};
use tpuscope_pjrt::driver::{Driver, SINGLE_DEVICE_COMPILE_OPTIONS};

/// A 4-argument step: four f32[16,16] in, four out (mixes that stay bounded when chained).
const STEP4_MLIR: &str = r#"
module @step4 {
  func.func public @main(%a: tensor<16x16xf32>, %b: tensor<16x16xf32>, %c: tensor<16x16xf32>,
                         %d: tensor<16x16xf32>)
      -> (tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) {
    %h = stablehlo.constant dense<0.5> : tensor<16x16xf32>
    %ab = stablehlo.add %a, %b : tensor<16x16xf32>
    %bc = stablehlo.add %b, %c : tensor<16x16xf32>
    %cd = stablehlo.add %c, %d : tensor<16x16xf32>
    %da = stablehlo.add %d, %a : tensor<16x16xf32>
    %0 = stablehlo.multiply %ab, %h : tensor<16x16xf32>
    %1 = stablehlo.multiply %bc, %h : tensor<16x16xf32>
    %2 = stablehlo.multiply %cd, %h : tensor<16x16xf32>
    %3 = stablehlo.multiply %da, %h : tensor<16x16xf32>
    return %0, %1, %2, %3 : tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>
  }
}
"#;
const NUM_ARGS: usize = 4;

// ----------------------------------------------------------------- sizes

/// Plain hook: pairs of batches, calls per batch, pause after each pair.
const PLAIN_PAIRS: usize = 1000;
const PLAIN_CALLS: usize = 1000;
const PLAIN_PAUSE: Duration = Duration::from_micros(500);
/// Execute: pairs of batches, executes per batch.
const EXEC_PAIRS: usize = 200;
const EXEC_CALLS: usize = 50;
/// Writer: events pushed per mix.
const WRITER_EVENTS: usize = 1_000_000;
/// Threads calling at once in the concurrent measurements (more than the cores a CI machine
/// has, so a lock shared by the hooks would be contended).
const MT_THREADS: usize = 4;
const MT_PAIRS: usize = 40;
const MT_EXEC_CALLS: usize = 50;
const MT_READ_CALLS: usize = 500;

// ------------------------------------------------------------- stats / json

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// A flat JSON object, keys in insertion order.
#[derive(Default)]
struct Json(Vec<(String, String)>);

impl Json {
    fn num(&mut self, k: &str, v: f64) -> &mut Self {
        let text = if v.is_finite() {
            format!("{v:.4}")
        } else {
            "null".into()
        };
        self.0.push((k.into(), text));
        self
    }
    fn int(&mut self, k: &str, v: u64) -> &mut Self {
        self.0.push((k.into(), v.to_string()));
        self
    }
    fn str(&mut self, k: &str, v: &str) -> &mut Self {
        let esc: String = v
            .chars()
            .flat_map(|c| match c {
                '"' => vec!['\\', '"'],
                '\\' => vec!['\\', '\\'],
                c if (c as u32) < 0x20 => format!("\\u{:04x}", c as u32).chars().collect(),
                c => vec![c],
            })
            .collect();
        self.0.push((k.into(), format!("\"{esc}\"")));
        self
    }
    /// Raw JSON text (an object rendered elsewhere).
    fn raw(&mut self, k: &str, v: String) -> &mut Self {
        self.0.push((k.into(), v));
        self
    }
    fn render(&self) -> String {
        let body: Vec<String> = self
            .0
            .iter()
            .map(|(k, v)| format!("\"{k}\": {v}"))
            .collect();
        format!("{{{}}}", body.join(", "))
    }
}

/// Direct and wrapped per-call ns of each pair.
struct Pairs {
    direct: Vec<f64>,
    wrapped: Vec<f64>,
}

impl Pairs {
    fn json(&self) -> Json {
        let added: Vec<f64> = self
            .wrapped
            .iter()
            .zip(&self.direct)
            .map(|(w, d)| w - d)
            .collect();
        let ratio: Vec<f64> = self
            .wrapped
            .iter()
            .zip(&self.direct)
            .map(|(w, d)| w / d)
            .collect();
        let (d, w, a, r) = (
            sorted(&self.direct),
            sorted(&self.wrapped),
            sorted(&added),
            sorted(&ratio),
        );
        let mut j = Json::default();
        j.int("pairs", self.direct.len() as u64)
            .num("direct_p50_ns", percentile(&d, 50.0))
            .num("wrapped_p50_ns", percentile(&w, 50.0))
            .num("added_p50_ns", percentile(&a, 50.0))
            .num("added_p99_ns", percentile(&a, 99.0))
            .num("added_min_ns", percentile(&a, 0.0))
            .num("ratio_p50", percentile(&r, 50.0));
        j
    }
}

/// Runs `pairs` pairs of (direct, wrapped) batches, alternating which goes first; each closure
/// returns the mean ns per call of one batch.
fn alternate(
    pairs: usize,
    pause: Duration,
    mut direct: impl FnMut() -> f64,
    mut wrapped: impl FnMut() -> f64,
) -> Pairs {
    let mut out = Pairs {
        direct: Vec::with_capacity(pairs),
        wrapped: Vec::with_capacity(pairs),
    };
    for i in 0..pairs {
        let (d, w) = if i % 2 == 0 {
            let d = direct();
            (d, wrapped())
        } else {
            let w = wrapped();
            (direct(), w)
        };
        out.direct.push(d);
        out.wrapped.push(w);
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
    out
}

// ----------------------------------------------------------------- locating

/// `TPUSCOPE_BENCH_COLLECTOR`, else the newest release collector (see `common::collector_so`).
fn collector_so() -> PathBuf {
    match std::env::var_os("TPUSCOPE_BENCH_COLLECTOR") {
        Some(p) => PathBuf::from(p),
        None => common::collector_so(),
    }
}

fn driver(lib: &libloading::Library) -> Driver {
    // SAFETY: the table lives as long as the library, which is never unloaded.
    unsafe { Driver::new(get_api(lib)) }.unwrap_or_else(|| panic!("GetPjrtApi returned NULL"))
}

fn slot<A>(f: Option<PjrtFn<A>>, name: &str) -> PjrtFn<A> {
    f.unwrap_or_else(|| panic!("the table has no {name}"))
}

// ------------------------------------------------------------------ plain hook

/// Mean ns per `PJRT_Event_Await` of a ready event over `n` calls through `f`.
fn await_batch(f: PjrtFn<EventAwaitArgs>, event: *mut PjrtEvent, n: usize) -> f64 {
    let mut a = EventAwaitArgs::new();
    a.event = event;
    let t0 = Instant::now();
    for _ in 0..n {
        // SAFETY: `event` is live and ready; Await only reads the args.
        let err = unsafe { f(black_box(&mut a)) };
        assert!(err.is_null(), "PJRT_Event_Await failed");
    }
    t0.elapsed().as_nanos() as f64 / n as f64
}

// --------------------------------------------------------------------- execute

/// One side (direct or wrapped) of the execute benchmark: its table and its current inputs.
struct ExecSide {
    d: Driver,
    exe: *mut PjrtLoadedExecutable,
    inputs: Vec<*mut PjrtBuffer>,
    /// Inputs become the previous outputs (fresh buffers every execute).
    chain: bool,
}

impl ExecSide {
    /// Mean ns of the execute call alone over `n` executes.
    fn batch(&mut self, n: usize) -> f64 {
        let f = slot(self.d.api().loaded_executable_execute, "execute");
        let mut total = 0u128;
        for _ in 0..n {
            let mut outputs: [*mut PjrtBuffer; NUM_ARGS] = [std::ptr::null_mut(); NUM_ARGS];
            let out_list: [*mut *mut PjrtBuffer; 1] = [outputs.as_mut_ptr()];
            let arg_list: [*const *mut PjrtBuffer; 1] = [self.inputs.as_ptr()];
            let mut event: *mut PjrtEvent = std::ptr::null_mut();
            let mut opts = ExecuteOptions::new();
            let mut a = LoadedExecutableExecuteArgs::new();
            a.executable = self.exe;
            a.options = &mut opts;
            a.argument_lists = arg_list.as_ptr();
            a.num_devices = 1;
            a.num_args = NUM_ARGS;
            a.output_lists = out_list.as_ptr();
            a.device_complete_events = &mut event;
            let t0 = Instant::now();
            // SAFETY: every list has the announced sizes and outlives the call; inputs are live.
            let err = unsafe { f(&mut a) };
            total += t0.elapsed().as_nanos();
            // SAFETY: the plugin's error is ours to read and free.
            unsafe { self.d.check(err) }.unwrap_or_else(|e| panic!("execute: {e}"));
            // SAFETY: the completion event and outputs are ours; old inputs are not used again.
            unsafe {
                self.d
                    .event_await(event)
                    .unwrap_or_else(|e| panic!("await: {e}"));
                self.d
                    .event_destroy(event)
                    .unwrap_or_else(|e| panic!("event destroy: {e}"));
                let old = if self.chain {
                    std::mem::replace(&mut self.inputs, outputs.to_vec())
                } else {
                    outputs.to_vec()
                };
                for b in old {
                    self.d
                        .buffer_destroy(b)
                        .unwrap_or_else(|e| panic!("buffer destroy: {e}"));
                }
            }
        }
        total as f64 / n as f64
    }
}

// ------------------------------------------------------------------ concurrent

/// Handles the concurrent measurements share across threads (as addresses: raw pointers are
/// not `Send`).
#[derive(Clone, Copy)]
struct Shared {
    client: usize,
    dev: usize,
    exe: usize,
}

impl Shared {
    /// A fresh f32[16,16] buffer made through `d`.
    ///
    /// # Safety
    /// The client and device must be live.
    unsafe fn buffer(&self, d: &Driver, v: f32) -> *mut PjrtBuffer {
        // SAFETY: caller guarantee.
        unsafe {
            d.buffer_from_host(
                self.client as *mut PjrtClient,
                self.dev as *mut PjrtDevice,
                &f32_bytes(&[v; 256]),
                buffer_type::F32,
                &[16, 16],
            )
        }
        .unwrap_or_else(|e| panic!("buffer: {e}"))
    }
}

/// Mean over `threads` threads, started together, of what `per_thread` returns (ns per call).
fn concurrent(threads: usize, per_thread: impl Fn(usize) -> f64 + Sync) -> f64 {
    let barrier = std::sync::Barrier::new(threads);
    let f = &per_thread;
    let b = &barrier;
    let sum: f64 = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                s.spawn(move || {
                    b.wait();
                    f(i)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap_or_else(|_| panic!("bench thread panicked")))
            .sum()
    });
    sum / threads as f64
}

/// Chained executes (new argument buffers every call: shape cache misses, signature lookups)
/// on every thread at once; mean ns per execute call.
fn mt_execute_batch(d: Driver, sh: Shared, threads: usize) -> f64 {
    concurrent(threads, |t| {
        let mut side = ExecSide {
            d,
            exe: sh.exe as *mut PjrtLoadedExecutable,
            // SAFETY: the client and device live until the process exits.
            inputs: (0..NUM_ARGS)
                .map(|i| unsafe { sh.buffer(&d, (t * NUM_ARGS + i) as f32) })
                .collect(),
            chain: true,
        };
        let ns = side.batch(MT_EXEC_CALLS);
        for b in side.inputs {
            // SAFETY: the last outputs are ours and not used again.
            let _ = unsafe { d.buffer_destroy(b) };
        }
        ns
    })
}

/// Zero-copy host reads (JAX's `float(x)` on a CPU buffer: `IsOnCpu` → `IncreaseExternal
/// ReferenceCount`, then the reference dropped) on every thread at once; mean ns per read.
fn mt_read_batch(d: Driver, sh: Shared, threads: usize) -> f64 {
    let is_on_cpu = slot(d.api().buffer_is_on_cpu, "buffer_is_on_cpu");
    let increase = slot(
        d.api().buffer_increase_external_reference_count,
        "buffer_increase_external_reference_count",
    );
    let decrease = slot(
        d.api().buffer_decrease_external_reference_count,
        "buffer_decrease_external_reference_count",
    );
    concurrent(threads, |t| {
        // SAFETY: the client and device live until the process exits; the buffer is ours.
        let buf = unsafe { sh.buffer(&d, t as f32) };
        let mut total = 0u128;
        for _ in 0..MT_READ_CALLS {
            let mut on = BufferIsOnCpuArgs::new();
            on.buffer = buf;
            let mut inc = BufferExternalReferenceCountArgs::new();
            inc.buffer = buf;
            let t0 = Instant::now();
            // SAFETY: `buf` is live; each call only reads its args and the buffer.
            unsafe {
                d.check(is_on_cpu(&mut on))
                    .unwrap_or_else(|e| panic!("is on cpu: {e}"));
                d.check(increase(&mut inc))
                    .unwrap_or_else(|e| panic!("increase: {e}"));
            }
            total += t0.elapsed().as_nanos();
            let mut dec = BufferExternalReferenceCountArgs::new();
            dec.buffer = buf;
            // SAFETY: drops the reference just taken.
            unsafe { d.check(decrease(&mut dec)) }.unwrap_or_else(|e| panic!("decrease: {e}"));
        }
        // SAFETY: the buffer is ours and not used again.
        let _ = unsafe { d.buffer_destroy(buf) };
        total as f64 / MT_READ_CALLS as f64
    })
}

// ----------------------------------------------------------------------- child

/// Counts of a trace's records by kind, its dropped total and whether it ended cleanly.
fn summarize(path: &Path) -> Json {
    let mut j = Json::default();
    match tpuscope_core::read_trace_file(path) {
        Ok(t) => {
            let mut kinds: BTreeMap<&'static str, u64> = BTreeMap::new();
            for r in &t.events {
                *kinds.entry(r.kind().name()).or_default() += 1;
            }
            let mut k = Json::default();
            for (name, n) in &kinds {
                k.int(name, *n);
            }
            j.int("events", t.events.len() as u64)
                .int(
                    "dropped_total",
                    t.end.as_ref().map_or(0, |e| e.dropped_total),
                )
                .int("ended", u64::from(t.end.is_some()))
                .int("stacks", t.stacks.len() as u64)
                .raw("kinds", k.render());
        }
        Err(e) => {
            j.str("error", &e.to_string());
        }
    }
    j
}

/// Runs in a child whose environment configures the collector; prints one `RESULT {json}` line.
#[expect(
    clippy::too_many_lines,
    reason = "one benchmark table: each row a hook on the same real plugin"
)]
fn child(mode: &str) {
    let plugin = cpu_plugin();
    let so = collector_so();
    let collector = open(&so);
    let c = driver(collector);
    let r = driver(open(&plugin));
    // The same plugin instance behind both tables (dlopen of the same path).
    assert_eq!(
        c.api().struct_size,
        r.api().struct_size,
        "the collector did not wrap this plugin"
    );
    let wrapped_await = slot(c.api().event_await, "event_await");
    let direct_await = slot(r.api().event_await, "event_await");
    assert_ne!(
        wrapped_await as usize, direct_await as usize,
        "PJRT_Event_Await is not hooked"
    );

    let mut out = Json::default();
    out.str("mode", mode)
        .int("event_size_bytes", std::mem::size_of::<Event>() as u64)
        .int("record_size_bytes", std::mem::size_of::<Record>() as u64);
    // SAFETY: every handle below comes from `client` and lives until the process exits.
    unsafe {
        let client = cpu_client(&c, 1);
        let exe = c
            .compile(
                client,
                STEP4_MLIR.as_bytes(),
                "mlir",
                SINGLE_DEVICE_COMPILE_OPTIONS,
            )
            .unwrap_or_else(|e| panic!("compile: {e}"));
        let dev = c
            .loaded_addressable_devices(exe)
            .unwrap_or_else(|e| panic!("{e}"))[0];
        let make_inputs = |d: &Driver| -> Vec<*mut PjrtBuffer> {
            (0..NUM_ARGS)
                .map(|i| {
                    d.buffer_from_host(
                        client,
                        dev,
                        &f32_bytes(&[i as f32; 256]),
                        buffer_type::F32,
                        &[16, 16],
                    )
                    .unwrap_or_else(|e| panic!("buffer: {e}"))
                })
                .collect()
        };

        // Plain hook: a ready event, created through the real table (the collector does not
        // know it, so each await is a plain `Sync`).
        let buf = make_inputs(&r)[0];
        let mut rea = BufferReadyEventArgs::new();
        rea.buffer = buf;
        r.check(slot(r.api().buffer_ready_event, "buffer_ready_event")(
            &mut rea,
        ))
        .unwrap_or_else(|e| panic!("ready event: {e}"));
        let event = rea.event;
        r.event_await(event).unwrap_or_else(|e| panic!("{e}"));
        if let Some(what) = mode.strip_prefix("profile-") {
            // Only the wrapped side of one measurement, for `perf record`
            // (`scripts/bench/profile.sh plain|execute`).
            let secs: u64 = std::env::var("TPUSCOPE_BENCH_PROFILE_SECS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(5);
            let end = Instant::now() + Duration::from_secs(secs);
            let mut side = ExecSide {
                d: c,
                exe,
                inputs: make_inputs(&c),
                chain: true,
            };
            let mut n = 0u64;
            while Instant::now() < end {
                if what == "execute" {
                    side.batch(EXEC_CALLS);
                } else {
                    await_batch(wrapped_await, event, PLAIN_CALLS);
                    std::thread::sleep(PLAIN_PAUSE);
                }
                n += 1;
            }
            println!("RESULT {{\"mode\": \"{mode}\", \"batches\": {n}}}");
            return;
        }
        // Warm up both paths (caches, the writer's first allocations).
        for _ in 0..50 {
            await_batch(direct_await, event, PLAIN_CALLS);
            await_batch(wrapped_await, event, PLAIN_CALLS);
            std::thread::sleep(PLAIN_PAUSE);
        }
        let plain = alternate(
            PLAIN_PAIRS,
            PLAIN_PAUSE,
            || await_batch(direct_await, event, PLAIN_CALLS),
            || await_batch(wrapped_await, event, PLAIN_CALLS),
        );
        out.raw("plain_hook", {
            let mut j = plain.json();
            j.int("calls_per_batch", PLAIN_CALLS as u64)
                .int("pause_us", PLAIN_PAUSE.as_micros() as u64);
            j.render()
        });

        // Execute with argument shapes.
        for (key, chain) in [("execute_chained", true), ("execute_same_args", false)] {
            let mut direct = ExecSide {
                d: r,
                exe,
                inputs: make_inputs(&r),
                chain,
            };
            let mut wrapped = ExecSide {
                d: c,
                exe,
                inputs: make_inputs(&c),
                chain,
            };
            for _ in 0..10 {
                direct.batch(EXEC_CALLS);
                wrapped.batch(EXEC_CALLS);
            }
            let p = alternate(
                EXEC_PAIRS,
                Duration::ZERO,
                || direct.batch(EXEC_CALLS),
                || wrapped.batch(EXEC_CALLS),
            );
            out.raw(key, {
                let mut j = p.json();
                j.int("calls_per_batch", EXEC_CALLS as u64)
                    .int("args", NUM_ARGS as u64);
                j.render()
            });
        }
    }

    // The same calls from several threads at once: what the hooks add when they run
    // concurrently (a lock they all take shows up here, not in the one-thread numbers).
    {
        // SAFETY: a client, executable and device of this process, live until it exits.
        let sh = unsafe {
            let client = cpu_client(&c, 1);
            let exe = c
                .compile(
                    client,
                    STEP4_MLIR.as_bytes(),
                    "mlir",
                    SINGLE_DEVICE_COMPILE_OPTIONS,
                )
                .unwrap_or_else(|e| panic!("compile: {e}"));
            let dev = c
                .loaded_addressable_devices(exe)
                .unwrap_or_else(|e| panic!("{e}"))[0];
            Shared {
                client: client as usize,
                dev: dev as usize,
                exe: exe as usize,
            }
        };
        for (key, batch) in [
            (
                "execute_chained_mt",
                mt_execute_batch as fn(Driver, Shared, usize) -> f64,
            ),
            ("zero_copy_read_mt", mt_read_batch),
        ] {
            for _ in 0..3 {
                batch(r, sh, MT_THREADS);
                batch(c, sh, MT_THREADS);
            }
            let p = alternate(
                MT_PAIRS,
                Duration::from_millis(2),
                || batch(r, sh, MT_THREADS),
                || batch(c, sh, MT_THREADS),
            );
            out.raw(key, {
                let mut j = p.json();
                j.int("threads", MT_THREADS as u64);
                j.render()
            });
        }
    }

    // Close the trace and say what the collector recorded (and dropped) meanwhile.
    // SAFETY: an exported `extern "C" fn()` of the collector.
    unsafe {
        if let Ok(flush) = collector.get::<unsafe extern "C" fn()>(b"tpuscope_flush_for_tests\0") {
            flush();
        }
    }
    if let Some(dir) = std::env::var_os("TPUSCOPE_OUT").map(PathBuf::from) {
        let traces = traces_in(&dir);
        match traces.first() {
            Some(t) => out.raw("trace", summarize(t).render()),
            None => out.raw("trace", "null".into()),
        };
    }
    println!("RESULT {}", out.render());
}

/// Runs `--child mode` with `envs`; returns its `RESULT` JSON.
fn run_child(mode: &str, envs: &[(&str, &str)]) -> String {
    let (stdout, stderr) = run_self(mode, &["--child", mode], envs.iter().copied());
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("child {mode} printed no RESULT:\n{stdout}\n{stderr}"))
}

// ---------------------------------------------------------------------- writer

fn sync_event(i: u64) -> Event {
    Event::new(Record::Sync(SyncRecord {
        t_ns: i,
        thread: 1,
        dur_ns: 40,
        reason: "PJRT_Event_Await".to_string(),
        buffer_id: 0,
        stack: 0,
    }))
}

fn execute_event(i: u64, sig: &Arc<str>) -> Event {
    let mut ev = Event::new(Record::Execute(Execute {
        t_ns: i,
        thread: 1,
        dur_ns: 5000,
        executable_id: 0x7f00_0000_1000,
        num_devices: 1,
        num_args: 4,
        arg_signature: 0,
        seq: i,
        error: None,
        completion_tracked: true,
    }));
    ev.signature = Some(sig.clone());
    ev
}

fn complete_event(i: u64) -> Event {
    Event::new(Record::ExecuteComplete(ExecuteComplete {
        t_ns: i,
        seq: i,
        device_index: 0,
        error: None,
    }))
}

/// Pushes `n` events built by `make` as fast as one thread can into a fresh recorder of the
/// default capacity drained by a real writer; reports push and drain rates and drops.
fn writer_bench(name: &str, n: usize, mut make: impl FnMut(u64) -> Event) -> Json {
    let capacity = tpuscope_collector::config::Config::from_lookup(|_| None).queue_capacity;
    let rec: &'static Recorder = Box::leak(Box::new(Recorder::new(capacity)));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let path = dir.path().join(format!("{name}.tps"));
    let handle =
        tpuscope_collector::writer::start(rec, Manifest::default(), path.clone(), u64::MAX)
            .unwrap_or_else(|| panic!("writer did not start"));
    // Let the writer reach its idle wait, so the clock starts with a writer ready to drain.
    std::thread::sleep(Duration::from_millis(20));
    // Events are built before the clock starts: only the push is the hook's cost here.
    let t0 = Instant::now();
    let mut build_ns = 0u128;
    const CHUNK: usize = 1024;
    let mut i = 0u64;
    while (i as usize) < n {
        let tb = Instant::now();
        let chunk: Vec<Event> = (0..CHUNK).map(|k| make(i + k as u64)).collect();
        build_ns += tb.elapsed().as_nanos();
        for ev in chunk {
            rec.push(ev);
        }
        i += CHUNK as u64;
    }
    let pushed = i;
    let push_elapsed = t0.elapsed();
    while !rec.is_empty() {
        std::hint::spin_loop();
        std::thread::sleep(Duration::from_micros(50));
    }
    let drain_elapsed = t0.elapsed();
    let dropped = rec.dropped();
    handle.shutdown(Duration::from_secs(30));
    let written = pushed - dropped;
    let bytes = std::fs::metadata(&handle.path).map_or(0, |m| m.len());
    let push_s = (push_elapsed.as_nanos() - build_ns.min(push_elapsed.as_nanos())) as f64 / 1e9;
    let mut j = Json::default();
    j.int("pushed", pushed)
        .int("queue_capacity", capacity as u64)
        .int("dropped", dropped)
        .num("offered_events_per_s", pushed as f64 / push_s.max(1e-9))
        .num(
            "drained_events_per_s",
            written as f64 / drain_elapsed.as_secs_f64(),
        )
        .num("bytes_per_event", bytes as f64 / written.max(1) as f64);
    j
}

fn writer_benches() -> Json {
    let sig: Arc<str> = Arc::from("f32[256,512] f32[512,512] f32[512] f32[512,512]");
    let frames: Vec<RawStackEntry> = (0..16)
        .map(|i| RawStackEntry {
            file: format!("/home/user/project/model/layer{i}.py").into(),
            function: format!("forward_{i}").into(),
            line: 100 + i,
        })
        .collect();
    let mut j = Json::default();
    j.raw(
        "sync",
        writer_bench("sync", WRITER_EVENTS, sync_event).render(),
    );
    j.raw(
        "execute_and_complete",
        writer_bench("exec", WRITER_EVENTS, |i| {
            if i % 2 == 0 {
                execute_event(i, &sig)
            } else {
                complete_event(i)
            }
        })
        .render(),
    );
    j.raw(
        "sync_with_16_frame_stack",
        writer_bench("stack", WRITER_EVENTS / 4, |i| {
            let mut ev = sync_event(i);
            ev.stack = Some(frames.clone());
            ev
        })
        .render(),
    );
    j
}

// ------------------------------------------------------------------------ main

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    if let Some(mode) = arg("--child") {
        child(&mode);
        return;
    }
    if let Some(trace) = arg("--summarize") {
        println!("{}", summarize(Path::new(&trace)).render());
        return;
    }
    let plugin = cpu_plugin();
    let so = collector_so();
    let plugin_s = plugin.to_string_lossy().into_owned();
    let so_s = so.to_string_lossy().into_owned();
    let mut all = Json::default();
    all.str("collector", &so_s).str("plugin", &plugin_s);
    for (mode, extra) in [("record", "1"), ("passthrough", "0")] {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let out = dir.path().to_string_lossy().into_owned();
        eprintln!("hooks bench: child {mode} …");
        let res = run_child(
            mode,
            &[
                ("TPUSCOPE_REAL_PLUGIN", &plugin_s),
                ("TPUSCOPE_BENCH_COLLECTOR", &so_s),
                ("TPUSCOPE_OUT", &out),
                ("TPUSCOPE_STACKS", "0"),
                ("TPUSCOPE_ENABLE", extra),
            ],
        );
        println!("{mode}: {res}");
        all.raw(mode, res);
    }
    eprintln!("hooks bench: writer …");
    let w = writer_benches().render();
    println!("writer: {w}");
    all.raw("writer", w);
    if let Some(path) = arg("--json") {
        if let Some(parent) = Path::new(&path).parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        std::fs::write(&path, all.render() + "\n")
            .unwrap_or_else(|e| panic!("writing {path}: {e}"));
        eprintln!("hooks bench: wrote {path}");
    }
}
