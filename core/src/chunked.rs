//! Reading one trace on all cores. The body is cut into chunks of bytes; worker threads find
//! each chunk's frames, check their CRCs and decode its events of the kinds asked for, and the
//! caller's thread takes the chunks in file order through the one [`Assembler`] and folds their
//! events: it is handed exactly what
//! [`TraceStream::skim_frames`](crate::stream::TraceStream::skim_frames) hands out, in the same
//! order, with the same traces at the end.
//!
//! A chunk after the first starts at the first frame found after its cut (within
//! [`SEEK_BYTES`]); the chunk before reads on to the first item that starts at or after the cut.
//! Where the two disagree (a cut inside a long blob, damage at the cut, a false frame inside a
//! payload), the caller's thread reads that chunk itself from where the one before stopped: the
//! frame reader holds no state but its position, so it reads what one pass from the start would.
//!
//! Memory: the chunks in flight, [`AHEAD_PER_THREAD`] per worker (at most [`MAX_WORKERS`]) of
//! [`CHUNK_BYTES`] each (their events decoded), whatever the trace's length or the cores. The
//! caller's fold is what remains serial.

use std::io::{self, Read};
use std::ops::Range;
use std::sync::{Condvar, Mutex, PoisonError};

use crate::event::{Record, RecordKind, SEGMENT_KIND};
use crate::format::FRAME_HEADER_LEN;
use crate::reader::{
    Assembler, Damage, Fed, FrameItem, RawFrame, ReadError, Trace, absorbs, find_frame, left_raw,
    set_file_len,
};
use crate::stream::{FrameReader, Skimmed, read_header};

/// A source read at any offset by several threads at once: a regular file, or bytes in memory.
pub trait ReadAt: Sync {
    /// As `pread`: up to `buf.len()` bytes from `offset`, 0 at the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let from = usize::try_from(offset).map_or(self.len(), |o| o.min(self.len()));
        let rest = self.get(from..).unwrap_or_default();
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        Ok(n)
    }
}

/// A [`ReadAt`] read in order from `pos`.
struct At<'a, S: ?Sized> {
    src: &'a S,
    pos: u64,
}

impl<S: ReadAt + ?Sized> Read for At<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.src.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Bytes of the body a worker takes at a time: large enough that finding the first frame and
/// reading past the end cost little, small enough that the chunks in flight stay a few MB (their
/// events decoded: 1.5 MB of packs (1.2) hold about what 2 MB of one frame per record did).
pub const CHUNK_BYTES: u64 = 3 << 19;
/// Workers at most, whatever the cores: the caller's fold is serial and takes about a third of
/// the work, so a few workers keep it busy, and each holds chunks in flight (on a 64-core host
/// one per core would hold a GB).
pub const MAX_WORKERS: usize = 4;
/// Chunks read ahead of the one the caller takes, per thread.
pub const AHEAD_PER_THREAD: usize = 2;

/// What a worker found in a chunk, in file order.
enum Item {
    /// An event record of a kind the caller wants decoded (`end`: where its frame ends).
    Decoded {
        offset: u64,
        end: u64,
        record: Record,
    },
    /// An event record of another kind (`end`: where its frame ends); its payload in the
    /// chunk's bytes.
    Event {
        offset: u64,
        end: u64,
        kind: RecordKind,
        payload: Range<usize>,
    },
    /// Any other frame (definitions, the manifest, markers, kinds it counts as unknown or
    /// undecodable), fed to the assembler as read.
    Frame {
        offset: u64,
        end: u64,
        entry: u32,
        kind: u16,
        flags: u16,
        payload: Range<usize>,
    },
    Damage(Damage),
    Truncated {
        offset: u64,
    },
}

