//! Work spread over threads: the one pool the readers and `merge` share (a file's hosts, a
//! job's inputs).

use std::sync::atomic::{AtomicUsize, Ordering};

/// `f(i)` for each `i` in `0..n` on up to `threads` threads, each taking the next index when it
/// is free; the results in index order, `None` for those of a thread that panicked.
pub fn map_indices<R: Send>(
    n: usize,
    threads: usize,
    f: impl Fn(usize) -> R + Sync,
) -> Vec<Option<R>> {
    let next = AtomicUsize::new(0);
    let done: Vec<(usize, R)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads.clamp(1, n.max(1)))
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return mine;
                        }
                        mine.push((i, f(i)));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap_or_default())
            .collect()
    });
    let mut out: Vec<Option<R>> = std::iter::repeat_with(|| None).take(n).collect();
    for (i, r) in done {
        if let Some(slot) = out.get_mut(i) {
            *slot = Some(r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_in_index_order_whatever_the_threads() {
        for threads in [1, 2, 7] {
            let out = map_indices(20, threads, |i| i * i);
            let want: Vec<Option<usize>> = (0..20).map(|i| Some(i * i)).collect();
            assert_eq!(out, want, "{threads} threads");
        }
        assert!(map_indices(0, 4, |i| i).is_empty());
    }
}
