//! Writes a synthetic training-loop trace of N event records (for the export benchmark,
//! `scripts/bench/export.sh`): a few compiles with a program blob and a Python stack, then
//! executes with their device completions, transfers (some host syncs), memory samples and
//! step markers, on realistic clocks.
//!
//! `cargo run --release -p tpuscope-core --example gen_trace -- EVENTS OUT.tps`

use std::io::BufWriter;
use std::process::ExitCode;

use tpuscope_core::event::*;
use tpuscope_core::{RawStackEntry, Record, TraceWriter};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(n), Some(out)) = (args.get(1).and_then(|n| n.parse::<u64>().ok()), args.get(2))
    else {
        eprintln!("usage: gen_trace EVENTS OUT.tps");
        return ExitCode::from(2);
    };
    match write(n, out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gen_trace: {out}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "a synthetic workload written as one script, step by step"
)]
fn write(n: u64, out: &str) -> std::io::Result<()> {
    let manifest = Manifest {
        pid: 4242,
        host: "bench-host".into(),
        start_mono_ns: 1_000_000,
        start_wall_ns: 1_700_000_000_000_000_000,
        command_line: vec!["python".into(), "train.py".into()],
        collector_version: "bench".into(),
        ..Default::default()
    };
    let file = BufWriter::with_capacity(1 << 20, std::fs::File::create(out)?);
    let mut w = TraceWriter::new(file, &manifest)?;
    let stack = w.intern_stack(&[
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
    ])?;
    let sig = w.intern_string("f32[128,1024] bf16[1024,1024] s32[]")?;
    let mut t = 2_000_000u64;
    let mut written = 0u64;
    let rec = |w: &mut TraceWriter<_>, r: Record| w.write(&r);
    w.write(&Record::Client(Box::new(Client {
        t_ns: t,
        thread: 7,
        dur_ns: 1_000_000,
        platform_name: "cpu".into(),
        devices: (0..4)
            .map(|i| DeviceInfo {
                id: i,
                kind: "cpu".into(),
                addressable: true,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    })))?;
    let programs = 4u64;
    for p in 0..programs {
        let data = format!("module @jit_train_step_{p} {{ func.func public @main() {{ }} }}");
        let h = w.put_blob("input_program", "mlir", data.as_bytes())?;
        t += 50_000_000;
        written += 1;
        rec(
            &mut w,
            Record::Compile(Box::new(Compile {
                t_ns: t,
                thread: 7,
                dur_ns: 40_000_000,
                api: "PJRT_Client_Compile".into(),
                program_format: "mlir".into(),
                program_size: data.len() as u64,
                program_hash: h,
                executable_name: format!("jit_train_step_{p}"),
                stack,
                executable_id: 0x7f00_0000 + p,
                num_outputs: 3,
                num_devices: 4,
                ..Default::default()
            })),
        )?;
    }
    let mut seq = 0u64;
    let mut step = 0u64;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while written < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        t += 1_000 + x % 20_000;
        let r = match x % 16 {
            0..=6 => {
                seq += 1;
                Record::Execute(Execute {
                    t_ns: t,
                    thread: 7,
                    dur_ns: 20_000 + x % 50_000,
                    executable_id: 0x7f00_0000 + (x >> 8) % programs,
                    num_devices: 1,
                    num_args: 5,
                    arg_signature: sig,
                    seq,
                    error: None,
                    completion_tracked: true,
                })
            }
            7..=12 => Record::ExecuteComplete(ExecuteComplete {
                t_ns: t + 300_000,
                seq: seq.max(1),
                device_index: ((x >> 16) % 4) as u32,
                error: None,
            }),
            13 => Record::Transfer(Box::new(Transfer {
                t_ns: t,
                thread: 7,
                dur_ns: 5_000,
                direction: Direction::D2h as i32,
                api: "PJRT_Buffer_ToHostBuffer".into(),
                bytes: 4096,
                dims: vec![32, 32],
                dtype: "f32".into(),
                sync: x.is_multiple_of(3),
                blocked_ns: 4_000,
                stack,
                ..Default::default()
            })),
            14 => Record::Memory(Box::new(Memory {
                t_ns: t,
                device: ((x >> 20) % 4) as i32,
                bytes_in_use: (x % (1 << 30)) as i64,
                ..Default::default()
            })),
            _ => {
                step += 1;
                Record::Step(Step {
                    t_ns: t,
                    thread: 7,
                    marker: "train_step".into(),
                    number: step,
                })
            }
        };
        written += 1;
        rec(&mut w, r)?;
    }
    w.write(&Record::End(End {
        t_ns: t + 1,
        events_written: written,
        dropped_total: 0,
    }))?;
    w.flush()?;
    Ok(())
}
