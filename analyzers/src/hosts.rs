//! The hosts of one job side by side: what each compiled, synced and stepped, which host is
//! slower than the others (a straggler holds every collective back), and which recompiles a
//! graph that the other hosts compile once (its program differs from theirs: a host-local input,
//! flag or code path).
//!
//! Step times are compared on the job timeline: each host's monotonic times shifted by its
//! clock offset ([`tpuscope_core::align`]).

use serde::{Deserialize, Serialize};
use tpuscope_core::event::Record;
use tpuscope_core::{Trace, align};

use crate::digest::Digest;
use crate::families::{self, CompileView};
use crate::report::Finding;
use crate::source::SourceLoc;
use crate::steps::Steps;
use crate::syncs::SyncView;

/// A host whose median step is this much slower than the median host's is a straggler.
pub const STRAGGLER_SLOWER: f64 = 0.20;
/// ... and at least this much slower in absolute terms: sub-millisecond differences are timer and
/// scheduling noise, not a host holding collectives back.
pub const STRAGGLER_MIN_MS: f64 = 1.0;
/// A host whose steps start (or end) later than the median host's by more than this many median
/// steps, and at least [`LATE_MIN_NS`], is late.
pub const LATE_STEPS: f64 = 3.0;
pub const LATE_MIN_NS: u64 = 100_000_000;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HostsReport {
    /// One row per host, in the report's trace order (process index).
    pub hosts: Vec<HostRow>,
    pub stragglers: Vec<Straggler>,
    /// Graphs that one host recompiles and the others do not.
    pub recompiles_alone: Vec<AloneRecompile>,
    /// Why these traces may not be the hosts of one job (different programs, times, or two
    /// traces of one process slot); no cross-host findings are made then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_one_job: Option<String>,
}

/// Two traces, given as hosts of one job, that cannot be: their indices in the slice given to
/// [`not_one_job`], and what tells them apart.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotOneJob {
    pub a: usize,
    pub b: usize,
    pub why: String,
}

/// Hosts of one job start within this much of each other's end: a trace that ended more than
/// this before another started is another run.
pub const JOB_OVERLAP_SLACK_NS: u64 = 10_000_000_000;

/// Whether traces given as the hosts of one job cannot be one: the first pair (in slice order)
/// that differs in launcher job id, that holds the same process slot (host and process index)
/// twice, that runs different programs (unless a launcher gave both the same job id: hosts may
/// then run per-host commands), or that did not run at the same time.
pub fn not_one_job(traces: &[&Trace]) -> Option<NotOneJob> {
    not_one_job_at(traces, &last_times(traces))
}

/// The time of each trace's last event that has one, in file order.
fn last_times(traces: &[&Trace]) -> Vec<Option<u64>> {
    traces
        .iter()
        .map(|t| t.events.iter().rev().find_map(|r| r.t_ns()))
        .collect()
}

