//! Myers' diff with a budget of work instead of a deadline, so that the same two listings give
//! the same alignment on any machine.
//!
//! The algorithm is `similar`'s (`similar::algorithms::myers`, Apache-2.0: linear space, divide
//! and conquer on the middle snake) with its clock check replaced by [`WorkBudget`]; the ops go
//! through the same `Compact`/`Replace`/`Capture` hooks `similar::capture_diff_slices` uses, so
//! while the budget lasts the result is the one `similar` gives. When it runs out, each range
//! still to be split is reported as deleted and inserted (a `Replace`), as `similar` does when its
//! deadline passes.

use std::ops::{Index, IndexMut, Range};

use similar::DiffOp;
use similar::algorithms::{Capture, Compact, DiffHook, Replace};

/// Steps of diff work: one per diagonal the search visits and one per pair of elements it
/// compares. Shared by all the diffs of one alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkBudget {
    left: u64,
    spent: u64,
    exhausted: bool,
}

impl WorkBudget {
    pub fn new(steps: u64) -> Self {
        WorkBudget {
            left: steps,
            spent: 0,
            exhausted: false,
        }
    }

    /// Whether a diff stopped short because the budget ran out.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// Steps taken so far (the last search round may take a little more than was left).
    pub fn spent(&self) -> u64 {
        self.spent
    }

    fn spend(&mut self, steps: usize) {
        let steps = steps as u64;
        self.left = self.left.saturating_sub(steps);
        self.spent = self.spent.saturating_add(steps);
    }

    /// Whether the search may go on; remembers when it may not.
    fn allows_more(&mut self) -> bool {
        if self.left == 0 {
            self.exhausted = true;
        }
        !self.exhausted
    }
}

/// The ops turning `old` into `new`, as `similar::capture_diff_slices(Algorithm::Myers, ..)`
/// gives them when the budget suffices.
pub fn diff(old: &[u64], new: &[u64], budget: &mut WorkBudget) -> Vec<DiffOp> {
    let mut hook = Compact::new(Replace::new(Capture::new()), old, new);
    let max_d = max_d(old.len(), new.len());
    let mut search = Search {
        old,
        new,
        vf: V::new(max_d),
        vb: V::new(max_d),
        budget,
    };
    let run = search
        .conquer(&mut hook, 0..old.len(), 0..new.len())
        .and_then(|()| hook.finish());
    match run {
        Ok(()) => hook.into_inner().into_inner().into_ops(),
        Err(never) => match never {},
    }
}

/// One diff in progress: the two sequences, the furthest points of the forward and backward
/// searches (reused by every split), and the budget.
struct Search<'a> {
    old: &'a [u64],
    new: &'a [u64],
    vf: V,
    vb: V,
    budget: &'a mut WorkBudget,
}

/// The furthest x reached on each diagonal k (which may be negative: stored offset by `max_d`).
struct V {
    offset: isize,
    v: Vec<usize>,
}

impl V {
    fn new(max_d: usize) -> Self {
        V {
            offset: max_d as isize,
            v: vec![0; 2 * max_d],
        }
    }
}

impl Index<isize> for V {
    type Output = usize;

    fn index(&self, k: isize) -> &usize {
        &self.v[(k + self.offset) as usize]
    }
}

impl IndexMut<isize> for V {
    fn index_mut(&mut self, k: isize) -> &mut usize {
        &mut self.v[(k + self.offset) as usize]
    }
}

fn max_d(len1: usize, len2: usize) -> usize {
    (len1 + len2).div_ceil(2) + 1
}

/// Length of the common prefix of `old[ro]` and `new[rn]`.
fn common_prefix(old: &[u64], ro: Range<usize>, new: &[u64], rn: Range<usize>) -> usize {
    old[ro]
        .iter()
        .zip(&new[rn])
        .take_while(|(a, b)| a == b)
        .count()
}

/// Length of the common suffix of `old[ro]` and `new[rn]`.
fn common_suffix(old: &[u64], ro: Range<usize>, new: &[u64], rn: Range<usize>) -> usize {
    old[ro]
        .iter()
        .rev()
        .zip(new[rn].iter().rev())
        .take_while(|(a, b)| a == b)
        .count()
}

