//! Step boundaries and what each step did.

use crate::frontend::Frontend;
use std::collections::BTreeMap;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use serde::{Deserialize, Serialize};
use tpuscope_core::Trace;
use tpuscope_core::event::Record;

use crate::digest::Digest;
use crate::phases::{Origin, Phases, origin_of_name, origin_of_stack};
use crate::source::{SourceLoc, user_frame};

/// How the steps were found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "by")]
pub enum StepSource {
    /// Step records of the Python agent (`torch_xla.sync`, `mark_step`, `optimizer.step`, …):
    /// each marks the end of a step.
    Marker { marker: String },
    /// No markers: each run of the most executed executable starts a step.
    DominantExecutable { executable: String },
    #[default]
    None,
}

impl StepSource {
    /// `marker torch_xla.sync`, `dominant executable jit_train_step`, or `none` (the report's
    /// words).
    pub fn label(&self) -> String {
        match self {
            StepSource::Marker { marker } => format!("marker {marker}"),
            StepSource::DominantExecutable { executable } => {
                format!("dominant executable {executable}")
            }
            StepSource::None => "none".into(),
        }
    }
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
    /// Set-up, steady state and tail (absent without steps).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<Phases>,
}

impl Steps {
    /// The steps of the steady state (after warm-up); the steps after the first when the loop
    /// is too short to have one; all of them in a trace that starts mid-run (`tpuscope attach`:
    /// the loop warmed up before the trace began).
    pub fn steady(&self) -> &[Step] {
        if self.phases.is_some_and(|p| p.warmup_steps == 0) {
            return &self.steps;
        }
        let warmup = crate::phases::WARMUP_STEPS;
        if self.steps.len() > warmup {
            &self.steps[warmup..]
        } else {
            self.steps.get(1..).unwrap_or(&[])
        }
    }

    /// Where time `t` falls; `None` for a run without steps (nothing tells set-up from loop).
    pub fn phase_at(&self, t: u64) -> Option<crate::phases::Phase> {
        self.phases.as_ref().map(|p| p.phase_at(t))
    }

    /// The worst steady-state step (warm-up steps carry the loop's own compiles and reads).
    pub fn worst_steady(&self, f: impl Fn(&Step) -> u32) -> Option<u32> {
        self.steady().iter().map(f).max()
    }

    /// Index of the step that holds time `t`, when that step is one of [`Steps::steady`].
    pub fn steady_step_at(&self, t: u64) -> Option<usize> {
        let first = self.steps.len() - self.steady().len();
        self.step_at(t).filter(|&i| i >= first)
    }

    /// Index of the step that holds time `t`.
    pub fn step_at(&self, t: u64) -> Option<usize> {
        let i = self.steps.partition_point(|s| s.end_ns <= t);
        self.steps.get(i).filter(|s| s.start_ns <= t).map(|_| i)
    }

    /// The number of the step under way at time `t` (numbered as [`Step::number`]), for where a
    /// run was when its trace ends. Past the last step's end it is the step after it when
    /// markers cut the steps (a marker ends a step: what follows the last one is a step not yet
    /// marked), else the last step (a launch starts a step and none started another). `None`
    /// before the first step or without steps.
    pub fn number_under_way(&self, t: u64) -> Option<u32> {
        if let Some(i) = self.step_at(t) {
            return self.steps.get(i).map(|s| s.number);
        }
        let before = self.steps.partition_point(|s| s.start_ns <= t);
        let last = self.steps.get(before.checked_sub(1)?)?;
        let after_the_last = before == self.steps.len() && t >= last.end_ns;
        Some(match self.source {
            StepSource::Marker { .. } if after_the_last => last.number.saturating_add(1),
            _ => last.number,
        })
    }
}

/// Markers that end a whole step, preferred over per-optimizer markers.
const STEP_MARKERS: &[&str] = &["torch_xla.sync", "mark_step", "user"];

/// What a loaded executable is, from the compile or load that produced it.
#[derive(Clone, Debug)]
pub struct ExecutableInfo {
    /// The graph name (`SyncTensorsGraph.52` → `SyncTensorsGraph`).
    pub graph: String,
    /// The user's line that asked for it (the compile's stack, else the program's own).
    pub site: Option<SourceLoc>,
    pub origin: Origin,
    /// Tells apart two programs of one name and site (TorchTPU names a module's forward and
    /// backward alike).
    pub num_outputs: u32,
    pub compile_ns: u64,
}

