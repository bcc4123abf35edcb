//! Appends records to a trace, interning strings and stacks and storing blobs once.

use std::collections::HashMap;
use std::io::{self, Write};
use std::sync::Arc;

use crate::event::{
    Blob, Manifest, Note, Record, StackDef, StackEntry, StackId, StringDef, StringId,
};
use crate::format;

/// A stack entry before interning: file, function, line. Names are shared (`Arc<str>`): a
/// stack capture copies a code object's cached names instead of allocating them per frame.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RawStackEntry {
    pub file: Arc<str>,
    pub function: Arc<str>,
    pub line: u32,
}

/// Writes a trace to any `Write`. Each frame is written as one `write_all`, so a process killed
/// mid-write leaves at most one partial frame at the end.
///
/// A writer made [`TraceWriter::packed`] gathers small records into packs (format 1.2): one
/// frame, one CRC, for up to [`format::PACK_BYTES`] of records, written when full and at each
/// [`TraceWriter::flush`]; a cut inside a pack loses the pack.
pub struct TraceWriter<W: Write> {
    out: W,
    strings: HashMap<String, StringId>,
    /// Ids of frame names by the address of their shared text: a frame's name is usually the
    /// same `Arc` every time, so this skips hashing the text. The `Arc` is kept, so its address
    /// cannot be reused for other text while it is here.
    shared: HashMap<usize, (Arc<str>, StringId)>,
    stacks: HashMap<Vec<StackEntry>, StackId>,
    blobs: HashMap<u64, ()>,
    payload: Vec<u8>,
    frame: Vec<u8>,
    bytes_written: u64,
    records_written: u64,
    /// Its version has packs.
    can_pack: bool,
    /// Records are gathered into packs.
    packing: bool,
    /// The records gathered (pack entries), not yet written.
    pack: Vec<u8>,
    pack_records: u32,
    /// The payload length of the first record gathered (one alone is written as its own frame).
    pack_first_len: usize,
}

impl<W: Write> TraceWriter<W> {
    /// Writes the header and the manifest.
    pub fn new(out: W, manifest: &Manifest) -> io::Result<Self> {
        Self::with_version(out, manifest, format::FORMAT_MAJOR, format::FORMAT_MINOR)
    }

    /// Like [`TraceWriter::new`] with an explicit version (tests of version handling use this).
    pub fn with_version(
        mut out: W,
        manifest: &Manifest,
        major: u16,
        minor: u16,
    ) -> io::Result<Self> {
        let header = format::encode_header(major, minor);
        out.write_all(&header)?;
        let mut w = TraceWriter {
            out,
            strings: HashMap::new(),
            shared: HashMap::new(),
            stacks: HashMap::new(),
            blobs: HashMap::new(),
            payload: Vec::with_capacity(256),
            frame: Vec::with_capacity(256),
            bytes_written: header.len() as u64,
            records_written: 0,
            can_pack: major == format::FORMAT_MAJOR && minor >= format::PACK_MINOR,
            packing: false,
            pack: Vec::new(),
            pack_records: 0,
            pack_first_len: 0,
        };
        w.write(&Record::Manifest(Box::new(manifest.clone())))?;
        Ok(w)
    }

