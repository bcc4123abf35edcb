//! Where the time goes: each run's wall time, each phase and each step split into compiling,
//! blocked on the device, device busy and host-bound, once, with the parts adding up to the
//! wall time.
//!
//! Every instant of a run gets exactly one category, the first that holds (docs/time-breakdown.md):
//! 1. **compiling**: a compile or a persistent-cache load is in progress on any thread. A
//!    frontend waits for its compile before it can launch the program, so compile time is on the
//!    critical path even when it runs on a worker thread (JAX) or while the devices still finish
//!    earlier work (that work is then not counted a second time).
//! 2. **blocked**: a host sync is in progress: a device-to-host read that blocked its caller or a
//!    wait on a device event from a Python thread (the report's host syncs). Part of it is the
//!    device finishing what the read needs; `blocked_on_device` says how much.
//! 3. **device busy**: some device runs a launch, from its dispatch to its completion event.
//! 4. **host-bound**: none of these: the devices are idle while the host runs Python, the input
//!    pipeline or dispatch.
//!
//! Device time comes from completion events (`PJRT_LoadedExecutable_Execute`'s
//! `device_complete_events`), which only some frontends ask for. Where launches have none, the
//! time after 1–2 cannot be told apart and is `untimed`, never guessed.

use serde::{Deserialize, Serialize};
use tpuscope_core::Trace;
use tpuscope_core::event::Record;

use crate::column::Column;
use crate::digest::{Digest, UnionOf, merged};
use crate::phases::Phase;
use crate::steps::Steps;
use crate::syncs::SyncView;
use crate::union_walk::{Walk, WalkedUnion};

/// One window of wall time split into its categories, in milliseconds; the categories add up
/// to `wall_ms`.
#[repr(C)]
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Serialize,
    Deserialize,
    bytemuck::Pod,
    bytemuck::Zeroable,
)]
pub struct TimeSplit {
    pub wall_ms: f64,
    pub compiling_ms: f64,
    pub blocked_ms: f64,
    pub device_busy_ms: f64,
    pub host_bound_ms: f64,
    /// Devices busy or idle, unknown: launches without completion events.
    pub untimed_ms: f64,
    /// Of `blocked_ms`, the part some device was still running a launch: the host waited for
    /// device work, not for the copy.
    pub blocked_on_device_ms: f64,
}

/// A category of [`TimeSplit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Compiling,
    Blocked,
    DeviceBusy,
    HostBound,
    Untimed,
}

impl Category {
    pub const ALL: [Category; 5] = [
        Category::DeviceBusy,
        Category::Compiling,
        Category::HostBound,
        Category::Blocked,
        Category::Untimed,
    ];

    /// The words of the headline: `devices busy`, `compiling`, …
    pub fn label(self) -> &'static str {
        match self {
            Category::Compiling => "compiling",
            Category::Blocked => "blocked on reads",
            Category::DeviceBusy => "devices busy",
            Category::HostBound => "host-bound",
            Category::Untimed => "device time unknown",
        }
    }

    /// The Prometheus label value and JSON name.
    pub fn name(self) -> &'static str {
        match self {
            Category::Compiling => "compiling",
            Category::Blocked => "blocked",
            Category::DeviceBusy => "device_busy",
            Category::HostBound => "host_bound",
            Category::Untimed => "untimed",
        }
    }
}

impl TimeSplit {
    pub fn get(&self, c: Category) -> f64 {
        match c {
            Category::Compiling => self.compiling_ms,
            Category::Blocked => self.blocked_ms,
            Category::DeviceBusy => self.device_busy_ms,
            Category::HostBound => self.host_bound_ms,
            Category::Untimed => self.untimed_ms,
        }
    }

    /// The share of the wall time of a category (0 for an empty window).
    pub fn share(&self, c: Category) -> f64 {
        if self.wall_ms > 0.0 {
            self.get(c) / self.wall_ms
        } else {
            0.0
        }
    }

    fn add(&mut self, o: &TimeSplit) {
        self.wall_ms += o.wall_ms;
        self.compiling_ms += o.compiling_ms;
        self.blocked_ms += o.blocked_ms;
        self.device_busy_ms += o.device_busy_ms;
        self.host_bound_ms += o.host_bound_ms;
        self.untimed_ms += o.untimed_ms;
        self.blocked_on_device_ms += o.blocked_on_device_ms;
    }
}

/// A device's busy time over the run (union of its launches, dispatch to completion).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceBusy {
    /// The device's index in its launches (a launch over n devices uses 0..n).
    pub device: u32,
    pub busy_ms: f64,
    /// `busy_ms` over the run's wall time.
    pub utilisation: f64,
}

/// Whether device time is known.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceTiming {
    pub launches: u64,
    /// Launches with a completion event.
    pub timed: u64,
}

impl DeviceTiming {
    pub fn complete(&self) -> bool {
        self.timed == self.launches
    }
}

/// Splits of a run's first steps kept when it has too many to list (the GUI draws these).
pub const KEPT_FIRST_STEPS: usize = 5000;
/// Splits of a run's last steps kept when it has too many to list (the live view's latest).
pub const KEPT_LAST_STEPS: usize = 1000;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One step's split.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepSplit {
    pub number: u32,
    /// Start, from the run's start.
    pub t_ms: f64,
    pub steady: bool,
    pub split: TimeSplit,
}

