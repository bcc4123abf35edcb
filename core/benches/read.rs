//! Decode throughput of `read_trace`, and the cost of resynchronising through damage.
//!
//! `cargo bench -p tpuscope-core --bench read` (plain `harness = false` main: criterion's build is
//! too slow for a 2-core machine). `TPUSCOPE_BENCH_MB` sets the size of the generated trace
//! (default 100), `TPUSCOPE_BENCH_ADV_MB` the size of the adversarial input (default 16).
//! Prints MB/s and events/s, single thread, best of 3, for: a clean trace (full decode, and the
//! frame layer alone), the same with a 1 KB hole in the middle, 64 MB of random bytes after a
//! valid header, and a plausible frame header every 12 bytes (the worst case for resync).

use std::hint::black_box;
use std::time::{Duration, Instant};

use tpuscope_core::event::*;
use tpuscope_core::format;
use tpuscope_core::reader::{FrameItem, FrameIter};
use tpuscope_core::{Completeness, RawStackEntry, Record, TraceWriter, read_trace};

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

/// A trace shaped like a training loop: a few compiles with their programs (blobs), then mostly
/// executes, completions and transfers, with a memory sample, step and clock now and then.
#[expect(
    clippy::too_many_lines,
    reason = "one benchmark table: each row a read path on the same generated file"
)]
fn realistic_trace(target_bytes: usize) -> Vec<u8> {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let manifest = Manifest {
        pid: 1234,
        host: "bench-host".into(),
        command_line: vec!["python".into(), "train.py".into()],
        collector_version: "bench".into(),
        ..Default::default()
    };
    let mut w = TraceWriter::new(Vec::with_capacity(target_bytes + (1 << 20)), &manifest)
        .unwrap_or_else(|e| panic!("writer: {e}"));
    let stack = w
        .intern_stack(&[
            RawStackEntry {
                file: "/src/model.py".into(),
                function: "forward".into(),
                line: 120,
            },
            RawStackEntry {
                file: "/src/train.py".into(),
                function: "train_step".into(),
                line: 44,
            },
        ])
        .unwrap_or_else(|e| panic!("{e}"));
    let sigs: Vec<u32> = (0..8)
        .map(|i| {
            w.intern_string(&format!("f32[{},1024] bf16[1024,1024] s32[]", 8 << i))
                .unwrap_or_else(|e| panic!("{e}"))
        })
        .collect();
    // Blobs: about 12 % of the bytes, as a handful of large programs spread over the run.
    let blob_budget = target_bytes / 8;
    let n_programs = 24;
    let mut seq = 0u64;
    let mut t = 1_000_000u64;
    let mut step = 0u64;
    let mut programs_done = 0;
    while (w.bytes_written() as usize) < target_bytes {
        let phase = w.bytes_written() as usize * n_programs / target_bytes.max(1);
        if programs_done <= phase && programs_done < n_programs {
            let mut data = vec![0u8; blob_budget / n_programs];
            for chunk in data.chunks_mut(8) {
                let v = rng.next().to_le_bytes();
                chunk.copy_from_slice(&v[..chunk.len()]);
            }
            let h = w
                .put_blob("input_program", "mlir", &data)
                .unwrap_or_else(|e| panic!("{e}"));
            w.write(&Record::Compile(Box::new(Compile {
                t_ns: t,
                thread: 7,
                dur_ns: 2_000_000_000,
                api: "PJRT_Client_Compile".into(),
                program_format: "mlir".into(),
                program_size: data.len() as u64,
                program_hash: h,
                executable_name: format!("jit_train_step_{programs_done}"),
                fingerprint: format!("{h:016x}"),
                stack,
                executable_id: 0x7f00_0000 + programs_done as u64,
                num_outputs: 3,
                num_devices: 1,
                ..Default::default()
            })))
            .unwrap_or_else(|e| panic!("{e}"));
            programs_done += 1;
        }
        let exe = 0x7f00_0000 + (programs_done.max(1) - 1) as u64;
        for _ in 0..64 {
            t += 1000 + rng.next() % 5000;
            seq += 1;
            let r = rng.next();
            let rec = match r % 10 {
                0..=4 => Record::Execute(Execute {
                    t_ns: t,
                    thread: 7,
                    dur_ns: 20_000 + r % 100_000,
                    executable_id: exe,
                    num_devices: 1,
                    num_args: 5,
                    arg_signature: sigs[(r >> 8) as usize % sigs.len()],
                    seq,
                    error: None,
                    completion_tracked: true,
                }),
                5..=6 => Record::ExecuteComplete(ExecuteComplete {
                    t_ns: t + 300_000,
                    seq,
                    device_index: 0,
                    error: None,
                }),
                7..=8 => Record::Transfer(Box::new(Transfer {
                    t_ns: t,
                    thread: 7,
                    dur_ns: 5_000 + r % 50_000,
                    direction: if r & 1 == 0 {
                        Direction::H2d as i32
                    } else {
                        Direction::D2h as i32
                    },
                    api: if r & 1 == 0 {
                        "PJRT_Client_BufferFromHostBuffer".into()
                    } else {
                        "PJRT_Buffer_ToHostBuffer".into()
                    },
                    bytes: 4 * 8 * 1024,
                    dims: vec![8, 1024],
                    dtype: "f32".into(),
                    device: 0,
                    sync: r & 1 == 1,
                    blocked_ns: 0,
                    stack,
                    buffer_id: r >> 16,
                    error: None,
                })),
                _ => Record::Memory(Box::new(Memory {
                    t_ns: t,
                    device: 0,
                    origin: MemoryOrigin::LiveBuffers as i32,
                    bytes_in_use: (r % (1 << 30)) as i64,
                    live_buffers: Some((r % 1000) as i64),
                    ..Default::default()
                })),
            };
            w.write(&rec).unwrap_or_else(|e| panic!("{e}"));
        }
        step += 1;
        w.write(&Record::Step(Step {
            t_ns: t,
            thread: 7,
            marker: "jit_loop".into(),
            number: step,
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        if step.is_multiple_of(1000) {
            w.write(&Record::Clock(Clock {
                mono_ns: t,
                wall_ns: 1_700_000_000_000_000_000 + t,
            }))
            .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let events = w.records_written();
    w.write(&Record::End(End {
        t_ns: t,
        events_written: events,
        dropped_total: 0,
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    w.into_inner()
}

/// Best of `runs` timings of `f`.
fn best<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut out = None;
    for _ in 0..runs {
        let start = Instant::now();
        let v = black_box(f());
        best = best.min(start.elapsed());
        out = Some(v);
    }
    (best, out.unwrap_or_else(|| panic!("runs must be > 0")))
}

fn mb_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / 1e6 / d.as_secs_f64()
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` (no argument) only gets a smoke run.
    let quick = !std::env::args().any(|a| a == "--bench");
    let mb: usize = std::env::var("TPUSCOPE_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 2 } else { 100 });
    let runs = if quick { 1 } else { 3 };

    let t0 = Instant::now();
    let bytes = realistic_trace(mb << 20);
    let gen_time = t0.elapsed();
    let (d, trace) = best(runs, || {
        read_trace(&bytes).unwrap_or_else(|e| panic!("{e}"))
    });
    let n_events = trace.events.len();
    let blob_bytes: usize = trace.blobs.values().map(|b| b.data.len()).sum();
    assert_eq!(trace.completeness, Completeness::Complete);
    println!(
        "trace: {:.1} MB, {} events, {:.1} % blob bytes (generated in {:.2?})",
        bytes.len() as f64 / 1e6,
        n_events,
        100.0 * blob_bytes as f64 / bytes.len() as f64,
        gen_time
    );
    println!(
        "read_trace: {:.3?}  {:.0} MB/s  {:.2} M events/s",
        d,
        mb_s(bytes.len(), d),
        n_events as f64 / 1e6 / d.as_secs_f64()
    );
    drop(trace);

    let (d, frames) = best(runs, || {
        FrameIter::new(&bytes, format::HEADER_LEN)
            .filter(|i| matches!(i, FrameItem::Frame(_)))
            .count()
    });
    println!(
        "frames only (CRC, no decode): {:.3?}  {:.0} MB/s  {:.2} M frames/s",
        d,
        mb_s(bytes.len(), d),
        frames as f64 / 1e6 / d.as_secs_f64()
    );

    // A 1 KB hole of random bytes in the middle.
    let mut holed = bytes.clone();
    let mid = holed.len() / 2;
    let mut rng = XorShift(42);
    for b in &mut holed[mid..mid + 1024] {
        *b = rng.next() as u8;
    }
    let (d, t) = best(runs, || {
        read_trace(&holed).unwrap_or_else(|e| panic!("{e}"))
    });
    println!(
        "1 KB hole in the middle: {:.3?}  {:.0} MB/s  damage {:?}  events {}",
        d,
        mb_s(holed.len(), d),
        t.damage,
        t.events.len()
    );
    drop((holed, t));

    // Random garbage after a valid header.
    let garbage_mb = if quick { 2 } else { 64 };
    let mut garbage = format::encode_header(format::FORMAT_MAJOR, format::FORMAT_MINOR).to_vec();
    let mut rng = XorShift(7);
    garbage.reserve(garbage_mb << 20);
    for _ in 0..(garbage_mb << 20) / 8 {
        garbage.extend_from_slice(&rng.next().to_le_bytes());
    }
    let (d, t) = best(runs, || {
        read_trace(&garbage).unwrap_or_else(|e| panic!("{e}"))
    });
    println!(
        "{garbage_mb} MB random garbage: {:.3?}  {:.0} MB/s  events {} damage {} completeness {:?}",
        d,
        mb_s(garbage.len(), d),
        t.events.len(),
        t.damage.len(),
        t.completeness
    );
    drop((garbage, t));

    // Adversarial garbage: a plausible frame header (known kind, flags 0, a length that fits)
    // every 12 bytes, none with a valid CRC. A naive resync checks a long CRC at each one.
    let adv_mb: usize = std::env::var("TPUSCOPE_BENCH_ADV_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 1 } else { 16 });
    let mut adv = format::encode_header(format::FORMAT_MAJOR, format::FORMAT_MINOR).to_vec();
    while adv.len() < (adv_mb << 20) {
        adv.extend_from_slice(&((adv_mb << 19) as u32).to_le_bytes());
        adv.extend_from_slice(&(RecordKind::Execute as u16).to_le_bytes());
        adv.extend_from_slice(&0u16.to_le_bytes());
        adv.extend_from_slice(&0u32.to_le_bytes());
    }
    let (d, t) = best(1, || read_trace(&adv).unwrap_or_else(|e| panic!("{e}")));
    println!(
        "{adv_mb} MB adversarial headers: {:.3?}  {:.0} MB/s  events {} completeness {:?}",
        d,
        mb_s(adv.len(), d),
        t.events.len(),
        t.completeness
    );
}
