//! The view model: what the screen shows, built once per rebuild from the run so far (its
//! digest and latest events) and the analyzers' report. Drawing reads only this, so a frame
//! costs nothing proportional to the trace.

use std::collections::BTreeMap;

use tpuscope_analyzers::breakdown::RunBreakdown;
pub use tpuscope_analyzers::breakdown::{Category, Percentiles, TimeSplit};
pub use tpuscope_analyzers::describe::EventKind;
use tpuscope_analyzers::describe::{self, ExecutableNames};
use tpuscope_analyzers::digest::Digest;
use tpuscope_analyzers::hbm;
use tpuscope_analyzers::present;
use tpuscope_analyzers::report::{
    FamilyReport, MemberReport, Report, TraceCompleteness, TraceInfo,
};
use tpuscope_analyzers::source::short_path;
use tpuscope_analyzers::steps::executable_names_of;
use tpuscope_core::Trace;
use tpuscope_core::event::Record;

use crate::fmt;

/// Lines kept in the recent-events log.
pub const EVENT_LINES: usize = 200;
/// Samples kept per device for the sparkline.
pub const MEMORY_SAMPLES: usize = 240;
/// Steps kept for the step-time sparkline.
pub const STEP_SAMPLES: usize = 240;
/// Rows of the largest compiled executables.
const LARGEST_COMPILED: usize = 5;
/// The events log looks at most this many records from the end: a stream of identical executes
/// collapses into few lines, and the walk must stay bounded all the same. A live view keeps
/// this many of the latest records ([`Run::recent`]).
pub const EVENT_SCAN_LIMIT: usize = 20_000;

/// A run as the model reads it: the trace's tables, the digest of its events and its latest
/// events. A live view folds the stream into these and never holds the whole trace.
#[derive(Clone, Copy)]
pub struct Run<'a> {
    /// The trace's tables (strings, stacks, manifest, end); its `events` are not read.
    pub trace: &'a Trace,
    pub digest: &'a Digest,
    /// The latest event records, oldest first: the last [`EVENT_SCAN_LIMIT`] (all when fewer).
    pub recent: &'a [Record],
}

/// What the driver knows about the process being watched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RunState {
    /// Events are arriving.
    #[default]
    Live,
    /// The workload exited (or the trace is complete).
    Ended,
    /// The driver stopped reading (the workload runs on).
    Paused,
}

impl RunState {
    pub fn label(self) -> &'static str {
        match self {
            RunState::Live => "live",
            RunState::Ended => "ended",
            RunState::Paused => "paused",
        }
    }
}

/// What only the driver knows, handed to [`Model::build`].
#[derive(Clone, Debug, Default)]
pub struct Extra {
    /// Frames this viewer lost because it read too slowly (the stream's `viewer_lagged` notes
    /// are counted too; the larger wins).
    pub viewer_lost: u64,
    pub state: RunState,
    /// The workload's own output, oldest first (`tpuscope run`); empty for `attach`.
    pub output: Vec<String>,
}

/// The lines at the top of the screen.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Header {
    pub pid: u32,
    pub host: String,
    /// The command line, with the interpreter's directory and long paths shortened.
    pub command: String,
    pub frontend: String,
    /// The plugin's file with its folder.
    pub plugin: String,
    pub pjrt_api: String,
    /// `(package, version)` of jax, jaxlib, torch, torch_xla, torch_tpu, libtpu, as present.
    pub packages: Vec<(String, String)>,
    /// Since the process started: to `now_ns`, or to the last event when no time was given.
    pub uptime_ns: u64,
    pub steps_per_s: Option<f64>,
    /// Why the trace is partial and where it stops, in the report's words
    /// ([`TraceInfo::completeness_line`]); `None` when it is complete.
    pub partial: Option<String>,
    /// `tpuscope attach` began recording mid-run: the report's short wording of it.
    pub attached: Option<String>,
}

