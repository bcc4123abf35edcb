//! Packs (format 1.2, docs/trace-format.md section 12): what a packing writer writes, and every
//! reader handing out a pack's records in its place, as they would a frame each. (The golden
//! `v1.2-packed.tps` pins the bytes; `fuzz_reader.rs` mutates it and fuzzes packs of arbitrary
//! records.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::skimmed::{Seen, assert_same_tables, keep, one_pass};
use tpuscope_core::event::{Blob, Execute, ExecuteComplete, Manifest, RecordKind, Step, Transfer};
use tpuscope_core::format::{self, FRAME_HEADER_LEN, HEADER_LEN};
use tpuscope_core::live::LiveDecoder;
use tpuscope_core::stream::event_in;
use tpuscope_core::{Completeness, RawStackEntry, Record, TraceStream, TraceWriter, read_trace};

/// The records of a short training loop: executes and their completions, transfers with a stack,
/// steps, one blob larger than a pack takes; `flush(i)` says where the writer flushes.
fn write(w: &mut TraceWriter<Vec<u8>>, events: u64, flush: impl Fn(u64) -> bool) {
    let stack = [RawStackEntry {
        file: "train.py".into(),
        function: "loop".into(),
        line: 7,
    }];
    for i in 0..events {
        let t_ns = 1_000 + i * 100;
        let r = match i % 7 {
            0 => Record::Step(Step {
                t_ns,
                marker: "train_step".into(),
                number: i,
                ..Default::default()
            }),
            1 | 2 => Record::Execute(Execute {
                t_ns,
                thread: 3,
                dur_ns: 40,
                executable_id: 0xE0 + i % 3,
                num_devices: 2,
                seq: i,
                completion_tracked: true,
                ..Default::default()
            }),
            3 | 4 => Record::ExecuteComplete(ExecuteComplete {
                t_ns,
                seq: i - 2,
                device_index: (i % 2) as u32,
                ..Default::default()
            }),
            5 => Record::Transfer(Box::new(Transfer {
                t_ns,
                thread: 4,
                dur_ns: 9,
                bytes: 4096,
                stack: w.intern_stack(&stack).unwrap(),
                ..Default::default()
            })),
            _ => Record::Blob(Blob {
                hash: i,
                role: "program".into(),
                format: "mlir".into(),
                // Longer than a record a pack takes, every 49 events.
                data: vec![7; if i % 49 == 6 { 6000 } else { 100 }],
            }),
        };
        w.write(&r).unwrap();
        if flush(i) {
            w.flush().unwrap();
        }
    }
    w.flush().unwrap();
}

fn trace(packed: bool, events: u64, flush: impl Fn(u64) -> bool) -> Vec<u8> {
    let w = TraceWriter::new(Vec::new(), &Manifest::default()).unwrap();
    let mut w = if packed { w.packed() } else { w };
    write(&mut w, events, flush);
    w.into_inner()
}

/// The kinds of the frames as they lie in the file.
fn stored_kinds(bytes: &[u8]) -> Vec<u16> {
    let mut at = HEADER_LEN;
    let mut kinds = Vec::new();
    while let Some(h) = bytes.get(at..).and_then(format::parse_frame_header) {
        kinds.push(h.kind);
        at += FRAME_HEADER_LEN + h.len as usize;
    }
    kinds
}

#[test]
fn a_packed_trace_reads_as_the_same_records_in_frames_of_their_own() {
    let flush = |i: u64| i % 1000 == 999;
    let (packed, plain) = (trace(true, 20_000, flush), trace(false, 20_000, flush));
    let kinds = stored_kinds(&packed);
    let packs = kinds.iter().filter(|&&k| k == format::PACK_KIND).count();
    // Packs of 16 KiB at most, and at every flush; the long blobs in frames of their own.
    assert!(packs >= 20, "{packs} packs");
    assert!(kinds.contains(&(RecordKind::Blob as u16)));
    assert!(
        packed.len() < plain.len(),
        "{} vs {}",
        packed.len(),
        plain.len()
    );
    let (a, b) = (read_trace(&packed).unwrap(), read_trace(&plain).unwrap());
    assert_eq!((a.header.major, a.header.minor), (1, format::FORMAT_MINOR));
    assert_eq!(a.events, b.events);
    assert_eq!(a.blobs, b.blobs);
    assert_eq!(a.stacks, b.stacks);
    assert_eq!(a.strings, b.strings);
    assert_eq!((a.unknown_records, a.undecodable_records), (0, 0));
    assert_eq!(
        a.completeness,
        Completeness::NoEndRecord {
            file_len: packed.len() as u64
        }
    );

    // One pass, piped, and chunked on several threads with chunks smaller than a pack, hand out
    // the same records with the same frame offsets.
    let decode = |k: RecordKind| k != RecordKind::Transfer;
    let (one, seen) = one_pass(TraceStream::new(&packed[..], "bytes"), decode);
    let one = one.unwrap();
    assert_eq!(seen.len(), a.events.len());
    let mut piped: Seen = Vec::new();
    let p = TraceStream::new(&packed[..], "bytes")
        .unwrap()
        .skim_piped(decode, |seg, f, r| keep(&mut piped, seg, f, r))
        .unwrap();
    assert_eq!(piped, seen);
    assert_same_tables(&one, &p, "piped");
    for (chunk, threads) in [(1000, 3), (5000, 2), (40_000, 4)] {
        let mut chunked: Seen = Vec::new();
        let c = tpuscope_core::chunked::skim_chunked(
            &packed[..],
            packed.len() as u64,
            "bytes",
            threads,
            chunk,
            decode,
            |seg, f, r| keep(&mut chunked, seg, f, r),
        )
        .unwrap();
        assert_eq!(chunked, seen, "chunks of {chunk}");
        assert_same_tables(&one, &c, "chunked");
    }

    // Each event read back from its frame's offset: a pack's records count from its first.
    let mut first = 0;
    for (k, &(_, frame, ..)) in seen.iter().enumerate() {
        if k == 0 || seen[k - 1].1 != frame {
            first = k;
        }
        if k % 97 != 0 && k + 1 != seen.len() {
            continue;
        }
        let back = event_in(&packed[frame as usize..], frame, k - first).unwrap();
        assert_eq!(back.as_ref(), Some(&a.events[k]), "event {k} from {frame}");
    }
}

