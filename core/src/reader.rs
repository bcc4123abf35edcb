//! Reads traces: recovers every complete record of a file cut at any byte, skips unknown record
//! kinds, resynchronises after damaged bytes, and never panics on arbitrary input.

use std::collections::HashMap;
use std::path::Path;

use crate::event::{
    Blob, Client, End, Manifest, Record, RecordKind, SEGMENT_KIND, Segment, StackDef, StringId,
};
use crate::format::{self, FRAME_HEADER_LEN, HEADER_LEN, MAX_PAYLOAD_LEN};

/// Why a file cannot be read as a trace at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The OS error is part of the message (not a `source`), so a chain prints it once.
    #[error("{path}: cannot read: {err}")]
    Io { path: String, err: std::io::Error },
    #[error("not a tpuscope trace (no TPUSCOPE header)")]
    NotATrace,
    /// The magic is there but the rest of the header is not usable.
    #[error("damaged tpuscope header: {0}")]
    DamagedHeader(String),
    #[error(
        "trace format version {major}.{minor} is newer than this tpuscope understands ({supported}.x); upgrade tpuscope"
    )]
    NewerVersion {
        major: u16,
        minor: u16,
        supported: u16,
    },
}

impl ReadError {
    /// The one line a user reads for input `path`: the path named once (an I/O error names it
    /// already), then why.
    pub fn line(&self, path: &Path) -> String {
        match self {
            Self::Io { .. } => self.to_string(),
            other => format!("{}: {other}", path.display()),
        }
    }
}

/// The parsed file header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub major: u16,
    pub minor: u16,
    /// Offset of the first frame.
    pub len: usize,
}

/// Checks the header of `bytes` (the whole file, or at least its header).
pub fn parse_header(bytes: &[u8]) -> Result<Header, ReadError> {
    let header = parse_header_start(bytes)?;
    if header.len > bytes.len() {
        return Err(header_past_end(header.len, bytes.len() as u64));
    }
    Ok(header)
}

/// Checks the fixed 16 bytes of a header, without the rule that the frames start within the
/// file (a stream checks that once it has read `len` bytes).
pub fn parse_header_start(bytes: &[u8]) -> Result<Header, ReadError> {
    if bytes.get(..8) != Some(&format::MAGIC[..]) {
        return Err(ReadError::NotATrace);
    }
    let (Some(major), Some(minor), Some(len)) = (
        bytes
            .get(8..10)
            .and_then(|b| b.try_into().ok())
            .map(u16::from_le_bytes),
        bytes
            .get(10..12)
            .and_then(|b| b.try_into().ok())
            .map(u16::from_le_bytes),
        bytes
            .get(12..16)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes),
    ) else {
        return Err(ReadError::DamagedHeader(format!(
            "the file ends inside the header ({} of {HEADER_LEN} bytes)",
            bytes.len()
        )));
    };
    if major > format::FORMAT_MAJOR {
        return Err(ReadError::NewerVersion {
            major,
            minor,
            supported: format::FORMAT_MAJOR,
        });
    }
    if major == 0 {
        return Err(ReadError::DamagedHeader(format!(
            "version field {major}.{minor} (major 0 is never written)"
        )));
    }
    let len = len as usize;
    if len < HEADER_LEN {
        return Err(ReadError::DamagedHeader(format!(
            "header length field {len} (at least {HEADER_LEN})"
        )));
    }
    Ok(Header { major, minor, len })
}

pub(crate) fn header_past_end(len: usize, file_len: u64) -> ReadError {
    ReadError::DamagedHeader(format!(
        "header length field {len} runs past the end of the file ({file_len} bytes)"
    ))
}

/// While resynchronising, frames with kinds or flags beyond these are not considered (v1 writers
/// write flags 0 and kinds below 32); kind 0 is never written.
pub(crate) const RESYNC_MAX_KIND: u16 = 1024;
pub(crate) const RESYNC_MAX_FLAGS: u16 = 256;
/// Longest payload a resynchronisation finds: a streaming reader then looks at most this far
/// ahead of a candidate offset, so skipping damage holds a bounded window in memory (see
/// docs/trace-format.md section 9). Frames read in order (no damage before them) may be as long
/// as [`MAX_PAYLOAD_LEN`].
pub const RESYNC_MAX_PAYLOAD: usize = 16 << 20;

/// One frame whose CRC checked, or one record of a pack (whose CRC checked) as a frame of its
/// own: readers hand out a pack's records in order, never the pack.
#[derive(Clone, Copy, Debug)]
pub struct RawFrame<'a> {
    /// Where its frame (the pack, for a record of one) starts.
    pub offset: u64,
    /// Where that frame ends.
    pub end: u64,
    /// Its place in its pack (0 for a frame of its own): the records of one pack share
    /// `offset` and `end`, and the first (`entry` 0) stands for the frame.
    pub entry: u32,
    pub kind: u16,
    pub flags: u16,
    pub payload: &'a [u8],
}

