//! The report: every analysis over one or several traces, findings with fixes, budgets and the
//! comparison with a baseline report. Serializes to the JSON of `tpuscope report --format json`.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use tpuscope_core::{Completeness, Trace};

use crate::cache::{self, CacheReport};
use crate::diff::{Cause, Diff};
use crate::families::{self, CompileView, Family};
use crate::hbm::{self, DeviceMemory, ExecutableMemory, OomReport};
use crate::hosts;
use crate::phases::{Origin, Phase};
use crate::source::{SourceLoc, stack_lines};
use crate::steps::{self, StepSource, Steps};
use crate::suggest;
use crate::syncs::{self, SyncLine, SyncView};

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
    pub frontend: String,
    pub command: String,
    pub plugin: String,
    pub pjrt_api: String,
    pub start_wall_ns: u64,
    pub job_id: String,
    pub process_index: u32,
    /// `complete`, `no_end_record` (died or still running) or `cut` (truncated).
    pub completeness: String,
    pub events: u64,
    pub dropped_events: u64,
    /// Recording stopped before the process ended (file size limit, full disk, writer failure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recording_stopped: Option<StoppedReport>,
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

/// What a trace says about recording that stopped early (`None` when it did not).
pub fn recording_stopped(trace: &Trace) -> Option<StoppedReport> {
    let s = trace.recording_stopped()?;
    let start = trace
        .manifest
        .as_ref()
        .map_or(s.t_ns, |m| m.start_mono_ns.min(s.t_ns));
    let last_record = trace.events.iter().filter_map(|r| r.t_ns()).max();
    let end = [
        Some(s.exit_t_ns),
        trace.end.as_ref().map(|e| e.t_ns),
        last_record,
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(s.t_ns)
    .max(s.t_ns);
    let secs = |ns: u64| ns as f64 / 1e9;
    let run = end - start;
    let not_recorded: BTreeMap<String, u64> = s
        .not_recorded
        .iter()
        .map(|k| (k.kind.clone(), k.count))
        .collect();
    Some(StoppedReport {
        at_s: secs(s.t_ns - start),
        run_s: secs(run),
        share_after: if run == 0 {
            0.0
        } else {
            (end - s.t_ns) as f64 / run as f64
        },
        reason: s.reason.clone(),
        not_recorded_total: not_recorded.values().sum(),
        not_recorded,
        counted: s.exit_t_ns != 0,
    })
}

/// One line about recording that stopped early, for `run`'s summary and the report's warnings.
pub fn stopped_line(s: &StoppedReport) -> String {
    let mut line = format!(
        "recording stopped early, {:.2} s into a {:.2} s run ({}): the last {:.0}% of the run is not in the trace",
        s.at_s,
        s.run_s,
        s.reason,
        s.share_after * 100.0
    );
    if s.counted {
        let mut by_kind: Vec<(&String, &u64)> = s.not_recorded.iter().collect();
        by_kind.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let kinds: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        line.push_str(&format!(
            "; {} events not recorded{}",
            s.not_recorded_total,
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            }
        ));
    } else {
        line.push_str("; the process ended without counting what was not recorded");
    }
    line
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
    pub stack: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct StepsReport {
    pub count: u64,
    /// `marker torch_xla.sync`, `dominant executable jit_train_step`, or `none`.
    pub detected_by: String,
    /// Executable launches in the worst steady-state step.
    pub graph_fragments_per_step: u64,
    /// Host syncs in the worst steady-state step.
    pub syncs_per_step: u64,
    pub mean_graph_fragments_per_step: f64,
    pub mean_syncs_per_step: f64,
    /// Compiles in steady-state steps (a steady loop compiles nothing).
    pub compiles_after_first_step: u64,
    pub per_step: Vec<StepRow>,
}

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
    /// `recompile`, `sync`, `cache`, `hbm`, `oom`, `error`.
    pub kind: String,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLoc>,
    pub suggestion: String,
}

/// A CI budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum BudgetKey {
    #[serde(rename = "compiles")]
    Compiles,
    #[serde(rename = "recompiles")]
    Recompiles,
    #[serde(rename = "syncs-per-step")]
    SyncsPerStep,
    #[serde(rename = "graph-fragments-per-step")]
    GraphFragmentsPerStep,
    #[serde(rename = "cache-misses")]
    CacheMisses,
    #[serde(rename = "hbm-peak-fraction")]
    HbmPeakFraction,
}

impl BudgetKey {
    pub const ALL: [BudgetKey; 6] = [
        BudgetKey::Compiles,
        BudgetKey::Recompiles,
        BudgetKey::SyncsPerStep,
        BudgetKey::GraphFragmentsPerStep,
        BudgetKey::CacheMisses,
        BudgetKey::HbmPeakFraction,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BudgetKey::Compiles => "compiles",
            BudgetKey::Recompiles => "recompiles",
            BudgetKey::SyncsPerStep => "syncs-per-step",
            BudgetKey::GraphFragmentsPerStep => "graph-fragments-per-step",
            BudgetKey::CacheMisses => "cache-misses",
            BudgetKey::HbmPeakFraction => "hbm-peak-fraction",
        }
    }
}

/// A budget given as `KEY=N`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Budget {
    pub key: BudgetKey,
    pub limit: f64,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BudgetError {
    #[error("budget {0:?} is not KEY=N")]
    Syntax(String),
    #[error("unknown budget key {0:?} (known: {known})", known = BudgetKey::ALL.map(BudgetKey::name).join(", "))]
    UnknownKey(String),
    #[error("budget {key}: {value:?} is not a non-negative number")]
    BadLimit { key: String, value: String },
}

