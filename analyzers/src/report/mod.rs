//! The report: every analysis over one or several traces, findings with fixes, budgets and the
//! comparison with a baseline report. Serializes to the JSON of `tpuscope report --format json`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use tpuscope_core::{Completeness, Trace};

use crate::cache::{self, CacheReport};
use crate::diff::{Cause, Diff};
use crate::digest::Digest;
use crate::families::{self, CompileView, Family};
pub use crate::frontend::Frontend;
use crate::hbm::{self, DeviceMemory, ExecutableMemory, OomReport};
use crate::hosts;
use crate::phases::{Origin, Phase};
use crate::source::{SourceLoc, StackFrame, stack_frames};
use crate::steps::{self, StepSource, Steps};
use crate::suggest;
use crate::syncs::{self, SyncLine, SyncView};

mod analysis;
mod ci;
mod explain;
mod facts;
use explain::explain;
mod findings;
use findings::findings;
mod lines;
mod pipeline;

pub(crate) use analysis::analyze_digested;
pub use analysis::{AnalysedRun, analyze, frontend_of, manifest_frontend, recording_stopped};
pub use ci::{
    BaselineResult, Budget, BudgetError, BudgetKey, BudgetResult, BudgetStatus, apply_budgets,
    compare_baseline, failed,
};
pub use lines::{phases_lines, setup_compile_line, stopped_line};
pub use pipeline::{Options, build, build_analysed, build_one, build_one_digested};

/// Version of the report's JSON shape.
pub const REPORT_VERSION: u32 = 1;

/// The whole report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    pub tpuscope_report: u32,
    pub traces: Vec<TraceInfo>,
    pub runs: RunsInfo,
    #[serde(default)]
    pub warnings: Vec<String>,
    pub compiles: CompileSummary,
    pub recompiles: Vec<FamilyReport>,
    /// Each run's set-up, steady state and tail, with the compile time each holds.
    #[serde(default)]
    pub phases: Vec<PhaseReport>,
    pub syncs: Vec<SyncLine>,
    pub runtime_waits: u64,
    pub steps: StepsReport,
    /// Where each run's time went: compiling, blocked, device busy, host-bound.
    #[serde(default)]
    pub time: Vec<crate::breakdown::RunBreakdown>,
    pub hbm: Vec<DeviceMemory>,
    pub compiled_memory: Vec<ExecutableMemory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom: Option<OomReport>,
    pub cache: CacheReport,
    pub errors: Vec<ErrorSummary>,
    pub findings: Vec<Finding>,
    pub budgets: Vec<BudgetResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineResult>,
    /// The hosts of a multi-host job side by side (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<hosts::HostsReport>,
    /// dynamo's graph breaks and guard failures from `TORCH_TRACE` logs (absent without logs;
    /// filled in by `torch_trace::attach`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamo: Option<crate::torch_trace::DynamoReport>,
}

/// One analysed trace.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TraceInfo {
    pub run: usize,
    pub path: String,
    pub pid: u32,
    pub host: String,
    pub frontend: Frontend,
    pub command: String,
    pub plugin: String,
    pub pjrt_api: String,
    pub start_wall_ns: u64,
    pub job_id: String,
    pub process_index: u32,
    pub completeness: TraceCompleteness,
    /// Where a partial trace (cut, or no end record: a killed process) stops: its last record
    /// (absent for a complete trace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_record: Option<LastRecord>,
    pub events: u64,
    pub dropped_events: u64,
    /// Recording stopped before the process ended (file size limit, full disk, writer failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording_stopped: Option<StoppedReport>,
    /// `tpuscope attach` recorded this trace from a process already running: what it cannot
    /// hold (absent for traces recorded from the process's start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached: Option<AttachedReport>,
}

/// A trace `tpuscope attach` recorded from the middle of a run: nothing from before the attach
/// is in it (compiles, transfers, buffers, the memory they hold), and executables compiled
/// before it are known only from their first execute after it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AttachedReport {
    /// How long the process had run when the attach began, in seconds (absent when unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process_age_s: Option<f64>,
    /// Programs (graphs and eager ops) compiled before the attach that ran after it (identified
    /// at their first execute), by name, each once.
    pub executables_before: Vec<String>,
    /// The trace ends at a detach: the process went on running.
    pub detached: bool,
}

/// The last record of a partial trace: when recording stopped, as far as the trace tells.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LastRecord {
    /// Seconds from the run's start to the last record.
    pub at_s: f64,
    /// The step under way then, numbered as the steps table numbers them (absent when the
    /// trace shows no steps: it cannot end before the first of the steps it shows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
}

/// Recording stopped early: when, why, and how much of the run is not in the trace.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoppedReport {
    /// Seconds from the run's start to the stop, and to the process's exit (to the trace's last
    /// record when the exit was not recorded).
    pub at_s: f64,
    pub run_s: f64,
    /// The share of the run's time after the stop, 0–1.
    pub share_after: f64,
    pub reason: String,
    /// Events seen after the stop and not recorded, by kind (`dropped`: lost to a full queue).
    pub not_recorded: BTreeMap<String, u64>,
    pub not_recorded_total: u64,
    /// Whether the process reached its exit after the stop (else what was not recorded is
    /// unknown).
    pub counted: bool,
}