/// A stretch of bytes that held no valid frame; the reader skipped it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    pub offset: u64,
    pub len: u64,
}

/// Item of [`FrameIter`].
#[derive(Clone, Debug)]
pub enum FrameItem<'a> {
    Frame(RawFrame<'a>),
    /// Damaged bytes skipped before the next valid frame.
    Damage(Damage),
    /// The file ends inside a frame (or inside damage with no later valid frame): a cut.
    Truncated {
        offset: u64,
    },
}

/// What lies at an offset.
enum Probe<'a> {
    Valid(RawFrame<'a>),
    /// A header whose length is out of range or whose CRC does not match.
    Invalid,
    /// The header, or the payload it announces, runs past the end of the bytes.
    Overrun,
}

/// Payloads up to this length are checked by hashing them; longer ones through [`RangeCrc`] once
/// damage has been seen.
pub(crate) const DIRECT_CRC_MAX: usize = 2 * RangeCrc::STRIDE;

/// Iterates the frames of a trace body.
///
/// Runs in time linear in the input whatever it holds: a valid frame is hashed once, and while
/// resynchronising, each candidate offset costs O(1) — its CRC is derived from running CRCs
/// recorded every [`RangeCrc::STRIDE`] bytes instead of hashing its (possibly huge) payload.
pub struct FrameIter<'a> {
    bytes: &'a [u8],
    pos: usize,
    done: bool,
    /// Built at the first damage, from there to the end of the bytes.
    range: Option<RangeCrc>,
    /// The pack whose records are being handed out (start, end), the next record's place in
    /// it, and its records not handed out yet.
    pack: Option<((u64, u64), u32, &'a [u8])>,
}

impl<'a> FrameIter<'a> {
    /// `start` is the offset of the first frame (the header length).
    pub fn new(bytes: &'a [u8], start: usize) -> Self {
        FrameIter {
            bytes,
            pos: start,
            done: false,
            range: None,
            pack: None,
        }
    }

    fn probe(&self, pos: usize) -> Probe<'a> {
        let rest = self.bytes.get(pos..).unwrap_or(&[]);
        let Some(h) = format::parse_frame_header(rest) else {
            return Probe::Overrun;
        };
        let len = h.len as usize;
        if len > MAX_PAYLOAD_LEN {
            return Probe::Invalid;
        }
        let Some(payload) = rest.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + len) else {
            return Probe::Overrun;
        };
        let crc = match &self.range {
            Some(r) if len > DIRECT_CRC_MAX && pos >= r.base => {
                r.frame_crc(self.bytes, h.kind, h.flags, pos + FRAME_HEADER_LEN, len)
            }
            _ => format::frame_crc(h.kind, h.flags, payload),
        };
        if crc != h.crc {
            return Probe::Invalid;
        }
        Probe::Valid(RawFrame {
            offset: pos as u64,
            end: (pos + FRAME_HEADER_LEN + len) as u64,
            entry: 0,
            kind: h.kind,
            flags: h.flags,
            payload,
        })
    }

    /// Next offset at or after `from` where a valid frame starts, if any.
    fn resync(&mut self, from: usize) -> Option<usize> {
        find_frame(self.bytes, from, usize::MAX, &mut self.range)
    }
}

/// Record `entry` of the pack that spans `frame` (its start and end), from `rest`, its records
/// not handed out yet (not empty); and what follows it. A record of a kind that may not stand
/// in a pack, or one that does not parse (then with the rest of the pack), goes out as kind 0,
/// which readers count as unknown.
#[inline]
pub(crate) fn pack_record(frame: (u64, u64), entry: u32, rest: &[u8]) -> (RawFrame<'_>, &[u8]) {
    let (kind, payload, after) = match format::pack_entry(rest) {
        Some((kind, payload, after)) if format::packable(kind) => (kind, payload, after),
        Some((_, payload, after)) => (0, payload, after),
        None => (0, rest, &[][..]),
    };
    let f = RawFrame {
        kind,
        payload,
        ..pack_frame(frame, entry)
    };
    (f, after)
}

/// Record `entry` of the pack that spans `frame`, its kind and payload yet to be filled in.
#[inline]
pub(crate) fn pack_frame(frame: (u64, u64), entry: u32) -> RawFrame<'static> {
    RawFrame {
        offset: frame.0,
        end: frame.1,
        entry,
        kind: 0,
        flags: 0,
        payload: &[],
    }
}