/// [`not_one_job`] with the time of each trace's last timed event (`last`, by trace).
pub fn not_one_job_at(traces: &[&Trace], last: &[Option<u64>]) -> Option<NotOneJob> {
    let found = |a: usize, b: usize, why: String| Some(NotOneJob { a, b, why });
    let m = |i: usize| traces[i].manifest.clone().unwrap_or_default();
    let n = traces.len();
    for a in 0..n {
        for b in a + 1..n {
            let (ma, mb) = (m(a), m(b));
            if !ma.job_id.is_empty() && !mb.job_id.is_empty() && ma.job_id != mb.job_id {
                return found(
                    a,
                    b,
                    format!("different job ids ({:?} and {:?})", ma.job_id, mb.job_id),
                );
            }
        }
    }
    for a in 0..n {
        for b in a + 1..n {
            let (ma, mb) = (m(a), m(b));
            let (ia, ib) = (process_index(traces[a]), process_index(traces[b]));
            if ma.host == mb.host && ia == ib {
                return found(
                    a,
                    b,
                    format!(
                        "both are process {ia} on host {} (one job has one process per slot)",
                        ma.host
                    ),
                );
            }
        }
    }
    for a in 0..n {
        for b in a + 1..n {
            let (ma, mb) = (m(a), m(b));
            let launcher_job = !ma.job_id.is_empty() && ma.job_id == mb.job_id;
            let (pa, pb) = (program(&ma.command_line), program(&mb.command_line));
            if !launcher_job && pa != pb {
                return found(a, b, format!("they run different programs ({pa} and {pb})"));
            }
        }
    }
    let spans: Vec<Option<(u64, u64)>> = traces
        .iter()
        .enumerate()
        .map(|(i, t)| wall_span(t, last.get(i).copied().flatten()))
        .collect();
    let latest_start = (0..n)
        .filter_map(|i| Some((spans[i]?.0, i)))
        .max_by_key(|x| x.0);
    let earliest_end = (0..n)
        .filter_map(|i| Some((spans[i]?.1, i)))
        .min_by_key(|x| x.0);
    if let (Some((start, late)), Some((end, early))) = (latest_start, earliest_end)
        && late != early
        && start > end.saturating_add(JOB_OVERLAP_SLACK_NS)
    {
        let (a, b) = (early.min(late), early.max(late));
        return found(
            a,
            b,
            format!(
                "they did not run at the same time (one ended {} s before the other started)",
                (start - end) / 1_000_000_000
            ),
        );
    }
    None
}

/// What a command line runs, told apart from per-host arguments: the script's file name (or
/// `-m module`) for Python, else the program's file name.
pub fn program(argv: &[String]) -> String {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let Some(exe) = argv.first() else {
        return "(no command line)".into();
    };
    if !base(exe).starts_with("python") {
        return base(exe);
    }
    let mut args = argv.iter().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "-m" => return format!("-m {}", args.next().map_or("", String::as_str)),
            "-c" => return "python -c".into(),
            // Options of Python that take a value.
            "-W" | "-X" => {
                args.next();
            }
            s if s.starts_with('-') => {}
            s => return base(s),
        }
    }
    base(exe)
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HostRow {
    /// Index of the trace in the report (`traces[run]`).
    pub run: usize,
    pub host: String,
    pub process_index: u32,
    pub pid: u32,
    pub compiles: u64,
    /// Σ over graphs compiled more than once of (compiles − 1).
    pub recompiles: u64,
    pub syncs: u64,
    pub steps: u64,
    /// Median step time after the first step (which carries the warm-up compiles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median_step_ms: Option<f64>,
    pub cache_hits: u64,
    /// Added to this host's monotonic times to put them on the job timeline (wall-clock ns).
    pub clock_offset_ns: i64,
    /// `clock_anchors`, `manifest_start` or `none`.
    pub alignment: String,
    /// Start of the first step and end of the last, in ms from the earliest host's first step,
    /// on the job timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_step_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_step_end_ms: Option<f64>,
}

/// Titles of the per-host table's columns, in the order of [`HostRow::cells`] (the report formats
/// and the GUI show the same table).
pub const TABLE_COLUMNS: [&str; 9] = [
    "process",
    "host",
    "compiles",
    "recompiles",
    "syncs",
    "steps",
    "median step ms",
    "cache hits",
    "first step at ms",
];

/// Which of [`TABLE_COLUMNS`] hold numbers (right-aligned).
pub const TABLE_NUMERIC: [bool; 9] = [true, false, true, true, true, true, true, true, true];

impl HostRow {
    /// This host's row of the per-host table, as text.
    pub fn cells(&self) -> [String; 9] {
        let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), crate::units::ms);
        [
            self.process_index.to_string(),
            self.host.clone(),
            self.compiles.to_string(),
            self.recompiles.to_string(),
            self.syncs.to_string(),
            self.steps.to_string(),
            opt(self.median_step_ms),
            self.cache_hits.to_string(),
            opt(self.first_step_ms),
        ]
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Straggler {
    pub host: String,
    pub process_index: u32,
    /// `slow_steps`, `late_start` or `late_end`.
    pub reason: String,
    /// What it shows, in words.
    pub details: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AloneRecompile {
    pub host: String,
    pub process_index: u32,
    pub graph: String,
    pub compiles: u64,
    /// The most compiles of this graph on any other host (0: the others never compile it).
    pub others_max: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLoc>,
}

/// A process's place in a multi-process PJRT client: its index (that of its addressable
/// devices), how many processes the client spans, and how many devices in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PjrtTopology {
    pub process_index: u32,
    pub processes: u32,
    pub devices: usize,
}

