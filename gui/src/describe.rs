//! A record in the window: its line (tooltips, the details title) and the details panel's fields
//! and stack. The words are `tpuscope_analyzers::describe`'s, as in `dump` and the TUI; this
//! adds the window's layout (times from the trace's start, the stack with the user's frames).

use tpuscope_analyzers::describe::{self, ExecutableNames};
use tpuscope_analyzers::source::stack_frames;
use tpuscope_core::Trace;
use tpuscope_core::event::Record;

use crate::fmt;

/// One line: `compile jit_train_step mlir 1.3 KiB at proj/train.py:33 in 80.0 ms`.
pub fn line(trace: &Trace, r: &Record, names: &ExecutableNames) -> String {
    match describe::record(trace, r, names) {
        Some(d) => d.line(),
        None => r.kind().name().to_string(),
    }
}

/// The details of a record: (field, value) pairs and its Python stack (innermost first, with
/// whether each frame is the user's).
pub struct Details {
    pub title: String,
    pub fields: Vec<(String, String)>,
    pub stack: Vec<(String, bool)>,
}

/// `r` is a record of `trace`; times are shown from `t0`.
pub fn details(trace: &Trace, r: &Record, t0: u64, names: &ExecutableNames) -> Details {
    let since_start = |t: u64| fmt::dur(t.saturating_sub(t0) as f64);
    let mut fields: Vec<(String, String)> = Vec::new();
    if let Some(t) = r.t_ns() {
        fields.push(("at".to_string(), since_start(t)));
    }
    let described = describe::record(trace, r, names);
    if let Some(d) = &described {
        fields.extend(d.fields.iter().map(|(k, v)| (k.to_string(), v.clone())));
    }
    if let Record::ExecuteSummary(s) = r {
        fields.push(("until".to_string(), since_start(s.t_end_ns)));
    }
    let stack = stack_frames(trace, stack_of(r))
        .into_iter()
        .map(|f| (f.to_string(), f.user))
        .collect();
    Details {
        title: described.map_or_else(|| r.kind().name().to_string(), |d| d.line()),
        fields,
        stack,
    }
}

/// The Python stack a record carries (0: none).
fn stack_of(r: &Record) -> u32 {
    match r {
        Record::Compile(c) => c.stack,
        Record::Load(l) => l.stack,
        Record::Transfer(x) => x.stack,
        Record::Sync(s) => s.stack,
        Record::CacheLoad(c) => c.stack,
        Record::Error(e) => e.stack,
        _ => 0,
    }
}
