//! Timeline data: the spans of each lane (a host thread or a device), sorted, with a summary
//! pyramid so that a frame draws at most about one bar per pixel column whatever the zoom.

use rustc_hash::FxHashMap;
use std::sync::Arc;
use tpuscope_analyzers::column::Column;
use tpuscope_analyzers::digest::{Digest, DigestBuilder};

use tpuscope_core::Trace;
use tpuscope_core::event::{Direction, Record};
use tpuscope_core::wire::TransferRef;

use crate::data::Run;
use crate::kept::{In, Out};

/// What a span stands for (its colour).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Compile,
    Execute,
    /// Device work of an execute (dispatch to completion on that device).
    Device,
    H2d,
    D2h,
    Sync,
    Cache,
    Error,
    Note,
    Other,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::Compile,
        Kind::Execute,
        Kind::Device,
        Kind::H2d,
        Kind::D2h,
        Kind::Sync,
        Kind::Cache,
        Kind::Error,
        Kind::Note,
        Kind::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Compile => "compile",
            Kind::Execute => "execute",
            Kind::Device => "device work",
            Kind::H2d => "host→device",
            Kind::D2h => "device→host",
            Kind::Sync => "sync",
            Kind::Cache => "cache",
            Kind::Error => "error",
            Kind::Note => "note",
            Kind::Other => "other",
        }
    }
}

/// Spans per block of the first summary level, and the factor between levels.
const FANOUT: usize = 16;

/// What a range of spans amounts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    pub max_end: u64,
    pub max_dur: u64,
    /// Index of the longest span.
    pub longest: u32,
}

impl Summary {
    const EMPTY: Summary = Summary {
        max_end: 0,
        max_dur: 0,
        longest: u32::MAX,
    };

    fn add(self, o: Summary) -> Summary {
        Summary {
            max_end: self.max_end.max(o.max_end),
            max_dur: self.max_dur.max(o.max_dur),
            longest: if self.longest == u32::MAX || o.max_dur > self.max_dur {
                o.longest
            } else {
                self.longest
            },
        }
    }
}

/// Values read and written by index: what sorting and searching a lane's columns need.
trait Indexed<T: Copy> {
    /// The `i`-th value; `i < len`.
    fn at(&self, i: usize) -> T;

    fn set(&mut self, i: usize, v: T);

    /// The first index in `lo..hi` whose value fails `pred`, all those before passing it (as
    /// `slice::partition_point`).
    fn partition_point(&self, lo: usize, hi: usize, pred: impl Fn(T) -> bool) -> usize {
        let (mut lo, mut hi) = (lo, hi);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if pred(self.at(mid)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Puts value `order[i]` at `i`, in place (`order` is a permutation of `0..len`); `done` is
    /// scratch of `len` bits.
    fn permute(&mut self, order: &[u32], done: &mut [u64]) {
        done.fill(0);
        for first in 0..order.len() {
            if done[first / 64] & (1 << (first % 64)) != 0 {
                continue;
            }
            // Follow the cycle through `first`: each slot takes the value of the one it names.
            let held = self.at(first);
            let mut i = first;
            loop {
                done[i / 64] |= 1 << (i % 64);
                let from = order[i] as usize;
                if from == first {
                    self.set(i, held);
                    break;
                }
                let v = self.at(from);
                self.set(i, v);
                i = from;
            }
        }
    }
}

impl<T: Copy> Indexed<T> for Column<T> {
    fn at(&self, i: usize) -> T {
        Column::at(self, i)
    }

    fn set(&mut self, i: usize, v: T) {
        Column::set(self, i, v);
    }
}

/// Spans' start times, 4 bytes each where they can be: in blocks of [`BLOCK`], each an offset
/// from the block's first (a block of a busy lane spans well under the 4.3 s a word holds);
/// a block that does not fit keeps whole times.
#[derive(Clone, Debug, Default)]
struct Starts {
    blocks: Vec<Block>,
    len: usize,
}

#[derive(Clone, Debug)]
enum Block {
    Offsets { base: u64, off: Vec<u32> },
    Whole(Vec<u64>),
}

const BLOCK_BITS: u32 = 12;
const BLOCK: usize = 1 << BLOCK_BITS;

impl Block {
    /// Keeps whole times from now on.
    fn widen(&mut self) {
        if let Block::Offsets { base, off } = self {
            let whole = off.iter().map(|&o| *base + u64::from(o)).collect();
            *self = Block::Whole(whole);
        }
    }

    /// `t` as an offset of this block, when it is one that fits.
    fn offset(&self, t: u64) -> Option<u32> {
        match self {
            Block::Offsets { base, .. } => t.checked_sub(*base).and_then(|d| u32::try_from(d).ok()),
            Block::Whole(_) => None,
        }
    }
}

impl Starts {
    fn push(&mut self, t: u64) {
        match self.blocks.last_mut() {
            Some(b) if self.len & (BLOCK - 1) != 0 => {
                if b.offset(t).is_none() {
                    b.widen();
                }
                match b {
                    Block::Offsets { base, off } => off.push(u32::try_from(t - *base).unwrap_or(0)),
                    Block::Whole(w) => w.push(t),
                }
            }
            _ => {
                let mut off = Vec::with_capacity(BLOCK);
                off.push(0);
                self.blocks.push(Block::Offsets { base: t, off });
            }
        }
        self.len += 1;
    }

    fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.len).map(|i| self.at(i))
    }

    /// Every time `by` ns earlier (0 at the earliest).
    fn earlier_by(&mut self, by: u64) {
        for b in &mut self.blocks {
            match b {
                Block::Offsets { base, .. } if *base >= by => *base -= by,
                _ => {
                    b.widen();
                    if let Block::Whole(w) = b {
                        w.iter_mut().for_each(|t| *t = t.saturating_sub(by));
                    }
                }
            }
        }
    }
}

impl Indexed<u64> for Starts {
    fn at(&self, i: usize) -> u64 {
        match &self.blocks[i >> BLOCK_BITS] {
            Block::Offsets { base, off } => base + u64::from(off[i & (BLOCK - 1)]),
            Block::Whole(w) => w[i & (BLOCK - 1)],
        }
    }

    fn set(&mut self, i: usize, t: u64) {
        let b = &mut self.blocks[i >> BLOCK_BITS];
        let j = i & (BLOCK - 1);
        match b.offset(t) {
            Some(o) => {
                if let Block::Offsets { off, .. } = b {
                    off[j] = o;
                }
            }
            None => {
                b.widen();
                if let Block::Whole(w) = b {
                    w[j] = t;
                }
            }
        }
    }
}

