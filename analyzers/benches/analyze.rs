//! Throughput of the analyses on a large training trace: `read_trace` alone, `report::analyze`
//! alone, and both, on the same bytes. Issue 3's target is decoding + analysis at ≥ 100 MB/s and
//! ≥ 1 M events/s on one core, on a trace whose HLO blobs are under 20 % of its bytes.
//!
//! `cargo bench -p tpuscope-analyzers --bench analyze` (plain `harness = false` main, like
//! core/benches/read.rs: criterion's build is too slow for a 2-core machine). `TPUSCOPE_BENCH_MB`
//! sets the size of the generated trace (default 100). Single thread; each measurement runs 5
//! times and prints the best (judged against the target) and the median.
//!
//! The trace is a JAX data-parallel training loop on a 4-chip host, shaped like what the
//! collector records: per step the batch's host-to-device shards, a train step and a metrics
//! update on 4 devices with their completions, a runtime event wait, `float(loss)` (a blocking
//! read with the user's Python stack), a step marker (`tpuscope_agent.mark_step()`); memory
//! samples every 10 steps. Each epoch recompiles the train step (the learning rate is a Python
//! float baked in as a constant) and an augmentation graph with a changed constant, and re-jits an
//! eval step with the identical program. The programs are the real ones of `sample_traces/hlo/`
//! with one constant patched; the augmentation graph borrows torch_xla's, the only captured
//! programs whose input is HLO (the analyses do not ask which frontend compiled a program).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tpuscope_analyzers::report::{Input, Report, analyze};
use tpuscope_core::event::*;
use tpuscope_core::{Completeness, RawStackEntry, Record, Trace, TraceWriter, hlo, read_trace};

/// The real programs, as the collector stored them (see sample_traces/hlo/README.md).
const LR01_OPT: &[u8] =
    include_bytes!("../../sample_traces/hlo/jax_lr_cpu_lr0.1.optimized.hlo_with_config.pb");
const LR005_OPT: &[u8] =
    include_bytes!("../../sample_traces/hlo/jax_lr_cpu_lr0.05.optimized.hlo_with_config.pb");
const LR01_MLIR: &[u8] = include_bytes!("../../sample_traces/hlo/jax_lr_cpu_lr0.1.input.mlir.pb");
const AOT_OPT: &[u8] =
    include_bytes!("../../sample_traces/hlo/jax_aot_tpu_v5e_2x2.optimized.hlo_with_config.pb");
const TXLA_IN: &[u8] = include_bytes!("../../sample_traces/hlo/torch_xla_item_step0.input.hlo.pb");
const TXLA_OPT: &[u8] =
    include_bytes!("../../sample_traces/hlo/torch_xla_item_step0.optimized.hlo_with_config.pb");

/// Devices of the simulated host (a v5e 2x2).
const DEVICES: u32 = 4;
const STEPS_PER_EPOCH: u64 = 750;
const EVAL_BATCHES: u64 = 20;
const STEP_MARKER: &str = "user";

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

    /// `base` plus up to `spread` of jitter.
    fn around(&mut self, base: u64, spread: u64) -> u64 {
        base + self.next() % spread.max(1)
    }
}

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

/// Offsets of `v`'s little-endian bytes in `blob`.
fn f32_offsets(blob: &[u8], v: f32) -> Vec<usize> {
    let pat = v.to_le_bytes();
    blob.windows(4)
        .enumerate()
        .filter(|(_, w)| *w == pat)
        .map(|(i, _)| i)
        .collect()
}

