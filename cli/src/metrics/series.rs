//! What the endpoint exposes: the numbers of one process's report, turned into metric families,
//! and the guard that keeps every counter series monotonic for the life of the endpoint.

use std::collections::{BTreeMap, HashMap};

use tpuscope_analyzers::breakdown::{Category, Percentiles, RunBreakdown};
use tpuscope_analyzers::digest::Digest;
use tpuscope_analyzers::report::{FindingKind, Report};
use tpuscope_core::Trace;

use super::text::{Family, Kind, Labels};

/// One HBM sample row: device, bytes in use (last sample), peak, limit.
#[derive(Clone, Debug, PartialEq)]
pub struct Hbm {
    pub device: i32,
    pub in_use: i64,
    pub peak: i64,
    pub limit: Option<i64>,
}

/// The numbers of one instrumented process, taken from its trace and report. Small and cheap to
/// keep: the endpoint caches one per process between analyses.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcMetrics {
    pub pid: u32,
    pub host: String,
    pub process_index: u32,
    pub job_id: String,
    pub frontend: String,
    pub platform: String,
    pub collector_version: String,
    pub start_seconds: f64,
    pub compiles: u64,
    pub compile_failures: u64,
    pub compile_seconds: f64,
    pub families: u64,
    /// (family, cause) → recompiles: every member of a family after its first, by the cause
    /// found against its nearest earlier sibling.
    pub recompiles: BTreeMap<(String, String), u64>,
    pub recompiles_after_warmup: u64,
    pub syncs: u64,
    pub sync_bytes: u64,
    pub sync_stall_seconds: f64,
    pub steps: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_stores: u64,
    pub cache_load_failures: u64,
    pub hbm: Vec<Hbm>,
    /// Wall time by category, in seconds, the process's runs added up; only the categories
    /// its device timing can tell (no device busy or host-bound without completion events, no
    /// untimed with them).
    pub time_seconds: Vec<(Category, f64)>,
    /// Steady-state step time (the first run's), in milliseconds as the report has it.
    pub step_time: Option<Percentiles>,
    pub steps_per_second: Option<f64>,
    /// (device, busy fraction of the wall time), when every launch had a completion event.
    pub device_busy: Vec<(u32, f64)>,
    /// The report's findings by kind, every kind (0 when none).
    pub findings: Vec<(FindingKind, u64)>,
    pub dropped_events: u64,
    pub errors: u64,
    pub records: u64,
    pub frames_lost: u64,
}

impl ProcMetrics {
    /// `None` until the manifest (the stream's first record) has arrived: without it there is no
    /// host or process index to label the series with.
    /// `trace` holds the tables, `digest` stands for its events.
    pub fn from_analysis(trace: &Trace, digest: &Digest, report: &Report) -> Option<ProcMetrics> {
        let m = trace.manifest.as_ref()?;
        let info = report.traces.first();
        let mut recompiles: BTreeMap<(String, String), u64> = BTreeMap::new();
        for fam in &report.recompiles {
            for member in fam.members.iter().skip(1) {
                let cause = member.cause.unwrap_or(fam.cause).as_str().to_string();
                *recompiles.entry((fam.graph.clone(), cause)).or_insert(0) += 1;
            }
        }
        Some(ProcMetrics {
            pid: m.pid,
            host: m.host.clone(),
            process_index: tpuscope_analyzers::hosts::process_index(trace),
            job_id: m.job_id.clone(),
            frontend: info.map_or_else(|| m.frontend.clone(), |t| t.frontend.name().to_string()),
            platform: trace
                .client
                .as_ref()
                .map(|c| c.platform_name.clone())
                .unwrap_or_default(),
            collector_version: m.collector_version.clone(),
            start_seconds: m.start_wall_ns as f64 / 1e9,
            compiles: report.compiles.total,
            compile_failures: report.compiles.failed,
            compile_seconds: report.compiles.compile_ms / 1e3,
            families: report.compiles.families,
            recompiles,
            recompiles_after_warmup: report.compiles.recompiles,
            syncs: report.sync_total(),
            sync_bytes: report.sync_bytes(),
            sync_stall_seconds: report.sync_stall_ms() / 1e3,
            steps: report.steps.count,
            cache_hits: report.cache.persistent_hits,
            cache_misses: report.cache.recompiled_same_program,
            cache_stores: report.cache.persistent_stores,
            cache_load_failures: report.cache.deserialize_failures,
            hbm: report
                .hbm
                .iter()
                .map(|d| Hbm {
                    device: d.device,
                    in_use: d.in_use_bytes,
                    peak: d.peak_bytes,
                    limit: d.limit_bytes,
                })
                .collect(),
            time_seconds: time_seconds(&report.time),
            step_time: report.time.first().and_then(|b| b.step_time),
            steps_per_second: report.time.first().and_then(|b| b.steps_per_s),
            device_busy: report
                .time
                .first()
                .filter(|b| b.device_timing.complete())
                .map(|b| {
                    b.devices
                        .iter()
                        .map(|d| (d.device, d.utilisation))
                        .collect()
                })
                .unwrap_or_default(),
            findings: FindingKind::ALL
                .iter()
                .map(|&k| {
                    (
                        k,
                        report.findings.iter().filter(|f| f.kind == k).count() as u64,
                    )
                })
                .collect(),
            dropped_events: info.map_or(0, |t| t.dropped_events),
            errors: report.error_total(),
            records: digest.events as u64,
            frames_lost: tpuscope_analyzers::live_notes::viewer_lost_of(digest),
        })
    }