impl PartialEq for Starts {
    fn eq(&self, o: &Starts) -> bool {
        self.len == o.len && self.iter().eq(o.iter())
    }
}

/// A duration word that says "in `wide`".
const WIDE: u32 = u32::MAX;

/// How far back [`Spans::push`] moves a span that came late before leaving it to the sort.
const MAX_MOVE: usize = 64;

/// The spans of one lane, sorted by start (those that start together in the order they came),
/// 13 bytes each.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spans {
    start: Starts,
    /// How long each lasts; [`WIDE`]: 4.3 s or more, the duration is in `wide`.
    dur: Column<u32>,
    /// The durations that do not fit a word, by record (a record is one span of a lane).
    wide: FxHashMap<u32, u64>,
    kind: Column<Kind>,
    /// Index of the record in its trace's `events`.
    event: Column<u32>,
    /// Appended in order so far (no sort needed).
    sorted: bool,
    /// `levels[k][b]` summarises spans `[b·16^(k+1), (b+1)·16^(k+1))`.
    levels: Vec<Vec<Summary>>,
}

/// One drawn bar: a span, or spans narrower than a pixel merged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bar {
    /// Pixels from the left of the lane (may lie outside `0..width` for clipped spans).
    pub x0: f32,
    pub x1: f32,
    /// The colour: the kind of the longest span in it.
    pub kind: Kind,
    /// The span it stands for (its longest one when merged).
    pub span: u32,
    pub count: u32,
}

impl Spans {
    /// Appends a span (any order: [`Spans::finish`] sorts). Records are written when a call
    /// ends, so a lane's spans come nearly sorted by start: one that comes a little late is
    /// moved back into place now (ties stay in the order they came), which spares the sort
    /// and the memory it takes; one that comes far out of place leaves the sort to `finish`.
    fn push(&mut self, start: u64, end: u64, kind: Kind, event: u32) {
        let end = end.max(start);
        if self.is_empty() {
            self.sorted = true;
        }
        let d = self.word(event, end - start);
        // Its place: after every span that starts no later (ties stay in the order they came).
        // Giving up leaves the same order to the sort: a span is never moved past one that
        // starts with it.
        let n = self.len();
        let mut at = n;
        if self.sorted {
            while at > 0 && self.start.at(at - 1) > start {
                if n - at >= MAX_MOVE {
                    self.sorted = false;
                    at = n;
                    break;
                }
                at -= 1;
            }
        }
        self.start.push(start);
        self.dur.push(d);
        self.kind.push(kind);
        self.event.push(event);
        if at < n {
            // Each column shifted by one past `at`, as it lies (a wide duration stays keyed
            // by its record).
            for i in (at..n).rev() {
                self.start.set(i + 1, self.start.at(i));
                self.dur.set(i + 1, self.dur.at(i));
                self.kind.set(i + 1, self.kind.at(i));
                self.event.set(i + 1, self.event.at(i));
            }
            self.start.set(at, start);
            self.dur.set(at, d);
            self.kind.set(at, kind);
            self.event.set(at, event);
        }
    }

    fn get_raw(&self, i: usize) -> (u64, u64, Kind, u32) {
        (
            self.start.at(i),
            self.end_at(i),
            self.kind.at(i),
            self.event.at(i),
        )
    }

    /// A duration as its word, the wide ones kept aside.
    fn word(&mut self, event: u32, dur: u64) -> u32 {
        match u32::try_from(dur) {
            Ok(d) if d < WIDE => d,
            _ => {
                self.wide.insert(event, dur);
                WIDE
            }
        }
    }

    /// Moves every span `by` ns earlier (to its source's origin), sorts them and builds the
    /// summaries.
    fn finish(&mut self, by: u64) {
        let n = self.len();
        self.start.earlier_by(by);
        if !self.sorted {
            // Spans that start together keep their order in the file (the order they came in).
            let mut keys: Vec<(u64, u32)> = self.start.iter().zip(0..).collect();
            keys.sort_unstable();
            let order: Vec<u32> = keys.into_iter().map(|(_, i)| i).collect();
            let mut done = vec![0u64; n.div_ceil(64)];
            self.start.permute(&order, &mut done);
            self.dur.permute(&order, &mut done);
            self.kind.permute(&order, &mut done);
            self.event.permute(&order, &mut done);
            self.sorted = true;
        }
        self.summarize();
    }

    /// Builds the summary pyramid of the sorted spans.
    fn summarize(&mut self) {
        let n = self.len();
        // The first level straight from the spans (a summary per span would be as large as the
        // spans themselves), each next one from the level below.
        self.levels.clear();
        if n > 1 {
            let first: Vec<Summary> = (0..n)
                .step_by(FANOUT)
                .map(|b| {
                    (b..(b + FANOUT).min(n)).fold(Summary::EMPTY, |a, i| a.add(self.single(i)))
                })
                .collect();
            self.levels.push(first);
        }
        while let Some(below) = self.levels.last().filter(|l| l.len() > 1) {
            let level: Vec<Summary> = below
                .chunks(FANOUT)
                .map(|c| c.iter().fold(Summary::EMPTY, |a, &b| a.add(b)))
                .collect();
            self.levels.push(level);
        }
    }

    /// Writes the finished spans and their summaries as they lie (the cache of reads: only this
    /// build reads them back, [`Spans::read_raw`]).
    pub(crate) fn write_raw(&self, o: &mut Out<'_>) {
        o.u64(self.len() as u64);
        o.u64(self.start.blocks.len() as u64);
        for b in &self.start.blocks {
            match b {
                Block::Offsets { base, off } => {
                    o.u8(0);
                    o.u64(*base);
                    o.u64(off.len() as u64);
                    o.u32s(off);
                }
                Block::Whole(w) => {
                    o.u8(1);
                    o.u64(w.len() as u64);
                    o.u64s(w);
                }
            }
        }
        self.dur.for_each_slice(|v| o.u32s(v));
        let mut kinds = Vec::new();
        self.kind.for_each_slice(|k| {
            kinds.clear();
            kinds.extend(k.iter().map(|&k| k as u8));
            o.bytes(&kinds);
        });
        self.event.for_each_slice(|v| o.u32s(v));
        let mut wide: Vec<(u32, u64)> = self.wide.iter().map(|(&e, &d)| (e, d)).collect();
        wide.sort_unstable();
        o.u64(wide.len() as u64);
        for (e, d) in wide {
            o.u32(e);
            o.u64(d);
        }
        // The pyramid too: building it again is a pass over every span, on the path to the
        // first frame of a second view.
        o.u64(self.levels.len() as u64);
        for level in &self.levels {
            o.u64(level.len() as u64);
            o.u64s(&level.iter().map(|s| s.max_end).collect::<Vec<_>>());
            o.u64s(&level.iter().map(|s| s.max_dur).collect::<Vec<_>>());
            o.u32s(&level.iter().map(|s| s.longest).collect::<Vec<_>>());
        }
    }

