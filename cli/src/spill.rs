//! Where `report` keeps the old launches and batches of a long trace's digest
//! (`analyzers/src/column.rs`): an unnamed temporary file, gone with the digest (and with the
//! process, however it ends). The page cache holds what the analyses walk again; the process
//! holds a chunk or two per column, whatever the trace's length.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tpuscope_analyzers::column::Spill;

#[derive(Debug)]
struct SpillFile {
    file: File,
    /// Where the next chunk goes.
    end: AtomicU64,
}

/// A new spill in the temporary directory (`TMPDIR`); `None` where none can be made: the
/// digest then stays in memory, as it did before.
pub(crate) fn new() -> Option<Arc<dyn Spill>> {
    let file = tempfile::tempfile().ok()?;
    Some(Arc::new(SpillFile {
        file,
        end: AtomicU64::new(0),
    }))
}

impl Spill for SpillFile {
    fn put(&self, bytes: &[u8]) -> Option<u64> {
        let at = self.end.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        // A chunk not written stays in memory; its room in the file stays a hole.
        self.file.write_all_at(bytes, at).ok()?;
        Some(at)
    }

    fn get(&self, at: u64, buf: &mut [u8]) {
        if let Err(e) = self.file.read_exact_at(buf, at) {
            // What was written to a file this process holds open cannot be read back: the
            // disk is failing. No analysis may go on without those values, and none can be
            // told in the middle of a walk: one line, and out, before anything is written.
            eprintln!(
                "tpuscope: error: the temporary file that held part of the trace's digest could \
                 not be read back ({e}); nothing was reported"
            );
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_read_back_where_they_were_put() {
        let spill = new().expect("a temporary file");
        let (a, b) = (vec![1u8; 100], vec![2u8; 7]);
        let (at_a, at_b) = (spill.put(&a), spill.put(&b));
        assert_eq!((at_a, at_b), (Some(0), Some(100)));
        let mut back = vec![0u8; 7];
        spill.get(100, &mut back);
        assert_eq!(back, b);
        let mut part = vec![0u8; 3];
        spill.get(98, &mut part);
        assert_eq!(part, [1, 1, 2]);
    }
}
