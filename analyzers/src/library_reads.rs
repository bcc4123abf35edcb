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
    // transformers 4.57 `masking_utils.py` `_ignore_causal_mask_sdpa`: `padding_mask.all()` as a
    // Python bool, once per forward of an SDPA model given a 2D attention mask. Checked on
    // torch_xla 2.9 with GPT-2 (tests/corpus/torch_xla/hf_gpt2.py): no mask, a 4D boolean mask,
    // or `attn_implementation="eager"` each remove it; no config flag does.
    Entry {
        file: "transformers/masking_utils.py",
        function: "_ignore_causal_mask_sdpa",
        torch: Some(true),
        read: KnownRead {
            why: "transformers decides on the host whether the causal mask can be skipped (`padding_mask.all()` on the attention mask you pass), once per forward",
            fix: "when a batch has no padding, call the model without `attention_mask`; with padding, pass a 4D boolean mask you build yourself, or load the model with `attn_implementation=\"eager\"` (no config flag turns the check off)",
        },
    },
    // transformers 4.57 `modeling_utils.py`: with `pad_token_id` set and no attention mask, it
    // checks the inputs for the pad token on the host (to warn), once per forward.
    Entry {
        file: "transformers/modeling_utils.py",
        function: "warn_if_padding_and_no_attention_mask",
        torch: Some(true),
        read: KnownRead {
            why: "transformers looks on the host for the pad token in the inputs (`pad_token_id` is set and no attention mask was given), to warn about it",
            fix: "pass an `attention_mask`, or leave `pad_token_id` unset in the model config when batches are never padded",
        },
    },
];

/// The known read at `lib`, if any.
pub fn known(lib: &SourceLoc, torch: bool) -> Option<&'static KnownRead> {
    KNOWN
        .iter()
        .find(|e| {
            lib.file.ends_with(e.file)
                // Python 3.11+ reports qualified names (`Mixin.method`).
                && lib
                    .function
                    .strip_suffix(e.function)
                    .is_some_and(|qualifier| qualifier.is_empty() || qualifier.ends_with('.'))
                && e.torch.is_none_or(|t| t == torch)
        })
        .map(|e| &e.read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(file: &str, function: &str) -> SourceLoc {
        SourceLoc {
            file: file.into(),
            line: 1,
            function: function.into(),
        }
    }

    #[test]
    fn known_reads_match_by_file_and_function_for_their_frontend() {
        let mask = at(
            "/v/lib/python3.11/site-packages/transformers/masking_utils.py",
            "_ignore_causal_mask_sdpa",
        );
        assert!(known(&mask, true).is_some());
        assert!(known(&mask, false).is_none());
        let warn = at(
            "/v/site-packages/transformers/modeling_utils.py",
            "ModuleUtilsMixin.warn_if_padding_and_no_attention_mask",
        );
        assert!(known(&warn, true).is_some());
        assert!(known(&at("/v/site-packages/equinox/_jit.py", "_call"), false).is_some());
        assert!(known(&at("/v/site-packages/equinox/_jit.py", "other"), false).is_none());
    }
}
