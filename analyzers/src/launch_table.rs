//! A run's launches as the digest keeps them: 28 bytes each, in chunks, where a `Vec` of
//! [`Launch`] and [`Done`] took 48 and, grown by doubling, up to twice that. A long trace is
//! mostly launches and their completions: this is most of what `report` holds of one.
//!
//! Each launch is a time (8 bytes) and five 32-bit words: its place among the events, its
//! executable (an index into the run's distinct ids) with its two flags, its duration, and its
//! first and last completion relative to its dispatch. A value that does not fit a word (a
//! launch of over 4 s, a completion over 2 s away, more than 2^30 executables) is kept whole
//! in a side table, so every value reads back exactly.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::digest::{Done, Launch};

/// Values appended in order and read by index, in chunks of [`CHUNK`]: growing never copies
/// what is there, nor holds room for as many again. A clone shares the full chunks (a live
/// view's snapshot of a long run costs pointers and the chunk being filled); a full chunk is
/// copied only when one side changes it. The chunk being filled is this column's alone, so a
/// push or a change there takes no atomic operation (the fold of a long trace pushes one
/// value per event into several columns). Also the GUI's timeline columns (`gui/src/lanes.rs`).
#[derive(Clone, Debug, PartialEq)]
pub struct Column<T> {
    /// Full chunks of [`CHUNK`] values.
    chunks: Vec<Arc<Vec<T>>>,
    /// The values after them, fewer than [`CHUNK`].
    tail: Vec<T>,
}

const CHUNK_BITS: u32 = 16;
const CHUNK: usize = 1 << CHUNK_BITS;

impl<T> Default for Column<T> {
    fn default() -> Self {
        Column {
            chunks: Vec::new(),
            tail: Vec::new(),
        }
    }
}

impl<T: Clone> Column<T> {
    pub fn len(&self) -> usize {
        (self.chunks.len() << CHUNK_BITS) + self.tail.len()
    }

    pub fn push(&mut self, v: T) {
        if self.tail.len() == CHUNK {
            // The first tail grew by doubling (a short column stays small); later ones are
            // made whole at once.
            let full = std::mem::replace(&mut self.tail, Vec::with_capacity(CHUNK));
            self.chunks.push(Arc::new(full));
        }
        self.tail.push(v);
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty() && self.tail.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        let c = i >> CHUNK_BITS;
        match self.chunks.get(c) {
            Some(chunk) => chunk.get(i & (CHUNK - 1)),
            None if c == self.chunks.len() => self.tail.get(i & (CHUNK - 1)),
            None => None,
        }
    }

    /// The `i`-th value; `i < len`, as indexing a slice.
    pub fn at(&self, i: usize) -> T
    where
        T: Copy,
    {
        let c = i >> CHUNK_BITS;
        if c < self.chunks.len() {
            self.chunks[c][i & (CHUNK - 1)]
        } else {
            self.tail[i - (self.chunks.len() << CHUNK_BITS)]
        }
    }

    /// Replaces the `i`-th value (nothing past the end).
    pub fn set(&mut self, i: usize, v: T) {
        if let Some(slot) = self.get_mut(i) {
            *slot = v;
        }
    }

    fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        let (c, full) = (i >> CHUNK_BITS, self.chunks.len());
        match self.chunks.get_mut(c) {
            Some(chunk) => Arc::make_mut(chunk).get_mut(i & (CHUNK - 1)),
            None if c == full => self.tail.get_mut(i & (CHUNK - 1)),
            None => None,
        }
    }

    /// The values in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .chain(self.tail.iter())
    }
}

/// Word values that say "not here".
const NOT_DONE: u32 = u32::MAX;
const WIDE: u32 = u32::MAX - 1;
/// Completions are kept as `t − dispatch + BIAS`: up to ~2.1 s either side.
const BIAS: i64 = 1 << 31;
/// Executable indices take the low 30 bits of their word; the flags the top two.
const EXE_BITS: u32 = 30;
const EXE_WIDE: u32 = (1 << EXE_BITS) - 1;
const TRACKED: u32 = 1 << 30;
const FAILED: u32 = 1 << 31;

/// Words of a launch: event, executable and flags, duration, first and last completion.
type Words = [u32; 5];

