//! Time-bounded mutation fuzzing of the reader over the golden traces, plus proptests.
//!
//! `TPUSCOPE_FUZZ_SECS` sets how long the mutation loop runs (default 5; CI sets 30);
//! `TPUSCOPE_FUZZ_SEED` replays a run (the seed is printed, and repeated in any failure message).
//!
//! What must hold for any input: `read_trace` does not panic and returns in time proportional to
//! the input. For a file cut at any byte: exactly the complete records before the cut, no damage,
//! never `Complete`. For any other mutation: every recovered frame is byte-for-byte a frame of the
//! original file (records are only ever lost or repeated whole, never invented: a random mutation
//! that yields a valid CRC-32 by chance is not expected in a run's lifetime).

mod common;

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use common::golden;
use common::skimmed::{Seen, assert_same_tables, keep, one_pass};
use proptest::prelude::*;
use tpuscope_core::event::{RecordKind, SEGMENT_KIND};
use tpuscope_core::format::{self, FRAME_HEADER_LEN, HEADER_LEN, MAX_PAYLOAD_LEN};
use tpuscope_core::reader::{FrameItem, FrameIter};
use tpuscope_core::{Completeness, ReadError, Record, Trace, TraceStream, read_trace};

/// xorshift64*: tiny, seedable, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform-ish in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

fn env_seed() -> u64 {
    match std::env::var("TPUSCOPE_FUZZ_SEED") {
        Ok(v) => {
            let v = v.trim();
            let parsed = match v.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => v.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("TPUSCOPE_FUZZ_SEED={v}: {e}"))
        }
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x5eed),
    }
}

