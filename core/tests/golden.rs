//! The committed golden traces still read exactly as they did when format 1.0 was released, and
//! today's writer still produces them byte for byte. A failure here means a change broke old
//! traces: see "Golden files" in docs/trace-format.md before touching the files.

mod common;

use std::collections::BTreeMap;

use common::golden;
use tpuscope_core::event::*;
use tpuscope_core::format;
use tpuscope_core::reader::{FrameItem, FrameIter};
use tpuscope_core::{Completeness, ReadError, Record, read_trace};

/// `TPUSCOPE_REGEN_GOLDEN=1` writes the generator's output instead of comparing (only for a new
/// golden file: released ones are never rewritten).
#[test]
fn writer_reproduces_committed_golden_bytes() {
    let regen = std::env::var_os("TPUSCOPE_REGEN_GOLDEN").is_some_and(|v| v == "1");
    for (name, generate) in golden::all() {
        let bytes = generate();
        // The generator is deterministic.
        assert_eq!(bytes, generate(), "{name}: generator is not deterministic");
        if regen {
            let path = golden::dir().join(name);
            std::fs::write(&path, &bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            eprintln!("wrote {} ({} bytes)", path.display(), bytes.len());
            continue;
        }
        let committed = golden::committed(name);
        assert!(
            bytes == committed,
            "{name}: today's writer no longer produces the committed v1.0 bytes \
             ({} vs {} bytes): an encoding change breaks the format",
            bytes.len(),
            committed.len()
        );
    }
}

/// Frame kinds of a file in order, from the frame layer alone.
fn frame_kinds(bytes: &[u8]) -> Vec<u16> {
    FrameIter::new(bytes, format::HEADER_LEN)
        .map(|i| match i {
            FrameItem::Frame(f) => f.kind,
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

fn kind_counts(events: &[Record]) -> BTreeMap<&'static str, usize> {
    let mut m = BTreeMap::new();
    for r in events {
        *m.entry(r.kind().name()).or_insert(0) += 1;
    }
    m
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one golden file checked record by record against the spec, in file order"
)]
fn all_kinds_golden_reads_exactly() {
    let bytes = golden::committed(golden::ALL_KINDS);
    assert_eq!(&bytes[..16], b"TPUSCOPE\x01\x00\x00\x00\x10\x00\x00\x00");
    // The frame sequence, as written: manifest, client, the stack's strings and stacks, blobs,
    // events (with the signature string defined right before its first use), end.
    assert_eq!(
        frame_kinds(&bytes),
        [
            1, 10, 2, 2, 2, 2, 3, 2, 3, 4, 4, 4, 16, 16, 17, 2, 18, 18, 19, 19, 20, 21, 21, 22, 23,
            24, 24, 25, 25, 26, 27, 28, 29, 30, 31
        ]
    );

    let t = read_trace(&bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((t.header.major, t.header.minor, t.header.len), (1, 0, 16));
    assert_eq!(t.completeness, Completeness::Complete);
    assert!(t.damage.is_empty());
    assert_eq!((t.unknown_records, t.undecodable_records), (0, 0));
    let expected: BTreeMap<&str, usize> = [
        ("client", 1),
        ("compile", 2),
        ("load", 1),
        ("execute", 2),
        ("execute_complete", 2),
        ("execute_summary", 1),
        ("transfer", 2),
        ("sync", 1),
        ("cache_store", 1),
        ("cache_load", 2),
        ("memory", 2),
        ("step", 1),
        ("clock", 1),
        ("error", 1),
        ("note", 1),
        ("dropped", 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(kind_counts(&t.events), expected);
    assert_eq!((t.strings.len(), t.stacks.len(), t.blobs.len()), (6, 2, 3));

    let m = t.manifest.as_ref().unwrap_or_else(|| panic!("no manifest"));
    assert_eq!(m, &golden::manifest());
    assert_eq!(
        (m.pid, m.pjrt_api_minor, m.frontend.as_str()),
        (4242, 115, "jax")
    );
    let c = t.client.as_ref().unwrap_or_else(|| panic!("no client"));
    assert_eq!((c.platform_name.as_str(), c.devices.len()), ("cpu", 2));
    assert_eq!(c.devices[1].debug_string, "TFRT_CPU_1");

    let Record::Compile(ok) = &t.events[1] else {
        panic!("{:?}", t.events[1])
    };
    assert_eq!(ok.executable_name, "jit_train_step");
    assert_eq!(ok.memory.as_ref().map(|m| m.peak_memory), Some(3 << 19));
    let program = &t.blobs[&ok.program_hash];
    assert_eq!(
        (program.role.as_str(), program.format.as_str()),
        ("input_program", "mlir")
    );
    assert!(program.data.starts_with(b"module @jit_train_step"));
    assert_eq!(
        program.hash,
        tpuscope_core::writer::blob_hash(&program.data)
    );
    assert_eq!(
        ok.program_hash, 0x6f71_e7b1_e90f_c0d0,
        "xxh3-64 of the program"
    );
    assert_eq!(t.blobs[&ok.optimized_hash].role, "optimized_program");
    assert_eq!(t.blobs[&ok.options_hash].role, "compile_options");
    let frames = &t.stacks[&ok.stack].frames;
    let resolved: Vec<(&str, &str, u32)> = frames
        .iter()
        .map(|f| (t.string(f.file), t.string(f.function), f.line))
        .collect();
    assert_eq!(
        resolved,
        [
            ("/src/model.py", "forward", 120),
            ("/src/train.py", "train_step", 44)
        ]
    );
    let Record::Compile(failed) = &t.events[2] else {
        panic!("{:?}", t.events[2])
    };
    assert_eq!(failed.error.as_ref().map(|e| e.code), Some(3));
    assert_eq!(t.stacks[&failed.stack].frames.len(), 1);

    let Record::Execute(x) = &t.events[4] else {
        panic!("{:?}", t.events[4])
    };
    assert_eq!((x.seq, x.executable_id), (1, 0xE1));
    assert_eq!(t.string(x.arg_signature), "f32[8,128] s32[]");

    let transfers: Vec<&Transfer> = t
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Transfer(x) => Some(&**x),
            _ => None,
        })
        .collect();
    assert_eq!(transfers[0].direction, Direction::H2d as i32);
    assert_eq!(transfers[0].dims, [8, 128]);
    assert_eq!(transfers[1].direction, Direction::D2h as i32);
    assert!(transfers[1].sync);

    let loads: Vec<&CacheLoad> = t
        .events
        .iter()
        .filter_map(|r| match r {
            Record::CacheLoad(x) => Some(&**x),
            _ => None,
        })
        .collect();
    assert!(loads[0].ok && loads[0].error.is_none());
    assert!(!loads[1].ok);
    assert_eq!(loads[1].error.as_ref().map(|e| e.code), Some(12));

    let mems: Vec<&Memory> = t
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Memory(x) => Some(&**x),
            _ => None,
        })
        .collect();
    assert_eq!(mems[0].origin, MemoryOrigin::PluginStats as i32);
    assert_eq!(mems[0].bytes_limit, Some(16 << 30));
    assert_eq!(mems[1].origin, MemoryOrigin::LiveBuffers as i32);
    assert_eq!(
        (mems[1].live_buffers, mems[1].peak_bytes_in_use),
        (Some(3), None)
    );

    let end = t.end.as_ref().unwrap_or_else(|| panic!("no end"));
    assert_eq!(
        (end.t_ns, end.events_written, end.dropped_total),
        (1_040_000_000, 22, 7)
    );
    assert_eq!(end.events_written as usize, t.events.len());
}

#[test]
fn unknown_kind_and_fields_are_skipped() {
    let bytes = golden::committed(golden::UNKNOWN_KIND);
    assert!(frame_kinds(&bytes).contains(&golden::UNKNOWN_KIND_NUMBER));
    let t = read_trace(&bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.unknown_records, 1);
    assert_eq!(t.undecodable_records, 0);
    assert!(t.damage.is_empty());
    assert_eq!(t.completeness, Completeness::Complete);
    assert_eq!(t.events.len(), 2);
    let Record::Execute(x) = &t.events[1] else {
        panic!("{:?}", t.events[1])
    };
    // The known fields decode; the unknown tags 1000-1002 are dropped.
    assert_eq!((x.t_ns, x.dur_ns, x.executable_id, x.seq), (6, 7, 0xE9, 1));
    assert_eq!(t.string(x.arg_signature), "bf16[4]");
    assert_eq!(t.end.as_ref().map(|e| e.t_ns), Some(8));
}

#[test]
fn newer_major_is_refused() {
    let bytes = golden::committed(golden::NEWER_MAJOR);
    match read_trace(&bytes) {
        Err(ReadError::NewerVersion {
            major: 2,
            minor: 0,
            supported: 1,
        }) => {}
        other => panic!("expected NewerVersion, got {:?}", other.map(|t| t.header)),
    }
}

/// The kinds of a file's frames as they lie in it (a pack as one frame), by their headers.
fn stored_kinds(bytes: &[u8]) -> Vec<u16> {
    let mut at = format::HEADER_LEN;
    let mut kinds = Vec::new();
    while let Some(h) = bytes.get(at..).and_then(format::parse_frame_header) {
        kinds.push(h.kind);
        at += format::FRAME_HEADER_LEN + h.len as usize;
    }
    assert_eq!(at, bytes.len(), "frames end where the file does");
    kinds
}

#[test]
fn packed_golden_reads_as_the_records_it_packs() {
    let packed = golden::committed(golden::PACKED);
    let plain = golden::committed(golden::ALL_KINDS);
    let (manifest, end) = (RecordKind::Manifest as u16, RecordKind::End as u16);
    assert_eq!(stored_kinds(&packed), [manifest, format::PACK_KIND, end]);
    // The frame layer hands out the pack's records in its place: the same kinds in the same
    // order as the file that holds each in a frame of its own.
    assert_eq!(frame_kinds(&packed), frame_kinds(&plain));
    let (p, q) = (
        read_trace(&packed).unwrap_or_else(|e| panic!("{e}")),
        read_trace(&plain).unwrap_or_else(|e| panic!("{e}")),
    );
    assert_eq!((p.header.major, p.header.minor), (1, 2));
    assert_eq!(p.completeness, Completeness::Complete);
    assert_eq!((p.unknown_records, p.undecodable_records), (0, 0));
    assert!(p.damage.is_empty());
    assert_eq!(p.events, q.events);
    assert_eq!(p.strings, q.strings);
    assert_eq!(p.stacks, q.stacks);
    assert_eq!(p.blobs, q.blobs);
    assert_eq!(p.manifest, q.manifest);
    assert_eq!(p.end, q.end);
    assert!(packed.len() < plain.len());
}
