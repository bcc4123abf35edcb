//! dynamo's structured logs (`TORCH_TRACE=<dir>`, the files tlparse reads) next to the PJRT
//! trace: graph breaks and guard failures with their file:line, and the PJRT compiles each one
//! caused.
//!
//! `log` reads the log files into per-process records; `join` places them on the trace's
//! clock, finds the PJRT compiles each frame compile caused and adds the `dynamo` section (the
//! types below) and its findings to a report ([`attach`]).

use serde::{Deserialize, Serialize};

use crate::source::SourceLoc;

mod join;
mod log;

pub use join::attach;
pub(crate) use join::attach_digested;
pub use log::{
    CompileId, DynamoStackEntry, FailedGuard, FrameCompile, GraphBreak, GuardFailure, Parsed,
    ProcessLog, Stamp, parse,
};

/// Logs the CLI found for one trace.
#[derive(Clone, Debug, Default)]
pub struct TorchLogs {
    /// The trace's path, as in [`Input::path`](crate::report::Input::path).
    pub trace_path: String,
    /// The directory (or file) read.
    pub dir: String,
    /// File names and their text.
    pub files: Vec<(String, String)>,
    /// Why there is nothing to read (directory gone), for the report.
    pub note: Option<String>,
}

/// The `dynamo` section of the report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DynamoReport {
    pub logs: Vec<LogsInfo>,
    /// Every frame compile, in time order.
    pub frame_compiles: Vec<FrameCompileReport>,
    /// Grouped by line and reason.
    pub graph_breaks: Vec<GraphBreakReport>,
    /// Grouped by the guard's line (or the compiled function's, when torch does not say).
    pub guard_failures: Vec<GuardFailureReport>,
}

impl DynamoReport {
    /// `1 graph break, 2 guard failures, 4 frame compiles (TORCH_TRACE)`.
    pub fn headline(&self) -> String {
        use crate::units::plural;
        format!(
            "{}, {}, {} (TORCH_TRACE)",
            plural(
                self.graph_breaks.len() as u64,
                "graph break",
                "graph breaks"
            ),
            plural(
                self.guard_failures.iter().map(|g| g.count).sum(),
                "guard failure",
                "guard failures"
            ),
            plural(
                self.frame_compiles.len() as u64,
                "frame compile",
                "frame compiles"
            ),
        )
    }
}

/// Where the logs of one run came from and how much of them was read.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LogsInfo {
    pub run: usize,
    pub dir: String,
    pub files: usize,
    /// Entries of this trace's process.
    pub entries: u64,
    pub skipped_lines: u64,
    /// Processes in the logs other than the trace's (another run, a worker): not reported.
    pub other_pids: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub torch_version: String,
    /// Local − UTC offset of the log's headers, minutes (calibrated from the log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utc_offset_min: Option<i64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// A PJRT compile that started inside a frame compile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CausedCompile {
    /// Index of the compile record in the trace (as a family member's `event`).
    pub event: usize,
    /// The executable's name, which is the graph family's name.
    pub graph: String,
    pub t_ms: f64,
    pub compile_ms: f64,
    /// The frame compile it happened in.
    pub compile_id: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FrameCompileReport {
    pub run: usize,
    pub compile_id: String,
    /// The compiled function, at its first line.
    pub function: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLoc>,
    /// The line that called it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_at: Option<SourceLoc>,
    /// `first`, `graph_break_resume`, `guard_failure` or `recompile` (no reasons logged).
    pub why: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dur_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failed: String,
    pub compiles: Vec<CausedCompile>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GraphBreakReport {
    pub run: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLoc>,
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hint: String,
    /// Frame compiles that broke here.
    pub count: u64,
    pub compile_ids: Vec<String>,
    /// The compiles of the graph before the break and of the resume function after it.
    pub compiles: Vec<CausedCompile>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GuardFailureReport {
    pub run: usize,
    /// Where the guarded value is used (torch's guard source), else the compiled function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLoc>,
    /// The recompiled function.
    pub function: String,
    /// The failed guards, first seen first (at most 8 distinct).
    pub guards: Vec<String>,
    /// Recompiles this caused.
    pub count: u64,
    pub compile_ids: Vec<String>,
    pub compiles: Vec<CausedCompile>,
}
