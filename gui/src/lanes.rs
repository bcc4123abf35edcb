//! Timeline data: the spans of each lane (a host thread or a device), sorted, with a summary
//! pyramid so that a frame draws at most about one bar per pixel column whatever the zoom.

use std::collections::{BTreeMap, HashMap};

use tpuscope_analyzers::digest::Digest;
use tpuscope_core::Trace;
use tpuscope_core::event::{Direction, Record};

/// What a span stands for (its colour).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Compile,
    Execute,
    /// Device work of an execute (dispatch to completion on that device).
    Device,
    H2d,
    D2h,
    Sync,
    Cache,
    Error,
    Note,
    Other,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::Compile,
        Kind::Execute,
        Kind::Device,
        Kind::H2d,
        Kind::D2h,
        Kind::Sync,
        Kind::Cache,
        Kind::Error,
        Kind::Note,
        Kind::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Compile => "compile",
            Kind::Execute => "execute",
            Kind::Device => "device work",
            Kind::H2d => "host→device",
            Kind::D2h => "device→host",
            Kind::Sync => "sync",
            Kind::Cache => "cache",
            Kind::Error => "error",
            Kind::Note => "note",
            Kind::Other => "other",
        }
    }
}

/// Spans per block of the first summary level, and the factor between levels.
const FANOUT: usize = 16;

/// What a range of spans amounts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    pub max_end: u64,
    pub max_dur: u64,
    /// Index of the longest span.
    pub longest: u32,
}

impl Summary {
    const EMPTY: Summary = Summary {
        max_end: 0,
        max_dur: 0,
        longest: u32::MAX,
    };

    fn add(self, o: Summary) -> Summary {
        Summary {
            max_end: self.max_end.max(o.max_end),
            max_dur: self.max_dur.max(o.max_dur),
            longest: if self.longest == u32::MAX || o.max_dur > self.max_dur {
                o.longest
            } else {
                self.longest
            },
        }
    }
}

/// The spans of one lane, sorted by start.
#[derive(Clone, Debug, Default)]
pub struct Spans {
    pub start: Vec<u64>,
    pub end: Vec<u64>,
    pub kind: Vec<Kind>,
    /// Index of the record in its trace's `events`.
    pub event: Vec<u32>,
    /// Running maximum of `end`: the first span that can reach a time is found by bisection.
    prefix_max_end: Vec<u64>,
    /// `levels[k][b]` summarises spans `[b·16^(k+1), (b+1)·16^(k+1))`.
    levels: Vec<Vec<Summary>>,
}

/// One drawn bar: a span, or spans narrower than a pixel merged.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bar {
    /// Pixels from the left of the lane (may lie outside `0..width` for clipped spans).
    pub x0: f32,
    pub x1: f32,
    /// The colour: the kind of the longest span in it.
    pub kind: Kind,
    /// The span it stands for (its longest one when merged).
    pub span: u32,
    pub count: u32,
}

impl Spans {
    fn from_unsorted(mut items: Vec<(u64, u64, Kind, u32)>) -> Spans {
        items.sort_by_key(|s| (s.0, s.1));
        let n = items.len();
        let mut s = Spans {
            start: Vec::with_capacity(n),
            end: Vec::with_capacity(n),
            kind: Vec::with_capacity(n),
            event: Vec::with_capacity(n),
            prefix_max_end: Vec::with_capacity(n),
            levels: Vec::new(),
        };
        let mut running = 0;
        for (a, b, k, e) in items {
            let b = b.max(a);
            running = running.max(b);
            s.start.push(a);
            s.end.push(b);
            s.kind.push(k);
            s.event.push(e);
            s.prefix_max_end.push(running);
        }
        // The first level straight from the spans (a summary per span would be as large as the
        // spans themselves), each next one from the level below.
        if n > 1 {
            let first: Vec<Summary> = (0..n)
                .step_by(FANOUT)
                .map(|b| (b..(b + FANOUT).min(n)).fold(Summary::EMPTY, |a, i| a.add(s.single(i))))
                .collect();
            s.levels.push(first);
        }
        while let Some(below) = s.levels.last().filter(|l| l.len() > 1) {
            let level: Vec<Summary> = below
                .chunks(FANOUT)
                .map(|c| c.iter().fold(Summary::EMPTY, |a, &b| a.add(b)))
                .collect();
            s.levels.push(level);
        }
        s
    }