#[test]
fn a_cut_inside_a_pack_loses_its_records_and_nothing_before_it() {
    let bytes = trace(true, 120, |i| i % 30 == 29);
    let whole = read_trace(&bytes).unwrap();
    // Where each frame ends, and the events read by then.
    let mut ends = vec![(HEADER_LEN, 0usize)];
    let (mut at, mut events) = (HEADER_LEN, 0);
    let mut rest = &bytes[..];
    while let Some(h) = bytes.get(at..).and_then(format::parse_frame_header) {
        let end = at + FRAME_HEADER_LEN + h.len as usize;
        events += read_trace(&bytes[..end]).unwrap().events.len() - events;
        ends.push((end, events));
        at = end;
        rest = &bytes[at..];
    }
    assert!(rest.is_empty());
    for cut in HEADER_LEN..bytes.len() {
        let t = read_trace(&bytes[..cut]).unwrap();
        let &(boundary, n) = ends.iter().rev().find(|&&(e, _)| e <= cut).unwrap();
        assert_eq!(t.events[..], whole.events[..n], "cut at {cut}");
        assert!(t.damage.is_empty(), "cut at {cut}");
        // (No end record: the loop's records end on a boundary.)
        let expected = common::completeness_at_cut(cut, boundary, usize::MAX);
        assert_eq!(t.completeness, expected, "cut at {cut}");
    }
}

#[test]
fn a_packing_writer_says_its_length_and_what_it_holds_back() {
    let mut w = TraceWriter::new(Vec::new(), &Manifest::default())
        .unwrap()
        .packed();
    let start = w.get_ref().len() as u64;
    assert_eq!(w.bytes_written(), start);
    let step = |n: u64| {
        Record::Step(Step {
            t_ns: n,
            marker: "s".into(),
            ..Default::default()
        })
    };
    // One record alone is written as its own frame at the flush.
    w.write(&step(1)).unwrap();
    assert_eq!(w.gathered().collect::<Vec<_>>(), [RecordKind::Step as u16]);
    assert_eq!(w.get_ref().len() as u64, start);
    let said = w.bytes_written();
    w.flush().unwrap();
    assert_eq!(w.get_ref().len() as u64, said);
    assert_eq!(
        stored_kinds(w.get_ref()).last(),
        Some(&(RecordKind::Step as u16))
    );
    assert_eq!(w.gathered().count(), 0);
    // Several make a pack; a long one goes after them, in its own frame.
    for n in 2..50 {
        w.write(&step(n)).unwrap();
    }
    let said = w.bytes_written();
    w.flush().unwrap();
    assert_eq!(w.get_ref().len() as u64, said);
    w.write(&step(50)).unwrap();
    w.write(&Record::Blob(Blob {
        hash: 1,
        data: vec![1; format::PACK_ENTRY_MAX + 1],
        ..Default::default()
    }))
    .unwrap();
    w.flush().unwrap();
    let kinds = stored_kinds(w.get_ref());
    let (step_kind, blob) = (RecordKind::Step as u16, RecordKind::Blob as u16);
    assert_eq!(
        kinds[kinds.len() - 3..],
        [format::PACK_KIND, step_kind, blob]
    );
    assert_eq!(w.get_ref().len() as u64, w.bytes_written());
    let t = read_trace(w.get_ref()).unwrap();
    let times: Vec<u64> = t.events.iter().filter_map(Record::t_ns).collect();
    assert_eq!(times, (1..=50).collect::<Vec<u64>>());

    // A writer of a minor before packs never packs.
    let mut old = TraceWriter::with_version(Vec::new(), &Manifest::default(), 1, 1)
        .unwrap()
        .packed();
    for n in 0..10 {
        old.write(&step(n)).unwrap();
    }
    old.flush().unwrap();
    assert!(!stored_kinds(old.get_ref()).contains(&format::PACK_KIND));
}

#[test]
fn a_live_viewer_takes_packs_in_any_pieces_and_counts_their_records() {
    let bytes = trace(true, 3000, |i| i % 100 == 99);
    let whole = read_trace(&bytes).unwrap();
    for piece in [1, 7, 4096] {
        let mut d = LiveDecoder::new(1 << 30);
        let mut events = Vec::new();
        for p in bytes.chunks(piece) {
            let mut p = p;
            while !p.is_empty() {
                let pushed = d.push(p).unwrap();
                p = &p[pushed.consumed..];
            }
            events.extend(d.take_events());
        }
        assert_eq!(events, whole.events, "pieces of {piece}");
    }
    // A folding viewer counts each record of a pack as the fold keeps it: 3000 records at 1 KiB
    // each are over 1 MiB, though the packs' bytes are far fewer.
    let mut d = LiveDecoder::folding(1 << 20, |_, _| 1024);
    let e = d.push(&bytes).unwrap_err();
    assert!(e.to_string().contains("MiB"), "{e}");
    let mut d = LiveDecoder::folding(1 << 20, |_, _| 16);
    d.push(&bytes).unwrap();
}
