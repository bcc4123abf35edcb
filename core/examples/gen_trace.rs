//! Writes a synthetic training-loop trace of N event records for the benchmarks
//! (`scripts/bench/export.sh`, `scripts/bench/report.sh`): realistic variety, so that what is
//! measured is the real work of reading and explaining a long run.
//!
//! - a loop of steps of uneven length (3 to 12 launches each, a step marker at its end), each
//!   launch completed on 1 to 4 devices (the completion written a little later, sometimes
//!   before its launch, as the collector writes a fast one);
//! - host-to-device batches from a data-loader thread (2 to 8 per step, a few shapes);
//! - a host read every few steps from one of 300 call sites (a blocking read or a wait), with its
//!   Python stack;
//! - memory samples of every device every 4 steps, creeping up;
//! - with `--from SAMPLE.tps`, the sample's compiles with their real programs (input, optimized,
//!   options) recompiled every 500 steps under new executables, so graph families and their
//!   diffs are real; else a few compiles of a stand-in program.
//!
//! `cargo run --release -p tpuscope-core --example gen_trace -- EVENTS OUT.tps [--from SAMPLE.tps] [--host K]`
//! (`--host K`: host K of a job, `bench-host-K` in process slot K)

use std::collections::HashMap;
use std::io::BufWriter;
use std::process::ExitCode;
use std::sync::Arc;

use tpuscope_core::event::*;
use tpuscope_core::{RawStackEntry, Record, Trace, TraceWriter};