/// The topology the trace's first client reports, when it spans several processes (a pod slice:
/// libtpu knows every host's devices and which are this process's).
pub fn pjrt_topology(trace: &Trace) -> Option<PjrtTopology> {
    let devices = &trace.client.as_ref()?.devices;
    let mut all: Vec<i32> = devices.iter().map(|d| d.process_index).collect();
    all.sort_unstable();
    all.dedup();
    if all.len() < 2 {
        return None;
    }
    let mut mine = devices
        .iter()
        .filter(|d| d.addressable)
        .map(|d| d.process_index);
    let first = mine.next()?;
    if mine.any(|p| p != first) {
        return None;
    }
    Some(PjrtTopology {
        process_index: u32::try_from(first).ok()?,
        processes: all.len() as u32,
        devices: devices.len(),
    })
}

/// A process's index in its job: a merged segment's, else PJRT's for a multi-process client
/// (plain TPU VMs set no environment variable for it; libtpu knows), else the manifest's.
pub fn process_index(trace: &Trace) -> u32 {
    if let Some(s) = &trace.segment {
        return s.process_index;
    }
    pjrt_topology(trace).map_or_else(
        || trace.manifest.as_ref().map_or(0, |m| m.process_index),
        |t| t.process_index,
    )
}

/// Whether traces without a shared job id are nevertheless the processes of one job: each has a
/// multi-process client of the same shape, their indices differ, and they ran at the same time.
pub fn one_pjrt_job(traces: &[&Trace]) -> bool {
    one_pjrt_job_at(traces, &last_times(traces))
}

/// [`one_pjrt_job`] with the time of each trace's last timed event (`last`, by trace).
pub fn one_pjrt_job_at(traces: &[&Trace], last: &[Option<u64>]) -> bool {
    let Some(topos) = traces
        .iter()
        .map(|t| pjrt_topology(t))
        .collect::<Option<Vec<_>>>()
    else {
        return false;
    };
    let same_shape = topos
        .iter()
        .all(|t| (t.processes, t.devices) == (topos[0].processes, topos[0].devices));
    let mut idx: Vec<u32> = topos.iter().map(|t| t.process_index).collect();
    idx.sort_unstable();
    idx.dedup();
    let spans: Vec<(u64, u64)> = traces
        .iter()
        .enumerate()
        .filter_map(|(i, t)| wall_span(t, last.get(i).copied().flatten()))
        .collect();
    let overlap = spans.len() == traces.len()
        && spans.iter().map(|s| s.0).max() <= spans.iter().map(|s| s.1).min();
    traces.len() > 1 && same_shape && idx.len() == traces.len() && overlap
}

/// Wall-clock start and end of a trace (`last`: its last timed event in file order), ns since
/// the epoch.
fn wall_span(trace: &Trace, last: Option<u64>) -> Option<(u64, u64)> {
    let m = trace.manifest.as_ref()?;
    let last = last
        .into_iter()
        .chain(trace.end.as_ref().map(|e| e.t_ns))
        .max()
        .unwrap_or(m.start_mono_ns);
    let end = m
        .start_wall_ns
        .saturating_add(last.saturating_sub(m.start_mono_ns));
    Some((m.start_wall_ns, end))
}