/// The live counters.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Counters {
    pub compiles: u64,
    pub failed_compiles: u64,
    pub cache_hits: u64,
    /// Recompiles in the steady state.
    pub recompiles: u64,
    pub warmup_recompiles: u64,
    pub host_syncs: u64,
    /// Waits of the runtime's own threads (no Python stack): not the user's syncs.
    pub runtime_waits: u64,
    pub steps: u64,
    /// Events the collector dropped (its `Dropped`/`End` records).
    pub dropped: u64,
    /// Frames this viewer lost.
    pub viewer_lost: u64,
    pub events: u64,
    pub errors: u64,
}

/// One entry of a Python stack, as the TUI shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackLine {
    /// `dir/file.py:33 function`.
    pub text: String,
    /// The user's own code (not a frontend, site-packages or the standard library).
    pub user: bool,
}

/// One compile of a recompile family.
#[derive(Clone, Debug, PartialEq)]
pub struct MemberView {
    pub t_ms: f64,
    pub compile_ms: f64,
    pub executable: String,
    /// `first` for the first member.
    pub cause: String,
    /// 1-based number of the member it was compared with.
    pub against: Option<usize>,
    /// One line: what changed.
    pub summary: String,
    /// Every change, one per line: constant values, dims, ops.
    pub changes: Vec<String>,
    pub parameters: Vec<String>,
    pub source: Option<String>,
    pub stack: Vec<StackLine>,
}

/// A recompile family.
#[derive(Clone, Debug, PartialEq)]
pub struct FamilyView {
    /// Stable across rebuilds while the family grows (run, graph, first compile's time).
    pub key: String,
    pub graph: String,
    pub run: usize,
    pub count: u64,
    pub cause: String,
    /// Reported as a finding (false: outside the steady state, or part of another's finding).
    pub finding: bool,
    /// Why it is not a finding (`set-up/tail`, `with jit_train_step`).
    pub not_a_finding: Option<String>,
    /// `dir/file.py:33`.
    pub source: Option<String>,
    /// `dir/file.py:33 (function)` ([`SourceLoc::with_function`]).
    ///
    /// [`SourceLoc::with_function`]: tpuscope_analyzers::SourceLoc::with_function
    pub source_label: Option<String>,
    pub function: String,
    pub details: String,
    pub suggestion: String,
    pub compile_ms: f64,
    pub members: Vec<MemberView>,
}

impl FamilyView {
    /// Whether the family matches a filter (case-insensitive substring of its texts).
    pub fn matches(&self, needle_lower: &str) -> bool {
        needle_lower.is_empty()
            || [
                self.graph.as_str(),
                self.cause.as_str(),
                self.source.as_deref().unwrap_or(""),
                self.details.as_str(),
            ]
            .iter()
            .any(|s| s.to_lowercase().contains(needle_lower))
    }
}

/// A line that syncs the host.
#[derive(Clone, Debug, PartialEq)]
pub struct SyncRow {
    /// The report's label of the line ([`SyncLine::label`]): `dir/file.py:27 (function)`, with
    /// the library that read when there is one, or the innermost frame when no frame is the
    /// user's.
    ///
    /// [`SyncLine::label`]: tpuscope_analyzers::syncs::SyncLine::label
    pub line: String,
    /// `dir/file.py:27` alone (what is left when the line does not fit).
    pub place: String,
    /// False when no user frame was found.
    pub user: bool,
    pub count: u64,
    pub bytes: u64,
    pub stall_ms: f64,
    pub per_step: Option<f64>,
    pub stall_ms_per_step: Option<f64>,
    /// What was read (shapes) or waited on.
    pub what: Vec<String>,
    pub suggestion: String,
}

impl SyncRow {
    pub fn matches(&self, needle_lower: &str) -> bool {
        needle_lower.is_empty()
            || self.line.to_lowercase().contains(needle_lower)
            || self
                .what
                .iter()
                .any(|w| w.to_lowercase().contains(needle_lower))
    }
}

