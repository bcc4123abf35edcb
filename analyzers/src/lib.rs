//! Pure analyses over decoded traces: graph families and recompile causes from HLO diffs, host
//! syncs by the user's Python line, steps, cache behaviour, device memory — and the report that
//! puts them together with budgets and a baseline comparison.
//!
//! Nothing here does I/O: the CLI reads the traces and renders the [`report::Report`]; the TUI
//! and GUI call the same functions.
// No file system, environment, clock, socket or process (the list is in analyzers/clippy.toml):
// the same traces give the same report on any machine. Tests and benches are separate crates.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod breakdown;
pub mod cache;
pub mod column;
pub mod describe;
pub mod diff;
pub mod digest;
pub mod executable_ids;
pub mod families;
pub mod flame;
pub mod frontend;
pub mod hbm;
pub mod hlo_text;
pub mod hosts;
pub mod launch_table;
pub mod library_reads;
pub mod live_notes;
pub mod phases;
pub mod present;
pub mod program;
pub mod report;
pub mod saved;
pub mod source;
pub mod steps;
pub mod suggest;
pub mod syncs;
pub mod torch_trace;
mod union_walk;
pub mod units;
pub mod whatif;

pub use diff::Cause;
pub use report::{Budget, BudgetKey, Input, Report, analyze, apply_budgets, compare_baseline};
pub use source::SourceLoc;