/// First offset in `from..from + count` of `bytes` where a frame passes the resync screen and its
/// CRC (the rule both readers resync by). Kind, flags and length are screened first so that few
/// offsets cost a CRC; a long candidate's CRC comes from `range` (running CRCs from the first
/// damage, built once), so each costs O(1).
pub(crate) fn find_frame(
    bytes: &[u8],
    from: usize,
    count: usize,
    range: &mut Option<RangeCrc>,
) -> Option<usize> {
    let end = (bytes.len() + 1)
        .saturating_sub(FRAME_HEADER_LEN)
        .min(from.saturating_add(count));
    (from..end).find(|&p| {
        let Some(h) = bytes.get(p..p + FRAME_HEADER_LEN) else {
            return false;
        };
        // Flags < 256 and kind < 1024 (bytes 7 and 5 of a header) first: one or two compares
        // reject most offsets of garbage.
        if h[7] != 0 || h[5] >= 4 || h[4] | h[5] == 0 {
            return false;
        }
        let Some(h) = format::parse_frame_header(h) else {
            return false;
        };
        if h.kind == 0 || h.kind >= RESYNC_MAX_KIND || h.flags >= RESYNC_MAX_FLAGS {
            return false;
        }
        let len = h.len as usize;
        if len > RESYNC_MAX_PAYLOAD || len > bytes.len() - p - FRAME_HEADER_LEN {
            return false;
        }
        let start = p + FRAME_HEADER_LEN;
        let crc = match range {
            Some(r) if len > DIRECT_CRC_MAX && start >= r.base => {
                r.frame_crc(bytes, h.kind, h.flags, start, len)
            }
            None if len > DIRECT_CRC_MAX => range
                .insert(RangeCrc::new(bytes, from))
                .frame_crc(bytes, h.kind, h.flags, start, len),
            _ => format::frame_crc(h.kind, h.flags, &bytes[start..start + len]),
        };
        crc == h.crc
    })
}

impl<'a> Iterator for FrameIter<'a> {
    type Item = FrameItem<'a>;

    fn next(&mut self) -> Option<FrameItem<'a>> {
        if let Some((frame, entry, rest)) = self.pack.take()
            && !rest.is_empty()
        {
            let (f, rest) = pack_record(frame, entry, rest);
            self.pack = Some((frame, entry + 1, rest));
            return Some(FrameItem::Frame(f));
        }
        if self.done || self.pos >= self.bytes.len() {
            return None;
        }
        match self.probe(self.pos) {
            // Its records in its place. (An empty pack goes out as itself, an unknown record: a
            // reader hands out an item for each frame.)
            Probe::Valid(f) if f.kind == format::PACK_KIND && !f.payload.is_empty() => {
                self.pos += FRAME_HEADER_LEN + f.payload.len();
                self.pack = Some(((f.offset, f.end), 0, f.payload));
                self.next()
            }
            Probe::Valid(f) => {
                self.pos += FRAME_HEADER_LEN + f.payload.len();
                Some(FrameItem::Frame(f))
            }
            // An overrun is normally a frame cut by the end of the file (a killed writer), but a
            // damaged length looks the same: only if no valid frame follows is it a cut.
            Probe::Invalid | Probe::Overrun => match self.resync(self.pos + 1) {
                Some(next) => {
                    let d = Damage {
                        offset: self.pos as u64,
                        len: (next - self.pos) as u64,
                    };
                    self.pos = next;
                    Some(FrameItem::Damage(d))
                }
                None => {
                    self.done = true;
                    Some(FrameItem::Truncated {
                        offset: self.pos as u64,
                    })
                }
            },
        }
    }
}

/// CRC-32 of arbitrary ranges of a byte string in O(1) after one linear pass.
///
/// CRC-32 is affine over GF(2): `crc(A ‖ B) = crc(A)·x^(8|B|) ⊕ crc(B)` (mod the CRC polynomial,
/// with the standard pre- and post-inversion cancelling out). So with `C(i)` the CRC of
/// `bytes[base..i]`, the CRC of `bytes[a..e]` is `C(e) ⊕ C(a)·x^(8(e-a))`. `C` is kept every
/// `STRIDE` bytes and completed by hashing at most `STRIDE` bytes; the power of `x` comes from
/// a table of byte digits of the exponent.
pub(crate) struct RangeCrc {
    base: usize,
    /// `marks[i]` = CRC of `bytes[base .. base + i * STRIDE]`.
    marks: Vec<u32>,
    /// `pow[j][d]` = x^(8 · d · 256^j) mod P.
    pow: &'static [[u32; 256]; 4],
}

/// The reflected IEEE polynomial, as crc32fast uses it.
const CRC_POLY: u32 = 0xEDB8_8320;
/// x^0 in the reflected representation.
const X0: u32 = 1 << 31;

