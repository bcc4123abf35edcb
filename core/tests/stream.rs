//! The streaming reader (`stream::TraceStream`) on inputs larger than its windows: damage longer
//! than a resync window, frames longer than what a resync finds, and record-by-record reading
//! of a merged file; and opening a FIFO (`stream::TraceFile`). (`fuzz_reader.rs` checks
//! streamed == whole on every mutant, with tiny windows.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::golden;
use common::skimmed::{Seen, assert_same_tables, keep, one_pass};
use tpuscope_core::event::Record;
use tpuscope_core::format::{self, HEADER_LEN};
use tpuscope_core::reader::RESYNC_MAX_PAYLOAD;
use tpuscope_core::stream::SCAN_WINDOW;
use tpuscope_core::{Completeness, ReadError, Streamed, Trace, TraceStream, read_traces};

/// Reads `bytes` through the stream, arriving in pieces of at most 64 KiB (as from a pipe).
fn streamed(bytes: &[u8]) -> Result<Vec<Trace>, ReadError> {
    struct Pipe<'a>(&'a [u8]);
    impl std::io::Read for Pipe<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(self.0.len()).min(64 << 10);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    TraceStream::new(Pipe(bytes), "pipe")?.read_all(false)
}

fn assert_same(a: &[Trace], b: &[Trace]) {
    assert_eq!(a.len(), b.len());
    for (a, b) in a.iter().zip(b) {
        assert_eq!(a.events, b.events);
        assert_eq!(a.damage, b.damage);
        assert_eq!(a.completeness, b.completeness);
        assert_eq!(a.strings, b.strings);
        assert_eq!(a.blobs.len(), b.blobs.len());
    }
}

#[test]
fn damage_longer_than_a_resync_window_is_skipped_and_the_trace_after_it_read() {
    let tail = golden::committed(golden::ALL_KINDS);
    let mut bytes = format::encode_header(1, 0).to_vec();
    // Zeroes for two and a half windows, then every frame of a real trace.
    bytes.resize(HEADER_LEN + SCAN_WINDOW * 5 / 2 + 7, 0);
    let hole = bytes.len() - HEADER_LEN;
    bytes.extend_from_slice(&tail[HEADER_LEN..]);
    let whole = read_traces(&bytes).unwrap();
    let s = streamed(&bytes).unwrap();
    assert_same(&whole, &s);
    assert_eq!(s[0].damage.len(), 1);
    assert_eq!(s[0].damage[0].len as usize, hole);
    assert_eq!(s[0].completeness, Completeness::Complete);
    assert_eq!(s[0].events, read_traces(&tail).unwrap()[0].events);
}

#[test]
fn a_long_frame_is_read_in_order_but_not_found_by_a_resync() {
    let manifest = Default::default();
    let mut w = tpuscope_core::TraceWriter::new(Vec::new(), &manifest).unwrap();
    // A blob longer than a resync finds, between two notes.
    let note = |m: &str| {
        Record::Note(tpuscope_core::event::Note {
            topic: "t".into(),
            message: m.into(),
            ..Default::default()
        })
    };
    w.write(&note("before")).unwrap();
    w.put_blob("input_program", "mlir", &vec![7u8; RESYNC_MAX_PAYLOAD + 1])
        .unwrap();
    w.write(&note("after")).unwrap();
    w.flush().unwrap();
    let clean = w.into_inner();
    let s = streamed(&clean).unwrap();
    assert_same(&read_traces(&clean).unwrap(), &s);
    assert_eq!(s[0].blobs.len(), 1, "read in order");
    assert_eq!(s[0].events.len(), 2);

    // Damage right before it: the resync skips the long frame and finds the note after it.
    let mut damaged = clean.clone();
    let first_note_end = {
        let t = tpuscope_core::reader::FrameIter::new(&clean, HEADER_LEN);
        t.filter_map(|i| match i {
            tpuscope_core::reader::FrameItem::Frame(f) if f.kind == 29 => {
                Some(f.offset as usize + 12 + f.payload.len())
            }
            _ => None,
        })
        .next()
        .unwrap()
    };
    damaged.insert(first_note_end, 0xee);
    let whole = read_traces(&damaged).unwrap();
    let s = streamed(&damaged).unwrap();
    assert_same(&whole, &s);
    assert_eq!(
        s[0].blobs.len(),
        0,
        "a resync does not find a frame over 16 MiB"
    );
    assert_eq!(s[0].events.len(), 2, "both notes");
    assert_eq!(s[0].damage.len(), 1);
}

#[test]
fn a_merged_file_streams_segment_by_segment() {
    let bytes = golden::committed("v1.1-merged.tps");
    let whole = read_traces(&bytes).unwrap();
    assert!(whole.len() >= 2);
    let mut stream = TraceStream::new(&bytes[..], "merged").unwrap();
    let mut events = Vec::new();
    let mut done = Vec::new();
    while let Some(item) = stream.next_record().unwrap() {
        match item {
            Streamed::Event(r) => events.push(r),
            Streamed::SegmentDone(t) => {
                assert!(t.events.is_empty(), "a stream hands events out");
                done.push((t, std::mem::take(&mut events)));
            }
        }
    }
    done.push((Box::new(stream.finish().unwrap()), events));
    assert_eq!(done.len(), whole.len());
    for ((t, ev), w) in done.iter().zip(&whole) {
        assert_eq!(ev, &w.events);
        assert_eq!(t.segment, w.segment);
        assert_eq!(t.manifest, w.manifest);
    }
}

