//! Deterministic generator of the golden traces in `sample_traces/golden/`.
//!
//! The committed files are the reference: they are never regenerated once a format version is
//! released (see `docs/trace-format.md`, "Golden files"). The generator is kept so that a test can
//! prove that today's writer still produces exactly those bytes, and so that a new minor can add a
//! new golden file next to the old ones. Regenerate (only for a new file!) with
//! `TPUSCOPE_REGEN_GOLDEN=1 cargo test -p tpuscope-core --test golden`.

// Every literal ends in `..Default::default()` so that fields added by later minors stay at
// their defaults (which encode to nothing) and the 1.0 bytes do not change.
#![allow(clippy::needless_update)]

use std::path::PathBuf;

use tpuscope_core::event::*;
use tpuscope_core::format;
use tpuscope_core::{RawStackEntry, Record, TraceWriter};

pub const ALL_KINDS: &str = "v1.0-all-kinds.tps";
pub const UNKNOWN_KIND: &str = "v1.0-unknown-kind.tps";
pub const NEWER_MAJOR: &str = "v2.0-newer-major.tps";
pub const PACKED: &str = "v1.2-packed.tps";

/// The kind number of the unknown frame in [`unknown_kind`]: never to be assigned.
pub const UNKNOWN_KIND_NUMBER: u16 = 999;

/// `sample_traces/golden/` of this repository.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/golden")
}

/// The committed bytes of a golden file.
pub fn committed(name: &str) -> Vec<u8> {
    let path = dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: value.into(),
        ..Default::default()
    }
}

pub fn manifest() -> Manifest {
    Manifest {
        pid: 4242,
        host: "golden-host".into(),
        start_wall_ns: 1_700_000_000_123_456_789,
        start_mono_ns: 1_000_000_000,
        command_line: vec!["python".into(), "train.py".into(), "--steps=3".into()],
        plugin_path: "/opt/pjrt/pjrt_c_api_cpu_plugin.so".into(),
        pjrt_api_major: 0,
        pjrt_api_minor: 115,
        plugin_attributes: vec![
            kv("xla_version", "2"),
            kv("stablehlo_current_version", "1.9.0"),
        ],
        package_versions: vec![kv("jax", "0.7.0"), kv("jaxlib", "0.7.0")],
        environment: vec![
            kv("XLA_FLAGS", "--xla_dump_to=/tmp/x"),
            kv("TPUSCOPE_OUT", "/tmp/t"),
        ],
        collector_version: "0.1.0".into(),
        job_id: "job-7".into(),
        process_index: 0,
        frontend: "jax".into(),
        role: "wrap".into(),
        ..Default::default()
    }
}

fn err(code: i32, message: &str) -> Option<ErrorInfo> {
    Some(ErrorInfo {
        code,
        message: message.into(),
        ..Default::default()
    })
}

/// Writes every kind of the v1.0 event model, one or more records each. Returns the
/// writer so that callers can append more before the end record.
fn all_kinds_body() -> TraceWriter<Vec<u8>> {
    all_kinds_into(
        TraceWriter::with_version(Vec::new(), &manifest(), 1, 0).unwrap_or_else(|e| panic!("{e}")),
    )
}

