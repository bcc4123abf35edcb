//! Step boundaries and what each step did.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use tpuscope_core::Trace;
use tpuscope_core::event::Record;

/// How the steps were found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "by")]
pub enum StepSource {
    /// Step records of the Python agent (`torch_xla.sync`, `mark_step`, `optimizer.step`, …):
    /// each marks the end of a step.
    Marker {
        marker: String,
    },
    /// No markers: each run of the most executed executable starts a step.
    DominantExecutable {
        executable: String,
    },
    None,
}

/// One step: `[start_ns, end_ns)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub number: u32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Executable launches (graph fragments, in torch_xla's sense of graph breaks).
    pub executes: u32,
    pub distinct_executables: u32,
    pub syncs: u32,
    pub compiles: u32,
    pub stall_ns: u64,
}

/// The steps of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Steps {
    pub source: StepSource,
    pub steps: Vec<Step>,
}

impl Steps {
    /// The worst step after the first (the first carries warm-up compiles and reads).
    pub fn worst_after_first(&self, f: impl Fn(&Step) -> u32) -> Option<u32> {
        self.steps.iter().skip(1).map(f).max()
    }

    /// Index of the step that holds time `t`.
    pub fn step_at(&self, t: u64) -> Option<usize> {
        let i = self.steps.partition_point(|s| s.end_ns <= t);
        self.steps.get(i).filter(|s| s.start_ns <= t).map(|_| i)
    }
}

/// Markers that end a whole step, preferred over per-optimizer markers.
const STEP_MARKERS: &[&str] = &["torch_xla.sync", "mark_step", "user"];

/// Finds the step boundaries of a trace.
pub fn boundaries(trace: &Trace) -> (StepSource, Vec<(u64, u64)>) {
    let mut markers: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    // By name, not id: a graph recompiled each epoch gets a new executable id every time.
    let names = executable_names(trace);
    let mut executes: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    let mut first_t = u64::MAX;
    let mut last_t = 0;
    for r in &trace.events {
        if let Some(t) = r.t_ns() {
            first_t = first_t.min(t);
            last_t = last_t.max(t);
        }
        match r {
            Record::Step(s) => markers.entry(s.marker.as_str()).or_default().push(s.t_ns),
            Record::Execute(e) => executes
                .entry(
                    names
                        .get(&e.executable_id)
                        .map_or("", |n| crate::families::graph_name(n)),
                )
                .or_default()
                .push(e.t_ns),
            _ => {}
        }
    }
    let chosen = STEP_MARKERS
        .iter()
        .find_map(|m| markers.get_key_value(m))
        .or_else(|| markers.iter().max_by_key(|(_, v)| v.len()));
    if let Some((marker, times)) = chosen {
        let mut times = times.clone();
        times.sort_unstable();
        let mut start = first_t;
        let mut out = Vec::new();
        for t in times {
            out.push((start, t));
            start = t;
        }
        return (
            StepSource::Marker {
                marker: (*marker).to_string(),
            },
            out,
        );
    }
    // The loop's executable runs often *and* throughout: a burst of small ops at the end (a
    // reduction per collected output) runs often but is not the step.
    let span = |v: &[u64]| {
        let (lo, hi) = v
            .iter()
            .fold((u64::MAX, 0), |(lo, hi), &t| (lo.min(t), hi.max(t)));
        hi.saturating_sub(lo)
    };
    let all: Vec<u64> = executes.values().flatten().copied().collect();
    let total_span = span(&all).max(1) as f64;
    let Some((&exe, times)) = executes
        .iter()
        .filter(|(_, v)| v.len() >= 3)
        .max_by(|a, b| {
            let score = |v: &Vec<u64>| v.len() as f64 * (span(v) as f64 / total_span);
            score(a.1).total_cmp(&score(b.1))
        })
    else {
        return (StepSource::None, Vec::new());
    };
    let mut times = times.clone();
    times.sort_unstable();
    let mut periods: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    periods.sort_unstable();
    let median = periods.get(periods.len() / 2).copied().unwrap_or(0);
    let mut out: Vec<(u64, u64)> = times.windows(2).map(|w| (w[0], w[1])).collect();
    if let Some(&last) = times.last() {
        // The last step has no next launch to end it: give it a typical length.
        out.push((last, last.saturating_add(median).min(last_t.max(last + 1))));
    }
    (
        StepSource::DominantExecutable {
            executable: exe.to_string(),
        },
        out,
    )
}

/// The names compiles and loads gave executable ids.
pub fn executable_names(trace: &Trace) -> std::collections::HashMap<u64, String> {
    let mut m = std::collections::HashMap::new();
    for r in &trace.events {
        match r {
            Record::Compile(c) => {
                m.entry(c.executable_id)
                    .or_insert_with(|| c.executable_name.clone());
            }
            Record::Load(l) => {
                m.entry(l.executable_id)
                    .or_insert_with(|| l.executable_name.clone());
            }
            // Executables loaded from a persistent cache have no compile record.
            Record::CacheLoad(l) if l.executable_id != 0 => {
                m.entry(l.executable_id)
                    .or_insert_with(|| l.executable_name.clone());
            }
            _ => {}
        }
    }
    m
}

/// Fills in per-step counts; `sync_times` are `(t_ns, stall_ns)` of the host syncs.
pub fn steps(trace: &Trace, sync_times: &[(u64, u64)]) -> Steps {
    let (source, bounds) = boundaries(trace);
    let mut steps: Vec<Step> = bounds
        .iter()
        .enumerate()
        .map(|(i, &(start_ns, end_ns))| Step {
            number: u32::try_from(i + 1).unwrap_or(u32::MAX),
            start_ns,
            end_ns,
            executes: 0,
            distinct_executables: 0,
            syncs: 0,
            compiles: 0,
            stall_ns: 0,
        })
        .collect();
    let mut out = Steps {
        source,
        steps: Vec::new(),
    };
    let mut seen: Vec<HashSet<u64>> = vec![HashSet::new(); steps.len()];
    let index = |t: u64| {
        let i = bounds.partition_point(|b| b.1 <= t);
        bounds.get(i).filter(|b| b.0 <= t).map(|_| i)
    };
    for r in &trace.events {
        match r {
            Record::Execute(e) => {
                if let Some(i) = index(e.t_ns) {
                    steps[i].executes += 1;
                    seen[i].insert(e.executable_id);
                }
            }
            Record::ExecuteSummary(e) => {
                if let Some(i) = index(e.t_start_ns) {
                    steps[i].executes += u32::try_from(e.count).unwrap_or(u32::MAX);
                    seen[i].insert(e.executable_id);
                }
            }
            Record::Compile(c) => {
                if let Some(i) = index(c.t_ns) {
                    steps[i].compiles += 1;
                }
            }
            _ => {}
        }
    }
    for &(t, stall) in sync_times {
        if let Some(i) = index(t) {
            steps[i].syncs += 1;
            steps[i].stall_ns += stall;
        }
    }
    for (s, set) in steps.iter_mut().zip(&seen) {
        s.distinct_executables = u32::try_from(set.len()).unwrap_or(u32::MAX);
    }
    out.steps = steps;
    out
}