    pub fn len(&self) -> usize {
        self.start.len()
    }

    pub fn is_empty(&self) -> bool {
        self.start.is_empty()
    }

    fn single(&self, i: usize) -> Summary {
        Summary {
            max_end: self.end[i],
            max_dur: self.end[i] - self.start[i],
            longest: i as u32,
        }
    }

    /// Summary of spans `i..j`, from the largest aligned blocks that fit.
    pub fn summary(&self, i: usize, j: usize) -> Summary {
        let mut acc = Summary::EMPTY;
        let mut p = i;
        while p < j {
            let mut k = 0;
            let mut size = 1;
            while k < self.levels.len() && p.is_multiple_of(size * FANOUT) && p + size * FANOUT <= j
            {
                k += 1;
                size *= FANOUT;
            }
            let s = if k == 0 {
                self.single(p)
            } else {
                self.levels[k - 1][p / size]
            };
            acc = acc.add(s);
            p += size;
        }
        acc
    }

    /// Calls `f` for every span in `i..j` ending at or after `t`, descending only into blocks
    /// that hold one (spans that started before the view and reach into it).
    fn each_reaching(&self, i: usize, j: usize, t: u64, f: &mut impl FnMut(usize)) {
        let mut p = i;
        while p < j {
            let mut k = 0;
            let mut size = 1;
            while k < self.levels.len() && p.is_multiple_of(size * FANOUT) && p + size * FANOUT <= j
            {
                k += 1;
                size *= FANOUT;
            }
            self.descend(k, p / size, t, f);
            p += size;
        }
    }

    /// `f` for the spans of block `b` of level `k` (level 0: span `b`) that reach `t`.
    fn descend(&self, k: usize, b: usize, t: u64, f: &mut impl FnMut(usize)) {
        if k == 0 {
            if self.end.get(b).is_some_and(|&e| e >= t) {
                f(b);
            }
            return;
        }
        if self.levels[k - 1].get(b).is_none_or(|s| s.max_end < t) {
            return;
        }
        for c in b * FANOUT..(b + 1) * FANOUT {
            self.descend(k - 1, c, t, f);
        }
    }

    /// The bars to draw for the view `[v0, v1)` (ns) over `width` pixels, appended to `out`:
    /// spans at least a pixel wide one by one, narrower ones merged per pixel column (and with
    /// touching neighbours of the same kind), so the work is bounded by the pixels, not the
    /// spans. A merged bar has the colour of its longest span.
    pub fn bars(&self, v0: f64, v1: f64, width: f32, out: &mut Vec<Bar>) {
        let n = self.len();
        if n == 0 || width <= 0.0 || v1 <= v0 {
            return;
        }
        let ns_per_px = (v1 - v0) / f64::from(width);
        let px = |t: u64| ((t as f64 - v0) / ns_per_px) as f32;
        let lo = v0.max(0.0).floor() as u64;
        let hi = v1.max(0.0).ceil() as u64;
        let first = self.prefix_max_end.partition_point(|&e| e < lo);
        let last = self.start.partition_point(|&s| s <= hi);
        let mut acc: Option<Bar> = None;
        let push = |out: &mut Vec<Bar>, acc: &mut Option<Bar>, b: Bar, wide: bool| {
            if wide {
                out.extend(acc.take());
                out.push(b);
                return;
            }
            match acc {
                // Touching merged bars become one only when they show the same kind: a long run
                // of executes stays one bar, a compile among them keeps its own colour.
                // Anything within one pixel is one bar whatever its kinds.
                Some(a)
                    if b.x0 <= a.x1 + 1.0
                        && (b.kind == a.kind || b.x1 <= a.x1 || b.x1 - a.x0 < 1.0) =>
                {
                    a.x1 = a.x1.max(b.x1);
                    let longer = self.end[b.span as usize] - self.start[b.span as usize]
                        > self.end[a.span as usize] - self.start[a.span as usize];
                    if longer {
                        a.span = b.span;
                        a.kind = b.kind;
                    }
                    a.count += b.count;
                }
                _ => {
                    out.extend(acc.take());
                    *acc = Some(b);
                }
            }
        };
        let bar = |i: usize, count: u32, end: u64| Bar {
            x0: px(self.start[i]),
            x1: px(end),
            kind: self.kind[i],
            span: i as u32,
            count,
        };
        // Spans that started before the view but reach into it.
        let before = self.start[first..last].partition_point(|&s| s < lo) + first;
        let mut reaching = Vec::new();
        self.each_reaching(first, before, lo, &mut |i| reaching.push(i));
        for i in reaching {
            let wide = (self.end[i] - self.start[i]) as f64 >= ns_per_px;
            push(out, &mut acc, bar(i, 1, self.end[i]), wide);
        }
        let mut i = before;
        while i < last {
            let dur = self.end[i] - self.start[i];
            if dur as f64 >= ns_per_px {
                push(out, &mut acc, bar(i, 1, self.end[i]), true);
                i += 1;
                continue;
            }
            // Every span starting in this pixel column.
            let col = ((self.start[i] as f64 - v0) / ns_per_px).floor();
            let col_end = v0 + (col + 1.0) * ns_per_px;
            let j = (i + self.start[i..last].partition_point(|&s| (s as f64) < col_end)).max(i + 1);
            let s = self.summary(i, j);
            if s.max_dur as f64 >= ns_per_px {
                // A wide span starts in this column too: take this one alone and go on.
                push(out, &mut acc, bar(i, 1, self.end[i]), false);
                i += 1;
                continue;
            }
            let longest = s.longest as usize;
            let b = Bar {
                x0: px(self.start[i]),
                x1: px(s.max_end),
                kind: self.kind[longest],
                span: s.longest,
                count: (j - i) as u32,
            };
            push(out, &mut acc, b, false);
            i = j;
        }
        out.extend(acc);
    }

