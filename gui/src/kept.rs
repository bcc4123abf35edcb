//! What reading a long trace made for the window, kept between opens: each host's tables and
//! digest (`analyzers::saved`, as `tpuscope report` keeps them), its lanes and the offsets its
//! records are read back from. A second `tpuscope view` of the same file is then a copy of
//! these, not a read of the trace. Where they are kept, and when a kept read still belongs to
//! the file, is the caller's (the cli's cache of reads): see [`ReadCache`].
//!
//! The bytes: the reads as `saved::write` writes them, then the lanes (spans and their summary
//! pyramid) and marks of each run as they lie in memory (only the build that wrote them reads
//! them: the cache names the binary), with an XXH3 of their own, then the length of the reads
//! part.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use tpuscope_analyzers::saved::Summed;
use xxhash_rust::xxh3::Xxh3;

use crate::data::{FileId, Mark, Run};
use crate::lanes::SourceLanes;

/// What a kept read is read from (a file).
pub trait ReadSeek: Read + Seek + Send {}

impl<T: Read + Seek + Send> ReadSeek for T {}

/// Where what reading a long trace made is kept between opens.
pub trait ReadCache: Send + Sync + std::fmt::Debug {
    /// The place of the trace at `path`, looked up before it is read; `None` keeps nothing
    /// (the cache is off, or the trace is not worth keeping).
    fn slot(&self, path: &Path) -> Option<Box<dyn CacheSlot>>;
}

/// One trace's place in a [`ReadCache`].
pub trait CacheSlot {
    /// What was kept for this very file (as it was when the slot was looked up), if anything:
    /// a reader of it and where in it those bytes lie.
    fn open(&self) -> Option<(Box<dyn ReadSeek>, Range<u64>)>;

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
        let words: Vec<u64> = marks
            .iter()
            .flat_map(|&(at, lead)| [at, u64::from(lead)])
            .collect();
        o.u64s(&words);
        r.lanes.write_raw(&mut o);
    }
    o.finish()?.write_all(&reads_len.to_le_bytes())
}