fn env_secs() -> f64 {
    std::env::var("TPUSCOPE_FUZZ_SECS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(5.0)
}

/// Time allowed for reading `len` bytes: generous for an unoptimised test build on a busy
/// machine, but far below what a quadratic resync costs on the larger inputs.
fn time_bound(len: usize) -> Duration {
    Duration::from_millis(500) + Duration::from_micros(20) * len as u32
}

type FrameKey = (u16, u16, Vec<u8>);

/// A golden file, with what it holds.
struct Original {
    name: &'static str,
    bytes: Vec<u8>,
    /// Byte ranges of its frames (a pack is one).
    frames: Vec<(usize, usize)>,
    /// The event records in each frame.
    events_in: Vec<usize>,
    keys: HashSet<FrameKey>,
    trace: Trace,
}

impl Original {
    fn load(name: &'static str) -> Self {
        let bytes = golden::committed(name);
        let mut frames = Vec::new();
        let mut events_in = Vec::new();
        let mut keys = HashSet::new();
        for item in FrameIter::new(&bytes, HEADER_LEN) {
            let FrameItem::Frame(f) = item else {
                panic!("{name}: golden file is not clean: {item:?}")
            };
            // A pack's records share its frame: the first stands for it.
            if f.entry == 0 {
                frames.push((f.offset as usize, f.end as usize));
                events_in.push(0);
            }
            if let Some(n) = events_in.last_mut() {
                *n += usize::from(is_event_kind(f.kind));
            }
            keys.insert((f.kind, f.flags, f.payload.to_vec()));
        }
        let trace = read_trace(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(trace.completeness, Completeness::Complete, "{name}");
        Original {
            name,
            bytes,
            frames,
            events_in,
            keys,
            trace,
        }
    }

    fn frame_bytes(&self, i: usize) -> &[u8] {
        let (s, e) = self.frames[i];
        &self.bytes[s..e]
    }
}

fn originals() -> Vec<Original> {
    vec![
        Original::load(golden::ALL_KINDS),
        Original::load(golden::UNKNOWN_KIND),
        Original::load(golden::PACKED),
    ]
}

/// Kinds that `read_trace` lists in `events`.
fn is_event_kind(kind: u16) -> bool {
    RecordKind::from_u16(kind).is_some_and(|k| {
        !matches!(
            k,
            RecordKind::Manifest
                | RecordKind::StringDef
                | RecordKind::StackDef
                | RecordKind::Blob
                | RecordKind::End
        )
    })
}

#[test]
fn every_cut_yields_exactly_the_complete_records_before_it() {
    for o in originals() {
        for cut in 0..=o.bytes.len() {
            let bytes = &o.bytes[..cut];
            let t = match read_trace(bytes) {
                Ok(t) => t,
                Err(ReadError::NotATrace | ReadError::DamagedHeader(_)) if cut < HEADER_LEN => {
                    continue;
                }
                Err(e) => panic!("{} cut at {cut}: {e}", o.name),
            };
            assert!(cut >= HEADER_LEN, "{} cut at {cut}: read", o.name);
            let whole: Vec<&(usize, usize)> = o.frames.iter().filter(|f| f.1 <= cut).collect();
            let expected_events: usize = o.events_in[..whole.len()].iter().sum();
            assert_eq!(
                t.events[..],
                o.trace.events[..expected_events],
                "{} cut at {cut}: not the exact prefix",
                o.name
            );
            assert!(
                t.damage.is_empty(),
                "{} cut at {cut}: {:?}",
                o.name,
                t.damage
            );
            assert_eq!(t.undecodable_records, 0);
            let boundary = whole.last().map_or(HEADER_LEN, |f| f.1);
            let expected = common::completeness_at_cut(cut, boundary, o.bytes.len());
            assert_eq!(t.completeness, expected, "{} cut at {cut}", o.name);
        }
    }
}

/// One mutation; returns what it did, for the failure message.
fn mutate(rng: &mut Rng, o: &Original, buf: &mut Vec<u8>) -> String {
    let len = buf.len();
    // Mostly leave the header alone, so that the body is what gets exercised.
    let body_pos = |rng: &mut Rng, len: usize| {
        if rng.chance(20) {
            rng.below(len + 1)
        } else {
            HEADER_LEN + rng.below(len.saturating_sub(HEADER_LEN) + 1)
        }
    };
    let boundary = |rng: &mut Rng| {
        if rng.chance(2) {
            o.frames[rng.below(o.frames.len())].0
        } else {
            o.frames[rng.below(o.frames.len())].1
        }
    };
    match rng.below(10) {
        0 => {
            let n = 1 + rng.below(4);
            let mut at = Vec::new();
            for _ in 0..n {
                let p = body_pos(rng, len - 1).min(len - 1);
                let bit = rng.below(8);
                buf[p] ^= 1 << bit;
                at.push((p, bit));
            }
            format!("bit flips (offset, bit) {at:?}")
        }
        1 => {
            let p = body_pos(rng, len);
            let n = 1 + rng.below(32);
            let ins = rng.bytes(n);
            let n = ins.len();
            buf.splice(p..p, ins);
            format!("insert {n} random bytes at {p}")
        }
        2 => {
            let p = body_pos(rng, len).min(len - 1);
            let n = (1 + rng.below(64)).min(len - p);
            buf.drain(p..p + n);
            format!("delete {n} bytes at {p}")
        }
        3 => {
            let i = rng.below(o.frames.len());
            let p = if buf.len() == o.bytes.len() {
                boundary(rng)
            } else {
                body_pos(rng, len)
            };
            buf.splice(p..p, o.frame_bytes(i).iter().copied());
            format!("duplicate frame {i} at {p}")
        }
        4 if buf.len() == o.bytes.len() && o.frames.len() >= 2 => swap_frames(rng, o, buf),
        5 => {
            let p = if rng.chance(2) && buf.len() == o.bytes.len() {
                boundary(rng)
            } else {
                body_pos(rng, len)
            };
            let max = if rng.chance(4) { 64 << 10 } else { 512 };
            let n = 1 + rng.below(max);
            let junk = if rng.chance(4) {
                vec![0; n]
            } else {
                rng.bytes(n)
            };
            buf.splice(p..p, junk);
            format!("splice {n} garbage bytes at {p}")
        }
        6 if buf.len() == o.bytes.len() => set_frame_length(rng, o, buf),
        7 => {
            let p = body_pos(rng, len).min(len - 1);
            let n = (1 + rng.below(1024)).min(len - p);
            let fill = rng.chance(2);
            for b in &mut buf[p..p + n] {
                *b = if fill { 0 } else { rng.next() as u8 };
            }
            format!("overwrite {n} bytes at {p} (zeros: {fill})")
        }
        8 => {
            let p = HEADER_LEN + rng.below(len - HEADER_LEN + 1);
            buf.truncate(p);
            format!("cut at {p}")
        }
        _ => {
            let n = 2 + rng.below(3);
            let steps: Vec<String> = (0..n)
                .map(|_| {
                    if buf.len() <= HEADER_LEN + 1 {
                        buf.extend(rng.bytes(64));
                    }
                    mutate(rng, o, buf)
                })
                .collect();
            format!("[{}]", steps.join("; "))
        }
    }
}

/// Swaps two whole frames of the unchanged original (`buf` has its length).
fn swap_frames(rng: &mut Rng, o: &Original, buf: &mut Vec<u8>) -> String {
    let i = rng.below(o.frames.len() - 1);
    let j = i + 1 + rng.below(o.frames.len() - 1 - i);
    let (a, b) = (o.frames[i], o.frames[j]);
    let mut swapped = buf[..a.0].to_vec();
    swapped.extend_from_slice(o.frame_bytes(j));
    swapped.extend_from_slice(&buf[a.1..b.0]);
    swapped.extend_from_slice(o.frame_bytes(i));
    swapped.extend_from_slice(&buf[b.1..]);
    *buf = swapped;
    format!("swap frames {i} and {j}")
}

/// Overwrites the length field of one frame of the unchanged original with a near, absurd or
/// random value.
fn set_frame_length(rng: &mut Rng, o: &Original, buf: &mut [u8]) -> String {
    let i = rng.below(o.frames.len());
    let p = o.frames[i].0;
    let old = u32::from_le_bytes([buf[p], buf[p + 1], buf[p + 2], buf[p + 3]]);
    let new = match rng.below(6) {
        0 => rng.next() as u32,
        1 => old.wrapping_add(1 + rng.below(16) as u32),
        2 => old.wrapping_sub(1 + rng.below(16) as u32),
        3 => 0,
        4 => MAX_PAYLOAD_LEN as u32 + rng.below(2) as u32,
        _ => u32::MAX,
    };
    buf[p..p + 4].copy_from_slice(&new.to_le_bytes());
    format!("length of frame {i} at {p}: {old} -> {new}")
}

/// Reads `bytes` whole and as a stream (arriving in pieces of 1 to 97 bytes, resync windows of
/// a few bytes so that their steps are exercised): both must give the same traces or the same
/// error.
fn assert_stream_agrees(bytes: &[u8]) {
    struct Pieces<'a> {
        data: &'a [u8],
        rng: Rng,
    }
    impl std::io::Read for Pieces<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = (1 + self.rng.below(97)).min(buf.len()).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }
    let whole = tpuscope_core::read_traces(bytes);
    let seed = bytes.len() as u64;
    let streamed = TraceStream::new(
        Pieces {
            data: bytes,
            rng: Rng::new(seed),
        },
        "stream",
    )
    .and_then(|mut s| {
        s.set_scan_window(1 + (seed % 13) as usize);
        s.read_all(false)
    });
    match (whole, streamed) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.len(), b.len(), "segments");
            for (a, b) in a.iter().zip(&b) {
                assert_eq!(a.events, b.events, "events");
            }
            assert_same_tables(&a, &b, "streamed");
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        (a, b) => panic!(
            "whole {:?} but streamed {:?}",
            a.map(|t| t.len()),
            b.map(|t| t.len())
        ),
    }
}