/// Builds the per-host view; `traces`, `compiles` and `steps` are indexed by run, `syncs` carry
/// their run.
pub fn hosts(
    traces: &[&Trace],
    digests: &[&Digest],
    compiles: &[Vec<CompileView>],
    steps: &[Steps],
    syncs: &[SyncView],
) -> HostsReport {
    let mut rows = Vec::new();
    // (graph → compiles) per host, and the first call site of each graph.
    let mut graph_counts: Vec<Vec<(String, u64, Option<SourceLoc>)>> = Vec::new();
    let mut spans: Vec<Option<(i64, i64)>> = Vec::new();
    for (run, (trace, d)) in traces.iter().zip(digests).enumerate() {
        let m = trace.manifest.clone().unwrap_or_default();
        let empty = Vec::new();
        let cs = compiles.get(run).unwrap_or(&empty);
        let fams = families::families(cs);
        let mut counts: Vec<(String, u64, Option<SourceLoc>)> = Vec::new();
        for f in &fams {
            let n = f.members.len() as u64;
            let src = f
                .members
                .iter()
                .find_map(|mb| cs.get(mb.compile).and_then(|c| c.source.clone()));
            match counts.iter_mut().find(|(g, _, _)| *g == f.graph) {
                Some(e) => e.1 += n,
                None => counts.push((f.graph.clone(), n, src)),
            }
        }
        let recompiles = fams
            .iter()
            .map(|f| (f.members.len() as u64).saturating_sub(1))
            .sum();
        // Clock records are among the records the digest keeps whole.
        let clocks = || d.others().map(|(_, r)| r);
        let offset = align::job_offset_of(trace, clocks());
        let alignment = match &trace.segment {
            Some(s) => s.alignment.clone(),
            None => align::alignment_of(trace.manifest.as_ref(), clocks())
                .method
                .to_string(),
        };
        let st = steps.get(run);
        let durations: Vec<u64> = st
            .map(|s| {
                s.steps
                    .iter()
                    .skip(1)
                    .map(|x| x.end_ns.saturating_sub(x.start_ns))
                    .collect()
            })
            .unwrap_or_default();
        let span = st.and_then(|s| {
            let first = s.steps.first()?;
            let last = s.steps.last()?;
            Some((
                align::to_job_ns(first.start_ns, offset),
                align::to_job_ns(last.end_ns, offset),
            ))
        });
        spans.push(span);
        rows.push(HostRow {
            run,
            host: m.host.clone(),
            process_index: process_index(trace),
            pid: m.pid,
            compiles: cs.len() as u64,
            recompiles,
            syncs: syncs.iter().filter(|s| s.run == run).count() as u64,
            steps: st.map_or(0, |s| s.steps.len() as u64),
            median_step_ms: median(durations).map(ms),
            cache_hits: d
                .others()
                .filter(|(_, r)| matches!(r, Record::CacheLoad(c) if c.ok))
                .count() as u64,
            clock_offset_ns: offset,
            alignment,
            first_step_ms: None,
            last_step_end_ms: None,
        });
        graph_counts.push(counts);
    }
    let t0 = spans.iter().flatten().map(|s| s.0).min();
    if let Some(t0) = t0 {
        for (row, span) in rows.iter_mut().zip(&spans) {
            if let Some((a, b)) = span {
                row.first_step_ms = Some(a.saturating_sub(t0) as f64 / 1e6);
                row.last_step_end_ms = Some(b.saturating_sub(t0) as f64 / 1e6);
            }
        }
    }
    // Processes of different jobs share no collectives and need not build the same programs:
    // comparing them would invent stragglers and lone recompiles.
    let last: Vec<Option<u64>> = digests.iter().map(|d| d.last_t_in_file).collect();
    let not_one_job = not_one_job_at(traces, &last).map(|n| describe_not_one_job(&rows, &n));
    let (stragglers, recompiles_alone) = if not_one_job.is_some() {
        (Vec::new(), Vec::new())
    } else {
        (stragglers(&rows, &spans), alone(&rows, &graph_counts))
    };
    HostsReport {
        hosts: rows,
        stragglers,
        recompiles_alone,
        not_one_job,
    }
}

/// The reason in words, naming the two hosts as the per-host table does.
fn describe_not_one_job(rows: &[HostRow], n: &NotOneJob) -> String {
    let name = |i: usize| {
        rows.get(i).map_or_else(
            || format!("trace {i}"),
            |r| {
                format!(
                    "host {} (process {}, pid {})",
                    r.host, r.process_index, r.pid
                )
            },
        )
    };
    format!("{} and {}: {}", name(n.a), name(n.b), n.why)
}

