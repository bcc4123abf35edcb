//! What the live view costs per frame while a workload streams events, and when it idles.
//!
//! `cargo bench -p tpuscope-tui --bench frame` (a plain `harness = false` main, like the other
//! benches: criterion's build is too slow for a 2-core machine). Single thread; times are
//! `Instant` spans of work that never blocks, so they are CPU time.
//!
//! The stream is a JAX data-parallel training loop on 4 devices, shaped like what the collector
//! records (the real HLO programs of `sample_traces/hlo/` with the learning rate patched per
//! epoch, so each epoch's recompile is a `constant_changed` member): per step the batch's
//! host-to-device shards, a train step and a metrics update with their completions, a blocking
//! `float(loss)` read with a Python stack, a step marker; allocator memory samples every 10 steps.
//! `TPUSCOPE_BENCH_EVENTS` events (default 100 000) arrive at `TPUSCOPE_BENCH_RATE` events/s
//! (default 10 000): the simulation runs 10 frames per second of stream time, and every 500 ms
//! rebuilds the state the way a viewer does — decode the bytes received so far
//! (`read_trace`), `report::build`, `Model::build` — then draws every frame into a 120x40
//! `TestBackend`. It prints the per-frame time (mean, p99, max), the frames per second that
//! leaves, the rebuild's parts at the largest size, and the idle cost (drawing only) as a share
//! of a core at 4 frames per second.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use tpuscope_analyzers::report::{self, Input};
use tpuscope_core::event::*;
use tpuscope_core::{RawStackEntry, Record, TraceWriter, read_trace};
use tpuscope_tui::{App, Extra, Model, RunState, view};

const LR01_OPT: &[u8] =
    include_bytes!("../../sample_traces/hlo/jax_lr_cpu_lr0.1.optimized.hlo_with_config.pb");
const LR005_OPT: &[u8] =
    include_bytes!("../../sample_traces/hlo/jax_lr_cpu_lr0.05.optimized.hlo_with_config.pb");
const LR01_MLIR: &[u8] = include_bytes!("../../sample_traces/hlo/jax_lr_cpu_lr0.1.input.mlir.pb");
const AOT_OPT: &[u8] =
    include_bytes!("../../sample_traces/hlo/jax_aot_tpu_v5e_2x2.optimized.hlo_with_config.pb");

const DEVICES: u32 = 4;
const STEPS_PER_EPOCH: u64 = 400;
const START: u64 = 3_333_000_000_000;

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

/// The one offset where `a` holds `va` and `b` holds `vb` (an f32 constant that differs).
fn constant_offset(a: &[u8], va: f32, b: &[u8], vb: f32) -> usize {
    let found: Vec<usize> = (0..a.len().saturating_sub(3))
        .filter(|&i| a[i..i + 4] == va.to_le_bytes() && b.get(i..i + 4) == Some(&vb.to_le_bytes()))
        .collect();
    match found[..] {
        [i] => i,
        _ => panic!("expected one f32 {va} constant, found {found:?}"),
    }
}

fn only_offset(a: &[u8], v: f32) -> usize {
    let found: Vec<usize> = (0..a.len().saturating_sub(3))
        .filter(|&i| a[i..i + 4] == v.to_le_bytes())
        .collect();
    match found[..] {
        [i] => i,
        _ => panic!("expected one f32 {v} constant, found {found:?}"),
    }
}

fn patched(blob: &[u8], at: usize, v: f32) -> Vec<u8> {
    let mut b = blob.to_vec();
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    b
}

fn frames(list: &[(&str, &str, u32)]) -> Vec<RawStackEntry> {
    list.iter()
        .map(|&(file, function, line)| RawStackEntry {
            file: Arc::from(file),
            function: Arc::from(function),
            line,
        })
        .collect()
}

/// The stream: its bytes and, for each event written, the length of the stream after it.
struct Stream {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

struct Gen {
    w: TraceWriter<Vec<u8>>,
    ends: Vec<usize>,
    rng: XorShift,
    t: u64,
    seq: u64,
}

impl Gen {
    fn put(&mut self, r: Record) {
        ok(self.w.write(&r));
        self.ends.push(self.w.get_ref().len());
    }

