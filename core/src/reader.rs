//! Reads traces: recovers every complete record of a file cut at any byte, skips unknown record
//! kinds, resynchronises after damaged bytes, and never panics on arbitrary input.

use std::collections::HashMap;
use std::path::Path;

use crate::event::{Blob, Client, End, Manifest, Record, RecordKind, StackDef, StringId};
use crate::format::{self, FRAME_HEADER_LEN, HEADER_LEN, MAX_PAYLOAD_LEN};

/// Why a file cannot be read as a trace at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not a tpuscope trace (no TPUSCOPE header)")]
    NotATrace,
    #[error(
        "trace format version {major}.{minor} is newer than this tpuscope understands ({supported}.x); upgrade tpuscope"
    )]
    NewerVersion {
        major: u16,
        minor: u16,
        supported: u16,
    },
}

/// The parsed file header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub major: u16,
    pub minor: u16,
    /// Offset of the first frame.
    pub len: usize,
}

/// Checks the header of `bytes`.
pub fn parse_header(bytes: &[u8]) -> Result<Header, ReadError> {
    if bytes.len() < HEADER_LEN || bytes.get(..8) != Some(&format::MAGIC[..]) {
        return Err(ReadError::NotATrace);
    }
    let u16_at = |i: usize| {
        bytes
            .get(i..i + 2)
            .and_then(|b| b.try_into().ok())
            .map(u16::from_le_bytes)
    };
    let (Some(major), Some(minor)) = (u16_at(8), u16_at(10)) else {
        return Err(ReadError::NotATrace);
    };
    let len = bytes
        .get(12..16)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .unwrap_or(0) as usize;
    if major > format::FORMAT_MAJOR {
        return Err(ReadError::NewerVersion {
            major,
            minor,
            supported: format::FORMAT_MAJOR,
        });
    }
    if major == 0 || len < HEADER_LEN || len > bytes.len() {
        return Err(ReadError::NotATrace);
    }
    Ok(Header { major, minor, len })
}

/// While resynchronising, frames with kinds or flags beyond these are not considered.
const RESYNC_MAX_KIND: u16 = 1024;
const RESYNC_MAX_FLAGS: u16 = 256;

/// One frame whose CRC checked.
#[derive(Clone, Copy, Debug)]
pub struct RawFrame<'a> {
    pub offset: u64,
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

/// Iterates the frames of a trace body.
pub struct FrameIter<'a> {
    bytes: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> FrameIter<'a> {
    /// `start` is the offset of the first frame (the header length).
    pub fn new(bytes: &'a [u8], start: usize) -> Self {
        FrameIter {
            bytes,
            pos: start,
            done: false,
        }
    }

    /// A valid frame at `pos`: `Ok(Some(frame))`; it runs past the end: `Err(())`; invalid: `Ok(None)`.
    #[allow(clippy::result_unit_err)]
    fn frame_at(&self, pos: usize) -> Result<Option<RawFrame<'a>>, ()> {
        let rest = self.bytes.get(pos..).unwrap_or(&[]);
        let Some(h) = format::parse_frame_header(rest) else {
            return Err(());
        };
        let len = h.len as usize;
        if len > MAX_PAYLOAD_LEN {
            return Ok(None);
        }
        let Some(payload) = rest.get(FRAME_HEADER_LEN..FRAME_HEADER_LEN + len) else {
            return Err(());
        };
        if format::frame_crc(h.kind, h.flags, payload) != h.crc {
            return Ok(None);
        }
        Ok(Some(RawFrame {
            offset: pos as u64,
            kind: h.kind,
            flags: h.flags,
            payload,
        }))
    }

    /// Next offset after `from` where a valid frame starts, if any. Candidates are screened on
    /// kind and flags first so that random lengths in garbage do not cost a CRC pass each.
    fn resync(&self, from: usize) -> Option<usize> {
        (from..self.bytes.len()).find(|&p| {
            let plausible = format::parse_frame_header(self.bytes.get(p..).unwrap_or(&[]))
                .is_some_and(|h| {
                    h.kind != 0 && h.kind < RESYNC_MAX_KIND && h.flags < RESYNC_MAX_FLAGS
                });
            plausible && matches!(self.frame_at(p), Ok(Some(_)))
        })
    }
}

impl<'a> Iterator for FrameIter<'a> {
    type Item = FrameItem<'a>;

    fn next(&mut self) -> Option<FrameItem<'a>> {
        if self.done || self.pos >= self.bytes.len() {
            return None;
        }
        match self.frame_at(self.pos) {
            Ok(Some(f)) => {
                self.pos += FRAME_HEADER_LEN + f.payload.len();
                Some(FrameItem::Frame(f))
            }
            // A frame cut by the end of the file: the normal shape of a killed writer.
            Err(()) => {
                self.done = true;
                Some(FrameItem::Truncated {
                    offset: self.pos as u64,
                })
            }
            Ok(None) => match self.resync(self.pos + 1) {
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
}

impl Trace {
    /// The text of an interned string ("" for id 0 or an unknown id).
    pub fn string(&self, id: StringId) -> &str {
        self.strings.get(&id).map(String::as_str).unwrap_or("")
    }
}

/// Decodes a whole trace held in memory.
pub fn read_trace(bytes: &[u8]) -> Result<Trace, ReadError> {
    let header = parse_header(bytes)?;
    let mut trace = Trace {
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
        completeness: Completeness::NoEndRecord {
            file_len: bytes.len() as u64,
        },
    };
    let mut cut = None;
    for item in FrameIter::new(bytes, header.len) {
        match item {
            FrameItem::Frame(f) => {
                let Some(kind) = RecordKind::from_u16(f.kind) else {
                    trace.unknown_records += 1;
                    continue;
                };
                match Record::decode_payload(kind, f.payload) {
                    Ok(r) => absorb(&mut trace, r),
                    Err(_) => trace.undecodable_records += 1,
                }
            }
            FrameItem::Damage(d) => trace.damage.push(d),
            FrameItem::Truncated { offset } => cut = Some(offset),
        }
    }
    trace.completeness = match (cut, &trace.end) {
        (Some(offset), _) => Completeness::Cut {
            offset,
            file_len: bytes.len() as u64,
        },
        (None, Some(_)) => Completeness::Complete,
        (None, None) => Completeness::NoEndRecord {
            file_len: bytes.len() as u64,
        },
    };
    Ok(trace)
}

fn absorb(trace: &mut Trace, r: Record) {
    match r {
        Record::Manifest(m) => {
            if trace.manifest.is_none() {
                trace.manifest = Some(m);
            }
        }
        Record::StringDef(s) => {
            trace.strings.insert(s.id, s.text);
        }
        Record::StackDef(s) => {
            trace.stacks.insert(s.id, s);
        }
        Record::Blob(b) => {
            trace.blobs.insert(b.hash, b);
        }
        Record::End(e) => trace.end = Some(e),
        Record::Client(c) => {
            if trace.client.is_none() {
                trace.client = Some(c.clone());
            }
            trace.events.push(Record::Client(c));
        }
        other => trace.events.push(other),
    }
}

/// Reads and decodes a trace file.
pub fn read_trace_file(path: &Path) -> Result<Trace, ReadError> {
    let bytes = std::fs::read(path).map_err(|source| ReadError::Io {
        path: path.display().to_string(),
        source,
    })?;
    read_trace(&bytes)
}