/// A step at least twice the median steady step, with the category that made it long.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SlowStep {
    pub number: u32,
    pub ms: f64,
    /// `ms` over the median steady step.
    pub times_median: f64,
    /// The category that grew most against the median step's, and by how much.
    pub cause: Category,
    pub cause_extra_ms: f64,
    /// What ran in the step (`jit_train_step compiled`), when the trace says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// p50 / p90 / p99 of the steady steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
}

/// One run's breakdown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunBreakdown {
    pub run: usize,
    pub total: TimeSplit,
    /// Set-up, steady state and tail (absent without steps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<(Phase, TimeSplit)>,
    pub devices: Vec<DeviceBusy>,
    pub device_timing: DeviceTiming,
    /// The steps' splits, in order: all of them, or in a run of more than
    /// [`KEPT_FIRST_STEPS`] + [`KEPT_LAST_STEPS`] the first and the last that many and the slow
    /// ones (what the views draw and name), so a run of days costs what a run of hours does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepSplit>,
    /// Steps whose split `steps` leaves out (in the run's middle, none of them slow).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub steps_left_out: u64,
    /// Steady steps per second of steady state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_time: Option<Percentiles>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slow_steps: Vec<SlowStep>,
    /// The batch the loop feeds each step, when its per-step inputs say it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<Batch>,
}

/// What one step consumes, read from the inputs the host sends every steady step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// The inputs' shared leading dimension.
    pub samples_per_step: u64,
    /// Batch × sequence of a 2-D integer input (token ids), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_step: Option<u64>,
    /// The per-step inputs it was read from: `s32[8,128] f32[8]`.
    pub inputs: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_per_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_s: Option<f64>,
}

/// Sorted, disjoint `[start, end)` intervals with prefix sums of their lengths: the measure of
/// the union inside any window in O(log n).
#[derive(Default)]
struct Union {
    spans: Vec<(u64, u64)>,
    /// `before[i]`: total length of `spans[..i]`.
    before: Vec<u64>,
}

/// Length of sorted, disjoint spans inside `[a, b)`.
fn measure_within(spans: &[(u64, u64)], a: u64, b: u64) -> u64 {
    let from = spans.partition_point(|s| s.1 <= a);
    spans
        .get(from..)
        .unwrap_or_default()
        .iter()
        .take_while(|s| s.0 < b)
        .map(|s| s.1.min(b).saturating_sub(s.0.max(a)))
        .sum()
}

impl Union {
    fn new(v: Vec<(u64, u64)>) -> Union {
        Union::sorted(merged(v))
    }

    /// Of spans already sorted and disjoint.
    fn sorted(spans: Vec<(u64, u64)>) -> Union {
        let mut before = Vec::with_capacity(spans.len() + 1);
        let mut acc = 0u64;
        before.push(0);
        for s in &spans {
            acc += s.1 - s.0;
            before.push(acc);
        }
        Union { spans, before }
    }

    fn of(parts: &[&Union]) -> Union {
        Union::new(parts.iter().flat_map(|u| u.spans.iter().copied()).collect())
    }

    /// Length of the union before `t`.
    #[cfg(test)]
    fn upto(&self, t: u64) -> u64 {
        self.upto_at(t, self.spans.partition_point(|s| s.1 <= t))
    }

    /// [`Union::upto`] for times that mostly grow: the search starts where the last one
    /// (`hint`) ended and gallops forward, a few steps where a binary search over a long run's
    /// spans takes twenty.
    fn upto_near(&self, t: u64, hint: &mut usize) -> u64 {
        let ended = |s: &(u64, u64)| s.1 <= t;
        let from = (*hint).min(self.spans.len());
        let i = if from == 0 || self.spans.get(from - 1).is_some_and(ended) {
            let rest = self.spans.get(from..).unwrap_or_default();
            let mut reach = 1;
            while rest.get(reach - 1).is_some_and(ended) {
                reach *= 2;
            }
            let lo = reach / 2;
            let window = rest.get(lo..reach.min(rest.len())).unwrap_or_default();
            from + lo + window.partition_point(ended)
        } else {
            self.spans.partition_point(ended)
        };
        *hint = i;
        self.upto_at(t, i)
    }

    /// Length of the union before `t`, the spans before `i` those that ended by then.
    fn upto_at(&self, t: u64, i: usize) -> u64 {
        let mut m = self.before[i];
        if let Some(s) = self.spans.get(i)
            && s.0 < t
        {
            m += t - s.0;
        }
        m
    }

    /// Length of the union inside `[a, b)` (the splits take it as two `upto`s, shared by
    /// neighbouring steps).
    #[cfg(test)]
    fn within(&self, a: u64, b: u64) -> u64 {
        if b <= a {
            return 0;
        }
        self.upto(b) - self.upto(a)
    }
}

