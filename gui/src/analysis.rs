//! The analyzers' report over the loaded traces, and what the views need on top of it: which
//! records make up each sync line, which compile is which family member, memory series.

use std::collections::HashMap;
use std::sync::Arc;

use tpuscope_analyzers::report::{self, Input, Report};
use tpuscope_analyzers::torch_trace::TorchLogs;
use tpuscope_core::event::Record;

use crate::data::Run;

/// Most points drawn per memory series: more than a window has pixels across.
const MAX_POINTS: usize = 4000;

/// Bytes in use of one device of one source over time: [`SeriesFold::series`](tpuscope_analyzers::hbm::SeriesFold::series) (the report's own
/// samples and origin rule) in plot coordinates.
#[derive(Clone, Debug)]
pub struct MemSeries {
    pub source: usize,
    pub device: i32,
    /// (ms since the source's start, bytes in use).
    pub points: Vec<[f64; 2]>,
    pub limit: Option<i64>,
}

/// Everything computed from the traces off the UI thread.
#[derive(Clone, Debug)]
pub struct Analysis {
    pub report: Report,
    /// Report run → source index.
    pub run_source: Vec<usize>,
    /// Per `report.syncs` line: its records (source, event index).
    pub sync_events: Vec<Vec<(usize, usize)>>,
    /// (source, compile event) → (index in `report.recompiles`, member index).
    pub members: HashMap<(usize, usize), (usize, usize)>,
    pub memory: Vec<MemSeries>,
    /// Compile start times per source (ms since its start), for markers.
    pub compile_ms: Vec<Vec<f64>>,
    /// Step starts per source (ms since its start).
    pub step_ms: Vec<Vec<f64>>,
    /// Folded stacks (`outer;…;inner`, value): compile time and sync stall, in ns.
    pub flame_compile: Vec<(String, u64)>,
    pub flame_sync: Vec<(String, u64)>,
    pub elapsed_ms: f64,
}

impl Analysis {
    /// `traces[i]` is source `i` (`None` when it could not be read); `torch_logs` are dynamo's
    /// logs of those traces (matched by label), shown next to the PJRT findings.
    pub fn compute(
        labels: &[String],
        runs: &[Option<Arc<Run>>],
        torch_logs: &[TorchLogs],
    ) -> Analysis {
        let started = std::time::Instant::now();
        let present: Vec<(usize, &Run)> = runs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_deref().map(|r| (i, r)))
            .collect();
        let inputs: Vec<Input<'_>> = present
            .iter()
            .map(|&(i, run)| Input {
                digest: Some(run.digest.as_ref()),
                ..Input::new(labels[i].clone(), &run.trace)
            })
            .collect();
        let report = report::build(
            &inputs,
            &report::Options {
                torch_logs: torch_logs.to_vec(),
                threads: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
                ..report::Options::default()
            },
        );
        let run_source: Vec<usize> = report
            .traces
            .iter()
            .map(|ti| labels.iter().position(|l| *l == ti.path).unwrap_or(0))
            .collect();
        let source_of = |run: usize| run_source.get(run).copied().unwrap_or(0);

        let mut members = HashMap::new();
        for (fi, f) in report.recompiles.iter().enumerate() {
            for (mi, m) in f.members.iter().enumerate() {
                members.insert((source_of(f.run), m.event), (fi, mi));
            }
        }
        let sync_events: Vec<Vec<(usize, usize)>> = report
            .syncs
            .iter()
            .map(|l| {
                l.events
                    .iter()
                    .map(|&(run, e)| (source_of(run), e))
                    .collect()
            })
            .collect();

        let mut memory = Vec::new();
        let mut compile_ms = vec![Vec::new(); runs.len()];
        let mut step_ms = vec![Vec::new(); runs.len()];
        for &(source, run) in &present {
            let (trace, digest) = (run.trace.as_ref(), run.digest.as_ref());
            let t0 = run.lanes.origin;
            let ms = |t: u64| t.saturating_sub(t0) as f64 / 1e6;
            compile_ms[source] = digest
                .others()
                .filter_map(|(_, r)| match r {
                    Record::Compile(c) => Some(ms(c.t_ns)),
                    _ => None,
                })
                .collect();
            for s in digest.memory.series(0) {
                let points: Vec<[f64; 2]> = s
                    .samples
                    .iter()
                    .map(|x| [ms(x.t_ns), x.in_use as f64])
                    .collect();
                memory.push(MemSeries {
                    source,
                    device: s.device,
                    points: downsample(&points),
                    limit: s.limit,
                });
            }
            let (_, bounds) = tpuscope_analyzers::steps::boundaries_of(trace, digest);
            step_ms[source] = bounds.iter().map(|(a, _)| ms(*a)).collect();
        }
        let (flame_compile, flame_sync) = crate::flame::folded_all(&present);
        Analysis {
            report,
            run_source,
            sync_events,
            members,
            memory,
            compile_ms,
            step_ms,
            flame_compile,
            flame_sync,
            elapsed_ms: started.elapsed().as_secs_f64() * 1e3,
        }
    }
}

/// At most [`MAX_POINTS`] points: the highest value of each bucket, so peaks survive.
fn downsample(points: &[[f64; 2]]) -> Vec<[f64; 2]> {
    if points.len() <= MAX_POINTS {
        return points.to_vec();
    }
    let per = points.len().div_ceil(MAX_POINTS);
    points
        .chunks(per)
        .filter_map(|c| c.iter().copied().max_by(|a, b| a[1].total_cmp(&b[1])))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downsampling_keeps_peaks() {
        let mut pts: Vec<[f64; 2]> = (0..10_000).map(|i| [f64::from(i), 1.0]).collect();
        pts[7777][1] = 99.0;
        let d = downsample(&pts);
        assert!(d.len() <= MAX_POINTS);
        assert!(d.iter().any(|p| p[1] == 99.0));
    }
}
