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

/// Writes a trace to any `Write`. Each record is written as one `write_all` of a whole frame, so a
/// process killed mid-write leaves at most one partial frame at the end.
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
        self.frame.clear();
        format::encode_frame(&mut self.frame, record.kind() as u16, 0, &self.payload);
        self.out.write_all(&self.frame)?;
        self.bytes_written += self.frame.len() as u64;
        self.records_written += 1;
        Ok(())
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

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    pub fn records_written(&self) -> u64 {
        self.records_written
    }

    pub fn get_ref(&self) -> &W {
        &self.out
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}

/// The content hash used for blobs (xxh3-64).
pub fn blob_hash(data: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(data)
}