    /// Spans of this lane whose record is `event` (usually one).
    pub fn find_event(&self, event: u32) -> Option<usize> {
        self.event.iter().position(|&e| e == event)
    }
}

/// A row of the timeline.
#[derive(Clone, Debug)]
pub struct Lane {
    pub source: usize,
    pub label: String,
    pub device: bool,
    pub spans: Spans,
}

/// Everything the timeline draws.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    pub lanes: Vec<Lane>,
    /// Latest end over all lanes (ns since each source's start).
    pub total_ns: u64,
    /// Earliest start over all lanes (the process may start long before its first PJRT call).
    pub first_ns: u64,
    /// Start of each source (monotonic ns): times are drawn relative to it.
    pub t0: Vec<u64>,
    /// Step boundaries: (source, ns since its start, step number).
    pub steps: Vec<(usize, u64, u64)>,
    /// Each source's phases, in ns since its start: (source, steady state start, tail start).
    pub phases: Vec<(usize, u64, u64)>,
    pub spans: usize,
    /// The sources are the hosts of one job, drawn on the job timeline: `t0` of each is the
    /// same instant on its own clock, so one x is one moment on every host's lanes.
    pub aligned: bool,
}

/// The start a trace's times are drawn from: its manifest's, unless events came earlier.
pub fn origin(trace: &Trace) -> u64 {
    let first = trace
        .events
        .iter()
        .filter_map(Record::t_ns)
        .filter(|&t| t > 0)
        .min();
    match (trace.manifest.as_ref().map(|m| m.start_mono_ns), first) {
        (Some(m), Some(f)) if m > 0 => m.min(f),
        (_, Some(f)) => f,
        (Some(m), None) => m,
        (None, None) => 0,
    }
}

/// The job a trace belongs to: the one a merge put it in, else its manifest's.
fn job_of(trace: &Trace) -> &str {
    match (&trace.segment, &trace.manifest) {
        (Some(s), _) => &s.job_id,
        (None, Some(m)) => &m.job_id,
        (None, None) => "",
    }
}

/// For the hosts of one job (a merged file, traces sharing a job id, or the processes of one
/// multi-process PJRT client), each source's origin
/// on its own monotonic clock such that all origins are the same job-timeline instant: the
/// earliest start of any host. `None` when the traces are not one job's hosts.
fn job_origins(traces: &[(usize, &Trace)]) -> Option<Vec<u64>> {
    let job = job_of(traces.first()?.1);
    let shared_id = !job.is_empty() && traces.iter().all(|(_, t)| job_of(t) == job);
    let all: Vec<&Trace> = traces.iter().map(|(_, t)| *t).collect();
    if traces.len() < 2 || !(shared_id || tpuscope_analyzers::hosts::one_pjrt_job(&all)) {
        return None;
    }
    let offsets: Vec<i128> = traces
        .iter()
        .map(|(_, t)| i128::from(tpuscope_core::align::job_offset_ns(t)))
        .collect();
    let start = traces
        .iter()
        .zip(&offsets)
        .map(|((_, t), off)| i128::from(origin(t)) + off)
        .min()?;
    Some(
        offsets
            .iter()
            .map(|off| u64::try_from((start - off).max(0)).unwrap_or(0))
            .collect(),
    )
}