/// Every event a piped skim hands out (as `tpuscope view` folds a file: transfers raw) reads
/// back from the offset of the frame of an event at most 3 before it (`stream::event_in`, as
/// the view reads a record back from the offset it noted), as the record the skim gave.
fn assert_read_back_agrees(bytes: &[u8]) {
    use tpuscope_core::stream::{Skimmed, event_in};
    let Ok(stream) = TraceStream::new(bytes, "bytes") else {
        return;
    };
    let mut seen: Vec<Vec<(u64, Record)>> = Vec::new();
    let read = stream.skim_piped(
        |k| k != RecordKind::Transfer,
        |segment, frame, r| {
            let r = match r {
                Skimmed::Decoded(r) => r,
                Skimmed::Raw(kind, payload) => match Record::decode_payload(kind, payload) {
                    Ok(r) => r,
                    Err(_) => match tpuscope_core::wire::TransferRef::parse(payload) {
                        Some(t) => Record::Transfer(Box::new(t.to_owned())),
                        None => return,
                    },
                },
            };
            if seen.len() <= segment {
                seen.resize_with(segment + 1, Vec::new);
            }
            seen[segment].push((frame, r));
        },
    );
    if read.is_err() {
        return;
    }
    for events in &seen {
        // The first event of each one's frame (a pack holds many), as a view notes its marks.
        let mut first = Vec::with_capacity(events.len());
        for (k, (frame, _)) in events.iter().enumerate() {
            let same = k > 0 && events[k - 1].0 == *frame;
            first.push(if same { first[k - 1] } else { k });
        }
        for (k, (_, r)) in events.iter().enumerate() {
            let mark = k - k % 4;
            let offset = events[mark].0;
            let skip = mark - first[mark] + k % 4;
            let back = event_in(&bytes[offset as usize..], offset, skip)
                .unwrap_or_else(|e| panic!("event {k} read back from {offset}: {e}"));
            assert_eq!(back.as_ref(), Some(r), "event {k} read back from {offset}");
        }
    }
}