/// The one offset of `v` in `blob`, or the one where `other` holds `other_v` instead.
fn constant_offset(blob: &[u8], v: f32, other: Option<(&[u8], f32)>) -> usize {
    let found: Vec<usize> = f32_offsets(blob, v)
        .into_iter()
        .filter(|&i| other.is_none_or(|(o, ov)| o.get(i..i + 4) == Some(&ov.to_le_bytes()[..])))
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

/// Where the patchable constant of each real program sits.
struct Constants {
    /// The learning rate in the optimized train step (0.1 there, 0.05 in its recompile).
    lr_opt: usize,
    lr_mlir: usize,
    txla_in: usize,
    txla_opt: usize,
    /// A constant of the mlir program changed once, to give the eval step its own input program.
    eval_mlir: usize,
}

impl Constants {
    fn find() -> Constants {
        Constants {
            lr_opt: constant_offset(LR01_OPT, 0.1, Some((LR005_OPT, 0.05))),
            lr_mlir: constant_offset(LR01_MLIR, 0.1, None),
            txla_in: constant_offset(TXLA_IN, 1.0, None),
            txla_opt: constant_offset(TXLA_OPT, 0.01, None),
            eval_mlir: constant_offset(LR01_MLIR, 1.0, None),
        }
    }
}

/// Every patched program must still decode: a constant that was really a length or a tag would
/// give the analyses a program that fails, not one that changed.
fn check_decodes(format: &str, blob: &[u8]) {
    if format != "mlir" && !matches!(hlo::decode_program(format, blob), Ok(Some(_))) {
        panic!("patched {format} program does not decode");
    }
}

fn frames(frames: &[(&str, &str, u32)]) -> Vec<RawStackEntry> {
    frames
        .iter()
        .map(|&(file, function, line)| RawStackEntry {
            file: Arc::from(file),
            function: Arc::from(function),
            line,
        })
        .collect()
}

/// What the generator wrote, to check the report against.
struct Written {
    bytes: Vec<u8>,
    steps: u64,
    compiles: u64,
}

struct Gen {
    w: TraceWriter<Vec<u8>>,
    rng: XorShift,
    t: u64,
    seq: u64,
    compiles: u64,
    buffer: u64,
}

/// Appends a record (a free function: the arguments often draw from the generator's rng).
fn put(w: &mut TraceWriter<Vec<u8>>, r: Record) {
    ok(w.write(&r));
}

impl Gen {
    fn compile(
        &mut self,
        name: &str,
        stack: StackId,
        input: (&str, &[u8]),
        optimized: (&str, &[u8]),
        options_hash: u64,
    ) -> u64 {
        let program_hash = ok(self.w.put_blob("input_program", input.0, input.1));
        let optimized_hash = ok(self
            .w
            .put_blob("optimized_program", optimized.0, optimized.1));
        self.compiles += 1;
        let executable_id = 0x7fb1_a800_0000 + self.compiles * 0x1_0000;
        let dur_ns = self.rng.around(80_000_000, 40_000_000);
        let peak = 1 << 30 | (self.rng.next() % (1 << 28)) as i64;
        put(
            &mut self.w,
            Record::Compile(Box::new(Compile {
                t_ns: self.t,
                thread: 21683,
                dur_ns,
                api: "PJRT_Client_Compile".into(),
                program_format: input.0.into(),
                program_size: input.1.len() as u64,
                program_hash,
                options_hash,
                executable_name: name.into(),
                fingerprint: format!("{:x}{:x}", self.rng.next(), self.rng.next()),
                optimized_hash,
                optimized_format: optimized.0.into(),
                memory: Some(CompiledMemoryStats {
                    argument_size: peak / 2,
                    output_size: peak / 8,
                    temp_size: peak / 4,
                    peak_memory: peak,
                    ..Default::default()
                }),
                error: None,
                stack,
                executable_id,
                num_outputs: 3,
                num_devices: DEVICES,
            })),
        );
        self.t += dur_ns;
        executable_id
    }

    fn h2d(&mut self, device: i32, dims: &[i64], dtype: &str) {
        self.t += self.rng.around(20_000, 30_000);
        self.buffer += 0x40;
        put(
            &mut self.w,
            Record::Transfer(Box::new(Transfer {
                t_ns: self.t,
                thread: 21664,
                dur_ns: self.rng.around(40_000, 20_000),
                direction: Direction::H2d as i32,
                api: "PJRT_Client_BufferFromHostBuffer".into(),
                bytes: 4 * dims.iter().product::<i64>() as u64,
                dims: dims.to_vec(),
                dtype: dtype.into(),
                device,
                sync: false,
                blocked_ns: 0,
                stack: 0,
                buffer_id: 0x5559_df00_0000 + self.buffer,
                error: None,
            })),
        );
    }

    /// An execute on every device; returns its sequence number.
    fn execute(&mut self, executable_id: u64, num_args: u32, arg_signature: StringId) -> u64 {
        self.t += self.rng.around(10_000, 60_000);
        self.seq += 1;
        put(
            &mut self.w,
            Record::Execute(Execute {
                t_ns: self.t,
                thread: 21664,
                dur_ns: self.rng.around(4_000, 60_000),
                executable_id,
                num_devices: DEVICES,
                num_args,
                arg_signature,
                seq: self.seq,
                error: None,
                completion_tracked: true,
            }),
        );
        self.seq
    }

    fn completions(&mut self, seq: u64, device_ns: u64) {
        let done = self.t + device_ns;
        for d in 0..DEVICES {
            let t_ns = done + self.rng.around(1_000, 20_000);
            put(
                &mut self.w,
                Record::ExecuteComplete(ExecuteComplete {
                    t_ns,
                    seq,
                    device_index: d,
                    error: None,
                }),
            );
        }
    }

    /// A blocking device-to-host read of a scalar (`float(x)`), stalled until the device is done.
    fn read_scalar(&mut self, stack: StackId, stall_ns: u64) {
        self.t += self.rng.around(5_000, 10_000);
        let t_ns = self.t;
        self.t += stall_ns;
        self.buffer += 0x40;
        put(
            &mut self.w,
            Record::Transfer(Box::new(Transfer {
                t_ns,
                thread: 21664,
                dur_ns: stall_ns + 8_000,
                direction: Direction::D2h as i32,
                api: "zero_copy_read".into(),
                bytes: 4,
                dims: Vec::new(),
                dtype: "f32".into(),
                device: 0,
                sync: true,
                blocked_ns: stall_ns,
                stack,
                buffer_id: 0x5559_df00_0000 + self.buffer,
                error: None,
            })),
        );
    }

    /// A wait of the runtime's own thread (no Python stack).
    fn runtime_wait(&mut self) {
        let dur_ns = self.rng.around(50_000, 500_000);
        put(
            &mut self.w,
            Record::Sync(Sync {
                t_ns: self.t,
                thread: 21701,
                dur_ns,
                reason: "PJRT_Event_Await".into(),
                buffer_id: 0,
                stack: 0,
            }),
        );
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "builds one synthetic multi-run workload, step by step"
)]
fn training_trace(target_bytes: usize) -> Written {
    let consts = Constants::find();
    let start_mono_ns = 3_333_000_000_000u64;
    let manifest = Manifest {
        pid: 21664,
        host: "tpu-vm-0".into(),
        start_wall_ns: 1_700_000_000_000_000_000,
        start_mono_ns,
        command_line: vec!["python".into(), "train.py".into(), "--epochs=100".into()],
        plugin_path: "/home/user/venv/lib/python3.11/site-packages/libtpu/libtpu.so".into(),
        pjrt_api_major: 0,
        pjrt_api_minor: 115,
        package_versions: vec![
            KeyValue {
                key: "jax".into(),
                value: "0.10.2".into(),
            },
            KeyValue {
                key: "jaxlib".into(),
                value: "0.10.2".into(),
            },
        ],
        collector_version: "bench".into(),
        frontend: "jax".into(),
        role: "wrap".into(),
        ..Default::default()
    };
    let w = ok(TraceWriter::new(
        Vec::with_capacity(target_bytes + (4 << 20)),
        &manifest,
    ));
    let mut g = Gen {
        w,
        rng: XorShift(0x9e37_79b9_7f4a_7c15),
        t: start_mono_ns + 5_000_000,
        seq: 0,
        compiles: 0,
        buffer: 0,
    };
    put(
        &mut g.w,
        Record::Client(Box::new(Client {
            t_ns: g.t,
            thread: 21664,
            dur_ns: 900_000_000,
            platform_name: "tpu".into(),
            platform_version: "libtpu 0.0.52".into(),
            devices: (0..DEVICES as i32)
                .map(|id| DeviceInfo {
                    id,
                    kind: "TPU v5 lite".into(),
                    process_index: 0,
                    addressable: true,
                    debug_string: format!("TPU_{id}(process=0,({},{},0,0))", id % 2, id / 2),
                })
                .collect(),
            create_options: Vec::new(),
            client_id: 1,
        })),
    );
    g.t += 900_000_000;

    let jax = "/home/user/venv/lib/python3.11/site-packages/jax/_src";
    let user = "/home/user/project/train.py";
    let file = |f: &str| format!("{jax}/{f}");
    let (pxla, pjit, array, profiler, tb) = (
        file("interpreters/pxla.py"),
        file("pjit.py"),
        file("array.py"),
        file("profiler.py"),
        file("traceback_util.py"),
    );
    let compile_frames = |function: &str, line: u32| {
        frames(&[
            (&pxla, "_cached_compilation", 1516),
            (&pxla, "UnloadedMeshExecutable.from_hlo", 1733),
            (&pxla, "MeshComputation.compile", 1239),
            (&pjit, "_pjit_call_impl_python", 1175),
            (&pjit, "_run_python_pjit", 139),
            (&pjit, "_cpp_pjit.<locals>.cache_miss", 259),
            (
                &tb,
                "api_boundary.<locals>.reraise_with_filtered_traceback",
                195,
            ),
            (user, function, line),
            (user, "main", 151),
            (user, "<module>", 160),
        ])
    };
    let read_frames = |function: &str, line: u32| {
        frames(&[
            (&array, "ArrayImpl._value", 623),
            (&profiler, "annotate_function.<locals>.wrapper", 420),
            (&array, "ArrayImpl.__float__", 300),
            (user, function, line),
            (user, "main", 151),
            (user, "<module>", 160),
        ])
    };
    let train_compile = ok(g.w.intern_stack(&compile_frames("train_epoch", 88)));
    let augment_compile = ok(g.w.intern_stack(&compile_frames("train_epoch", 84)));
    let eval_compile = ok(g.w.intern_stack(&compile_frames("evaluate", 61)));
    let metrics_compile = ok(g.w.intern_stack(&compile_frames("train_epoch", 89)));
    let loss_read = ok(g.w.intern_stack(&read_frames("train_epoch", 90)));
    let log_read = ok(g.w.intern_stack(&read_frames("train_epoch", 97)));
    let eval_read = ok(g.w.intern_stack(&read_frames("evaluate", 64)));
    let train_sig = ok(g
        .w
        .intern_string("f32[1024,1024] f32[1024] f32[1024,10] f32[10] f32[128,1024] s32[128]"));
    let metrics_sig = ok(g.w.intern_string("f32[] f32[] s32[] f32[10]"));
    let eval_sig =
        ok(g.w.intern_string("f32[1024,1024] f32[1024] f32[1024,10] f32[10] f32[128,1024]"));
    let eval_mlir = patched(LR01_MLIR, consts.eval_mlir, 2.0);

    let mut step = 0u64;
    let (mut train_exe, mut augment_exe) = (0, 0);
    let metrics_exe = g.compile(
        "jit_update_metrics",
        metrics_compile,
        ("mlir", &patched(LR01_MLIR, consts.eval_mlir, 3.0)),
        ("hlo_with_config", AOT_OPT),
        0x1234,
    );
    let mut in_use = 6i64 << 30;
    let mut peak = in_use;
    while (g.w.bytes_written() as usize) < target_bytes {
        let epoch = step / STEPS_PER_EPOCH;
        if step.is_multiple_of(STEPS_PER_EPOCH) {
            if epoch > 0 {
                // Evaluation at the end of the epoch, with a freshly jitted eval step.
                let eval_exe = g.compile(
                    "jit_eval_step",
                    eval_compile,
                    ("mlir", &eval_mlir),
                    ("hlo_with_config", AOT_OPT),
                    0x792394a7e97ed4a9,
                );
                for _ in 0..EVAL_BATCHES {
                    for d in 0..DEVICES as i32 {
                        g.h2d(d, &[128, 1024], "f32");
                    }
                    let seq = g.execute(eval_exe, 5, eval_sig);
                    g.completions(seq, 3_000_000);
                    let stall = g.rng.around(2_500_000, 1_000_000);
                    g.read_scalar(eval_read, stall);
                }
            }
            // The learning rate decays each epoch; a Python float is a compile-time constant.
            let lr = 0.1 * 0.97f32.powi(epoch as i32);
            let mlir = patched(LR01_MLIR, consts.lr_mlir, lr);
            let opt = patched(LR01_OPT, consts.lr_opt, lr);
            let scale = 1.0 + epoch as f32 / 8.0;
            let aug_in = patched(TXLA_IN, consts.txla_in, scale);
            let aug_opt = patched(TXLA_OPT, consts.txla_opt, scale / 100.0);
            if epoch < 2 {
                for (f, b) in [("mlir", &mlir), ("hlo_with_config", &opt)] {
                    check_decodes(f, b);
                }
                for (f, b) in [("hlo", &aug_in), ("hlo_with_config", &aug_opt)] {
                    check_decodes(f, b);
                }
            }
            train_exe = g.compile(
                "jit_train_step",
                train_compile,
                ("mlir", &mlir),
                ("hlo_with_config", &opt),
                0x792394a7e97ed4a9,
            );
            augment_exe = g.compile(
                "jit_augment",
                augment_compile,
                ("hlo", &aug_in),
                ("hlo_with_config", &aug_opt),
                0x5a5a,
            );
        }
        step += 1;
        // The batch, sharded over the devices: images and labels.
        for d in 0..DEVICES as i32 {
            g.h2d(d, &[128, 1024], "f32");
        }
        for d in 0..DEVICES as i32 {
            g.h2d(d, &[128], "s32");
        }
        let seq = g.execute(augment_exe, 1, eval_sig);
        g.completions(seq, 2_000_000);
        let seq = g.execute(train_exe, 6, train_sig);
        let device_ns = g.rng.around(60_000_000, 20_000_000);
        g.completions(seq, device_ns);
        let seq = g.execute(metrics_exe, 4, metrics_sig);
        g.completions(seq, device_ns + 100_000);
        g.runtime_wait();
        g.read_scalar(loss_read, device_ns);
        if step.is_multiple_of(100) {
            let stall = g.rng.around(10_000, 20_000);
            g.read_scalar(log_read, stall);
        }
        g.t += g.rng.around(50_000, 100_000);
        put(
            &mut g.w,
            Record::Step(Step {
                t_ns: g.t,
                thread: 21664,
                marker: STEP_MARKER.into(),
                number: step,
            }),
        );
        if step.is_multiple_of(10) {
            // Slow growth with noise: an optimizer state kept alive across steps.
            in_use += (g.rng.next() % 8192) as i64 - 2048;
            peak = peak.max(in_use + (256 << 20));
            for d in 0..DEVICES as i32 {
                put(
                    &mut g.w,
                    Record::Memory(Box::new(Memory {
                        t_ns: g.t,
                        device: d,
                        origin: MemoryOrigin::PluginStats as i32,
                        bytes_in_use: in_use,
                        peak_bytes_in_use: Some(peak),
                        bytes_limit: Some(16 << 30),
                        num_allocs: Some(4000 + (g.rng.next() % 100) as i64),
                        largest_alloc_size: Some(1 << 28),
                        bytes_reserved: Some(0),
                        live_buffers: None,
                    })),
                );
            }
        }
        if step.is_multiple_of(1000) {
            put(
                &mut g.w,
                Record::Clock(Clock {
                    mono_ns: g.t,
                    wall_ns: 1_700_000_000_000_000_000 + (g.t - start_mono_ns),
                }),
            );
        }
    }
    let events = g.w.records_written();
    put(
        &mut g.w,
        Record::End(End {
            t_ns: g.t,
            events_written: events,
            dropped_total: 0,
        }),
    );
    Written {
        bytes: g.w.into_inner(),
        steps: step,
        compiles: g.compiles,
    }
}

/// `runs` timings of `f`: (best, median, last result). The result of a run is dropped after its
/// clock stops.
fn time<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, Duration, T) {
    let mut times = Vec::with_capacity(runs);
    let mut out = None;
    for _ in 0..runs {
        let start = Instant::now();
        let v = black_box(f());
        times.push(start.elapsed());
        out = Some(v);
    }
    times.sort();
    let out = out.unwrap_or_else(|| panic!("runs must be > 0"));
    (times[0], times[times.len() / 2], out)
}

