//! The measure of the union of several sorted span lists before any time, without holding the
//! union: the time split's widest layer (every device's busy periods with the host's blocked
//! and compiling time) has about a span per launch, 24 bytes each with its prefix sums, the
//! largest thing `report` held of a long run. Its lists are held anyway (the digest's busy
//! spans, the blocked layer): the union is walked from them as the times asked grow, and
//! from the nearest of a few marks when one goes back.

use crate::digest::UnionOf;

/// Spans of the union between two marks.
const EVERY: usize = 1024;

/// Where a walk of the union can start again: before its `EVERY`·k-th span.
#[derive(Clone, Debug)]
struct Mark {
    /// That span's start (0 for the first mark).
    start: u64,
    /// The total length of the spans before it.
    before: u64,
    /// The walk's state there ([`UnionOf::resume`]).
    open: Option<(u64, u64)>,
    taken: Vec<usize>,
}

/// The marks of a union of lists (the lists are the caller's: given again to each walk).
#[derive(Clone, Debug, Default)]
pub(crate) struct WalkedUnion {
    marks: Vec<Mark>,
}

impl WalkedUnion {
    /// Walks the union of `lists` (each sorted by start) once, leaving a mark every
    /// [`EVERY`] spans.
    pub(crate) fn new(lists: &[&[(u64, u64)]]) -> WalkedUnion {
        let mut u = UnionOf::new(lists);
        let (mut marks, mut before) = (Vec::new(), 0);
        for k in 0.. {
            if k % EVERY == 0 {
                let (open, taken) = u.state(lists);
                marks.push(Mark {
                    start: if k == 0 {
                        0
                    } else {
                        open.map_or(u64::MAX, |o| o.0)
                    },
                    before,
                    open,
                    taken,
                });
            }
            match u.next() {
                Some(s) => before += s.1 - s.0,
                None => break,
            }
        }
        WalkedUnion { marks }
    }

    /// A walk of the union of `lists` (those it was made of).
    pub(crate) fn walk<'a>(&self, lists: &[&'a [(u64, u64)]]) -> Walk<'a> {
        Walk {
            lists: lists.to_vec(),
            u: UnionOf::new(lists),
            before: 0,
            passed_end: 0,
            span: None,
            started: false,
        }
    }

    /// Length of the union before `t`: the walk goes on from where it is when `t` is not
    /// before the spans it passed, else (and at first) from the last mark at or before `t`.
    pub(crate) fn upto(&self, walk: &mut Walk<'_>, t: u64) -> u64 {
        if !walk.started || t < walk.passed_end {
            let k = self
                .marks
                .partition_point(|m| m.start <= t)
                .saturating_sub(1);
            if let Some(m) = self.marks.get(k) {
                walk.u = UnionOf::resume(&walk.lists, &m.taken, m.open);
                // The spans before the mark ended before its start.
                (walk.before, walk.passed_end) = (m.before, m.start);
                (walk.span, walk.started) = (None, false);
            }
        }
        if !walk.started {
            walk.span = walk.u.next();
            walk.started = true;
        }
        while let Some(s) = walk.span.filter(|s| s.1 <= t) {
            walk.before += s.1 - s.0;
            walk.passed_end = s.1;
            walk.span = walk.u.next();
        }
        match walk.span {
            Some(s) if s.0 < t => walk.before + (t - s.0),
            _ => walk.before,
        }
    }
}

/// A walk of a [`WalkedUnion`]: the union's spans that ended by the last time asked are
/// passed (their total length kept), the next one is at hand.
pub(crate) struct Walk<'a> {
    lists: Vec<&'a [(u64, u64)]>,
    u: UnionOf<'a>,
    before: u64,
    /// The end of the last span passed (0 before any).
    passed_end: u64,
    span: Option<(u64, u64)>,
    started: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digest::merged;

    /// Whatever the order of the times asked, a walk gives the measure of the union gathered
    /// and merged: across marks, back and forth, at span edges and outside every span.
    #[test]
    fn a_walk_measures_the_union_as_the_union_gathered() {
        for round in 0..6u64 {
            let lists: Vec<Vec<(u64, u64)>> = (0..(1 + round % 4))
                .map(|k| {
                    let spans = (0..3_000 + round * 500)
                        .map(|i| {
                            let a = (i * 7_919 + k * 104_729 + round * 31) % 2_000_000;
                            (a, a + (i * 31 + k * 7 + round) % 500)
                        })
                        .collect();
                    merged(spans)
                })
                .collect();
            let refs: Vec<&[(u64, u64)]> = lists.iter().map(Vec::as_slice).collect();
            let all = merged(lists.iter().flatten().copied().collect());
            let truth = |t: u64| -> u64 {
                all.iter()
                    .take_while(|s| s.0 < t)
                    .map(|s| s.1.min(t) - s.0)
                    .sum()
            };
            let w = WalkedUnion::new(&refs);
            assert!(w.marks.len() > 1 || all.len() < EVERY, "round {round}");
            let mut walk = w.walk(&refs);
            // Growing, then scattered (a prime stride), then edges.
            let times = (0..2_100_000u64)
                .step_by(997)
                .chain((0..400u64).map(|i| (i * 1_000_003) % 2_100_000))
                .chain(all.iter().step_by(97).flat_map(|s| [s.1, s.0, s.0 + 1]));
            for t in times {
                assert_eq!(w.upto(&mut walk, t), truth(t), "round {round}, t {t}");
            }
        }
        // No lists: nothing.
        let w = WalkedUnion::new(&[]);
        assert_eq!(w.upto(&mut w.walk(&[]), 5), 0);
    }
}