/// Device memory of one device.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceMem {
    pub device: i32,
    /// True: the plugin's allocator reports (`PJRT_Device_MemoryStats`); false: only tpuscope's
    /// own count of live buffers exists.
    pub reported: bool,
    /// Bytes in use, oldest first (the last [`MEMORY_SAMPLES`] samples).
    pub series: Vec<u64>,
    /// Bytes in use at the last sample.
    pub last_bytes: i64,
    pub peak_bytes: i64,
    pub limit_bytes: Option<i64>,
    /// Peak over limit.
    pub peak_fraction: Option<f64>,
    /// The peak is close enough to the limit for the report to call it a problem.
    pub near_limit: bool,
    /// Last bytes in use over limit.
    pub fraction: Option<f64>,
    /// Live buffers at the last sample (counted by tpuscope).
    pub live_buffers: Option<i64>,
    pub samples: u64,
}

/// One line of the recent-events log.
#[derive(Clone, Debug, PartialEq)]
pub struct EventLine {
    /// Milliseconds since the process started (of the newest event the line stands for).
    pub t_ms: f64,
    pub kind: EventKind,
    pub text: String,
    /// Consecutive events collapsed into this line.
    pub repeat: u64,
}

impl EventLine {
    pub fn matches(&self, needle_lower: &str) -> bool {
        needle_lower.is_empty() || self.text.to_lowercase().contains(needle_lower)
    }
}

/// A piece of a split said in words (`present::split_line`'s), with the category it states.
#[derive(Clone, Debug, PartialEq)]
pub struct SplitWord {
    /// `devices busy 12%`, or a separator.
    pub text: String,
    /// `None` for separators.
    pub category: Option<Category>,
    /// The report marks it (a badput category of a quarter of the time or more).
    pub loud: bool,
}

/// One step of the sparkline.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepTime {
    pub number: u32,
    pub ms: f64,
    /// The category that took most of the step.
    pub dominant: Category,
}

/// Where the time goes in the run so far (the report's breakdown of the first run).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimeView {
    /// The run's wall time so far, split (the categories add up to its `wall_ms`).
    pub total: TimeSplit,
    /// The headline: `total` in the report's words.
    pub headline: Vec<SplitWord>,
    /// The last [`STEP_SAMPLES`] complete steps, oldest first (warm-up steps included).
    pub steps: Vec<StepTime>,
    /// The last complete step: its number and its split in words.
    pub current: Option<(u32, Vec<SplitWord>)>,
    /// Steady-state step-time percentiles and steps per second.
    pub step_time: Option<Percentiles>,
    pub steps_per_s: Option<f64>,
    /// Why the split has no device-busy and host-bound parts, when it has not.
    pub untimed: Option<String>,
}

/// Everything the screen shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Model {
    pub header: Header,
    pub counters: Counters,
    /// Recompile families, in the report's order (first compile first).
    pub families: Vec<FamilyView>,
    /// Host sync lines, most stall first.
    pub syncs: Vec<SyncRow>,
    /// The report's summary of the host syncs (`12 syncs from 2 lines, 3.1 ms stalled; …`, or
    /// `no host syncs in the loop`).
    pub sync_summary: String,
    pub memory: Vec<DeviceMem>,
    /// Largest compiled executables: (graph, peak bytes, temp bytes).
    pub largest_compiled: Vec<(String, i64, i64)>,
    /// Oldest first, at most [`EVENT_LINES`].
    pub events: Vec<EventLine>,
    pub output: Vec<String>,
    pub warnings: Vec<String>,
    /// One-line findings (`recompile`, `sync`, … titles).
    pub findings: Vec<String>,
    /// How steps were detected (`marker torch_xla.sync`, `dominant executable jit_train_step`).
    pub steps_detected_by: String,
    /// Where the run is: `set-up`, `steady state`, `tail` (empty before any loop is seen).
    pub phase: String,
    /// The report's phase lines (durations and shares) and the set-up compile line.
    pub phase_lines: Vec<String>,
    /// Where the time goes (`None` before the report has a run).
    pub time: Option<TimeView>,
    pub state: RunState,
}

