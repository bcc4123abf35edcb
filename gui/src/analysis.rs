//! The analyzers' report over the loaded traces, and what the views need on top of it: which
//! records make up each sync line, which compile is which family member, memory series.

use std::collections::HashMap;
use std::sync::Arc;

use tpuscope_analyzers::report::{Input, Report, analyze};
use tpuscope_analyzers::source::{SourceLoc, user_frame};
use tpuscope_analyzers::torch_trace::{self, TorchLogs};
use tpuscope_core::Trace;
use tpuscope_core::event::{Direction, MemoryOrigin, Record};

use crate::lanes::origin;

/// A sync line's key: (the user's file and line, else the innermost frame's).
type LineKey = (Option<(String, u32)>, Option<(String, u32)>);

/// Most points drawn per memory series: more than a window has pixels across.
const MAX_POINTS: usize = 4000;

/// Bytes in use of one device of one source over time.
#[derive(Clone, Debug)]
pub struct MemSeries {
    pub source: usize,
    pub device: i32,
    /// True: the plugin's allocator reported; false: tpuscope's count of live buffers.
    pub reported: bool,
    /// (ms since the source's start, bytes in use).
    pub points: Vec<[f64; 2]>,
    pub limit: Option<i64>,
    pub peak: i64,
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
        traces: &[Option<Arc<Trace>>],
        torch_logs: &[TorchLogs],
    ) -> Analysis {
        let started = std::time::Instant::now();
        let present: Vec<(usize, &Trace)> = traces
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.as_deref().map(|t| (i, t)))
            .collect();
        let inputs: Vec<Input<'_>> = present
            .iter()
            .map(|&(i, trace)| Input {
                path: labels[i].clone(),
                trace,
            })
            .collect();
        let mut report = analyze(&inputs);
        torch_trace::attach(&mut report, &inputs, torch_logs);
        let run_source: Vec<usize> = report
            .traces
            .iter()
            .map(|ti| labels.iter().position(|l| *l == ti.path).unwrap_or(0))
            .collect();

        let mut members = HashMap::new();
        for (fi, f) in report.recompiles.iter().enumerate() {
            let source = run_source.get(f.run).copied().unwrap_or(0);
            for (mi, m) in f.members.iter().enumerate() {
                members.insert((source, m.event), (fi, mi));
            }
        }

        // Sync lines are keyed like the analyzers group them: the user line, else the innermost.
        let key_of = |s: &Option<SourceLoc>| s.as_ref().map(|s| (s.file.clone(), s.line));
        let mut line_of: HashMap<LineKey, usize> = HashMap::new();
        for (i, l) in report.syncs.iter().enumerate() {
            let k = match &l.source {
                Some(_) => (key_of(&l.source), None),
                None => (None, key_of(&l.innermost)),
            };
            line_of.entry(k).or_insert(i);
        }
        let mut sync_events = vec![Vec::new(); report.syncs.len()];
        let mut memory = Vec::new();
        let mut compile_ms = vec![Vec::new(); traces.len()];
        let mut step_ms = vec![Vec::new(); traces.len()];
        for &(source, trace) in &present {
            let t0 = origin(trace);
            let ms = |t: u64| t.saturating_sub(t0) as f64 / 1e6;
            let mut frames: HashMap<u32, (Option<SourceLoc>, Option<SourceLoc>)> = HashMap::new();
            let mut mem: HashMap<(i32, bool), MemSeries> = HashMap::new();
            for (idx, r) in trace.events.iter().enumerate() {
                let stack = match r {
                    Record::Transfer(t) if t.direction == Direction::D2h as i32 && t.sync => {
                        Some(t.stack)
                    }
                    Record::Sync(s) if s.stack != 0 && trace.stacks.contains_key(&s.stack) => {
                        Some(s.stack)
                    }
                    Record::Compile(c) => {
                        compile_ms[source].push(ms(c.t_ns));
                        None
                    }
                    Record::Memory(m) => {
                        let reported = m.origin == MemoryOrigin::PluginStats as i32;
                        let s = mem.entry((m.device, reported)).or_insert(MemSeries {
                            source,
                            device: m.device,
                            reported,
                            points: Vec::new(),
                            limit: None,
                            peak: 0,
                        });
                        s.points.push([ms(m.t_ns), m.bytes_in_use as f64]);
                        s.peak = s
                            .peak
                            .max(m.bytes_in_use)
                            .max(m.peak_bytes_in_use.unwrap_or(0));
                        if let Some(l) = m.bytes_limit.filter(|&l| l > 0) {
                            s.limit = Some(s.limit.map_or(l, |x: i64| x.max(l)));
                        }
                        None
                    }
                    _ => None,
                };
                let Some(stack) = stack else { continue };
                let (user, inner) = frames
                    .entry(stack)
                    .or_insert_with(|| (user_frame(trace, stack), innermost(trace, stack)))
                    .clone();
                let k = match &user {
                    Some(_) => (key_of(&user), None),
                    None => (None, key_of(&inner)),
                };
                if let Some(&line) = line_of.get(&k) {
                    sync_events[line].push((source, idx));
                }
            }
            // Prefer the allocator's numbers for a device that has both.
            let mut series: Vec<MemSeries> = mem.into_values().collect();
            let reported: Vec<i32> = series
                .iter()
                .filter(|s| s.reported)
                .map(|s| s.device)
                .collect();
            series.retain(|s| s.reported || !reported.contains(&s.device));
            series.sort_by_key(|s| s.device);
            for mut s in series {
                s.points = downsample(&s.points);
                memory.push(s);
            }
            let (_, bounds) = tpuscope_analyzers::steps::boundaries(trace);
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

fn innermost(trace: &Trace, stack: u32) -> Option<SourceLoc> {
    let f = trace.stacks.get(&stack)?.frames.first()?;
    Some(SourceLoc {
        file: trace.string(f.file).to_string(),
        line: f.line,
        function: trace.string(f.function).to_string(),
    })
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
