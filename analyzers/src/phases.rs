//! The phases of a run — set-up, the training loop's steady state, the tail — and what asked for
//! each compile: a graph (a function the user or a library jitted) or an eager op (one primitive
//! or frontend helper compiled for the shapes it was called with).
//!
//! A recompile matters when it recurs while the loop runs. Set-up (model init, optimizer init,
//! the first steps) and the tail (evaluation, checksums, saving) compile what they need once;
//! eager ops compile once per distinct shape. Counting those as recompiles buries the one
//! family that hurts under dozens that do not.

use crate::frontend::Frontend;
use serde::{Deserialize, Serialize};
use tpuscope_core::Trace;

use crate::source::{FrameClass, frame_class};

/// What asked for a compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A traced function: `jax.jit`, `nnx.jit`, `eqx.filter_jit`, a torch_xla sync, a
    /// `torch.compile` graph. Compiling it again with other constants or shapes is a recompile.
    Graph,
    /// An eager op (a JAX primitive outside `jit`, or a frontend helper such as `jnp.sum` that
    /// jits itself): a distinct program per shape, not a graph that recompiles.
    Op,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Graph => "graph",
            Origin::Op => "op",
        }
    }
}

/// JAX's entry points into a jitted callable: a user or library frame that calls into one of
/// these called a jitted function itself.
const JAX_JIT_ENTRIES: &[&str] = &[
    "/jax/_src/traceback_util.py",
    "/jax/_src/pjit.py",
    "/jax/_src/api.py",
    "/jax/_src/stages.py",
];

/// What asked for a compile, from the Python stack that requested it; `None` when the stack is
/// missing or says nothing (no frame outside the frontend).
pub fn origin_of_stack(trace: &Trace, stack: u32) -> Option<Origin> {
    let def = trace.stacks.get(&stack)?;
    let mut inner_frontend: Option<&str> = None;
    for f in &def.frames {
        let file = trace.string(f.file);
        if file.ends_with("/jax/_src/dispatch.py") && trace.string(f.function) == "apply_primitive"
        {
            return Some(Origin::Op);
        }
        match frame_class(file) {
            FrameClass::Frontend => inner_frontend = Some(file),
            FrameClass::Stdlib => {}
            FrameClass::User | FrameClass::Library => {
                // The first frame outside the frontend: it called a jitted function (a graph),
                // or a JAX API that compiled a helper of its own (an op).
                let jax_helper = inner_frontend.is_some_and(|inner| {
                    inner.contains("/jax/_src/")
                        && !JAX_JIT_ENTRIES.iter().any(|e| inner.ends_with(e))
                });
                return Some(if jax_helper {
                    Origin::Op
                } else {
                    Origin::Graph
                });
            }
        }
    }
    None
}

/// What a program's name says of its origin, where the frontend's naming tells: TorchTPU names
/// an eager aten op's program `tt_jit_<op>` (`tt_jit_zeros_like`, `tt_jit_foreach_addcdiv_`)
/// and a `torch.compile` graph after a source location (`tt_jit_export_L589C0_…`). Its
/// compiles run on a worker thread with no Python stack, so the name is what there is.
pub fn origin_of_name(frontend: &Frontend, name: &str) -> Option<Origin> {
    if *frontend != Frontend::TorchTpu {
        return None;
    }
    let rest = name.strip_prefix("tt_jit_")?;
    let located = rest.split('_').any(|part| {
        part.strip_prefix('L')
            .and_then(|p| p.split_once('C'))
            .is_some_and(|(l, c)| {
                !l.is_empty()
                    && !c.is_empty()
                    && l.bytes().all(|b| b.is_ascii_digit())
                    && c.bytes().all(|b| b.is_ascii_digit())
            })
    });
    Some(if located { Origin::Graph } else { Origin::Op })
}

/// Where a moment of a run falls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Before the loop reached its steady state: imports, model and optimizer init, and the
    /// loop's warm-up steps (which compile the step's graphs).
    Setup,
    /// The training loop after warm-up: what runs here runs every step.
    Steady,
    /// After the loop's last step: evaluation, checksums, saving.
    Tail,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Setup => "set-up",
            Phase::Steady => "steady state",
            Phase::Tail => "tail",
        }
    }
}

