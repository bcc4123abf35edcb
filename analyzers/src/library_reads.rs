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

const KNOWN: &[Entry] = &[
    // equinox 0.13.8 `_jit.py`: `marker.block_until_ready()` after every `filter_jit` call (the
    // marker output lets it raise Equinox runtime errors). Seen in tests/corpus/jax/equinox_mlp.py.
    Entry {
        file: "equinox/_jit.py",
        function: "_call",
        torch: Some(false),
        read: KnownRead {
            why: "`eqx.filter_jit` waits for every call's result (it blocks on a marker output so that it can raise Equinox's runtime errors), so the host cannot queue the next step while the device runs this one",
            fix: "for the training step, `jax.jit` a function of arrays instead (split the model with `eqx.partition` and rebuild it inside with `eqx.combine`): it returns without waiting; keep `filter_jit` off the hot path",
        },
    },
];

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
