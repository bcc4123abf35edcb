//! Facts about a report that more than one view shows: totals, labels, verdict wording. Each is
//! said here once; the views only lay them out and style them.

use super::*;
use crate::hbm::DeviceMemory;
use crate::units::{num, plural};

impl Report {
    /// Host syncs from user code in the whole report (grouped lines summed).
    pub fn sync_total(&self) -> u64 {
        self.syncs.iter().map(|s| s.count).sum()
    }

    /// Milliseconds the host stalled in those syncs.
    pub fn sync_stall_ms(&self) -> f64 {
        self.syncs.iter().map(|s| s.stall_ms).sum()
    }

    /// Bytes those syncs read.
    pub fn sync_bytes(&self) -> u64 {
        self.syncs.iter().map(|s| s.bytes).sum()
    }

    /// PJRT errors, all APIs and messages.
    pub fn error_total(&self) -> u64 {
        self.errors.iter().map(|e| e.count).sum()
    }

    /// Some trace holds only part of its run (cut, or no end record).
    pub fn is_partial(&self) -> bool {
        self.traces
            .iter()
            .any(|t| t.completeness != TraceCompleteness::Complete)
    }

    /// The verdict when there is no finding: a partial trace is not a clean run.
    pub fn no_findings_text(&self) -> &'static str {
        if self.is_partial() {
            "No findings in what the trace holds (it is partial: see the warnings)."
        } else {
            "No findings."
        }
    }

    /// One line saying why a CI step fails: the exceeded budgets and the baseline's
    /// regressions; `passed` when nothing failed.
    pub fn failure_summary(&self) -> String {
        let mut parts = Vec::new();
        let exceeded: Vec<String> = self
            .budgets
            .iter()
            .filter(|b| !b.ok)
            .map(BudgetResult::line)
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
        if let Some(b) = self.baseline.as_ref().filter(|b| !b.ok) {
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
}

impl StepsReport {
    /// The first run's steps per second over the [`STEP_RATE_WINDOW_NS`] before `now`, or
    /// since `run_start` when the run is younger than that; `None` without steps. Counting
    /// (rather than the spacing of the steps) keeps the rate honest for loops that run their
    /// steps in bursts and for a loop that stopped (0).
    pub fn rate_at(&self, now: u64, run_start: u64) -> Option<f64> {
        if self.recent_starts.is_empty() {
            return None;
        }
        let span = now.saturating_sub(run_start).min(STEP_RATE_WINDOW_NS);
        if span == 0 {
            return None;
        }
        let from = now - span;
        let recent = self
            .recent_starts
            .iter()
            .filter(|&&t| t > from && t <= now)
            .count();
        Some(recent as f64 / (span as f64 / 1e9))
    }
}

impl SyncLine {
    /// Where a person acts on this sync: `file.py:33 (fn) → lib.py:10 (read)` when a library
    /// the user's line calls does the read, `(no user frame) lib.py:10 (fn)` when no user code
    /// is on the stack, `(no stack)` when there is no stack at all.
    pub fn label(&self) -> String {
        match (&self.source, &self.innermost) {
            (Some(src), _) => match &self.library {
                Some(lib) => format!("{} → {}", src.with_function(), lib.with_function()),
                None => src.with_function(),
            },
            (None, Some(inner)) => format!("(no user frame) {}", inner.with_function()),
            (None, None) => "(no stack)".to_string(),
        }
    }

    /// The line to open in an editor: the user's line, else the innermost frame.
    pub fn place(&self) -> Option<&SourceLoc> {
        self.source.as_ref().or(self.innermost.as_ref())
    }
}

impl TraceCompleteness {
    /// What a reader must know about a trace's completeness (`complete`, or why it is partial).
    pub fn label(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Cut => "CUT: truncated file, partial report",
            Self::NoEndRecord => {
                "no end record: the process died or is still running, partial report"
            }
        }
    }
}

impl LastRecord {
    /// When recording stopped: `recording stopped 12.40 s into the run, in step 38`.
    pub fn line(&self) -> String {
        let step = self
            .step
            .map_or_else(String::new, |n| format!(", in step {n}"));
        format!(
            "recording stopped {} into the run{step}",
            crate::units::duration(self.at_s * 1e3)
        )
    }
}