/// The launches of a run, in file order, with when their devices finished them.
#[derive(Clone, Debug, Default)]
pub struct Launches {
    t_ns: Column<u64>,
    words: Column<Words>,
    /// The distinct executable ids, in order of first launch, and their index.
    exes: Vec<u64>,
    exe_index: FxHashMap<u64, u32>,
    /// Values that did not fit their word, by launch.
    wide_dur: FxHashMap<u32, u64>,
    wide_exe: FxHashMap<u32, u64>,
    wide_done: FxHashMap<u32, Done>,
}

impl Launches {
    pub fn len(&self) -> usize {
        self.t_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th launch with when it finished.
    pub fn get(&self, i: usize) -> Option<(Launch, Done)> {
        let (&t_ns, w) = (self.t_ns.get(i)?, self.words.get(i)?);
        Some(self.unpack(i, t_ns, w))
    }

    /// Each launch with when it finished, in file order (chunk by chunk: no lookup per launch).
    pub fn iter(&self) -> impl Iterator<Item = (Launch, Done)> + '_ {
        self.t_ns
            .iter()
            .zip(self.words.iter())
            .enumerate()
            .map(|(i, (&t, w))| self.unpack(i, t, w))
    }

    /// [`Launches::iter`] from the last launch back.
    pub fn iter_rev(&self) -> impl Iterator<Item = (Launch, Done)> + '_ {
        (0..self.len()).rev().filter_map(|i| self.get(i))
    }

    #[inline]
    fn unpack(&self, i: usize, t_ns: u64, w: &Words) -> (Launch, Done) {
        let key = u32::try_from(i).unwrap_or(u32::MAX);
        let [event, exe, dur, first, last] = *w;
        let executable_id = match exe & EXE_WIDE {
            EXE_WIDE => self.wide_exe.get(&key).copied().unwrap_or(0),
            k => self.exes.get(k as usize).copied().unwrap_or(0),
        };
        let dur_ns = match dur {
            WIDE => self.wide_dur.get(&key).copied().unwrap_or(0),
            d => u64::from(d),
        };
        let at = |rel: u32| t_ns.saturating_add_signed(i64::from(rel) - BIAS);
        let done = match first {
            NOT_DONE => Done::NONE,
            WIDE => self.wide_done.get(&key).copied().unwrap_or(Done::NONE),
            f => Done::new(at(f), at(last)),
        };
        let launch = Launch {
            event,
            t_ns,
            dur_ns,
            executable_id,
            completion_tracked: exe & TRACKED != 0,
            failed: exe & FAILED != 0,
        };
        (launch, done)
    }

    /// Adds a launch (not yet finished); its index.
    pub(crate) fn push(&mut self, l: &Launch) -> u32 {
        let i = u32::try_from(self.len()).unwrap_or(u32::MAX);
        let exe = match self.exe_index.get(&l.executable_id) {
            Some(&k) => k,
            None if self.exes.len() < EXE_WIDE as usize => {
                let k = self.exes.len() as u32;
                self.exes.push(l.executable_id);
                self.exe_index.insert(l.executable_id, k);
                k
            }
            None => {
                self.wide_exe.insert(i, l.executable_id);
                EXE_WIDE
            }
        };
        let flags =
            if l.completion_tracked { TRACKED } else { 0 } | if l.failed { FAILED } else { 0 };
        let dur = match u32::try_from(l.dur_ns) {
            Ok(d) if d < WIDE => d,
            _ => {
                self.wide_dur.insert(i, l.dur_ns);
                WIDE
            }
        };
        self.t_ns.push(l.t_ns);
        self.words
            .push([l.event, exe | flags, dur, NOT_DONE, NOT_DONE]);
        i
    }

    /// A completion at `t_ns` of launch `i` (the first in file order stays its first): the
    /// launch's dispatch time, and whether its devices' busy time counts it (it succeeded and
    /// asked for completions). Works on the launch's words: this runs for every completion.
    pub(crate) fn complete(&mut self, i: u32, t_ns: u64) -> Option<(u64, bool)> {
        let at = i as usize;
        let dispatch = *self.t_ns.get(at)?;
        let rel = i64::try_from(t_ns)
            .ok()
            .zip(i64::try_from(dispatch).ok())
            .and_then(|(t, d)| u32::try_from(t - d + BIAS).ok())
            .filter(|&r| r < WIDE);
        let w = self.words.get_mut(at)?;
        let busy = w[1] & (TRACKED | FAILED) == TRACKED;
        let wide = match (w[3], rel) {
            (NOT_DONE, Some(r)) => {
                (w[3], w[4]) = (r, r);
                None
            }
            (NOT_DONE, None) => Some(Done::new(t_ns, t_ns)),
            (WIDE, _) => {
                let d = self.wide_done.get(&i).copied().unwrap_or(Done::NONE);
                let first = d.first_ns().unwrap_or(t_ns);
                Some(Done::new(first, d.last_ns().unwrap_or(first).max(t_ns)))
            }
            (_, Some(r)) => {
                w[4] = w[4].max(r);
                None
            }
            (first, None) => {
                let back = |r: u32| dispatch.saturating_add_signed(i64::from(r) - BIAS);
                Some(Done::new(back(first), back(w[4]).max(t_ns)))
            }
        };
        if let Some(d) = wide {
            (w[3], w[4]) = (WIDE, WIDE);
            self.wide_done.insert(i, d);
        }
        Some((dispatch, busy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever the values, a launch reads back as it was put in, finished as completed.
    #[test]
    fn every_value_reads_back_exactly() {
        let mut t = Launches::default();
        let big = u64::MAX / 2;
        let cases = [
            (1_000, 5, 7, true, false, vec![1_500, 1_200]),
            (2_000, 0, 7, false, true, vec![]),
            (3_000, big, 9, true, false, vec![3_000 + 5_000_000_000]),
            (10_000_000_000, 1, 11, true, false, vec![1, 10_000_000_005]),
            (5, u64::from(u32::MAX), u64::MAX, true, true, vec![5, 4]),
            // Fits at first, then a completion too far away: all of it goes wide.
            (1_000, 3, 7, true, false, vec![1_100, 5_000_001_000, 1_200]),
        ];
        for (k, (t_ns, dur_ns, executable_id, tracked, failed, _)) in cases.iter().enumerate() {
            let l = Launch {
                event: k as u32 * 3,
                t_ns: *t_ns,
                dur_ns: *dur_ns,
                executable_id: *executable_id,
                completion_tracked: *tracked,
                failed: *failed,
            };
            assert_eq!(t.push(&l), k as u32);
        }
        for (k, case) in cases.iter().enumerate() {
            for &c in &case.5 {
                t.complete(k as u32, c);
            }
        }
        assert_eq!(t.len(), cases.len());
        for (k, ((l, done), case)) in t.iter().zip(&cases).enumerate() {
            assert_eq!(
                (
                    l.event,
                    l.t_ns,
                    l.dur_ns,
                    l.executable_id,
                    l.completion_tracked,
                    l.failed
                ),
                (k as u32 * 3, case.0, case.1, case.2, case.3, case.4)
            );
            let want = case
                .5
                .first()
                .map(|&f| (f, case.5.iter().copied().max().unwrap_or(f)));
            assert_eq!(done.first_ns().zip(done.last_ns()), want, "launch {k}");
            assert_eq!(t.get(k), Some((l, done)));
        }
        assert!(
            t.iter_rev()
                .eq(t.iter().collect::<Vec<_>>().into_iter().rev())
        );
    }

    #[test]
    fn a_column_holds_values_across_chunks() {
        let mut c = Column::default();
        (0..(2 * CHUNK + 3) as u64).for_each(|v| c.push(v));
        assert_eq!(c.len(), 2 * CHUNK + 3);
        assert_eq!(c.get(CHUNK), Some(&(CHUNK as u64)));
        assert_eq!(c.get(2 * CHUNK + 3), None);
        assert!(c.iter().copied().eq(0..(2 * CHUNK + 3) as u64));
        // A clone shares the chunks and keeps its values when the original changes.
        let snapshot = c.clone();
        assert!(Arc::ptr_eq(&c.chunks[0], &snapshot.chunks[0]));
        c.push(7);
        if let Some(v) = c.get_mut(1) {
            *v = 99;
        }
        assert!(snapshot.iter().copied().eq(0..(2 * CHUNK + 3) as u64));
        assert_eq!(
            (c.get(1), c.get(2 * CHUNK + 3), c.len()),
            (Some(&99), Some(&7), 2 * CHUNK + 4)
        );
        // Only the chunks changed were copied.
        assert!(Arc::ptr_eq(&c.chunks[1], &snapshot.chunks[1]));
        assert!(!Arc::ptr_eq(&c.chunks[0], &snapshot.chunks[0]));
    }
}
