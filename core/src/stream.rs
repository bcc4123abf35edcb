//! Streaming reading of traces from any [`Read`] (a file, a FIFO, a pipe): the header is checked
//! from the first 16 bytes before anything else is read, records come out as frames arrive, and
//! memory stays bounded whatever the input holds.
//!
//! Memory: the frame being read (at most [`MAX_PAYLOAD_LEN`], the format's own limit), or while
//! skipping damage a window of [`SCAN_WINDOW`] + [`RESYNC_MAX_PAYLOAD`] bytes (32 MiB) and its
//! running CRCs; plus what the caller keeps (interned definitions, and events if it collects
//! them). Endless garbage after a valid header is scanned window by window until the input
//! ends; endless zeroes likewise (a zero frame header never passes the resync screen).
//!
//! The frames found are exactly those [`FrameIter`](crate::reader::FrameIter) finds in the same
//! bytes held whole (`core/tests/stream.rs` checks this on mutated traces).

use std::io::{self, Read};
use std::path::Path;

use crate::Completeness;
use crate::event::{Record, RecordKind, SEGMENT_KIND, Segment};
use crate::format::{self, FRAME_HEADER_LEN, HEADER_LEN, MAX_PAYLOAD_LEN};
use crate::reader::{
    Assembler, Damage, Fed, FrameItem, Header, RESYNC_MAX_PAYLOAD, RawFrame, ReadError, Trace,
    find_frame, header_past_end, parse_header_start, set_file_len,
};

/// Candidate offsets examined per step of a resynchronisation; the window held is this plus the
/// longest frame a resync may find.
pub const SCAN_WINDOW: usize = 16 << 20;
/// Bytes asked of the source per read (less may come: a FIFO gives what it has).
const READ_CHUNK: usize = 256 << 10;
/// Consumed bytes are dropped from the front of the buffer once there are this many.
const COMPACT_AT: usize = 1 << 20;

/// Frames of a trace body read from a stream; the same items as
/// [`FrameIter`](crate::reader::FrameIter) gives for the same bytes.
pub struct FrameReader<R> {
    src: R,
    /// `buf[..filled]` holds bytes `[base, base + filled)` of the stream; the rest is room
    /// (zeroed once) for the next reads.
    buf: Vec<u8>,
    filled: usize,
    base: u64,
    /// Stream offset of the next frame.
    pos: u64,
    eof: bool,
    done: bool,
    /// [`SCAN_WINDOW`], smaller in tests of the window steps.
    scan: usize,
    /// The pack whose records are being handed out: its start and end, the next record's place
    /// in it and where that record starts.
    pack: Option<((u64, u64), u32, u64)>,
}

impl<R: Read> FrameReader<R> {
    /// `src` positioned at stream offset `start` (the first frame, after the header).
    pub fn new(src: R, start: u64) -> Self {
        FrameReader {
            src,
            buf: Vec::new(),
            filled: 0,
            base: start,
            pos: start,
            eof: false,
            done: false,
            scan: SCAN_WINDOW,
            pack: None,
        }
    }

    /// Bytes of the stream read so far (header included).
    pub fn bytes_read(&self) -> u64 {
        self.end()
    }

    fn end(&self) -> u64 {
        self.base + self.filled as u64
    }

    /// Drops buffered bytes before stream offset `keep` (never needed again), and gives back
    /// room a large frame needed.
    fn discard_before(&mut self, keep: u64) {
        let n = usize::try_from(keep.saturating_sub(self.base))
            .unwrap_or(usize::MAX)
            .min(self.filled);
        if n > 0 {
            self.buf.copy_within(n..self.filled, 0);
            self.filled -= n;
            self.base += n as u64;
        }
        let room = (self.filled + 8 * READ_CHUNK).max(2 * COMPACT_AT);
        if self.buf.len() > 2 * room {
            self.buf.truncate(room);
            self.buf.shrink_to_fit();
        }
    }

    /// Reads until the buffer reaches stream offset `to` or the input ends. Reads ahead by up to
    /// [`READ_CHUNK`] when the source has it (a FIFO returns what it holds, never waits for it).
    #[inline]
    fn fill_to(&mut self, to: u64) -> io::Result<()> {
        // Called three times a frame, and almost always the bytes are there already.
        if self.eof || self.end() >= to {
            return Ok(());
        }
        self.read_to(to)
    }