/// Reading in chunks on several threads (`chunked::skim_chunked`, as `report` reads a long
/// file) hands out what one pass hands out, in order, each event with its frame's offset, and
/// ends with the same traces: with chunks smaller than a frame and a third of the input, so that
/// cuts fall inside headers, payloads and damage.
fn assert_chunked_agrees(bytes: &[u8]) {
    use tpuscope_core::chunked::skim_chunked;
    let decode = |k: RecordKind| k != RecordKind::Transfer;
    let (one_pass, plain) = one_pass(TraceStream::new(bytes, "bytes"), decode);
    let len = bytes.len() as u64;
    // One cut per input (the inputs vary): smaller than a frame (a few frames on a long input,
    // so that a mutant costs about what its reads cost), or a third of the input.
    let chunk = match len {
        _ if !len.is_multiple_of(2) => len / 3 + 1,
        ..2048 => 1 + len % 61,
        _ => len / 64 + len % 61,
    };
    let threads = 2 + (len % 3) as usize;
    let mut chunked: Seen = Vec::new();
    let read = skim_chunked(bytes, len, "bytes", threads, chunk, decode, |seg, f, r| {
        keep(&mut chunked, seg, f, r);
    });
    match (&one_pass, read) {
        (Ok(a), Ok(b)) => {
            assert_eq!(chunked, plain, "events in chunks of {chunk}");
            assert_same_tables(a, &b, &format!("chunks of {chunk}"));
        }
        (Err(_), Err(_)) => {}
        (a, b) => panic!(
            "one pass {:?} but chunks of {chunk} {:?}",
            a.as_ref().map(Vec::len),
            b.map(|t| t.len())
        ),
    }
}

