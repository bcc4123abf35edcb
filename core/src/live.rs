//! Where the live sockets of instrumented processes live, and the pieces of the live stream beyond
//! a trace file's: the control frames the collector adds ([`BACKLOG_END_KIND`],
//! [`REFUSED_KIND`]) and [`LiveDecoder`], which reads a stream with bounded memory.
//!
//! A viewer connected to `<socket_dir>/<pid>.sock` receives a byte stream that is a `.tps` trace:
//! the file's bytes up to the moment it connected, a [`BACKLOG_END_KIND`] frame, then every frame
//! the collector writes after that. The collector reads the stream back from its trace file, so a
//! slow viewer falls behind but loses nothing. (Collectors before this one could lose frames to a
//! slow viewer and said so with a [`VIEWER_LAGGED`] note; readers still count those.) The
//! directory is private to the user (0700) and the collector checks the peer's uid.

use crate::event::{Manifest, Record, RecordKind};
use crate::format::{self, FRAME_HEADER_LEN, HEADER_LEN, MAX_PAYLOAD_LEN};
use crate::reader::{ReadError, Trace, TraceBuilder};

// The socket directory and the viewer limit are read from the host: they live in `crate::host`, the
// module of core allowed to touch the file system and the environment. Re-exported where viewers
// and the collector have always found them.
pub use crate::host::{
    DEFAULT_LIVE_MAX_MB, current_uid, ensure_socket_dir, ensure_socket_dir_at, pids_with_sockets,
    socket_dir, socket_path, viewer_limit_bytes,
};

/// Topic of the note a lagging viewer of an older collector received; its message is the number
/// of frames this viewer lost so far (a total, not a delta).
pub const VIEWER_LAGGED: &str = "viewer_lagged";

/// Frame kind of the live stream's end-of-backlog mark: the bytes before it are the trace file as
/// it was when the viewer connected. Its payload is that length (u64, little-endian). Live
/// streams only: never in a file, and not a [`RecordKind`] (a file reader would skip it as
/// unknown; [`LiveDecoder`] takes it out).
pub const BACKLOG_END_KIND: u16 = 256;
/// Frame kind of a refusal (the process serves its most viewers, or is exiting): the stream is a
/// header, this frame (its payload is the reason, UTF-8), and the end.
pub const REFUSED_KIND: u16 = 257;
/// Kinds from here up are live-stream control frames, never handed to a trace reader.
const CONTROL_KINDS: u16 = 256;
/// Largest control frame payload a decoder accepts.
const MAX_CONTROL_LEN: usize = 4096;
/// Largest header a decoder accepts (a version-1 header is 16 bytes; a later minor may add some).
const MAX_LIVE_HEADER: usize = 4096;
/// What a decoded record costs a viewer beyond its bytes, for [`LiveDecoder`]'s budget: the slot
/// in the trace's vector and a few small allocations.
const RECORD_OVERHEAD: u64 = 128;

/// A frame holding the end-of-backlog mark at stream offset `backlog` (the bytes before it).
pub fn backlog_end_frame(backlog: u64) -> [u8; FRAME_HEADER_LEN + 8] {
    let payload = backlog.to_le_bytes();
    let mut frame = [0u8; FRAME_HEADER_LEN + 8];
    frame[..4].copy_from_slice(&8u32.to_le_bytes());
    frame[4..6].copy_from_slice(&BACKLOG_END_KIND.to_le_bytes());
    frame[8..12].copy_from_slice(&format::frame_crc(BACKLOG_END_KIND, 0, &payload).to_le_bytes());
    frame[12..].copy_from_slice(&payload);
    frame
}

/// The whole stream a refused viewer receives: a trace header and a [`REFUSED_KIND`] frame.
pub fn refusal(reason: &str) -> Vec<u8> {
    let mut out = format::encode_header(format::FORMAT_MAJOR, format::FORMAT_MINOR).to_vec();
    let reason = reason.as_bytes();
    let reason = reason.get(..MAX_CONTROL_LEN).unwrap_or(reason);
    format::encode_frame(&mut out, REFUSED_KIND, 0, reason);
    out
}