fn analyze_one(trace: &Trace) -> Report {
    analyze(&[Input::new("train.tps", trace)])
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` (no argument) only gets a smoke run.
    let quick = !std::env::args().any(|a| a == "--bench");
    let mb: usize = std::env::var("TPUSCOPE_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 2 } else { 100 });
    let runs = if quick { 1 } else { 5 };

    let t0 = Instant::now();
    let written = training_trace(mb << 20);
    let gen_time = t0.elapsed();
    let bytes = &written.bytes;
    let mb_total = bytes.len() as f64 / 1e6;

    let (best_read, med_read, trace) = time(runs, || ok(read_trace(bytes)));
    assert_eq!(trace.completeness, Completeness::Complete);
    let n_events = trace.events.len();
    let blob_bytes: usize = trace.blobs.values().map(|b| b.data.len()).sum();
    let blob_share = blob_bytes as f64 / bytes.len() as f64;
    println!(
        "trace: {mb_total:.1} MB, {n_events} events, {} steps, {} compiles, {} blobs = {:.1} % of the bytes (generated in {gen_time:.2?})",
        written.steps,
        written.compiles,
        trace.blobs.len(),
        100.0 * blob_share,
    );

    let (best_an, med_an, report) = time(runs, || analyze_one(&trace));
    // The analyses saw what was written: otherwise the timing measures the wrong work.
    assert_eq!(report.steps.count, written.steps);
    assert_eq!(report.compiles.total, written.compiles);
    println!(
        "report: {} steps ({}), {} compiles in {} families, {} recompiles by cause {:?}, {} sync lines ({} syncs), {} runtime waits, {} HBM series",
        report.steps.count,
        report.steps.detected_by,
        report.compiles.total,
        report.compiles.families,
        report.compiles.recompiles,
        report.compiles.by_cause,
        report.syncs.len(),
        report.syncs.iter().map(|s| s.count).sum::<u64>(),
        report.runtime_waits,
        report.hbm.len(),
    );
    drop(report);
    drop(trace);

    let (best_both, med_both, both) = time(runs, || {
        let trace = ok(read_trace(bytes));
        let report = analyze_one(&trace);
        (trace, report)
    });
    drop(both);

    let line = |what: &str, best: Duration, median: Duration| {
        println!(
            "{what:<22} best {best:>9.3?} {:>6.0} MB/s {:>6.2} M events/s   median {median:>9.3?} {:>6.0} MB/s",
            mb_total / best.as_secs_f64(),
            n_events as f64 / 1e6 / best.as_secs_f64(),
            mb_total / median.as_secs_f64(),
        );
    };
    line("read_trace", best_read, med_read);
    line("analyze", best_an, med_an);
    line("read_trace + analyze", best_both, med_both);

    let mb_s = mb_total / best_both.as_secs_f64();
    let mev_s = n_events as f64 / 1e6 / best_both.as_secs_f64();
    let verdict = |pass: bool| match (quick, pass) {
        // A debug build of a small trace says nothing about the target.
        (true, _) => "smoke run, no verdict",
        (false, true) => "PASS",
        (false, false) => "FAIL",
    };
    println!(
        "target (decode + analysis, one core, blobs {:.1} % < 20 %): {} MB/s ≥ 100: {}; {:.2} M events/s ≥ 1: {}",
        100.0 * blob_share,
        mb_s.round(),
        verdict(mb_s >= 100.0 && blob_share < 0.2),
        mev_s,
        verdict(mev_s >= 1.0 && blob_share < 0.2),
    );
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average: {}", load.trim());
    }
}