impl Timeline {
    /// Lanes of every source, in source order: its threads (by thread id), then its devices.
    /// The hosts of one job are drawn on the job timeline (see [`Timeline::aligned`]).
    pub fn build(traces: &[(usize, &Trace, &Digest)]) -> Timeline {
        let mut tl = Timeline::default();
        let sources = traces.iter().map(|(s, _, _)| *s + 1).max().unwrap_or(0);
        tl.t0 = vec![0; sources];
        let multi = traces.len() > 1;
        let plain: Vec<(usize, &Trace)> = traces.iter().map(|&(s, t, _)| (s, t)).collect();
        let job = job_origins(&plain);
        tl.aligned = job.is_some();
        for (k, &(source, trace, digest)) in traces.iter().enumerate() {
            let t0 = job
                .as_ref()
                .and_then(|o| o.get(k).copied())
                .unwrap_or_else(|| origin(trace));
            tl.t0[source] = t0;
            let prefix = if multi {
                format!("{} · ", short_label(&source_label(trace, source)))
            } else {
                String::new()
            };
            tl.add_source(source, trace, digest, t0, &prefix);
        }
        tl
    }

    /// The phases, steps and lanes of one source whose times are drawn from `t0`.
    fn add_source(&mut self, source: usize, trace: &Trace, digest: &Digest, t0: u64, prefix: &str) {
        let rel = |t: u64| t.saturating_sub(t0);
        let (step_source, bounds) = tpuscope_analyzers::steps::boundaries_of(trace, digest);
        let step_marker = match step_source {
            tpuscope_analyzers::steps::StepSource::Marker { marker } => Some(marker),
            _ => None,
        };
        let last = trace
            .events
            .iter()
            .filter_map(Record::t_ns)
            .max()
            .unwrap_or(t0);
        if let Some(p) = tpuscope_analyzers::phases::Phases::from_steps(&bounds, t0, last) {
            self.phases
                .push((source, rel(p.steady_start_ns), rel(p.loop_end_ns)));
        }
        let mut spans = SourceSpans::new(t0, step_marker.as_deref());
        for (idx, r) in trace.events.iter().enumerate() {
            spans.add(idx as u32, r);
        }
        self.steps
            .extend(spans.steps.iter().map(|&(t, no)| (source, t, no)));
        if step_marker.is_none() {
            // No markers: the analyzers' steps (runs of the dominant executable).
            for (i, (start, _)) in bounds.iter().enumerate() {
                self.steps.push((source, rel(*start), i as u64 + 1));
            }
        }
        for (thread, items) in spans.threads {
            self.push(Lane {
                source,
                label: format!("{prefix}thread {thread}"),
                device: false,
                spans: Spans::from_unsorted(items),
            });
        }
        for (device, items) in spans.devices {
            let label = if device < 0 {
                format!("{prefix}summarized executes")
            } else {
                format!("{prefix}device {device}")
            };
            self.push(Lane {
                source,
                label,
                device: true,
                spans: Spans::from_unsorted(items),
            });
        }
    }

    fn push(&mut self, lane: Lane) {
        if let Some(&m) = lane.spans.prefix_max_end.last() {
            self.total_ns = self.total_ns.max(m);
        }
        if let Some(&s) = lane.spans.start.first() {
            self.first_ns = if self.lanes.is_empty() {
                s
            } else {
                self.first_ns.min(s)
            };
        }
        self.spans += lane.spans.len();
        self.lanes.push(lane);
    }

    /// The lane and span showing record `event` of `source`.
    pub fn locate(&self, source: usize, event: usize) -> Option<(usize, usize)> {
        let e = u32::try_from(event).ok()?;
        // Host lanes first: a transfer is also drawn on its device's lane.
        let mut order: Vec<usize> = (0..self.lanes.len()).collect();
        order.sort_by_key(|&l| self.lanes[l].device);
        order
            .into_iter()
            .filter(|&l| self.lanes[l].source == source)
            .find_map(|l| self.lanes[l].spans.find_event(e).map(|s| (l, s)))
    }
}

