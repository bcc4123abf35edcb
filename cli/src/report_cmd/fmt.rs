//! Number, size and place formatting shared by the report's renderers.

pub use tpuscope_analyzers::units::{bytes, ms, percent, plural};

use tpuscope_analyzers::SourceLoc;
use tpuscope_analyzers::report::{BudgetResult, Report};
use tpuscope_analyzers::source::short_path;

/// A budget number: integers as integers, fractions with four significant digits.
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    let mag = v.abs().log10().floor() as i32;
    let decimals = (3 - mag).clamp(0, 12) as usize;
    let s = format!("{v:.decimals$}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// `dir/file.py:33`, the form every message of the analyzers uses.
pub fn loc(s: &SourceLoc) -> String {
    s.to_string()
}

/// The plugin's file with its folder: enough to tell libtpu from the CPU plugin.
pub fn plugin(path: &str) -> &str {
    if path.is_empty() {
        "?"
    } else {
        short_path(path)
    }
}

/// `recompiles 3 > 2`.
pub fn budget_line(b: &BudgetResult) -> String {
    match b.actual {
        Some(a) if !b.ok => format!("{} {} > {}", b.name, num(a), num(b.limit)),
        Some(a) => format!("{} {} ≤ {}", b.name, num(a), num(b.limit)),
        None => format!("{} unknown (limit {})", b.name, num(b.limit)),
    }
}

/// One line saying why the report failed: the exceeded budgets and the baseline's regressions.
pub fn failure_summary(r: &Report) -> String {
    let mut parts = Vec::new();
    let exceeded: Vec<String> = r
        .budgets
        .iter()
        .filter(|b| !b.ok)
        .map(budget_line)
        .collect();
    if !exceeded.is_empty() {
        parts.push(format!(
            "{} exceeded: {}",
            if exceeded.len() == 1 {
                "budget"
            } else {
                "budgets"
            },
            exceeded.join(", ")
        ));
    }
    if let Some(b) = r.baseline.as_ref().filter(|b| !b.ok) {
        parts.push(format!(
            "{} against the baseline",
            plural(b.regressions.len() as u64, "regression", "regressions")
        ));
    }
    if parts.is_empty() {
        "passed".to_string()
    } else {
        format!("FAILED: {}", parts.join("; "))
    }
}

/// Total host syncs in the loop (grouped lines summed).
pub fn sync_total(r: &Report) -> u64 {
    r.syncs.iter().map(|s| s.count).sum()
}

/// The first line of a message, for one-line contexts.
pub fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_numbers_read_naturally() {
        assert_eq!(bytes(16), "16 B");
        assert_eq!(bytes(4096), "4.0 KiB");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(bytes(16 << 30), "16.0 GiB");
        assert_eq!(bytes(-2048), "-2.0 KiB");
        assert_eq!(num(2.0), "2");
        assert_eq!(num(0.85), "0.85");
        assert_eq!(num(0.000_122_070_3), "0.0001221");
        assert_eq!(num(12.5), "12.5");
        assert_eq!(ms(322.98), "323");
        assert_eq!(ms(34.04), "34.0");
        assert_eq!(ms(0.5181), "0.518");
        assert_eq!(percent(0.5), "50%");
        assert_eq!(percent(0.0123), "1.2%");
        assert_eq!(percent(0.000_122), "<0.1%");
    }
}