/// Why a live stream cannot be read on.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("the stream is not a tpuscope trace: {0}")]
    NotATrace(#[from] ReadError),
    #[error(
        "the stream announces a frame of {len} bytes at byte {offset}, more than such a frame holds ({max}): not a tpuscope live stream"
    )]
    FrameTooLarge { offset: u64, len: u64, max: u64 },
    #[error("the stream is damaged at byte {offset}: not a tpuscope live stream")]
    Damaged { offset: u64 },
    #[error(
        "the stream passed {limit_mib} MiB (what a viewer holds of one process at most; see TPUSCOPE_LIVE_MAX_MB)"
    )]
    OverLimit { limit_mib: u64 },
    #[error("the process refused the viewer: {0}")]
    Refused(String),
    /// Pushed more after one of the above (whose message this is): nothing more is taken.
    #[error("{0}")]
    AfterError(String),
}

/// What [`LiveDecoder::push`] did with a piece of the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// Bytes of the piece taken; fewer than given only when the backlog ended inside it (the
    /// rest follows the mark: push it to read on).
    pub consumed: usize,
    /// The end-of-backlog mark was the last thing taken.
    pub backlog_end: bool,
}

/// Where the decoder is in the stream.
#[derive(Debug)]
enum Walk {
    /// Collecting the fixed 16 header bytes.
    Header,
    /// Passing the rest of a longer header.
    HeaderRest(usize),
    /// Collecting a frame header.
    FrameHeader,
    /// Passing (or, for a control frame, collecting) a payload.
    Payload { left: usize, control: Option<u16> },
}

/// Decodes a live stream into a growing [`Trace`] with bounded memory: frames longer than the
/// format allows and damage are errors (a collector sends whole frames read back from its own
/// file, so either means the other end is not one), the decoded trace is held to a budget, control
/// frames are taken out and the end of the backlog is reported.
#[derive(Debug)]
pub struct LiveDecoder {
    builder: TraceBuilder,
    walk: Walk,
    /// Bytes of a header or frame header collected so far.
    head: Vec<u8>,
    /// A control frame's payload collected so far.
    control: Vec<u8>,
    /// The start of a data frame not yet whole: the builder is handed whole frames only (it
    /// would take an incomplete one's payload for damage to skip).
    carry: Vec<u8>,
    /// The first error, after which nothing more is taken.
    failed: Option<String>,
    /// CRC of the frame being taken (checked here: the builder would wait for a next valid
    /// frame to call bytes damaged, and this walk would follow a bad length meanwhile).
    crc: crc32fast::Hasher,
    /// Stream bytes taken (control frames included).
    offset: u64,
    /// Trace bytes taken (control frames excluded).
    trace_bytes: u64,
    /// Estimated memory of the decoded trace.
    cost: u64,
    limit: u64,
    /// The caller takes the event records out as they come ([`LiveDecoder::take_events`]) and
    /// folds them: an event counts towards the limit as this says the fold keeps it (by kind
    /// and payload length); the tables (definitions, blobs, the manifest) count whole.
    folding: Option<fn(RecordKind, usize) -> u64>,
    backlog_end: Option<u64>,
}

impl LiveDecoder {
    /// A decoder whose decoded trace may cost at most `limit_bytes` (estimated: the frames'
    /// bytes and a per-record overhead).
    pub fn new(limit_bytes: u64) -> LiveDecoder {
        LiveDecoder {
            builder: TraceBuilder::new(),
            walk: Walk::Header,
            head: Vec::with_capacity(HEADER_LEN),
            control: Vec::new(),
            carry: Vec::new(),
            failed: None,
            crc: crc32fast::Hasher::new(),
            offset: 0,
            trace_bytes: 0,
            cost: 0,
            limit: limit_bytes,
            folding: None,
            backlog_end: None,
        }
    }