    /// [`FrameReader::fill_to`] when bytes are missing.
    #[inline(never)]
    fn read_to(&mut self, to: u64) -> io::Result<()> {
        while !self.eof && self.end() < to {
            let need = usize::try_from(to - self.end()).unwrap_or(usize::MAX);
            // Grow by what is needed, at most 8 chunks at a time: an announced length is only
            // a claim until the bytes are there.
            let room = need.clamp(READ_CHUNK, 8 * READ_CHUNK);
            if self.buf.len() - self.filled < room {
                // Address space for all that is needed at once (touched only as bytes come):
                // growing by doubling would copy, and hold twice the window for a moment.
                let total = self.filled.saturating_add(need.max(room));
                self.buf.reserve_exact(total.saturating_sub(self.buf.len()));
                self.buf.resize(self.filled + room, 0);
            }
            match self.src.read(&mut self.buf[self.filled..]) {
                Ok(0) => self.eof = true,
                Ok(n) => self.filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn slice(&self, from: u64, len: usize) -> &[u8] {
        let i = usize::try_from(from.saturating_sub(self.base)).unwrap_or(usize::MAX);
        let e = i.saturating_add(len).min(self.filled);
        self.buf.get(i..e).unwrap_or(&[])
    }

    /// Where the next item starts.
    /// (Within a pack, where the pack starts: its records are one frame's.)
    pub(crate) fn next_offset(&self) -> u64 {
        match self.pack {
            Some(((start, end), _, at)) if at < end => start,
            _ => self.pos,
        }
    }

    /// The next item, `None` at the end of the input.
    pub fn next_item(&mut self) -> io::Result<Option<FrameItem<'_>>> {
        if let Some((frame, entry, at)) = self.pack.take()
            && at < frame.1
        {
            if at - self.base >= COMPACT_AT as u64 {
                self.discard_before(at);
            }
            let len = (frame.1 - at) as usize;
            let (f, after) = crate::reader::pack_record(frame, entry, self.slice(at, len));
            let (kind, payload_len) = (f.kind, f.payload.len());
            let next = frame.1 - after.len() as u64;
            // The record's payload ends where the next record starts.
            self.pack = Some((frame, entry + 1, next));
            return Ok(Some(FrameItem::Frame(RawFrame {
                kind,
                payload: self.slice(next - payload_len as u64, payload_len),
                ..crate::reader::pack_frame(frame, entry)
            })));
        }
        if self.done {
            return Ok(None);
        }
        if self.pos - self.base >= COMPACT_AT as u64 {
            self.discard_before(self.pos);
        }
        let pos = self.pos;
        self.fill_to(pos + 1)?;
        if pos >= self.end() {
            self.done = true;
            return Ok(None);
        }
        if let Some((kind, flags, len)) = self.probe(pos)? {
            let end = pos + (FRAME_HEADER_LEN + len) as u64;
            self.pos = end;
            // Its records in its place, as `FrameIter` hands them out.
            if kind == format::PACK_KIND && len > 0 {
                self.pack = Some(((pos, end), 0, pos + FRAME_HEADER_LEN as u64));
                return self.next_item();
            }
            let payload = self.slice(pos + FRAME_HEADER_LEN as u64, len);
            return Ok(Some(FrameItem::Frame(RawFrame {
                offset: pos,
                end,
                entry: 0,
                kind,
                flags,
                payload,
            })));
        }
        // As `FrameIter`: an invalid or overrunning frame is damage if a valid frame follows,
        // else a cut.
        match self.resync(pos + 1)? {
            Some(next) => {
                self.pos = next;
                Ok(Some(FrameItem::Damage(Damage {
                    offset: pos,
                    len: next - pos,
                })))
            }
            None => {
                self.done = true;
                Ok(Some(FrameItem::Truncated { offset: pos }))
            }
        }
    }

    /// Kind, flags and payload length of a valid frame at `pos`; `None` when it is invalid or
    /// runs past the end of the input.
    fn probe(&mut self, pos: u64) -> io::Result<Option<(u16, u16, usize)>> {
        self.fill_to(pos + FRAME_HEADER_LEN as u64)?;
        let Some(h) = format::parse_frame_header(self.slice(pos, FRAME_HEADER_LEN)) else {
            return Ok(None);
        };
        let len = h.len as usize;
        if len > MAX_PAYLOAD_LEN {
            return Ok(None);
        }
        let start = pos + FRAME_HEADER_LEN as u64;
        self.fill_to(start + len as u64)?;
        let payload = self.slice(start, len);
        if payload.len() < len || format::frame_crc(h.kind, h.flags, payload) != h.crc {
            return Ok(None);
        }
        Ok(Some((h.kind, h.flags, len)))
    }

    /// The smallest offset at or after `from` holding a valid frame that a resync may find
    /// (the rules of `FrameIter`), scanning [`SCAN_WINDOW`] candidates at a time.
    fn resync(&mut self, from: u64) -> io::Result<Option<u64>> {
        let mut start = from;
        loop {
            self.discard_before(start);
            let reach = (self.scan + FRAME_HEADER_LEN + RESYNC_MAX_PAYLOAD) as u64;
            self.fill_to(start + reach)?;
            let end = self.end();
            let Some(last) = end.checked_sub(FRAME_HEADER_LEN as u64) else {
                return Ok(None);
            };
            if last < start {
                return Ok(None);
            }
            let scan_last = last.min(start + self.scan as u64 - 1);
            let window = self.slice(start, (end - start) as usize);
            let count = (scan_last - start) as usize + 1;
            if let Some(i) = find_frame(window, 0, count, &mut None) {
                return Ok(Some(start + i as u64));
            }
            if self.eof && scan_last == last {
                return Ok(None);
            }
            start = scan_last + 1;
        }
    }
}

/// Reads and checks a header from the start of `src`: the first 16 bytes, then (for a longer
/// header of a later minor) the rest, which is skipped. `file_len`, when known, lets a header
/// that runs past the end be refused without reading. `label` names the input in I/O errors.
pub fn read_header(
    src: &mut impl Read,
    file_len: Option<u64>,
    label: &str,
) -> Result<Header, ReadError> {
    let io_err = |err| ReadError::Io {
        path: label.to_string(),
        err,
    };
    let mut head = [0u8; HEADER_LEN];
    let n = read_up_to(src, &mut head).map_err(io_err)?;
    let header = parse_header_start(&head[..n])?;
    if let Some(len) = file_len
        && header.len as u64 > len
    {
        return Err(header_past_end(header.len, len));
    }
    let extra = (header.len - HEADER_LEN) as u64;
    let skipped = io::copy(&mut src.take(extra), &mut io::sink()).map_err(io_err)?;
    if skipped < extra {
        return Err(header_past_end(header.len, HEADER_LEN as u64 + skipped));
    }
    Ok(header)
}

/// Reads until `buf` is full or the input ends; the count read.
fn read_up_to(src: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match src.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// An event record as [`TraceStream::skim_each`] hands it out.
pub enum Skimmed<'a> {
    Decoded(Record),
    /// A record of a kind not asked for: its payload as framed (CRC checked), not parsed.
    Raw(RecordKind, &'a [u8]),
}

/// What [`TraceStream::next_record`] gives.
#[derive(Debug)]
pub enum Streamed {
    /// An event record of the current segment (definitions, the manifest, blobs and the end
    /// record are absorbed into [`TraceStream::trace`] instead).
    Event(Record),
    /// A merged job file's next segment starts: the previous one, finished (its events only if
    /// the stream keeps them).
    SegmentDone(Box<Trace>),
}

/// A trace read record by record from a stream. The current segment's definitions, manifest,
/// client, end record, damage and counters are kept in [`TraceStream::trace`]; events are handed
/// out (or kept, for [`TraceStream::read_all`]).
pub struct TraceStream<R> {
    frames: FrameReader<R>,
    asm: Option<Assembler>,
    label: String,
    /// Length of the input when known up front (a regular file).
    len_hint: Option<u64>,
}

/// How long a FIFO given as a trace may have no writer before it is refused: long enough for a
/// writer started just after the reader (`tpuscope dump p & producer > p`), short enough that
/// a FIFO nobody writes never hangs a command.
pub const FIFO_WRITER_WAIT: std::time::Duration = std::time::Duration::from_secs(3);
/// One wait for a writer's first bytes; the wait above is counted in these steps (no clock).
const FIFO_POLL_STEP_MS: u32 = 50;

/// A trace input opened for reading: a regular file, or a FIFO, pipe or device that has a writer
/// (or data). Reads give the input's bytes from its start.
///
/// Opening it is one of core's two I/O edges (the other is `crate::host`): everything after it
/// reads from any `Read`.
#[expect(
    clippy::disallowed_types,
    reason = "opening the file is the one I/O of reading a trace"
)]
pub struct TraceFile {
    file: std::fs::File,
    /// A byte read while looking for a FIFO's writer, given back first.
    first: Option<u8>,
    /// The length of a regular file.
    len: Option<u64>,
}

#[expect(
    clippy::disallowed_types,
    reason = "opening the file is the one I/O of reading a trace"
)]
impl TraceFile {
    /// Opens `path` without ever blocking on it: a FIFO is opened without waiting for a writer,
    /// then given [`FIFO_WRITER_WAIT`] to have one (a writer already there, even one not writing
    /// yet, is found at once); with none it is refused. A directory is refused.
    pub fn open(path: &Path) -> Result<TraceFile, ReadError> {
        use rustix::fs::OFlags;
        let label = path.display().to_string();
        let io_err = |err: io::Error| ReadError::Io {
            path: label.clone(),
            err,
        };
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| io_err(e.into()))?;
        let file = std::fs::File::from(fd);
        let meta = file.metadata().map_err(io_err)?;
        if meta.is_dir() {
            return Err(io_err(io::Error::from(io::ErrorKind::IsADirectory)));
        }
        let first = if std::os::unix::fs::FileTypeExt::is_fifo(&meta.file_type()) {
            wait_for_writer(&file).map_err(io_err)?
        } else {
            None
        };
        // From here on reads wait for data, as on any file.
        let flags = rustix::fs::fcntl_getfl(&file).map_err(|e| io_err(e.into()))?;
        rustix::fs::fcntl_setfl(&file, flags - OFlags::NONBLOCK).map_err(|e| io_err(e.into()))?;
        Ok(TraceFile {
            file,
            first,
            len: meta.is_file().then_some(meta.len()),
        })
    }

    /// The length of a regular file; `None` for a FIFO, pipe or device.
    pub fn file_len(&self) -> Option<u64> {
        self.len
    }

    /// The `len` bytes of a regular file from `start`, for copying: `std::io::copy` of them into
    /// a file lets the kernel move them.
    pub fn range(&mut self, start: u64, len: u64) -> io::Result<io::Take<&std::fs::File>> {
        self.seek_to(start)?;
        Ok((&self.file).take(len))
    }

    /// Moves to byte `pos` of a regular file (a byte already taken from a FIFO is dropped).
    fn seek_to(&mut self, pos: u64) -> io::Result<()> {
        use std::io::Seek;
        self.first = None;
        self.file.seek(io::SeekFrom::Start(pos)).map(|_| ())
    }
}