fn stragglers(rows: &[HostRow], spans: &[Option<(i64, i64)>]) -> Vec<Straggler> {
    let mut out = Vec::new();
    let medians: Vec<f64> = rows.iter().filter_map(|r| r.median_step_ms).collect();
    let job_median = median_f(&medians);
    if let Some(job) = job_median.filter(|_| medians.len() >= 2) {
        for r in rows {
            let Some(m) = r.median_step_ms else { continue };
            if job > 0.0 && m >= job * (1.0 + STRAGGLER_SLOWER) && m - job >= STRAGGLER_MIN_MS {
                out.push(Straggler {
                    host: r.host.clone(),
                    process_index: r.process_index,
                    reason: "slow_steps".into(),
                    details: format!(
                        "median step {m:.1} ms, {:.0}% slower than the median host ({job:.1} ms)",
                        (m / job - 1.0) * 100.0
                    ),
                });
            }
        }
    }
    let starts: Vec<i64> = spans.iter().flatten().map(|s| s.0).collect();
    let ends: Vec<i64> = spans.iter().flatten().map(|s| s.1).collect();
    if starts.len() >= 2 {
        let step_ns = job_median.map_or(0.0, |m| m * 1e6);
        let limit = ((step_ns * LATE_STEPS) as i64).max(LATE_MIN_NS as i64);
        let (ms_start, ms_end) = (median_i(&starts), median_i(&ends));
        for (r, span) in rows.iter().zip(spans) {
            let Some((a, b)) = span else { continue };
            if let Some(s) = ms_start
                && a - s > limit
            {
                out.push(Straggler {
                    host: r.host.clone(),
                    process_index: r.process_index,
                    reason: "late_start".into(),
                    details: format!(
                        "first step starts {:.1} ms after the median host's",
                        (a - s) as f64 / 1e6
                    ),
                });
            }
            if let Some(e) = ms_end
                && b - e > limit
            {
                out.push(Straggler {
                    host: r.host.clone(),
                    process_index: r.process_index,
                    reason: "late_end".into(),
                    details: format!(
                        "last step ends {:.1} ms after the median host's",
                        (b - e) as f64 / 1e6
                    ),
                });
            }
        }
    }
    out
}

fn alone(
    rows: &[HostRow],
    counts: &[Vec<(String, u64, Option<SourceLoc>)>],
) -> Vec<AloneRecompile> {
    let mut out = Vec::new();
    if rows.len() < 2 {
        return out;
    }
    for (i, host_counts) in counts.iter().enumerate() {
        for (graph, n, src) in host_counts {
            if *n < 2 {
                continue;
            }
            let others_max = counts
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .filter_map(|(_, c)| c.iter().find(|(g, _, _)| g == graph).map(|e| e.1))
                .max()
                .unwrap_or(0);
            if others_max >= 2 {
                continue;
            }
            let Some(r) = rows.get(i) else { continue };
            out.push(AloneRecompile {
                host: r.host.clone(),
                process_index: r.process_index,
                graph: graph.clone(),
                compiles: *n,
                others_max,
                source: src.clone(),
            });
        }
    }
    out
}

/// Findings for the report: each host that recompiles alone, each straggler.
pub fn findings(h: &HostsReport) -> Vec<Finding> {
    let mut out = Vec::new();
    for a in &h.recompiles_alone {
        let others = if a.others_max == 0 {
            "the other hosts never compile it".to_string()
        } else {
            "the other hosts compile it once".to_string()
        };
        out.push(Finding {
            kind: crate::report::FindingKind::Host,
            title: format!(
                "host {} (process {}) recompiles {} alone: {}× here, {others}",
                a.host, a.process_index, a.graph, a.compiles
            ),
            source: a.source.clone(),
            suggestion: "this host builds a different program from the others (a host-local \
                         value, flag or shape baked into the graph); make its inputs and flags \
                         match the other hosts', and pass changing values as arguments"
                .into(),
        });
    }
    for s in &h.stragglers {
        out.push(Finding {
            kind: crate::report::FindingKind::Host,
            title: format!(
                "host {} (process {}) is a straggler ({}): {}",
                s.host,
                s.process_index,
                s.reason.replace('_', " "),
                s.details
            ),
            source: None,
            suggestion: "every collective waits for the slowest host: compare this host's \
                         syncs, compiles and input pipeline with the others' (per-host table), \
                         and check its machine (thermal, noisy neighbour, data locality)"
                .into(),
        });
    }
    out
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn median(mut v: Vec<u64>) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    Some(v[v.len() / 2])
}

