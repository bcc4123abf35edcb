//! Where `report` keeps the old launches, batches and step splits of a long trace's digest
//! (`analyzers/src/column.rs`): an unnamed temporary file, made when the first chunk leaves
//! memory (a short trace never makes one) and gone with the digest (and with the process,
//! however it ends). The page cache holds what the analyses walk again; the process holds a
//! chunk or two per column, whatever the trace's length.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tpuscope_analyzers::column::Spill;

#[derive(Debug, Default)]
struct SpillFile {
    /// In the temporary directory (`TMPDIR`); `None` where none could be made: the chunks
    /// then stay in memory, as they did before.
    file: OnceLock<Option<File>>,
    /// Where the next chunk goes.
    end: AtomicU64,
}

/// A new spill (its file is made when first needed).
pub(crate) fn new() -> Arc<dyn Spill> {
    Arc::new(SpillFile::default())
}

impl Spill for SpillFile {
    fn put(&self, bytes: &[u8]) -> Option<u64> {
        let file = self
            .file
            .get_or_init(|| tempfile::tempfile().ok())
            .as_ref()?;
        let at = self.end.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        // A chunk not written stays in memory; its room in the file stays a hole.
        file.write_all_at(bytes, at).ok()?;
        Some(at)
    }

    fn get(&self, at: u64, buf: &mut [u8]) {
        let read = match self.file.get() {
            Some(Some(file)) => file.read_exact_at(buf, at),
            _ => Err(std::io::Error::other("no such chunk")),
        };
        if let Err(e) = read {
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
        let spill = new();
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

    #[test]
    fn a_spill_never_given_a_chunk_makes_no_file() {
        let spill = SpillFile::default();
        assert!(spill.file.get().is_none());
    }
}