impl crate::chunked::ReadAt for TraceFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(&self.file, buf, offset)
    }
}

impl Read for TraceFile {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let (Some(b), Some(slot)) = (self.first, buf.first_mut()) {
            *slot = b;
            self.first = None;
            return Ok(1);
        }
        self.file.read(buf)
    }
}

/// Waits up to [`FIFO_WRITER_WAIT`] for a writer of the FIFO `file` (opened non-blocking);
/// returns the byte a read took, if one did. A writer that came and left without writing is an
/// empty input, not a missing writer.
#[expect(
    clippy::disallowed_types,
    reason = "opening the file is the one I/O of reading a trace"
)]
fn wait_for_writer(file: &std::fs::File) -> io::Result<Option<u8>> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let step = Timespec {
        tv_sec: 0,
        tv_nsec: i64::from(FIFO_POLL_STEP_MS) * 1_000_000,
    };
    let steps = FIFO_WRITER_WAIT.as_millis() / u128::from(FIFO_POLL_STEP_MS);
    let mut writer_left = false;
    for _ in 0..steps {
        let mut byte = [0u8; 1];
        match (&*file).read(&mut byte) {
            Ok(1) => return Ok(Some(byte[0])),
            // No data and no writer: one came and went (the input is empty), or none came yet.
            Ok(_) if writer_left => return Ok(None),
            Ok(_) => {}
            // A writer holds the FIFO open and has not written yet.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
        let mut fds = [PollFd::new(file, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&step)) {
            Ok(_) => writer_left = fds[0].revents().contains(PollFlags::HUP),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "a FIFO with no writer (none came in {} s): start the program that writes it first",
            FIFO_WRITER_WAIT.as_secs()
        ),
    ))
}