impl Search<'_> {
    /// The start of the middle snake of an optimal path through `old[ro]` × `new[rn]`, searching
    /// forward from the top left and backward from the bottom right until the two meet; `None` when
    /// the budget runs out first.
    fn find_middle_snake(&mut self, ro: Range<usize>, rn: Range<usize>) -> Option<(usize, usize)> {
        let Search {
            old,
            new,
            vf,
            vb,
            budget,
        } = self;
        let (old, new) = (*old, *new);
        let n = ro.len();
        let m = rn.len();
        // The optimal edit script's length has the parity of `delta` (Myers' Lemma 1).
        let delta = n as isize - m as isize;
        let odd = delta & 1 == 1;
        vf[1] = 0;
        vb[1] = 0;
        let d_max = max_d(n, m);
        for d in 0..d_max as isize {
            if !budget.allows_more() {
                return None;
            }
            for k in (-d..=d).rev().step_by(2) {
                let mut x = if k == -d || (k != d && vf[k - 1] < vf[k + 1]) {
                    vf[k + 1]
                } else {
                    vf[k - 1] + 1
                };
                let y = (x as isize - k) as usize;
                let (x0, y0) = (x, y);
                let mut advance = 0;
                // The first pair is compared here, not in `common_prefix`: most diagonals of a
                // hard diff start with a mismatch, and the call costs much in a debug build.
                if x < n && y < m && old[ro.start + x] == new[rn.start + y] {
                    advance = common_prefix(old, ro.start + x..ro.end, new, rn.start + y..rn.end);
                    x += advance;
                }
                budget.spend(advance + 1);
                vf[k] = x;
                if odd && (k - delta).abs() < d && vf[k] + vb[-(k - delta)] >= n {
                    return Some((x0 + ro.start, y0 + rn.start));
                }
            }
            for k in (-d..=d).rev().step_by(2) {
                let mut x = if k == -d || (k != d && vb[k - 1] < vb[k + 1]) {
                    vb[k + 1]
                } else {
                    vb[k - 1] + 1
                };
                let mut y = (x as isize - k) as usize;
                let mut advance = 0;
                if x < n && y < m && old[ro.start + n - x - 1] == new[rn.start + m - y - 1] {
                    advance = common_suffix(
                        old,
                        ro.start..ro.start + n - x,
                        new,
                        rn.start..rn.start + m - y,
                    );
                    x += advance;
                    y += advance;
                }
                budget.spend(advance + 1);
                vb[k] = x;
                if !odd && (k - delta).abs() <= d && vb[k] + vf[-(k - delta)] >= n {
                    return Some((n - x + ro.start, m - y + rn.start));
                }
            }
        }
        None
    }

    /// Reports the ops for `old[ro]` × `new[rn]` to `hook`: the common prefix and suffix, and
    /// between them the halves on either side of the middle snake, recursively.
    fn conquer<D: DiffHook>(
        &mut self,
        hook: &mut D,
        mut ro: Range<usize>,
        mut rn: Range<usize>,
    ) -> Result<(), D::Error> {
        let (old, new) = (self.old, self.new);
        let prefix = common_prefix(old, ro.clone(), new, rn.clone());
        if prefix > 0 {
            hook.equal(ro.start, rn.start, prefix)?;
        }
        ro.start += prefix;
        rn.start += prefix;
        let suffix = common_suffix(old, ro.clone(), new, rn.clone());
        let suffix_at = (ro.end - suffix, rn.end - suffix);
        ro.end -= suffix;
        rn.end -= suffix;
        self.budget.spend(prefix + suffix + 1);

        if ro.is_empty() && rn.is_empty() {
            // Nothing between the prefix and the suffix.
        } else if rn.is_empty() {
            hook.delete(ro.start, ro.len(), rn.start)?;
        } else if ro.is_empty() {
            hook.insert(ro.start, rn.start, rn.len())?;
        } else if let Some((x, y)) = self.find_middle_snake(ro.clone(), rn.clone()) {
            self.conquer(hook, ro.start..x, rn.start..y)?;
            self.conquer(hook, x..ro.end, y..rn.end)?;
        } else {
            hook.delete(ro.start, ro.len(), rn.start)?;
            hook.insert(ro.start, rn.start, rn.len())?;
        }

        if suffix > 0 {
            hook.equal(suffix_at.0, suffix_at.1, suffix)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use similar::{Algorithm, capture_diff_slices};

    fn lcg(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        *seed >> 33
    }

    /// With budget to spare, the ops are `similar`'s, on sequences with much and little in
    /// common.
    #[test]
    fn matches_similar_when_the_budget_suffices() {
        let mut seed = 7;
        for case in 0..300 {
            let alphabet = [2, 4, 16, 1000][case % 4];
            let a: Vec<u64> = (0..lcg(&mut seed) % 60)
                .map(|_| lcg(&mut seed) % alphabet)
                .collect();
            let mut b = a.clone();
            for _ in 0..lcg(&mut seed) % 8 {
                let at = (lcg(&mut seed) as usize) % (b.len() + 1);
                match lcg(&mut seed) % 3 {
                    0 => b.insert(at, lcg(&mut seed) % alphabet),
                    1 if at < b.len() => {
                        b.remove(at);
                    }
                    _ if at < b.len() => b[at] = lcg(&mut seed) % alphabet,
                    _ => {}
                }
            }
            let mut budget = WorkBudget::new(u64::MAX);
            assert_eq!(
                diff(&a, &b, &mut budget),
                capture_diff_slices(Algorithm::Myers, &a, &b),
                "{a:?} {b:?}"
            );
            assert!(!budget.exhausted());
        }
    }

    #[test]
    fn an_exhausted_budget_replaces_what_is_left() {
        let a: Vec<u64> = (0..100).collect();
        let b: Vec<u64> = (0..100)
            .map(|x| if x % 2 == 0 { x } else { x + 1000 })
            .collect();
        let mut budget = WorkBudget::new(10);
        let ops = diff(&a, &b, &mut budget);
        assert!(budget.exhausted());
        // The common prefix and suffix are still found; the middle is one replacement.
        assert_eq!(
            ops,
            [
                DiffOp::Equal {
                    old_index: 0,
                    new_index: 0,
                    len: 1
                },
                DiffOp::Replace {
                    old_index: 1,
                    old_len: 99,
                    new_index: 1,
                    new_len: 99
                },
            ]
        );
    }
}
