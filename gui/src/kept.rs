//! What reading a long trace made for the window, kept between opens: each host's tables and
//! digest (`analyzers::saved`, as `tpuscope report` keeps them), its lanes and the offsets its
//! records are read back from. A second `tpuscope view` of the same file is then a copy of
//! these, not a read of the trace. Where they are kept, and when a kept read still belongs to
//! the file, is the caller's (the cli's cache of reads): see [`ReadCache`].
//!
//! The bytes: the reads as `saved::write` writes them, then the lanes and marks of each run as
//! they lie in memory (only the build that wrote them reads them: the cache names the binary),
//! with an XXH3 of their own, then the length of the reads part.

use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use xxhash_rust::xxh3::Xxh3;

use crate::data::{FileId, Run};
use crate::lanes::SourceLanes;

/// Where what reading a long trace made is kept between opens.
pub trait ReadCache: Send + Sync + std::fmt::Debug {
    /// The place of the trace at `path`, looked up before it is read; `None` keeps nothing
    /// (the cache is off, or the trace is not worth keeping).
    fn slot(&self, path: &Path) -> Option<Box<dyn CacheSlot>>;
}

/// One trace's place in a [`ReadCache`].
pub trait CacheSlot {
    /// The bytes kept for this very file (as it was when the slot was looked up), if any.
    fn load(&self) -> Option<Vec<u8>>;

    /// Keeps what `write` writes, unless the file at `path` changed since the slot was looked
    /// up or may still grow (`ended`: every part of it has its end record).
    fn store(
        &self,
        path: &Path,
        ended: bool,
        write: &mut dyn FnMut(&mut dyn Write) -> io::Result<()>,
    );
}

/// Writes `runs` (one file's, as read) for [`decode`].
pub(crate) fn write(runs: &[Run], out: &mut dyn Write) -> io::Result<()> {
    let mut counted = Counted { out, n: 0 };
    tpuscope_analyzers::saved::write(
        runs.iter().map(|r| (r.trace.as_ref(), r.digest.as_ref())),
        &mut counted,
    )?;
    let reads_len = counted.n;
    let mut o = Out::new(counted.out);
    for r in runs {
        let marks = r.marks().unwrap_or_default();
        o.u64(marks.len() as u64);
        marks.iter().for_each(|&m| o.u64(m));
        r.lanes.write_raw(&mut o);
    }
    o.finish()?;
    o.out.write_all(&reads_len.to_le_bytes())
}

/// The runs [`write`] wrote of the file at `path` (read as `read`); `None` for any other bytes.
pub(crate) fn decode(bytes: &[u8], path: &Path, read: FileId) -> Option<Vec<Run>> {
    let (body, reads_len) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
    let reads_len = usize::try_from(u64::from_le_bytes(reads_len.try_into().ok()?)).ok()?;
    let (reads, kept) = body.split_at_checked(reads_len)?;
    let (kept, sum) = kept.split_at_checked(kept.len().checked_sub(8)?)?;
    if xxhash_rust::xxh3::xxh3_64(kept).to_le_bytes() != *sum {
        return None;
    }
    // The two parts at once: the reads on another core while this one takes the lanes.
    let (reads, kept) = std::thread::scope(|s| {
        let reads = s.spawn(|| tpuscope_analyzers::saved::decode(reads));
        let kept = lanes_of(kept);
        (reads.join().ok().flatten(), kept)
    });
    let (reads, kept) = (reads?, kept?);
    if reads.len() != kept.len() {
        return None;
    }
    Some(
        reads
            .into_iter()
            .zip(kept)
            .map(|((trace, digest), (marks, lanes))| {
                Run::read_back(trace, Arc::new(digest), Arc::new(lanes), path, read, marks)
            })
            .collect(),
    )
}

/// Each run's marks and lanes, to the end of the bytes.
fn lanes_of(bytes: &[u8]) -> Option<Vec<(Vec<u64>, SourceLanes)>> {
    let mut d = In { b: bytes };
    let mut out = Vec::new();
    while !d.b.is_empty() {
        let n = d.len()?;
        let marks = d.u64s(n)?;
        out.push((marks, SourceLanes::read_raw(&mut d)?));
    }
    Some(out)
}

/// A writer that counts what went through it.
struct Counted<'a> {
    out: &'a mut dyn Write,
    n: u64,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Buffered little-endian words with their XXH3 (the first error is kept and returned by
/// [`Out::finish`]: the raw writers push without a `?` at every word).
pub(crate) struct Out<'a> {
    buf: Vec<u8>,
    out: &'a mut dyn Write,
    sum: Xxh3,
    failed: Option<io::Error>,
}

const FLUSH_AT: usize = 1 << 20;

impl<'a> Out<'a> {
    fn new(out: &'a mut dyn Write) -> Out<'a> {
        Out {
            buf: Vec::with_capacity(FLUSH_AT + 64),
            out,
            sum: Xxh3::new(),
            failed: None,
        }
    }

    fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= FLUSH_AT {
            self.flush();
        }
    }

    fn flush(&mut self) {
        self.sum.update(&self.buf);
        if self.failed.is_none()
            && let Err(e) = self.out.write_all(&self.buf)
        {
            self.failed = Some(e);
        }
        self.buf.clear();
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }

    /// Flushes what is buffered and writes the sum of all of it.
    fn finish(&mut self) -> io::Result<()> {
        self.flush();
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let sum = self.sum.digest().to_le_bytes();
        self.out.write_all(&sum)
    }
}

/// A cursor over what [`Out`] wrote: every read is `None` past the end.
pub(crate) struct In<'a> {
    b: &'a [u8],
}

impl In<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.b.split_first_chunk::<N>()?;
        self.b = rest;
        Some(*head)
    }

    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|[b]| b)
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }

    /// `n` bytes.
    pub(crate) fn bytes(&mut self, n: usize) -> Option<&[u8]> {
        let (head, rest) = self.b.split_at_checked(n)?;
        self.b = rest;
        Some(head)
    }

    /// `n` words of 4 bytes, in one pass over their bytes.
    pub(crate) fn u32s(&mut self, n: usize) -> Option<Vec<u32>> {
        let b = self.bytes(n.checked_mul(4)?)?;
        Some(
            b.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        )
    }

    /// `n` words of 8 bytes.
    pub(crate) fn u64s(&mut self, n: usize) -> Option<Vec<u64>> {
        let b = self.bytes(n.checked_mul(8)?)?;
        Some(
            b.chunks_exact(8)
                .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        )
    }

    /// A count of items that follow: each takes at least a byte, so no more than are left
    /// (a count read from bad bytes never makes a large allocation).
    pub(crate) fn len(&mut self) -> Option<usize> {
        usize::try_from(self.u64()?)
            .ok()
            .filter(|&n| n <= self.b.len())
    }
}