impl TraceStream<TraceFile> {
    /// Opens a trace file (or FIFO, or device: see [`TraceFile::open`]) and checks its header;
    /// nothing more is read.
    pub fn open(path: &Path) -> Result<Self, ReadError> {
        let label = path.display().to_string();
        let mut f = TraceFile::open(path)?;
        let len = f.file_len();
        let header = read_header(&mut f, len, &label)?;
        Ok(TraceStream::with_header(f, header, label, len))
    }
}

impl TraceStream<TraceFile> {
    /// As [`TraceStream::skim_piped`], on `threads` threads: a regular file's body is read in
    /// chunks, each found, checked and decoded on a thread of its own, and handed out in file
    /// order ([`crate::chunked`]): what `skim_frames` hands out, in the same order. A FIFO, pipe
    /// or short file is read by `skim_piped` (one thread: on the caller's).
    pub fn skim_parallel(
        self,
        threads: usize,
        decode: fn(RecordKind) -> bool,
        mut each: impl FnMut(usize, u64, Skimmed<'_>),
    ) -> Result<Vec<Trace>, ReadError> {
        let chunk = crate::chunked::CHUNK_BYTES;
        match self.len_hint {
            Some(len) if threads > 1 && len >= 2 * chunk && self.frames.src.first.is_none() => {
                let TraceStream { frames, label, .. } = self;
                crate::chunked::skim_chunked(&frames.src, len, &label, threads, chunk, decode, each)
            }
            // A stream that cannot be read at any offset: read on one thread, folded on this.
            _ if threads > 1 => self.skim_piped(decode, each),
            _ => {
                let frame_at = std::cell::Cell::new(0u64);
                self.skim_frames(
                    decode,
                    |segment, r| each(segment, frame_at.get(), r),
                    |_, start, _| frame_at.set(start),
                )
            }
        }
    }
}

impl<R: Read> TraceStream<R> {
    /// Checks the header at the start of `src`. `label` names the input in I/O errors.
    pub fn new(mut src: R, label: impl Into<String>) -> Result<Self, ReadError> {
        let label = label.into();
        let header = read_header(&mut src, None, &label)?;
        Ok(TraceStream::with_header(src, header, label, None))
    }