impl Model {
    /// Builds the model of a trace decoded whole ([`Model::build_run`] of its digest and last
    /// events).
    pub fn build(trace: &Trace, report: Report, now_ns: Option<u64>, extra: Extra) -> Model {
        let digest = Digest::of(trace);
        let from = trace.events.len().saturating_sub(EVENT_SCAN_LIMIT);
        let run = Run {
            trace,
            digest: &digest,
            recent: trace.events.get(from..).unwrap_or_default(),
        };
        Model::build_run(run, report, now_ns, extra)
    }

    /// Builds the model from a run's digest and latest events plus the report's (already
    /// computed) views: the work is the digest's few passes, never a walk over every record.
    pub fn build_run(run: Run<'_>, report: Report, now_ns: Option<u64>, extra: Extra) -> Model {
        let Run {
            trace,
            digest,
            recent,
        } = run;
        let m = trace.manifest.clone().unwrap_or_default();
        let start = m.start_mono_ns;
        let names = executable_names_of(digest);

        // Drops (the records are kept whole), the last time.
        let dropped = digest
            .others()
            .filter_map(|(_, r)| match r {
                Record::Dropped(d) => Some(d.total),
                _ => None,
            })
            .fold(trace.end.as_ref().map_or(0, |e| e.dropped_total), u64::max);
        let last_t = digest.last_t.map_or(start, |t| t.max(start));
        let now = now_ns.unwrap_or(last_t);

        let header = Header {
            pid: m.pid,
            host: m.host.clone(),
            command: command(&m.command_line),
            frontend: report
                .traces
                .first()
                .map(|t| t.frontend.name().to_string())
                .unwrap_or_default(),
            plugin: if m.plugin_path.is_empty() {
                String::new()
            } else {
                short_path(&m.plugin_path).to_string()
            },
            pjrt_api: format!("{}.{}", m.pjrt_api_major, m.pjrt_api_minor),
            packages: packages(&m.package_versions),
            uptime_ns: now.saturating_sub(start),
            steps_per_s: report.steps.rate_at(now, start),
            partial: report
                .traces
                .first()
                .filter(|t| t.completeness != TraceCompleteness::Complete)
                .map(TraceInfo::completeness_line),
            attached: report
                .traces
                .first()
                .and_then(|t| t.attached.as_ref())
                .map(|a| a.short()),
        };

        let counters = counters(digest, &report, dropped, extra.viewer_lost);

        let memory = devices(digest, &report);
        let events = recent_events(trace, recent, &names, start);
        let findings = report
            .findings
            .iter()
            .enumerate()
            // The report's head of the finding (`sync at file.py:33`), then what happened.
            .map(|(i, f)| format!("{}: {}", present::finding(i + 1, f).head.text(), f.title))
            .collect();
        let phase = current_phase(&report);
        let mut phase_lines = tpuscope_analyzers::report::phases_lines(&report);
        phase_lines.extend(tpuscope_analyzers::report::setup_compile_line(&report));
        // One row per graph, as the report lists them.
        let largest_compiled = present::largest_compiled(&report, LARGEST_COMPILED)
            .into_iter()
            .map(|e| (e.graph.clone(), e.peak_bytes, e.temp_bytes))
            .collect();
        let sync_summary = present::syncs(&report).summary.text();
        let Report {
            recompiles,
            syncs,
            warnings,
            steps,
            time,
            ..
        } = report;
        Model {
            header,
            counters,
            families: recompiles.into_iter().map(family).collect(),
            syncs: syncs.into_iter().map(sync_row).collect(),
            sync_summary,
            memory,
            largest_compiled,
            events,
            output: extra.output.iter().map(|l| fmt::sanitize(l)).collect(),
            warnings,
            findings,
            steps_detected_by: steps.detected_by,
            phase,
            phase_lines,
            // The live view watches one process: the report's first (only) run.
            time: time.first().map(|b| time_view(b, extra.state)),
            state: extra.state,
        }
    }
}