    fn execute(&mut self, id: u64, sig: StringId) {
        self.t += 20_000 + self.rng.next() % 40_000;
        self.seq += 1;
        let seq = self.seq;
        let dur_ns = 5_000 + self.rng.next() % 50_000;
        self.put(Record::Execute(Execute {
            t_ns: self.t,
            thread: 1,
            dur_ns,
            executable_id: id,
            num_devices: DEVICES,
            num_args: 4,
            arg_signature: sig,
            seq,
            error: None,
            completion_tracked: true,
        }));
        for d in 0..DEVICES {
            let t_ns = self.t + 2_000_000 + self.rng.next() % 20_000;
            self.put(Record::ExecuteComplete(ExecuteComplete {
                t_ns,
                seq,
                device_index: d,
                error: None,
            }));
        }
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one benchmark table: each row a screen drawn from the same model"
)]
fn stream(events: usize) -> Stream {
    let lr_opt = constant_offset(LR01_OPT, 0.1, LR005_OPT, 0.05);
    let lr_mlir = only_offset(LR01_MLIR, 0.1);
    let manifest = Manifest {
        pid: 21664,
        host: "tpu-vm-0".into(),
        start_mono_ns: START,
        command_line: vec!["python".into(), "train.py".into()],
        plugin_path: "/venv/lib/python3.11/site-packages/libtpu/libtpu.so".into(),
        pjrt_api_minor: 115,
        package_versions: vec![KeyValue {
            key: "jax".into(),
            value: "0.10.2".into(),
        }],
        frontend: "jax".into(),
        ..Default::default()
    };
    let mut g = Gen {
        w: ok(TraceWriter::new(Vec::with_capacity(events * 80), &manifest)),
        ends: Vec::with_capacity(events + 16),
        rng: XorShift(0x9e37_79b9_7f4a_7c15),
        t: START + 1_000_000_000,
        seq: 0,
    };
    let jax = "/venv/lib/python3.11/site-packages/jax/_src";
    let pxla = format!("{jax}/interpreters/pxla.py");
    let array = format!("{jax}/array.py");
    let user = "/home/user/project/train.py";
    let pjit = format!("{jax}/pjit.py");
    // A jitted function's compile goes through pjit.py, as a real JAX stack does (without it the
    // analyzers take the compile for an eager op's).
    let compile_stack = ok(g.w.intern_stack(&frames(&[
        (&pxla, "_cached_compilation", 1516),
        (&pxla, "UnloadedMeshExecutable.from_hlo", 1733),
        (&pjit, "_pjit_call_impl_python", 1231),
        (&pjit, "cache_miss", 335),
        (user, "train_epoch", 88),
        (user, "main", 151),
    ])));
    let read_stack = ok(g.w.intern_stack(&frames(&[
        (&array, "ArrayImpl._value", 623),
        (&array, "ArrayImpl.__float__", 300),
        (user, "train_epoch", 90),
        (user, "main", 151),
    ])));
    let train_sig = ok(g.w.intern_string("f32[8] f32[64,8] f32[64]"));
    let metrics_sig = ok(g.w.intern_string("f32[] f32[]"));
    let metrics_id = 0x7000_0001;
    let mut train_id = 0;
    let mut step = 0u64;
    while g.ends.len() < events {
        if step.is_multiple_of(STEPS_PER_EPOCH) {
            // The learning rate decays per epoch; as a Python float it is baked into the program.
            let epoch = step / STEPS_PER_EPOCH;
            let lr = 0.1 * 0.9f32.powi(epoch as i32);
            let mlir = patched(LR01_MLIR, lr_mlir, lr);
            let opt = patched(LR01_OPT, lr_opt, lr);
            let program_hash = ok(g.w.put_blob("input_program", "mlir", &mlir));
            let optimized_hash = ok(g.w.put_blob("optimized_program", "hlo_with_config", &opt));
            train_id = 0x7100_0000 + epoch;
            let dur_ns = 80_000_000 + g.rng.next() % 20_000_000;
            g.put(Record::Compile(Box::new(Compile {
                t_ns: g.t,
                thread: 1,
                dur_ns,
                api: "PJRT_Client_Compile".into(),
                program_format: "mlir".into(),
                program_size: mlir.len() as u64,
                program_hash,
                options_hash: 0x1234,
                executable_name: "jit_train_step".into(),
                optimized_hash,
                optimized_format: "hlo_with_config".into(),
                stack: compile_stack,
                executable_id: train_id,
                num_devices: DEVICES,
                ..Default::default()
            })));
            g.t += dur_ns;
            if epoch == 0 {
                let program_hash =
                    ok(g.w.put_blob("optimized_program", "hlo_with_config", AOT_OPT));
                g.put(Record::Compile(Box::new(Compile {
                    t_ns: g.t,
                    thread: 1,
                    dur_ns: 30_000_000,
                    api: "PJRT_Client_Compile".into(),
                    program_format: "hlo_with_config".into(),
                    program_hash,
                    executable_name: "jit_update_metrics".into(),
                    stack: compile_stack,
                    executable_id: metrics_id,
                    num_devices: DEVICES,
                    ..Default::default()
                })));
            }
        }
        step += 1;
        for d in 0..DEVICES as i32 {
            g.t += 10_000;
            let t_ns = g.t;
            g.put(Record::Transfer(Box::new(Transfer {
                t_ns,
                thread: 1,
                dur_ns: 30_000,
                direction: Direction::H2d as i32,
                api: "PJRT_Client_BufferFromHostBuffer".into(),
                bytes: 512 * 1024,
                dims: vec![128, 1024],
                dtype: "f32".into(),
                device: d,
                ..Default::default()
            })));
        }
        g.execute(train_id, train_sig);
        g.execute(metrics_id, metrics_sig);
        let stall = 2_000_000 + g.rng.next() % 1_000_000;
        let t_ns = g.t;
        g.put(Record::Transfer(Box::new(Transfer {
            t_ns,
            thread: 1,
            dur_ns: stall,
            direction: Direction::D2h as i32,
            api: "zero_copy_read".into(),
            bytes: 4,
            dtype: "f32".into(),
            sync: true,
            blocked_ns: stall,
            stack: read_stack,
            ..Default::default()
        })));
        g.t += stall + 50_000;
        let t_ns = g.t;
        g.put(Record::Step(Step {
            t_ns,
            thread: 1,
            marker: "user".into(),
            number: step,
        }));
        if step.is_multiple_of(10) {
            for d in 0..DEVICES as i32 {
                let t_ns = g.t;
                let in_use = (6i64 << 30) + (g.rng.next() % (1 << 26)) as i64;
                g.put(Record::Memory(Box::new(Memory {
                    t_ns,
                    device: d,
                    origin: MemoryOrigin::PluginStats as i32,
                    bytes_in_use: in_use,
                    peak_bytes_in_use: Some(in_use + (256 << 20)),
                    bytes_limit: Some(16 << 30),
                    ..Default::default()
                })));
            }
        }
    }
    g.ends.truncate(events);
    Stream {
        bytes: g.w.into_inner(),
        ends: g.ends,
    }
}

/// Decode, analyze, build: what a viewer does with the bytes it has.
fn rebuild(bytes: &[u8]) -> (Model, [Duration; 3]) {
    let t0 = Instant::now();
    let trace = ok(read_trace(bytes));
    let t1 = Instant::now();
    let report = report::build(&[Input::new("live", &trace)], &report::Options::default());
    let t2 = Instant::now();
    let model = Model::build(
        &trace,
        report,
        None,
        Extra {
            state: RunState::Live,
            ..Extra::default()
        },
    );
    let t3 = Instant::now();
    (model, [t1 - t0, t2 - t1, t3 - t2])
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[expect(
    clippy::too_many_lines,
    reason = "one benchmark table: each row a screen drawn from the same model"
)]
fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` only gets a smoke run.
    let quick = !std::env::args().any(|a| a == "--bench");
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let events = env(
        "TPUSCOPE_BENCH_EVENTS",
        if quick { 20_000 } else { 100_000 },
    );
    let rate = env("TPUSCOPE_BENCH_RATE", 10_000).max(1);
    const FPS: usize = 10;
    const REBUILD_EVERY: usize = 5; // frames: 500 ms at 10 fps

    let t = Instant::now();
    let s = stream(events);
    println!(
        "stream: {events} events, {:.1} MB (generated in {:.2?}); {rate} events/s for {:.1} s at {FPS} fps, 120x40",
        s.bytes.len() as f64 / 1e6,
        t.elapsed(),
        events as f64 / rate as f64
    );

    let mut term = ok(Terminal::new(TestBackend::new(120, 40)));
    let mut app = App::new();
    let frames = events.div_ceil(rate) * FPS;
    let rebuilt = |f: usize| f.is_multiple_of(REBUILD_EVERY) || f + 1 == frames;
    let mut frame_times = Vec::with_capacity(frames);
    let mut rebuild_times = Vec::new();
    let mut last_parts = [Duration::ZERO; 3];
    let mut last_events = 0;
    for f in 0..frames {
        let start = Instant::now();
        if rebuilt(f) {
            let arrived = ((f + 1) * rate / FPS).min(events);
            let (model, parts) = rebuild(&s.bytes[..s.ends[arrived - 1]]);
            last_events = model.counters.events;
            app.set_model(model, (f * 1000 / FPS) as u64);
            rebuild_times.push(parts.iter().sum::<Duration>());
            last_parts = parts;
        }
        app.tick((f * 1000 / FPS) as u64);
        ok(term.draw(|fr| view::draw_app(fr, &mut app)));
        frame_times.push(start.elapsed());
    }
    black_box(&term);
    let model = app.model().unwrap_or_else(|| panic!("no model"));
    // The simulation saw what was streamed: otherwise the timing measures the wrong work.
    assert!(
        last_events as usize + 200 >= events,
        "{last_events} of {events}"
    );
    assert_eq!(model.families.len(), 1);
    assert!(model.counters.host_syncs > 0 && model.memory.len() == DEVICES as usize);

    let total: Duration = frame_times.iter().sum();
    let mean = total / frame_times.len() as u32;
    let mut sorted = frame_times.clone();
    sorted.sort();
    let p99 = percentile(&sorted, 0.99);
    let max = *sorted.last().unwrap_or(&Duration::ZERO);
    let max_at = frame_times.iter().position(|d| *d == max).unwrap_or(0);
    let draw_only: Vec<Duration> = frame_times
        .iter()
        .enumerate()
        .filter(|(i, _)| !rebuilt(*i))
        .map(|(_, d)| *d)
        .collect();
    let draw_mean = draw_only.iter().sum::<Duration>() / draw_only.len().max(1) as u32;
    println!(
        "streaming: {} frames, per frame mean {:.2} ms, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms → {:.0} frames/s on average; {:.1} % of a core at {FPS} fps",
        frame_times.len(),
        ms(mean),
        ms(percentile(&sorted, 0.5)),
        ms(p99),
        ms(max),
        1.0 / mean.as_secs_f64(),
        100.0 * mean.as_secs_f64() * FPS as f64,
    );
    println!(
        "  frames without a rebuild: mean {:.2} ms (draw only); rebuilds: {} , mean {:.1} ms, last (at {last_events} events) {:.1} ms = read_trace {:.1} + report::build {:.1} + Model::build {:.1}",
        ms(draw_mean),
        rebuild_times.len(),
        ms(rebuild_times.iter().sum::<Duration>() / rebuild_times.len().max(1) as u32),
        ms(last_parts.iter().sum()),
        ms(last_parts[0]),
        ms(last_parts[1]),
        ms(last_parts[2]),
    );
    let worst_rebuild = rebuild_times.iter().max().copied().unwrap_or_default();
    let budget = Duration::from_millis(1000 / FPS as u64);
    println!(
        "  {FPS} fps budget {:.0} ms per frame: worst frame {:.1} ms (frame {max_at}{}) ({})",
        ms(budget),
        ms(max),
        if rebuilt(max_at) {
            ", a rebuild"
        } else {
            ", draw only"
        },
        if max <= budget {
            "within budget".to_string()
        } else {
            format!(
                "{:.1}× over; the rebuild alone is {:.1} ms",
                max.as_secs_f64() / budget.as_secs_f64(),
                ms(worst_rebuild)
            )
        }
    );

    // `tpuscope run`/`attach` decode and analyse on a thread of their own (cli/src/live_ui.rs):
    // the loop forwards bytes and draws, so its frames cost the draw only, and a model shown is
    // at most one rebuild plus the rebuild period old.
    println!(
        "  live loop (analysis on its own thread): frames cost the draw only, mean {:.2} ms; models lag the stream by ≤ {:.0} ms + one rebuild (worst {:.1} ms)",
        ms(draw_mean),
        ms(Duration::from_millis((REBUILD_EVERY * 1000 / FPS) as u64)),
        ms(worst_rebuild),
    );

    // Idle: nothing arrives, the screen redraws at 4 fps (the clock and highlights move).
    let idle_frames = if quick { 20 } else { 400 };
    let t = Instant::now();
    for i in 0..idle_frames {
        app.tick(1_000_000 + i * 250);
        ok(term.draw(|fr| view::draw_app(fr, &mut app)));
    }
    let per = t.elapsed() / idle_frames as u32;
    println!(
        "idle: draw {:.3} ms per frame → {:.3} % of a core at 4 fps",
        ms(per),
        100.0 * per.as_secs_f64() * 4.0
    );
}