#[test]
fn the_header_is_all_that_is_read_of_a_non_trace() {
    /// Fails the test if more than the header is asked for.
    struct Endless(usize);
    impl std::io::Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            assert!(self.0 <= HEADER_LEN, "read past the header: {}", self.0);
            buf.fill(b'x');
            Ok(buf.len())
        }
    }
    assert!(matches!(
        TraceStream::new(Endless(0), "x"),
        Err(ReadError::NotATrace)
    ));
}

fn mkfifo(p: &std::path::Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success(), "mkfifo {}", p.display());
}

#[test]
fn a_fifo_is_read_from_its_first_byte_and_refused_without_a_writer() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    use tpuscope_core::stream::{FIFO_WRITER_WAIT, TraceFile};
    let dir = tempfile::tempdir().unwrap();
    // A writer that comes after the reader opened, then writes: every byte arrives, the one
    // taken while looking for the writer first.
    let p = dir.path().join("late");
    mkfifo(&p);
    let writer = {
        let p = p.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let mut f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
            f.write_all(b"0123456789").unwrap();
        })
    };
    let mut f = TraceFile::open(&p).unwrap();
    assert_eq!(f.file_len(), None);
    let mut got = Vec::new();
    f.read_to_end(&mut got).unwrap();
    writer.join().unwrap();
    assert_eq!(got, b"0123456789");
    // No writer at all: refused once the wait is over, naming the FIFO.
    let p = dir.path().join("nobody");
    mkfifo(&p);
    let start = Instant::now();
    let e = TraceFile::open(&p).err().unwrap();
    let took = start.elapsed();
    assert!(took >= FIFO_WRITER_WAIT, "{took:?}");
    assert!(took < FIFO_WRITER_WAIT * 4, "{took:?}");
    assert!(
        e.to_string().starts_with(&format!(
            "{}: cannot read: a FIFO with no writer",
            p.display()
        )),
        "{e}"
    );
    // A regular file: its length is known.
    let r = dir.path().join("file");
    std::fs::write(&r, b"abc").unwrap();
    assert_eq!(TraceFile::open(&r).unwrap().file_len(), Some(3));
}

/// `TraceStream::skim_frames` (what `tpuscope merge` reads with) and `skim_each` give what the
/// whole reader gives: the same segments and tables, the same events once the raw ones are
/// decoded, in order; and the frames' ranges, per segment, are every frame but the markers.
#[test]
fn skimming_hands_out_what_reading_keeps() {
    use tpuscope_core::event::RecordKind;
    use tpuscope_core::reader::{FrameItem, FrameIter};
    use tpuscope_core::stream::Skimmed;
    let clocks = |k: RecordKind| k == RecordKind::Clock;
    for bytes in [
        golden::committed(golden::ALL_KINDS),
        golden::committed("v1.1-merged.tps"),
    ] {
        let whole = read_traces(&bytes).unwrap();
        let decoded = |r: Skimmed<'_>| match r {
            Skimmed::Decoded(r) => r,
            Skimmed::Raw(kind, payload) => {
                assert_ne!(kind, RecordKind::Clock, "asked to decode clocks");
                Record::decode_payload(kind, payload).unwrap()
            }
        };
        let mut events: Vec<Vec<Record>> = vec![Vec::new(); whole.len()];
        let mut ranges: Vec<Vec<(u64, u64)>> = vec![Vec::new(); whole.len()];
        let mut raw = 0;
        let skimmed = TraceStream::new(bytes.as_slice(), "bytes")
            .unwrap()
            .skim_frames(
                clocks,
                |seg, r| {
                    raw += usize::from(matches!(r, Skimmed::Raw(..)));
                    events[seg].push(decoded(r));
                },
                |seg, a, b| ranges[seg].push((a, b)),
            )
            .unwrap();
        assert!(raw > 0, "some events were left raw");
        let mut streamed: Vec<Vec<Record>> = vec![Vec::new(); whole.len()];
        let skim_each = TraceStream::new(bytes.as_slice(), "bytes")
            .unwrap()
            .skim_each(clocks, |seg, r| streamed[seg].push(decoded(r)))
            .unwrap();
        for (i, w) in whole.iter().enumerate() {
            assert_eq!(events[i], w.events, "segment {i}");
            assert_eq!(streamed[i], w.events, "segment {i}");
            for t in [&skimmed[i], &skim_each[i]] {
                assert!(t.events.is_empty());
                assert_eq!(t.manifest, w.manifest);
                assert_eq!(t.segment, w.segment);
                assert_eq!(t.strings, w.strings);
                assert_eq!(t.end, w.end);
                assert_eq!(t.completeness, w.completeness);
            }
        }
        let frames: Vec<(u64, u64)> = FrameIter::new(&bytes, HEADER_LEN)
            .filter_map(|item| match item {
                FrameItem::Frame(f) if f.kind != tpuscope_core::event::SEGMENT_KIND => Some((
                    f.offset,
                    f.offset + (format::FRAME_HEADER_LEN + f.payload.len()) as u64,
                )),
                _ => None,
            })
            .collect();
        assert_eq!(ranges.concat(), frames);
    }
}