/// How several traces were related.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunsInfo {
    /// `single_run`, `successive_runs` (ordered by start time) or `multi_host_job`.
    pub assumed: String,
    pub note: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CompileSummary {
    pub total: u64,
    pub failed: u64,
    pub compile_ms: f64,
    /// Graph families (compiles of one graph), and those compiled more than once.
    pub families: u64,
    pub recompile_families: u64,
    /// Σ over recompile families of (count − 1), for the families that recompiled after warm-up.
    pub recompiles: u64,
    /// Σ (count − 1) of families that compiled more than once only during warm-up (setup and the
    /// first two steps): listed in `recompiles` with `finding: false`.
    pub warmup_recompiles: u64,
    pub by_cause: BTreeMap<String, u64>,
    /// Compiles of eager ops (one program per shape; not families, not recompiles).
    #[serde(default)]
    pub op_compiles: u64,
    /// Compile time before the loop's steady state (init, warm-up steps), and its share of the
    /// runs' wall time: stated whether or not it is a finding.
    #[serde(default)]
    pub setup_compile_ms: f64,
    #[serde(default)]
    pub setup_compile_share: f64,
}

/// One phase of one run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PhaseReport {
    pub run: usize,
    pub phase: Phase,
    /// Offset from the run's start.
    pub start_ms: f64,
    pub dur_ms: f64,
    /// Of the run's wall time.
    pub share: f64,
    /// Loop steps in it (warm-up steps for set-up).
    pub steps: u64,
    pub compiles: u64,
    pub compile_ms: f64,
    pub op_compiles: u64,
    /// The eager op compiles, by the user's line that caused them, most compile time first.
    pub op_sites: Vec<OpSite>,
}

/// Eager op compiles asked for by one line of the user's code.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OpSite {
    /// The user's line (absent: no user frame, e.g. a library's own thread).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLoc>,
    /// The library frame inside that line's call, when a library ran the ops (flax's init).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<SourceLoc>,
    pub compiles: u64,
    pub compile_ms: f64,
    /// The ops' program names, up to eight.
    pub ops: Vec<String>,
    /// In how many distinct steps they compiled.
    pub steps: u32,
    /// The graph whose recompiles these compiles came with (the same new shapes, the same
    /// steps): its finding covers them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explained_by: Option<String>,
}

/// A recompile family.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FamilyReport {
    /// The executable/module name of its first compile.
    pub graph: String,
    pub run: usize,
    pub count: u64,
    pub cause: Cause,
    /// The line a user would edit.
    pub source: Option<SourceLoc>,
    pub details: String,
    pub suggestion: String,
    pub compile_ms: f64,
    /// Recompiles after warm-up (the first two steps): what a steady loop should never do.
    pub steady_state_recompiles: u64,
    /// True when it is reported as a finding: it recompiled in the steady state (or the run has
    /// no steps to tell the phases by), and no other family's finding covers it.
    pub finding: bool,
    /// The family whose finding covers this one: it recompiled in the same steps for the same
    /// cause (a model's backward with its forward, a graph cut by a read with the rest of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recompiled_with: Option<String>,
    pub members: Vec<MemberReport>,
    /// Steady-state steps in which it recompiled (for telling which families go together).
    #[serde(skip)]
    pub steady_steps: BTreeSet<usize>,
}

impl FamilyReport {
    /// Why a family that recompiled is not a finding of its own, in a few words (`None` for a
    /// finding): `set-up/tail` or `with jit_train_step`.
    pub fn not_a_finding(&self) -> Option<String> {
        match (&self.recompiled_with, self.finding) {
            (Some(w), _) => Some(format!("with {w}")),
            (None, true) => None,
            (None, false) => Some("set-up/tail".to_string()),
        }
    }
}

/// One compile of a family.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemberReport {
    /// Index of the compile record in its trace's `events` (the trace of the family's `run`).
    pub event: usize,
    pub t_ms: f64,
    pub compile_ms: f64,
    pub executable: String,
    /// Index (in `members`) of the earlier member it was compared with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub against: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<Diff>,
    pub parameters: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLoc>,
    /// Its Python stack, innermost first.
    pub stack: Vec<StackFrame>,
    /// Compiled before `tpuscope attach`: the program the first compile seen is compared with
    /// (`event` is its `ExecutableSeen` record; no compile time).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub before_attach: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StepsReport {
    pub count: u64,
    /// `marker torch_xla.sync`, `dominant executable jit_train_step`, or `none`: the words of
    /// `source`.
    pub detected_by: String,
    /// How the steps were found (of the first run that found any), for views; the JSON says
    /// it in `detected_by`.
    #[serde(skip)]
    pub source: crate::steps::StepSource,
    /// Executable launches in the worst steady-state step.
    pub graph_fragments_per_step: u64,
    /// Host syncs in the worst steady-state step.
    pub syncs_per_step: u64,
    pub mean_graph_fragments_per_step: f64,
    pub mean_syncs_per_step: f64,
    /// Compiles in steady-state steps (a steady loop compiles nothing).
    pub compiles_after_first_step: u64,
    pub per_step: Vec<StepRow>,
    /// When the first run's latest steps started (monotonic ns): those within
    /// [`STEP_RATE_WINDOW_NS`] of its last one, all a live steps/s counts
    /// ([`StepsReport::rate_at`]).
    #[serde(skip)]
    pub recent_starts: Vec<u64>,
}

