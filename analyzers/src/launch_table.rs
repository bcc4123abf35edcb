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

use crate::column::{CHUNK, CHUNK_BITS, Column, Cursor, Spill};
use crate::digest::{Done, Launch};

/// [`Launches::iter`]: chunk by chunk (both columns are pushed together, so their chunks
/// match), each `next` a step along two slices (the analyses walk millions of launches several
/// times, often a `peek` at a time).
struct LaunchIter<'a> {
    table: &'a Launches,
    ts: Cursor<'a, u64>,
    ws: Cursor<'a, Words>,
    /// The chunk to load next, the index of the loaded one's first launch, and the place in it.
    next_chunk: usize,
    first: usize,
    pos: usize,
}

impl Iterator for LaunchIter<'_> {
    type Item = (Launch, Done);

    #[inline]
    fn next(&mut self) -> Option<(Launch, Done)> {
        loop {
            let pos = self.pos;
            if let (Some(&t), Some(w)) = (self.ts.slice().get(pos), self.ws.slice().get(pos)) {
                self.pos = pos + 1;
                return Some(self.table.unpack(self.first + pos, t, w));
            }
            let c = self.next_chunk;
            if !(self.ts.load(c) && self.ws.load(c)) {
                return None;
            }
            (self.next_chunk, self.first, self.pos) = (c + 1, c << CHUNK_BITS, 0);
        }
    }
}

/// Little-endian words read off the front of bytes ([`Launches::from_raw`]).
struct Raw<'a> {
    b: &'a [u8],
}