/// A span before sorting: (start, end, kind, event), in ns since the source's origin.
type Item = (u64, u64, Kind, u32);

/// The spans of one source gathered record by record, by lane.
struct SourceSpans<'m> {
    /// The source's origin: spans are kept in ns since it.
    t0: u64,
    /// The marker that starts a step, when the trace has step markers.
    step_marker: Option<&'m str>,
    threads: BTreeMap<u32, Vec<Item>>,
    /// Device index → its spans; -1 holds the summarized executes.
    devices: BTreeMap<i64, Vec<Item>>,
    /// Execute seq → (dispatch time, event); device → its last completion.
    launched: HashMap<u64, (u64, u32)>,
    busy_until: HashMap<u32, u64>,
    /// Marked steps: (ns since the origin, step number).
    steps: Vec<(u64, u64)>,
}

impl<'m> SourceSpans<'m> {
    fn new(t0: u64, step_marker: Option<&'m str>) -> Self {
        SourceSpans {
            t0,
            step_marker,
            threads: BTreeMap::new(),
            devices: BTreeMap::new(),
            launched: HashMap::new(),
            busy_until: HashMap::new(),
            steps: Vec::new(),
        }
    }

    fn rel(&self, t: u64) -> u64 {
        t.saturating_sub(self.t0)
    }

    /// A span of `dur` ns from `t` on a host thread's lane.
    fn on_thread(&mut self, thread: u32, t: u64, dur: u64, k: Kind, e: u32) {
        let at = self.rel(t);
        self.threads
            .entry(thread)
            .or_default()
            .push((at, at + dur, k, e));
    }

    /// A span already relative to the origin on a device's lane.
    fn on_device(&mut self, device: i64, start: u64, end: u64, k: Kind, e: u32) {
        self.devices
            .entry(device)
            .or_default()
            .push((start, end, k, e));
    }

    /// Record `e` (its index in the trace's events) as spans on its lanes, or as a step.
    fn add(&mut self, e: u32, r: &Record) {
        match r {
            Record::Compile(c) => {
                let k = if c.error.is_some() {
                    Kind::Error
                } else {
                    Kind::Compile
                };
                self.on_thread(c.thread, c.t_ns, c.dur_ns, k, e);
            }
            Record::Load(l) => self.on_thread(l.thread, l.t_ns, l.dur_ns, Kind::Compile, e),
            Record::Execute(x) => {
                let k = if x.error.is_some() {
                    Kind::Error
                } else {
                    Kind::Execute
                };
                self.on_thread(x.thread, x.t_ns, x.dur_ns, k, e);
                self.launched.insert(x.seq, (x.t_ns, e));
            }
            Record::ExecuteComplete(c) => {
                if let Some(&(t, _)) = self.launched.get(&c.seq) {
                    let from = self.busy_until.get(&c.device_index).copied().unwrap_or(0);
                    let start = t.max(from).min(c.t_ns);
                    self.busy_until.insert(c.device_index, c.t_ns);
                    let k = if c.error.is_some() {
                        Kind::Error
                    } else {
                        Kind::Device
                    };
                    let (start, end) = (self.rel(start), self.rel(c.t_ns));
                    self.on_device(i64::from(c.device_index), start, end, k, e);
                }
            }
            Record::ExecuteSummary(s) => {
                let (start, end) = (self.rel(s.t_start_ns), self.rel(s.t_end_ns));
                self.on_device(-1, start, end, Kind::Execute, e);
            }
            Record::Transfer(x) => {
                let k = if x.error.is_some() {
                    Kind::Error
                } else if x.direction == Direction::D2h as i32 {
                    Kind::D2h
                } else {
                    Kind::H2d
                };
                self.on_thread(x.thread, x.t_ns, x.dur_ns, k, e);
                if x.device >= 0 {
                    let start = self.rel(x.t_ns);
                    self.on_device(i64::from(x.device), start, start + x.dur_ns, k, e);
                }
            }
            Record::Sync(s) => self.on_thread(s.thread, s.t_ns, s.dur_ns, Kind::Sync, e),
            Record::CacheStore(c) => self.on_thread(c.thread, c.t_ns, c.dur_ns, Kind::Cache, e),
            Record::CacheLoad(c) => {
                let k = if c.ok { Kind::Cache } else { Kind::Error };
                self.on_thread(c.thread, c.t_ns, c.dur_ns, k, e);
            }
            Record::Error(x) => self.on_thread(x.thread, x.t_ns, 0, Kind::Error, e),
            Record::Note(n) if n.t_ns > 0 => self.on_thread(n.thread, n.t_ns, 0, Kind::Note, e),
            Record::Client(c) => self.on_thread(c.thread, c.t_ns, c.dur_ns, Kind::Other, e),
            Record::Step(s) if self.step_marker == Some(s.marker.as_str()) => {
                let no = self.steps.len() as u64 + 1;
                self.steps.push((self.rel(s.t_ns), no));
            }
            _ => {}
        }
    }
}

