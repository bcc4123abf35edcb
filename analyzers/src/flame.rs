//! Flamegraphs of where time went by Python stack: compile time, and host sync stall.
//!
//! [`folded`] gives the stacks in the "folded" form flamegraph tools read (`a;b;c weight`);
//! [`svg`] draws them with inferno. Frames are `file:line function`, outermost first. Paths are
//! shortened so that a frame stays readable in a narrow box: a file in site-packages keeps its
//! path from `site-packages/` on (`site-packages/jax/_src/pjit.py`), the standard library from
//! `python3.X/` on, and the user's own files keep their last two components
//! (`workloads/train.py`). Framework frames are kept (the palette colours them apart from the
//! user's) because which framework path led to a compile is part of the answer.

use std::collections::{BTreeMap, HashMap};

use tpuscope_core::Trace;
use tpuscope_core::event::{Direction, Record, StackId};

use crate::source::short_path;

/// What a flamegraph weighs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlameKind {
    /// Compile durations (every compile record, failed ones too: the time was spent).
    CompileTime,
    /// How long the host was blocked on the device: blocking device-to-host reads and waits of
    /// Python threads, the host syncs of [`crate::syncs::host_syncs`].
    SyncStall,
}

/// Root frame of time spent with no Python stack recorded (a runtime thread, or a stack the
/// agent could not take).
pub const NO_STACK: &str = "(no Python stack)";

/// Why a flamegraph could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum FlameError {
    #[error("nothing to draw: no stack has any weight")]
    Empty,
    #[error("drawing the flamegraph failed: {0}")]
    Render(#[from] std::io::Error),
    #[error("the flamegraph is not UTF-8 text: {0}")]
    NotUtf8(#[from] std::string::FromUtf8Error),
}

/// One entry per distinct stack, `frame;frame;...` outermost first, with the summed weight in
/// microseconds (rounded; stacks under half a microsecond are left out). Sorted by stack.
pub fn folded(trace: &Trace, kind: FlameKind) -> Vec<(String, u64)> {
    folded_in(trace, trace.events.iter(), kind)
}

/// [`folded`] of a run read through its digest: the records it weighs (compiles, blocking
/// reads, waits) are all among those the digest keeps whole.
pub fn folded_of(
    trace: &Trace,
    digest: &crate::digest::Digest,
    kind: FlameKind,
) -> Vec<(String, u64)> {
    folded_in(trace, digest.others().map(|(_, r)| r), kind)
}

/// [`folded`] of `records`, the trace's events or some of them (`trace` holds the stacks).
fn folded_in<'a>(
    trace: &Trace,
    records: impl Iterator<Item = &'a Record>,
    kind: FlameKind,
) -> Vec<(String, u64)> {
    // Nanoseconds per stack and name first (a long run has a few sites, each hit millions of
    // times: its text is made once), then per stack text: different stack ids can shorten to
    // the same text.
    let mut by_site: HashMap<(StackId, &str), u64> = HashMap::new();
    let mut add = |stack: StackId, what: &'a str, ns: u64| {
        let w = by_site.entry((stack, what)).or_insert(0);
        *w = w.saturating_add(ns);
    };
    for r in records {
        match (kind, r) {
            (FlameKind::CompileTime, Record::Compile(c)) => {
                let name = if c.executable_name.is_empty() {
                    "(unnamed executable)"
                } else {
                    c.executable_name.as_str()
                };
                add(c.stack, name, c.dur_ns);
            }
            (FlameKind::SyncStall, Record::Transfer(t))
                if t.direction == Direction::D2h as i32 && t.sync =>
            {
                add(t.stack, &t.api, t.blocked_ns);
            }
            // Waits without a Python stack are the runtime's own threads, not host syncs.
            (FlameKind::SyncStall, Record::Sync(s)) if trace.stacks.contains_key(&s.stack) => {
                add(s.stack, &s.reason, s.dur_ns);
            }
            _ => {}
        }
    }
    let mut by_stack: BTreeMap<String, u64> = BTreeMap::new();
    for ((stack, what), ns) in by_site {
        let w = by_stack.entry(stack_key(trace, stack, what)).or_insert(0);
        *w = w.saturating_add(ns);
    }
    by_stack
        .into_iter()
        .map(|(k, ns)| (k, ns.saturating_add(500) / 1000))
        .filter(|(_, us)| *us > 0)
        .collect()
}

/// The stack's frames outermost first, or `(no Python stack);<what>`.
fn stack_key(trace: &Trace, stack: StackId, what: &str) -> String {
    let frames = trace
        .stacks
        .get(&stack)
        .map(|d| d.frames.as_slice())
        .unwrap_or_default();
    if frames.is_empty() {
        return format!("{NO_STACK};{}", clean(what));
    }
    let mut key = String::new();
    // Stored innermost first.
    for (n, f) in frames.iter().rev().enumerate() {
        if n > 0 {
            key.push(';');
        }
        let function = trace.string(f.function);
        let file = short_file(trace.string(f.file));
        let label = if function.is_empty() {
            format!("{file}:{}", f.line)
        } else {
            format!("{file}:{} {function}", f.line)
        };
        key.push_str(&clean(&label));
    }
    key
}

/// `;` separates frames and a line ends a stack: neither may appear inside one.
fn clean(label: &str) -> String {
    label
        .chars()
        .map(|c| match c {
            ';' => ',',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect()
}

/// A path short enough for a flamegraph box (see the module docs).
fn short_file(file: &str) -> &str {
    for marker in ["/site-packages/", "/dist-packages/"] {
        if let Some(i) = file.rfind(marker) {
            // Keep `site-packages/`: the Python palette colours such frames as libraries.
            return &file[i + 1..];
        }
    }
    if let Some(i) = file.find("/lib/python3") {
        return &file[i + "/lib/".len()..];
    }
    if file.starts_with('<') {
        return file;
    }
    short_path(file)
}

/// The folded stacks drawn as an interactive SVG flamegraph (inferno). Colours come from the
/// frame names, not chance, so the same stacks give the same bytes.
pub fn svg(folded: &[(String, u64)], title: &str) -> Result<String, FlameError> {
    let lines: Vec<String> = folded
        .iter()
        .filter(|(_, w)| *w > 0)
        .map(|(stack, w)| format!("{stack} {w}"))
        .collect();
    if lines.is_empty() {
        return Err(FlameError::Empty);
    }
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = title.to_string();
    opts.count_name = "µs".to_string();
    opts.deterministic = true;
    opts.colors = inferno::flamegraph::color::Palette::Multi(
        inferno::flamegraph::color::MultiPalette::Python,
    );
    let mut out = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, lines.iter().map(String::as_str), &mut out)?;
    Ok(String::from_utf8(out)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_shortened_by_kind() {
        assert_eq!(
            short_file("/e/jax/lib/python3.11/site-packages/jax/_src/pjit.py"),
            "site-packages/jax/_src/pjit.py"
        );
        assert_eq!(
            short_file("/usr/lib/python3.11/threading.py"),
            "python3.11/threading.py"
        );
        assert_eq!(
            short_file("/work/main/tests/workloads/jax_lr.py"),
            "workloads/jax_lr.py"
        );
        assert_eq!(short_file("<frozen runpy>"), "<frozen runpy>");
    }

    #[test]
    fn separators_do_not_survive_in_labels() {
        assert_eq!(clean("f[u8; 8]\nx"), "f[u8, 8] x");
    }
}