/// The intervals of one run, by category, ready to be measured over windows.
struct Layers<'a> {
    compiling: Union,
    /// compiling ∪ blocked, compiling ∪ blocked ∪ busy: each category is a difference of two.
    upto_blocked: Union,
    /// Walked from the devices' busy spans (the digest's) and `upto_blocked`, never held: a
    /// span per busy period of any device.
    busy: Vec<&'a [(u64, u64)]>,
    upto_busy: WalkedUnion,
    /// blocked ∩ busy, and that ∩ compiling: blocked time on device work.
    blocked_busy: Union,
    blocked_busy_compiling: Union,
    timed: bool,
}

/// Where the searches of [`Layers::uptos`] ended last: the next start there, for times that
/// mostly grow.
struct Hints<'a> {
    near: [usize; 4],
    busy: Walk<'a>,
}

impl<'a> Layers<'a> {
    /// `busy`: each device's busy spans, sorted and disjoint (see [`merged`]).
    fn new(compiling: Union, blocked: Union, busy: &[&'a [(u64, u64)]], timed: bool) -> Self {
        let blocked_busy = Union::new(intersect(&blocked.spans, UnionOf::new(busy)));
        let upto_blocked = Union::of(&[&compiling, &blocked]);
        let mut lists = busy.to_vec();
        lists.push(&upto_blocked.spans);
        let upto_busy = WalkedUnion::new(&lists);
        Layers {
            busy: busy.to_vec(),
            upto_busy,
            upto_blocked,
            blocked_busy_compiling: Union::new(intersect(
                &blocked_busy.spans,
                compiling.spans.iter().copied(),
            )),
            blocked_busy,
            compiling,
            timed,
        }
    }

    /// Searches that start at the beginning.
    fn hints(&self) -> Hints<'_> {
        let mut lists = self.busy.clone();
        lists.push(&self.upto_blocked.spans);
        Hints {
            near: [0; 4],
            busy: self.upto_busy.walk(&lists),
        }
    }

    /// Each layer's length before `t`, in the order [`Layers::split_between`] takes them; the
    /// searches start from `hints` (where the last ones ended), for times that mostly grow.
    fn uptos<'h>(&'h self, t: u64, hints: &mut Hints<'h>) -> [u64; 5] {
        let [h0, h1, h3, h4] = &mut hints.near;
        [
            self.compiling.upto_near(t, h0),
            self.upto_blocked.upto_near(t, h1),
            self.upto_busy.upto(&mut hints.busy, t),
            self.blocked_busy.upto_near(t, h3),
            self.blocked_busy_compiling.upto_near(t, h4),
        ]
    }

    fn split(&self, a: u64, b: u64) -> TimeSplit {
        // One walk from the mark before `a` on (a window that ends before it starts is empty).
        let mut hints = self.hints();
        let at_a = self.uptos(a.min(b), &mut hints);
        let at_b = self.uptos(b, &mut hints);
        self.split_between(a, b, &at_a, &at_b)
    }

    /// [`Layers::split`] from the layers' lengths before `a` and before `b` (steps that follow
    /// one another share the lengths at their common boundary: found once).
    fn split_between(&self, a: u64, b: u64, at_a: &[u64; 5], at_b: &[u64; 5]) -> TimeSplit {
        let ms = |ns: u64| ns as f64 / 1e6;
        let wall = b.saturating_sub(a);
        let within = |k: usize| {
            if b <= a {
                0
            } else {
                at_b[k].saturating_sub(at_a[k])
            }
        };
        let (c, cb, cbd) = (within(0), within(1), within(2));
        // Blocked time while a device ran, outside compiles.
        let blocked_on_device = within(3).saturating_sub(within(4));
        let rest = wall.saturating_sub(cbd);
        TimeSplit {
            wall_ms: ms(wall),
            compiling_ms: ms(c),
            blocked_ms: ms(cb - c),
            device_busy_ms: ms(cbd - cb),
            host_bound_ms: if self.timed { ms(rest) } else { 0.0 },
            untimed_ms: if self.timed { 0.0 } else { ms(rest) },
            blocked_on_device_ms: ms(blocked_on_device.min(cb - c)),
        }
    }
}

/// The intersection of two sorted disjoint interval lists (the second walked once).
fn intersect(x: &[(u64, u64)], y: impl IntoIterator<Item = (u64, u64)>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut y = y.into_iter().peekable();
    let mut i = 0;
    while let (Some(&xs), Some(&ys)) = (x.get(i), y.peek()) {
        let a = xs.0.max(ys.0);
        let b = xs.1.min(ys.1);
        if a < b {
            out.push((a, b));
        }
        if xs.1 < ys.1 {
            i += 1;
        } else {
            y.next();
        }
    }
    out
}

/// The breakdown of one run (`syncs`: its host syncs, as the report counts them; `steps`: its
/// steps).
pub fn run_breakdown(
    run: usize,
    trace: &Trace,
    d: &Digest,
    syncs: &[SyncView],
    steps: &Steps,
) -> RunBreakdown {
    split_run(run, trace, d, syncs, steps, || throughput(d, steps))
}