/// Product of two polynomials mod P, both in the reflected representation.
fn mul_mod_p(a: u32, mut b: u32) -> u32 {
    let mut m = X0;
    let mut p = 0;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        m >>= 1;
        b = if b & 1 != 0 {
            (b >> 1) ^ CRC_POLY
        } else {
            b >> 1
        };
    }
    p
}

impl RangeCrc {
    const STRIDE: usize = 256;

    pub(crate) fn new(bytes: &[u8], base: usize) -> Self {
        let tail = bytes.get(base..).unwrap_or(&[]);
        let mut marks = Vec::with_capacity(tail.len() / Self::STRIDE + 1);
        marks.push(0);
        let mut h = crc32fast::Hasher::new();
        for chunk in tail.chunks_exact(Self::STRIDE) {
            h.update(chunk);
            marks.push(h.clone().finalize());
        }
        // The same for every instance; a streaming reader builds one per window.
        static POW: std::sync::OnceLock<[[u32; 256]; 4]> = std::sync::OnceLock::new();
        let pow = POW.get_or_init(|| {
            let mut pow = [[X0; 256]; 4];
            let mut unit = X0 >> 8; // x^8: one byte
            for row in pow.iter_mut() {
                for d in 1..256 {
                    row[d] = mul_mod_p(row[d - 1], unit);
                }
                unit = mul_mod_p(row[255], unit);
            }
            pow
        });
        RangeCrc { base, marks, pow }
    }

    /// x^(8n) mod P.
    fn shift(&self, n: usize) -> u32 {
        let n = n as u32; // payloads are < 2^32 bytes
        let mut p = self.pow[0][(n & 0xff) as usize];
        for (j, row) in self.pow.iter().enumerate().skip(1) {
            let d = ((n >> (8 * j)) & 0xff) as usize;
            if d != 0 {
                p = mul_mod_p(p, row[d]);
            }
        }
        p
    }

    /// CRC of `bytes[base..pos]`, `base <= pos <= bytes.len()`.
    fn crc_to(&self, bytes: &[u8], pos: usize) -> u32 {
        let off = pos.saturating_sub(self.base);
        let i = (off / Self::STRIDE).min(self.marks.len().saturating_sub(1));
        let mark = self.marks.get(i).copied().unwrap_or(0);
        let from = self.base + i * Self::STRIDE;
        let mut h = crc32fast::Hasher::new_with_initial(mark);
        h.update(bytes.get(from..pos).unwrap_or(&[]));
        h.finalize()
    }

    /// The CRC [`format::frame_crc`] computes for a frame whose payload is `bytes[start..start+len]`.
    pub(crate) fn frame_crc(
        &self,
        bytes: &[u8],
        kind: u16,
        flags: u16,
        start: usize,
        len: usize,
    ) -> u32 {
        let head = format::frame_crc(kind, flags, &[]);
        let x = self.shift(len);
        let payload = self.crc_to(bytes, start + len) ^ mul_mod_p(self.crc_to(bytes, start), x);
        mul_mod_p(head, x) ^ payload
    }
}

/// How complete a trace is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completeness {
    /// The collector wrote its end record.
    Complete,
    /// No end record, but the last frame is whole: the process died between records, or is still
    /// writing.
    NoEndRecord { file_len: u64 },
    /// The file ends inside a frame at `offset`: everything before it was recovered.
    Cut { offset: u64, file_len: u64 },
}

/// A whole trace, decoded.
#[derive(Clone, Debug)]
pub struct Trace {
    pub header: Header,
    /// The run manifest (the first record), when it survived.
    pub manifest: Option<Manifest>,
    /// The first client-creation record (platform, devices).
    pub client: Option<Client>,
    pub strings: HashMap<StringId, String>,
    pub stacks: HashMap<u32, StackDef>,
    pub blobs: HashMap<u64, Blob>,
    /// Event records in file order (definitions, blobs and the manifest are in the maps above).
    pub events: Vec<Record>,
    pub end: Option<End>,
    pub damage: Vec<Damage>,
    /// Frames whose kind this reader does not know (written by a newer minor), skipped.
    pub unknown_records: u64,
    /// Frames with a valid CRC whose payload did not decode.
    pub undecodable_records: u64,
    pub completeness: Completeness,
    /// In a merged job file, which host's segment this is and its place on the job timeline
    /// (`None` for a plain trace).
    pub segment: Option<Segment>,
}

impl Trace {
    /// The text of an interned string ("" for id 0 or an unknown id).
    pub fn string(&self, id: StringId) -> &str {
        self.strings.get(&id).map(String::as_str).unwrap_or("")
    }

