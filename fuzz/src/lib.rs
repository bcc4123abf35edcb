//! What the fuzz targets share: an independent model of what a trace reader must recover (the
//! chain of valid frames from the header on), the checks of a decoded [`Trace`] against it, and
//! a tiny PRNG for input-derived choices (chunk sizes, cut points).
//!
//! The model needs no resynchronisation logic: from the header, frame after frame, as long as each
//! frame's length fits and its CRC checks, a reader has no choice — it must hand out exactly these
//! frames, in this order. What it does after the first bad byte (resync, damage) is checked only
//! for consistency (ranges inside the file, in order, never overlapping).

use std::collections::HashMap;

use tpuscope_core::event::{End, Manifest, RecordKind, SEGMENT_KIND};
use tpuscope_core::format::{self, FRAME_HEADER_LEN, HEADER_LEN, MAX_PAYLOAD_LEN};
use tpuscope_core::live::{BACKLOG_END_KIND, REFUSED_KIND};
use tpuscope_core::reader::{parse_header, parse_header_start};
use tpuscope_core::{Completeness, Record, Trace};

/// Where the chain of valid frames stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// At the end of the bytes, on a frame boundary.
    Eof,
    /// At this offset a frame is damaged or runs past the end.
    Broken(usize),
    /// At this offset a segment marker (merged file): the model stops there.
    Segment(usize),
}

/// What the chain of valid frames from the header holds.
#[derive(Debug, Default)]
pub struct Chain {
    pub header_len: usize,
    pub manifest: Option<Manifest>,
    pub strings: HashMap<u32, String>,
    pub stack_ids: Vec<u32>,
    pub blobs: HashMap<u64, Vec<u8>>,
    pub events: Vec<Record>,
    pub end: Option<End>,
    pub unknown: u64,
    pub undecodable: u64,
    /// Records that decoded (what `TraceBuilder::push` counts as absorbed).
    pub decoded: u64,
    /// Offsets where each frame ends, and how many events it held (a pack holds many; for
    /// prefix checks).
    pub frame_ends: Vec<(usize, usize)>,
    /// A valid frame of kind 0 (never written; `TraceBuilder` scans rather than waits for one).
    pub has_kind_zero: bool,
    /// A valid segment marker (only when segments are not split).
    pub has_segment: bool,
    /// The first frame is a manifest that decodes.
    pub first_is_manifest: bool,
    pub stop: Option<Stop>,
}

/// The model of `bytes` as a file reader sees it, or `None` when the header does not parse.
pub fn chain(bytes: &[u8]) -> Option<Chain> {
    chain_opts(bytes, true)
}

/// The model as a stream decoder (`TraceBuilder`) sees it: a segment marker is one more frame of
/// a kind it does not know.
pub fn stream_chain(bytes: &[u8]) -> Option<Chain> {
    chain_opts(bytes, false)
}

fn chain_opts(bytes: &[u8], split_segments: bool) -> Option<Chain> {
    let header = parse_header(bytes).ok()?;
    let mut c = Chain {
        header_len: header.len,
        ..Chain::default()
    };
    let mut pos = header.len;
    let stop = loop {
        if pos == bytes.len() {
            break Stop::Eof;
        }
        let rest = &bytes[pos..];
        let Some(h) = format::parse_frame_header(rest) else {
            break Stop::Broken(pos);
        };
        let len = h.len as usize;
        if len > MAX_PAYLOAD_LEN {
            break Stop::Broken(pos);
        }
        let Some(payload) = rest.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + len) else {
            break Stop::Broken(pos);
        };
        if format::frame_crc(h.kind, h.flags, payload) != h.crc {
            break Stop::Broken(pos);
        }
        if h.kind == SEGMENT_KIND && split_segments {
            break Stop::Segment(pos);
        }
        c.has_segment |= h.kind == SEGMENT_KIND;
        c.has_kind_zero |= h.kind == 0;
        pos += FRAME_HEADER_LEN + len;
        // A pack's records (1.2) in its place, each as a frame of its own would be: a kind that
        // may not stand in one, or what does not parse, counts as unknown (kind 0).
        let mut records: Vec<(u16, &[u8])> = Vec::new();
        if h.kind == format::PACK_KIND && len > 0 {
            let mut rest = payload;
            while !rest.is_empty() {
                match format::pack_entry(rest) {
                    Some((k, p, after)) => {
                        records.push((if format::packable(k) { k } else { 0 }, p));
                        rest = after;
                    }
                    None => {
                        records.push((0, rest));
                        rest = &[];
                    }
                }
            }
        } else {
            records.push((h.kind, payload));
        }
        let mut events = 0;
        for (kind, payload) in records {
            let mut is_event = false;
            match RecordKind::from_u16(kind) {
                None => c.unknown += 1,
                Some(kind) => match Record::decode_payload(kind, payload) {
                    Err(_) => c.undecodable += 1,
                    Ok(r) => {
                        c.decoded += 1;
                        match r {
                            Record::Manifest(m) => {
                                c.first_is_manifest |= c.frame_ends.is_empty();
                                if c.manifest.is_none() {
                                    c.manifest = Some(*m);
                                }
                            }
                            Record::StringDef(s) => {
                                c.strings.insert(s.id, s.text);
                            }
                            Record::StackDef(s) => c.stack_ids.push(s.id),
                            Record::Blob(b) => {
                                c.blobs.insert(b.hash, b.data);
                            }
                            Record::End(e) => c.end = Some(e),
                            other => {
                                is_event = true;
                                c.events.push(other);
                            }
                        }
                    }
                },
            }
            events += usize::from(is_event);
        }
        c.frame_ends.push((pos, events));
    };
    c.stop = Some(stop);
    Some(c)
}