/// `TraceStream::skim_piped` (reading on a thread of its own) hands out what `skim_frames` does,
/// in order, each record with the start of its frame; on inputs of many batches, merged, and
/// damaged in the middle.
#[test]
fn a_piped_skim_hands_out_what_a_plain_one_does() {
    use tpuscope_core::event::RecordKind;
    let clocks = |k: RecordKind| k == RecordKind::Clock;
    let all = golden::committed(golden::ALL_KINDS);
    // Many batches: the body of a real trace 400 times over, with a run of zeroes between.
    let mut long = all.clone();
    for i in 0..400 {
        if i == 200 {
            long.extend(std::iter::repeat_n(0u8, 1000));
        }
        long.extend_from_slice(&all[HEADER_LEN..]);
    }
    for (bytes, least) in [
        (all, 10),
        (golden::committed("v1.1-merged.tps"), 10),
        (long, 8_000),
    ] {
        let (a, plain) = one_pass(TraceStream::new(bytes.as_slice(), "bytes"), clocks);
        let a = a.unwrap();
        let mut piped: Seen = Vec::new();
        let b = TraceStream::new(bytes.as_slice(), "bytes")
            .unwrap()
            .skim_piped(clocks, |seg, frame, r| keep(&mut piped, seg, frame, r))
            .unwrap();
        assert!(plain.len() > least, "{}", plain.len());
        assert_eq!(piped, plain);
        assert_same_tables(&a, &b, "piped");
    }
}

/// `TraceStream::skim_parallel` on a regular file of many chunks (read on several threads, as
/// `report` reads a long trace) hands out what `skim_frames` does, in order, with the same
/// traces; on a file with damage in the middle and on a merged one.
#[test]
fn a_parallel_skim_of_a_file_hands_out_what_one_pass_does() {
    use tpuscope_core::chunked::CHUNK_BYTES;
    use tpuscope_core::event::RecordKind;
    let decode = |k: RecordKind| k != RecordKind::Transfer;
    let all = golden::committed(golden::ALL_KINDS);
    let merged = golden::committed("v1.1-merged.tps");
    let dir = tempfile::tempdir().unwrap();
    for (name, one) in [("long", all), ("merged", merged)] {
        // Over five chunks long, with zeroes (damage) a third of the way in.
        let mut bytes = one.clone();
        let mut i = 0;
        while (bytes.len() as u64) < 5 * CHUNK_BYTES + 12_345 {
            if i == 300 {
                bytes.extend(std::iter::repeat_n(0u8, 777));
            }
            bytes.extend_from_slice(&one[HEADER_LEN..]);
            i += 1;
        }
        let path = dir.path().join(format!("{name}.tps"));
        std::fs::write(&path, &bytes).unwrap();
        let (a, plain) = one_pass(TraceStream::open(&path), decode);
        let a = a.unwrap();
        for threads in [1, 2, 4] {
            let mut par: Seen = Vec::new();
            let b = TraceStream::open(&path)
                .unwrap()
                .skim_parallel(threads, decode, |seg, frame, r| {
                    keep(&mut par, seg, frame, r);
                })
                .unwrap();
            assert!(plain.len() > 50_000, "{name}: {}", plain.len());
            assert!(par == plain, "{name} on {threads} threads: other events");
            assert_same_tables(&a, &b, name);
            assert!(a.iter().any(|t| !t.damage.is_empty()), "{name}: no damage");
        }
    }
}

/// A panic in the fold of a chunked read reaches the caller: the workers, waiting for the
/// caller to take chunks, are stopped rather than left waiting (the read would hang).
#[test]
fn a_panic_in_a_chunked_fold_does_not_hang_the_read() {
    use tpuscope_core::chunked::skim_chunked;
    use tpuscope_core::event::RecordKind;
    let one = golden::committed(golden::ALL_KINDS);
    let mut bytes = one.clone();
    for _ in 0..200 {
        bytes.extend_from_slice(&one[HEADER_LEN..]);
    }
    let len = bytes.len() as u64;
    let read = std::panic::catch_unwind(|| {
        let mut n = 0;
        skim_chunked(
            bytes.as_slice(),
            len,
            "bytes",
            3,
            4096,
            |k: RecordKind| k != RecordKind::Transfer,
            |_, _, _| {
                n += 1;
                assert!(n < 1000, "the fold gave up");
            },
        )
    });
    assert!(read.is_err());
}