/// Every executable id of a run with its graph, call site and origin.
pub fn executable_info(trace: &Trace, d: &Digest) -> HashMap<u64, ExecutableInfo> {
    let frontend = crate::report::frontend_of(trace);
    let mut out = HashMap::default();
    for (_, r) in d.others() {
        let (id, name, stack, num_outputs, compile_ns) = match r {
            Record::Compile(c) => (
                c.executable_id,
                &c.executable_name,
                c.stack,
                c.num_outputs,
                c.dur_ns,
            ),
            Record::Load(l) => (l.executable_id, &l.executable_name, l.stack, 0, 0),
            Record::ExecutableSeen(x) => (x.executable_id, &x.executable_name, 0, x.num_outputs, 0),
            Record::CacheLoad(l) if l.executable_id != 0 => {
                (l.executable_id, &l.executable_name, l.stack, 0, 0)
            }
            _ => continue,
        };
        out.entry(id).or_insert_with(|| ExecutableInfo {
            graph: crate::families::graph_name(name).to_string(),
            site: user_frame(trace, stack),
            origin: origin_of_stack(trace, stack)
                .or_else(|| origin_of_name(&frontend, name))
                .unwrap_or(Origin::Graph),
            num_outputs,
            compile_ns,
        });
    }
    out
}

/// Executes of one graph from one call site.
#[derive(Default)]
struct Launches {
    times: Vec<u64>,
    /// Σ over executes of the longer of host dispatch and device completion.
    busy_ns: u64,
    graph_origin: bool,
    /// Σ compile time of the executables launched.
    compile_ns: u64,
    seen: HashSet<u64>,
}

/// A graph's launches are grouped by graph name and call site, not id: a graph recompiled for
/// a new shape is a new executable of the same loop.
type Key<'a> = (&'a str, Option<&'a SourceLoc>, u32);

/// What one pass over a run's launches gathers to find its steps without markers.
struct Scan<'a> {
    groups: HashMap<Key<'a>, Launches>,
    compile_times: Vec<u64>,
}

/// Finds the step boundaries of a run (its trace's tables and the digest of its events):
/// `[start, end)` per step, in order.
pub fn boundaries_of(trace: &Trace, d: &Digest) -> (StepSource, Vec<(u64, u64)>) {
    // `tpuscope.*` markers are the agent's own notes (IR debug switched on), not steps.
    let markers: BTreeMap<&str, &[u64]> = d
        .step_marks
        .iter()
        .filter(|(marker, _)| !marker.starts_with("tpuscope."))
        .map(|(marker, times)| (marker.as_str(), times.as_slice()))
        .collect();
    // TorchTPU dispatches asynchronously: its Python `optimizer.step` runs ahead of the PJRT work
    // of the step (whole loops ahead), so only the launches tell where its steps are.
    let async_dispatch = trace
        .manifest
        .as_ref()
        .is_some_and(|m| crate::report::manifest_frontend(m) == Frontend::TorchTpu);
    let chosen = STEP_MARKERS
        .iter()
        .find_map(|m| markers.get_key_value(m))
        .or_else(|| markers.iter().max_by_key(|(_, v)| v.len()));
    let first_t = d.first_t.unwrap_or(u64::MAX);
    if !async_dispatch && let Some((marker, times)) = chosen {
        // The launches are not needed: not grouped at all.
        return cut_at_markers(marker, times, first_t);
    }
    let info = executable_info(trace, d);
    let Scan {
        groups,
        compile_times,
    } = scan(d, &info);
    let per_marker = chosen
        .filter(|_| async_dispatch)
        .map(|(_, times)| times.len())
        .and_then(|n| launches_per_marker(&groups, n));
    let chosen = chosen.filter(|_| {
        !async_dispatch || (per_marker.is_none() && groups.values().all(|g| g.times.len() < 3))
    });
    if let Some((marker, times)) = chosen {
        return cut_at_markers(marker, times, first_t);
    }
    let Some((&(exe, _, _), g)) = per_marker
        .or_else(|| loop_launches(&groups, true))
        .or_else(|| loop_launches(&groups, false))
    else {
        return (StepSource::None, Vec::new());
    };
    cut_at_launches(exe, g, compile_times, d.last_t.unwrap_or(0))
}