    /// The length of each level of the pyramid [`Spans::summarize`] builds over `n` spans.
    fn level_lens(n: usize) -> Vec<usize> {
        let mut lens = Vec::new();
        if n > 1 {
            let mut len = n.div_ceil(FANOUT);
            lens.push(len);
            while len > 1 {
                len = len.div_ceil(FANOUT);
                lens.push(len);
            }
        }
        lens
    }

    /// What [`Spans::write_raw`] wrote; `None` for anything that does not hang together.
    pub(crate) fn read_raw(d: &mut In<'_>) -> Option<Spans> {
        let n = d.len()?;
        let mut start = Starts {
            blocks: Vec::new(),
            len: 0,
        };
        for _ in 0..d.len()? {
            let block = match d.u8()? {
                0 => {
                    let base = d.u64()?;
                    let n = d.len()?;
                    let mut off = Vec::with_capacity(n);
                    d.words(n, |w| off.push(u32::from_le_bytes(w)))?;
                    Block::Offsets { base, off }
                }
                1 => {
                    let n = d.len()?;
                    let mut whole = Vec::with_capacity(n);
                    d.words(n, |w| whole.push(u64::from_le_bytes(w)))?;
                    Block::Whole(whole)
                }
                _ => return None,
            };
            let len = match &block {
                Block::Offsets { off, .. } => off.len(),
                Block::Whole(w) => w.len(),
            };
            // Every block full but the last, as `Starts::push` leaves them.
            if !start.len.is_multiple_of(BLOCK) || len == 0 || len > BLOCK {
                return None;
            }
            start.len += len;
            start.blocks.push(block);
        }
        if start.len != n {
            return None;
        }
        let mut s = Spans {
            start,
            sorted: true,
            ..Spans::default()
        };
        // A piece at a time through `scratch`: a column grows by whole slices.
        let mut scratch: Vec<u32> = Vec::new();
        let mut words = |d: &mut In<'_>, col: &mut Column<u32>| {
            d.pieces::<4>(n, |b| {
                scratch.clear();
                scratch.extend(
                    b.chunks_exact(4)
                        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])),
                );
                col.extend_from_slice(&scratch);
            })
        };
        words(d, &mut s.dur)?;
        let mut kinds: Vec<Kind> = Vec::new();
        let mut bad = false;
        d.pieces::<1>(n, |b| {
            kinds.clear();
            kinds.extend(
                b.iter()
                    .map_while(|&k| Kind::ALL.get(usize::from(k)).copied()),
            );
            bad |= kinds.len() != b.len();
            s.kind.extend_from_slice(&kinds);
        })?;
        if bad {
            return None;
        }
        words(d, &mut s.event)?;
        for _ in 0..d.len()? {
            let (e, dur) = (d.u32()?, d.u64()?);
            s.wide.insert(e, dur);
        }
        // The pyramid, of the shape `summarize` gives `n` spans, each longest span one of them.
        let lens = Spans::level_lens(n);
        if d.len()? != lens.len() {
            return None;
        }
        for want in lens {
            if d.len()? != want {
                return None;
            }
            let (mut ends, mut durs, mut longest) = (
                Vec::with_capacity(want),
                Vec::with_capacity(want),
                Vec::with_capacity(want),
            );
            d.words(want, |w| ends.push(u64::from_le_bytes(w)))?;
            d.words(want, |w| durs.push(u64::from_le_bytes(w)))?;
            d.words(want, |w| longest.push(u32::from_le_bytes(w)))?;
            if longest.iter().any(|&l| l != u32::MAX && l as usize >= n) {
                return None;
            }
            let level = ends.into_iter().zip(durs).zip(longest);
            s.levels.push(
                level
                    .map(|((max_end, max_dur), longest)| Summary {
                        max_end,
                        max_dur,
                        longest,
                    })
                    .collect(),
            );
        }
        Some(s)
    }

    #[cfg(test)]
    pub(crate) fn from_unsorted(items: Vec<(u64, u64, Kind, u32)>) -> Spans {
        let mut s = Spans::default();
        for (a, b, k, e) in items {
            s.push(a, b, k, e);
        }
        s.finish(0);
        s
    }

    pub fn len(&self) -> usize {
        self.start.len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Span `i`: (start, end, kind, record); `None` past the end.
    pub fn get(&self, i: usize) -> Option<(u64, u64, Kind, u32)> {
        (i < self.len()).then(|| self.get_raw(i))
    }

    /// The latest end of any span.
    pub fn max_end(&self) -> Option<u64> {
        match self.levels.last().and_then(|l| l.first()) {
            Some(s) => Some(s.max_end),
            None => self.len().checked_sub(1).map(|i| self.end_at(i)),
        }
    }

    fn dur(&self, i: usize) -> u64 {
        match self.dur.at(i) {
            WIDE => self
                .wide
                .get(&self.event.at(i))
                .copied()
                .unwrap_or(u64::from(WIDE)),
            d => u64::from(d),
        }
    }

    fn end_at(&self, i: usize) -> u64 {
        self.start.at(i) + self.dur(i)
    }

    fn single(&self, i: usize) -> Summary {
        Summary {
            max_end: self.end_at(i),
            max_dur: self.dur(i),
            longest: i as u32,
        }
    }

    /// Summary of spans `i..j`, from the largest aligned blocks that fit.
    pub fn summary(&self, i: usize, j: usize) -> Summary {
        let mut acc = Summary::EMPTY;
        let mut p = i;
        while p < j {
            let mut k = 0;
            let mut size = 1;
            while k < self.levels.len() && p.is_multiple_of(size * FANOUT) && p + size * FANOUT <= j
            {
                k += 1;
                size *= FANOUT;
            }
            let s = if k == 0 {
                self.single(p)
            } else {
                self.levels[k - 1][p / size]
            };
            acc = acc.add(s);
            p += size;
        }
        acc
    }

    /// Calls `f` for every span in `i..j` ending at or after `t`, descending only into blocks
    /// that hold one (spans that started before the view and reach into it).
    fn each_reaching(&self, i: usize, j: usize, t: u64, f: &mut impl FnMut(usize)) {
        let mut p = i;
        while p < j {
            let mut k = 0;
            let mut size = 1;
            while k < self.levels.len() && p.is_multiple_of(size * FANOUT) && p + size * FANOUT <= j
            {
                k += 1;
                size *= FANOUT;
            }
            self.descend(k, p / size, t, f);
            p += size;
        }
    }

    /// `f` for the spans of block `b` of level `k` (level 0: span `b`) that reach `t`.
    fn descend(&self, k: usize, b: usize, t: u64, f: &mut impl FnMut(usize)) {
        if k == 0 {
            if b < self.len() && self.end_at(b) >= t {
                f(b);
            }
            return;
        }
        if self.levels[k - 1].get(b).is_none_or(|s| s.max_end < t) {
            return;
        }
        for c in b * FANOUT..(b + 1) * FANOUT {
            self.descend(k - 1, c, t, f);
        }
    }

    /// The bars to draw for the view `[v0, v1)` (ns) over `width` pixels, appended to `out`:
    /// spans at least a pixel wide one by one, narrower ones merged per pixel column (and with
    /// touching neighbours of the same kind), so the work is bounded by the pixels, not the
    /// spans. A merged bar has the colour of its longest span.
    pub fn bars(&self, v0: f64, v1: f64, width: f32, out: &mut Vec<Bar>) {
        let n = self.len();
        if n == 0 || width <= 0.0 || v1 <= v0 {
            return;
        }
        let ns_per_px = (v1 - v0) / f64::from(width);
        let px = |t: u64| ((t as f64 - v0) / ns_per_px) as f32;
        let lo = v0.max(0.0).floor() as u64;
        let hi = v1.max(0.0).ceil() as u64;
        let last = self.start.partition_point(0, n, |s| s <= hi);
        let mut acc: Option<Bar> = None;
        let push = |out: &mut Vec<Bar>, acc: &mut Option<Bar>, b: Bar, wide: bool| {
            if wide {
                out.extend(acc.take());
                out.push(b);
                return;
            }
            match acc {
                // Touching merged bars become one only when they show the same kind: a long run
                // of executes stays one bar, a compile among them keeps its own colour.
                // Anything within one pixel is one bar whatever its kinds.
                Some(a)
                    if b.x0 <= a.x1 + 1.0
                        && (b.kind == a.kind || b.x1 <= a.x1 || b.x1 - a.x0 < 1.0) =>
                {
                    a.x1 = a.x1.max(b.x1);
                    if self.dur(b.span as usize) > self.dur(a.span as usize) {
                        a.span = b.span;
                        a.kind = b.kind;
                    }
                    a.count += b.count;
                }
                _ => {
                    out.extend(acc.take());
                    *acc = Some(b);
                }
            }
        };
        let bar = |i: usize, count: u32, end: u64| Bar {
            x0: px(self.start.at(i)),
            x1: px(end),
            kind: self.kind.at(i),
            span: i as u32,
            count,
        };
        // Spans that started before the view but reach into it.
        let before = self.start.partition_point(0, last, |s| s < lo);
        let mut reaching = Vec::new();
        self.each_reaching(0, before, lo, &mut |i| reaching.push(i));
        for i in reaching {
            let wide = self.dur(i) as f64 >= ns_per_px;
            push(out, &mut acc, bar(i, 1, self.end_at(i)), wide);
        }
        let mut i = before;
        while i < last {
            if self.dur(i) as f64 >= ns_per_px {
                push(out, &mut acc, bar(i, 1, self.end_at(i)), true);
                i += 1;
                continue;
            }
            // Every span starting in this pixel column.
            let col = ((self.start.at(i) as f64 - v0) / ns_per_px).floor();
            let col_end = v0 + (col + 1.0) * ns_per_px;
            let j = self
                .start
                .partition_point(i, last, |s| (s as f64) < col_end)
                .max(i + 1);
            let s = self.summary(i, j);
            if s.max_dur as f64 >= ns_per_px {
                // A wide span starts in this column too: take this one alone and go on.
                push(out, &mut acc, bar(i, 1, self.end_at(i)), false);
                i += 1;
                continue;
            }
            let longest = s.longest as usize;
            let b = Bar {
                x0: px(self.start.at(i)),
                x1: px(s.max_end),
                kind: self.kind.at(longest),
                span: s.longest,
                count: (j - i) as u32,
            };
            push(out, &mut acc, b, false);
            i = j;
        }
        out.extend(acc);
    }

    /// Spans of this lane whose record is `event` (usually one).
    pub fn find_event(&self, event: u32) -> Option<usize> {
        self.event.iter().position(|e| e == event)
    }

    /// The span of record `event` among those that start at `start`: found by bisection, not
    /// by a scan of the lane.
    fn find_event_at(&self, event: u32, start: u64) -> Option<usize> {
        let n = self.len();
        let first = self.start.partition_point(0, n, |s| s < start);
        (first..n)
            .take_while(|&i| self.start.at(i) == start)
            .find(|&i| self.event.at(i) == event)
    }
}