/// Steady steps per second, and the batch with its rates: what a run's time split needs of its
/// steps and launches alone (made beside the rest of it, see `report::analysis`).
pub(crate) fn throughput(d: &Digest, steps: &Steps) -> (Option<f64>, Option<Batch>) {
    let steps_per_s = steady_throughput(steps, timed_spans(d));
    let batch = batch(d, steps).map(|b| Batch {
        samples_per_s: steps_per_s.map(|s| s * b.samples_per_step as f64),
        tokens_per_s: steps_per_s.and_then(|s| Some(s * b.tokens_per_step? as f64)),
        ..b
    });
    (steps_per_s, batch)
}

/// [`run_breakdown`], with its [`throughput`] asked for last.
pub(crate) fn split_run(
    run: usize,
    trace: &Trace,
    d: &Digest,
    syncs: &[SyncView],
    steps: &Steps,
    throughput: impl FnOnce() -> (Option<f64>, Option<Batch>),
) -> RunBreakdown {
    let (start, end) = window(trace, d, steps);
    let mut compiling = Vec::new();
    let mut timing = DeviceTiming {
        launches: 0,
        timed: 0,
    };
    for (_, r) in d.others() {
        match r {
            Record::Compile(c) => compiling.push((c.t_ns, c.t_ns + c.dur_ns)),
            Record::Load(l) => compiling.push((l.t_ns, l.t_ns + l.dur_ns)),
            Record::CacheLoad(l) => compiling.push((l.t_ns, l.t_ns + l.dur_ns)),
            Record::ExecuteSummary(s) => timing.launches += s.count,
            _ => {}
        }
    }
    for e in d.launches().filter(|e| !e.failed) {
        timing.launches += 1;
        if e.completion_tracked {
            timing.timed += 1;
        }
    }
    let blocked: Vec<(u64, u64)> = syncs
        .iter()
        .map(|s| (s.t_ns, s.t_ns + s.stall_ns))
        .collect();
    let wall = end.saturating_sub(start).max(1) as f64;
    let device_busy = d
        .device_busy
        .iter()
        .enumerate()
        .map(|(i, spans)| {
            let b = measure_within(spans, start, end);
            DeviceBusy {
                device: u32::try_from(i).unwrap_or(u32::MAX),
                busy_ms: b as f64 / 1e6,
                utilisation: b as f64 / wall,
            }
        })
        .collect();
    let compiling = Union::new(compiling);
    let blocked = Union::new(blocked);
    let per_device: Vec<&[(u64, u64)]> = d.device_busy.iter().map(Vec::as_slice).collect();
    let layers = Layers::new(compiling, blocked, &per_device, timing.complete());
    let total = layers.split(start, end);
    let phases = steps.phases.map_or_else(Vec::new, |p| {
        [
            // The phases tile the window: set-up from its start, the tail to its end.
            (Phase::Setup, start, p.steady_start_ns.max(start)),
            (
                Phase::Steady,
                p.steady_start_ns.max(start),
                p.loop_end_ns.max(start),
            ),
            (
                Phase::Tail,
                p.loop_end_ns.max(start),
                end.max(p.loop_end_ns),
            ),
        ]
        .into_iter()
        .filter(|&(ph, a, b)| b > a || ph == Phase::Steady)
        .map(|(ph, a, b)| (ph, layers.split(a, b)))
        .collect()
    });
    let first_steady = steps.steps.len() - steps.steady().len();
    // A step usually starts where the one before ended: the layers' lengths there are found once.
    let mut at_end: Option<(u64, [u64; 5])> = None;
    let mut hints = layers.hints();
    // Every step's split, as plain rows: a long run's leave memory with the digest's old
    // launches (only the first, the last and the slow ones are kept, `kept_splits`).
    let mut rows: Column<SplitRow> = Column::default();
    if let Some(spill) = d.spill() {
        rows.spill_to(spill);
    }
    for (i, s) in steps.steps.iter().enumerate() {
        let at_start = match at_end {
            Some((t, u)) if t == s.start_ns => u,
            _ => layers.uptos(s.start_ns, &mut hints),
        };
        let at_stop = layers.uptos(s.end_ns, &mut hints);
        at_end = Some((s.end_ns, at_stop));
        rows.push(SplitRow::of(&StepSplit {
            number: s.number,
            t_ms: s.start_ns.saturating_sub(start) as f64 / 1e6,
            steady: i >= first_steady,
            split: layers.split_between(s.start_ns, s.end_ns, &at_start, &at_stop),
        }));
    }
    let splits = || rows.iter().map(|r| r.split());
    let mut steady_ms: Vec<f64> = splits()
        .filter(|s| s.steady)
        .map(|s| s.split.wall_ms)
        .collect();
    steady_ms.sort_by(f64::total_cmp);
    let step_time = percentiles(&steady_ms);
    drop(steady_ms);
    let slow_steps = slow_steps(d, steps, splits, step_time);
    let (step_splits, steps_left_out) = kept_splits(splits, rows.len(), &slow_steps);
    let (steps_per_s, batch) = throughput();
    RunBreakdown {
        run,
        total,
        phases,
        devices: device_busy,
        device_timing: timing,
        steps: step_splits,
        steps_left_out,
        steps_per_s,
        step_time,
        slow_steps,
        batch,
    }
}