/// The properties every mutant must have (see the module comment).
fn check_mutant(o: &Original, mutant: &[u8]) {
    assert_stream_agrees(mutant);
    assert_read_back_agrees(mutant);
    assert_chunked_agrees(mutant);
    let start = Instant::now();
    let result = read_trace(mutant);
    let elapsed = start.elapsed();
    assert!(
        elapsed <= time_bound(mutant.len()),
        "read_trace took {elapsed:?} for {} bytes",
        mutant.len()
    );
    let t = match result {
        Ok(t) => t,
        Err(e) => {
            assert!(
                mutant.get(..HEADER_LEN) != o.bytes.get(..HEADER_LEN),
                "header intact but read failed: {e}"
            );
            return;
        }
    };
    let (mut frames, mut records) = (0, 0);
    let mut last_end = t.header.len;
    for item in FrameIter::new(mutant, t.header.len) {
        match item {
            FrameItem::Frame(f) => {
                records += 1;
                assert!(
                    o.keys.contains(&(f.kind, f.flags, f.payload.to_vec())),
                    "invented record at {} (kind {}, {} bytes)",
                    f.offset,
                    f.kind,
                    f.payload.len()
                );
                // A pack's records share its frame.
                if f.entry == 0 {
                    frames += 1;
                    assert_eq!(f.offset as usize, last_end, "gap without damage");
                    last_end = f.end as usize;
                }
            }
            FrameItem::Damage(d) => {
                assert_eq!(
                    d.offset as usize, last_end,
                    "damage not where the last frame ended"
                );
                assert!(d.len > 0);
                last_end = (d.offset + d.len) as usize;
            }
            FrameItem::Truncated { offset } => {
                assert_eq!(offset as usize, last_end);
                last_end = mutant.len();
            }
        }
    }
    assert_eq!(
        last_end,
        mutant.len(),
        "frames, damage and cut cover the file"
    );
    assert!(frames <= mutant.len() / FRAME_HEADER_LEN);
    for r in &t.events {
        assert!(o.trace.events.contains(r), "invented record {r:?}");
    }
    for (id, text) in &t.strings {
        assert_eq!(o.trace.strings.get(id), Some(text), "string {id}");
    }
    for (id, s) in &t.stacks {
        assert_eq!(o.trace.stacks.get(id), Some(s), "stack {id}");
    }
    for (h, b) in &t.blobs {
        assert_eq!(o.trace.blobs.get(h), Some(b), "blob {h:x}");
    }
    if let Some(m) = &t.manifest {
        assert_eq!(Some(m), o.trace.manifest.as_ref());
    }
    assert!(t.unknown_records <= records as u64);
    assert_eq!(
        t.undecodable_records, 0,
        "a frame with a valid CRC did not decode"
    );
}

#[test]
fn mutations_only_lose_or_repeat_whole_records() {
    let seed = env_seed();
    let secs = env_secs();
    eprintln!("fuzz_reader: seed {seed} (TPUSCOPE_FUZZ_SEED={seed} replays), {secs} s");
    let originals = originals();
    let mut rng = Rng::new(seed);
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut iterations = 0u64;
    let mut bytes_read = 0u64;
    while Instant::now() < deadline {
        let o = &originals[rng.below(originals.len())];
        let mut buf = o.bytes.clone();
        let what = mutate(&mut rng, o, &mut buf);
        bytes_read += buf.len() as u64;
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| check_mutant(o, &buf))) {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            let path = std::env::temp_dir().join(format!("tpuscope-fuzz-{seed}-{iterations}.tps"));
            let saved = std::fs::write(&path, &buf).is_ok();
            panic!(
                "{}: iteration {iterations}, mutation {what}: {msg}\n\
                 replay: TPUSCOPE_FUZZ_SEED={seed}; mutant {}",
                o.name,
                if saved {
                    path.display().to_string()
                } else {
                    "not saved".into()
                }
            );
        }
        iterations += 1;
    }
    eprintln!("fuzz_reader: {iterations} mutants, {bytes_read} bytes read");
    assert!(iterations > 0);
}