    fn with_header(src: R, header: Header, label: String, len_hint: Option<u64>) -> Self {
        TraceStream {
            frames: FrameReader::new(src, header.len as u64),
            asm: Some(Assembler::new(header, false)),
            label,
            len_hint,
        }
    }

    /// Examines `n` candidate offsets per resync step instead of [`SCAN_WINDOW`] (tests of the
    /// window steps); `n >= 1`.
    #[doc(hidden)]
    pub fn set_scan_window(&mut self, n: usize) {
        self.frames.scan = n.max(1);
    }

    /// The current segment as read so far (without its events).
    pub fn trace(&self) -> Option<&Trace> {
        self.asm.as_ref().map(|a| &a.trace)
    }

    fn known_len(&self) -> u64 {
        self.len_hint.unwrap_or(0).max(self.frames.bytes_read())
    }

    /// The next event or finished segment; `None` at the end of the input (then [`finish`]).
    ///
    /// [`finish`]: TraceStream::finish
    pub fn next_record(&mut self) -> Result<Option<Streamed>, ReadError> {
        self.step(false)
    }

    fn step(&mut self, first_only: bool) -> Result<Option<Streamed>, ReadError> {
        while let Some(fed) = self.next_fed(first_only, &mut |_, _| {})? {
            match fed {
                // Only `drain` asks for raw records.
                Fed::Nothing | Fed::Raw(..) => {}
                Fed::Event(r) => return Ok(Some(Streamed::Event(r))),
                Fed::SegmentDone(t) => return Ok(Some(Streamed::SegmentDone(t))),
                Fed::Stop => return Ok(None),
            }
        }
        Ok(None)
    }

    /// The next frame item, fed to the assembler; `None` at the end of the input. `frame(start,
    /// end)` is told the byte range of a valid frame that is not a segment marker first (of a
    /// pack, before its first record).
    fn next_fed(
        &mut self,
        first_only: bool,
        frame: &mut impl FnMut(u64, u64),
    ) -> Result<Option<Fed<'_>>, ReadError> {
        let len = self.known_len();
        let Some(asm) = self.asm.as_mut() else {
            return Ok(None);
        };
        match self.frames.next_item() {
            Ok(Some(item)) => {
                // A pack's range once, with its first record.
                if let FrameItem::Frame(f) = &item
                    && f.kind != SEGMENT_KIND
                    && f.entry == 0
                {
                    frame(f.offset, f.end);
                }
                Ok(Some(asm.feed(item, first_only, len)))
            }
            Ok(None) => Ok(None),
            Err(err) => Err(ReadError::Io {
                path: self.label.clone(),
                err,
            }),
        }
    }

    /// The last segment, with its completeness (call after [`TraceStream::next_record`] gave `None`).
    pub fn finish(mut self) -> Option<Trace> {
        let len = self.frames.bytes_read();
        self.asm.take().map(|a| a.finish(len))
    }

    /// Reads everything without keeping events: `each(segment, record)` is handed each event
    /// record of each segment in turn (as [`TraceStream::read_all`] would keep them); returns
    /// one trace per segment with its tables, end, damage and completeness, and no events.
    pub fn read_each(self, mut each: impl FnMut(usize, Record)) -> Result<Vec<Trace>, ReadError> {
        self.drain(
            false,
            |_| true,
            |segment, r| {
                if let Skimmed::Decoded(r) = r {
                    each(segment, r);
                }
            },
            |_, _, _| {},
        )
    }