/// [`all_kinds_body`]'s records, written by `w`.
#[expect(
    clippy::too_many_lines,
    reason = "writes one record of every kind in format order: one list, read top to bottom"
)]
fn all_kinds_into(mut w: TraceWriter<Vec<u8>>) -> TraceWriter<Vec<u8>> {
    let ok = |r: std::io::Result<u32>| r.unwrap_or_else(|e| panic!("{e}"));
    let put =
        |w: &mut TraceWriter<Vec<u8>>, r: Record| w.write(&r).unwrap_or_else(|e| panic!("{e}"));

    put(
        &mut w,
        Record::Client(Box::new(Client {
            t_ns: 1_000_100_000,
            thread: 11,
            dur_ns: 5_000_000,
            platform_name: "cpu".into(),
            platform_version: "cpu 0.115".into(),
            devices: vec![
                DeviceInfo {
                    id: 0,
                    kind: "cpu".into(),
                    process_index: 0,
                    addressable: true,
                    debug_string: "TFRT_CPU_0".into(),
                    ..Default::default()
                },
                DeviceInfo {
                    id: 1,
                    kind: "cpu".into(),
                    process_index: 0,
                    addressable: true,
                    debug_string: "TFRT_CPU_1".into(),
                    ..Default::default()
                },
            ],
            create_options: vec![kv("cpu_device_count", "2")],
            client_id: 0x5555_0001,
            ..Default::default()
        })),
    );
    let train = [
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
    ];
    let stack_train = ok(w.intern_stack(&train));
    let stack_eval = ok(w.intern_stack(&[RawStackEntry {
        file: "/src/train.py".into(),
        function: "evaluate".into(),
        line: 80,
    }]));
    // Interning the same stack again must not write a second definition.
    assert_eq!(ok(w.intern_stack(&train)), stack_train);
    let program: &[u8] = b"module @jit_train_step { func.func public @main() { return } }";
    let options: &[u8] = b"\x0a\x04opts";
    let optimized: &[u8] = b"HloModule jit_train_step, entry_computation_layout={()->()}";
    let program_hash = w
        .put_blob("input_program", "mlir", program)
        .unwrap_or_else(|e| panic!("{e}"));
    let options_hash = w
        .put_blob("compile_options", "", options)
        .unwrap_or_else(|e| panic!("{e}"));
    let optimized_hash = w
        .put_blob("optimized_program", "hlo", optimized)
        .unwrap_or_else(|e| panic!("{e}"));
    // Stored once per content.
    let again = w
        .put_blob("input_program", "mlir", program)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again, program_hash);

    put(
        &mut w,
        Record::Compile(Box::new(Compile {
            t_ns: 1_001_000_000,
            thread: 11,
            dur_ns: 250_000_000,
            api: "PJRT_Client_Compile".into(),
            program_format: "mlir".into(),
            program_size: program.len() as u64,
            program_hash,
            options_hash,
            executable_name: "jit_train_step".into(),
            fingerprint: "fp-0123456789abcdef".into(),
            optimized_hash,
            optimized_format: "hlo".into(),
            memory: Some(CompiledMemoryStats {
                generated_code_size: 4096,
                argument_size: 1 << 20,
                output_size: 1 << 19,
                alias_size: 0,
                temp_size: 1 << 18,
                host_generated_code_size: 0,
                host_argument_size: 0,
                host_output_size: 0,
                host_alias_size: 0,
                host_temp_size: 0,
                peak_memory: 3 << 19,
                ..Default::default()
            }),
            error: None,
            stack: stack_train,
            executable_id: 0xE1,
            num_outputs: 2,
            num_devices: 2,
            ..Default::default()
        })),
    );
    put(
        &mut w,
        Record::Compile(Box::new(Compile {
            t_ns: 1_002_000_000,
            thread: 11,
            dur_ns: 1_000_000,
            api: "PJRT_Compile".into(),
            program_format: "mlir".into(),
            program_size: program.len() as u64,
            program_hash,
            options_hash,
            error: err(3, "INVALID_ARGUMENT: bad sharding"),
            stack: stack_eval,
            ..Default::default()
        })),
    );
    put(
        &mut w,
        Record::Load(Box::new(Load {
            t_ns: 1_003_000_000,
            thread: 11,
            dur_ns: 2_000_000,
            executable_id: 0xE2,
            executable_name: "jit_eval".into(),
            error: None,
            stack: stack_eval,
            ..Default::default()
        })),
    );
    let sig = ok(w.intern_string("f32[8,128] s32[]"));
    for (i, seq) in [1u64, 2].into_iter().enumerate() {
        put(
            &mut w,
            Record::Execute(Execute {
                t_ns: 1_010_000_000 + i as u64 * 1_000_000,
                thread: 11,
                dur_ns: 40_000,
                executable_id: 0xE1,
                num_devices: 2,
                num_args: 2,
                arg_signature: sig,
                seq,
                error: None,
                completion_tracked: true,
                ..Default::default()
            }),
        );
    }
    put(
        &mut w,
        Record::ExecuteComplete(ExecuteComplete {
            t_ns: 1_010_500_000,
            seq: 1,
            device_index: 0,
            error: None,
            ..Default::default()
        }),
    );
    put(
        &mut w,
        Record::ExecuteComplete(ExecuteComplete {
            t_ns: 1_011_500_000,
            seq: 2,
            device_index: 1,
            error: err(13, "INTERNAL: device lost"),
            ..Default::default()
        }),
    );
    put(
        &mut w,
        Record::ExecuteSummary(ExecuteSummary {
            t_start_ns: 1_020_000_000,
            t_end_ns: 1_030_000_000,
            executable_id: 0xE1,
            count: 1000,
            total_dur_ns: 40_000_000,
            errors: 1,
            ..Default::default()
        }),
    );
    put(
        &mut w,
        Record::Transfer(Box::new(Transfer {
            t_ns: 1_005_000_000,
            thread: 11,
            dur_ns: 30_000,
            direction: Direction::H2d as i32,
            api: "PJRT_Client_BufferFromHostBuffer".into(),
            bytes: 4096,
            dims: vec![8, 128],
            dtype: "f32".into(),
            device: 0,
            sync: false,
            blocked_ns: 0,
            stack: stack_train,
            buffer_id: 0xB1,
            error: None,
            ..Default::default()
        })),
    );
    put(
        &mut w,
        Record::Transfer(Box::new(Transfer {
            t_ns: 1_031_000_000,
            thread: 11,
            dur_ns: 90_000,
            direction: Direction::D2h as i32,
            api: "PJRT_Buffer_ToHostBuffer".into(),
            bytes: 4,
            dims: vec![],
            dtype: "s32".into(),
            device: 1,
            sync: true,
            blocked_ns: 85_000,
            stack: stack_train,
            buffer_id: 0xB2,
            error: None,
            ..Default::default()
        })),
    );
    put(
        &mut w,
        Record::Sync(Sync {
            t_ns: 1_032_000_000,
            thread: 11,
            dur_ns: 70_000,
            reason: "PJRT_Event_Await".into(),
            buffer_id: 0xB2,
            stack: stack_train,
            ..Default::default()
        }),
    );
    put(
        &mut w,
        Record::CacheStore(Box::new(CacheStore {
            t_ns: 1_033_000_000,
            thread: 11,
            dur_ns: 3_000_000,
            executable_id: 0xE1,
            executable_name: "jit_train_step".into(),
            bytes: 65536,
            error: None,
            serialized_hash: 0x1122_3344_5566_7788,
            ..Default::default()
        })),
    );
    put(
        &mut w,
        Record::CacheLoad(Box::new(CacheLoad {
            t_ns: 1_034_000_000,
            thread: 11,
            dur_ns: 4_000_000,
            bytes: 65536,
            ok: true,
            error: None,
            executable_id: 0xE3,
            executable_name: "jit_train_step".into(),
            serialized_hash: 0x1122_3344_5566_7788,
            stack: stack_train,
            optimized_hash,
            ..Default::default()
        })),
    );
    put(
        &mut w,
        Record::CacheLoad(Box::new(CacheLoad {
            t_ns: 1_035_000_000,
            thread: 11,
            dur_ns: 500_000,
            bytes: 100,
            ok: false,
            error: err(12, "UNIMPLEMENTED: DeserializeAndLoad"),
            executable_id: 0,
            executable_name: String::new(),
            serialized_hash: 0x99,
            stack: stack_eval,
            optimized_hash: 0,
            ..Default::default()
        })),
    );
    put(
        &mut w,
        Record::Memory(Box::new(Memory {
            t_ns: 1_036_000_000,
            device: 0,
            origin: MemoryOrigin::PluginStats as i32,
            bytes_in_use: 1 << 20,
            peak_bytes_in_use: Some(2 << 20),
            bytes_limit: Some(16 << 30),
            num_allocs: Some(17),
            largest_alloc_size: Some(1 << 19),
            bytes_reserved: Some(0),
            live_buffers: None,
            ..Default::default()
        })),
    );
    put(
        &mut w,
        Record::Memory(Box::new(Memory {
            t_ns: 1_036_000_001,
            device: 1,
            origin: MemoryOrigin::LiveBuffers as i32,
            bytes_in_use: 8192,
            live_buffers: Some(3),
            ..Default::default()
        })),
    );
    put(
        &mut w,
        Record::Step(Step {
            t_ns: 1_037_000_000,
            thread: 11,
            marker: "jit_loop".into(),
            number: 3,
            ..Default::default()
        }),
    );
    put(
        &mut w,
        Record::Clock(Clock {
            mono_ns: 2_000_000_000,
            wall_ns: 1_700_000_001_123_456_789,
            ..Default::default()
        }),
    );
    put(
        &mut w,
        Record::Error(ErrorEvent {
            t_ns: 1_002_000_000,
            thread: 11,
            api: "PJRT_Compile".into(),
            code: 3,
            message: "INVALID_ARGUMENT: bad sharding".into(),
            stack: stack_eval,
            ..Default::default()
        }),
    );
    put(
        &mut w,
        Record::Note(Note {
            t_ns: 1_038_000_000,
            thread: 0,
            topic: "memory_stats_unimplemented".into(),
            message: "PJRT_Device_MemoryStats returned UNIMPLEMENTED; using live buffers".into(),
            ..Default::default()
        }),
    );
    put(
        &mut w,
        Record::Dropped(Dropped {
            t_ns: 1_039_000_000,
            count: 5,
            total: 7,
            ..Default::default()
        }),
    );
    w
}