/// Gathers the launches by group, and the compile times of a run.
fn scan<'a>(d: &'a Digest, info: &'a HashMap<u64, ExecutableInfo>) -> Scan<'a> {
    let mut groups: HashMap<Key<'_>, Launches> = HashMap::default();
    let mut compile_times = Vec::new();
    for (_, r) in d.others() {
        if let Record::Compile(c) = r {
            compile_times.push(c.t_ns);
        }
    }
    let key_of = |exe: Option<&'a ExecutableInfo>| -> Key<'a> {
        exe.map_or(("", None, 0), |i| {
            (i.graph.as_str(), i.site.as_ref(), i.num_outputs)
        })
    };
    for (e, done) in d.launches_done() {
        let exe = info.get(&e.executable_id);
        let key = key_of(exe);
        let g = groups.entry(key).or_default();
        if g.seen.insert(e.executable_id) {
            g.compile_ns += exe.map_or(0, |i| i.compile_ns);
            g.graph_origin = exe.is_none_or(|i| i.origin == Origin::Graph);
        }
        g.times.push(e.t_ns);
        g.busy_ns += e.dur_ns;
        // Device time beyond the dispatch (the first device to finish of a multi-device
        // launch, in file order, is enough to rank call sites).
        if let Some(first) = done.first_ns().filter(|_| e.completion_tracked) {
            g.busy_ns += first.saturating_sub(e.t_ns).saturating_sub(e.dur_ns);
        }
    }
    Scan {
        groups,
        compile_times,
    }
}

/// With asynchronous dispatch the markers still count the steps: the launches to cut at are a
/// graph's that ran once per marker (an optimizer's foreach op may run twice a step), the
/// largest such program.
fn launches_per_marker<'g, 'a>(
    groups: &'g HashMap<Key<'a>, Launches>,
    n: usize,
) -> Option<(&'g Key<'a>, &'g Launches)> {
    groups
        .iter()
        .filter(|(_, g)| g.times.len() == n && n >= 3)
        .max_by(|a, b| {
            a.1.graph_origin
                .cmp(&b.1.graph_origin)
                .then(a.1.compile_ns.cmp(&b.1.compile_ns))
                .then(b.0.cmp(a.0))
        })
}

/// The loop is the graph whose launches take the most time, among graphs launched from one
/// call site at least three times; eager ops (an on-device metric sum, init casts) run often
/// but cheaply, and only when no graph repeats do they stand in (`want_graph` false).
fn loop_launches<'g, 'a>(
    groups: &'g HashMap<Key<'a>, Launches>,
    want_graph: bool,
) -> Option<(&'g Key<'a>, &'g Launches)> {
    groups
        .iter()
        .filter(|(_, g)| g.times.len() >= 3 && (g.graph_origin || !want_graph))
        .max_by(|a, b| {
            a.1.busy_ns
                .cmp(&b.1.busy_ns)
                .then(a.1.times.len().cmp(&b.1.times.len()))
                // Deterministic among equals.
                .then(b.0.cmp(a.0))
        })
}

/// Steps that each end at a marker; the first starts a typical step length before it.
fn cut_at_markers(marker: &str, times: &[u64], first_t: u64) -> (StepSource, Vec<(u64, u64)>) {
    let mut times = times.to_vec();
    times.sort_unstable();
    let median = median_period(&times);
    let mut out = Vec::new();
    let mut start = times
        .first()
        .map_or(first_t, |&t| t.saturating_sub(median).max(first_t));
    for t in times {
        out.push((start, t));
        start = t;
    }
    (
        StepSource::Marker {
            marker: marker.to_string(),
        },
        out,
    )
}

/// Steps that each start at a launch of the loop's graph `exe`.
fn cut_at_launches(
    exe: &str,
    g: &Launches,
    mut compile_times: Vec<u64>,
    last_t: u64,
) -> (StepSource, Vec<(u64, u64)>) {
    let mut times = g.times.clone();
    times.sort_unstable();
    let median = median_period(&times);
    let mut out: Vec<(u64, u64)> = times.windows(2).map(|w| (w[0], w[1])).collect();
    if let Some(&last) = times.last() {
        // The last step has no next launch to end it: give it a typical length, but end it at
        // the first compile after it (a step's own compiles come before its launch, so that
        // one belongs to what follows the loop).
        compile_times.sort_unstable();
        let next_compile = compile_times
            .get(compile_times.partition_point(|&t| t <= last))
            .copied()
            .unwrap_or(u64::MAX);
        let end = last
            .saturating_add(median)
            .min(next_compile)
            .min(last_t.max(last + 1))
            .max(last + 1);
        out.push((last, end));
    }
    (
        StepSource::DominantExecutable {
            executable: exe.to_string(),
        },
        out,
    )
}

/// The median gap between sorted times (0 with fewer than two).
fn median_period(times: &[u64]) -> u64 {
    let mut periods: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    periods.sort_unstable();
    periods.get(periods.len() / 2).copied().unwrap_or(0)
}