fn median_f(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The lower median: of two hosts, the earlier is the reference the later one is late against.
fn median_i(v: &[i64]) -> Option<i64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_unstable();
    Some(v[(v.len() - 1) / 2])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tpuscope_core::TraceWriter;
    use tpuscope_core::event::{End, Manifest};

    const S: u64 = 1_000_000_000;

    /// A process that ran `secs` seconds from wall time `start` (s).
    fn trace(host: &str, index: u32, argv: &[&str], job: &str, start: u64, secs: u64) -> Trace {
        let m = Manifest {
            pid: 100 + index,
            host: host.into(),
            start_wall_ns: 1_700_000_000 * S + start * S,
            start_mono_ns: 5 * S,
            command_line: argv.iter().map(|s| s.to_string()).collect(),
            job_id: job.into(),
            process_index: index,
            ..Manifest::default()
        };
        let mut w = TraceWriter::new(Vec::new(), &m).unwrap();
        w.write(&Record::End(End {
            t_ns: 5 * S + secs * S,
            ..Default::default()
        }))
        .unwrap();
        tpuscope_core::read_trace(&w.into_inner()).unwrap()
    }

    fn why(traces: &[Trace]) -> Option<String> {
        let refs: Vec<&Trace> = traces.iter().collect();
        not_one_job(&refs).map(|n| format!("{}-{}: {}", n.a, n.b, n.why))
    }

    #[test]
    fn hosts_of_one_job_pass_and_each_difference_is_named() {
        let train = ["python3", "-u", "/home/me/train.py", "--rank=0"];
        let train1 = ["/usr/bin/python3", "-u", "/home/me/train.py", "--rank=1"];
        let ok = [
            trace("a", 0, &train, "", 0, 60),
            trace("b", 1, &train1, "", 2, 60),
        ];
        assert_eq!(why(&ok), None);

        let w = why(&[
            trace("a", 0, &train, "", 0, 60),
            trace("a", 0, &train1, "", 1, 60),
        ]);
        assert_eq!(
            w.as_deref(),
            Some("0-1: both are process 0 on host a (one job has one process per slot)")
        );

        let eval = ["python3", "-W", "ignore", "eval.py"];
        let w = why(&[
            trace("a", 0, &train, "", 0, 60),
            trace("b", 1, &eval, "", 1, 60),
        ]);
        assert_eq!(
            w.as_deref(),
            Some("0-1: they run different programs (train.py and eval.py)")
        );
        // A launcher's job id says they are one job whatever the command lines.
        let w = why(&[
            trace("a", 0, &train, "j", 0, 60),
            trace("b", 1, &eval, "j", 1, 60),
        ]);
        assert_eq!(w, None);
        let w = why(&[
            trace("a", 0, &train, "j", 0, 60),
            trace("b", 1, &train, "k", 1, 60),
        ]);
        assert!(w.unwrap().contains("different job ids (\"j\" and \"k\")"));

        let w = why(&[
            trace("a", 0, &train, "", 0, 60),
            trace("b", 1, &train1, "", 30, 60),
            trace("c", 2, &train1, "", 100, 60),
        ]);
        assert_eq!(
            w.as_deref(),
            Some(
                "0-2: they did not run at the same time (one ended 40 s before the other started)"
            )
        );
    }

    #[test]
    fn a_program_is_its_script_or_module() {
        let p = |a: &[&str]| program(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            p(&["python3", "-X", "dev", "/a/b/train.py", "x"]),
            "train.py"
        );
        assert_eq!(p(&["/venv/bin/python", "-m", "pkg.train"]), "-m pkg.train");
        assert_eq!(p(&["/usr/bin/trainer", "--x"]), "trainer");
        assert_eq!(p(&[]), "(no command line)");
    }
}