fn source_label(trace: &Trace, source: usize) -> String {
    if let Some(s) = &trace.segment {
        return format!("p{} {}", s.process_index, s.host);
    }
    match &trace.manifest {
        Some(m)
            if !m.job_id.is_empty()
                || tpuscope_analyzers::hosts::pjrt_topology(trace).is_some() =>
        {
            format!(
                "p{} {}",
                tpuscope_analyzers::hosts::process_index(trace),
                m.host
            )
        }
        Some(m) if !m.host.is_empty() => format!("{} pid {}", m.host, m.pid),
        _ => format!("trace {}", source + 1),
    }
}

fn short_label(s: &str) -> String {
    s.chars().take(24).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(items: &[(u64, u64)]) -> Spans {
        Spans::from_unsorted(
            items
                .iter()
                .enumerate()
                .map(|(i, &(a, b))| (a, b, Kind::Execute, i as u32))
                .collect(),
        )
    }

    #[test]
    fn summary_matches_a_scan() {
        let items: Vec<(u64, u64)> = (0..1000u64)
            .map(|i| (i * 10, i * 10 + (i * 7919) % 97))
            .collect();
        let s = spans(&items);
        for (i, j) in [
            (0, 1000),
            (3, 17),
            (16, 256),
            (255, 513),
            (999, 1000),
            (17, 18),
        ] {
            let want_end = (i..j).map(|k| s.end[k]).max().unwrap();
            let want_dur = (i..j).map(|k| s.end[k] - s.start[k]).max().unwrap();
            let got = s.summary(i, j);
            assert_eq!(got.max_end, want_end, "{i}..{j}");
            assert_eq!(got.max_dur, want_dur, "{i}..{j}");
            let l = got.longest as usize;
            assert!((i..j).contains(&l));
            assert_eq!(s.end[l] - s.start[l], want_dur);
        }
    }

    #[test]
    fn dense_spans_merge_into_few_bars() {
        // 100k spans of 10 ns every 20 ns over 2 ms, seen on 1000 px: 2 µs per pixel.
        let items: Vec<(u64, u64)> = (0..100_000u64).map(|i| (i * 20, i * 20 + 10)).collect();
        let s = spans(&items);
        let mut out = Vec::new();
        s.bars(0.0, 2_000_000.0, 1000.0, &mut out);
        assert!(out.len() <= 1000, "{} bars", out.len());
        let covered: u32 = out.iter().map(|b| b.count).sum();
        assert_eq!(covered, 100_000);
        // Zoomed in to 2 µs on 1000 px, every span is 5 px wide: each drawn alone.
        out.clear();
        s.bars(1_000_000.0, 1_002_000.0, 1000.0, &mut out);
        assert!(out.iter().all(|b| b.count == 1));
        assert!((100..=101).contains(&out.len()), "{}", out.len());
    }

    #[test]
    fn a_long_span_from_before_the_view_is_drawn() {
        let mut items = vec![(0, 1_000_000)];
        items.extend((0..5000u64).map(|i| (10 + i * 100, 20 + i * 100)));
        let s = spans(&items);
        let mut out = Vec::new();
        s.bars(900_000.0, 950_000.0, 500.0, &mut out);
        assert!(
            out.iter()
                .any(|b| s.start[b.span as usize] == 0 && b.x0 < 0.0 && b.x1 > 500.0)
        );
        // Wide bars are not merged with the small ones around them.
        assert!(out.iter().filter(|b| b.count == 1).count() >= 1);
    }

    #[test]
    fn gaps_wider_than_a_pixel_stay_gaps() {
        let s = spans(&[(0, 1), (1000, 1001)]);
        let mut out = Vec::new();
        s.bars(0.0, 2000.0, 100.0, &mut out);
        assert_eq!(out.len(), 2);
    }
}