/// The names compiles, loads and cache loads gave executable ids (made unique as the digest
/// makes them: [`crate::executable_ids`]).
pub fn executable_names(trace: &Trace) -> std::collections::HashMap<u64, String> {
    let mut ids = crate::executable_ids::ExecutableIds::default();
    let mut m = std::collections::HashMap::new();
    for r in &trace.events {
        let unique = ids.apply(r);
        crate::describe::learn_name(&mut m, unique.as_ref().unwrap_or(r));
    }
    m
}

/// [`executable_names`] of a run's digest (the records that name executables are all kept,
/// their ids made unique).
pub fn executable_names_of(d: &Digest) -> std::collections::HashMap<u64, String> {
    let mut m = std::collections::HashMap::new();
    for (_, r) in d.others() {
        crate::describe::learn_name(&mut m, r);
    }
    m
}

/// Fills in per-step counts; `sync_times` are `(t_ns, stall_ns)` of the host syncs.
pub fn steps(trace: &Trace, d: &Digest, sync_times: &[(u64, u64)]) -> Steps {
    let (source, bounds) = boundaries_of(trace, d);
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
    let run_start = trace
        .manifest
        .as_ref()
        .map(|m| m.start_mono_ns)
        .filter(|&t| t > 0)
        .unwrap_or_else(|| d.first_t.unwrap_or(0));
    let run_end = d.last_t.unwrap_or(0);
    let mut out = Steps {
        source,
        steps: Vec::new(),
        phases: if trace.manifest.as_ref().is_some_and(|m| m.role == "attach") {
            Phases::mid_run(&bounds, run_start, run_end)
        } else {
            Phases::from_steps(&bounds, run_start, run_end)
        },
    };
    let mut step_of = StepOf::new(&bounds);
    let mut index = |t: u64| step_of.find(t);
    // Executes and distinct executables per step. Launches come about in time order: while
    // their steps never go back, each step's programs are counted as they go by, with one
    // small set; else (step, executable) pairs are counted distinct after the pass.
    let mut in_order = true;
    let mut in_step: (Option<usize>, rustc_hash::FxHashSet<u64>) = (None, Default::default());
    for (t, id, count) in launched(d) {
        let Some(i) = index(t) else { continue };
        steps[i].executes = steps[i].executes.saturating_add(count);
        if in_step.0 != Some(i) {
            in_order &= in_step.0.is_none_or(|prev| prev < i);
            in_step.0 = Some(i);
            in_step.1.clear();
        }
        if in_step.1.insert(id) {
            steps[i].distinct_executables = steps[i].distinct_executables.saturating_add(1);
        }
    }
    if !in_order {
        let mut seen: Vec<(usize, u64)> = Vec::new();
        for (t, id, _) in launched(d) {
            if let Some(i) = index(t)
                && seen.last() != Some(&(i, id))
            {
                seen.push((i, id));
            }
        }
        seen.sort_unstable();
        seen.dedup();
        steps.iter_mut().for_each(|s| s.distinct_executables = 0);
        for (i, _) in seen {
            if let Some(s) = steps.get_mut(i) {
                s.distinct_executables = s.distinct_executables.saturating_add(1);
            }
        }
    }
    for (_, r) in d.others() {
        if let Record::Compile(c) = r
            && let Some(i) = index(c.t_ns)
        {
            steps[i].compiles += 1;
        }
    }
    for &(t, stall) in sync_times {
        if let Some(i) = index(t) {
            steps[i].syncs += 1;
            steps[i].stall_ns += stall;
        }
    }
    out.steps = steps;
    out
}

/// The step holding a time, for times that mostly come in order (a run's launches): the step
/// of the last time asked or the next one, else found by bisection.
pub(crate) struct StepOf<'a, B> {
    /// Sorted and disjoint.
    bounds: &'a [B],
    /// Where the last time asked fell: the first step ending after it.
    at: usize,
}

/// What [`StepOf`] reads of a step: its start and end.
pub(crate) trait Bounds {
    fn bounds(&self) -> (u64, u64);
}

impl Bounds for (u64, u64) {
    fn bounds(&self) -> (u64, u64) {
        *self
    }
}

impl Bounds for Step {
    fn bounds(&self) -> (u64, u64) {
        (self.start_ns, self.end_ns)
    }
}