    /// As [`TraceStream::read_each`], decoding only the event records of the kinds `decode`
    /// asks for: the others are handed out raw, their payloads not even parsed (an undecodable
    /// one among them goes out all the same, where `read_each` would count it as undecodable).
    /// Definitions, the manifest, blobs, the client and the end are always decoded.
    pub fn skim_each(
        self,
        decode: fn(RecordKind) -> bool,
        each: impl FnMut(usize, Skimmed<'_>),
    ) -> Result<Vec<Trace>, ReadError> {
        self.drain(false, decode, each, |_, _, _| {})
    }

    /// As [`TraceStream::skim_each`], and `frame(segment, start, end)` is told the byte range
    /// of every valid frame but segment markers, in the segment the reader puts it in: what
    /// `tpuscope merge` copies.
    pub fn skim_frames(
        self,
        decode: fn(RecordKind) -> bool,
        each: impl FnMut(usize, Skimmed<'_>),
        frame: impl FnMut(usize, u64, u64),
    ) -> Result<Vec<Trace>, ReadError> {
        self.drain(false, decode, each, frame)
    }

    /// As [`TraceStream::skim_each`], the reading (frames, CRCs, the tables, decoding the kinds
    /// `decode` asks for) on a thread of its own while `each` folds on the caller's: a long trace
    /// is read in about the time the slower of the two takes, not their sum. `each(segment,
    /// frame, record)` is also told where the record's frame starts in the input.
    pub fn skim_piped(
        self,
        decode: fn(RecordKind) -> bool,
        mut each: impl FnMut(usize, u64, Skimmed<'_>),
    ) -> Result<Vec<Trace>, ReadError>
    where
        R: Send,
    {
        let label = self.label.clone();
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(PIPE_DEPTH);
            let reader = scope.spawn(move || {
                let frame_at = std::cell::Cell::new(0u64);
                let mut batch = Batch::default();
                let read = self.drain(
                    false,
                    decode,
                    |segment, r| {
                        batch.push(segment, frame_at.get(), r);
                        if batch.items.len() >= PIPE_BATCH {
                            // The folding side went away: nothing more to hand it.
                            let _ = tx.send(std::mem::take(&mut batch));
                        }
                    },
                    |_, start, _| frame_at.set(start),
                );
                if !batch.items.is_empty() {
                    let _ = tx.send(batch);
                }
                read
            });
            for batch in rx {
                for (segment, frame, item) in batch.items {
                    match item {
                        Piped::Decoded(r) => each(segment, frame, Skimmed::Decoded(r)),
                        Piped::Raw(kind, range) => {
                            let payload = batch.bytes.get(range).unwrap_or_default();
                            each(segment, frame, Skimmed::Raw(kind, payload));
                        }
                    }
                }
            }
            reader.join().unwrap_or_else(|_| {
                Err(ReadError::Io {
                    path: label,
                    err: io::Error::other("the thread reading it failed"),
                })
            })
        })
    }

    /// Reads everything, keeping events: one trace per segment (`first_only`: just the first,
    /// and reading stops where the second starts).
    pub fn read_all(mut self, first_only: bool) -> Result<Vec<Trace>, ReadError> {
        if let Some(a) = self.asm.take() {
            self.asm = Some(Assembler::new(a.trace.header, true));
        }
        // The assembler keeps the events: none is handed out.
        self.drain(first_only, |_| true, |_, _| {}, |_, _, _| {})
    }

    /// Reads to the end: each event not kept goes to `each`, decoded when `decode` says so, and
    /// each frame's range to `frame` (see [`TraceStream::skim_frames`]); the finished segments.
    fn drain(
        mut self,
        first_only: bool,
        decode: fn(RecordKind) -> bool,
        mut each: impl FnMut(usize, Skimmed<'_>),
        mut frame: impl FnMut(usize, u64, u64),
    ) -> Result<Vec<Trace>, ReadError> {
        let mut done: Vec<Trace> = Vec::new();
        if let Some(a) = self.asm.as_mut() {
            a.decode = decode;
        }
        // A marker is not handed to `frame`: a frame is in the segment under way when it is fed.
        let segment = std::cell::Cell::new(0);
        let mut on_frame = |a, b| frame(segment.get(), a, b);
        while let Some(fed) = self.next_fed(first_only, &mut on_frame)? {
            match fed {
                Fed::Nothing => {}
                Fed::Event(r) => each(done.len(), Skimmed::Decoded(r)),
                Fed::Raw(kind, payload) => each(done.len(), Skimmed::Raw(kind, payload)),
                Fed::SegmentDone(t) => {
                    done.push(*t);
                    segment.set(done.len());
                }
                Fed::Stop => break,
            }
        }
        let len = if first_only {
            self.known_len()
        } else {
            self.frames.bytes_read()
        };
        if let Some(a) = self.asm.take() {
            done.push(a.finish(len));
        }
        // Earlier segments were finished before the input's length was known.
        for t in &mut done {
            set_file_len(t, len);
        }
        Ok(done)
    }
}

/// Records handed from the reading thread to the folding one per batch, and batches in flight.
const PIPE_BATCH: usize = 4096;
const PIPE_DEPTH: usize = 4;

/// An event record on its way across [`TraceStream::skim_piped`]'s pipe.
enum Piped {
    Decoded(Record),
    /// Its payload's range in the batch's bytes.
    Raw(RecordKind, std::ops::Range<usize>),
}

/// Records read, with their segment and the offset of their frame; raw payloads copied.
#[derive(Default)]
struct Batch {
    items: Vec<(usize, u64, Piped)>,
    bytes: Vec<u8>,
}

impl Batch {
    fn push(&mut self, segment: usize, frame: u64, r: Skimmed<'_>) {
        if self.items.capacity() == 0 {
            self.items.reserve_exact(PIPE_BATCH);
        }
        let item = match r {
            Skimmed::Decoded(r) => Piped::Decoded(r),
            Skimmed::Raw(kind, payload) => {
                let at = self.bytes.len();
                self.bytes.extend_from_slice(payload);
                Piped::Raw(kind, at..self.bytes.len())
            }
        };
        self.items.push((segment, frame, item));
    }
}

/// The `skip`-th event record (0: the first) of the segment read from the frame that starts at
/// byte `offset` of the regular file `path`, counted as a skimming reader hands them out
/// (definitions, the manifest, blobs and the end are no events; a record that does not decode
/// is none either, unless a transfer that reads in place, as [`Skimmed::Raw`] consumers take
/// it): how a view that folded a trace's events away reads one back from an offset it noted on
/// the way. `None` when the segment or the file ends first.
pub fn event_at(path: &Path, offset: u64, skip: usize) -> Result<Option<Record>, ReadError> {
    let label = path.display().to_string();
    let io_err = |err| ReadError::Io {
        path: label.clone(),
        err,
    };
    let mut f = TraceFile::open(path)?;
    let Some(len) = f.file_len() else {
        return Err(io_err(io::Error::other(
            "not a regular file: cannot seek in it",
        )));
    };
    let range = f
        .range(offset, len.saturating_sub(offset))
        .map_err(io_err)?;
    event_in(range, offset, skip).map_err(io_err)
}

/// [`event_at`] of a trace's bytes from `offset` on, as `src` gives them.
pub fn event_in<R: Read>(src: R, offset: u64, skip: usize) -> io::Result<Option<Record>> {
    let mut frames = FrameReader::new(src, offset);
    let mut left = skip;
    while let Some(item) = frames.next_item()? {
        let FrameItem::Frame(fr) = item else { continue };
        if fr.kind == SEGMENT_KIND {
            // As the reader splits: a marker that does not decode is no marker.
            if <Segment as prost::Message>::decode(fr.payload).is_ok() {
                return Ok(None);
            }
            continue;
        }
        let Some(kind) = RecordKind::from_u16(fr.kind) else {
            continue;
        };
        if crate::reader::absorbs(kind) && kind != RecordKind::Client {
            continue;
        }
        let record = match Record::decode_payload(kind, fr.payload) {
            Ok(r) => r,
            Err(_) if kind == RecordKind::Transfer => {
                match crate::wire::TransferRef::parse(fr.payload) {
                    Some(t) => Record::Transfer(Box::new(t.to_owned())),
                    None => continue,
                }
            }
            Err(_) => continue,
        };
        if left == 0 {
            return Ok(Some(record));
        }
        left -= 1;
    }
    Ok(None)
}

/// The segments of a merged trace file as `[start, end)` byte ranges, each starting at its
/// segment marker, for reading them apart ([`read_segments_then`]): `None` when the input is not
/// a regular file, holds one segment or does not start with a marker.
///
/// When every marker says its segment's length ([`Segment::len`], as `tpuscope merge` writes
/// it), the markers alone are read, hopping from one to the next: the cost is the number of
/// hosts, not the file's size. Else one pass over the frames finds them, and `None` also when
/// anything in it is not a valid frame (damage, a cut, a marker that does not decode): one pass
/// reads those, by the rules of resync. Damage inside hopped-over segments shows when they are
/// read ([`read_segments_then`] then says so).
#[expect(
    clippy::disallowed_methods,
    reason = "whether the input is a regular file, asked before anything is read from it"
)]
pub fn segment_ranges(path: &Path) -> Result<Option<Vec<(u64, u64)>>, ReadError> {
    // Nothing is read from a FIFO or device: what it gives is read once, in one pass.
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return Ok(None);
    }
    let label = path.display().to_string();
    let io_err = |err| ReadError::Io {
        path: label.clone(),
        err,
    };
    let mut f = TraceFile::open(path)?;
    let Some(file_len) = f.file_len() else {
        return Ok(None);
    };
    let header = read_header(&mut f, Some(file_len), &label)?;
    if let Some(ranges) = hop_segments(&mut f, header.len as u64, file_len).map_err(io_err)? {
        return Ok((ranges.len() >= 2).then_some(ranges));
    }
    // The pass starts at the first frame, wherever the hops left the file.
    f.seek_to(header.len as u64).map_err(io_err)?;
    let mut stream = TraceStream::with_header(f, header, label.clone(), Some(file_len));
    let first_frame = header.len as u64;
    // Every marker starts a segment (as the reader splits: a marker after any frame, or after
    // another marker), the first at the first frame.
    let mut starts = Vec::new();
    while let Some(item) = stream.frames.next_item().map_err(io_err)? {
        let FrameItem::Frame(f) = item else {
            return Ok(None);
        };
        if f.kind == SEGMENT_KIND {
            if <Segment as prost::Message>::decode(f.payload).is_err() {
                return Ok(None);
            }
            starts.push(f.offset);
        } else if starts.is_empty() {
            // Not a merged file: known at its first frame.
            return Ok(None);
        }
    }
    if starts.len() < 2
        || starts.first() != Some(&first_frame)
        || stream.frames.bytes_read() != file_len
    {
        return Ok(None);
    }
    let ends = starts.iter().skip(1).copied().chain([file_len]);
    Ok(Some(starts.iter().copied().zip(ends).collect()))
}