/// The live counters, from the report; `dropped` as the collector's records count it,
/// `viewer_lost` as the driver does (the stream's own notes counted too, the larger wins).
fn counters(digest: &Digest, report: &Report, dropped: u64, viewer_lost: u64) -> Counters {
    Counters {
        compiles: report.compiles.total,
        failed_compiles: report.compiles.failed,
        cache_hits: report.cache.persistent_hits,
        recompiles: report.compiles.recompiles,
        warmup_recompiles: report.compiles.warmup_recompiles,
        host_syncs: report.sync_total(),
        runtime_waits: report.runtime_waits,
        steps: report.steps.count,
        dropped,
        viewer_lost: viewer_lost.max(tpuscope_analyzers::live_notes::viewer_lost_of(digest)),
        events: digest.events as u64,
        errors: report.error_total(),
    }
}

/// The phase the (first) run is in now. The loop's last step ends a typical step after its
/// launch, so a live loop shows as past its end between launches: a tail is one only once it
/// lasts longer than a few steps (or a second).
fn current_phase(report: &Report) -> String {
    use tpuscope_analyzers::phases::Phase;
    let of = |ph: Phase| report.phases.iter().find(|p| p.run == 0 && p.phase == ph);
    let (Some(steady), Some(tail)) = (of(Phase::Steady), of(Phase::Tail)) else {
        return String::new();
    };
    let mut durations: Vec<f64> = report
        .steps
        .per_step
        .iter()
        .filter(|s| s.run == 0 && s.steady)
        .map(|s| s.dur_ms)
        .collect();
    durations.sort_by(f64::total_cmp);
    let median = durations.get(durations.len() / 2).copied().unwrap_or(0.0);
    let phase = if tail.dur_ms > (3.0 * median).max(1000.0) {
        Phase::Tail
    } else if steady.steps > 0 {
        Phase::Steady
    } else {
        Phase::Setup
    };
    phase.as_str().to_string()
}

/// `split` in the report's words, each piece with its category.
fn split_words(split: &TimeSplit) -> Vec<SplitWord> {
    present::split_line(split)
        .0
        .into_iter()
        .map(|s| SplitWord {
            // The line says `label share` for each category, separators between.
            category: Category::ALL
                .into_iter()
                .find(|c| s.text.starts_with(c.label())),
            loud: s.tone == present::Tone::Bad,
            text: s.text,
        })
        .collect()
}

fn time_view(b: &RunBreakdown, state: RunState) -> TimeView {
    // While the run goes on its last step is still running: the analysis gives it a typical
    // length, which is a guess, so it is left out until the next step starts.
    let complete = match state {
        RunState::Ended => b.steps.len(),
        RunState::Live | RunState::Paused => b.steps.len().saturating_sub(1),
    };
    let steps = &b.steps[..complete];
    let dominant = |s: &TimeSplit| {
        Category::ALL
            .into_iter()
            .max_by(|x, y| s.get(*x).total_cmp(&s.get(*y)))
            .unwrap_or(Category::HostBound)
    };
    let untimed = present::device_time_unknown(&b.device_timing);
    TimeView {
        total: b.total,
        headline: split_words(&b.total),
        steps: steps[steps.len().saturating_sub(STEP_SAMPLES)..]
            .iter()
            .map(|s| StepTime {
                number: s.number,
                ms: s.split.wall_ms,
                dominant: dominant(&s.split),
            })
            .collect(),
        current: steps.last().map(|s| (s.number, split_words(&s.split))),
        step_time: b.step_time,
        steps_per_s: b.steps_per_s,
        untimed,
    }
}

