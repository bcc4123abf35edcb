//! Host reads that well-known libraries do inside a user's call, with what a user can change
//! from outside the library. Each entry was seen on the real library (see its note).

use crate::source::SourceLoc;

/// What is known about one library read.
pub struct KnownRead {
    /// Why the library reads.
    pub why: &'static str,
    /// What the user can do without editing the library.
    pub fix: &'static str,
}

struct Entry {
    /// Path suffix of the library file.
    file: &'static str,
    /// Function name (as Python reports it, qualified).
    function: &'static str,
    /// The frontend family it was seen on: `Some(true)` torch, `Some(false)` JAX, `None` both.
    torch: Option<bool>,
    read: KnownRead,
}

const KNOWN: &[Entry] = &[];

/// The known read at `lib`, if any.
pub fn known(lib: &SourceLoc, torch: bool) -> Option<&'static KnownRead> {
    KNOWN
        .iter()
        .find(|e| {
            lib.file.ends_with(e.file)
                && lib.function == e.function
                && e.torch.is_none_or(|t| t == torch)
        })
        .map(|e| &e.read)
}