fn main() -> ExitCode {
    const USAGE: &str = "usage: gen_trace EVENTS OUT.tps [--from SAMPLE.tps] [--host K]";
    let args: Vec<String> = std::env::args().collect();
    let (Some(n), Some(out)) = (args.get(1).and_then(|n| n.parse::<u64>().ok()), args.get(2))
    else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let mut sample = None;
    let mut host = None;
    let mut rest = args.iter().skip(3);
    while let Some(flag) = rest.next() {
        match (flag.as_str(), rest.next()) {
            ("--from", Some(p)) => match tpuscope_core::read_trace_file(std::path::Path::new(p)) {
                Ok(t) => sample = Some(t),
                Err(e) => {
                    eprintln!("gen_trace: {}", e.line(std::path::Path::new(p)));
                    return ExitCode::FAILURE;
                }
            },
            // One host of a job: its own name and process slot, the job's clock and program.
            ("--host", Some(k)) if k.parse::<u32>().is_ok() => host = k.parse::<u32>().ok(),
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    match write(n, out, sample.as_ref(), host) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gen_trace: {out}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The loop's main thread, the data loader's, and the device count.
const MAIN: u32 = 7;
const LOADER: u32 = 9;
const DEVICES: u32 = 4;
/// Call sites of host reads.
const SYNC_SITES: usize = 300;
/// Steps between two recompiles of the sample's programs.
const RECOMPILE_EVERY: u64 = 500;

/// A compile to replay: the record with its stack and blobs in the new trace's terms.
struct Program {
    compile: Compile,
}

/// How often the collector flushes its trace (`collector/src/writer.rs`).
const FLUSH_NS: u64 = 50_000_000;

struct Gen<W: std::io::Write> {
    w: TraceWriter<W>,
    t: u64,
    seq: u64,
    step: u64,
    x: u64,
    written: u64,
    n: u64,
    /// The trace time of the last flush: flushed as the collector does, every 50 ms, so its
    /// packs (format 1.2) are the size a real run's are.
    flushed_at: u64,
}

impl<W: std::io::Write> Gen<W> {
    fn rand(&mut self) -> u64 {
        self.x ^= self.x << 13;
        self.x ^= self.x >> 7;
        self.x ^= self.x << 17;
        self.x
    }

    fn event(&mut self, r: &Record) -> std::io::Result<()> {
        self.written += 1;
        self.w.write(r)?;
        if self.t >= self.flushed_at + FLUSH_NS {
            self.flushed_at = self.t;
            self.w.flush()?;
        }
        Ok(())
    }

    fn done(&self) -> bool {
        self.written >= self.n
    }
}

fn frames(file: &str, function: &str, line: u32) -> Vec<RawStackEntry> {
    vec![
        RawStackEntry {
            file: Arc::from(file),
            function: Arc::from(function),
            line,
        },
        RawStackEntry {
            file: Arc::from("/src/train.py"),
            function: Arc::from("main"),
            line: 88,
        },
    ]
}

/// The sample's compiles, their stacks and blobs written into `w`.
fn programs<W: std::io::Write>(
    w: &mut TraceWriter<W>,
    sample: &Trace,
) -> std::io::Result<Vec<Program>> {
    let mut stacks: HashMap<u32, u32> = HashMap::new();
    let mut out = Vec::new();
    for r in &sample.events {
        let Record::Compile(c) = r else { continue };
        let mut c = (**c).clone();
        for h in [c.program_hash, c.optimized_hash, c.options_hash] {
            if let Some(b) = sample.blobs.get(&h) {
                w.put_blob_hashed(h, &b.role, &b.format, &b.data)?;
            }
        }
        let id = match stacks.get(&c.stack) {
            Some(&id) => id,
            None => {
                let raw: Vec<RawStackEntry> = sample
                    .stacks
                    .get(&c.stack)
                    .map(|s| {
                        s.frames
                            .iter()
                            .map(|f| RawStackEntry {
                                file: Arc::from(sample.string(f.file)),
                                function: Arc::from(sample.string(f.function)),
                                line: f.line,
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let id = w.intern_stack(&raw)?;
                stacks.insert(c.stack, id);
                id
            }
        };
        c.stack = id;
        c.thread = MAIN;
        out.push(Program { compile: c });
    }
    Ok(out)
}

/// A stand-in program when no sample is given.
fn stand_in<W: std::io::Write>(w: &mut TraceWriter<W>, k: u64) -> std::io::Result<Program> {
    let data = format!("module @jit_train_step_{k} {{ func.func public @main() {{ }} }}");
    let h = w.put_blob("input_program", "mlir", data.as_bytes())?;
    let stack = w.intern_stack(&frames("/src/model.py", "forward", 120))?;
    Ok(Program {
        compile: Compile {
            thread: MAIN,
            dur_ns: 40_000_000,
            api: "PJRT_Client_Compile".into(),
            program_format: "mlir".into(),
            program_size: data.len() as u64,
            program_hash: h,
            executable_name: format!("jit_train_step_{k}"),
            stack,
            num_outputs: 3,
            num_devices: DEVICES,
            ..Default::default()
        },
    })
}

#[expect(
    clippy::too_many_lines,
    reason = "a synthetic workload written as one script, step by step"
)]
fn write(n: u64, out: &str, sample: Option<&Trace>, host: Option<u32>) -> std::io::Result<()> {
    let manifest = Manifest {
        pid: 4242,
        host: host.map_or_else(|| "bench-host".into(), |k| format!("bench-host-{k}")),
        process_index: host.unwrap_or(0),
        job_id: if host.is_some() {
            "bench-job".into()
        } else {
            String::new()
        },
        start_mono_ns: 1_000_000,
        start_wall_ns: 1_700_000_000_000_000_000,
        command_line: vec!["python".into(), "train.py".into()],
        collector_version: "bench".into(),
        ..Default::default()
    };
    let file = BufWriter::with_capacity(1 << 20, std::fs::File::create(out)?);
    let mut g = Gen {
        w: TraceWriter::new(file, &manifest)?.packed(),
        t: 2_000_000,
        seq: 0,
        step: 0,
        x: 0x9e37_79b9_7f4a_7c15,
        written: 0,
        n,
        flushed_at: 0,
    };
    g.event(&Record::Client(Box::new(Client {
        t_ns: g.t,
        thread: MAIN,
        dur_ns: 1_000_000,
        platform_name: "cpu".into(),
        devices: (0..DEVICES as i32)
            .map(|i| DeviceInfo {
                id: i,
                kind: "cpu".into(),
                addressable: true,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })))?;
    let mut progs = match sample {
        Some(s) => programs(&mut g.w, s)?,
        None => Vec::new(),
    };
    if progs.is_empty() {
        for k in 0..4 {
            progs.push(stand_in(&mut g.w, k)?);
        }
    }
    let sites: Vec<u32> = (0..SYNC_SITES)
        .map(|k| {
            g.w.intern_stack(&frames(
                &format!("/src/loop_{}.py", k % 30),
                "train_step",
                10 + k as u32,
            ))
        })
        .collect::<std::io::Result<_>>()?;
    let sig = g.w.intern_string("f32[128,1024] bf16[1024,1024] s32[]")?;
    let shapes: [(&str, Vec<i64>); 3] = [
        ("s32", vec![32, 512]),
        ("f32", vec![32, 512, 8]),
        ("bf16", vec![32, 1024]),
    ];
    // The executables launched now: one per program of the latest round of compiles.
    let mut live: Vec<u64> = Vec::new();
    let mut next_id = 0x7f00_0000u64;
    let mut in_use = vec![1i64 << 28; DEVICES as usize];
    while !g.done() {
        if g.step.is_multiple_of(RECOMPILE_EVERY) {
            live.clear();
            for p in &progs {
                g.t += 30_000_000;
                let mut c = p.compile.clone();
                c.t_ns = g.t;
                c.executable_id = next_id;
                live.push(next_id);
                next_id += 1;
                g.event(&Record::Compile(Box::new(c)))?;
            }
        }
        // The data loader's batch for this step.
        for _ in 0..2 + g.rand() % 7 {
            let (dtype, dims) = &shapes[(g.rand() % 3) as usize];
            g.t += 2_000 + g.rand() % 10_000;
            let t = g.t;
            g.event(&Record::Transfer(Box::new(Transfer {
                t_ns: t,
                thread: LOADER,
                dur_ns: 20_000,
                direction: Direction::H2d as i32,
                api: "PJRT_Client_BufferFromHostBuffer".into(),
                bytes: 65_536,
                dims: dims.clone(),
                dtype: (*dtype).into(),
                device: (t % u64::from(DEVICES)) as i32,
                ..Default::default()
            })))?;
        }
        for _ in 0..3 + g.rand() % 10 {
            g.t += 5_000 + g.rand() % 40_000;
            g.seq += 1;
            let exe = live[(g.rand() % live.len() as u64) as usize];
            let launch = Record::Execute(Execute {
                t_ns: g.t,
                thread: MAIN,
                dur_ns: 20_000 + g.rand() % 50_000,
                executable_id: exe,
                num_devices: DEVICES,
                num_args: 5,
                arg_signature: sig,
                seq: g.seq,
                error: None,
                completion_tracked: true,
            });
            // A fast launch completes before its execute hook records it.
            let early = g.rand().is_multiple_of(16);
            if !early {
                g.event(&launch)?;
            }
            for d in 0..1 + g.rand() % u64::from(DEVICES) {
                let t = g.t + 200_000 + g.rand() % 800_000;
                let seq = g.seq;
                g.event(&Record::ExecuteComplete(ExecuteComplete {
                    t_ns: t,
                    seq,
                    device_index: d as u32,
                    error: None,
                }))?;
            }
            if early {
                g.event(&launch)?;
            }
        }
        if g.rand().is_multiple_of(5) {
            // A host read from one of the call sites: a blocking read, or a wait.
            let stack = sites[(g.rand() % SYNC_SITES as u64) as usize];
            g.t += 100_000 + g.rand() % 2_000_000;
            let t = g.t;
            let r = if g.rand().is_multiple_of(3) {
                Record::Sync(Sync {
                    t_ns: t,
                    thread: MAIN,
                    dur_ns: 300_000,
                    reason: "block_until_ready".into(),
                    buffer_id: t,
                    stack,
                })
            } else {
                Record::Transfer(Box::new(Transfer {
                    t_ns: t,
                    thread: MAIN,
                    dur_ns: 400_000,
                    direction: Direction::D2h as i32,
                    api: "PJRT_Buffer_ToHostBuffer".into(),
                    bytes: 4,
                    dims: Vec::new(),
                    dtype: "f32".into(),
                    sync: true,
                    blocked_ns: 350_000,
                    stack,
                    ..Default::default()
                }))
            };
            g.event(&r)?;
        }
        if g.step.is_multiple_of(4) {
            for d in 0..DEVICES {
                let grow = (g.rand() % 4096) as i64;
                let used = &mut in_use[d as usize];
                *used += grow;
                let (t, bytes) = (g.t, *used);
                g.event(&Record::Memory(Box::new(Memory {
                    t_ns: t,
                    device: d as i32,
                    bytes_in_use: bytes,
                    peak_bytes_in_use: Some(bytes),
                    bytes_limit: Some(16 << 30),
                    ..Default::default()
                })))?;
            }
        }
        g.step += 1;
        g.t += 50_000 + g.rand() % 3_000_000;
        let (t, number) = (g.t, g.step);
        g.event(&Record::Step(Step {
            t_ns: t,
            thread: MAIN,
            marker: "train_step".into(),
            number,
        }))?;
    }
    let (t, written) = (g.t + 1, g.written);
    g.w.write(&Record::End(End {
        t_ns: t,
        events_written: written,
        dropped_total: 0,
    }))?;
    g.w.flush()?;
    Ok(())
}