#[derive(Default)]
struct Chunk {
    /// Where its first item starts; `None` when none starts in it.
    first: Option<u64>,
    /// Where the next chunk's first item must start; `None` when this one read to the end.
    stop: Option<u64>,
    /// Bytes of the input read by then (the input's length when it read to the end).
    read_to: u64,
    items: Vec<Item>,
    bytes: Vec<u8>,
}

/// Bytes searched after a cut for the first frame that starts there. A cut inside a longer
/// frame (a large blob) finds none, or a false one inside it: the caller's thread then reads that
/// chunk itself.
pub const SEEK_BYTES: usize = 256 << 10;

/// The first offset at or after `start` where a frame passes the resync screen and its CRC,
/// within [`SEEK_BYTES`] (the frame whole in them) of an input of `len` bytes (more may have
/// come since); `None` when none does.
fn first_frame_at_or_after<S: ReadAt + ?Sized>(
    src: &S,
    start: u64,
    len: u64,
) -> io::Result<Option<u64>> {
    let room = usize::try_from(len.saturating_sub(start)).unwrap_or(SEEK_BYTES);
    let mut buf = vec![0u8; room.clamp(FRAME_HEADER_LEN, SEEK_BYTES)];
    let mut n = 0;
    while n < buf.len() {
        match src.read_at(&mut buf[n..], start + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(n);
    Ok(find_frame(&buf, 0, buf.len(), &mut None).map(|i| start + i as u64))
}

/// The chunk that starts at byte `start` of an input of `len` bytes: its first frame found after
/// the cut (the first chunk starts at the first frame), then its items up to the next cut.
fn read_cut<S: ReadAt + ?Sized>(
    src: &S,
    (start, len): (u64, u64),
    next: Option<u64>,
    first_chunk: bool,
    decode: fn(RecordKind) -> bool,
    chunk: Chunk,
) -> io::Result<Chunk> {
    let from = if first_chunk {
        Some(start)
    } else {
        first_frame_at_or_after(src, start, len)?
    };
    match from {
        Some(from) => read_chunk(src, from, next, decode, chunk),
        None => Ok(chunk),
    }
}

/// The items that start from `from` (where an item starts) up to `next` (to the end when
/// `None`), in `chunk` (an empty one, its vectors kept from an earlier chunk: growing them
/// anew for each chunk costs more than reading it).
fn read_chunk<S: ReadAt + ?Sized>(
    src: &S,
    from: u64,
    next: Option<u64>,
    decode: fn(RecordKind) -> bool,
    mut chunk: Chunk,
) -> io::Result<Chunk> {
    let mut frames = FrameReader::new(At { src, pos: from }, from);
    loop {
        let at = frames.next_offset();
        if next.is_some_and(|n| at >= n) {
            chunk.stop = Some(at);
            break;
        }
        let Some(item) = frames.next_item()? else {
            break;
        };
        let item = match item {
            FrameItem::Frame(f) => taken(f, decode, &mut chunk.bytes),
            FrameItem::Damage(d) => Item::Damage(d),
            FrameItem::Truncated { offset } => Item::Truncated { offset },
        };
        chunk.first.get_or_insert(at);
        chunk.items.push(item);
    }
    chunk.read_to = frames.bytes_read();
    Ok(chunk)
}

/// A frame as the assembler of a skimming reader would take it (see `Assembler::feed`): events
/// of the kinds `decode` asks for decoded, other events kept raw, everything else (and an event
/// that does not decode, which the assembler counts) kept for the assembler.
fn taken(f: RawFrame<'_>, decode: fn(RecordKind) -> bool, bytes: &mut Vec<u8>) -> Item {
    let end = f.end;
    let kind = RecordKind::from_u16(f.kind).filter(|&k| f.kind != SEGMENT_KIND && !absorbs(k));
    let raw = kind.is_some_and(|k| left_raw(k, decode));
    if let Some(kind) = kind
        && !raw
        && let Ok(record) = Record::decode_payload(kind, f.payload)
    {
        return Item::Decoded {
            offset: f.offset,
            end,
            record,
        };
    }
    let at = bytes.len();
    bytes.extend_from_slice(f.payload);
    let payload = at..bytes.len();
    match kind {
        Some(kind) if raw => Item::Event {
            offset: f.offset,
            end,
            kind,
            payload,
        },
        _ => Item::Frame {
            offset: f.offset,
            end,
            entry: f.entry,
            kind: f.kind,
            flags: f.flags,
            payload,
        },
    }
}

/// Chunks handed from the workers to the caller's thread in file order.
struct Shelf {
    /// Chunk `i` at `ready[i - taken]` once read.
    ready: std::collections::VecDeque<Option<io::Result<Chunk>>>,
    /// Chunks the caller took so far.
    taken: usize,
    /// The next chunk a worker reads.
    next: usize,
    /// The caller needs no more.
    stop: bool,
    /// Chunks the caller is done with, emptied, for the workers to fill again.
    spare: Vec<Chunk>,
}

/// Calls its function when dropped.
struct Stops<'a>(&'a dyn Fn());

impl Drop for Stops<'_> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Reads the trace in `src` (`len` bytes; `label` names it in errors) on `threads` threads (the
/// caller's among them, and at least one worker) in chunks of `chunk` bytes: `each(segment,
/// frame, record)` is handed each event, with the offset of its frame, as
/// [`TraceStream::skim_frames`](crate::stream::TraceStream::skim_frames) hands them out; returns
/// the same traces.
pub fn skim_chunked<S: ReadAt + ?Sized>(
    src: &S,
    len: u64,
    label: &str,
    threads: usize,
    chunk: u64,
    decode: fn(RecordKind) -> bool,
    mut each: impl FnMut(usize, u64, Skimmed<'_>),
) -> Result<Vec<Trace>, ReadError> {
    let io_err = |err| ReadError::Io {
        path: label.to_string(),
        err,
    };
    let header = read_header(&mut At { src, pos: 0 }, Some(len), label)?;
    let body = header.len as u64;
    let chunk = chunk.max(1);
    let count = usize::try_from(len.saturating_sub(body).div_ceil(chunk))
        .unwrap_or(usize::MAX)
        .max(1);
    let starts = |i: usize| body + i as u64 * chunk;
    // The caller's thread is one of them: it folds.
    let threads = threads.saturating_sub(1).clamp(1, MAX_WORKERS.min(count));
    let shelf = Mutex::new(Shelf {
        ready: std::collections::VecDeque::new(),
        taken: 0,
        next: 0,
        stop: false,
        spare: Vec::new(),
    });
    let changed = Condvar::new();
    let lock = || shelf.lock().unwrap_or_else(PoisonError::into_inner);

    let mut asm = Assembler::new(header, false);
    asm.decode = decode;
    let mut done: Vec<Trace> = Vec::new();
    let mut read_to = body;
    let outcome = std::thread::scope(|scope| -> Result<(), ReadError> {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let (i, spare) = {
                        let mut s = lock();
                        while !s.stop
                            && s.next < count
                            && s.next >= s.taken + AHEAD_PER_THREAD * threads
                        {
                            s = changed.wait(s).unwrap_or_else(PoisonError::into_inner);
                        }
                        if s.stop || s.next >= count {
                            return;
                        }
                        s.next += 1;
                        (s.next - 1, s.spare.pop().unwrap_or_default())
                    };
                    let next = (i + 1 < count).then(|| starts(i + 1));
                    // A panic must still fill the slot: the caller waits for it.
                    let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        read_cut(src, (starts(i), len), next, i == 0, decode, spare)
                    }))
                    .unwrap_or_else(|_| Err(io::Error::other("a thread reading it panicked")));
                    let mut s = lock();
                    // Taken in order: chunk `i` is not taken before it is here.
                    let slot = i.saturating_sub(s.taken);
                    if s.ready.len() <= slot {
                        s.ready.resize_with(slot + 1, || None);
                    }
                    if let Some(r) = s.ready.get_mut(slot) {
                        *r = Some(read);
                    }
                    changed.notify_all();
                }
            });
        }
        let stop = || {
            lock().stop = true;
            changed.notify_all();
        };
        // However this thread leaves (done, an error, or a panic in `each`), the workers stop:
        // the scope waits for them.
        let _stops = Stops(&stop);
        // Where the next chunk's first item must start; `None` once the input is read.
        let mut expect = Some(body);
        for k in 0..count {
            let Some(at) = expect else {
                break;
            };
            let read = {
                let mut s = lock();
                loop {
                    if let Some(c) = s.ready.front_mut().and_then(Option::take) {
                        s.ready.pop_front();
                        s.taken += 1;
                        changed.notify_all();
                        break c;
                    }
                    s = changed.wait(s).unwrap_or_else(PoisonError::into_inner);
                }
            };
            let next = (k + 1 < count).then(|| starts(k + 1));
            let mut c = match read.and_then(|c| {
                // The cut was found elsewhere than where the chunk before stopped: this
                // chunk is read here, from there.
                if c.first == Some(at) || (c.first.is_none() && c.stop == Some(at)) {
                    Ok(c)
                } else {
                    read_chunk(src, at, next, decode, Chunk::default())
                }
            }) {
                Ok(c) => c,
                Err(e) => return Err(io_err(e)),
            };
            for item in c.items.drain(..) {
                feed(&mut asm, &mut done, len, &c.bytes, item, &mut each);
            }
            expect = c.stop;
            read_to = c.read_to;
            c.bytes.clear();
            c.first = None;
            c.stop = None;
            lock().spare.push(c);
        }
        Ok(())
    });
    outcome?;
    done.push(asm.finish(read_to));
    for t in &mut done {
        set_file_len(t, read_to);
    }
    Ok(done)
}