    /// Whether recording stopped before the process ended, and why: the last
    /// `RecordingStopped` record (the one written at exit carries what was not recorded).
    pub fn recording_stopped(&self) -> Option<&crate::event::RecordingStopped> {
        self.events.iter().rev().find_map(|r| match r {
            Record::RecordingStopped(s) => Some(s),
            _ => None,
        })
    }
}

/// Decodes a whole trace held in memory. For a merged job file (several segments, see
/// [`read_traces`]) this is the first segment.
pub fn read_trace(bytes: &[u8]) -> Result<Trace, ReadError> {
    let mut traces = read_segments(bytes, true)?;
    // `read_segments` always yields at least one trace.
    Ok(traces.swap_remove(0))
}

/// Decodes a trace held in memory into one [`Trace`] per segment: a plain trace gives one, a
/// merged job file (`tpuscope merge`) one per host, each with its [`Trace::segment`].
pub fn read_traces(bytes: &[u8]) -> Result<Vec<Trace>, ReadError> {
    read_segments(bytes, false)
}

fn empty_trace(header: Header, file_len: u64, segment: Option<Segment>) -> Trace {
    Trace {
        header,
        manifest: None,
        client: None,
        strings: HashMap::new(),
        stacks: HashMap::new(),
        blobs: HashMap::new(),
        events: Vec::new(),
        end: None,
        damage: Vec::new(),
        unknown_records: 0,
        undecodable_records: 0,
        completeness: Completeness::NoEndRecord { file_len },
        segment,
    }
}

/// Completeness of a finished segment from its own end record and what the merge noted of its
/// source; `end_offset` is where the segment's frames end in the file.
fn segment_completeness(t: &Trace, end_offset: u64, file_len: u64) -> Completeness {
    let source_cut = t
        .segment
        .as_ref()
        .is_some_and(|s| s.source_completeness == "cut");
    match (source_cut, &t.end) {
        (true, _) => Completeness::Cut {
            offset: end_offset,
            file_len,
        },
        (false, Some(_)) => Completeness::Complete,
        (false, None) => Completeness::NoEndRecord { file_len },
    }
}

fn read_segments(bytes: &[u8], first_only: bool) -> Result<Vec<Trace>, ReadError> {
    let header = parse_header(bytes)?;
    let file_len = bytes.len() as u64;
    let mut asm = Assembler::new(header, true);
    // Only a hint: crafted input can announce far more frames than it holds records, so a
    // reservation the allocator refuses is simply skipped.
    let _ = asm
        .trace
        .events
        .try_reserve(count_frames(bytes, header.len));
    let mut done = Vec::new();
    for item in FrameIter::new(bytes, header.len) {
        match asm.feed(item, first_only, file_len) {
            Fed::Nothing | Fed::Event(_) | Fed::Raw(..) => {}
            Fed::SegmentDone(t) => done.push(*t),
            Fed::Stop => break,
        }
    }
    done.push(asm.finish(file_len));
    Ok(done)
}

/// What [`Assembler::feed`] made of an item.
pub(crate) enum Fed<'a> {
    /// Absorbed (a definition, the manifest, damage…), or nothing to do.
    Nothing,
    /// An event record, handed to the caller (the assembler does not keep events).
    Event(Record),
    /// An event record of a kind the caller did not want decoded: its payload, CRC checked.
    Raw(RecordKind, &'a [u8]),
    /// A segment marker ended the previous segment: here it is, finished.
    SegmentDone(Box<Trace>),
    /// Only the first segment was wanted and the next one starts: call `finish`.
    Stop,
}

/// Turns frame items into traces, one per segment: definitions, the manifest, blobs, damage and
/// completeness go into the current [`Trace`]; event records are kept in it or handed out.
pub(crate) struct Assembler {
    header: Header,
    pub(crate) trace: Trace,
    keep_events: bool,
    /// Which event kinds are decoded when events are handed out; the others go out raw.
    pub(crate) decode: fn(RecordKind) -> bool,
    cut: Option<u64>,
    /// End of the last frame or damage range.
    pos: u64,
    frames_in_segment: u64,
}

impl Assembler {
    pub(crate) fn new(header: Header, keep_events: bool) -> Assembler {
        Assembler {
            header,
            trace: empty_trace(header, 0, None),
            keep_events,
            decode: |_| true,
            cut: None,
            pos: header.len as u64,
            frames_in_segment: 0,
        }
    }