/// The splits a run keeps (see [`RunBreakdown::steps`]) and how many it leaves out, of the `n`
/// that `splits` gives.
fn kept_splits<I: Iterator<Item = StepSplit>>(
    splits: impl Fn() -> I,
    n: usize,
    slow: &[SlowStep],
) -> (Vec<StepSplit>, u64) {
    if n <= KEPT_FIRST_STEPS + KEPT_LAST_STEPS {
        return (splits().collect(), 0);
    }
    let kept: Vec<StepSplit> = splits()
        .enumerate()
        .filter(|(i, s)| {
            *i < KEPT_FIRST_STEPS
                || *i >= n - KEPT_LAST_STEPS
                || slow.iter().any(|x| x.number == s.number)
        })
        .map(|(_, s)| s)
        .collect();
    let left_out = (n - kept.len()) as u64;
    (kept, left_out)
}

/// A [`StepSplit`] as plain values, for a [`Column`] (which can leave memory).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SplitRow {
    t_ms: f64,
    split: TimeSplit,
    number: u32,
    steady: u32,
}

impl SplitRow {
    fn of(s: &StepSplit) -> SplitRow {
        SplitRow {
            t_ms: s.t_ms,
            split: s.split,
            number: s.number,
            steady: u32::from(s.steady),
        }
    }

    fn split(&self) -> StepSplit {
        StepSplit {
            number: self.number,
            t_ms: self.t_ms,
            steady: self.steady != 0,
            split: self.split,
        }
    }
}

/// A set of step indices, as bits.
#[derive(Default)]
struct StepSet {
    words: Vec<u64>,
    len: usize,
}