/// A row of the timeline: a lane's spans, kept in ns since its source's origin, drawn `shift` ns
/// later (a host of a job is drawn on the job timeline, whose start may come before its own).
#[derive(Clone, Debug)]
pub struct Lane {
    pub source: usize,
    pub label: String,
    pub device: bool,
    spans: Arc<Spans>,
    shift: u64,
}

impl Lane {
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Where span `i` starts and ends on the timeline (ns since the view's origin).
    pub fn start(&self, i: usize) -> Option<u64> {
        self.spans.get(i).map(|(s, ..)| s + self.shift)
    }

    pub fn end(&self, i: usize) -> Option<u64> {
        self.spans.get(i).map(|(_, e, ..)| e + self.shift)
    }

    /// The record span `i` stands for (its index among its trace's events).
    pub fn event(&self, i: usize) -> Option<usize> {
        self.spans.get(i).map(|(.., e)| e as usize)
    }

    /// [`Spans::bars`] of the view `[v0, v1)` on the timeline.
    pub fn bars(&self, v0: f64, v1: f64, width: f32, out: &mut Vec<Bar>) {
        let shift = self.shift as f64;
        self.spans.bars(v0 - shift, v1 - shift, width, out);
    }

    /// The span of record `event` on this lane, drawn from `t0`. `at`: its record's time,
    /// when known: a host lane's span starts then, so it is looked for there alone; a
    /// device's (a completion's starts when its launch did) is looked for everywhere when it
    /// is not there.
    fn find_event(&self, event: u32, at: Option<u64>, t0: u64) -> Option<usize> {
        let Some(at) = at else {
            return self.spans.find_event(event);
        };
        // As the lane keeps it: in ns since its source's origin (`t0 + shift`).
        let start = at.saturating_sub(t0 + self.shift);
        match self.spans.find_event_at(event, start) {
            Some(i) => Some(i),
            None if self.device => self.spans.find_event(event),
            None => None,
        }
    }
}

/// Everything the timeline draws.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    pub lanes: Vec<Lane>,
    /// Latest end over all lanes (ns since each source's start).
    pub total_ns: u64,
    /// Earliest start over all lanes (the process may start long before its first PJRT call).
    pub first_ns: u64,
    /// Start of each source (monotonic ns): times are drawn relative to it.
    pub t0: Vec<u64>,
    /// Step boundaries: (source, ns since its start, step number).
    pub steps: Vec<(usize, u64, u64)>,
    /// Each source's phases, in ns since its start: (source, steady state start, tail start).
    pub phases: Vec<(usize, u64, u64)>,
    pub spans: usize,
    /// The sources are the hosts of one job, drawn on the job timeline: `t0` of each is the
    /// same instant on its own clock, so one x is one moment on every host's lanes.
    pub aligned: bool,
    /// Each source's run (by source index), to find a record's span from its time.
    runs: Vec<Option<Arc<Run>>>,
}