/// The segments found by hopping from marker to marker by their lengths, from the first frame
/// at `first` to exactly the end of the file; `None` when a frame where a marker should be is
/// not a valid one, a marker does not say its length, or the lengths do not add up to the file.
fn hop_segments(
    f: &mut TraceFile,
    first: u64,
    file_len: u64,
) -> io::Result<Option<Vec<(u64, u64)>>> {
    // A marker is a few hundred bytes: anything longer is not one `merge` wrote.
    const MAX_MARKER: usize = 64 << 10;
    let mut out = Vec::new();
    let mut pos = first;
    let mut head = [0u8; FRAME_HEADER_LEN];
    let mut payload = Vec::new();
    while pos < file_len {
        if file_len - pos < FRAME_HEADER_LEN as u64 {
            return Ok(None);
        }
        f.seek_to(pos)?;
        f.read_exact(&mut head)?;
        let Some(h) = format::parse_frame_header(&head) else {
            return Ok(None);
        };
        let len = h.len as usize;
        if h.kind != SEGMENT_KIND
            || len > MAX_MARKER
            || file_len - pos < (FRAME_HEADER_LEN + len) as u64
        {
            return Ok(None);
        }
        payload.resize(len, 0);
        f.read_exact(&mut payload)?;
        if format::frame_crc(h.kind, h.flags, &payload) != h.crc {
            return Ok(None);
        }
        let Ok(segment) = <Segment as prost::Message>::decode(payload.as_slice()) else {
            return Ok(None);
        };
        let end = pos.saturating_add(segment.len);
        if segment.len < (FRAME_HEADER_LEN + len) as u64 || end > file_len {
            return Ok(None);
        }
        out.push((pos, end));
        pos = end;
    }
    Ok(Some(out))
}

