//! Helpers shared by the integration tests (each test crate uses a different subset).
#![allow(dead_code)]

pub mod golden;
pub mod skimmed;

use tpuscope_core::Completeness;

/// How a file of `len` bytes cut at byte `cut` reads, when its last whole frame before the cut
/// ends at `boundary` (docs/trace-format.md section 7): whole, ending on a boundary, or cut.
pub fn completeness_at_cut(cut: usize, boundary: usize, len: usize) -> Completeness {
    if cut == len {
        Completeness::Complete
    } else if cut == boundary {
        Completeness::NoEndRecord {
            file_len: cut as u64,
        }
    } else {
        Completeness::Cut {
            offset: boundary as u64,
            file_len: cut as u64,
        }
    }
}
