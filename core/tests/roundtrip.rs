#![allow(clippy::unwrap_used, clippy::expect_used)]

use tpuscope_core::event::*;
use tpuscope_core::{Completeness, RawStackEntry, Record, TraceWriter, read_trace};

fn manifest() -> Manifest {
    Manifest {
        pid: 42,
        host: "h".into(),
        command_line: vec!["python".into(), "t.py".into()],
        ..Default::default()
    }
}

fn sample() -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &manifest()).unwrap();
    let st = w
        .intern_stack(&[RawStackEntry {
            file: "t.py".into(),
            function: "f".into(),
            line: 3,
        }])
        .unwrap();
    let h = w.put_blob("input_program", "hlo", b"abc").unwrap();
    for i in 0..10u64 {
        w.write(&Record::Compile(Box::new(Compile {
            t_ns: i,
            program_hash: h,
            stack: st,
            ..Default::default()
        })))
        .unwrap();
    }
    w.write(&Record::End(End {
        t_ns: 99,
        events_written: 10,
        dropped_total: 0,
    }))
    .unwrap();
    w.into_inner()
}

#[test]
fn roundtrip_complete() {
    let t = read_trace(&sample()).unwrap();
    assert_eq!(t.manifest.as_ref().unwrap().pid, 42);
    assert_eq!(t.events.len(), 10);
    assert_eq!(t.completeness, Completeness::Complete);
    let Record::Compile(c) = &t.events[3] else {
        panic!()
    };
    assert_eq!(t.blobs[&c.program_hash].data, b"abc");
    let f = &t.stacks[&c.stack].frames[0];
    assert_eq!((t.string(f.file), f.line), ("t.py", 3));
}

#[test]
fn every_cut_recovers_a_prefix() {
    let bytes = sample();
    let full = read_trace(&bytes).unwrap().events.len();
    let mut last = 0;
    for cut in 16..bytes.len() {
        let t = read_trace(&bytes[..cut]).unwrap();
        assert!(t.events.len() >= last && t.events.len() <= full);
        assert!(t.damage.is_empty());
        last = t.events.len();
        assert_ne!(t.completeness, Completeness::Complete);
    }
}

#[test]
fn oversized_blob_becomes_a_note() {
    let mut w = TraceWriter::new(Vec::new(), &manifest()).unwrap();
    // Zeroed pages are never touched: the writer only looks at the length.
    let huge = vec![0u8; tpuscope_core::format::MAX_PAYLOAD_LEN + 1];
    w.put_blob_hashed(0xABC, "input_program", "mlir", &huge)
        .unwrap();
    drop(huge);
    assert!(w.has_blob(0xABC));
    // Asked again: nothing more is written.
    let before = w.records_written();
    w.put_blob_hashed(0xABC, "input_program", "mlir", b"x")
        .unwrap();
    assert_eq!(w.records_written(), before);
    let t = read_trace(&w.into_inner()).unwrap();
    assert!(t.blobs.is_empty());
    assert!(t.damage.is_empty());
    let Record::Note(n) = &t.events[0] else {
        panic!("{:?}", t.events)
    };
    assert_eq!(n.topic, "blob_too_large");
}

#[test]
fn the_agents_own_frames_are_dropped_from_stacks() {
    let mut w = TraceWriter::new(Vec::new(), &manifest()).unwrap();
    let frame = |file: &str, line| RawStackEntry {
        file: file.into(),
        function: "f".into(),
        line,
    };
    let st = w
        .intern_stack(&[
            frame("/v/site-packages/jax/_src/pxla.py", 1),
            frame(
                "/home/u/.cache/tpuscope/0.1.0/python/tpuscope_agent/frontends.py",
                2,
            ),
            frame("/work/train.py", 3),
        ])
        .unwrap();
    w.write(&Record::Compile(Box::new(Compile {
        t_ns: 1,
        stack: st,
        ..Default::default()
    })))
    .unwrap();
    let t = read_trace(&w.into_inner()).unwrap();
    let files: Vec<&str> = t.stacks[&st]
        .frames
        .iter()
        .map(|f| t.string(f.file))
        .collect();
    assert_eq!(
        files,
        ["/v/site-packages/jax/_src/pxla.py", "/work/train.py"]
    );
}