    /// A decoder whose caller takes the event records out after each push
    /// ([`LiveDecoder::take_events`]) and folds them: the decoder holds the trace's tables,
    /// which count whole towards `limit_bytes`, and an event counts `held(kind, payload
    /// length)`, what the fold keeps of it (a few dozen bytes for the launches of a loop), so
    /// a long run streams on many times longer than the plain decoder takes it.
    pub fn folding(limit_bytes: u64, held: fn(RecordKind, usize) -> u64) -> LiveDecoder {
        LiveDecoder {
            folding: Some(held),
            ..LiveDecoder::new(limit_bytes)
        }
    }

    /// Takes the next piece of the stream. Stops right after an end-of-backlog mark (see
    /// [`Pushed`]). After an error the decoder takes nothing more.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Pushed, LiveError> {
        if let Some(first) = &self.failed {
            return Err(LiveError::AfterError(first.clone()));
        }
        let pushed = self.push_inner(bytes);
        if let Err(e) = &pushed {
            self.failed = Some(e.to_string());
        }
        pushed
    }

    fn push_inner(&mut self, bytes: &[u8]) -> Result<Pushed, LiveError> {
        // Bytes for the builder: a frame carried over, then this piece's; `whole` is where the
        // last whole frame (or the header) ends.
        let mut out = std::mem::take(&mut self.carry);
        let mut whole = 0;
        let mut i = 0;
        let mut backlog_end = false;
        let mut failure = None;
        while i < bytes.len() && !backlog_end {
            let rest = bytes.get(i..).unwrap_or_default();
            let base = self.offset + i as u64;
            match self.step(rest, base, &mut out, &mut whole, &mut backlog_end) {
                Ok(taken) => i += taken,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        // Whole frames are handed over, also before an error (what was read stays readable).
        if whole > 0 {
            self.pass(out.get(..whole).unwrap_or_default())?;
            out.drain(..whole);
        }
        if let Some(e) = failure {
            return Err(e);
        }
        // The rest is the start of a frame: handed over once whole.
        self.carry = out;
        self.offset += i as u64;
        Ok(Pushed {
            consumed: i,
            backlog_end,
        })
    }

    /// Takes what it can of `rest` (which starts at stream offset `base`) in the current state;
    /// returns how many bytes it took.
    fn step(
        &mut self,
        rest: &[u8],
        base: u64,
        out: &mut Vec<u8>,
        whole: &mut usize,
        backlog_end: &mut bool,
    ) -> Result<usize, LiveError> {
        Ok(match self.walk {
            Walk::Header => {
                let n = (HEADER_LEN - self.head.len()).min(rest.len());
                self.head
                    .extend_from_slice(rest.get(..n).unwrap_or_default());
                out.extend_from_slice(rest.get(..n).unwrap_or_default());
                self.trace_bytes += n as u64;
                if self.head.len() == HEADER_LEN {
                    let h = crate::reader::parse_header_start(&self.head)?;
                    if h.len > MAX_LIVE_HEADER {
                        return Err(ReadError::DamagedHeader(format!(
                            "header length field {} (a live stream's is at most {MAX_LIVE_HEADER})",
                            h.len
                        ))
                        .into());
                    }
                    self.head.clear();
                    self.walk = match h.len - HEADER_LEN {
                        0 => {
                            *whole = out.len();
                            Walk::FrameHeader
                        }
                        n => Walk::HeaderRest(n),
                    };
                }
                n
            }
            Walk::HeaderRest(left) => {
                let n = left.min(rest.len());
                out.extend_from_slice(rest.get(..n).unwrap_or_default());
                self.trace_bytes += n as u64;
                self.walk = match left - n {
                    0 => {
                        *whole = out.len();
                        Walk::FrameHeader
                    }
                    l => Walk::HeaderRest(l),
                };
                n
            }
            Walk::FrameHeader => {
                let n = (FRAME_HEADER_LEN - self.head.len()).min(rest.len());
                self.head
                    .extend_from_slice(rest.get(..n).unwrap_or_default());
                if let Some(h) = format::parse_frame_header(&self.head) {
                    let at = base + n as u64 - FRAME_HEADER_LEN as u64;
                    let len = h.len as usize;
                    let control = (h.kind >= CONTROL_KINDS).then_some(h.kind);
                    let max = if control.is_some() {
                        MAX_CONTROL_LEN
                    } else {
                        MAX_PAYLOAD_LEN
                    };
                    if len > max {
                        return Err(LiveError::FrameTooLarge {
                            offset: at,
                            len: len as u64,
                            max: max as u64,
                        });
                    }
                    if h.kind == 0 {
                        return Err(LiveError::Damaged { offset: at });
                    }
                    if control.is_none() {
                        // A pack's records count once it is whole (`count_pack`).
                        if h.kind != format::PACK_KIND {
                            self.cost += self.record_cost(h.kind, len);
                        }
                        if self.cost > self.limit {
                            // (What fit is handed over by `push_inner`.)
                            return Err(LiveError::OverLimit {
                                limit_mib: self.limit >> 20,
                            });
                        }
                        out.extend_from_slice(&self.head);
                        self.trace_bytes += FRAME_HEADER_LEN as u64;
                    }
                    self.control.clear();
                    self.crc = crc32fast::Hasher::new();
                    self.crc.update(&h.kind.to_le_bytes());
                    self.crc.update(&h.flags.to_le_bytes());
                    self.walk = Walk::Payload { left: len, control };
                    // The frame header stays in `head` (a control frame's CRC needs it).
                    if len == 0 {
                        *backlog_end = self.end_frame(control, at)?;
                        if control.is_none() {
                            *whole = out.len();
                        }
                    }
                }
                n
            }
            Walk::Payload { left, control } => {
                let n = left.min(rest.len());
                let piece = rest.get(..n).unwrap_or_default();
                self.crc.update(piece);
                if control.is_some() {
                    self.control.extend_from_slice(piece);
                } else {
                    out.extend_from_slice(piece);
                    self.trace_bytes += n as u64;
                }
                if left == n {
                    let at = base + n as u64 - (FRAME_HEADER_LEN + self.payload_len()) as u64;
                    if control.is_none() {
                        self.count_pack(out)?;
                    }
                    *backlog_end = self.end_frame(control, at)?;
                    if control.is_none() {
                        *whole = out.len();
                    }
                } else {
                    self.walk = Walk::Payload {
                        left: left - n,
                        control,
                    };
                }
                n
            }
        })
    }

    /// The payload length of the frame whose header is in `head`.
    fn payload_len(&self) -> usize {
        format::parse_frame_header(&self.head).map_or(0, |h| h.len as usize)
    }

    /// What a record of `kind` with a payload of `len` bytes costs the viewer.
    fn record_cost(&self, kind: u16, len: usize) -> u64 {
        match (self.folding, RecordKind::from_u16(kind)) {
            (Some(held), Some(kind)) if !crate::reader::absorbs(kind) => held(kind, len),
            // Not a record this reader knows: counted, never kept.
            (Some(_), None) => 0,
            _ => (FRAME_HEADER_LEN + len) as u64 + RECORD_OVERHEAD,
        }
    }

    /// The frame whose payload ends `out` was taken: if it is a pack, its records count now.
    fn count_pack(&mut self, out: &[u8]) -> Result<(), LiveError> {
        let Some(h) = format::parse_frame_header(&self.head) else {
            return Ok(());
        };
        if h.kind != format::PACK_KIND {
            return Ok(());
        }
        let len = h.len as usize;
        let mut rest = out.get(out.len().saturating_sub(len)..).unwrap_or_default();
        while let Some((kind, payload, after)) = format::pack_entry(rest) {
            self.cost += self.record_cost(kind, payload.len());
            rest = after;
        }
        if self.cost > self.limit {
            return Err(LiveError::OverLimit {
                limit_mib: self.limit >> 20,
            });
        }
        Ok(())
    }

    /// A whole frame has been taken: for a control frame, checks and acts on it. Returns whether
    /// it was the end-of-backlog mark.
    fn end_frame(&mut self, control: Option<u16>, at: u64) -> Result<bool, LiveError> {
        let header = format::parse_frame_header(&self.head);
        self.head.clear();
        self.walk = Walk::FrameHeader;
        let crc = std::mem::take(&mut self.crc).finalize();
        if header.is_none_or(|h| h.crc != crc) {
            return Err(LiveError::Damaged { offset: at });
        }
        let Some(kind) = control else {
            return Ok(false);
        };
        match kind {
            BACKLOG_END_KIND => {
                let said = self
                    .control
                    .get(..8)
                    .and_then(|b| b.try_into().ok())
                    .map(u64::from_le_bytes);
                // The mark says where it stands; anything else is not our collector.
                if said != Some(self.trace_bytes) {
                    return Err(LiveError::Damaged { offset: at });
                }
                self.backlog_end = Some(at);
                Ok(true)
            }
            REFUSED_KIND => Err(LiveError::Refused(
                String::from_utf8_lossy(&self.control).into_owned(),
            )),
            // A control frame of a later collector: nothing for this reader.
            _ => Ok(false),
        }
    }

    fn pass(&mut self, bytes: &[u8]) -> Result<(), LiveError> {
        let before = self.builder.trace().map_or(0, |t| t.damage.len());
        self.builder.push(bytes)?;
        if let Some(d) = self
            .builder
            .trace()
            .and_then(|t| t.damage.get(before..))
            .and_then(|d| d.first())
        {
            return Err(LiveError::Damaged { offset: d.offset });
        }
        Ok(())
    }

    /// The trace so far (`None` until its header arrived).
    pub fn trace(&self) -> Option<&Trace> {
        self.builder.trace()
    }

    /// Takes out the event records decoded so far, in stream order (what a folding decoder's
    /// caller does after each push).
    pub fn take_events(&mut self) -> Vec<Record> {
        self.builder.take_events()
    }

    /// Takes the trace out as it stands.
    pub fn into_trace(self) -> Option<Trace> {
        self.builder.into_trace()
    }

    /// Where the backlog ended (stream offset of the mark), once it has.
    pub fn backlog_end(&self) -> Option<u64> {
        self.backlog_end
    }

    /// Stream bytes taken so far.
    pub fn bytes_received(&self) -> u64 {
        self.offset
    }
}

/// One whole frame (header and payload) holding `record`, as a trace writer writes it.
pub fn encode_record_frame(record: &Record) -> Vec<u8> {
    let mut payload = Vec::with_capacity(64);
    record.encode_payload(&mut payload);
    let mut frame = Vec::with_capacity(FRAME_HEADER_LEN + payload.len());
    format::encode_frame(&mut frame, record.kind() as u16, 0, &payload);
    frame
}

/// The manifest of a stream's first bytes, once the header and the whole first frame are there
/// (`None` before, or when the bytes are not a trace).
pub fn manifest_from_prefix(bytes: &[u8]) -> Option<Manifest> {
    let header = crate::reader::parse_header(bytes.get(..HEADER_LEN)?).ok()?;
    let rest = bytes.get(header.len..)?;
    let h = format::parse_frame_header(rest)?;
    let payload = rest.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + h.len as usize)?;
    if h.kind != RecordKind::Manifest as u16 || format::frame_crc(h.kind, h.flags, payload) != h.crc
    {
        return None;
    }
    match Record::decode_payload(RecordKind::Manifest, payload).ok()? {
        Record::Manifest(m) => Some(*m),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TraceWriter;

    #[test]
    fn the_manifest_is_found_once_its_frame_is_whole() {
        let manifest = Manifest {
            pid: 42,
            command_line: vec!["python".into(), "train.py".into()],
            ..Default::default()
        };
        let w = TraceWriter::new(Vec::new(), &manifest).unwrap();
        let bytes = w.into_inner();
        assert_eq!(manifest_from_prefix(&bytes), Some(manifest));
        assert_eq!(manifest_from_prefix(&bytes[..bytes.len() - 1]), None);
        assert_eq!(manifest_from_prefix(&bytes[..HEADER_LEN]), None);
        let mut damaged = bytes.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        assert_eq!(manifest_from_prefix(&damaged), None);
    }

    /// A small trace's bytes, and its length after `k` events (a frame boundary).
    fn sample(events: u64) -> Vec<u8> {
        let mut w = TraceWriter::new(Vec::new(), &Manifest::default()).unwrap();
        w.intern_string("a string").unwrap();
        for i in 0..events {
            w.write(&Record::Execute(crate::event::Execute {
                t_ns: i + 1,
                ..Default::default()
            }))
            .unwrap();
        }
        w.into_inner()
    }

    /// Feeds `stream` in pieces of `piece` bytes; returns the decoder and the backlog ends seen.
    fn feed(stream: &[u8], piece: usize) -> Result<(LiveDecoder, Vec<u64>), LiveError> {
        let mut d = LiveDecoder::new(1 << 30);
        let mut ends = Vec::new();
        for mut chunk in stream.chunks(piece) {
            while !chunk.is_empty() {
                let p = d.push(chunk)?;
                if p.backlog_end {
                    ends.push(d.backlog_end().unwrap());
                }
                chunk = &chunk[p.consumed..];
            }
        }
        Ok((d, ends))
    }

    #[test]
    fn the_mark_is_taken_out_and_reported_where_it_stands_in_any_pieces() {
        let backlog = sample(10);
        let whole = sample(25);
        assert_eq!(&whole[..backlog.len()], &backlog[..]);
        let mut stream = backlog.clone();
        stream.extend_from_slice(&backlog_end_frame(backlog.len() as u64));
        stream.extend_from_slice(&whole[backlog.len()..]);
        let expected = crate::read_trace(&whole).unwrap();
        for piece in [1, 2, 5, 11, 12, 13, 64, 4096] {
            let (d, ends) = feed(&stream, piece).unwrap();
            assert_eq!(ends, [backlog.len() as u64], "piece {piece}");
            assert_eq!(d.bytes_received(), stream.len() as u64);
            let t = d.into_trace().unwrap();
            assert_eq!(t.events, expected.events, "piece {piece}");
            assert_eq!(t.unknown_records, 0);
            assert_eq!(t.string(1), "a string");
        }
        // Stopping at the mark gives the backlog's state exactly.
        let mut d = LiveDecoder::new(1 << 30);
        let p = d.push(&stream).unwrap();
        assert!(p.backlog_end);
        assert_eq!(p.consumed, backlog.len() + FRAME_HEADER_LEN + 8);
        let t = d.into_trace().unwrap();
        assert_eq!(t.events.len(), 10);
    }

    #[test]
    fn a_mark_in_the_wrong_place_or_damaged_is_refused() {
        let backlog = sample(3);
        let mut stream = backlog.clone();
        stream.extend_from_slice(&backlog_end_frame(backlog.len() as u64 - 1));
        assert!(matches!(
            feed(&stream, 7),
            Err(LiveError::Damaged { offset }) if offset == backlog.len() as u64
        ));
        let mut stream = backlog.clone();
        let mut mark = backlog_end_frame(backlog.len() as u64);
        *mark.last_mut().unwrap() ^= 1;
        stream.extend_from_slice(&mark);
        assert!(matches!(feed(&stream, 7), Err(LiveError::Damaged { .. })));
    }

    #[test]
    fn absurd_frames_garbage_and_refusals_are_one_clear_error() {
        let mut stream = sample(2);
        let at = stream.len() as u64;
        // A frame header announcing 4 GiB.
        stream.extend_from_slice(&[0xff; 64]);
        let e = feed(&stream, 1000).unwrap_err();
        assert!(
            matches!(e, LiveError::FrameTooLarge { offset, .. } if offset == at),
            "{e}"
        );
        // A plausible header whose CRC does not match.
        let mut stream = sample(2);
        let at = stream.len() as u64;
        format::encode_frame(&mut stream, 18, 0, b"abc");
        let last = stream.len() - 1;
        stream[last] ^= 0x55;
        stream.extend_from_slice(&sample(1)[..40]);
        let e = feed(&stream, 3).unwrap_err();
        assert!(
            matches!(e, LiveError::Damaged { offset } if offset == at),
            "{e}"
        );
        // Not a trace at all.
        let e = feed(b"HTTP/1.1 200 OK\r\n\r\nhello", 5).unwrap_err();
        assert!(matches!(e, LiveError::NotATrace(_)), "{e}");
        // A refusal says why.
        let e = feed(&refusal("16 viewers are attached"), 4).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the process refused the viewer: 16 viewers are attached"
        );
    }

    #[test]
    fn after_an_error_nothing_more_is_taken() {
        let mut stream = sample(2);
        format::encode_frame(&mut stream, 18, 0, b"abc");
        let last = stream.len() - 1;
        stream[last] ^= 1;
        let mut d = LiveDecoder::new(1 << 30);
        let e = d.push(&stream).unwrap_err();
        assert!(matches!(e, LiveError::Damaged { .. }), "{e}");
        let again = d.push(&sample(3)[HEADER_LEN..]).unwrap_err();
        assert_eq!(again.to_string(), e.to_string());
        assert_eq!(d.trace().unwrap().events.len(), 2);
    }

    #[test]
    fn the_builder_is_handed_whole_frames_only() {
        // A blob whose payload holds a whole valid frame: cut inside the blob, a reader handed
        // the piece would take that inner frame for a record.
        let inner = backlog_end_frame(0);
        let mut inner_record = Vec::new();
        format::encode_frame(&mut inner_record, 2, 0, &[0x08, 9, 0x12, 1, b'x']);
        let mut w = TraceWriter::new(Vec::new(), &Manifest::default()).unwrap();
        let mut data = vec![7u8; 1000];
        data.extend_from_slice(&inner_record);
        data.extend_from_slice(&inner);
        data.extend_from_slice(&[7u8; 1000]);
        w.put_blob_hashed(42, "program", "raw", &data).unwrap();
        w.intern_string("after").unwrap();
        let bytes = w.into_inner();
        let whole = crate::read_trace(&bytes).unwrap();
        for cut in [HEADER_LEN + 40, bytes.len() / 2, bytes.len() - 30] {
            let mut d = LiveDecoder::new(1 << 30);
            d.push(&bytes[..cut]).unwrap();
            d.push(&bytes[cut..]).unwrap();
            let t = d.into_trace().unwrap();
            assert_eq!(t.strings, whole.strings, "cut at {cut}");
            assert_eq!(t.blobs, whole.blobs, "cut at {cut}");
        }
    }

    #[test]
    fn the_decoded_trace_is_held_to_the_limit() {
        let stream = sample(10_000);
        let mut d = LiveDecoder::new(64 << 10);
        let e = d.push(&stream).unwrap_err();
        assert!(matches!(e, LiveError::OverLimit { .. }), "{e}");
        let t = d.trace().unwrap();
        assert!(t.events.len() < 1000, "{}", t.events.len());
    }

    #[test]
    fn a_folding_decoder_holds_the_tables_to_the_limit_and_streams_events_without_end() {
        // Ten times what the plain decoder above held: events the fold keeps nothing of never
        // count.
        let stream = sample(10_000);
        let mut d = LiveDecoder::folding(64 << 10, |_, _| 0);
        let mut taken = Vec::new();
        for mut chunk in stream.chunks(4096) {
            while !chunk.is_empty() {
                let p = d.push(chunk).unwrap();
                chunk = &chunk[p.consumed..];
                taken.extend(d.take_events());
            }
        }
        assert_eq!(taken, crate::read_trace(&stream).unwrap().events);
        let t = d.trace().unwrap();
        assert!(t.events.is_empty());
        assert_eq!(t.string(1), "a string");
        // The tables still count: a string table past the limit stops it.
        let mut w = TraceWriter::new(Vec::new(), &Manifest::default()).unwrap();
        for i in 0..2000 {
            w.intern_string(&format!("a string of some length, number {i}"))
                .unwrap();
        }
        let strings = w.into_inner();
        let mut d = LiveDecoder::folding(64 << 10, |_, _| 0);
        let e = d.push(&strings).unwrap_err();
        assert!(matches!(e, LiveError::OverLimit { .. }), "{e}");
        // And so do the events, as the fold says it keeps them.
        let mut d = LiveDecoder::folding(64 << 10, |_, _| 16);
        let e = d.push(&stream).unwrap_err();
        assert!(matches!(e, LiveError::OverLimit { .. }), "{e}");
    }
}