impl std::str::FromStr for Budget {
    type Err = BudgetError;
    fn from_str(s: &str) -> Result<Budget, BudgetError> {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| BudgetError::Syntax(s.to_string()))?;
        let key = BudgetKey::ALL
            .into_iter()
            .find(|b| b.name() == k.trim())
            .ok_or_else(|| BudgetError::UnknownKey(k.to_string()))?;
        let limit: f64 = v
            .trim()
            .parse()
            .ok()
            .filter(|l: &f64| l.is_finite() && *l >= 0.0)
            .ok_or_else(|| BudgetError::BadLimit {
                key: k.to_string(),
                value: v.to_string(),
            })?;
        Ok(Budget { key, limit })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BudgetResult {
    pub name: String,
    pub limit: f64,
    /// Absent when the trace cannot tell (no memory limit reported).
    pub actual: Option<f64>,
    pub ok: bool,
    /// `ok`, `exceeded` or `unknown`.
    pub status: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BaselineResult {
    pub regressions: Vec<String>,
    pub improvements: Vec<String>,
    pub ok: bool,
}

/// One input: a display path and its decoded trace.
pub struct Input<'a> {
    pub path: String,
    pub trace: &'a Trace,
}

/// Analyses traces: one run, successive runs of a program, or the hosts of one job.
pub fn analyze(inputs: &[Input<'_>]) -> Report {
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    let start = |i: usize| {
        inputs[i]
            .trace
            .manifest
            .as_ref()
            .map_or(0, |m| m.start_wall_ns)
    };
    let job = |i: usize| {
        // A segment of a merged file carries the job the merge put it in.
        let t = inputs[i].trace;
        t.segment
            .as_ref()
            .map(|s| s.job_id.clone())
            .or_else(|| t.manifest.as_ref().map(|m| m.job_id.clone()))
            .unwrap_or_default()
    };
    let shared_job_id =
        inputs.len() > 1 && !job(0).is_empty() && (0..inputs.len()).all(|i| job(i) == job(0));
    let all: Vec<&Trace> = inputs.iter().map(|i| i.trace).collect();
    // Without a job id (a plain TPU VM pod sets none), the PJRT client still tells the hosts of
    // one job apart from successive runs.
    let pjrt_job = !shared_job_id && hosts::one_pjrt_job(&all);
    let multi_host = shared_job_id || pjrt_job;
    order.sort_by_key(|&i| {
        if multi_host {
            (u64::from(hosts::process_index(inputs[i].trace)), start(i))
        } else {
            (start(i), 0)
        }
    });
    let traces: Vec<&Trace> = order.iter().map(|&i| inputs[i].trace).collect();
    let runs = match (inputs.len(), multi_host) {
        (1, _) => RunsInfo {
            assumed: "single_run".into(),
            note: "one trace".into(),
        },
        (n, true) if pjrt_job => RunsInfo {
            assumed: "multi_host_job".into(),
            note: format!(
                "{n} traces are processes of one multi-process PJRT client, running at the same time: hosts of one job, ordered by process index"
            ),
        },
        (n, true) => RunsInfo {
            assumed: "multi_host_job".into(),
            note: format!(
                "{n} traces share job id {:?}: hosts of one job, ordered by process index",
                job(0)
            ),
        },
        (n, false) => RunsInfo {
            assumed: "successive_runs".into(),
            note: format!(
                "{n} traces without a shared job id: successive runs of one program, ordered by start time"
            ),
        },
    };

    let mut report = Report {
        tpuscope_report: REPORT_VERSION,
        traces: Vec::new(),
        runs,
        warnings: Vec::new(),
        compiles: CompileSummary::default(),
        recompiles: Vec::new(),
        phases: Vec::new(),
        syncs: Vec::new(),
        runtime_waits: 0,
        steps: StepsReport::default(),
        hbm: Vec::new(),
        compiled_memory: Vec::new(),
        oom: None,
        cache: CacheReport::default(),
        errors: Vec::new(),
        findings: Vec::new(),
        budgets: Vec::new(),
        baseline: None,
        hosts: None,
        dynamo: None,
    };

    let mut all_compiles = Vec::new();
    let mut all_syncs: Vec<SyncView> = Vec::new();
    let mut all_steps: Vec<Steps> = Vec::new();
    let mut errors: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (run, (&i, trace)) in order.iter().zip(&traces).enumerate() {
        report.traces.push(trace_info(run, &inputs[i].path, trace));
        warnings(&mut report.warnings, &inputs[i].path, trace);
        let mut compiles = families::compiles(trace, run);
        let (syncs, waits) = syncs::host_syncs(trace, run);
        report.runtime_waits += waits;
        let sync_times: Vec<(u64, u64)> = syncs.iter().map(|s| (s.t_ns, s.stall_ns)).collect();
        let steps = steps::steps(trace, &sync_times);
        if matches!(steps.source, StepSource::Marker { .. }) {
            // Markers are recorded by the thread that compiles (torch_xla compiles inside its
            // `sync()`), while launches may come later from a worker thread: steps cut at
            // markers place a compile by its own time.
            for c in &mut compiles {
                c.at_ns = c.t_ns;
            }
        }
        report.hbm.extend(hbm::devices(trace, run, &steps));
        report.compiled_memory.extend(hbm::executables(trace, run));
        if report.oom.is_none() {
            report.oom = hbm::oom(trace, run);
        }
        collect_errors(trace, &mut errors);
        let fams = families::families(&compiles);
        let first_family = report.recompiles.len();
        report_families(&mut report, trace, &compiles, &fams, &steps);
        merge_co_recompiles(&mut report.recompiles[first_family..]);
        let recompile_steps = recompile_steps(&report.recompiles[first_family..]);
        report
            .phases
            .extend(phase_reports(run, &compiles, &steps, &recompile_steps));
        all_syncs.extend(syncs);
        all_steps.push(steps);
        all_compiles.push(compiles);
    }
    report
        .compiled_memory
        .sort_by_key(|e| std::cmp::Reverse(e.peak_bytes));
    report.compiled_memory.truncate(20);
    report.errors = errors
        .into_iter()
        .map(|((api, message), count)| ErrorSummary {
            api,
            message,
            count,
        })
        .collect();
    let total_steps: usize = all_steps.iter().map(|s| s.steps.len()).sum();
    let torch = report
        .traces
        .first()
        .is_some_and(|t| t.frontend.starts_with("torch"));
    report.syncs = syncs::group(&all_syncs, total_steps, torch, |run, t| {
        all_steps.get(run).and_then(|s| s.steady_step_at(t))
    });
    report.steps = steps_report(&traces, &all_steps);
    report.cache = cache::cache(&traces, &all_compiles, !multi_host);
    summarize_compiles(&mut report, &all_compiles);
    let frontend = report
        .traces
        .first()
        .map(|t| t.frontend.clone())
        .unwrap_or_default();
    report.findings = findings(&report, &frontend, &all_steps);
    if multi_host {
        let h = hosts::hosts(&traces, &all_compiles, &all_steps, &all_syncs);
        if let Some(why) = &h.not_one_job {
            report.warnings.push(format!(
                "these hosts may not be one job ({why}): no cross-host findings are made"
            ));
            report
                .runs
                .note
                .push_str(", but they may not be one job (see the warnings)");
        }
        report.findings.extend(hosts::findings(&h));
        report.hosts = Some(h);
    }
    report
}

fn trace_info(run: usize, path: &str, trace: &Trace) -> TraceInfo {
    let m = trace.manifest.clone().unwrap_or_default();
    TraceInfo {
        run,
        path: path.to_string(),
        pid: m.pid,
        host: m.host.clone(),
        frontend: frontend_of(trace),
        command: m.command_line.join(" "),
        plugin: m.plugin_path.clone(),
        pjrt_api: format!("{}.{}", m.pjrt_api_major, m.pjrt_api_minor),
        start_wall_ns: m.start_wall_ns,
        job_id: m.job_id.clone(),
        process_index: hosts::process_index(trace),
        completeness: match trace.completeness {
            Completeness::Complete => "complete".into(),
            Completeness::NoEndRecord { .. } => "no_end_record".into(),
            Completeness::Cut { .. } => "cut".into(),
        },
        events: trace.events.len() as u64,
        recording_stopped: recording_stopped(trace),
        dropped_events: trace.end.as_ref().map_or_else(
            || {
                trace
                    .events
                    .iter()
                    .filter_map(|r| match r {
                        tpuscope_core::Record::Dropped(d) => Some(d.total),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(0)
            },
            |e| e.dropped_total,
        ),
    }
}

/// The frontend the agent named, else the one whose package the process loaded.
pub fn frontend_of(trace: &Trace) -> String {
    trace
        .manifest
        .as_ref()
        .map(manifest_frontend)
        .unwrap_or_default()
}

/// [`frontend_of`] for a manifest alone (what `tpuscope ps` reads from a live stream).
pub fn manifest_frontend(m: &tpuscope_core::event::Manifest) -> String {
    if !m.frontend.is_empty() {
        return m.frontend.clone();
    }
    let has = |p: &str| m.package_versions.iter().any(|kv| kv.key == p);
    ["torch_tpu", "torch_xla", "jax"]
        .into_iter()
        .find(|p| has(p))
        .unwrap_or("")
        .to_string()
}

fn warnings(out: &mut Vec<String>, path: &str, trace: &Trace) {
    match trace.completeness {
        Completeness::Cut { offset, file_len } => out.push(format!(
            "{path}: trace cut at byte {offset} of {file_len}: the report covers what it holds"
        )),
        Completeness::NoEndRecord { .. } => out.push(format!(
            "{path}: no end record (the process died or is still running): the report covers what it holds"
        )),
        Completeness::Complete => {}
    }
    if !trace.damage.is_empty() {
        out.push(format!(
            "{path}: {} damaged region(s) skipped",
            trace.damage.len()
        ));
    }
    if let Some(s) = recording_stopped(trace) {
        out.push(format!("{path}: {}", stopped_line(&s)));
    }
    if trace.unknown_records > 0 {
        out.push(format!(
            "{path}: {} record(s) of kinds newer than this tpuscope were skipped",
            trace.unknown_records
        ));
    }
    let dropped = trace.end.as_ref().map_or(0, |e| e.dropped_total);
    if dropped > 0 {
        out.push(format!(
            "{path}: the collector dropped {dropped} events under load: counts are lower bounds"
        ));
    }
}

fn collect_errors(trace: &Trace, out: &mut BTreeMap<(String, String), u64>) {
    use tpuscope_core::Record;
    for r in &trace.events {
        let (api, msg) = match r {
            // A failed compile also writes an Error record: count it once, there.
            Record::Error(e) => (e.api.clone(), e.message.clone()),
            _ => continue,
        };
        let first_line = msg.lines().next().unwrap_or("").chars().take(300).collect();
        *out.entry((api, first_line)).or_default() += 1;
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn report_families(
    report: &mut Report,
    trace: &Trace,
    compiles: &[CompileView],
    fams: &[Family],
    steps: &Steps,
) {
    let t0 = trace.manifest.as_ref().map_or(0, |m| m.start_mono_ns);
    let frontend = frontend_of(trace);
    for f in fams {
        report.compiles.families += 1;
        if f.members.len() < 2 {
            continue;
        }
        // What the recompiles that matter (those in the steady state) say, rather than the
        // loop's warm-up members.
        let steady_cause =
            f.cause_among(|m| m.against.is_some() && steady(steps, compiles[m.compile].at_ns));
        let Some(cause) = steady_cause.or_else(|| f.cause()) else {
            continue;
        };
        let pos = |compile: usize| f.members.iter().position(|m| m.compile == compile);
        let members: Vec<MemberReport> = f
            .members
            .iter()
            .map(|m| {
                let c = &compiles[m.compile];
                MemberReport {
                    event: c.event,
                    t_ms: ms(c.t_ns.saturating_sub(t0)),
                    compile_ms: ms(c.dur_ns),
                    executable: c.name.clone(),
                    against: m.against.and_then(pos),
                    cause: m.diff.as_ref().map(|d| d.cause),
                    diff: m.diff.clone(),
                    parameters: c
                        .program
                        .as_ref()
                        .map(|p| p.params.iter().map(|p| p.shape()).collect())
                        .unwrap_or_default(),
                    source: c.source.clone(),
                    stack: stack_lines(trace, c.stack),
                }
            })
            .collect();
        let (details, suggestion, source) = explain(f, compiles, cause, &frontend);
        let steady_state_recompiles = f
            .members
            .iter()
            .skip(1)
            .filter(|m| steady(steps, compiles[m.compile].at_ns))
            .count() as u64;
        let steady_steps = f
            .members
            .iter()
            .skip(1)
            .map(|m| compiles[m.compile].at_ns)
            .filter(|&t| steps.phase_at(t) == Some(Phase::Steady))
            .filter_map(|t| steps.step_at(t))
            .collect();
        report.recompiles.push(FamilyReport {
            graph: f.graph.clone(),
            run: f.run,
            count: f.members.len() as u64,
            cause,
            source,
            details,
            suggestion,
            compile_ms: f
                .members
                .iter()
                .map(|m| ms(compiles[m.compile].dur_ns))
                .sum(),
            steady_state_recompiles,
            finding: steady_state_recompiles > 0,
            recompiled_with: None,
            members,
            steady_steps,
        });
    }
}

/// Families of one run that recompiled in the same steps for the same cause are one problem:
/// the costliest carries the finding, the others say they came with it.
fn merge_co_recompiles(fams: &mut [FamilyReport]) {
    let near = |a: &BTreeSet<usize>, b: &BTreeSet<usize>| {
        // A step apart counts as the same step: a step's graphs compile before its launch.
        let hits = a
            .iter()
            .filter(|&&i| b.contains(&i) || b.contains(&(i + 1)) || (i > 0 && b.contains(&(i - 1))))
            .count();
        hits > 0 && hits * 2 >= a.len().min(b.len())
    };
    // The costliest carries the finding: the model's step, not a mask helper cut out of it.
    let mut order: Vec<usize> = (0..fams.len())
        .filter(|&i| fams[i].finding && !fams[i].steady_steps.is_empty())
        .collect();
    order.sort_by(|&a, &b| fams[b].compile_ms.total_cmp(&fams[a].compile_ms));
    for (k, &i) in order.iter().enumerate() {
        if fams[i].recompiled_with.is_some() {
            continue;
        }
        for &j in &order[k + 1..] {
            if fams[j].recompiled_with.is_none()
                && fams[j].cause == fams[i].cause
                && near(&fams[j].steady_steps, &fams[i].steady_steps)
            {
                fams[j].finding = false;
                fams[j].recompiled_with = Some(fams[i].graph.clone());
            }
        }
    }
}

/// True when a compile at `t` recurs while the loop runs: in the steady state, or anywhere for
/// a run without steps (nothing tells set-up from loop there).
fn steady(steps: &Steps, t: u64) -> bool {
    steps.phase_at(t).is_none_or(|p| p == Phase::Steady)
}

/// The steps in which each family of a run recompiled in the steady state, widened by one: a
/// graph compiles before the launch that starts its step, so the ops that come with it compile
/// in that step or the one before.
fn recompile_steps(fams: &[FamilyReport]) -> Vec<(String, BTreeSet<usize>)> {
    fams.iter()
        .filter(|f| !f.steady_steps.is_empty())
        .map(|f| {
            let at = f.steady_steps.iter().flat_map(|&i| [i, i + 1]).collect();
            (f.graph.clone(), at)
        })
        .collect()
}

/// At most this many op sites are listed per phase; the counts cover them all.
const MAX_OP_SITES: usize = 10;

/// Set-up and tail compiles are a finding only past both: on a real job a minute of init
/// compiles is noise next to hours of training, but half an hour of it is not.
const SETUP_COMPILE_FINDING_MS: f64 = 30_000.0;
const SETUP_COMPILE_FINDING_SHARE: f64 = 0.2;

/// An op site in the steady state is a finding when it keeps compiling: at least this many
/// compiles, in at least this many distinct steps.
const OP_SITE_FINDING_COMPILES: u64 = 3;
const OP_SITE_FINDING_STEPS: u32 = 3;

/// The phases of one run with their compiles, eager op compiles grouped by the user's line.
fn phase_reports(
    run: usize,
    compiles: &[CompileView],
    steps: &Steps,
    recompile_steps: &[(String, BTreeSet<usize>)],
) -> Vec<PhaseReport> {
    let Some(p) = steps.phases else {
        return Vec::new();
    };
    let total = p.run_end_ns.saturating_sub(p.run_start_ns).max(1);
    let spans = [
        (Phase::Setup, p.run_start_ns, p.steady_start_ns),
        (Phase::Steady, p.steady_start_ns, p.loop_end_ns),
        (Phase::Tail, p.loop_end_ns, p.run_end_ns),
    ];
    let warmup = u64::from(p.warmup_steps);
    spans
        .into_iter()
        .map(|(phase, start, end)| {
            let in_phase: Vec<&CompileView> = compiles
                .iter()
                .filter(|c| p.phase_at(c.at_ns) == phase)
                .collect();
            type Acc = (
                u64,
                u64,
                BTreeMap<SourceLoc, u32>,
                BTreeSet<String>,
                BTreeSet<usize>,
            );
            let mut sites: BTreeMap<Option<SourceLoc>, Acc> = BTreeMap::new();
            for c in in_phase.iter().filter(|c| c.origin == Origin::Op) {
                let a = sites.entry(c.source.clone()).or_default();
                a.0 += 1;
                a.1 += c.dur_ns;
                if let Some(l) = &c.library {
                    *a.2.entry(l.clone()).or_default() += 1;
                }
                if a.3.len() < 8 {
                    a.3.insert(c.name.clone());
                }
                if let Some(i) = steps.step_at(c.at_ns) {
                    a.4.insert(i);
                }
            }
            let mut op_sites: Vec<OpSite> = sites
                .into_iter()
                .map(|(source, (n, dur, libs, ops, in_steps))| OpSite {
                    // Ops that compiled again in the steps where a graph recompiled did so for
                    // the same new shapes: that graph's finding says it.
                    explained_by: recompile_steps
                        .iter()
                        .find(|(_, s)| {
                            !in_steps.is_empty()
                                && in_steps.intersection(s).count() * 2 >= in_steps.len()
                        })
                        .map(|(g, _)| g.clone()),
                    source,
                    library: libs.iter().max_by_key(|(_, k)| **k).map(|(l, _)| l.clone()),
                    compiles: n,
                    compile_ms: ms(dur),
                    ops: ops.into_iter().collect(),
                    steps: u32::try_from(in_steps.len()).unwrap_or(u32::MAX),
                })
                .collect();
            op_sites.sort_by(|a, b| {
                b.compile_ms
                    .total_cmp(&a.compile_ms)
                    .then(a.source.cmp(&b.source))
            });
            let op_compiles = op_sites.iter().map(|o| o.compiles).sum();
            op_sites.truncate(MAX_OP_SITES);
            let n_steps = steps.steps.len() as u64;
            PhaseReport {
                run,
                phase,
                start_ms: ms(start.saturating_sub(p.run_start_ns)),
                dur_ms: ms(end.saturating_sub(start)),
                share: end.saturating_sub(start) as f64 / total as f64,
                steps: match phase {
                    Phase::Setup => warmup.min(n_steps),
                    Phase::Steady => n_steps.saturating_sub(warmup),
                    Phase::Tail => 0,
                },
                compiles: in_phase.len() as u64,
                compile_ms: in_phase.iter().map(|c| ms(c.dur_ns)).sum(),
                op_compiles,
                op_sites,
            }
        })
        .collect()
}

/// The family's one-line details, its fix, and the line a user would edit.
fn explain(
    f: &Family,
    compiles: &[CompileView],
    cause: Cause,
    frontend: &str,
) -> (String, String, Option<SourceLoc>) {
    let diffs: Vec<&Diff> = f
        .members
        .iter()
        .filter_map(|m| m.diff.as_ref())
        .filter(|d| d.cause == cause)
        .collect();
    // Where the recompiles were asked for: a graph first compiled in the loop and compiled
    // again for an evaluation names the evaluation's line, not the loop's.
    let call_site = most_common(
        f.members
            .iter()
            .skip(1)
            .filter_map(|m| compiles[m.compile].source.clone()),
    )
    .or_else(|| compiles[f.members[0].compile].source.clone());
    let n = f.members.len();
    let torch = frontend.starts_with("torch");
    match cause {
        Cause::ConstantChanged => {
            let first = diffs.iter().find_map(|d| d.constants.first());
            let op_source = diffs
                .iter()
                .flat_map(|d| &d.constants)
                .find_map(|c| c.source.clone());
            // Where the traced function was called, when that is another line than the op's.
            let called = match (&op_source, &call_site) {
                (Some(o), Some(c)) if o != c => {
                    let f = f.graph.strip_prefix("jit_").unwrap_or(&f.graph);
                    format!(", in `{f}` called at {c}")
                }
                _ => String::new(),
            };
            let source = op_source.or(call_site);
            let Some(first) = first else {
                return (String::new(), String::new(), source);
            };
            // The values the first changed constant took, in compile order.
            let mut values = vec![first.old.clone()];
            for d in &diffs {
                if let Some(c) = d
                    .constants
                    .iter()
                    .find(|c| c.what == first.what && c.op == first.op && c.dtype == first.dtype)
                    && values.last() != Some(&c.new)
                {
                    values.push(c.new.clone());
                }
            }
            let shown = if values.len() > 6 {
                format!(
                    "{} → … → {} ({} values)",
                    values[..3].join(" → "),
                    values[values.len() - 1],
                    values.len()
                )
            } else {
                values.join(" → ")
            };
            let used = if first.used_by.is_empty() {
                String::new()
            } else {
                format!(", used by {}", first.used_by.join(", "))
            };
            let at = source
                .as_ref()
                .map(|s| format!(" at {s}"))
                .unwrap_or_default();
            let details = if first.what == "argument became literal" {
                format!(
                    "a scalar argument became the constant {} {}{used}{at}{called}",
                    first.dtype, first.new
                )
            } else {
                format!(
                    "{} of {} {} changed: {shown}{used}{at}{called}",
                    first.what, first.op, first.dtype
                )
            };
            let suggestion = match first.what.as_str() {
                "argument became literal" => format!(
                    "a Python scalar{at} was passed as data until it took the value {}, which the frontend bakes into the graph as a constant ({n} graphs so far; torch_xla does this for 0 and 1): keep it a device tensor (`torch.tensor(value, device=device)`), or keep it off those values (a warmup factor that ends at exactly 1.0)",
                    first.new
                ),
                "literal" if torch => format!(
                    "the Python scalar{at} is baked into the graph as {} {} ({n} graphs so far): keep it on the device as a tensor (e.g. `torch.tensor(value, device=device)`; for optimizers `capturable=True` / a tensor LR) so one graph serves every value",
                    first.dtype, shown
                ),
                "literal" => format!(
                    "the Python scalar{at} is baked into the program as {} {} ({n} compiles so far): pass it as an argument (`jnp.asarray(value)`) instead of closing over it, so one compiled program serves every value",
                    first.dtype, shown
                ),
                "slice bounds" | "dynamic-slice sizes" | "gather slice sizes" if torch => format!(
                    "a Python int index{at} becomes static slice bounds ({shown}): index with a device tensor (`x.index_select(dim, torch.tensor([i], device=device))`) so the index is data, not graph"
                ),
                "slice bounds" | "dynamic-slice sizes" | "gather slice sizes" => format!(
                    "a Python int index{at} becomes static slice bounds ({shown}): use `jax.lax.dynamic_slice` / `jnp.take` with a traced index"
                ),
                _ => format!(
                    "a size or attribute computed from a Python value{at} changes ({shown}): make it a fixed size, or pass the value as an array"
                ),
            };
            (details, suggestion, source)
        }
        Cause::ShapeChanged | Cause::DtypeChanged => {
            shape_explanation(f, compiles, &diffs, cause, call_site)
        }
        Cause::StructureChanged => {
            let mut added: BTreeMap<String, u32> = BTreeMap::new();
            let mut removed: BTreeMap<String, u32> = BTreeMap::new();
            for d in &diffs {
                for (k, v) in &d.ops_added {
                    *added.entry(k.clone()).or_default() += v;
                }
                for (k, v) in &d.ops_removed {
                    *removed.entry(k.clone()).or_default() += v;
                }
            }
            let variants: BTreeSet<u64> = f
                .members
                .iter()
                .map(|m| compiles[m.compile].same_program_key)
                .collect();
            let details = format!(
                "{} variants of the graph over {n} compiles; {}",
                variants.len(),
                diffs
                    .first()
                    .map(|d| d.summary.clone())
                    .unwrap_or_default()
            );
            // The line of the ops that differ, when the HLO says; else where the graph is cut.
            let ops_source = most_common(diffs.iter().filter_map(|d| d.ops_source.clone()));
            let at = match (&ops_source, &call_site) {
                (Some(o), Some(c)) if o != c => format!(" at {o} (graph cut at {c})"),
                (Some(o), _) => format!(" at {o}"),
                (None, Some(c)) => format!(" reaching {c}"),
                (None, None) => String::new(),
            };
            let call_site = ops_source.or(call_site);
            let fix = if torch {
                "compute both branches with `torch.where`, or keep data-dependent `if`s and optional inputs out of the step"
            } else {
                "use `jax.lax.cond`/`jnp.where` instead of Python branches on values, and always pass the same set of inputs"
            };
            (
                details,
                format!(
                    "Python control flow or optional inputs{at} trace {} different graphs: {fix}",
                    variants.len()
                ),
                call_site,
            )
        }
        Cause::OptionsChanged => (
            format!("the same program compiled {n} times with different compile options"),
            "keep compile options (donation, shardings, device assignment, compiler flags) the same between calls".into(),
            call_site,
        ),
        Cause::IdenticalProgram => {
            let at = call_site
                .as_ref()
                .map(|s| format!(" at {s}"))
                .unwrap_or_default();
            let fix = if torch {
                "the graph cache missed: avoid recreating modules/optimizers per step, and enable the persistent cache (`torch_xla.runtime.initialize_cache`)"
            } else {
                "the jitted function is re-created (a `jax.jit` or closure inside the loop): jit it once outside the loop, or enable the persistent compilation cache"
            };
            (
                format!("the same program compiled {n} times{at}"),
                format!("{fix} — {n} compiles where one would do"),
                call_site,
            )
        }
        Cause::Unknown => (
            diffs
                .first()
                .map(|d| d.summary.clone())
                .unwrap_or_default(),
            "the programs differ in a way tpuscope does not classify: compare the members' HLO with `tpuscope view`".into(),
            call_site,
        ),
    }
}

fn shape_explanation(
    f: &Family,
    compiles: &[CompileView],
    diffs: &[&Diff],
    cause: Cause,
    call_site: Option<SourceLoc>,
) -> (String, String, Option<SourceLoc>) {
    // Every (parameter, dim) that changed in some member, with every size it took.
    let mut churn: BTreeMap<(i64, usize), (Option<String>, BTreeSet<i64>)> = BTreeMap::new();
    let mut dtype_changes: BTreeMap<i64, (Option<String>, BTreeSet<String>)> = BTreeMap::new();
    for d in diffs {
        for p in &d.params {
            for &dim in &p.dims {
                churn
                    .entry((p.number, dim))
                    .or_insert((p.name.clone(), BTreeSet::new()));
            }
            if p.dtype_changed {
                dtype_changes
                    .entry(p.number)
                    .or_insert((p.name.clone(), BTreeSet::new()));
            }
        }
    }
    for m in &f.members {
        let Some(p) = &compiles[m.compile].program else {
            continue;
        };
        for ((num, dim), (_, sizes)) in churn.iter_mut() {
            if let Some(param) = p.params.iter().find(|q| q.number == *num)
                && let Some(&s) = param.dims.get(*dim)
            {
                sizes.insert(s);
            }
        }
        for (num, (_, types)) in dtype_changes.iter_mut() {
            if let Some(param) = p.params.iter().find(|q| q.number == *num) {
                types.insert(param.dtype.clone());
            }
        }
    }
    let n = f.members.len();
    let at = call_site
        .as_ref()
        .map(|s| format!(" called at {s}"))
        .unwrap_or_default();
    if cause == Cause::DtypeChanged || churn.is_empty() {
        let parts: Vec<String> = dtype_changes
            .iter()
            .map(|(num, (name, types))| {
                format!(
                    "{} took dtypes {}",
                    arg_label(*num, name.as_deref()),
                    types.iter().cloned().collect::<Vec<_>>().join(", ")
                )
            })
            .collect();
        return (
            parts.join("; "),
            format!(
                "cast the inputs to one dtype before the call{at} ({n} compiles for {} dtypes)",
                dtype_changes.values().map(|v| v.1.len()).max().unwrap_or(0)
            ),
            call_site,
        );
    }
    // Arguments whose same dim took the same sizes are one change (a batch or sequence size
    // shared by many inputs): said once.
    /// (dim, the sizes it took) → the arguments whose that dim took them.
    type Change = ((usize, Vec<i64>), Vec<String>);
    let mut changes: Vec<Change> = Vec::new();
    for ((num, dim), (name, sizes)) in churn.iter().filter(|(_, (_, s))| s.len() > 1) {
        let key = (*dim, sizes.iter().copied().collect::<Vec<i64>>());
        let label = arg_label(*num, name.as_deref());
        match changes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, labels)) => labels.push(label),
            None => changes.push((key, vec![label])),
        }
    }
    // The change most arguments share first: that is the size that churns.
    changes.sort_by_key(|(_, labels)| std::cmp::Reverse(labels.len()));
    let labels_of = |labels: &[String]| match labels {
        [one] => format!("argument {one}"),
        many if many.len() <= 4 => format!("arguments {}", many.join(", ")),
        many => format!(
            "arguments {} and {} more",
            many[..3].join(", "),
            many.len() - 3
        ),
    };
    const SHOWN: usize = 3;
    let mut details = Vec::new();
    let mut fixes = Vec::new();
    for ((dim, v), labels) in changes.iter().take(SHOWN) {
        let who = labels_of(labels);
        details.push(format!(
            "{who} dim {dim} took {} sizes {}",
            v.len(),
            suggest::set(v)
        ));
        if let Some(b) = suggest::buckets(v) {
            let how = if b.multiple > 0 {
                format!(" (multiples of {})", b.multiple)
            } else {
                String::new()
            };
            fixes.push(format!(
                "pad {} dim {dim} up to {}{how}: {} graph{} instead of {}",
                who.trim_start_matches("argument ").trim_start_matches("s "),
                suggest::set(&b.sizes),
                b.sizes.len(),
                if b.sizes.len() == 1 { "" } else { "s" },
                v.len()
            ));
        }
    }
    if changes.len() > SHOWN {
        details.push(format!("and {} more changes", changes.len() - SHOWN));
    }
    let fix = if fixes.is_empty() {
        format!("make the shapes{at} static (pad or bucket them)")
    } else {
        format!("{}{at}", fixes.join("; "))
    };
    (details.join("; "), fix, call_site)
}

fn arg_label(num: i64, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("#{num} `{n}`"),
        None => format!("#{num}"),
    }
}

fn most_common<T: Ord + Clone>(items: impl Iterator<Item = T>) -> Option<T> {
    let mut counts: BTreeMap<T, usize> = BTreeMap::new();
    for i in items {
        *counts.entry(i).or_default() += 1;
    }
    let best = counts.values().copied().max()?;
    counts.into_iter().find(|(_, n)| *n == best).map(|(t, _)| t)
}

fn steps_report(traces: &[&Trace], all: &[Steps]) -> StepsReport {
    let mut r = StepsReport {
        detected_by: "none".into(),
        ..StepsReport::default()
    };
    let mut fragments = Vec::new();
    let mut syncs = Vec::new();
    for (run, (steps, trace)) in all.iter().zip(traces).enumerate() {
        let t0 = trace.manifest.as_ref().map_or(0, |m| m.start_mono_ns);
        if run == 0 || r.detected_by == "none" {
            r.detected_by = match &steps.source {
                StepSource::Marker { marker } => format!("marker {marker}"),
                StepSource::DominantExecutable { executable } => {
                    format!("dominant executable {executable}")
                }
                StepSource::None => "none".into(),
            };
        }
        r.count += steps.steps.len() as u64;
        r.graph_fragments_per_step = r
            .graph_fragments_per_step
            .max(u64::from(steps.worst_steady(|s| s.executes).unwrap_or(0)));
        r.syncs_per_step = r
            .syncs_per_step
            .max(u64::from(steps.worst_steady(|s| s.syncs).unwrap_or(0)));
        for s in steps.steady() {
            r.compiles_after_first_step += u64::from(s.compiles);
            fragments.push(f64::from(s.executes));
            syncs.push(f64::from(s.syncs));
        }
        let first_steady = steps.steps.len() - steps.steady().len();
        for (i, s) in steps.steps.iter().enumerate() {
            if r.per_step.len() >= 10_000 {
                break;
            }
            r.per_step.push(StepRow {
                run,
                number: s.number,
                t_ms: ms(s.start_ns.saturating_sub(t0)),
                dur_ms: ms(s.end_ns.saturating_sub(s.start_ns)),
                executes: s.executes,
                distinct_executables: s.distinct_executables,
                syncs: s.syncs,
                compiles: s.compiles,
                stall_ms: ms(s.stall_ns),
                steady: i >= first_steady,
            });
        }
    }
    let mean = |v: &[f64]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    r.mean_graph_fragments_per_step = mean(&fragments);
    r.mean_syncs_per_step = mean(&syncs);
    r
}

fn summarize_compiles(report: &mut Report, all: &[Vec<CompileView>]) {
    let c = &mut report.compiles;
    for list in all {
        c.total += list.len() as u64;
        c.failed += list.iter().filter(|x| x.failed).count() as u64;
        c.compile_ms += list.iter().map(|x| ms(x.dur_ns)).sum::<f64>();
    }
    // Families that only compiled during warm-up are listed, but not counted as recompiles.
    let counted = report
        .recompiles
        .iter()
        .filter(|f| f.finding || f.recompiled_with.is_some());
    c.recompile_families = counted.clone().count() as u64;
    c.recompiles = counted.clone().map(|f| f.count - 1).sum();
    c.warmup_recompiles = report
        .recompiles
        .iter()
        .filter(|f| !f.finding && f.recompiled_with.is_none())
        .map(|f| f.count - 1)
        .sum();
    for f in counted {
        *c.by_cause.entry(f.cause.as_str().to_string()).or_default() += f.count - 1;
    }
    c.op_compiles = all
        .iter()
        .flatten()
        .filter(|x| x.origin == Origin::Op)
        .count() as u64;
    let setup = report.phases.iter().filter(|p| p.phase == Phase::Setup);
    c.setup_compile_ms = setup.clone().map(|p| p.compile_ms).sum();
    let wall: f64 = report.phases.iter().map(|p| p.dur_ms).sum();
    c.setup_compile_share = if wall > 0.0 {
        c.setup_compile_ms / wall
    } else {
        0.0
    };
}

/// A sync line is a finding when it blocks in at least this share of the steady-state steps.
const SYNC_STEP_SHARE: f64 = 0.25;

fn findings(report: &Report, frontend: &str, steps: &[Steps]) -> Vec<Finding> {
    let mut out = Vec::new();
    for f in report.recompiles.iter().filter(|f| f.finding) {
        let with: Vec<&FamilyReport> = report
            .recompiles
            .iter()
            .filter(|o| o.run == f.run && o.recompiled_with.as_deref() == Some(f.graph.as_str()))
            .collect();
        let also = if with.is_empty() {
            String::new()
        } else {
            format!(
                "; with it, in the same steps: {}",
                with.iter()
                    .map(|o| format!("{} {}× ({:.0} ms)", o.graph, o.count, o.compile_ms))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        out.push(Finding {
            kind: "recompile".into(),
            title: format!(
                "{} compiled {}× ({}, {:.0} ms): {}{also}",
                f.graph, f.count, f.cause, f.compile_ms, f.details
            ),
            source: f.source.clone(),
            suggestion: f.suggestion.clone(),
        });
    }
    for p in report.phases.iter().filter(|p| p.phase == Phase::Steady) {
        for o in &p.op_sites {
            if o.compiles < OP_SITE_FINDING_COMPILES
                || o.steps < OP_SITE_FINDING_STEPS
                || o.explained_by.is_some()
            {
                continue;
            }
            let at = o
                .source
                .as_ref()
                .map(|s| format!(" at {s}"))
                .unwrap_or_default();
            let inside = o
                .library
                .as_ref()
                .map(|l| format!(" (inside {} {})", l, l.function))
                .unwrap_or_default();
            out.push(Finding {
                kind: "recompile".into(),
                title: format!(
                    "eager ops{at}{inside} kept compiling in the steady state: {} compiles in {} steps ({:.0} ms): {}",
                    o.compiles,
                    o.steps,
                    o.compile_ms,
                    o.ops.join(", ")
                ),
                source: o.source.clone(),
                suggestion: if frontend.starts_with("jax") {
                    format!("each new shape compiles these ops again: move the code{at} into the jitted step (or `jax.jit` the function that holds it) and keep its shapes fixed")
                } else {
                    format!("each new shape compiles these ops again: keep the shapes{at} fixed (pad or bucket them)")
                },
            });
        }
    }
    let outside: f64 = report
        .phases
        .iter()
        .filter(|p| p.phase != Phase::Steady)
        .map(|p| p.compile_ms)
        .sum();
    let wall: f64 = report.phases.iter().map(|p| p.dur_ms).sum();
    if outside >= SETUP_COMPILE_FINDING_MS
        && wall > 0.0
        && outside / wall >= SETUP_COMPILE_FINDING_SHARE
    {
        let ops: u64 = report
            .phases
            .iter()
            .filter(|p| p.phase != Phase::Steady)
            .map(|p| p.op_compiles)
            .sum();
        let op_part = if ops > 0 {
            if frontend.starts_with("jax") {
                format!(
                    "; {ops} of them are eager ops: `jax.jit` the set-up code (e.g. `jax.jit(model.init)`) so one program replaces them"
                )
            } else {
                format!("; {ops} of them are eager ops compiled one by one")
            }
        } else {
            String::new()
        };
        out.push(Finding {
            kind: "setup_compile".into(),
            title: format!(
                "compiling outside the training loop takes {:.1} s, {:.0}% of the run (set-up {:.1} s, tail {:.1} s)",
                outside / 1e3,
                outside / wall * 100.0,
                report.compiles.setup_compile_ms / 1e3,
                (outside - report.compiles.setup_compile_ms) / 1e3
            ),
            source: None,
            suggestion: format!(
                "every start pays this again: enable the persistent compilation cache so restarts load the programs{op_part}"
            ),
        });
    }
    let later_steps: usize = steps.iter().map(|s| s.steady().len()).sum();

    for s in &report.syncs {
        let frequent = if later_steps > 0 {
            s.count >= 2
                && f64::from(s.steps_with_sync) >= (later_steps as f64 * SYNC_STEP_SHARE).max(1.0)
        } else {
            s.count >= 3
        };
        // A wait that reads nothing (`block_until_ready`, equinox's wait after every
        // `filter_jit` call) is recorded only when it happened to block, so how often it shows
        // depends on timing; and it is most often deliberate. It is listed with its stall, never
        // a finding: the reads a value is needed for are.
        let wait_only = s.bytes == 0 && s.what.iter().all(|w| !w.contains('['));
        if !frequent || wait_only {
            continue;
        }
        let Some(src) = &s.source else { continue };
        let per_step = s
            .per_step
            .map(|p| format!(", {p:.1} per step"))
            .unwrap_or_default();
        out.push(Finding {
            kind: "sync".into(),
            title: match &s.library {
                Some(lib) => format!(
                    "host sync inside {} (`{}` at {lib}) called from {src}: {}× ({:.3} ms stalled{per_step})",
                    syncs::library_package(&lib.file),
                    lib.function,
                    s.count,
                    s.stall_ms
                ),
                None => format!(
                    "host sync at {src}: {}× ({:.3} ms stalled{per_step})",
                    s.count, s.stall_ms
                ),
            },
            source: Some(src.clone()),
            suggestion: s.suggestion.clone(),
        });
    }
    let c = &report.cache;
    // One finding per pair of runs, naming the graphs.
    let mut pairs: BTreeMap<(usize, usize), (Vec<&str>, u64)> = BTreeMap::new();
    for s in &c.stored_but_recompiled {
        let e = pairs
            .entry((s.stored_in_run, s.recompiled_in_run))
            .or_insert((Vec::new(), s.loads_attempted_in_run));
        if !e.0.contains(&s.graph.as_str()) {
            e.0.push(&s.graph);
        }
    }
    for ((stored, again), (graphs, attempts)) in pairs {
        let listed = if graphs.len() > 4 {
            format!("{} and {} more", graphs[..4].join(", "), graphs.len() - 4)
        } else {
            graphs.join(", ")
        };
        let why = if attempts == 0 {
            format!(
                "run {again} never asked the plugin to load anything: the frontend rejected or skipped the cached entries before PJRT"
            )
        } else {
            format!("run {again} tried {attempts} load(s), but compiled these anyway")
        };
        let suggestion = match (frontend, attempts) {
            (f, 0) if f.starts_with("torch_xla") => "torch_xla 2.9 fails to deserialize its own cache entries through the PJRT C API (it logs `Deserializing serialized executable not supported`; pytorch/xla#9094): the cache only costs write time here — disable it, or use a torch_xla/plugin pair that deserializes".to_string(),
            (_, 0) => "check that run 2 points at the same cache directory, with the same compile options and versions, and that the frontend's cache is enabled before the first compile".to_string(),
            _ => "compare the failed loads' messages (deserialize failures) and keep frontend, plugin and compile options identical between runs".to_string(),
        };
        out.push(Finding {
            kind: "cache".into(),
            title: format!(
                "cache written but never read back: {} graph(s) stored in run {stored} were compiled again in run {again} ({listed}); {why}",
                graphs.len()
            ),
            source: None,
            suggestion,
        });
    }
    for fl in &c.failures {
        out.push(Finding {
            kind: "cache".into(),
            title: format!(
                "{}× persistent cache entry failed to load: {}",
                fl.count, fl.message
            ),
            source: None,
            suggestion: "the cache is written but cannot be read back on this plugin/version: every restart recompiles; fix the plugin version or disable the cache to save the write time".into(),
        });
    }
    if let Some(o) = &report.oom {
        out.push(Finding {
            kind: "oom".into(),
            title: format!("out of device memory at {:.1} ms in {}: {}", o.t_ms, o.api, o.message.lines().next().unwrap_or("")),
            source: None,
            suggestion: match o.largest_executables.first() {
                Some(e) => format!(
                    "the largest executable is {} (peak {} MiB, temp {} MiB): shard it, rematerialize, or lower the batch size",
                    e.graph,
                    e.peak_bytes / (1 << 20),
                    e.temp_bytes / (1 << 20)
                ),
                None => "lower the batch size or shard the model".into(),
            },
        });
    }
    for d in &report.hbm {
        if let (Some(g), Some(limit)) = (d.growth_bytes_per_step, d.limit_bytes)
            && g > 0.0
            && report.steps.count >= 5
            && g * report.steps.count as f64 > 0.05 * limit as f64
        {
            out.push(Finding {
                kind: "hbm".into(),
                title: format!(
                    "device {} memory grows {:.0} KiB per step (peak {:.1}% of the limit)",
                    d.device,
                    g / 1024.0,
                    d.peak_fraction.unwrap_or(0.0) * 100.0
                ),
                source: None,
                suggestion: "something keeps device arrays alive across steps (a growing list of losses or activations): keep Python references per step only".into(),
            });
        }
    }
    out
}

/// One line per run: `set-up 2.31 s (71%) · steady state 850 ms (62 steps) · tail 90.0 ms`;
/// empty for runs without steps.
pub fn phases_lines(report: &Report) -> Vec<String> {
    use crate::units::{duration, percent, plural};
    let mut out = Vec::new();
    for run in 0..report.traces.len() {
        let parts: Vec<String> = report
            .phases
            .iter()
            .filter(|p| p.run == run)
            .map(|p| {
                let steps = match p.phase {
                    Phase::Setup if p.steps > 0 => {
                        format!(", incl. {} of warm-up", plural(p.steps, "step", "steps"))
                    }
                    Phase::Steady => format!(", {}", plural(p.steps, "step", "steps")),
                    _ => String::new(),
                };
                format!(
                    "{} {} ({}{steps})",
                    p.phase.as_str(),
                    duration(p.dur_ms),
                    percent(p.share)
                )
            })
            .collect();
        if !parts.is_empty() {
            out.push(parts.join(" · "));
        }
    }
    out
}

/// What compiling before the steady state cost, always said (finding or not).
pub fn setup_compile_line(report: &Report) -> Option<String> {
    use crate::units::{duration, percent, plural};
    if report.phases.is_empty() {
        return None;
    }
    let setup: Vec<&PhaseReport> = report
        .phases
        .iter()
        .filter(|p| p.phase == Phase::Setup)
        .collect();
    let compiles: u64 = setup.iter().map(|p| p.compiles).sum();
    let ops: u64 = setup.iter().map(|p| p.op_compiles).sum();
    let c = &report.compiles;
    let of_which = if ops > 0 {
        format!(", {} of them eager ops", ops)
    } else {
        String::new()
    };
    Some(format!(
        "set-up compiled {} in {} ({} of the run{of_which})",
        plural(compiles, "program", "programs"),
        duration(c.setup_compile_ms),
        percent(c.setup_compile_share),
    ))
}

/// Evaluates budgets against a report.
pub fn apply_budgets(report: &mut Report, budgets: &[Budget]) {
    report.budgets = budgets
        .iter()
        .map(|b| {
            let actual = match b.key {
                BudgetKey::Compiles => Some(report.compiles.total as f64),
                BudgetKey::Recompiles => Some(report.compiles.recompiles as f64),
                BudgetKey::SyncsPerStep => Some(report.steps.syncs_per_step as f64),
                BudgetKey::GraphFragmentsPerStep => {
                    Some(report.steps.graph_fragments_per_step as f64)
                }
                BudgetKey::CacheMisses => Some(report.cache.recompiled_same_program as f64),
                BudgetKey::HbmPeakFraction => report
                    .hbm
                    .iter()
                    .filter_map(|d| d.peak_fraction)
                    .max_by(f64::total_cmp),
            };
            let (ok, status) = match actual {
                None => (true, "unknown"),
                Some(a) if a <= b.limit => (true, "ok"),
                Some(_) => (false, "exceeded"),
            };
            BudgetResult {
                name: b.key.name().to_string(),
                limit: b.limit,
                actual,
                ok,
                status: status.to_string(),
            }
        })
        .collect();
}

/// Compares a report with an earlier JSON report: new recompile families, more syncs or graph
/// fragments per step, more cache misses are regressions.
pub fn compare_baseline(report: &mut Report, baseline: &serde_json::Value) {
    let fam_key = |graph: &str, cause: &str, file: &str| {
        format!(
            "{} {cause} {}",
            families::graph_name(graph),
            crate::source::short_path(file)
        )
    };
    let old_families: BTreeSet<String> = baseline["recompiles"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| {
                    fam_key(
                        f["graph"].as_str().unwrap_or(""),
                        f["cause"].as_str().unwrap_or(""),
                        f["source"]["file"].as_str().unwrap_or(""),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut regressions = Vec::new();
    let mut improvements = Vec::new();
    let mut new_keys = BTreeSet::new();
    for f in &report.recompiles {
        let key = fam_key(
            &f.graph,
            f.cause.as_str(),
            f.source.as_ref().map_or("", |s| s.file.as_str()),
        );
        if !old_families.contains(&key) {
            let at = f
                .source
                .as_ref()
                .map(|s| format!(" at {s}"))
                .unwrap_or_default();
            regressions.push(format!(
                "new recompile family: {} compiled {}× ({}){at}",
                f.graph, f.count, f.cause
            ));
        }
        new_keys.insert(key);
    }
    for k in old_families.difference(&new_keys) {
        improvements.push(format!("recompile family gone: {k}"));
    }
    let mut compare = |name: &str, old: Option<f64>, new: f64| {
        if let Some(old) = old {
            if new > old {
                regressions.push(format!("{name}: {old} → {new}"));
            } else if new < old {
                improvements.push(format!("{name}: {old} → {new}"));
            }
        }
    };
    compare(
        "syncs per step",
        baseline["steps"]["syncs_per_step"].as_f64(),
        report.steps.syncs_per_step as f64,
    );
    compare(
        "graph fragments per step",
        baseline["steps"]["graph_fragments_per_step"].as_f64(),
        report.steps.graph_fragments_per_step as f64,
    );
    compare(
        "cache misses",
        baseline["cache"]["recompiled_same_program"].as_f64(),
        report.cache.recompiled_same_program as f64,
    );
    report.baseline = Some(BaselineResult {
        ok: regressions.is_empty(),
        regressions,
        improvements,
    });
}

/// The exit status a CI step wants: 1 when a budget is exceeded or the baseline regressed.
pub fn failed(report: &Report) -> bool {
    report.budgets.iter().any(|b| !b.ok) || report.baseline.as_ref().is_some_and(|b| !b.ok)
}