/// The start a trace's times are drawn from: its manifest's, unless events came earlier
/// (`first`: the earliest time after 0 of an event).
pub fn origin(trace: &Trace, first: Option<u64>) -> u64 {
    match (trace.manifest.as_ref().map(|m| m.start_mono_ns), first) {
        (Some(m), Some(f)) if m > 0 => m.min(f),
        (_, Some(f)) => f,
        (Some(m), None) => m,
        (None, None) => 0,
    }
}

/// The job a trace belongs to: the one a merge put it in, else its manifest's.
fn job_of(trace: &Trace) -> &str {
    match (&trace.segment, &trace.manifest) {
        (Some(s), _) => &s.job_id,
        (None, Some(m)) => &m.job_id,
        (None, None) => "",
    }
}

/// For the hosts of one job (a merged file, traces sharing a job id, or the processes of one
/// multi-process PJRT client), each source's origin
/// on its own monotonic clock such that all origins are the same job-timeline instant: the
/// earliest start of any host. `None` when the traces are not one job's hosts.
fn job_origins(runs: &[(usize, &Run)]) -> Option<Vec<u64>> {
    let job = job_of(&runs.first()?.1.trace);
    let shared_id = !job.is_empty() && runs.iter().all(|(_, r)| job_of(&r.trace) == job);
    let all: Vec<&Trace> = runs.iter().map(|(_, r)| r.trace.as_ref()).collect();
    let last: Vec<Option<u64>> = runs.iter().map(|(_, r)| r.digest.last_t_in_file).collect();
    if runs.len() < 2 || !(shared_id || tpuscope_analyzers::hosts::one_pjrt_job_at(&all, &last)) {
        return None;
    }
    let offsets: Vec<i128> = runs
        .iter()
        .map(|(_, r)| {
            let clocks = r.digest.others().map(|(_, rec)| rec);
            i128::from(tpuscope_core::align::job_offset_of(&r.trace, clocks))
        })
        .collect();
    let start = runs
        .iter()
        .zip(&offsets)
        .map(|((_, r), off)| i128::from(r.lanes.origin) + off)
        .min()?;
    Some(
        offsets
            .iter()
            .map(|off| u64::try_from((start - off).max(0)).unwrap_or(0))
            .collect(),
    )
}

impl Timeline {
    /// Lanes of every source, in source order: its threads (by thread id), then its devices.
    /// The hosts of one job are drawn on the job timeline (see [`Timeline::aligned`]).
    pub fn build(shared: &[(usize, Arc<Run>)]) -> Timeline {
        let runs: Vec<(usize, &Run)> = shared.iter().map(|(s, r)| (*s, r.as_ref())).collect();
        let runs = runs.as_slice();
        let mut tl = Timeline::default();
        let sources = runs.iter().map(|(s, _)| *s + 1).max().unwrap_or(0);
        tl.t0 = vec![0; sources];
        tl.runs = vec![None; sources];
        for (s, r) in shared {
            tl.runs[*s] = Some(Arc::clone(r));
        }
        let multi = runs.len() > 1;
        let job = job_origins(runs);
        tl.aligned = job.is_some();
        for (k, &(source, run)) in runs.iter().enumerate() {
            let t0 = job
                .as_ref()
                .and_then(|o| o.get(k).copied())
                .unwrap_or(run.lanes.origin);
            tl.t0[source] = t0;
            let prefix = if multi {
                format!("{} · ", short_label(&source_label(&run.trace, source)))
            } else {
                String::new()
            };
            tl.add_source(source, run, t0, &prefix);
        }
        tl
    }

    /// The phases, steps and lanes of one source whose times are drawn from `t0`.
    fn add_source(&mut self, source: usize, run: &Run, t0: u64, prefix: &str) {
        let rel = |t: u64| t.saturating_sub(t0);
        let (trace, digest) = (run.trace.as_ref(), run.digest.as_ref());
        let (step_source, bounds) = tpuscope_analyzers::steps::boundaries_of(trace, digest);
        let last = digest.last_t.unwrap_or(t0);
        if let Some(p) = tpuscope_analyzers::phases::Phases::from_steps(&bounds, t0, last) {
            self.phases
                .push((source, rel(p.steady_start_ns), rel(p.loop_end_ns)));
        }
        match step_source {
            tpuscope_analyzers::steps::StepSource::Marker { marker } => {
                let times = digest.step_marks.iter().find(|(m, _)| *m == marker);
                for (i, &t) in times.into_iter().flat_map(|(_, t)| t).enumerate() {
                    self.steps.push((source, rel(t), i as u64 + 1));
                }
            }
            // No markers: the analyzers' steps (runs of the dominant executable).
            _ => {
                for (i, (start, _)) in bounds.iter().enumerate() {
                    self.steps.push((source, rel(*start), i as u64 + 1));
                }
            }
        }
        // The lanes keep ns since the source's own origin, which is at or after `t0`.
        let shift = run.lanes.origin.saturating_sub(t0);
        for (key, spans) in &run.lanes.lanes {
            let (label, device) = match *key {
                LaneKey::Thread(t) => (format!("{prefix}thread {t}"), false),
                LaneKey::Device(d) if d < 0 => (format!("{prefix}summarized executes"), true),
                LaneKey::Device(d) => (format!("{prefix}device {d}"), true),
            };
            self.push(Lane {
                source,
                label,
                device,
                spans: Arc::clone(spans),
                shift,
            });
        }
    }