/// A plausible frame header (known kind, flags 0, a length that fits) every 12 bytes, none with a
/// valid CRC: a resync that hashed each candidate's payload would take O(n²) (minutes here).
#[test]
fn resync_through_adversarial_headers_is_linear() {
    let size = 2 << 20;
    let mut bytes = format::encode_header(format::FORMAT_MAJOR, format::FORMAT_MINOR).to_vec();
    while bytes.len() < size {
        bytes.extend_from_slice(&((size / 2) as u32).to_le_bytes());
        bytes.extend_from_slice(&(RecordKind::Execute as u16).to_le_bytes());
        bytes.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    // A valid trace after the garbage must still be found.
    let tail = golden::committed(golden::ALL_KINDS);
    bytes.extend_from_slice(&tail[HEADER_LEN..]);
    let start = Instant::now();
    let t = read_trace(&bytes).unwrap_or_else(|e| panic!("{e}"));
    let elapsed = start.elapsed();
    assert!(elapsed < Duration::from_secs(30), "{elapsed:?}");
    assert_eq!(t.completeness, Completeness::Complete);
    assert_eq!(t.damage.len(), 1);
    let clean = read_trace(&tail).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.events, clean.events);
    eprintln!("adversarial 2 MB: {elapsed:?}");
}

/// A damaged length in the middle of a file must not end the read: the frames after it are found.
#[test]
fn overlong_length_mid_file_is_damage_not_a_cut() {
    let o = Original::load(golden::ALL_KINDS);
    let mut bytes = o.bytes.clone();
    let (p, _) = o.frames[5];
    bytes[p..p + 4].copy_from_slice(&(10u32 << 20).to_le_bytes());
    let t = read_trace(&bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.completeness, Completeness::Complete);
    assert_eq!(t.damage.len(), 1);
    assert_eq!(t.damage[0].offset as usize, p);
    assert_eq!(t.events, o.trace.events);
    assert_eq!(t.strings.len(), o.trace.strings.len() - 1);
}

/// A segment marker that does not decode is no marker, for a read back as for the reader: the
/// event after it is still the segment's (found by proptest in CI).
#[test]
fn an_undecodable_marker_does_not_end_a_read_back() {
    let mut bytes = format::encode_header(1, 0).to_vec();
    let complete = RecordKind::ExecuteComplete as u16;
    format::encode_frame(&mut bytes, complete, 0, &[]);
    format::encode_frame(&mut bytes, SEGMENT_KIND, 0, &[0]);
    format::encode_frame(&mut bytes, complete, 0, &[]);
    let t = read_trace(&bytes).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(t.events.len(), 2);
    assert_eq!(t.undecodable_records, 1);
    assert_read_back_agrees(&bytes);
}