    /// `file_len`: the length of the input as far as known (a finished segment's completeness
    /// names it).
    pub(crate) fn feed<'a>(
        &mut self,
        item: FrameItem<'a>,
        first_only: bool,
        file_len: u64,
    ) -> Fed<'a> {
        match item {
            FrameItem::Frame(f) if f.kind == SEGMENT_KIND => {
                let Ok(seg) = <Segment as prost::Message>::decode(f.payload) else {
                    self.trace.undecodable_records += 1;
                    return Fed::Nothing;
                };
                let mut fed = Fed::Nothing;
                // Same rule as `tpuscope merge` splits by: a marker after any frame starts a
                // new segment.
                if self.trace.segment.is_some() || self.frames_in_segment > 0 {
                    if first_only {
                        return Fed::Stop;
                    }
                    let next = empty_trace(self.header, file_len, Some(seg));
                    let mut prev = std::mem::replace(&mut self.trace, next);
                    prev.completeness = segment_completeness(&prev, f.offset, file_len);
                    fed = Fed::SegmentDone(Box::new(prev));
                } else {
                    self.trace.segment = Some(seg);
                }
                self.frames_in_segment = 0;
                self.pos = f.end;
                fed
            }
            FrameItem::Frame(f) => {
                self.pos = f.end;
                self.frames_in_segment += 1;
                let Some(kind) = RecordKind::from_u16(f.kind) else {
                    self.trace.unknown_records += 1;
                    return Fed::Nothing;
                };
                if !self.keep_events && left_raw(kind, self.decode) {
                    return Fed::Raw(kind, f.payload);
                }
                // Most records are events: handed on without a look at the tables.
                let event = match Record::decode_payload(kind, f.payload) {
                    Ok(r) if absorbs(kind) => absorb(&mut self.trace, r),
                    Ok(r) => Some(r),
                    Err(_) => {
                        self.trace.undecodable_records += 1;
                        return Fed::Nothing;
                    }
                };
                match event {
                    Some(event) if self.keep_events => {
                        self.trace.events.push(event);
                        Fed::Nothing
                    }
                    Some(event) => Fed::Event(event),
                    None => Fed::Nothing,
                }
            }
            FrameItem::Damage(d) => {
                self.pos = d.offset + d.len;
                self.trace.damage.push(d);
                Fed::Nothing
            }
            FrameItem::Truncated { offset } => {
                self.cut = Some(offset);
                Fed::Nothing
            }
        }
    }

    /// An event frame ending at `end` that was taken (decoded or raw, as `decode` asks) without
    /// being fed: what [`Assembler::feed`] notes of one.
    pub(crate) fn took_event(&mut self, end: u64) {
        self.pos = end;
        self.frames_in_segment += 1;
    }

    /// The last (or only wanted) segment, with its completeness.
    pub(crate) fn finish(mut self, file_len: u64) -> Trace {
        self.trace.completeness = match (self.cut, &self.trace.end) {
            (Some(offset), _) => Completeness::Cut { offset, file_len },
            _ => segment_completeness(&self.trace, self.pos, file_len),
        };
        self.trace
    }
}

/// Sets the input length in a finished segment's completeness (a stream learns it at its end).
pub(crate) fn set_file_len(t: &mut Trace, len: u64) {
    match &mut t.completeness {
        Completeness::Complete => {}
        Completeness::NoEndRecord { file_len } | Completeness::Cut { file_len, .. } => {
            *file_len = len;
        }
    }
}

/// Number of frames along the chain of lengths from `start`, without checking CRCs: a cheap
/// estimate of the event count (definitions and blobs are counted too) so that the event vector
/// of a clean trace is allocated once rather than grown by copying.
fn count_frames(bytes: &[u8], start: usize) -> usize {
    let mut pos = start;
    let mut n = 0;
    while let Some(h) = format::parse_frame_header(bytes.get(pos..).unwrap_or(&[])) {
        let next = pos + FRAME_HEADER_LEN + h.len as usize;
        // Kind 0 is never written: typically a zero-filled tail.
        if h.kind == 0 || h.len as usize > MAX_PAYLOAD_LEN || next > bytes.len() {
            break;
        }
        pos = next;
        n += 1;
    }
    n
}

/// Path piece of the Python agent's package, wherever it was loaded from.
const AGENT_PATH: &str = "/tpuscope_agent/";

/// Takes definitions, the manifest, blobs and the end record into `trace`; returns the record
/// when it is an event (the first client record is also kept in `trace.client`).
/// Whether [`absorb`] takes records of `kind` into the trace (a client is also handed on):
/// those are always decoded.
pub(crate) fn absorbs(kind: RecordKind) -> bool {
    use RecordKind::*;
    matches!(kind, Manifest | StringDef | StackDef | Blob | End | Client)
}

/// Whether a skimming reader hands an event frame of `kind` out raw, its payload not parsed:
/// one `decode` does not ask for, unless the trace absorbs it (those are always decoded). The one
/// rule of `Assembler::feed` and of the chunked read's workers.
pub(crate) fn left_raw(kind: RecordKind, decode: fn(RecordKind) -> bool) -> bool {
    !absorbs(kind) && !decode(kind)
}