    fn push(&mut self, lane: Lane) {
        if let Some(m) = lane.spans.max_end() {
            self.total_ns = self.total_ns.max(m + lane.shift);
        }
        if let Some(s) = lane.start(0) {
            self.first_ns = if self.lanes.is_empty() {
                s
            } else {
                self.first_ns.min(s)
            };
        }
        self.spans += lane.len();
        self.lanes.push(lane);
    }

    /// The lane and span showing record `event` of `source`.
    pub fn locate(&self, source: usize, event: usize) -> Option<(usize, usize)> {
        let e = u32::try_from(event).ok()?;
        // Its span starts at its record's time.
        let t0 = self.t0.get(source).copied().unwrap_or(0);
        let at = self
            .runs
            .get(source)
            .and_then(Option::as_ref)
            .and_then(|r| r.record(event).ok()?.t_ns());
        // Host lanes first: a transfer is also drawn on its device's lane.
        let mut order: Vec<usize> = (0..self.lanes.len()).collect();
        order.sort_by_key(|&l| self.lanes[l].device);
        order
            .into_iter()
            .filter(|&l| self.lanes[l].source == source)
            .find_map(|l| self.lanes[l].find_event(e, at, t0).map(|s| (l, s)))
    }
}

/// Which row a span is drawn on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LaneKey {
    Thread(u32),
    /// A device by index; -1 holds the summarized executes.
    Device(i64),
}

/// A source's lanes, made once from its events: what the timeline draws of it.
#[derive(Debug, Default, PartialEq)]
pub struct SourceLanes {
    /// The time the spans count from (see [`origin`]).
    pub origin: u64,
    /// Threads by id, then devices by index.
    pub lanes: Vec<(LaneKey, Arc<Spans>)>,
}

impl SourceLanes {
    /// Writes the lanes as they lie, for [`SourceLanes::read_raw`] (the cache of reads).
    pub(crate) fn write_raw(&self, o: &mut Out<'_>) {
        o.u64(self.origin);
        o.u64(self.lanes.len() as u64);
        for (key, spans) in &self.lanes {
            match *key {
                LaneKey::Thread(t) => {
                    o.u8(0);
                    o.u64(u64::from(t));
                }
                LaneKey::Device(d) => {
                    o.u8(1);
                    o.u64(d.cast_unsigned());
                }
            }
            spans.write_raw(o);
        }
    }

    /// What [`SourceLanes::write_raw`] wrote; `None` for anything else.
    pub(crate) fn read_raw(d: &mut In<'_>) -> Option<SourceLanes> {
        let origin = d.u64()?;
        let n = d.len()?;
        let mut lanes = Vec::with_capacity(n.min(1 << 16));
        for _ in 0..n {
            let key = match d.u8()? {
                0 => LaneKey::Thread(u32::try_from(d.u64()?).ok()?),
                1 => LaneKey::Device(d.u64()?.cast_signed()),
                _ => return None,
            };
            lanes.push((key, Arc::new(Spans::read_raw(d)?)));
        }
        Some(SourceLanes { origin, lanes })
    }
}

/// Devices whose lanes [`LaneBuilder`] finds by index, not by hash.
const DEVICES_AT_HAND: usize = 64;

/// The spans of one source gathered record by record, by lane, as its events stream by (what
/// is kept of a record is its span, not the record).
#[derive(Clone, Default)]
pub struct LaneBuilder {
    /// In monotonic ns until [`LaneBuilder::finish`], in order of their first span.
    lanes: Vec<(LaneKey, Spans)>,
    /// Where each lane is in `lanes` (one lookup per span: a hash, not a tree's walk).
    lane_of: FxHashMap<LaneKey, usize>,
    /// The same for devices 0..[`DEVICES_AT_HAND`] (a launch's completions alternate between
    /// them), and for the thread of the last span (a thread's calls come in runs): no hash.
    device_lane: Vec<Option<usize>>,
    last_thread: Option<(u32, usize)>,
    /// Each device's last completion, by device index.
    busy_until: Vec<u64>,
    /// The earliest time after 0 of an event.
    first: Option<u64>,
}

impl LaneBuilder {
    fn at(&mut self, key: LaneKey, start: u64, end: u64, k: Kind, e: u32) {
        let i = self.lane(key);
        if let Some((_, spans)) = self.lanes.get_mut(i) {
            spans.push(start, end, k, e);
        }
    }

    /// The index in `lanes` of `key`'s lane, made the first time.
    #[inline]
    fn lane(&mut self, key: LaneKey) -> usize {
        let device = match key {
            LaneKey::Device(d) => usize::try_from(d).ok().filter(|&d| d < DEVICES_AT_HAND),
            LaneKey::Thread(t) => {
                if let Some((last, i)) = self.last_thread
                    && last == t
                {
                    return i;
                }
                None
            }
        };
        if let Some(Some(i)) = device.and_then(|d| self.device_lane.get(d)) {
            return *i;
        }
        let i = *self.lane_of.entry(key).or_insert_with(|| {
            self.lanes.push((key, Spans::default()));
            self.lanes.len() - 1
        });
        match (key, device) {
            (LaneKey::Thread(t), _) => self.last_thread = Some((t, i)),
            (_, Some(d)) => {
                if self.device_lane.len() <= d {
                    self.device_lane.resize(d + 1, None);
                }
                if let Some(slot) = self.device_lane.get_mut(d) {
                    *slot = Some(i);
                }
            }
            _ => {}
        }
        i
    }

    /// A span of `dur` ns from `t` on a host thread's lane.
    fn on_thread(&mut self, thread: u32, t: u64, dur: u64, k: Kind, e: u32) {
        self.at(LaneKey::Thread(thread), t, t + dur, k, e);
    }

