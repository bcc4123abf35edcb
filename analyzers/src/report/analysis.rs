//! From traces to the report's facts: families and recompiles, phases, steps, syncs, memory,
//! cache, errors. The findings and explanations are in their own modules.

use super::*;

/// What a trace decoded whole says about recording that stopped early (`None` when it did not).
pub fn recording_stopped(trace: &Trace) -> Option<StoppedReport> {
    stopped(trace, &Digest::of(trace))
}

/// [`recording_stopped`] of a run: its trace's tables and the digest of its events.
fn stopped(trace: &Trace, d: &Digest) -> Option<StoppedReport> {
    let s = d.others().rev().find_map(|(_, r)| match r {
        tpuscope_core::Record::RecordingStopped(s) => Some(s),
        _ => None,
    })?;
    let start = trace
        .manifest
        .as_ref()
        .map_or(s.t_ns, |m| m.start_mono_ns.min(s.t_ns));
    let last_record = d.last_t;
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

/// Analyses traces: one run, successive runs of a program, or the hosts of one job.
pub fn analyze(inputs: &[Input<'_>]) -> Report {
    analyze_digested(inputs, &Digests::of(inputs), 1)
}

/// [`analyze`] with the inputs' digests made already.
pub(crate) fn analyze_digested(
    inputs: &[Input<'_>],
    digests: &Digests<'_>,
    threads: usize,
) -> Report {
    let (order, multi_host, runs) = order_runs(inputs, digests);
    let traces: Vec<&Trace> = order.iter().map(|&i| inputs[i].trace).collect();
    let ds: Vec<&Digest> = order.iter().map(|&i| digests.get(i)).collect();
    // One run: its own analyses take the second thread.
    let two_threads = order.len() == 1 && threads > 1;
    let parts = tpuscope_core::par::map_indices(order.len(), threads, |run| {
        let (&i, trace, d) = (order.get(run)?, traces.get(run)?, ds.get(run)?);
        Some(analyze_run(
            run,
            &inputs.get(i)?.path,
            trace,
            d,
            two_threads,
        ))
    })
    .into_iter()
    .map(Option::flatten)
    .collect();
    join_runs(inputs, &order, (multi_host, runs), &traces, &ds, parts)
}

/// A run analysed on its own as soon as it was read (a host of a merged job file, on the
/// thread that read it): its trace's tables, what is left of its digest
/// ([`Digest::without_bulk`]) and its own analyses. A job's report then holds each host's
/// summaries, not its launches, and reads and analyses its hosts on all cores.
pub struct AnalysedRun {
    run: usize,
    path: String,
    trace: Trace,
    digest: Digest,
    part: RunPart,
}

impl AnalysedRun {
    /// Analyses `trace` and `digest` as the report's `run`-th run, named `path`.
    pub fn new(run: usize, path: String, trace: Trace, digest: Digest) -> AnalysedRun {
        let mut part = analyze_run(run, &path, &trace, &digest, false);
        // Held until every run is in: without the room their vectors grew into.
        part.steps.steps.shrink_to_fit();
        part.syncs.shrink_to_fit();
        part.compiles.shrink_to_fit();
        part.members.shrink_to_fit();
        AnalysedRun {
            run,
            path,
            trace,
            digest: digest.without_bulk(),
            part,
        }
    }

    /// The run's trace: its tables, no events.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// What the report calls the run.
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// Runs analysed as they were read, taken apart: each run's trace and what is left of its
/// digest, in the order given, and their own analyses; `None` unless the `k`-th was
/// analysed as run `k`.
pub(crate) type Analysed = (Vec<(String, Trace, Digest)>, Vec<Option<RunPart>>);

pub(crate) fn take_apart(runs: Vec<AnalysedRun>) -> Option<Analysed> {
    if runs.iter().enumerate().any(|(k, r)| r.run != k) {
        return None;
    }
    Some(
        runs.into_iter()
            .map(|r| ((r.path, r.trace, r.digest), Some(r.part)))
            .unzip(),
    )
}

/// [`analyze_digested`] of runs whose own analyses were made as they were read (`parts`, by
/// input): `None` when the report orders them otherwise than they were analysed, which only
/// a read holding every digest can then redo.
pub(crate) fn analyze_analysed(
    inputs: &[Input<'_>],
    digests: &Digests<'_>,
    parts: Vec<Option<RunPart>>,
) -> Option<Report> {
    let (order, multi_host, runs) = order_runs(inputs, digests);
    if order.iter().enumerate().any(|(k, &i)| k != i) {
        return None;
    }
    let traces: Vec<&Trace> = inputs.iter().map(|i| i.trace).collect();
    let ds: Vec<&Digest> = (0..inputs.len()).map(|i| digests.get(i)).collect();
    Some(join_runs(
        inputs,
        &order,
        (multi_host, runs),
        &traces,
        &ds,
        parts,
    ))
}

/// The report from each run's own analyses (`parts`, in run order; a missing one is made
/// again here) and what the runs give together.
fn join_runs(
    inputs: &[Input<'_>],
    order: &[usize],
    (multi_host, runs): (bool, RunsInfo),
    traces: &[&Trace],
    ds: &[&Digest],
    parts: Vec<Option<RunPart>>,
) -> Report {
    let mut report = empty_report(runs);
    let per_run = analyze_runs(&mut report, inputs, order, traces, ds, parts);
    let total_steps: usize = per_run.steps.iter().map(|s| s.steps.len()).sum();
    let torch = report.traces.first().is_some_and(|t| t.frontend.is_torch());
    report.syncs = syncs::group(&per_run.syncs, total_steps, torch, |run, t| {
        per_run.steps.get(run).and_then(|s| s.steady_step_at(t))
    });
    report.steps = steps_report(traces, &per_run.steps);
    report.cache = cache::cache(&per_run.cache, &per_run.compiles, !multi_host);
    summarize_compiles(&mut report, &per_run.compiles);
    let frontend = report
        .traces
        .first()
        .map(|t| t.frontend.clone())
        .unwrap_or_default();
    report.findings = findings(&report, &frontend, &per_run.steps);
    if multi_host {
        add_hosts(&mut report, traces, ds, &per_run);
    }
    report
}

/// The job a trace belongs to: a segment of a merged file carries the job the merge put it in.
fn job_of(t: &Trace) -> String {
    t.segment
        .as_ref()
        .map(|s| s.job_id.clone())
        .or_else(|| t.manifest.as_ref().map(|m| m.job_id.clone()))
        .unwrap_or_default()
}

/// The order the inputs are analysed in, whether they are the hosts of one job, and what the
/// report says it assumed about them.
fn order_runs(inputs: &[Input<'_>], digests: &Digests<'_>) -> (Vec<usize>, bool, RunsInfo) {
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    let start = |i: usize| {
        inputs[i]
            .trace
            .manifest
            .as_ref()
            .map_or(0, |m| m.start_wall_ns)
    };
    let job = |i: usize| job_of(inputs[i].trace);
    let shared_job_id =
        inputs.len() > 1 && !job(0).is_empty() && (0..inputs.len()).all(|i| job(i) == job(0));
    let all: Vec<&Trace> = inputs.iter().map(|i| i.trace).collect();
    let lasts: Vec<Option<u64>> = (0..inputs.len())
        .map(|i| digests.get(i).last_t_in_file)
        .collect();
    // Without a job id (a plain TPU VM pod sets none), the PJRT client still tells the hosts of
    // one job apart from successive runs.
    let pjrt_job = !shared_job_id && hosts::one_pjrt_job_at(&all, &lasts);
    let multi_host = shared_job_id || pjrt_job;
    order.sort_by_key(|&i| {
        if multi_host {
            (u64::from(hosts::process_index(inputs[i].trace)), start(i))
        } else {
            (start(i), 0)
        }
    });
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
    (order, multi_host, runs)
}

fn empty_report(runs: RunsInfo) -> Report {
    Report {
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
        time: Vec::new(),
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
    }
}

/// What each run yields for the report's cross-run sections, in run order.
struct PerRun {
    compiles: Vec<Vec<CompileView>>,
    cache: Vec<cache::RunCache>,
    syncs: Vec<SyncView>,
    steps: Vec<Steps>,
}

/// What one run's own analyses give, before they join the report in run order.
pub(crate) struct RunPart {
    compiles: Vec<CompileView>,
    /// Its compiles and the programs seen before an attach: what its families are made of.
    members: Vec<CompileView>,
    syncs: Vec<SyncView>,
    runtime_waits: u64,
    steps: Steps,
    info: TraceInfo,
    hbm: Vec<crate::hbm::DeviceMemory>,
    compiled_memory: Vec<crate::hbm::ExecutableMemory>,
    oom: Option<OomReport>,
    time: crate::breakdown::RunBreakdown,
    cache: cache::RunCache,
}

/// The analyses of one run that need nothing of the others; with `two_threads`, the programs
/// (families' members, compiled memory, an OOM) on a thread of their own while this one cuts
/// the steps and splits the time.
fn analyze_run(run: usize, path: &str, trace: &Trace, d: &Digest, two_threads: bool) -> RunPart {
    let programs = || {
        (
            families::compiles(trace, d, run),
            hbm::executables(d, run),
            hbm::oom(trace, d, run),
            cache::RunCache::of(d),
        )
    };
    if !two_threads {
        return finish_run(
            run,
            path,
            trace,
            d,
            programs(),
            timeline(run, trace, d, false),
        );
    }
    std::thread::scope(|scope| {
        let other = scope.spawn(programs);
        let timeline = timeline(run, trace, d, true);
        // A panic there shows as it would on this thread.
        let programs = other.join().unwrap_or_else(|_| programs());
        finish_run(run, path, trace, d, programs, timeline)
    })
}

/// What [`analyze_run`] gets of a run's programs.
type Programs = (
    Vec<CompileView>,
    Vec<crate::hbm::ExecutableMemory>,
    Option<OomReport>,
    cache::RunCache,
);

/// A run's syncs (and the runtime's own waits), steps and time split: what comes in order.
type Timeline = ((Vec<SyncView>, u64), Steps, crate::breakdown::RunBreakdown);

/// With `beside`, the steady throughput and the batch are made on another thread while the
/// steps' time is split: the same, in less time on two cores. (The split's layers are not made
/// beside the steps: that saves as little and holds both at once.)
fn timeline(run: usize, trace: &Trace, d: &Digest, beside: bool) -> Timeline {
    use crate::breakdown::{run_breakdown, split_run, throughput};
    let (syncs, runtime_waits) = syncs::host_syncs(trace, d, run);
    let sync_times: Vec<(u64, u64)> = syncs.iter().map(|s| (s.t_ns, s.stall_ns)).collect();
    let steps = steps::steps(trace, d, &sync_times);
    let time = if beside {
        std::thread::scope(|scope| {
            let rates = scope.spawn(|| throughput(d, &steps));
            // A panic there shows as it would here: the rates are made here again.
            split_run(run, trace, d, &syncs, &steps, || {
                rates.join().unwrap_or_else(|_| throughput(d, &steps))
            })
        })
    } else {
        run_breakdown(run, trace, d, &syncs, &steps)
    };
    ((syncs, runtime_waits), steps, time)
}

/// A run's part from its programs, syncs, steps and time split.
fn finish_run(
    run: usize,
    path: &str,
    trace: &Trace,
    d: &Digest,
    (mut compiles, compiled_memory, oom, cache): Programs,
    ((syncs, runtime_waits), steps, time): Timeline,
) -> RunPart {
    let info = trace_info(run, path, trace, d, &steps);
    if matches!(steps.source, StepSource::Marker { .. }) {
        // Markers are recorded by the thread that compiles (torch_xla compiles inside its
        // `sync()`), while launches may come later from a worker thread: steps cut at
        // markers place a compile by its own time.
        for c in &mut compiles {
            c.at_ns = c.t_ns;
        }
    }
    // An attached trace's families start from the programs that ran before the attach.
    let mut members = families::seen_before_attach(trace, d, run);
    members.extend(compiles.iter().cloned());
    RunPart {
        hbm: hbm::devices(d, run, &steps),
        compiled_memory,
        oom,
        compiles,
        members,
        syncs,
        runtime_waits,
        steps,
        info,
        time,
        cache,
    }
}

/// Fills the report's per-run sections (traces, warnings, memory, errors, families, phases)
/// from each run's own analyses (`parts`, in run order) and returns what the cross-run
/// sections are built from. A run whose part is missing (its analysis panicked on its thread)
/// is analysed again here: the panic shows as it would without threads.
fn analyze_runs(
    report: &mut Report,
    inputs: &[Input<'_>],
    order: &[usize],
    traces: &[&Trace],
    digests: &[&Digest],
    parts: Vec<Option<RunPart>>,
) -> PerRun {
    let mut all_compiles = Vec::new();
    let mut all_syncs: Vec<SyncView> = Vec::new();
    let mut all_steps: Vec<Steps> = Vec::new();
    let mut all_cache = Vec::new();
    let mut errors: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (run, (part, (trace, &d))) in parts
        .into_iter()
        .zip(traces.iter().zip(digests))
        .enumerate()
    {
        let part = part.unwrap_or_else(|| {
            let path = order.get(run).and_then(|&i| inputs.get(i));
            analyze_run(run, path.map_or("", |i| i.path.as_str()), trace, d, false)
        });
        report.runtime_waits += part.runtime_waits;
        warnings(&mut report.warnings, &part.info, trace);
        report.traces.push(part.info);
        report.hbm.extend(part.hbm);
        report.compiled_memory.extend(part.compiled_memory);
        if report.oom.is_none() {
            report.oom = part.oom;
        }
        collect_errors(d, &mut errors);
        let fams = families::families(&part.members);
        let first_family = report.recompiles.len();
        report_families(report, trace, &part.members, &fams, &part.steps);
        merge_co_recompiles(&mut report.recompiles[first_family..]);
        let recompile_steps = recompile_steps(&report.recompiles[first_family..]);
        report.phases.extend(phase_reports(
            run,
            &part.compiles,
            &part.steps,
            &recompile_steps,
        ));
        report.time.push(part.time);
        all_syncs.extend(part.syncs);
        all_steps.push(part.steps);
        all_compiles.push(part.compiles);
        all_cache.push(part.cache);
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
    PerRun {
        compiles: all_compiles,
        cache: all_cache,
        syncs: all_syncs,
        steps: all_steps,
    }
}

/// The hosts section and its cross-host findings, for the hosts of one job.
fn add_hosts(report: &mut Report, traces: &[&Trace], digests: &[&Digest], per_run: &PerRun) {
    let mut h = hosts::hosts(
        traces,
        digests,
        &per_run.compiles,
        &per_run.steps,
        &per_run.syncs,
    );
    // A straggler's slow steps, explained by the same split as every run's steps.
    let all: Vec<&crate::breakdown::RunBreakdown> = report.time.iter().collect();
    for s in h.stragglers.iter_mut().filter(|s| s.reason == "slow_steps") {
        let run = h
            .hosts
            .iter()
            .find(|r| r.host == s.host && r.process_index == s.process_index)
            .map(|r| r.run);
        if let Some((c, extra)) = run
            .and_then(|r| report.time.get(r))
            .and_then(|b| crate::breakdown::straggler_cause(b, &all))
        {
            s.details.push_str(&format!(
                "; where the extra goes: {}, {} ms per step more than the median host's",
                c.label(),
                crate::units::ms(extra)
            ));
        }
    }
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

/// Where a partial trace stops (see [`LastRecord`]); `None` for a complete one.
pub(super) fn last_record(trace: &Trace, d: &Digest, steps: &Steps) -> Option<LastRecord> {
    if matches!(trace.completeness, Completeness::Complete) {
        return None;
    }
    // The Time section's window: its end is the last record's end, from the same start.
    let (start, end) = crate::breakdown::window(trace, d, steps);
    Some(LastRecord {
        at_s: (end - start) as f64 / 1e9,
        step: steps.number_under_way(end),
    })
}

pub(super) fn trace_info(
    run: usize,
    path: &str,
    trace: &Trace,
    d: &Digest,
    steps: &Steps,
) -> TraceInfo {
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
        completeness: TraceCompleteness::of(&trace.completeness),
        last_record: last_record(trace, d, steps),
        events: d.events as u64,
        recording_stopped: stopped(trace, d),
        attached: attached(trace, d),
        dropped_events: trace.end.as_ref().map_or_else(
            || {
                d.others()
                    .filter_map(|(_, r)| match r {
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

/// What an attached trace cannot hold (see [`AttachedReport`]); `None` for other traces.
pub(super) fn attached(trace: &Trace, d: &Digest) -> Option<AttachedReport> {
    let m = trace.manifest.as_ref().filter(|m| m.role == "attach")?;
    let mut executables_before: Vec<String> = Vec::new();
    let mut detached = false;
    for (_, r) in d.others() {
        match r {
            // Full names: torch_xla's `SyncTensorsGraph.54` and `.11` are two programs.
            tpuscope_core::Record::ExecutableSeen(x)
                if !executables_before.contains(&x.executable_name) =>
            {
                executables_before.push(x.executable_name.clone());
            }
            tpuscope_core::Record::Note(n) if n.topic == "detach" => detached = true,
            _ => {}
        }
    }
    Some(AttachedReport {
        process_age_s: (m.process_start_wall_ns != 0 && m.start_wall_ns >= m.process_start_wall_ns)
            .then(|| (m.start_wall_ns - m.process_start_wall_ns) as f64 / 1e9),
        executables_before,
        detached,
    })
}

/// The frontend the agent named, else the one whose package the process loaded.
pub fn frontend_of(trace: &Trace) -> Frontend {
    trace
        .manifest
        .as_ref()
        .map(manifest_frontend)
        .unwrap_or_default()
}

/// [`frontend_of`] for a manifest alone (what `tpuscope ps` reads from a live stream).
pub fn manifest_frontend(m: &tpuscope_core::event::Manifest) -> Frontend {
    if !m.frontend.is_empty() {
        return Frontend::from_name(&m.frontend);
    }
    let has = |p: &str| m.package_versions.iter().any(|kv| kv.key == p);
    [Frontend::TorchTpu, Frontend::TorchXla, Frontend::Jax]
        .into_iter()
        .find(|f| has(f.name()))
        .unwrap_or_default()
}

/// The warnings of one trace (`info`: what the report says of it).
pub(super) fn warnings(out: &mut Vec<String>, info: &TraceInfo, trace: &Trace) {
    let path = &info.path;
    let stopped = info
        .last_record
        .map_or_else(String::new, |l| format!(": {}", l.line()));
    match trace.completeness {
        Completeness::Cut { offset, file_len } => out.push(format!(
            "{path}: trace cut at byte {offset} of {file_len}{stopped}; the report covers what it holds"
        )),
        Completeness::NoEndRecord { .. } => out.push(format!(
            "{path}: no end record (the process died or is still running){stopped}; the report covers what it holds"
        )),
        Completeness::Complete => {}
    }
    if !trace.damage.is_empty() {
        out.push(format!(
            "{path}: {} damaged region(s) skipped",
            trace.damage.len()
        ));
    }
    if let Some(s) = &info.recording_stopped {
        out.push(format!("{path}: {}", stopped_line(s)));
    }
    if let Some(a) = &info.attached {
        out.push(format!("{path}: {}", a.line()));
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

pub(super) fn collect_errors(d: &Digest, out: &mut BTreeMap<(String, String), u64>) {
    use tpuscope_core::Record;
    for (_, r) in d.others() {
        let (api, msg) = match r {
            // A failed compile also writes an Error record: count it once, there.
            Record::Error(e) => (e.api.clone(), e.message.clone()),
            _ => continue,
        };
        let first_line = msg.lines().next().unwrap_or("").chars().take(300).collect();
        *out.entry((api, first_line)).or_default() += 1;
    }
}

pub(super) fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

pub(super) fn report_families(
    report: &mut Report,
    trace: &Trace,
    compiles: &[CompileView],
    fams: &[Family],
    steps: &Steps,
) {
    let t0 = trace.manifest.as_ref().map_or(0, |m| m.start_mono_ns);
    let frontend = frontend_of(trace);
    for f in fams {
        if f.members.iter().all(|m| compiles[m.compile].before_attach) {
            continue;
        }
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
                    stack: stack_frames(trace, c.stack),
                    before_attach: c.before_attach,
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
pub(super) fn merge_co_recompiles(fams: &mut [FamilyReport]) {
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
pub(super) fn steady(steps: &Steps, t: u64) -> bool {
    steps.phase_at(t).is_none_or(|p| p == Phase::Steady)
}

/// The steps in which each family of a run recompiled in the steady state, widened by one: a
/// graph compiles before the launch that starts its step, so the ops that come with it compile
/// in that step or the one before.
pub(super) fn recompile_steps(fams: &[FamilyReport]) -> Vec<(String, BTreeSet<usize>)> {
    fams.iter()
        .filter(|f| !f.steady_steps.is_empty())
        .map(|f| {
            let at = f.steady_steps.iter().flat_map(|&i| [i, i + 1]).collect();
            (f.graph.clone(), at)
        })
        .collect()
}

/// At most this many op sites are listed per phase; the counts cover them all.
pub(super) const MAX_OP_SITES: usize = 10;

/// The phases of one run with their compiles, eager op compiles grouped by the user's line.
pub(super) fn phase_reports(
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
        // A trace that starts mid-run (attach) has no set-up at all.
        .filter(|&(phase, _, _)| phase != Phase::Setup || p.warmup_steps > 0)
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

pub(super) fn steps_report(traces: &[&Trace], all: &[Steps]) -> StepsReport {
    let mut r = StepsReport {
        detected_by: "none".into(),
        ..StepsReport::default()
    };
    let mut fragments = Vec::new();
    let mut syncs = Vec::new();
    for (run, (steps, trace)) in all.iter().zip(traces).enumerate() {
        let t0 = trace.manifest.as_ref().map_or(0, |m| m.start_mono_ns);
        if run == 0 || r.source == StepSource::None {
            r.detected_by = steps.source.label();
            r.source = steps.source.clone();
        }
        if run == 0
            && let Some(last) = steps.steps.iter().map(|s| s.start_ns).max()
        {
            let from = last.saturating_sub(STEP_RATE_WINDOW_NS);
            r.recent_starts = steps
                .steps
                .iter()
                .map(|s| s.start_ns)
                .filter(|&t| t > from)
                .collect();
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

pub(super) fn summarize_compiles(report: &mut Report, all: &[Vec<CompileView>]) {
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