/// Number of events among the chain's frames that end at or before `cut`.
pub fn events_before(c: &Chain, cut: usize) -> usize {
    c.frame_ends
        .iter()
        .take_while(|(end, _)| *end <= cut)
        .map(|(_, n)| n)
        .sum()
}

/// Checks a decoded trace of `bytes` against the model `c`; `who` names the decoder. `finished`:
/// the decoder was told the input ended (a live decoder that was not says `NoEndRecord` where a
/// finished one says `Cut`).
pub fn check_against_chain(t: &Trace, c: &Chain, bytes: &[u8], who: &str, finished: bool) {
    let len = bytes.len();
    // Always: what was read before the first bad byte is there, unchanged, first.
    assert!(
        t.events.len() >= c.events.len() && t.events[..c.events.len()] == c.events[..],
        "{who}: the {} events before the first bad byte are not the first ones read ({} read)",
        c.events.len(),
        t.events.len()
    );
    if let Some(m) = &c.manifest {
        assert_eq!(t.manifest.as_ref(), Some(m), "{who}: manifest");
    }
    // Damage is inside the body, in order, never overlapping, never empty.
    let mut prev_end = c.header_len as u64;
    for d in &t.damage {
        assert!(d.len > 0, "{who}: empty damage {d:?}");
        assert!(
            d.offset >= prev_end,
            "{who}: damage {d:?} overlaps or precedes {prev_end}"
        );
        prev_end = d.offset + d.len;
        assert!(
            prev_end <= len as u64,
            "{who}: damage {d:?} past the end ({len})"
        );
    }
    // A live trace's length is brought up to date as frames complete, not while a frame
    // arrives (TraceBuilder::push returns early then): at most what was received.
    match t.completeness {
        Completeness::Complete => assert!(t.end.is_some(), "{who}: complete without an end"),
        Completeness::NoEndRecord { file_len } if !finished => assert!(
            file_len <= len as u64,
            "{who}: file_len {file_len} of {len} bytes"
        ),
        Completeness::NoEndRecord { file_len } => {
            assert_eq!(file_len, len as u64, "{who}: file_len")
        }
        Completeness::Cut { offset, file_len } => {
            assert_eq!(file_len, len as u64, "{who}: file_len");
            assert!(
                (c.header_len as u64..=len as u64).contains(&offset),
                "{who}: cut at {offset} outside the body"
            );
        }
    }
    let exact = !matches!(c.stop, Some(Stop::Segment(_))) && t.damage.is_empty();
    if !exact {
        return;
    }
    // No damage: the reader found nothing after the chain, so it read exactly the chain.
    assert_eq!(t.events, c.events, "{who}: events of a clean chain");
    assert_eq!(t.strings, c.strings, "{who}: strings");
    let mut ids: Vec<u32> = t.stacks.keys().copied().collect();
    ids.sort_unstable();
    let mut want = c.stack_ids.clone();
    want.sort_unstable();
    want.dedup();
    assert_eq!(ids, want, "{who}: stack ids");
    assert_eq!(t.blobs.len(), c.blobs.len(), "{who}: blob count");
    for (h, data) in &c.blobs {
        assert_eq!(
            t.blobs.get(h).map(|b| &b.data),
            Some(data),
            "{who}: blob {h:x}"
        );
    }
    assert_eq!(t.end, c.end, "{who}: end record");
    assert_eq!(t.unknown_records, c.unknown, "{who}: unknown records");
    assert_eq!(
        t.undecodable_records, c.undecodable,
        "{who}: undecodable records"
    );
    let expected = match c.stop {
        Some(Stop::Broken(p)) if finished => Completeness::Cut {
            offset: p as u64,
            file_len: len as u64,
        },
        _ if !finished => {
            let complete = t.completeness == Completeness::Complete;
            assert_eq!(
                complete,
                c.end.is_some(),
                "{who}: complete iff an end record"
            );
            t.completeness.clone()
        }
        _ if c.end.is_some() => Completeness::Complete,
        _ => Completeness::NoEndRecord {
            file_len: len as u64,
        },
    };
    assert_eq!(t.completeness, expected, "{who}: completeness");
}