impl<'a, B: Bounds> StepOf<'a, B> {
    /// Over steps' (start, end), sorted and disjoint (the steps themselves: their bounds are
    /// not copied).
    pub(crate) fn new(bounds: &'a [B]) -> StepOf<'a, B> {
        StepOf { bounds, at: 0 }
    }

    pub(crate) fn find(&mut self, t: u64) -> Option<usize> {
        let b = self.bounds;
        let end = |s: &B| s.bounds().1;
        // Whether `i` is the first step that ends after `t`.
        let first_after = |i: usize| {
            i <= b.len()
                && i.checked_sub(1)
                    .and_then(|p| b.get(p))
                    .is_none_or(|s| end(s) <= t)
                && b.get(i).is_none_or(|s| end(s) > t)
        };
        let i = if first_after(self.at) {
            self.at
        } else if first_after(self.at + 1) {
            self.at + 1
        } else {
            b.partition_point(|s| end(s) <= t)
        };
        self.at = i;
        b.get(i).filter(|s| s.bounds().0 <= t).map(|_| i)
    }
}

/// What a run launched, in file order, as (time, executable, executes): each launch, and each
/// summary of launches the collector aggregated (at its first launch's time).
fn launched(d: &Digest) -> impl Iterator<Item = (u64, u64, u32)> + '_ {
    let mut summaries = d
        .others()
        .filter_map(|(i, r)| match r {
            Record::ExecuteSummary(e) => Some((i, e)),
            _ => None,
        })
        .peekable();
    let mut launches = d.launches().peekable();
    std::iter::from_fn(move || {
        let summary_first = match (launches.peek(), summaries.peek()) {
            (Some(e), Some(&(i, _))) => i < e.event as usize,
            (None, Some(_)) => true,
            (_, None) => false,
        };
        if summary_first {
            let (_, e) = summaries.next()?;
            let count = u32::try_from(e.count).unwrap_or(u32::MAX);
            Some((e.t_start_ns, e.executable_id, count))
        } else {
            launches.next().map(|e| (e.t_ns, e.executable_id, 1))
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_found_from_the_last_as_by_bisection() {
        let bounds = [(10, 20), (20, 30), (35, 50), (50, 51), (60, 90)];
        let bisect = |t: u64| {
            let i = bounds.partition_point(|b| b.1 <= t);
            bounds.get(i).filter(|b| b.0 <= t).map(|_| i)
        };
        let mut s = StepOf::new(&bounds);
        // In order, with gaps and ends, then back and forth.
        let times: Vec<u64> = (0..100)
            .chain([95, 3, 50, 20, 19, 89, 0, 60, 35, 34])
            .collect();
        for t in times {
            assert_eq!(s.find(t), bisect(t), "t = {t}");
        }
        let mut none = StepOf::<(u64, u64)>::new(&[]);
        assert_eq!(none.find(5), None);
    }

    /// Distinct executables per step, whether launches come in time order or not, with
    /// summaries of executables a step also launched.
    #[test]
    fn distinct_executables_per_step_in_any_order() {
        use tpuscope_core::TraceWriter;
        use tpuscope_core::event::{Execute, ExecuteSummary, Manifest, Step as Marker};
        let marker = |t_ns| {
            Record::Step(Marker {
                t_ns,
                marker: "mark_step".into(),
                ..Marker::default()
            })
        };
        let launch = |t_ns, executable_id| {
            Record::Execute(Execute {
                t_ns,
                executable_id,
                ..Execute::default()
            })
        };
        let distinct = |records: Vec<Record>| -> Vec<u32> {
            let m = Manifest {
                start_mono_ns: 1,
                ..Manifest::default()
            };
            let mut w = TraceWriter::new(Vec::new(), &m).unwrap();
            for r in std::iter::once(launch(5, 9)).chain(records).chain([
                marker(100),
                marker(200),
                marker(300),
            ]) {
                w.write(&r).unwrap();
            }
            let t = tpuscope_core::read_trace(&w.into_inner()).unwrap();
            let s = steps(&t, &Digest::of(&t), &[]);
            s.steps.iter().map(|s| s.distinct_executables).collect()
        };
        // Steps [1, 100), [100, 200), [200, 300).
        let in_order = vec![
            launch(10, 1),
            launch(20, 2),
            launch(30, 1),
            launch(150, 1),
            launch(250, 3),
        ];
        assert_eq!(distinct(in_order), vec![3, 1, 1]);
        // A step revisited: its executables are still counted once each.
        let back = vec![
            launch(10, 1),
            launch(150, 2),
            launch(20, 1),
            launch(30, 4),
            launch(160, 2),
        ];
        assert_eq!(distinct(back), vec![3, 1, 0]);
        let summary = Record::ExecuteSummary(ExecuteSummary {
            t_start_ns: 120,
            executable_id: 1,
            count: 5,
            ..ExecuteSummary::default()
        });
        let summarised = vec![
            launch(10, 1),
            launch(150, 1),
            summary.clone(),
            launch(160, 2),
        ];
        assert_eq!(distinct(summarised), vec![2, 2, 0]);
    }
}