/// The window a live view's steps/s is counted over.
pub const STEP_RATE_WINDOW_NS: u64 = 5_000_000_000;

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepRow {
    pub run: usize,
    pub number: u32,
    pub t_ms: f64,
    pub dur_ms: f64,
    pub executes: u32,
    pub distinct_executables: u32,
    pub syncs: u32,
    pub compiles: u32,
    pub stall_ms: f64,
    /// Past warm-up: what every step of the loop does.
    #[serde(default)]
    pub steady: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ErrorSummary {
    pub api: String,
    pub message: String,
    pub count: u64,
}

/// Something to fix, in one line, with the fix.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLoc>,
    pub suggestion: String,
}

/// One input: a display path, its trace, and the digest of its events when the caller made it
/// while streaming the file (then the trace holds its tables only: no events).
pub struct Input<'a> {
    pub path: String,
    pub trace: &'a Trace,
    pub digest: Option<&'a crate::digest::Digest>,
}

impl<'a> Input<'a> {
    /// A trace decoded whole (its digest is made from its events).
    pub fn new(path: impl Into<String>, trace: &'a Trace) -> Input<'a> {
        Input {
            path: path.into(),
            trace,
            digest: None,
        }
    }
}

/// The digest of each input: the one it came with, else one made from its trace's events.
pub(crate) struct Digests<'a> {
    given: Vec<Option<&'a crate::digest::Digest>>,
    made: Vec<Option<crate::digest::Digest>>,
}

impl<'a> Digests<'a> {
    pub(crate) fn of(inputs: &[Input<'a>]) -> Digests<'a> {
        Digests {
            given: inputs.iter().map(|i| i.digest).collect(),
            made: inputs
                .iter()
                .map(|i| {
                    i.digest
                        .is_none()
                        .then(|| crate::digest::Digest::of(i.trace))
                })
                .collect(),
        }
    }

    /// The digest of input `i` (an empty one past the end).
    pub(crate) fn get(&self, i: usize) -> &crate::digest::Digest {
        static EMPTY: std::sync::OnceLock<crate::digest::Digest> = std::sync::OnceLock::new();
        self.given
            .get(i)
            .copied()
            .flatten()
            .or_else(|| self.made.get(i).and_then(Option::as_ref))
            .unwrap_or_else(|| EMPTY.get_or_init(crate::digest::Digest::default))
    }
}

/// How much of a run a trace holds (`complete`, `no_end_record`, `cut` in the JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceCompleteness {
    /// Ends with the collector's end record.
    Complete,
    /// The process died or is still running.
    NoEndRecord,
    /// Truncated in the middle of a record.
    Cut,
}

impl TraceCompleteness {
    pub fn of(c: &Completeness) -> Self {
        match c {
            Completeness::Complete => Self::Complete,
            Completeness::NoEndRecord { .. } => Self::NoEndRecord,
            Completeness::Cut { .. } => Self::Cut,
        }
    }

    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::NoEndRecord => "no_end_record",
            Self::Cut => "cut",
        }
    }
}

impl std::fmt::Display for TraceCompleteness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a finding is about; the JSON spells it in snake case (`setup_compile`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A graph that keeps recompiling in the steady state (or an eager op site that does).
    Recompile,
    /// Compiling before the steady state took a large share of the run.
    SetupCompile,
    /// A Python line that makes the host wait for the device every step.
    Sync,
    /// The persistent compile cache: written and never read, or the same program compiled again.
    Cache,
    /// The run ran out of device memory.
    Oom,
    /// Device memory close to its limit, or growing step after step.
    Hbm,
    /// dynamo split a function into several graphs.
    GraphBreak,
    /// dynamo recompiled a frame because a guard failed.
    GuardFailure,
    /// The hosts of one job disagree (stragglers, different programs).
    Host,
}

impl FindingKind {
    pub const ALL: [FindingKind; 9] = [
        Self::Recompile,
        Self::SetupCompile,
        Self::Sync,
        Self::Cache,
        Self::Oom,
        Self::Hbm,
        Self::GraphBreak,
        Self::GuardFailure,
        Self::Host,
    ];

    /// The JSON spelling, also the label every view shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Recompile => "recompile",
            Self::SetupCompile => "setup_compile",
            Self::Sync => "sync",
            Self::Cache => "cache",
            Self::Oom => "oom",
            Self::Hbm => "hbm",
            Self::GraphBreak => "graph_break",
            Self::GuardFailure => "guard_failure",
            Self::Host => "host",
        }
    }
}

impl std::fmt::Display for FindingKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for BudgetStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