/// `python workloads/train.py --lr 0.1`: the interpreter by name, paths by their last two parts.
fn command(argv: &[String]) -> String {
    argv.iter()
        .enumerate()
        .map(|(i, a)| {
            if i == 0 {
                a.rsplit('/').next().unwrap_or(a).to_string()
            } else if a.starts_with('/') {
                short_path(a).to_string()
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The packages that matter for a PJRT workload, in a fixed order.
const PACKAGES: [&str; 6] = ["jax", "jaxlib", "torch", "torch_xla", "torch_tpu", "libtpu"];

fn packages(kvs: &[tpuscope_core::event::KeyValue]) -> Vec<(String, String)> {
    PACKAGES
        .iter()
        .filter_map(|p| {
            kvs.iter()
                .find(|kv| kv.key == *p)
                .map(|kv| (kv.key.clone(), kv.value.clone()))
        })
        .collect()
}

/// One entry per device, as the report counts it ([`hbm::SeriesFold::series`]: the allocator's numbers when
/// the plugin reports them, else the live buffers tpuscope counted), with the newest samples for
/// the sparkline.
fn devices(digest: &Digest, report: &Report) -> Vec<DeviceMem> {
    // The live view watches one process: the report's first (only) run.
    const RUN: usize = 0;
    digest
        .memory
        .series(RUN)
        .into_iter()
        .map(|s| {
            let summary = report
                .hbm
                .iter()
                .find(|d| d.run == RUN && d.device == s.device);
            let peak_bytes = summary.map_or_else(|| s.peak(), |d| d.peak_bytes);
            let peak_fraction = summary.and_then(|d| d.peak_fraction);
            // Red by the report's rule for the peak.
            let near_limit = summary.is_some_and(hbm::DeviceMemory::peak_near_limit);
            let in_use = s.samples.last().map_or(0, |x| x.in_use);
            let newest = s.samples.len().saturating_sub(MEMORY_SAMPLES);
            DeviceMem {
                device: s.device,
                reported: s.reported,
                series: s.samples[newest..]
                    .iter()
                    .map(|x| x.in_use.max(0) as u64)
                    .collect(),
                last_bytes: in_use,
                peak_bytes,
                limit_bytes: s.limit,
                peak_fraction,
                near_limit,
                fraction: s.limit.map(|l| in_use as f64 / l as f64),
                live_buffers: s.live_buffers,
                samples: s.samples.len() as u64,
            }
        })
        .collect()
}

fn family(f: FamilyReport) -> FamilyView {
    let first_t = f.members.first().map_or(0.0, |m| m.t_ms);
    let members = f.members.iter().map(member).collect();
    let not_a_finding = f.not_a_finding();
    FamilyView {
        key: format!("{}/{}@{first_t:.3}", f.run, f.graph),
        graph: f.graph,
        run: f.run,
        count: f.count,
        cause: f.cause.as_str().to_string(),
        finding: f.finding,
        not_a_finding,
        function: f
            .source
            .as_ref()
            .map(|s| s.function.clone())
            .unwrap_or_default(),
        source: f.source.as_ref().map(ToString::to_string),
        source_label: f.source.as_ref().map(|s| s.with_function()),
        details: f.details,
        suggestion: f.suggestion,
        compile_ms: f.compile_ms,
        members,
    }
}

fn member(m: &MemberReport) -> MemberView {
    let mut changes = Vec::new();
    let (cause, summary) = match &m.diff {
        Some(d) => {
            if let Some((a, b)) = d.params_count {
                changes.push(format!("{a} → {b} arguments"));
            }
            for p in &d.params {
                let label = match &p.name {
                    Some(n) => format!("#{} `{n}`", p.number),
                    None => format!("#{}", p.number),
                };
                let what = if p.dims.is_empty() {
                    "dtype".to_string()
                } else {
                    let dims: Vec<String> = p.dims.iter().map(usize::to_string).collect();
                    format!("dim {}", dims.join(", "))
                };
                changes.push(format!("argument {label}: {} → {} ({what})", p.old, p.new));
            }
            for c in &d.constants {
                let used = if c.used_by.is_empty() {
                    String::new()
                } else {
                    format!(", used by {}", c.used_by.join(", "))
                };
                let at = c
                    .source
                    .as_ref()
                    .map(|s| format!(" at {s}"))
                    .unwrap_or_default();
                changes.push(format!(
                    "{} of {} {}: {} → {}{used}{at}",
                    c.what, c.op, c.dtype, c.old, c.new
                ));
            }
            let ops = |m: &BTreeMap<String, u32>, sign: char| {
                let mut v: Vec<(&String, &u32)> = m.iter().collect();
                v.sort_by(|x, y| y.1.cmp(x.1).then(x.0.cmp(y.0)));
                v.iter()
                    .map(|(op, n)| format!("{sign}{n} {op}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            if !d.ops_added.is_empty() {
                changes.push(format!("ops added: {}", ops(&d.ops_added, '+')));
            }
            if !d.ops_removed.is_empty() {
                changes.push(format!("ops removed: {}", ops(&d.ops_removed, '−')));
            }
            if let Some(s) = &d.ops_source {
                changes.push(format!("the differing ops come from {s}"));
            }
            if changes.is_empty() {
                changes.push(d.summary.clone());
            }
            (d.cause.as_str().to_string(), d.summary.clone())
        }
        None => (
            m.cause_label(),
            if m.parameters.is_empty() {
                String::new()
            } else {
                format!("args {}", m.parameters.join(", "))
            },
        ),
    };
    MemberView {
        t_ms: m.t_ms,
        compile_ms: m.compile_ms,
        executable: m.executable.clone(),
        cause,
        against: m.against.map(|i| i + 1),
        summary,
        changes,
        parameters: m.parameters.clone(),
        source: m.source.as_ref().map(ToString::to_string),
        stack: m
            .stack
            .iter()
            .map(|f| StackLine {
                text: f.short(),
                user: f.user,
            })
            .collect(),
    }
}

fn sync_row(s: tpuscope_analyzers::syncs::SyncLine) -> SyncRow {
    let line = s.label();
    let place = s
        .place()
        .map_or_else(|| "?".to_string(), ToString::to_string);
    SyncRow {
        line,
        place,
        user: s.source.is_some(),
        count: s.count,
        bytes: s.bytes,
        stall_ms: s.stall_ms,
        per_step: s.per_step,
        stall_ms_per_step: s.stall_ms_per_step,
        what: s.what,
        suggestion: s.suggestion,
    }
}

/// The last [`EVENT_LINES`] lines of the log, worded like `tpuscope dump`, with runs of alike
/// events (the executes of a loop) collapsed into one line. Walks from the end: bounded work.
fn recent_events(
    trace: &Trace,
    recent: &[Record],
    names: &ExecutableNames,
    start: u64,
) -> Vec<EventLine> {
    // (line, the line of its single event).
    let mut out: Vec<(EventLine, String)> = Vec::new();
    for r in recent.iter().rev().take(EVENT_SCAN_LIMIT) {
        // A completion per device per execute: the execute line already says it ran.
        if matches!(r, Record::ExecuteComplete(_)) {
            continue;
        }
        let Some(d) = describe::record(trace, r, names) else {
            continue;
        };
        // Messages from the trace may hold anything: keep what a cell can show.
        let text = fmt::sanitize(&d.summary());
        if let Some((last, _)) = out.last_mut()
            && last.kind == d.kind
            && last.text == text
        {
            last.repeat += 1;
            continue;
        }
        if out.len() == EVENT_LINES {
            break;
        }
        let t_ms = r
            .t_ns()
            .map_or(0.0, |t| t.saturating_sub(start) as f64 / 1e6);
        out.push((
            EventLine {
                t_ms,
                kind: d.kind,
                text,
                repeat: 1,
            },
            fmt::sanitize(&d.line()),
        ));
    }
    out.into_iter()
        .rev()
        .map(|(mut l, single)| {
            // A line that stands for several events has no single duration to show.
            if l.repeat == 1 {
                l.text = single;
            }
            l
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_shortened() {
        let argv = vec![
            "/root/.cache/envs/jax/bin/python".to_string(),
            "/work/main/tests/workloads/jax_lr.py".to_string(),
            "--lr".to_string(),
        ];
        assert_eq!(command(&argv), "python workloads/jax_lr.py --lr");
    }
}