fn check_arbitrary(bytes: &[u8]) {
    assert_stream_agrees(bytes);
    assert_read_back_agrees(bytes);
    assert_chunked_agrees(bytes);
    let start = Instant::now();
    if let Ok(t) = read_trace(bytes) {
        assert!(
            t.damage
                .iter()
                .all(|d| d.offset + d.len <= bytes.len() as u64)
        );
        for r in &t.events {
            // Every decoded record re-encodes (it came from a valid frame).
            let mut out = Vec::new();
            r.encode_payload(&mut out);
            assert!(Record::decode_payload(r.kind(), &out).is_ok());
        }
    }
    assert!(start.elapsed() <= time_bound(bytes.len()));
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        check_arbitrary(&bytes);
    }

    #[test]
    fn header_then_arbitrary_bytes_never_panic(
        major in 0u16..3,
        minor in any::<u16>(),
        header_len in prop_oneof![Just(16u32), 0u32..64, any::<u32>()],
        body in proptest::collection::vec(any::<u8>(), 0..4096),
    ) {
        let mut bytes = b"TPUSCOPE".to_vec();
        bytes.extend_from_slice(&major.to_le_bytes());
        bytes.extend_from_slice(&minor.to_le_bytes());
        bytes.extend_from_slice(&header_len.to_le_bytes());
        bytes.extend_from_slice(&body);
        check_arbitrary(&bytes);
    }

    #[test]
    fn frames_of_arbitrary_payloads_never_panic(
        frames in proptest::collection::vec(
            (0u16..40, proptest::collection::vec(any::<u8>(), 0..200)), 0..30),
    ) {
        // Valid frames (good CRCs) around arbitrary payloads: exercises the protobuf decoding.
        let mut bytes = format::encode_header(1, 0).to_vec();
        for (kind, payload) in &frames {
            format::encode_frame(&mut bytes, *kind, 0, payload);
        }
        check_arbitrary(&bytes);
        // Kind 32 starts a host segment of a merged file (1.1): known, and splits the trace.
        let all = tpuscope_core::read_traces(&bytes).unwrap_or_else(|e| panic!("{e}"));
        prop_assert!(all.iter().all(|t| t.damage.is_empty()));
        // Kind 35 is a pack (1.2): its records count one by one, those of kinds that may not
        // stand in a pack as unknown, and what does not parse as one more.
        let mut unknown = 0;
        for (kind, payload) in &frames {
            if *kind != format::PACK_KIND {
                unknown += usize::from(RecordKind::from_u16(*kind).is_none() && *kind != SEGMENT_KIND);
                continue;
            }
            // An empty pack is handed out as itself.
            unknown += usize::from(payload.is_empty());
            let mut rest = &payload[..];
            while !rest.is_empty() {
                let Some((k, _, after)) = format::pack_entry(rest) else {
                    unknown += 1;
                    break;
                };
                unknown += usize::from(!format::packable(k) || RecordKind::from_u16(k).is_none());
                rest = after;
            }
        }
        prop_assert_eq!(all.iter().map(|t| t.unknown_records as usize).sum::<usize>(), unknown);
    }

    #[test]
    fn packs_of_arbitrary_records_never_panic(
        packs in proptest::collection::vec(
            proptest::collection::vec(
                (0u16..40, proptest::collection::vec(any::<u8>(), 0..60)), 0..12),
            0..8),
        cut in any::<prop::sample::Index>(),
    ) {
        // Valid packs (1.2) of arbitrary records: exercises the records' decoding inside packs,
        // the readers' agreement on them (one pass, streamed, read back, chunked) and cuts.
        let mut bytes = format::encode_header(1, 2).to_vec();
        for records in &packs {
            let mut pack = Vec::new();
            for (kind, payload) in records {
                format::encode_pack_entry(&mut pack, *kind, payload);
            }
            format::encode_frame(&mut bytes, format::PACK_KIND, 0, &pack);
        }
        check_arbitrary(&bytes);
        let all = tpuscope_core::read_traces(&bytes).unwrap_or_else(|e| panic!("{e}"));
        // Nothing in a pack splits the trace or is damage; kinds that may not stand in one
        // count as unknown.
        prop_assert_eq!(all.len(), 1);
        prop_assert!(all[0].damage.is_empty());
        let unknown = packs
            .iter()
            .flatten()
            .filter(|(k, _)| !format::packable(*k) || RecordKind::from_u16(*k).is_none())
            .count()
            // An empty pack is handed out as itself.
            + packs.iter().filter(|p| p.is_empty()).count();
        prop_assert_eq!(all[0].unknown_records as usize, unknown);
        let cut = HEADER_LEN + cut.index(bytes.len() - HEADER_LEN + 1);
        check_arbitrary(&bytes[..cut]);
    }

    #[test]
    fn golden_with_arbitrary_edits_never_invents_records(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let o = Original::load(golden::ALL_KINDS);
        let mut bytes = o.bytes.clone();
        for (i, b) in &edits {
            let p = HEADER_LEN + i.index(bytes.len() - HEADER_LEN);
            bytes[p] = *b;
        }
        check_mutant(&o, &bytes);
    }
}