impl TraceInfo {
    /// The trace's completeness as the header and the live views say it: `complete`, or why it
    /// is partial and where it stops.
    pub fn completeness_line(&self) -> String {
        match self.last_record {
            Some(l) => format!("{}; {}", self.completeness.label(), l.line()),
            None => self.completeness.label().to_string(),
        }
    }
}

impl BudgetResult {
    /// `recompiles 3 > 2`, `compiles 4 ≤ 10`, `hbm-peak-fraction unknown (limit 0.9)`.
    pub fn line(&self) -> String {
        match self.actual {
            Some(a) if !self.ok => format!("{} {} > {}", self.name, num(a), num(self.limit)),
            Some(a) => format!("{} {} ≤ {}", self.name, num(a), num(self.limit)),
            None => format!("{} unknown (limit {})", self.name, num(self.limit)),
        }
    }
}

impl BudgetStatus {
    /// The status as the report says it (`unknown` passes: the trace cannot tell).
    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Exceeded => "EXCEEDED",
            Self::Unknown => "unknown (the trace cannot tell: passes)",
        }
    }
}

/// A peak at or above this share of the device's limit is a problem.
const PEAK_NEAR_LIMIT: f64 = 0.9;

impl DeviceMemory {
    /// The peak came within 10% of the device's limit: every view marks it.
    pub fn peak_near_limit(&self) -> bool {
        self.peak_fraction.is_some_and(|f| f >= PEAK_NEAR_LIMIT)
    }
}

impl AttachedReport {
    /// The short form, for a live view's header: `attached 4.06 s into the run: what ran before
    /// is not traced`.
    pub fn short(&self) -> String {
        let when = self.process_age_s.map_or_else(
            || "attached to a running process".to_string(),
            |s| format!("attached {} into the run", crate::units::duration(s * 1e3)),
        );
        format!("{when}: what ran before is not traced")
    }

    /// What an attached trace cannot hold, in one line (the report's warning).
    pub fn line(&self) -> String {
        let age = self.process_age_s.map_or_else(
            || "a running process".to_string(),
            |s| {
                format!(
                    "a process {} after it started",
                    crate::units::duration(s * 1e3)
                )
            },
        );
        let mut line = format!(
            "attached to {age}: compiles, transfers and buffers from before the attach are not in \
             the trace"
        );
        if !self.executables_before.is_empty() {
            line.push_str(&format!(
                "; {} compiled before the attach ran after it ({})",
                crate::units::plural(self.executables_before.len() as u64, "program", "programs"),
                self.executables_before.join(", ")
            ));
        }
        if self.detached {
            line.push_str("; the trace ends at the detach (the process went on)");
        }
        line
    }
}

impl MemberReport {
    /// The member's cause as the views word it: its cause, `first` for a family's first
    /// compile, `before attach` for the program from before an attach it is compared with.
    pub fn cause_label(&self) -> String {
        match self.cause {
            Some(c) => c.to_string(),
            None if self.before_attach => "before attach".to_string(),
            None => "first".to_string(),
        }
    }
}

impl FamilyReport {
    /// `, 1 before the attach` when the family's first member ran before `tpuscope attach`
    /// (its `count` includes it), else empty: appended where the views give the count.
    pub fn before_attach_note(&self) -> &'static str {
        if self.members.first().is_some_and(|m| m.before_attach) {
            ", 1 before the attach"
        } else {
            ""
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_starts(recent_starts: Vec<u64>) -> StepsReport {
        StepsReport {
            recent_starts,
            ..StepsReport::default()
        }
    }

    #[test]
    fn the_live_step_rate_counts_the_window() {
        // 10 steps/s for 20 s: the last 5 s hold 50 steps.
        let steady = with_starts((1..=200).map(|i| i * 100_000_000).collect());
        let r = steady.rate_at(200 * 100_000_000, 0).unwrap_or(0.0);
        assert!((r - 10.0).abs() < 1e-9, "{r}");
        // A run younger than the window: counted since it started, bursts and all.
        let burst = with_starts((0..5).map(|i| 500_000_000 + i * 1_000).collect());
        let r = burst.rate_at(1_000_000_000, 0).unwrap_or(0.0);
        assert!((r - 5.0).abs() < 1e-9, "{r}");
        // A loop that stopped a while ago runs at 0 steps/s.
        assert_eq!(steady.rate_at(40 * 1_000_000_000, 0), Some(0.0));
        assert_eq!(with_starts(Vec::new()).rate_at(5, 0), None);
    }
}