/// Feeds one item a worker found to the assembler; events go to `each`.
fn feed(
    asm: &mut Assembler,
    done: &mut Vec<Trace>,
    len: u64,
    bytes: &[u8],
    item: Item,
    each: &mut impl FnMut(usize, u64, Skimmed<'_>),
) {
    match item {
        Item::Decoded {
            offset,
            end,
            record,
        } => {
            asm.took_event(end);
            each(done.len(), offset, Skimmed::Decoded(record));
        }
        Item::Event {
            offset,
            end,
            kind,
            payload,
        } => {
            asm.took_event(end);
            let payload = bytes.get(payload).unwrap_or_default();
            each(done.len(), offset, Skimmed::Raw(kind, payload));
        }
        Item::Frame {
            offset,
            end,
            entry,
            kind,
            flags,
            payload,
        } => {
            let payload = bytes.get(payload).unwrap_or_default();
            let f = RawFrame {
                offset,
                end,
                entry,
                kind,
                flags,
                payload,
            };
            let fed = asm.feed(FrameItem::Frame(f), false, len);
            hand_out(fed, offset, done, each);
        }
        Item::Damage(d) => {
            asm.feed(FrameItem::Damage(d), false, len);
        }
        Item::Truncated { offset } => {
            asm.feed(FrameItem::Truncated { offset }, false, len);
        }
    }
}

/// What the assembler gave for a frame at `offset`, as `TraceStream::drain` hands it on.
fn hand_out(
    fed: Fed<'_>,
    offset: u64,
    done: &mut Vec<Trace>,
    each: &mut impl FnMut(usize, u64, Skimmed<'_>),
) {
    match fed {
        Fed::Nothing | Fed::Stop => {}
        Fed::Event(r) => each(done.len(), offset, Skimmed::Decoded(r)),
        Fed::Raw(kind, payload) => each(done.len(), offset, Skimmed::Raw(kind, payload)),
        Fed::SegmentDone(t) => done.push(*t),
    }
}