/// Field-by-field equality of two decoded traces (`Trace` has no `PartialEq`).
pub fn assert_same_trace(a: &Trace, b: &Trace, what: &str) {
    assert_eq!(a.header, b.header, "{what}: header");
    assert_eq!(a.manifest, b.manifest, "{what}: manifest");
    assert_eq!(a.client, b.client, "{what}: client");
    assert_eq!(a.strings, b.strings, "{what}: strings");
    assert_eq!(a.stacks, b.stacks, "{what}: stacks");
    assert_eq!(a.blobs, b.blobs, "{what}: blobs");
    assert_eq!(a.events, b.events, "{what}: events");
    assert_eq!(a.end, b.end, "{what}: end");
    assert_eq!(a.damage, b.damage, "{what}: damage");
    assert_eq!(a.unknown_records, b.unknown_records, "{what}: unknown");
    assert_eq!(
        a.undecodable_records, b.undecodable_records,
        "{what}: undecodable"
    );
    assert_eq!(a.completeness, b.completeness, "{what}: completeness");
    assert_eq!(a.segment, b.segment, "{what}: segment");
}

/// FNV-1a: a cheap input-derived number (cut points), stable across runs.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// xorshift64*: chunk sizes from a seed the input carries.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// In `1..=n`.
    pub fn size(&mut self, n: usize) -> usize {
        1 + (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// How a live stream ends, by the rules of `core::live` (a collector sends whole frames read
/// back from its own file, each checked; control frames from kind 256 up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveEnd {
    /// Everything so far is well formed (the last frame may be incomplete).
    Clean,
    /// Something no collector sends: a bad header, a frame of kind 0, too long, or failing its
    /// CRC, an end-of-backlog mark that does not say where it stands.
    Bad,
    /// The process refused the viewer.
    Refused,
}

/// Kinds from here up are live-stream control frames.
const CONTROL_KINDS: u16 = 256;
/// Largest control frame payload, and largest header, a live decoder accepts.
const MAX_CONTROL_LEN: usize = 4096;
const MAX_LIVE_HEADER: usize = 4096;

/// A model of a live stream: the trace bytes it carries (control frames taken out; a partial frame
/// header left out, a partial payload kept, as the decoder passes them on), how it ends, and
/// where the last end-of-backlog mark stands.
#[derive(Debug)]
pub struct LiveModel {
    pub trace_bytes: Vec<u8>,
    pub end: LiveEnd,
    pub backlog_end: Option<u64>,
    /// End-of-backlog marks in the stream.
    pub backlog_marks: usize,
}

pub fn live_model(stream: &[u8]) -> LiveModel {
    let mut m = LiveModel {
        trace_bytes: Vec::new(),
        end: LiveEnd::Clean,
        backlog_end: None,
        backlog_marks: 0,
    };
    let Some(head) = stream.get(..HEADER_LEN) else {
        m.trace_bytes = stream.to_vec();
        return m;
    };
    let h = match parse_header_start(head) {
        Ok(h) if h.len <= MAX_LIVE_HEADER => h,
        _ => {
            m.end = LiveEnd::Bad;
            return m;
        }
    };
    if stream.len() < h.len {
        m.trace_bytes = stream.to_vec();
        return m;
    }
    m.trace_bytes = stream[..h.len].to_vec();
    let mut pos = h.len;
    while let Some(fh) = stream.get(pos..).and_then(format::parse_frame_header) {
        let len = fh.len as usize;
        let control = fh.kind >= CONTROL_KINDS;
        let max = if control {
            MAX_CONTROL_LEN
        } else {
            MAX_PAYLOAD_LEN
        };
        if len > max || fh.kind == 0 {
            m.end = LiveEnd::Bad;
            return m;
        }
        let Some(payload) = stream.get(pos + FRAME_HEADER_LEN..pos + FRAME_HEADER_LEN + len) else {
            if !control {
                m.trace_bytes.extend_from_slice(&stream[pos..]);
            }
            return m;
        };
        if format::frame_crc(fh.kind, fh.flags, payload) != fh.crc {
            m.end = LiveEnd::Bad;
            return m;
        }
        match fh.kind {
            BACKLOG_END_KIND => {
                let said = payload
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes);
                if said != Some(m.trace_bytes.len() as u64) {
                    m.end = LiveEnd::Bad;
                    return m;
                }
                m.backlog_end = Some(pos as u64);
                m.backlog_marks += 1;
            }
            REFUSED_KIND => {
                m.end = LiveEnd::Refused;
                return m;
            }
            k if k >= CONTROL_KINDS => {}
            _ => m
                .trace_bytes
                .extend_from_slice(&stream[pos..pos + FRAME_HEADER_LEN + len]),
        }
        pos += FRAME_HEADER_LEN + len;
    }
    m
}

/// A `Read` that hands out its bytes in pieces of input-derived sizes, as a pipe or FIFO does.
pub struct Pieces<'a> {
    data: &'a [u8],
    pos: usize,
    rng: Rng,
    max: usize,
}

impl<'a> Pieces<'a> {
    pub fn new(data: &'a [u8], seed: u64, max: usize) -> Pieces<'a> {
        Pieces {
            data,
            pos: 0,
            rng: Rng::new(seed),
            max,
        }
    }
}

impl std::io::Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self
            .rng
            .size(self.max)
            .min(buf.len())
            .min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