impl<'a> Raw<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.b.split_at_checked(n)?;
        self.b = rest;
        Some(head)
    }

    fn u64s(&mut self, n: usize) -> Option<Vec<u64>> {
        let bytes = self.take(n.checked_mul(8)?)?;
        bytes
            .chunks_exact(8)
            .map(|c| c.try_into().ok().map(u64::from_le_bytes))
            .collect()
    }

    fn len(&mut self) -> Option<usize> {
        let word = self.take(8)?.try_into().ok()?;
        usize::try_from(u64::from_le_bytes(word)).ok()
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
        let (t_ns, w) = (self.t_ns.get(i)?, self.words.get(i)?);
        Some(self.unpack(i, t_ns, &w))
    }

    /// Each launch with when it finished, in file order (chunk by chunk: no lookup per launch).
    pub fn iter(&self) -> impl Iterator<Item = (Launch, Done)> + '_ {
        LaunchIter {
            table: self,
            ts: Cursor::new(&self.t_ns),
            ws: Cursor::new(&self.words),
            next_chunk: 0,
            first: 0,
            pos: 0,
        }
    }

    /// [`Launches::iter`] from the last launch back, a chunk at a time.
    pub fn iter_rev(&self) -> impl Iterator<Item = (Launch, Done)> + '_ {
        let (mut ts, mut ws) = (Cursor::new(&self.t_ns), Cursor::new(&self.words));
        (0..self.t_ns.chunk_count()).rev().flat_map(move |c| {
            let mut chunk = Vec::new();
            if ts.load(c) && ws.load(c) {
                let first = c << CHUNK_BITS;
                chunk.extend(
                    ts.slice()
                        .iter()
                        .zip(ws.slice())
                        .enumerate()
                        .map(|(k, (&t, w))| self.unpack(first + k, t, w)),
                );
            }
            chunk.into_iter().rev()
        })
    }

    /// Sends the table's old chunks to `store` (see [`Column::spill_to`]).
    pub(crate) fn spill_to(&mut self, store: &Arc<dyn Spill>) {
        self.t_ns.spill_to(Arc::clone(store));
        self.words.spill_to(Arc::clone(store));
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

    /// How many bytes [`Launches::write_raw`] writes.
    pub(crate) fn raw_len(&self) -> usize {
        let sides = self.wide_dur.len() + self.wide_exe.len();
        8 * (5 + self.len() + self.exes.len() + 2 * sides + 3 * self.wide_done.len())
            + 20 * self.len()
    }

    /// The table as it lies in memory, little-endian, handed to `put` a piece at a time (for
    /// a saved digest, read back by this same build: [`Launches::from_raw`]).
    pub(crate) fn write_raw(&self, put: &mut dyn FnMut(&[u8])) {
        let mut word = |v: u64| put(&v.to_le_bytes());
        word(self.len() as u64);
        self.t_ns.iter().for_each(&mut word);
        word(self.exes.len() as u64);
        self.exes.iter().for_each(|&e| word(e));
        for side in [&self.wide_dur, &self.wide_exe] {
            let mut kv: Vec<_> = side.iter().collect();
            kv.sort_unstable();
            word(kv.len() as u64);
            for (&k, &v) in kv {
                word(u64::from(k));
                word(v);
            }
        }
        let mut done: Vec<_> = self.wide_done.iter().collect();
        done.sort_unstable_by_key(|(k, _)| **k);
        word(done.len() as u64);
        for (&k, d) in done {
            word(u64::from(k));
            word(d.first_ns().unwrap_or(u64::MAX));
            word(d.last_ns().unwrap_or(u64::MAX));
        }
        let mut w20 = [0u8; 20];
        for w in self.words.iter() {
            for (bytes, x) in w20.chunks_exact_mut(4).zip(&w) {
                bytes.copy_from_slice(&x.to_le_bytes());
            }
            put(&w20);
        }
    }

    /// [`Launches::write_raw`] into memory.
    #[cfg(test)]
    fn to_raw(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.raw_len());
        self.write_raw(&mut |b| out.extend_from_slice(b));
        out
    }

    /// What [`Launches::write_raw`] wrote; `None` for other bytes. Its old chunks go to
    /// `spill` where one is given ([`Launches::spill_to`]).
    pub(crate) fn from_raw(b: &[u8], spill: Option<&Arc<dyn Spill>>) -> Option<Launches> {
        let mut r = Raw { b };
        let mut t = Launches::default();
        if let Some(s) = spill {
            t.spill_to(s);
        }
        let n = r.len()?;
        for piece in r.take(n.checked_mul(8)?)?.chunks(CHUNK * 8) {
            let times = Raw { b: piece }.u64s(piece.len() / 8)?;
            t.t_ns.extend_from_slice(&times);
        }
        let e = r.len()?;
        t.exes = r.u64s(e)?;
        for (k, &id) in t.exes.iter().enumerate() {
            t.exe_index.insert(id, u32::try_from(k).ok()?);
        }
        for side in [&mut t.wide_dur, &mut t.wide_exe] {
            let m = r.len()?;
            for pair in r.u64s(m.checked_mul(2)?)?.chunks_exact(2) {
                side.insert(u32::try_from(pair[0]).ok()?, pair[1]);
            }
        }
        let m = r.len()?;
        for x in r.u64s(m.checked_mul(3)?)?.chunks_exact(3) {
            let d = match x[1] {
                u64::MAX => Done::NONE,
                first => Done::new(first, x[2]),
            };
            t.wide_done.insert(u32::try_from(x[0]).ok()?, d);
        }
        for piece in r.take(n.checked_mul(20)?)?.chunks(CHUNK * 20) {
            let mut words: Vec<Words> = Vec::with_capacity(piece.len() / 20);
            for c in piece.chunks_exact(20) {
                let mut w: Words = [0; 5];
                for (x, bytes) in w.iter_mut().zip(c.chunks_exact(4)) {
                    *x = u32::from_le_bytes(bytes.try_into().ok()?);
                }
                words.push(w);
            }
            t.words.extend_from_slice(&words);
        }
        r.b.is_empty().then_some(t)
    }

    /// A completion at `t_ns` of launch `i` (the first in file order stays its first): the
    /// launch's dispatch time, and whether its devices' busy time counts it (it succeeded and
    /// asked for completions). Works on the launch's words: this runs for every completion.
    pub(crate) fn complete(&mut self, i: u32, t_ns: u64) -> Option<(u64, bool)> {
        let at = i as usize;
        let dispatch = self.t_ns.get(at)?;
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
        // Saved as it lies and read back: every value, the side tables' too.
        let raw = t.to_raw();
        let back = Launches::from_raw(&raw, None).expect("reads back");
        assert!(back.iter().eq(t.iter()));
        assert_eq!(back.to_raw(), raw);
        assert_eq!(raw.len(), t.raw_len());
        assert!(Launches::from_raw(&raw[..raw.len() - 1], None).is_none());
    }

    #[test]
    fn launches_iterate_across_chunks_as_they_read_by_index() {
        let mut t = Launches::default();
        let n = 2 * CHUNK + 3;
        for i in 0..n as u64 {
            t.push(&Launch {
                event: i as u32,
                t_ns: i * 10,
                dur_ns: i % 7,
                executable_id: i % 3,
                completion_tracked: true,
                failed: false,
            });
        }
        assert_eq!(t.iter().count(), n);
        assert!(t.iter().eq((0..n).filter_map(|i| t.get(i))));
        assert!(Launches::default().iter().next().is_none());
    }

    /// A table whose old chunks were spilled reads back as one held in memory: in order, from
    /// the end, by index, saved; completions of spilled launches included.
    #[test]
    fn a_spilled_table_reads_back_as_one_in_memory() {
        let spill: Arc<dyn Spill> = Arc::new(crate::column::tests::MemSpill::default());
        let (mut held, mut spilled) = (Launches::default(), Launches::default());
        spilled.spill_to(&spill);
        let n = 4 * CHUNK + 9;
        for i in 0..n as u64 {
            let l = Launch {
                event: i as u32 * 2,
                t_ns: 1_000 + i * 10,
                dur_ns: if i % 1_000 == 7 { 5_000_000_000 } else { i % 9 },
                executable_id: i % 5,
                completion_tracked: i % 3 != 0,
                failed: i % 11 == 0,
            };
            held.push(&l);
            spilled.push(&l);
            // Completions soon after, and now and then one of a launch long spilled.
            for (t, k) in [(l.t_ns + 40, i), (20 * i, i / 3)] {
                assert_eq!(held.complete(k as u32, t), spilled.complete(k as u32, t));
            }
        }
        assert!(spilled.iter().eq(held.iter()));
        assert!(spilled.iter_rev().eq(held.iter_rev()));
        assert!(
            spilled
                .iter_rev()
                .eq(held.iter().collect::<Vec<_>>().into_iter().rev())
        );
        for i in [0, CHUNK + 1, n - 1, n] {
            assert_eq!(spilled.get(i), held.get(i));
        }
        assert_eq!(spilled.to_raw(), held.to_raw());
        // Read back from its saved bytes into a spill: the same again.
        let back = Launches::from_raw(&held.to_raw(), Some(&spill)).expect("reads back");
        assert!(back.iter().eq(held.iter()));
    }
}