    /// Appends one record. A record whose encoding exceeds [`format::MAX_PAYLOAD_LEN`] is
    /// refused with `InvalidInput` (readers would take it for damage); nothing is written then.
    pub fn write(&mut self, record: &Record) -> io::Result<()> {
        self.payload.clear();
        record.encode_payload(&mut self.payload);
        if self.payload.len() > format::MAX_PAYLOAD_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} record of {} bytes exceeds the trace format's limit of {} bytes",
                    record.kind().name(),
                    self.payload.len(),
                    format::MAX_PAYLOAD_LEN
                ),
            ));
        }
        let kind = record.kind() as u16;
        if self.packing && format::packable(kind) && self.payload.len() <= format::PACK_ENTRY_MAX {
            if self.pack.len() + self.payload.len() + 8 > format::PACK_BYTES {
                self.close_pack()?;
            }
            if self.pack_records == 0 {
                self.pack_first_len = self.payload.len();
            }
            format::encode_pack_entry(&mut self.pack, kind, &self.payload);
            self.pack_records += 1;
        } else {
            // After the records gathered before it: order is kept.
            self.close_pack()?;
            self.frame.clear();
            format::encode_frame(&mut self.frame, kind, 0, &self.payload);
            self.out.write_all(&self.frame)?;
            self.bytes_written += self.frame.len() as u64;
        }
        self.records_written += 1;
        Ok(())
    }

    /// Gathers small records into packs from now on (see the type's documentation); a writer of
    /// a minor before packs never does.
    pub fn packed(mut self) -> Self {
        self.packing = self.can_pack;
        self
    }

    /// Writes the records gathered: as a pack, or as its own frame when there is one. Kept
    /// when the write fails (they are then what was lost: see [`TraceWriter::gathered`]).
    fn close_pack(&mut self) -> io::Result<()> {
        if self.pack_records == 0 {
            return Ok(());
        }
        self.frame.clear();
        match format::pack_entry(&self.pack) {
            Some((kind, payload, _)) if self.pack_records == 1 => {
                format::encode_frame(&mut self.frame, kind, 0, payload);
            }
            _ => format::encode_frame(&mut self.frame, format::PACK_KIND, 0, &self.pack),
        }
        self.out.write_all(&self.frame)?;
        self.bytes_written += self.frame.len() as u64;
        self.pack.clear();
        self.pack_records = 0;
        Ok(())
    }

    /// The kinds of the records gathered for the next pack, not written yet.
    pub fn gathered(&self) -> impl Iterator<Item = u16> + '_ {
        let mut rest = &self.pack[..];
        std::iter::from_fn(move || {
            let (kind, _, after) = format::pack_entry(rest)?;
            rest = after;
            Some(kind)
        })
    }

    /// Returns the id of `text`, writing its definition the first time. The empty string is id 0.
    pub fn intern_string(&mut self, text: &str) -> io::Result<StringId> {
        if text.is_empty() {
            return Ok(0);
        }
        if let Some(&id) = self.strings.get(text) {
            return Ok(id);
        }
        let id = self.strings.len() as StringId + 1;
        self.write(&Record::StringDef(StringDef {
            id,
            text: text.to_owned(),
        }))?;
        self.strings.insert(text.to_owned(), id);
        Ok(id)
    }

    /// Returns the id of a stack (innermost frame first), writing its definition the first time.
    /// An empty stack is id 0.
    pub fn intern_stack(&mut self, frames: &[RawStackEntry]) -> io::Result<StackId> {
        if frames.is_empty() {
            return Ok(0);
        }
        let mut interned = Vec::with_capacity(frames.len());
        for f in frames {
            interned.push(StackEntry {
                file: self.intern_shared(&f.file)?,
                function: self.intern_shared(&f.function)?,
                line: f.line,
            });
        }
        if let Some(&id) = self.stacks.get(&interned) {
            return Ok(id);
        }
        let id = self.stacks.len() as StackId + 1;
        self.write(&Record::StackDef(StackDef {
            id,
            frames: interned.clone(),
        }))?;
        self.stacks.insert(interned, id);
        Ok(id)
    }

    /// `intern_string` for a frame name, looked up by the address of its shared text first.
    fn intern_shared(&mut self, text: &Arc<str>) -> io::Result<StringId> {
        /// Names remembered by address at most (each keeps its text alive).
        const MAX_SHARED: usize = 1 << 14;
        let key = Arc::as_ptr(text).cast::<u8>() as usize;
        if let Some(&(_, id)) = self.shared.get(&key) {
            return Ok(id);
        }
        let id = self.intern_string(text)?;
        if self.shared.len() < MAX_SHARED {
            self.shared.insert(key, (Arc::clone(text), id));
        }
        Ok(id)
    }

    /// Stores a blob once per content hash and returns the hash (0 for empty data).
    pub fn put_blob(&mut self, role: &str, format: &str, data: &[u8]) -> io::Result<u64> {
        if data.is_empty() {
            return Ok(0);
        }
        let hash = blob_hash(data);
        self.put_blob_hashed(hash, role, format, data)?;
        Ok(hash)
    }

    /// Stores a blob whose hash the caller already computed (see [`blob_hash`]).
    ///
    /// A blob too large for one frame is not stored: a `blob_too_large` note says so instead, and
    /// records keep referring to its hash (readers treat it like any missing blob). The trace
    /// goes on either way.
    pub fn put_blob_hashed(
        &mut self,
        hash: u64,
        role: &str,
        format: &str,
        data: &[u8],
    ) -> io::Result<()> {
        if self.blobs.contains_key(&hash) {
            return Ok(());
        }
        // Protobuf overhead of the blob's other fields stays well under 1 KiB.
        if data.len() + role.len() + format.len() + 1024 > format::MAX_PAYLOAD_LEN {
            self.write(&Record::Note(Note {
                t_ns: 0,
                thread: 0,
                topic: "blob_too_large".to_owned(),
                message: format!(
                    "{role} blob {hash:016x} of {} bytes exceeds the trace format's frame limit; not stored",
                    data.len()
                ),
            }))?;
            self.blobs.insert(hash, ());
            return Ok(());
        }
        self.write(&Record::Blob(Blob {
            hash,
            role: role.to_owned(),
            format: format.to_owned(),
            data: data.to_vec(),
        }))?;
        self.blobs.insert(hash, ());
        Ok(())
    }

    /// Whether a blob of this hash was already stored (or skipped as too large).
    pub fn has_blob(&self, hash: u64) -> bool {
        self.blobs.contains_key(&hash)
    }

    /// Writes the records gathered, then flushes the output.
    pub fn flush(&mut self) -> io::Result<()> {
        self.close_pack()?;
        self.out.flush()
    }

    /// The trace's length once the records gathered are written.
    pub fn bytes_written(&self) -> u64 {
        let gathered = match self.pack_records {
            0 => 0,
            1 => format::FRAME_HEADER_LEN + self.pack_first_len,
            _ => format::FRAME_HEADER_LEN + self.pack.len(),
        };
        self.bytes_written + gathered as u64
    }

    pub fn records_written(&self) -> u64 {
        self.records_written
    }

    /// The output as it is: records gathered for a pack are not in it yet (`flush` first).
    pub fn get_ref(&self) -> &W {
        &self.out
    }

    /// The output as it is: records gathered for a pack are not in it (`flush` first).
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// The content hash used for blobs (xxh3-64).
pub fn blob_hash(data: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(data)
}