    fn seen(&mut self, t: Option<u64>) {
        if let Some(t) = t.filter(|&t| t > 0) {
            self.first = Some(self.first.map_or(t, |f| f.min(t)));
        }
    }

    /// Event `e` (its index in the trace's events) as spans on its lanes; `launches` is the
    /// digest of the events before it (a completion is drawn from its launch's dispatch).
    pub fn add(&mut self, e: u32, r: &Record, launches: &DigestBuilder) {
        self.seen(r.t_ns());
        match r {
            Record::Compile(c) => {
                let k = if c.error.is_some() {
                    Kind::Error
                } else {
                    Kind::Compile
                };
                self.on_thread(c.thread, c.t_ns, c.dur_ns, k, e);
            }
            Record::Load(l) => self.on_thread(l.thread, l.t_ns, l.dur_ns, Kind::Compile, e),
            Record::Execute(x) => {
                let k = if x.error.is_some() {
                    Kind::Error
                } else {
                    Kind::Execute
                };
                self.on_thread(x.thread, x.t_ns, x.dur_ns, k, e);
            }
            Record::ExecuteComplete(c) => {
                let Some(launch) = launches.launch_of(c.seq) else {
                    return;
                };
                let t = launch.t_ns;
                let dev = c.device_index as usize;
                if self.busy_until.len() <= dev {
                    self.busy_until.resize(dev + 1, 0);
                }
                let from = self.busy_until.get(dev).copied().unwrap_or(0);
                let start = t.max(from).min(c.t_ns);
                if let Some(b) = self.busy_until.get_mut(dev) {
                    *b = c.t_ns;
                }
                let k = if c.error.is_some() {
                    Kind::Error
                } else {
                    Kind::Device
                };
                let key = LaneKey::Device(i64::from(c.device_index));
                self.at(key, start, c.t_ns, k, e);
            }
            Record::ExecuteSummary(s) => {
                let key = LaneKey::Device(-1);
                self.at(key, s.t_start_ns, s.t_end_ns, Kind::Execute, e);
            }
            Record::Transfer(x) => {
                let k = if x.error.is_some() {
                    Kind::Error
                } else if x.direction == Direction::D2h as i32 {
                    Kind::D2h
                } else {
                    Kind::H2d
                };
                self.transfer(e, x.thread, x.t_ns, x.dur_ns, x.device, k);
            }
            Record::Sync(s) => self.on_thread(s.thread, s.t_ns, s.dur_ns, Kind::Sync, e),
            Record::CacheStore(c) => self.on_thread(c.thread, c.t_ns, c.dur_ns, Kind::Cache, e),
            Record::CacheLoad(c) => {
                let k = if c.ok { Kind::Cache } else { Kind::Error };
                self.on_thread(c.thread, c.t_ns, c.dur_ns, k, e);
            }
            Record::Error(x) => self.on_thread(x.thread, x.t_ns, 0, Kind::Error, e),
            Record::Note(n) if n.t_ns > 0 => self.on_thread(n.thread, n.t_ns, 0, Kind::Note, e),
            Record::Client(c) => self.on_thread(c.thread, c.t_ns, c.dur_ns, Kind::Other, e),
            _ => {}
        }
    }

    /// A plain transfer read in place (no error), as [`LaneBuilder::add`] takes a decoded one.
    pub fn add_transfer(&mut self, e: u32, x: &TransferRef<'_>) {
        self.seen(Some(x.t_ns));
        let k = if x.direction == Direction::D2h as i32 {
            Kind::D2h
        } else {
            Kind::H2d
        };
        self.transfer(e, x.thread, x.t_ns, x.dur_ns, x.device, k);
    }

    fn transfer(&mut self, e: u32, thread: u32, t: u64, dur: u64, device: i32, k: Kind) {
        self.on_thread(thread, t, dur, k, e);
        if device >= 0 {
            self.at(LaneKey::Device(i64::from(device)), t, t + dur, k, e);
        }
    }

    /// The lanes of the source whose trace (tables) is `trace`, in ns since its origin.
    pub fn finish(self, trace: &Trace) -> SourceLanes {
        let origin = origin(trace, self.first);
        let mut lanes = self.lanes;
        lanes.sort_unstable_by_key(|(key, _)| *key);
        let lanes = lanes
            .into_iter()
            .map(|(key, mut spans)| {
                spans.finish(origin);
                (key, Arc::new(spans))
            })
            .collect();
        SourceLanes { origin, lanes }
    }

    /// The digest and the lanes of a trace held whole, in one pass.
    pub fn of(trace: &Trace) -> (Digest, SourceLanes) {
        let mut d = DigestBuilder::default();
        let mut b = LaneBuilder::default();
        for (i, r) in trace.events.iter().enumerate() {
            b.add(u32::try_from(i).unwrap_or(u32::MAX), r, &d);
            d.push(r);
        }
        (d.finish(), b.finish(trace))
    }
}

fn source_label(trace: &Trace, source: usize) -> String {
    if let Some(s) = &trace.segment {
        return format!("p{} {}", s.process_index, s.host);
    }
    match &trace.manifest {
        Some(m)
            if !m.job_id.is_empty()
                || tpuscope_analyzers::hosts::pjrt_topology(trace).is_some() =>
        {
            format!(
                "p{} {}",
                tpuscope_analyzers::hosts::process_index(trace),
                m.host
            )
        }
        Some(m) if !m.host.is_empty() => format!("{} pid {}", m.host, m.pid),
        _ => format!("trace {}", source + 1),
    }
}

