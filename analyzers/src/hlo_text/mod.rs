//! HLO modules as text, and two modules side by side with what changed marked.
//!
//! `print` writes the listing; `align` puts two listings side by side.

mod align;
mod print;

pub use align::{RowKind, SideRow, side_by_side};
pub use print::{HloLine, module_lines};