    /// The labels every series of this process carries.
    fn labels(&self) -> Labels {
        vec![
            ("host", self.host.clone()),
            ("process_index", self.process_index.to_string()),
            ("pid", self.pid.to_string()),
        ]
    }
}

/// Seconds by category over `runs`. A category is there when some run can measure it: device
/// busy and host-bound need every launch's completion event, untimed is their sum without.
fn time_seconds(runs: &[RunBreakdown]) -> Vec<(Category, f64)> {
    let measured = |c: Category, b: &RunBreakdown| match c {
        Category::DeviceBusy | Category::HostBound => b.device_timing.complete(),
        Category::Untimed => !b.device_timing.complete(),
        Category::Compiling | Category::Blocked => true,
    };
    Category::ALL
        .into_iter()
        .filter(|&c| runs.iter().any(|b| measured(c, b)))
        .map(|c| (c, runs.iter().map(|b| b.total.get(c)).sum::<f64>() / 1e3))
        .collect()
}

/// One watched process: its numbers (once its manifest arrived) and whether it still streams.
pub struct ProcState<'a> {
    pub metrics: &'a ProcMetrics,
    pub running: bool,
}

fn with(mut base: Labels, extra: &[(&'static str, String)]) -> Labels {
    base.extend(extra.iter().cloned());
    base
}

/// Every family, in a fixed order, for the processes seen so far. `host` labels the series that
/// belong to the endpoint rather than to one process.
pub fn families(host: &str, procs: &[ProcState<'_>]) -> Vec<Family> {
    let mut out = process_families(host, procs);
    out.extend(compile_families(procs));
    out.extend(sync_step_cache_families(procs));
    out.extend(time_families(procs));
    out.extend(hbm_families(procs));
    out.extend(health_families(procs));
    out
}

/// A family with one sample per process, labelled with the process alone.
fn per_process(
    procs: &[ProcState<'_>],
    name: &'static str,
    kind: Kind,
    help: &'static str,
    value: impl Fn(&ProcState<'_>) -> f64,
) -> Family {
    let mut f = Family::new(name, kind, help);
    for p in procs {
        f.add(p.metrics.labels(), value(p));
    }
    f
}

/// Which processes there are, who each is, whether it still streams and when it started.
fn process_families(host: &str, procs: &[ProcState<'_>]) -> Vec<Family> {
    use Kind::Gauge;
    let mut processes = Family::new(
        "tpuscope_processes",
        Gauge,
        "Instrumented processes of this `tpuscope run` whose live stream was read (running or ended).",
    );
    processes.add(vec![("host", host.to_string())], procs.len() as f64);
    let mut info = Family::new(
        "tpuscope_info",
        Gauge,
        "Always 1: who a process is (frontend, job, platform, collector version); join on host, process_index, pid.",
    );
    for p in procs {
        let m = p.metrics;
        info.add(
            with(
                m.labels(),
                &[
                    ("frontend", m.frontend.clone()),
                    ("job_id", m.job_id.clone()),
                    ("platform", m.platform.clone()),
                    ("collector_version", m.collector_version.clone()),
                ],
            ),
            1.0,
        );
    }
    vec![
        processes,
        info,
        per_process(
            procs,
            "tpuscope_process_running",
            Gauge,
            "1 while the process's live stream is open, 0 once it ended.",
            |p| if p.running { 1.0 } else { 0.0 },
        ),
        per_process(
            procs,
            "tpuscope_process_start_time_seconds",
            Gauge,
            "Start of the process's recording, seconds since the Unix epoch.",
            |p| p.metrics.start_seconds,
        ),
    ]
}

/// Compiles, graph families and recompiles.
fn compile_families(procs: &[ProcState<'_>]) -> Vec<Family> {
    use Kind::{Counter, Gauge};
    let mut recompiles = Family::new(
        "tpuscope_recompiles_total",
        Counter,
        "Compiles of a graph family after its first, by family (executable name) and cause against the nearest earlier sibling (constant_changed, shape_changed, dtype_changed, structure_changed, options_changed, identical_program, unknown); warm-up recompiles included.",
    );
    for p in procs {
        for ((family, cause), n) in &p.metrics.recompiles {
            recompiles.add(
                with(
                    p.metrics.labels(),
                    &[("family", family.clone()), ("cause", cause.clone())],
                ),
                *n as f64,
            );
        }
    }
    vec![
        per_process(
            procs,
            "tpuscope_compiles_total",
            Counter,
            "PJRT compiles (failed ones included).",
            |p| p.metrics.compiles as f64,
        ),
        per_process(
            procs,
            "tpuscope_compile_failures_total",
            Counter,
            "PJRT compiles that returned an error.",
            |p| p.metrics.compile_failures as f64,
        ),
        per_process(
            procs,
            "tpuscope_compile_seconds_total",
            Counter,
            "Wall time spent in PJRT compiles.",
            |p| p.metrics.compile_seconds,
        ),
        per_process(
            procs,
            "tpuscope_graph_families",
            Gauge,
            "Graph families: distinct graphs compiled, constants and sizes abstracted.",
            |p| p.metrics.families as f64,
        ),
        recompiles,
        per_process(
            procs,
            "tpuscope_recompiles_after_warmup",
            Gauge,
            "Recompiles the report counts as findings (after the first two steps). A gauge: it can fall when step detection changes its mind as the run goes on.",
            |p| p.metrics.recompiles_after_warmup as f64,
        ),
    ]
}

/// Host syncs, steps and the persistent compilation cache.
fn sync_step_cache_families(procs: &[ProcState<'_>]) -> Vec<Family> {
    use Kind::Counter;
    vec![
        per_process(
            procs,
            "tpuscope_host_syncs_total",
            Counter,
            "Host syncs: blocking device-to-host reads and waits on device results.",
            |p| p.metrics.syncs as f64,
        ),
        per_process(
            procs,
            "tpuscope_host_sync_bytes_total",
            Counter,
            "Bytes read back to the host by host syncs.",
            |p| p.metrics.sync_bytes as f64,
        ),
        per_process(
            procs,
            "tpuscope_sync_stall_seconds_total",
            Counter,
            "Time the host stood blocked in host syncs.",
            |p| p.metrics.sync_stall_seconds,
        ),
        per_process(
            procs,
            "tpuscope_steps_total",
            Counter,
            "Training or serving steps (agent markers, else launches of the dominant executable).",
            |p| p.metrics.steps as f64,
        ),
        per_process(
            procs,
            "tpuscope_cache_hits_total",
            Counter,
            "Executables loaded from the persistent compilation cache.",
            |p| p.metrics.cache_hits as f64,
        ),
        per_process(
            procs,
            "tpuscope_cache_misses_total",
            Counter,
            "Compiles of a program (with the same options) already compiled earlier: hits that should have been.",
            |p| p.metrics.cache_misses as f64,
        ),
        per_process(
            procs,
            "tpuscope_cache_stores_total",
            Counter,
            "Executables stored into the persistent compilation cache.",
            |p| p.metrics.cache_stores as f64,
        ),
        per_process(
            procs,
            "tpuscope_cache_load_failures_total",
            Counter,
            "Persistent-cache loads that failed.",
            |p| p.metrics.cache_load_failures as f64,
        ),
    ]
}

/// Where the time goes: wall time by category, step time, throughput, device busy.
fn time_families(procs: &[ProcState<'_>]) -> Vec<Family> {
    use Kind::{Counter, Gauge};
    let mut time = Family::new(
        "tpuscope_time_seconds_total",
        Counter,
        "Wall time of the process's run so far by category, each instant counted once, in this order: compiling (a compile or cache load in progress), blocked (a host sync), device_busy (a device runs a launch, dispatch to completion), else host_bound; untimed instead of the last two when launches have no completion event. The categories add up to the run's wall time.",
    );
    let mut step = Family::new(
        "tpuscope_step_seconds",
        Gauge,
        "Steady-state step time by quantile (0.5, 0.9, 0.99: nearest rank over the steady steps so far).",
    );
    let mut busy = Family::new(
        "tpuscope_device_busy_ratio",
        Gauge,
        "Fraction of the run's wall time a device ran a launch (dispatch to completion event), by device; absent when launches have no completion events.",
    );
    for p in procs {
        let m = p.metrics;
        for (c, secs) in &m.time_seconds {
            time.add(
                with(m.labels(), &[("category", c.name().to_string())]),
                *secs,
            );
        }
        if let Some(t) = m.step_time {
            for (q, v) in [("0.5", t.p50_ms), ("0.9", t.p90_ms), ("0.99", t.p99_ms)] {
                step.add(with(m.labels(), &[("quantile", q.to_string())]), v / 1e3);
            }
        }
        for (device, ratio) in &m.device_busy {
            busy.add(with(m.labels(), &[("device", device.to_string())]), *ratio);
        }
    }
    let mut rate = Family::new(
        "tpuscope_steps_per_second",
        Gauge,
        "Steady-state steps per second (to the devices' completion of the last steady step when dispatch runs ahead of them).",
    );
    for p in procs {
        if let Some(r) = p.metrics.steps_per_second {
            rate.add(p.metrics.labels(), r);
        }
    }
    vec![time, step, rate, busy]
}

/// Device memory by device: in use, peak and limit.
fn hbm_families(procs: &[ProcState<'_>]) -> Vec<Family> {
    use Kind::Gauge;
    let mut hbm = Family::new(
        "tpuscope_hbm_bytes_in_use",
        Gauge,
        "Device memory in use at the latest sample, by device.",
    );
    let mut hbm_peak = Family::new(
        "tpuscope_hbm_peak_bytes",
        Gauge,
        "Highest device memory in use sampled so far, by device.",
    );
    let mut hbm_limit = Family::new(
        "tpuscope_hbm_bytes_limit",
        Gauge,
        "Device memory the allocator can use, by device (when the plugin reports it).",
    );
    for p in procs {
        for d in &p.metrics.hbm {
            let labels = with(p.metrics.labels(), &[("device", d.device.to_string())]);
            hbm.add(labels.clone(), d.in_use as f64);
            hbm_peak.add(labels.clone(), d.peak as f64);
            if let Some(limit) = d.limit {
                hbm_limit.add(labels, limit as f64);
            }
        }
    }
    vec![hbm, hbm_peak, hbm_limit]
}

/// Findings, and what the collector, the live stream and PJRT lost or failed.
fn health_families(procs: &[ProcState<'_>]) -> Vec<Family> {
    use Kind::{Counter, Gauge};
    let mut findings = Family::new(
        "tpuscope_findings",
        Gauge,
        "Findings of `tpuscope report` on the trace so far, by kind (recompile, setup_compile, sync, cache, oom, hbm, graph_break, guard_failure, host). A gauge: a finding can go as the run goes on.",
    );
    for p in procs {
        for (kind, n) in &p.metrics.findings {
            findings.add(
                with(p.metrics.labels(), &[("kind", kind.to_string())]),
                *n as f64,
            );
        }
    }
    vec![
        findings,
        per_process(
            procs,
            "tpuscope_dropped_events_total",
            Counter,
            "Events the collector dropped because its queue was full (missing from the trace and these counts).",
            |p| p.metrics.dropped_events as f64,
        ),
        per_process(
            procs,
            "tpuscope_live_frames_lost_total",
            Counter,
            "Trace frames this endpoint's live stream lost because it read slower than the workload wrote (the trace file has them).",
            |p| p.metrics.frames_lost as f64,
        ),
        per_process(
            procs,
            "tpuscope_pjrt_errors_total",
            Counter,
            "PJRT calls that returned an error.",
            |p| p.metrics.errors as f64,
        ),
        per_process(
            procs,
            "tpuscope_trace_records_total",
            Counter,
            "Event records received from the process's live stream.",
            |p| p.metrics.records as f64,
        ),
    ]
}

/// Keeps counters monotonic across scrapes: each analysis recomputes the counts from the whole
/// trace, and regrouping (a family split or merged as members arrive, steps re-detected) could
/// move a count between series or lower one. A scraper reads a drop as a counter reset and
/// turns it into a spike, so a counter series never goes below the highest value it showed, and
/// never disappears while the endpoint lives.
#[derive(Debug, Default)]
pub struct Monotonic {
    seen: HashMap<&'static str, BTreeMap<Labels, f64>>,
}

impl Monotonic {
    pub fn apply(&mut self, families: &mut [Family]) {
        for f in families.iter_mut().filter(|f| f.kind == Kind::Counter) {
            let seen = self.seen.entry(f.name).or_default();
            for (labels, value) in f.samples.iter_mut() {
                let high = seen.entry(labels.clone()).or_insert(*value);
                if *value < *high {
                    *value = *high;
                } else {
                    *high = *value;
                }
            }
            for (labels, high) in seen.iter() {
                f.samples.entry(labels.clone()).or_insert(*high);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::text::encode;
    use super::*;

    fn proc(pid: u32, compiles: u64, recompiles: &[(&str, &str, u64)]) -> ProcMetrics {
        ProcMetrics {
            pid,
            host: "h\"1".into(),
            process_index: 3,
            compiles,
            recompiles: recompiles
                .iter()
                .map(|(f, c, n)| ((f.to_string(), c.to_string()), *n))
                .collect(),
            hbm: vec![Hbm {
                device: 0,
                in_use: 10,
                peak: 20,
                limit: None,
            }],
            ..ProcMetrics::default()
        }
    }

    fn sample(fams: &[Family], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let f = fams.iter().find(|f| f.name == name)?;
        f.samples
            .iter()
            .find(|(l, _)| {
                labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, v)| *v)
    }

    #[test]
    fn every_process_series_carries_host_process_index_and_pid() {
        let a = proc(7, 4, &[("jit_f", "shape_changed", 3)]);
        let b = proc(8, 1, &[]);
        let fams = families(
            "me",
            &[
                ProcState {
                    metrics: &a,
                    running: true,
                },
                ProcState {
                    metrics: &b,
                    running: false,
                },
            ],
        );
        for f in fams.iter().filter(|f| f.name != "tpuscope_processes") {
            for labels in f.samples.keys() {
                let names: Vec<&str> = labels.iter().map(|(k, _)| *k).collect();
                assert_eq!(&names[..3], ["host", "process_index", "pid"], "{}", f.name);
            }
        }
        assert_eq!(
            sample(&fams, "tpuscope_compiles_total", &[("pid", "7")]),
            Some(4.0)
        );
        assert_eq!(
            sample(
                &fams,
                "tpuscope_recompiles_total",
                &[
                    ("pid", "7"),
                    ("family", "jit_f"),
                    ("cause", "shape_changed")
                ]
            ),
            Some(3.0)
        );
        assert_eq!(
            sample(&fams, "tpuscope_process_running", &[("pid", "8")]),
            Some(0.0)
        );
        assert_eq!(
            sample(&fams, "tpuscope_hbm_bytes_in_use", &[("device", "0")]),
            Some(10.0)
        );
        // No limit reported: no sample rather than a made-up one.
        assert_eq!(sample(&fams, "tpuscope_hbm_bytes_limit", &[]), None);
        let text = encode(&fams);
        assert!(text.contains("host=\"h\\\"1\""), "{text}");
        assert!(text.contains("# TYPE tpuscope_recompiles_total counter\n"));
        assert!(text.contains("# TYPE tpuscope_hbm_bytes_in_use gauge\n"));
    }

    #[test]
    fn counters_never_fall_nor_vanish_but_gauges_follow_the_analysis() {
        let mut guard = Monotonic::default();
        let first = proc(7, 5, &[("jit_f", "constant_changed", 2)]);
        let mut fams = families(
            "me",
            &[ProcState {
                metrics: &first,
                running: true,
            }],
        );
        guard.apply(&mut fams);
        // A later analysis regrouped: fewer compiles counted, the recompiles moved to a new cause.
        let mut second = proc(7, 4, &[("jit_f", "shape_changed", 1)]);
        second.hbm[0].in_use = 5;
        let mut fams = families(
            "me",
            &[ProcState {
                metrics: &second,
                running: true,
            }],
        );
        guard.apply(&mut fams);
        assert_eq!(sample(&fams, "tpuscope_compiles_total", &[]), Some(5.0));
        assert_eq!(
            sample(
                &fams,
                "tpuscope_recompiles_total",
                &[("cause", "constant_changed")]
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &fams,
                "tpuscope_recompiles_total",
                &[("cause", "shape_changed")]
            ),
            Some(1.0)
        );
        assert_eq!(sample(&fams, "tpuscope_hbm_bytes_in_use", &[]), Some(5.0));
        // And growth passes through.
        let third = proc(7, 9, &[]);
        let mut fams = families(
            "me",
            &[ProcState {
                metrics: &third,
                running: true,
            }],
        );
        guard.apply(&mut fams);
        assert_eq!(sample(&fams, "tpuscope_compiles_total", &[]), Some(9.0));
    }

    #[test]
    fn time_counters_never_fall_but_step_gauges_follow_the_analysis() {
        let mut guard = Monotonic::default();
        let mut first = proc(7, 1, &[]);
        first.time_seconds = vec![
            (Category::DeviceBusy, 1.0),
            (Category::Compiling, 4.0),
            (Category::HostBound, 2.0),
            (Category::Blocked, 0.5),
        ];
        first.step_time = Some(Percentiles {
            p50_ms: 10.0,
            p90_ms: 12.0,
            p99_ms: 30.0,
        });
        first.steps_per_second = Some(90.0);
        first.device_busy = vec![(0, 0.25), (1, 0.5)];
        let run = |m: &ProcMetrics, guard: &mut Monotonic| {
            let mut fams = families(
                "me",
                &[ProcState {
                    metrics: m,
                    running: true,
                }],
            );
            guard.apply(&mut fams);
            fams
        };
        let fams = run(&first, &mut guard);
        let cat = |fams: &[Family], c: &str| {
            sample(fams, "tpuscope_time_seconds_total", &[("category", c)])
        };
        assert_eq!(cat(&fams, "compiling"), Some(4.0));
        assert_eq!(cat(&fams, "untimed"), None);
        assert_eq!(
            sample(&fams, "tpuscope_step_seconds", &[("quantile", "0.99")]),
            Some(0.03)
        );
        assert_eq!(
            sample(&fams, "tpuscope_device_busy_ratio", &[("device", "1")]),
            Some(0.5)
        );
        let text = encode(&fams);
        assert!(
            text.contains("# TYPE tpuscope_time_seconds_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE tpuscope_step_seconds gauge\n"),
            "{text}"
        );
        // A later analysis moved time between categories and saw slower steps.
        let mut second = first.clone();
        second.time_seconds[1].1 = 3.0;
        second.time_seconds[2].1 = 4.0;
        second.step_time = Some(Percentiles {
            p50_ms: 8.0,
            p90_ms: 9.0,
            p99_ms: 20.0,
        });
        second.steps_per_second = Some(100.0);
        second.device_busy = vec![(0, 0.2), (1, 0.4)];
        let fams = run(&second, &mut guard);
        assert_eq!(cat(&fams, "compiling"), Some(4.0));
        assert_eq!(cat(&fams, "host_bound"), Some(4.0));
        assert_eq!(
            sample(&fams, "tpuscope_step_seconds", &[("quantile", "0.5")]),
            Some(0.008)
        );
        assert_eq!(
            sample(&fams, "tpuscope_steps_per_second", &[("pid", "7")]),
            Some(100.0)
        );
        assert_eq!(
            sample(&fams, "tpuscope_device_busy_ratio", &[("device", "0")]),
            Some(0.2)
        );
        // No steps, no device timing: no step gauges and no busy ratio rather than zeros.
        let bare = proc(8, 1, &[]);
        let fams = families(
            "me",
            &[ProcState {
                metrics: &bare,
                running: true,
            }],
        );
        assert_eq!(sample(&fams, "tpuscope_step_seconds", &[]), None);
        assert_eq!(sample(&fams, "tpuscope_steps_per_second", &[]), None);
        assert_eq!(sample(&fams, "tpuscope_device_busy_ratio", &[]), None);
    }
}