/// The runs [`write`] wrote of the file at `path` (read as `read`), from `at` in `src`; `None`
/// for any other bytes. The lanes are read as they come, a piece at a time, while the reads
/// decode on another core: what is held besides the runs is the reads' bytes.
pub(crate) fn decode(
    src: &mut dyn ReadSeek,
    at: Range<u64>,
    path: &Path,
    read: FileId,
) -> Option<Vec<Run>> {
    let len = at.end.checked_sub(at.start)?;
    src.seek(SeekFrom::Start(at.end.checked_sub(8)?)).ok()?;
    let mut word = [0u8; 8];
    src.read_exact(&mut word).ok()?;
    let reads_len = u64::from_le_bytes(word);
    // The reads, then the lanes and their sum, then the reads' length.
    let lanes_len = len.checked_sub(reads_len)?.checked_sub(16)?;
    src.seek(SeekFrom::Start(at.start)).ok()?;
    let mut reads = vec![0u8; usize::try_from(reads_len).ok()?];
    src.read_exact(&mut reads).ok()?;
    let (reads, kept) = std::thread::scope(|s| {
        let reads = s.spawn(move || tpuscope_analyzers::saved::decode(&reads, None));
        let mut d = In::new(&mut *src, lanes_len);
        let kept = lanes_of(&mut d).filter(|_| d.sum_matches());
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

/// Each run's marks and lanes, to the end of the part.
fn lanes_of(d: &mut In<'_>) -> Option<Vec<(Vec<Mark>, SourceLanes)>> {
    let mut out = Vec::new();
    while !d.is_empty() {
        let n = d.len()?;
        let mut words = Vec::with_capacity(n.checked_mul(2)?);
        d.words(n.checked_mul(2)?, |w: [u8; 8]| {
            words.push(u64::from_le_bytes(w))
        })?;
        let marks = words
            .chunks_exact(2)
            .map(|w| (w[0], u32::try_from(w[1]).unwrap_or(u32::MAX)))
            .collect();
        out.push((marks, SourceLanes::read_raw(d)?));
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

/// Little-endian words, buffered and summed ([`Summed`]).
pub(crate) struct Out<'a>(Summed<&'a mut dyn Write>);

impl<'a> Out<'a> {
    fn new(out: &'a mut dyn Write) -> Out<'a> {
        Out(Summed::new(out))
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.0.bytes(b);
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

    /// Words in order, as [`Out::u32`] each: a slice at a time where memory is little-endian.
    pub(crate) fn u32s(&mut self, v: &[u32]) {
        if cfg!(target_endian = "little") {
            self.bytes(bytemuck::cast_slice(v));
        } else {
            v.iter().for_each(|&w| self.u32(w));
        }
    }

    /// Words in order, as [`Out::u64`] each.
    pub(crate) fn u64s(&mut self, v: &[u64]) {
        if cfg!(target_endian = "little") {
            self.bytes(bytemuck::cast_slice(v));
        } else {
            v.iter().for_each(|&w| self.u64(w));
        }
    }

    /// Writes what is buffered and the sum of all of it; gives the output back.
    fn finish(self) -> io::Result<&'a mut dyn Write> {
        self.0.finish()
    }
}

/// A reader of what [`Out`] wrote, a piece at a time, summing what it reads (every read is
/// `None` past the part's end or on an error).
pub(crate) struct In<'a> {
    src: &'a mut dyn Read,
    buf: Vec<u8>,
    /// What of `buf` is not taken yet.
    pos: usize,
    end: usize,
    /// Bytes of the part not read into `buf` yet.
    left: u64,
    sum: Xxh3,
}

/// Bytes read from the source at a time.
const PIECE: usize = 1 << 20;

impl<'a> In<'a> {
    fn new(src: &'a mut dyn Read, len: u64) -> In<'a> {
        In {
            src,
            buf: vec![0; PIECE],
            pos: 0,
            end: 0,
            left: len,
            sum: Xxh3::new(),
        }
    }

    /// Makes at least `n` (≤ [`PIECE`]) bytes ready in `buf`.
    fn fill(&mut self, n: usize) -> Option<()> {
        if self.end - self.pos >= n {
            return Some(());
        }
        self.buf.copy_within(self.pos..self.end, 0);
        self.end -= self.pos;
        self.pos = 0;
        let want = usize::try_from(self.left)
            .unwrap_or(usize::MAX)
            .min(PIECE - self.end);
        let got = &mut self.buf[self.end..self.end + want];
        self.src.read_exact(got).ok()?;
        self.sum.update(got);
        self.end += want;
        self.left -= want as u64;
        (self.end >= n).then_some(())
    }

    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.fill(N)?;
        let (head, _) = self.buf[self.pos..self.end].split_first_chunk::<N>()?;
        let head = *head;
        self.pos += N;
        Some(head)
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

    /// Hands `n` words of `N` bytes to `each` in turn, a piece at a time.
    pub(crate) fn words<const N: usize>(
        &mut self,
        n: usize,
        mut each: impl FnMut([u8; N]),
    ) -> Option<()> {
        self.pieces::<N>(n, |bytes| {
            for w in bytes.chunks_exact(N) {
                let mut word = [0u8; N];
                word.copy_from_slice(w);
                each(word);
            }
        })
    }

    /// Hands the bytes of `n` words of `N` bytes to `each`, as many whole words at a time as a
    /// piece holds.
    pub(crate) fn pieces<const N: usize>(
        &mut self,
        n: usize,
        mut each: impl FnMut(&[u8]),
    ) -> Option<()> {
        let mut left = n;
        while left > 0 {
            self.fill(N)?;
            let ready = ((self.end - self.pos) / N).min(left);
            each(&self.buf[self.pos..self.pos + ready * N]);
            self.pos += ready * N;
            left -= ready;
        }
        Some(())
    }

    /// Whether the part is read to its end.
    fn is_empty(&self) -> bool {
        self.pos == self.end && self.left == 0
    }

    /// After the part: whether the sum that follows it is the sum of what was read.
    fn sum_matches(&mut self) -> bool {
        let mut sum = [0u8; 8];
        self.is_empty()
            && self.src.read_exact(&mut sum).is_ok()
            && self.sum.digest().to_le_bytes() == sum
    }

    /// A count of items that follow: each takes at least a byte, so no more than are left
    /// (a count read from bad bytes never makes a large allocation).
    pub(crate) fn len(&mut self) -> Option<usize> {
        let n = self.u64()?;
        let left = (self.end - self.pos) as u64 + self.left;
        usize::try_from(n).ok().filter(|_| n <= left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lane's spans and summary pyramid read back as they were built, for lengths around
    /// the pyramid's block sizes, with durations too long for a word; anything cut short or of
    /// another shape is refused.
    #[test]
    fn spans_and_their_summaries_read_back_as_built() {
        use crate::lanes::{Kind, Spans};
        for n in [0usize, 1, 2, 15, 16, 17, 255, 256, 257, 4097, 70_000] {
            let items = (0..n as u64)
                .map(|i| {
                    let start = (i * 7919) % 100_003 * 1_000;
                    let dur = if i % 1000 == 999 {
                        5_000_000_000
                    } else {
                        i % 97 * 10
                    };
                    let kind = Kind::ALL[i as usize % Kind::ALL.len()];
                    (start, start + dur, kind, i as u32)
                })
                .collect();
            let spans = Spans::from_unsorted(items);
            let mut bytes = Vec::new();
            let mut o = Out::new(&mut bytes);
            spans.write_raw(&mut o);
            o.finish().unwrap();
            let part = bytes.len() as u64 - 8;
            let read = |bytes: &[u8], part: u64| {
                let mut src = std::io::Cursor::new(bytes.to_vec());
                let mut d = In::new(&mut src, part);
                let s = Spans::read_raw(&mut d)?;
                (d.is_empty() && d.sum_matches()).then_some(s)
            };
            assert_eq!(read(&bytes, part).as_ref(), Some(&spans), "{n} spans");
            if n > 1 {
                // The last level (one summary) cut off: not read as a lane.
                assert_eq!(read(&bytes, part - 20), None, "{n} spans");
            }
        }
    }

    /// Words written by `Out` read back by `In` across many pieces (a long trace's lanes are
    /// hundreds of pieces; the samples' fit in one), and a changed byte fails the sum.
    #[test]
    fn words_read_back_across_pieces() {
        let n = 700_000usize;
        let mut bytes = Vec::new();
        let mut o = Out::new(&mut bytes);
        o.u64(n as u64);
        (0..n).for_each(|i| o.u32(i as u32 ^ 0x9e37_79b9));
        o.u8(7);
        (0..n).for_each(|i| o.u64((i as u64) << 33 | 5));
        o.finish().unwrap();
        let part = bytes.len() as u64 - 8;
        assert!(part > 3 * PIECE as u64);

        let read = |bytes: &[u8]| {
            let mut src = std::io::Cursor::new(bytes.to_vec());
            let mut d = In::new(&mut src, part);
            let count = d.len()?;
            let mut small = Vec::new();
            d.pieces::<4>(count, |b| {
                small.extend(
                    b.chunks_exact(4)
                        .map(|w| u32::from_le_bytes(w.try_into().unwrap())),
                )
            })?;
            let mark = d.u8()?;
            let mut large = Vec::new();
            d.words(count, |w| large.push(u64::from_le_bytes(w)))?;
            Some((small, mark, large, d.is_empty(), d.sum_matches()))
        };
        let (small, mark, large, empty, sum) = read(&bytes).unwrap();
        assert!(
            small
                .iter()
                .enumerate()
                .all(|(i, &v)| v == i as u32 ^ 0x9e37_79b9)
        );
        assert_eq!(mark, 7);
        assert!(
            large
                .iter()
                .enumerate()
                .all(|(i, &v)| v == (i as u64) << 33 | 5)
        );
        assert_eq!((small.len(), large.len(), empty, sum), (n, n, true, true));

        let mut changed = bytes.clone();
        changed[2 * PIECE + 3] ^= 1;
        assert!(!read(&changed).unwrap().4);
        // Cut: the words run past the end.
        assert!(read(&bytes[..PIECE]).is_none());
    }
}