impl StepSet {
    fn insert(&mut self, i: usize) {
        let (w, bit) = (i / 64, 1u64 << (i % 64));
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        if let Some(word) = self.words.get_mut(w)
            && *word & bit == 0
        {
            *word |= bit;
            self.len += 1;
        }
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// The batch, from host-to-device inputs of the same shape sent in nearly every steady step
/// (a loader's batch; weights and constants go once). All such inputs must agree on their
/// leading dimension, else nothing is said: a guess would be a false throughput.
fn batch(d: &Digest, steps: &Steps) -> Option<Batch> {
    let steady = steps.steady();
    if steady.len() < 3 {
        return None;
    }
    let first = steady.first()?.start_ns;
    // The shapes by index: the digest's, then those only failed transfers had.
    let mut shapes: Vec<(&str, &[i64])> = d
        .shapes
        .iter()
        .map(|(dtype, dims)| (dtype.as_str(), dims.as_slice()))
        .collect();
    // The batches the digest keeps as (time, shape), and the failed ones it keeps whole.
    let mut failed: Vec<(u64, u32)> = Vec::new();
    for (_, r) in d.others() {
        if let Record::Transfer(t) = r
            && t.direction == tpuscope_core::event::Direction::H2d as i32
            && !t.dims.is_empty()
        {
            let key = (t.dtype.as_str(), t.dims.as_slice());
            let k = shapes.iter().position(|s| *s == key).unwrap_or_else(|| {
                shapes.push(key);
                shapes.len() - 1
            });
            failed.push((t.t_ns, u32::try_from(k).unwrap_or(u32::MAX)));
        }
    }
    // Per shape, the steady steps it was sent in, as bits: a few shapes, each a bit a step.
    let mut seen: Vec<StepSet> = Vec::new();
    let mut step_of = crate::steps::StepOf::new(steady);
    for (t, shape) in d.batches().chain(failed) {
        if t < first {
            continue;
        }
        if let Some(i) = step_of.find(t) {
            let k = shape as usize;
            if seen.len() <= k {
                seen.resize_with(k + 1, StepSet::default);
            }
            if let Some(set) = seen.get_mut(k) {
                set.insert(i);
            }
        }
    }
    // In the order of the shapes (dtype, then dims).
    let mut every: Vec<(&str, &[i64])> = seen
        .iter()
        .enumerate()
        .filter(|(_, in_steps)| in_steps.len() * 5 >= steady.len() * 4)
        .filter_map(|(k, _)| shapes.get(k).copied())
        .collect();
    every.sort_unstable();
    let lead = every.first()?.1.first().copied()?;
    if lead <= 0 || every.iter().any(|(_, d)| d.first() != Some(&lead)) {
        return None;
    }
    let tokens = every
        .iter()
        .find(|(dtype, d)| d.len() == 2 && (dtype.starts_with('s') || dtype.starts_with('u')))
        .and_then(|(_, d)| d.first()?.checked_mul(*d.get(1)?))
        .and_then(|n| u64::try_from(n).ok());
    let inputs = every
        .iter()
        .map(|(dtype, d)| {
            let dims: Vec<String> = d.iter().map(i64::to_string).collect();
            format!("{dtype}[{}]", dims.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ");
    Some(Batch {
        samples_per_step: u64::try_from(lead).ok()?,
        tokens_per_step: tokens,
        inputs,
        samples_per_s: None,
        tokens_per_s: None,
    })
}

/// (dispatch, last completion) of each timed launch that succeeded and completed.
fn timed_spans(d: &Digest) -> impl Iterator<Item = (u64, u64)> + '_ {
    d.launches_done().filter_map(|(e, done)| {
        let last = done
            .last_ns()
            .filter(|_| !e.failed && e.completion_tracked)?;
        Some((e.t_ns, last.max(e.t_ns)))
    })
}

/// Steady steps per second. With asynchronous dispatch the host may launch steps faster than
/// the devices run them: the steady state then ends when the devices finish its last launch,
/// not when the host launched it.
fn steady_throughput(steps: &Steps, launches: impl Iterator<Item = (u64, u64)>) -> Option<f64> {
    let steady = steps.steady();
    let (first, last) = (steady.first()?, steady.last()?);
    let device_end = launches
        .filter(|(t0, _)| *t0 >= first.start_ns && *t0 < last.end_ns)
        .map(|(_, t1)| t1)
        .max()
        .unwrap_or(0);
    let span = last.end_ns.max(device_end).saturating_sub(first.start_ns);
    (span > 0).then(|| steady.len() as f64 / (span as f64 / 1e9))
}

/// The run's wall time: from the process's start (or the trace's first record) to its last
/// record's end (also where a partial trace's report says recording stopped).
pub(crate) fn window(trace: &Trace, d: &Digest, steps: &Steps) -> (u64, u64) {
    // The process's start when the manifest has it (0: unknown), as the steps take it.
    let manifest_start = trace
        .manifest
        .as_ref()
        .map(|m| m.start_mono_ns)
        .filter(|&t| t > 0);
    let first = d.first_t.or(manifest_start).unwrap_or(0);
    let process_start = manifest_start.unwrap_or(first);
    let start = steps
        .phases
        .map_or(process_start, |p| p.run_start_ns)
        .min(first)
        .min(process_start);
    let end = d
        .end_t
        .into_iter()
        .chain(trace.end.as_ref().map(|e| e.t_ns))
        .max()
        .unwrap_or(start);
    (start, end.max(start))
}

fn percentiles(sorted: &[f64]) -> Option<Percentiles> {
    if sorted.is_empty() {
        return None;
    }
    // Nearest rank: with few steps p99 is the slowest step, as a person expects.
    let at = |p: f64| {
        let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    };
    Some(Percentiles {
        p50_ms: at(0.5),
        p90_ms: at(0.9),
        p99_ms: at(0.99),
    })
}

/// Steady steps of at least twice the median steady step (and 1 ms longer: a 50 µs step twice
/// as long is noise, not news), slowest first, at most ten, each with the category that grew
/// most against the median step's split. Warm-up steps are slow by design (they compile).
fn slow_steps<I: Iterator<Item = StepSplit>>(
    d: &Digest,
    steps: &Steps,
    splits: impl Fn() -> I,
    time: Option<Percentiles>,
) -> Vec<SlowStep> {
    let Some(median) = time.map(|t| t.p50_ms).filter(|m| *m > 0.0) else {
        return Vec::new();
    };
    // The typical split: each category's median over the steady steps.
    let typical: Vec<(Category, f64)> = typical_of(&splits);
    let mut out: Vec<(SlowStep, (u64, u64))> = splits()
        .zip(&steps.steps)
        .filter(|(s, _)| s.steady && s.split.wall_ms >= (2.0 * median).max(median + 1.0))
        .map(|(s, step)| {
            let (cause, extra) = typical
                .iter()
                .map(|&(c, t)| (c, s.split.get(c) - t))
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or((Category::HostBound, 0.0));
            let slow = SlowStep {
                number: s.number,
                ms: s.split.wall_ms,
                times_median: s.split.wall_ms / median,
                cause,
                cause_extra_ms: extra,
                notes: Vec::new(),
            };
            (slow, (step.start_ns, step.end_ns))
        })
        .collect();
    out.sort_by(|a, b| b.0.ms.total_cmp(&a.0.ms));
    out.truncate(10);
    // Notes only for the steps kept (a loop that recompiles every step has thousands of slow
    // steps, and the live view rebuilds this often), from one pass over the trace.
    if out.is_empty() {
        return Vec::new();
    }
    let names = crate::steps::executable_names_of(d);
    let compiles = compiles_in_order(d);
    out.into_iter()
        .map(|(mut slow, (a, b))| {
            slow.notes = step_notes(&compiles, &names, a, b);
            slow
        })
        .collect()
}

/// The compiles of a trace in file order (start, duration, id, name).
fn compiles_in_order(d: &Digest) -> Vec<(u64, u64, u64, &str)> {
    d.others()
        .filter_map(|(_, r)| match r {
            Record::Compile(c) => Some((
                c.t_ns,
                c.dur_ns,
                c.executable_id,
                c.executable_name.as_str(),
            )),
            _ => None,
        })
        .collect()
}

/// Each category's median over the steady steps: what a typical step is made of.
pub fn typical_step(splits: &[StepSplit]) -> Vec<(Category, f64)> {
    typical_of(&|| splits.iter().cloned())
}

/// [`typical_step`] of the splits `splits` gives, walked once per category (a long run's
/// splits are not all held: one category's values at a time).
fn typical_of<I: Iterator<Item = StepSplit>>(splits: &impl Fn() -> I) -> Vec<(Category, f64)> {
    let median = |c: Category| {
        let mut v: Vec<f64> = splits()
            .filter(|s| s.steady)
            .map(|s| s.split.get(c))
            .collect();
        if v.is_empty() {
            return 0.0;
        }
        // The value a sort would put in the middle, without the sort: a long run has millions
        // of steps.
        let mid = v.len() / 2;
        *v.select_nth_unstable_by(mid, f64::total_cmp).1
    };
    Category::ALL.iter().map(|&c| (c, median(c))).collect()
}

/// Why a straggler's steps are slower than the other hosts': the category whose typical
/// per-step time exceeds the median host's the most (`host-bound +12.0 ms per step`).
pub fn straggler_cause(host: &RunBreakdown, all: &[&RunBreakdown]) -> Option<(Category, f64)> {
    let mine = typical_step(&host.steps);
    let others: Vec<Vec<(Category, f64)>> = all.iter().map(|b| typical_step(&b.steps)).collect();
    mine.iter()
        .enumerate()
        .map(|(i, &(c, v))| {
            let mut vals: Vec<f64> = others
                .iter()
                .filter_map(|o| o.get(i).map(|x| x.1))
                .collect();
            vals.sort_by(f64::total_cmp);
            (c, v - vals.get(vals.len() / 2).copied().unwrap_or(0.0))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .filter(|(_, extra)| *extra > 0.0)
}

/// What compiled in a step: `jit_train_step compiled in 412 ms` (the first three, in file
/// order).
fn step_notes(
    compiles: &[(u64, u64, u64, &str)],
    names: &std::collections::HashMap<u64, String>,
    a: u64,
    b: u64,
) -> Vec<String> {
    compiles
        .iter()
        .filter(|&&(t, ..)| t >= a && t < b)
        .take(3)
        .map(|&(_, dur_ns, id, name)| {
            let name = if name.is_empty() {
                names
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| "a program".into())
            } else {
                name.to_string()
            };
            format!(
                "{name} compiled in {}",
                crate::units::duration(dur_ns as f64 / 1e6)
            )
        })
        .collect()
}

/// The breakdowns of several runs added up (a job's hosts side by side stay per run).
pub fn sum(runs: &[RunBreakdown]) -> TimeSplit {
    let mut t = TimeSplit::default();
    for r in runs {
        t.add(&r.total);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_from_a_hint_finds_what_a_search_from_the_start_finds() {
        // Spans from strides (some nested or touching), times that mostly grow and sometimes
        // go back, and times before, inside, between and after the spans.
        let spans: Vec<(u64, u64)> = (0..300u64)
            .map(|i| {
                let a = (i * 7919) % 5000;
                (a, a + (i * 31) % 40)
            })
            .collect();
        let u = Union::new(spans);
        let mut hint = 0;
        for k in 0..3000u64 {
            let t = if k % 97 == 0 { (k * 13) % 2000 } else { k * 2 };
            assert_eq!(u.upto_near(t, &mut hint), u.upto(t), "t {t}");
        }
        let empty = Union::new(Vec::new());
        assert_eq!(empty.upto_near(5, &mut hint), 0);
    }

    #[test]
    fn unions_measure_windows() {
        let u = Union::new(vec![(10, 20), (15, 30), (40, 50), (5, 5)]);
        assert_eq!(u.spans, vec![(10, 30), (40, 50)]);
        assert_eq!(u.within(0, 100), 30);
        assert_eq!(u.within(12, 45), 18 + 5);
        assert_eq!(u.within(30, 40), 0);
        assert_eq!(u.within(45, 44), 0);
        for (a, b) in [(0, 100), (12, 45), (30, 40), (45, 44), (25, 48)] {
            assert_eq!(measure_within(&u.spans, a, b), u.within(a, b), "[{a}, {b})");
        }
    }

    #[test]
    fn categories_take_each_instant_once_in_order() {
        // compiling [0,10), blocked [5,20), busy [15,40), window [0,50).
        let c = Union::new(vec![(0, 10)]);
        let b = Union::new(vec![(5, 20)]);
        let busy = merged(vec![(15, 40)]);
        let l = Layers::new(c, b, &[&busy], true);
        let s = l.split(0, 50);
        let ns = |ms: f64| (ms * 1e6).round() as u64;
        assert_eq!(ns(s.compiling_ms), 10);
        assert_eq!(ns(s.blocked_ms), 10);
        assert_eq!(ns(s.device_busy_ms), 20);
        assert_eq!(ns(s.host_bound_ms), 10);
        assert_eq!(ns(s.blocked_on_device_ms), 5);
        let sum = s.compiling_ms + s.blocked_ms + s.device_busy_ms + s.host_bound_ms + s.untimed_ms;
        assert!((sum - s.wall_ms).abs() < 1e-9);
    }

    /// A fast launch completes before its execute hook records it: the completion comes first
    /// in the trace and must still count (seen under load in CI).
    #[test]
    fn a_completion_recorded_before_its_launch_still_counts() {
        use tpuscope_core::TraceWriter;
        use tpuscope_core::event::{End, Execute, ExecuteComplete, Manifest};
        let m = Manifest {
            start_mono_ns: 1_000,
            ..Manifest::default()
        };
        let mut w = TraceWriter::new(Vec::new(), &m).unwrap();
        for r in [
            Record::ExecuteComplete(ExecuteComplete {
                t_ns: 5_000,
                seq: 1,
                device_index: 0,
                error: None,
            }),
            Record::Execute(Execute {
                t_ns: 2_000,
                dur_ns: 100,
                seq: 1,
                completion_tracked: true,
                ..Execute::default()
            }),
            Record::End(End {
                t_ns: 11_000,
                ..End::default()
            }),
        ] {
            w.write(&r).unwrap();
        }
        let t = tpuscope_core::read_trace(&w.into_inner()).unwrap();
        let d = Digest::of(&t);
        let steps = crate::steps::steps(&t, &d, &[]);
        let b = run_breakdown(0, &t, &d, &[], &steps);
        assert!(b.device_timing.complete());
        assert_eq!(b.devices.len(), 1);
        assert_eq!((b.devices[0].busy_ms * 1e6).round(), 3_000.0);
        assert_eq!((b.total.wall_ms * 1e6).round(), 10_000.0);
        assert_eq!((b.total.host_bound_ms * 1e6).round(), 7_000.0);
    }

    /// A run of more steps than a report lists keeps the first and the last splits and the
    /// slow ones, says how many it left out, and reads the same figures off all of them.
    #[test]
    fn a_long_run_keeps_its_first_last_and_slow_steps() {
        use tpuscope_core::TraceWriter;
        use tpuscope_core::event::{Manifest, Step as Marker};
        let n = KEPT_FIRST_STEPS + KEPT_LAST_STEPS + 500;
        let slow_at = KEPT_FIRST_STEPS + 200;
        let m = Manifest {
            start_mono_ns: 1_000,
            ..Manifest::default()
        };
        let mut w = TraceWriter::new(Vec::new(), &m).unwrap();
        let mut t = 1_000_000u64;
        for i in 1..=n {
            // Steps of 1 ms; step `slow_at` takes 10 ms.
            t += if i == slow_at { 10_000_000 } else { 1_000_000 };
            w.write(&Record::Step(Marker {
                t_ns: t,
                marker: "mark_step".into(),
                ..Marker::default()
            }))
            .unwrap();
        }
        let t = tpuscope_core::read_trace(&w.into_inner()).unwrap();
        let d = Digest::of(&t);
        let steps = crate::steps::steps(&t, &d, &[]);
        assert_eq!(steps.steps.len(), n);
        let b = run_breakdown(0, &t, &d, &[], &steps);
        let numbers: Vec<u32> = b.steps.iter().map(|s| s.number).collect();
        let want: Vec<u32> = (1..=KEPT_FIRST_STEPS as u32)
            .chain([slow_at as u32])
            .chain((n - KEPT_LAST_STEPS + 1) as u32..=n as u32)
            .collect();
        assert_eq!(numbers, want);
        assert_eq!(b.steps_left_out, (n - want.len()) as u64);
        assert_eq!(b.slow_steps.len(), 1);
        assert_eq!(b.slow_steps[0].number, slow_at as u32);
        assert_eq!(b.step_time.map(|p| p.p50_ms), Some(1.0));
        // A short run keeps every step and says nothing of it.
        let json = serde_json::to_value(&b).unwrap();
        assert_eq!(json["steps_left_out"], (n - want.len()) as u64);
        let short = RunBreakdown {
            steps_left_out: 0,
            ..b
        };
        assert!(
            serde_json::to_value(&short)
                .unwrap()
                .get("steps_left_out")
                .is_none()
        );
    }

    #[test]
    fn the_sample_runs_add_up() {
        for name in [
            "jax_lr.tps",
            "jax_shapes.tps",
            "torch_xla_item.tps",
            "torch_tpu_cache.tps",
        ] {
            let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../sample_traces/real")
                .join(name);
            let t = tpuscope_core::reader::read_trace_file(&p).unwrap();
            let d = Digest::of(&t);
            let (syncs, _) = crate::syncs::host_syncs(&t, &d, 0);
            let st: Vec<(u64, u64)> = syncs.iter().map(|s| (s.t_ns, s.stall_ns)).collect();
            let steps = crate::steps::steps(&t, &d, &st);
            let b = run_breakdown(0, &t, &d, &syncs, &steps);
            let s = b.total;
            let sum =
                s.compiling_ms + s.blocked_ms + s.device_busy_ms + s.host_bound_ms + s.untimed_ms;
            assert!((sum - s.wall_ms).abs() < 1e-6, "{name}: {s:?}");
            for st in &b.steps {
                let x = st.split;
                let sum = x.compiling_ms
                    + x.blocked_ms
                    + x.device_busy_ms
                    + x.host_bound_ms
                    + x.untimed_ms;
                assert!(
                    (sum - x.wall_ms).abs() < 1e-6,
                    "{name} step {}: {x:?}",
                    st.number
                );
            }
            let phases: f64 = b.phases.iter().map(|(_, p)| p.wall_ms).sum();
            if !b.phases.is_empty() {
                assert!(
                    (phases - s.wall_ms).abs() < 1e-6,
                    "{name}: phases {phases} of {}",
                    s.wall_ms
                );
            }
            eprintln!("{name}: {s:?} timing {:?}", b.device_timing);
        }
    }
}
