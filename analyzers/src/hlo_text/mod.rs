//! HLO modules as text, and two modules side by side with what changed marked.
//!
//! `print` writes the listing; `align` puts two listings side by side, with `myers`, a line diff
//! whose work is bounded by a count of steps rather than a clock (so its result does not depend on
//! the machine).

mod align;
mod myers;
mod print;

pub use align::{
    DIFF_BUDGET_STEPS, RowKind, SideBySide, SideRow, side_by_side, side_by_side_within,
};
pub use print::{HloLine, module_lines};