/// Steps that may legitimately compile: step 1 traces the loop, step 2 traces it again once the
/// optimizer state exists (torch_xla) or an argument lost its weak type (a Python int step
/// counter in JAX's `TrainState`).
pub const WARMUP_STEPS: usize = 2;

/// The phase boundaries of one run, on its monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phases {
    pub run_start_ns: u64,
    /// Start of the loop's first step.
    pub loop_start_ns: u64,
    /// End of the warm-up steps: the steady state begins here.
    pub steady_start_ns: u64,
    /// End of the loop's last step: the tail begins here.
    pub loop_end_ns: u64,
    pub run_end_ns: u64,
    pub warmup_steps: u32,
}

impl Phases {
    /// From step boundaries (`[start, end)` each, in order); `None` without steps.
    pub fn from_steps(bounds: &[(u64, u64)], run_start_ns: u64, run_end_ns: u64) -> Option<Phases> {
        let first = bounds.first()?;
        let last = bounds.last()?;
        let warmup = WARMUP_STEPS.min(bounds.len());
        let steady_start_ns = bounds.get(warmup - 1).map_or(first.1, |b| b.1);
        let run_start_ns = run_start_ns.min(first.0);
        Some(Phases {
            run_start_ns,
            loop_start_ns: first.0,
            steady_start_ns: steady_start_ns.min(last.1),
            loop_end_ns: last.1,
            run_end_ns: run_end_ns.max(last.1),
            warmup_steps: u32::try_from(warmup).unwrap_or(u32::MAX),
        })
    }

    /// For a trace that starts mid-run (`tpuscope attach`): the loop was running before the
    /// trace began, so there is no set-up and no warm-up in it; the steady state starts with it.
    pub fn mid_run(bounds: &[(u64, u64)], run_start_ns: u64, run_end_ns: u64) -> Option<Phases> {
        let p = Phases::from_steps(bounds, run_start_ns, run_end_ns)?;
        Some(Phases {
            loop_start_ns: p.run_start_ns,
            steady_start_ns: p.run_start_ns,
            warmup_steps: 0,
            ..p
        })
    }

    pub fn phase_at(&self, t: u64) -> Phase {
        if t < self.steady_start_ns {
            Phase::Setup
        } else if t < self.loop_end_ns {
            Phase::Steady
        } else {
            Phase::Tail
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torch_tpu_names_tell_eager_ops_from_compiled_graphs() {
        let o = |n| origin_of_name(&Frontend::TorchTpu, n);
        assert_eq!(o("tt_jit_zeros_like"), Some(Origin::Op));
        assert_eq!(o("tt_jit_foreach_addcdiv_"), Some(Origin::Op));
        assert_eq!(
            o("tt_jit_export_L589C0_fx_to_mlir_traverse_and_compile_compile_mlir_as_strided"),
            Some(Origin::Graph)
        );
        assert_eq!(
            o("tt_jit_torch_tpu_cache_L33C0_forward_addmm"),
            Some(Origin::Graph)
        );
        assert_eq!(o("SyncTensorsGraph"), None);
        assert_eq!(origin_of_name(&Frontend::Jax, "tt_jit_zeros"), None);
    }

    #[test]
    fn phases_split_at_warmup_and_the_last_step() {
        let bounds = [(100, 200), (200, 300), (300, 400), (400, 500)];
        let p = Phases::from_steps(&bounds, 0, 900).unwrap();
        assert_eq!(p.phase_at(50), Phase::Setup);
        assert_eq!(p.phase_at(150), Phase::Setup); // step 1: warm-up
        assert_eq!(p.phase_at(250), Phase::Setup); // step 2: warm-up
        assert_eq!(p.phase_at(300), Phase::Steady);
        assert_eq!(p.phase_at(499), Phase::Steady);
        assert_eq!(p.phase_at(500), Phase::Tail);
        assert_eq!(p.phase_at(800), Phase::Tail);
        // One step: all warm-up, no steady state.
        let p = Phases::from_steps(&[(100, 200)], 0, 300).unwrap();
        assert_eq!(p.steady_start_ns, 200);
        assert_eq!(p.phase_at(150), Phase::Setup);
        assert_eq!(p.phase_at(250), Phase::Tail);
        assert!(Phases::from_steps(&[], 0, 10).is_none());
    }
}