/// Ends the trace as a collector does: `events_written` counts event records, not the manifest,
/// definitions or blobs.
fn finish(mut w: TraceWriter<Vec<u8>>, t_ns: u64, events_written: u64) -> Vec<u8> {
    w.write(&Record::End(End {
        t_ns,
        events_written,
        dropped_total: 7,
        ..Default::default()
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    w.flush().unwrap_or_else(|e| panic!("{e}"));
    w.into_inner()
}

/// `v1.0-all-kinds.tps`: every record kind of format 1.0.
pub fn all_kinds() -> Vec<u8> {
    finish(all_kinds_body(), 1_040_000_000, 22)
}

/// `v1.0-unknown-kind.tps`: a few records, a frame of kind 999 that no reader knows, and an
/// `Execute` whose payload carries fields with tags no 1.0 message has (as a later minor would
/// write), then the end record.
pub fn unknown_kind() -> Vec<u8> {
    let mut w =
        TraceWriter::with_version(Vec::new(), &manifest(), 1, 0).unwrap_or_else(|e| panic!("{e}"));
    let sig = w.intern_string("bf16[4]").unwrap_or_else(|e| panic!("{e}"));
    w.write(&Record::Step(Step {
        t_ns: 5,
        thread: 1,
        marker: "user".into(),
        number: 1,
        ..Default::default()
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let mut out = w.into_inner();
    format::encode_frame(
        &mut out,
        UNKNOWN_KIND_NUMBER,
        0,
        b"\x08\x01\x12\x0bfrom 1.9999",
    );
    let mut payload = Vec::new();
    Record::Execute(Execute {
        t_ns: 6,
        thread: 1,
        dur_ns: 7,
        executable_id: 0xE9,
        num_devices: 1,
        num_args: 1,
        arg_signature: sig,
        seq: 1,
        error: None,
        completion_tracked: false,
        ..Default::default()
    })
    .encode_payload(&mut payload);
    // Field 1000, varint 300; field 1001, bytes "x"; field 1002, fixed64.
    payload.extend_from_slice(&[0xc0, 0x3e, 0xac, 0x02]);
    payload.extend_from_slice(&[0xca, 0x3e, 0x01, b'x']);
    payload.extend_from_slice(&[0xd1, 0x3e, 1, 2, 3, 4, 5, 6, 7, 8]);
    format::encode_frame(&mut out, RecordKind::Execute as u16, 0, &payload);
    let mut end = Vec::new();
    Record::End(End {
        t_ns: 8,
        events_written: 3,
        dropped_total: 0,
        ..Default::default()
    })
    .encode_payload(&mut end);
    format::encode_frame(&mut out, RecordKind::End as u16, 0, &end);
    out
}

/// `v2.0-newer-major.tps`: a trace that claims format 2.0, which 1.x readers must refuse.
pub fn newer_major() -> Vec<u8> {
    let w =
        TraceWriter::with_version(Vec::new(), &manifest(), 2, 0).unwrap_or_else(|e| panic!("{e}"));
    finish(w, 9, 0)
}

/// `v1.2-packed.tps`: the records of `v1.0-all-kinds.tps` written by a packing 1.2 writer: the
/// manifest in a frame of its own, every other record but the end in one pack, the end (alone
/// at the flush before it) in a frame of its own.
pub fn packed() -> Vec<u8> {
    let w = TraceWriter::with_version(Vec::new(), &manifest(), 1, 2)
        .unwrap_or_else(|e| panic!("{e}"))
        .packed();
    let mut w = all_kinds_into(w);
    w.flush().unwrap_or_else(|e| panic!("{e}"));
    finish(w, 1_040_000_000, 22)
}

/// A golden file's name and generator.
pub type Golden = (&'static str, fn() -> Vec<u8>);

/// Every golden file with its generator.
pub fn all() -> [Golden; 4] {
    [
        (ALL_KINDS, all_kinds),
        (UNKNOWN_KIND, unknown_kind),
        (NEWER_MAJOR, newer_major),
        (PACKED, packed),
    ]
}