fn absorb(trace: &mut Trace, r: Record) -> Option<Record> {
    match r {
        Record::Manifest(m) => {
            if trace.manifest.is_none() {
                trace.manifest = Some(*m);
            }
        }
        Record::StringDef(s) => {
            trace.strings.insert(s.id, s.text);
        }
        Record::StackDef(mut s) => {
            // tpuscope's own Python agent wraps frontend entry points (JAX's compile, torch_xla's
            // sync): its frames are ours, never a line for the user, a flamegraph or a count.
            s.frames.retain(|f| {
                !trace
                    .strings
                    .get(&f.file)
                    .is_some_and(|file| file.contains(AGENT_PATH))
            });
            trace.stacks.insert(s.id, s);
        }
        Record::Blob(b) => {
            trace.blobs.insert(b.hash, b);
        }
        Record::End(e) => trace.end = Some(e),
        Record::Client(c) => {
            if trace.client.is_none() {
                trace.client = Some((*c).clone());
            }
            return Some(Record::Client(c));
        }
        other => return Some(other),
    }
    None
}

/// Whether `bytes` start with the header of a plausible frame whose payload has not all arrived.
fn frame_arriving(bytes: &[u8]) -> bool {
    format::parse_frame_header(bytes).is_some_and(|h| {
        h.kind != 0
            && (h.len as usize) <= MAX_PAYLOAD_LEN
            && bytes.len() < FRAME_HEADER_LEN + h.len as usize
    })
}

/// Decodes a trace that arrives in pieces (a live stream from a running workload, a file still
/// being written): bytes are appended with [`TraceBuilder::push`], every complete frame is absorbed
/// into the growing [`Trace`], and an incomplete last frame waits for the next piece.
#[derive(Debug, Default)]
pub struct TraceBuilder {
    /// Bytes not yet absorbed: the start of an incomplete frame (or of the header).
    pending: Vec<u8>,
    /// Stream offset of `pending[0]`.
    base: u64,
    trace: Option<Trace>,
    /// The offset of each event's frame, kept beside `trace.events` when asked for
    /// ([`TraceBuilder::noting_offsets`]).
    offsets: Option<Vec<u64>>,
}

impl TraceBuilder {
    pub fn new() -> TraceBuilder {
        TraceBuilder::default()
    }

    /// A builder that notes where each event's frame starts ([`TraceBuilder::take_events_at`]):
    /// a view that folds the events away reads one back from there.
    pub fn noting_offsets() -> TraceBuilder {
        TraceBuilder {
            offsets: Some(Vec::new()),
            ..TraceBuilder::default()
        }
    }

    /// Appends bytes; returns how many records were absorbed. The header is checked as soon as
    /// it is complete: a stream that is not a trace (or of a newer major version) is an error,
    /// and stays one.
    pub fn push(&mut self, bytes: &[u8]) -> Result<usize, ReadError> {
        self.pending.extend_from_slice(bytes);
        if self.trace.is_none() {
            if self.pending.len() < format::HEADER_LEN {
                return Ok(0);
            }
            let header = parse_header_start(&self.pending)?;
            if self.pending.len() < header.len {
                return Ok(0);
            }
            self.trace = Some(empty_trace(header, 0, None));
            self.pending.drain(..header.len);
            self.base = header.len as u64;
        }
        let Some(trace) = self.trace.as_mut() else {
            return Ok(0);
        };
        // The common case while a large frame (a blob) arrives: its header says it is not all
        // here yet, so wait without scanning what has arrived.
        if frame_arriving(&self.pending) {
            return Ok(0);
        }
        let mut absorbed = 0;
        let mut keep_from = self.pending.len();
        for item in FrameIter::new(&self.pending, 0) {
            match item {
                FrameItem::Frame(f) => match RecordKind::from_u16(f.kind) {
                    None => trace.unknown_records += 1,
                    Some(kind) => match Record::decode_payload(kind, f.payload) {
                        Ok(r) => {
                            if let Some(event) = absorb(trace, r) {
                                trace.events.push(event);
                                if let Some(o) = self.offsets.as_mut() {
                                    o.push(self.base + f.offset);
                                }
                            }
                            absorbed += 1;
                        }
                        Err(_) => trace.undecodable_records += 1,
                    },
                },
                // A frame after whole ones may still be arriving too: wait for it rather than
                // resync into its payload (a blob's bytes can hold a valid-looking frame).
                FrameItem::Damage(d)
                    if usize::try_from(d.offset)
                        .ok()
                        .and_then(|at| self.pending.get(at..))
                        .is_some_and(frame_arriving) =>
                {
                    keep_from = usize::try_from(d.offset).unwrap_or(self.pending.len());
                    break;
                }
                FrameItem::Damage(d) => trace.damage.push(Damage {
                    offset: d.offset + self.base,
                    len: d.len,
                }),
                FrameItem::Truncated { offset } => {
                    keep_from = usize::try_from(offset).unwrap_or(self.pending.len());
                    break;
                }
            }
        }
        let keep_from = keep_from.min(self.pending.len());
        self.pending.drain(..keep_from);
        self.base += keep_from as u64;
        let len = self.base + self.pending.len() as u64;
        trace.completeness = if trace.end.is_some() {
            Completeness::Complete
        } else {
            Completeness::NoEndRecord { file_len: len }
        };
        Ok(absorbed)
    }