fn short_label(s: &str) -> String {
    s.chars().take(24).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(items: &[(u64, u64)]) -> Spans {
        Spans::from_unsorted(
            items
                .iter()
                .enumerate()
                .map(|(i, &(a, b))| (a, b, Kind::Execute, i as u32))
                .collect(),
        )
    }

    /// The cache of reads writes a kind as its number and reads it back by its place in `ALL`.
    #[test]
    fn every_kind_is_at_its_number_in_all() {
        for k in Kind::ALL {
            assert_eq!(Kind::ALL[k as usize], k);
        }
    }

    #[test]
    fn summary_matches_a_scan() {
        let items: Vec<(u64, u64)> = (0..1000u64)
            .map(|i| (i * 10, i * 10 + (i * 7919) % 97))
            .collect();
        let s = spans(&items);
        for (i, j) in [
            (0, 1000),
            (3, 17),
            (16, 256),
            (255, 513),
            (999, 1000),
            (17, 18),
        ] {
            let want_end = (i..j).map(|k| s.end_at(k)).max().unwrap();
            let want_dur = (i..j).map(|k| s.dur(k)).max().unwrap();
            let got = s.summary(i, j);
            assert_eq!(got.max_end, want_end, "{i}..{j}");
            assert_eq!(got.max_dur, want_dur, "{i}..{j}");
            let l = got.longest as usize;
            assert!((i..j).contains(&l));
            assert_eq!(s.dur(l), want_dur);
        }
    }

    #[test]
    fn dense_spans_merge_into_few_bars() {
        // 100k spans of 10 ns every 20 ns over 2 ms, seen on 1000 px: 2 µs per pixel.
        let items: Vec<(u64, u64)> = (0..100_000u64).map(|i| (i * 20, i * 20 + 10)).collect();
        let s = spans(&items);
        let mut out = Vec::new();
        s.bars(0.0, 2_000_000.0, 1000.0, &mut out);
        assert!(out.len() <= 1000, "{} bars", out.len());
        let covered: u32 = out.iter().map(|b| b.count).sum();
        assert_eq!(covered, 100_000);
        // Zoomed in to 2 µs on 1000 px, every span is 5 px wide: each drawn alone.
        out.clear();
        s.bars(1_000_000.0, 1_002_000.0, 1000.0, &mut out);
        assert!(out.iter().all(|b| b.count == 1));
        assert!((100..=101).contains(&out.len()), "{}", out.len());
    }

    #[test]
    fn a_long_span_from_before_the_view_is_drawn() {
        let mut items = vec![(0, 1_000_000)];
        items.extend((0..5000u64).map(|i| (10 + i * 100, 20 + i * 100)));
        let s = spans(&items);
        let mut out = Vec::new();
        s.bars(900_000.0, 950_000.0, 500.0, &mut out);
        assert!(
            out.iter()
                .any(|b| s.start.at(b.span as usize) == 0 && b.x0 < 0.0 && b.x1 > 500.0)
        );
        // Wide bars are not merged with the small ones around them.
        assert!(out.iter().filter(|b| b.count == 1).count() >= 1);
    }

    #[test]
    fn spans_come_out_sorted_by_start_ties_in_file_order() {
        // Over a column chunk's worth (65 536), in a scrambled order with many equal times.
        let n = 70_000u64;
        let items: Vec<(u64, u64, Kind, u32)> = (0..n)
            .map(|i| {
                let t = (i * 7919) % 1000;
                let k = if i % 3 == 0 {
                    Kind::Execute
                } else {
                    Kind::Device
                };
                (t, t + i % 7, k, i as u32)
            })
            .collect();
        let s = Spans::from_unsorted(items.clone());
        let mut want = items;
        want.sort_by_key(|s| s.0);
        let got: Vec<_> = (0..s.len()).map(|i| s.get(i).unwrap()).collect();
        assert_eq!(got, want);
        assert_eq!(s.max_end(), want.iter().map(|w| w.1).max());
    }

    #[test]
    fn a_span_that_comes_late_is_moved_into_place_and_one_far_out_is_sorted() {
        // Nearly sorted (each fourth span comes 3 places late), then one that belongs first.
        let mut items: Vec<(u64, u64, Kind, u32)> = Vec::new();
        for i in 0..10_000u64 {
            let t = if i % 4 == 3 {
                100 + i * 10 - 35
            } else {
                100 + i * 10
            };
            items.push((t, t + 5, Kind::Device, i as u32));
        }
        let mut s = Spans::default();
        for &(a, b, k, e) in &items {
            s.push(a, b, k, e);
        }
        assert!(s.sorted, "late spans were moved into place");
        items.push((0, 1, Kind::H2d, 10_000));
        // Longer than a duration word holds.
        items.push((50, 50 + 10_000_000_000, Kind::Compile, 10_001));
        let s = Spans::from_unsorted(items.clone());
        let mut want = items;
        want.sort_by_key(|s| s.0);
        let got: Vec<_> = (0..s.len()).map(|i| s.get(i).unwrap()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn spans_moved_into_place_keep_their_durations_wide_or_not() {
        const LONG: u64 = 10_000_000_000;
        // A long span, then one that belongs before it, then a late long one and a tie.
        let pushed = [
            (100, 100 + LONG, Kind::Compile, 0),
            (50, 60, Kind::Execute, 1),
            (200, 210, Kind::Device, 2),
            (150, 150 + LONG, Kind::Compile, 3),
            (150, 151, Kind::Sync, 4),
        ];
        let mut s = Spans::default();
        for (a, b, k, e) in pushed {
            s.push(a, b, k, e);
        }
        assert!(s.sorted);
        let mut want = pushed.to_vec();
        want.sort_by_key(|s| s.0);
        let got: Vec<_> = (0..s.len()).map(|i| s.get(i).unwrap()).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn start_times_read_back_exactly_whether_kept_as_offsets_or_whole() {
        // Dense blocks (offsets), a block with a 10 s gap and one with a time before its
        // first (whole), then moved earlier past some blocks' first times, and permuted.
        let mut want: Vec<u64> = (0..3 * BLOCK as u64).map(|i| 5_000 + i * 1_000).collect();
        want.push(want[want.len() - 1] + 10_000_000_000);
        want.extend((0..BLOCK as u64).map(|i| 20_000_000_000 + i));
        want.push(7);
        let mut s = Starts::default();
        want.iter().for_each(|&t| s.push(t));
        assert!(matches!(s.blocks[0], Block::Offsets { .. }));
        assert!(s.iter().eq(want.iter().copied()));
        s.earlier_by(6_000);
        want.iter_mut().for_each(|t| *t = t.saturating_sub(6_000));
        assert!(s.iter().eq(want.iter().copied()));
        let order: Vec<u32> = (0..want.len() as u32).rev().collect();
        let mut done = vec![0u64; want.len().div_ceil(64)];
        s.permute(&order, &mut done);
        want.reverse();
        assert!(s.iter().eq(want.iter().copied()));
    }

    #[test]
    fn gaps_wider_than_a_pixel_stay_gaps() {
        let s = spans(&[(0, 1), (1000, 1001)]);
        let mut out = Vec::new();
        s.bars(0.0, 2000.0, 100.0, &mut out);
        assert_eq!(out.len(), 2);
    }
}