/// A segment's trace and the state its events went to.
type SegmentRead<S> = Result<(Trace, S), ReadError>;

/// Reads the segments of a trace file, as [`segment_ranges`] gave them, on up to `threads`
/// threads: each segment's events go to a state of its own (`make()`, then `each` per event,
/// decoded as `decode` asks), and the segment's trace (tables, end, completeness; no events)
/// and that state are handed to `then` (with the segment's index) on the thread that read it:
/// what a segment's read leads to is made while the others are read, and what `then` drops is
/// never held beside them. The results come in file order: what [`TraceStream::skim_each`]
/// gives of the whole file, segment by segment. `None` when a segment holds damage, or one but
/// the last is cut (`then` has run on what was read by then): one pass resyncs across a
/// segment's end where a segment read alone cannot, so such a file is read in one pass.
pub fn read_segments_then<S, R: Send>(
    path: &Path,
    ranges: &[(u64, u64)],
    threads: usize,
    make: impl Fn() -> S + Sync,
    decode: fn(RecordKind) -> bool,
    each: impl Fn(&mut S, Skimmed<'_>) + Sync,
    then: impl Fn(usize, Trace, S) -> R + Sync,
) -> Result<Option<Vec<R>>, ReadError> {
    let read_one = |range: (u64, u64)| -> SegmentRead<S> {
        let label = path.display().to_string();
        let mut f = TraceFile::open(path)?;
        let file_len = f.file_len();
        let header = read_header(&mut f, file_len, &label)?;
        f.seek_to(range.0).map_err(|err| ReadError::Io {
            path: label.clone(),
            err,
        })?;
        let src = f.take(range.1.saturating_sub(range.0));
        let stream = TraceStream {
            frames: FrameReader::new(src, range.0),
            asm: Some(Assembler::new(header, false)),
            label,
            len_hint: file_len,
        };
        let mut state = make();
        let mut traces = stream.skim_each(decode, |_, r| each(&mut state, r))?;
        let mut t = traces
            .pop()
            .unwrap_or_else(|| Assembler::new(header, false).finish(0));
        // The whole file's length, as one pass sets it.
        set_file_len(&mut t, file_len.unwrap_or(range.1));
        Ok((t, state))
    };
    let last = ranges.len().saturating_sub(1);
    let read: Vec<(bool, R)> = crate::par::map_indices(ranges.len(), threads, |i| {
        ranges.get(i).map(|&r| {
            read_one(r).map(|(t, s)| {
                let clean = t.damage.is_empty()
                    && (i == last || !matches!(t.completeness, Completeness::Cut { .. }));
                (clean, then(i, t, s))
            })
        })
    })
    .into_iter()
    .map(|r| {
        r.flatten().unwrap_or_else(|| {
            let err = io::Error::other("a thread reading a segment panicked");
            let path = path.display().to_string();
            Err(ReadError::Io { path, err })
        })
    })
    .collect::<Result<_, _>>()?;
    let clean = read.iter().all(|(c, _)| *c);
    Ok(clean.then(|| read.into_iter().map(|(_, r)| r).collect()))
}