    /// The trace so far (`None` until the header has arrived).
    pub fn trace(&self) -> Option<&Trace> {
        self.trace.as_ref()
    }

    /// Takes out the event records decoded so far, in order: a reader that folds them as they
    /// come keeps the trace's tables only.
    pub fn take_events(&mut self) -> Vec<Record> {
        self.trace
            .as_mut()
            .map(|t| std::mem::take(&mut t.events))
            .unwrap_or_default()
    }

    /// [`TraceBuilder::take_events`], each with the offset of its frame (0 unless the builder
    /// is [`TraceBuilder::noting_offsets`]).
    pub fn take_events_at(&mut self) -> Vec<(u64, Record)> {
        let events = self.take_events();
        let offsets = self
            .offsets
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default();
        let mut offsets = offsets.into_iter();
        events
            .into_iter()
            .map(|r| (offsets.next().unwrap_or(0), r))
            .collect()
    }

    /// Takes the trace out, marking a dangling incomplete frame as a cut.
    pub fn finish(mut self) -> Option<Trace> {
        let pending = self.pending.len() as u64;
        let base = self.base;
        let mut t = self.trace.take()?;
        if pending > 0 {
            t.completeness = Completeness::Cut {
                offset: base,
                file_len: base + pending,
            };
        }
        Some(t)
    }

    /// Takes the trace out as it stands: a stream still running, not a cut one.
    pub fn into_trace(self) -> Option<Trace> {
        self.trace
    }

    /// Bytes received so far.
    pub fn bytes_received(&self) -> u64 {
        self.base + self.pending.len() as u64
    }
}

/// Reads and decodes a trace file, streaming: the header is checked before anything else is
/// read, and memory holds the decoded trace plus a bounded window (see [`crate::stream`]).
/// Works on FIFOs and other unseekable inputs. For a merged job file, the first segment.
pub fn read_trace_file(path: &Path) -> Result<Trace, ReadError> {
    crate::stream::TraceStream::open(path)?
        .read_all(true)
        .map(|mut v| v.swap_remove(0))
}

/// Reads a trace file as [`read_traces`] does: one [`Trace`] per host segment.
pub fn read_traces_file(path: &Path) -> Result<Vec<Trace>, ReadError> {
    crate::stream::TraceStream::open(path)?.read_all(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_crc_matches_direct_crc() {
        let mut x = 0x1234_5678_9abc_def0u64;
        let bytes: Vec<u8> = (0..5000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for base in [0, 1, 255, 256, 700] {
            let r = RangeCrc::new(&bytes, base);
            for start in [base, base + 1, base + 255, base + 256, base + 1000, 4000] {
                for len in [0, 1, 7, 255, 256, 257, 513, 999] {
                    if start + len > bytes.len() {
                        continue;
                    }
                    let direct = format::frame_crc(18, 3, &bytes[start..start + len]);
                    assert_eq!(
                        r.frame_crc(&bytes, 18, 3, start, len),
                        direct,
                        "base {base} start {start} len {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn kinds_always_decoded_are_those_absorbed() {
        // Every kind the reader knows: a record of it (an empty payload is its default),
        // absorbed into an empty trace. `absorbs` must name exactly those it keeps (and the
        // client, kept and handed on), or a skim would hand a table out raw.
        for n in 0..=u16::MAX {
            let Some(kind) = RecordKind::from_u16(n) else {
                continue;
            };
            let Ok(r) = Record::decode_payload(kind, &[]) else {
                panic!("{kind:?}: an empty payload decodes")
            };
            let header = Header {
                major: 1,
                minor: 0,
                len: HEADER_LEN,
            };
            let mut t = empty_trace(header, 0, None);
            let kept = absorb(&mut t, r).is_none() || kind == RecordKind::Client;
            assert_eq!(absorbs(kind), kept, "{kind:?}");
        }
    }
}
