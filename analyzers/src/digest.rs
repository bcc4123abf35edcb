//! One pass over a run's event records into what the analyses read of them: the launches as a
//! few integers each (packed, [`Launches`]), with when their devices finished them and each
//! device's busy time (their completions folded away), the host-to-device batches as (time,
//! shape), the memory samples folded into their series, the step markers' times, the few
//! records the analyses need whole (compiles, host reads, errors, notes, clocks, …) with their
//! place in the file, and the time span.
//!
//! Why: a decoded record takes about 200 bytes and most of a long trace is launches, completions
//! and transfers, of which the analyses read a few fields. A [`DigestBuilder`] takes records one
//! at a time, so `tpuscope report` can stream a trace file and never hold its records
//! ([`Digest::of`] does the same for a trace decoded whole). Every analysis of the report reads a
//! run through its digest and the trace's tables (strings, stacks, blobs, manifest), never
//! `Trace::events`, so both ways give the same report.

use tpuscope_core::event::{Direction, Record, RecordKind};
use tpuscope_core::stream::Skimmed;
use tpuscope_core::wire::TransferRef;
use tpuscope_core::{ReadError, Trace, TraceStream};

use crate::executable_ids::ExecutableIds;
use std::sync::Arc;

use crate::column::{Column, Spill};
pub use crate::launch_table::Launches;

/// Reads a trace file without keeping its events: one trace per segment with its tables (and
/// no events), and that segment's digest.
pub fn read_stream<R: std::io::Read>(
    stream: TraceStream<R>,
) -> Result<Vec<(Trace, Digest)>, ReadError> {
    let mut builders = Builders::default();
    let traces = stream.skim_each(DigestBuilder::decodes, |segment, r| {
        builders.push(segment, r);
    })?;
    Ok(builders.finish(traces))
}

/// As [`read_stream`], a regular file read on `threads` threads
/// ([`TraceStream::skim_parallel`]): the same digests, in about the time of the folding alone;
/// their old launches and batches in `spill` where one is given ([`DigestBuilder::spilling`]).
pub fn read_file_stream(
    stream: TraceStream<tpuscope_core::stream::TraceFile>,
    threads: usize,
    spill: Option<Arc<dyn Spill>>,
) -> Result<Vec<(Trace, Digest)>, ReadError> {
    let mut builders = Builders {
        spill,
        ..Builders::default()
    };
    let traces = stream.skim_parallel(threads, DigestBuilder::decodes, |segment, _, r| {
        builders.push(segment, r);
    })?;
    Ok(builders.finish(traces))
}

/// A builder per segment.
#[derive(Default)]
struct Builders {
    each: Vec<DigestBuilder>,
    spill: Option<Arc<dyn Spill>>,
}

impl Builders {
    fn push(&mut self, segment: usize, r: Skimmed<'_>) {
        if self.each.len() <= segment {
            self.grow(segment + 1);
        }
        if let Some(b) = self.each.get_mut(segment) {
            b.push_skimmed(r);
        }
    }

    fn grow(&mut self, n: usize) {
        let spill = &self.spill;
        self.each.resize_with(n, || {
            spill
                .as_ref()
                .map_or_else(DigestBuilder::default, DigestBuilder::spilling)
        });
    }

    fn finish(mut self, traces: Vec<Trace>) -> Vec<(Trace, Digest)> {
        self.grow(traces.len());
        traces
            .into_iter()
            .zip(self.each)
            .map(|(t, b)| b.finish_for(t))
            .collect()
    }
}

/// About the bytes a [`DigestBuilder`] keeps of an event record of `kind` whose payload is
/// `len` bytes long: what a live viewer that folds its stream counts against its limit
/// (`LiveDecoder::folding`). An estimate by kind: the frame does not say, say, whether a
/// transfer blocked on a read (kept whole) or not (a few bytes at most).
pub fn held_bytes(kind: RecordKind, len: usize) -> u64 {
    match kind {
        // Its packed launch, and a run of execute numbers when threads race (vectors grow by
        // doubling: counted at their worst).
        RecordKind::Execute => 80,
        // Folded into its launch and its device's busy spans.
        RecordKind::ExecuteComplete => 0,
        // A batch's time and shape.
        RecordKind::Transfer => 16,
        RecordKind::Memory => 32,
        RecordKind::Step => 8,
        // Kept whole: its fields and the slot it takes.
        _ => len as u64 + 160,
    }
}

/// An execute, as the analyses read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Its place among the trace's events (as `Trace::events` counts them).
    pub event: u32,
    pub t_ns: u64,
    pub dur_ns: u64,
    pub executable_id: u64,
    /// Completion events were asked for: its device time can be known.
    pub completion_tracked: bool,
    /// The call failed (the record itself is among [`Digest::others`]).
    pub failed: bool,
}

/// A device finished an execute before the trace showed its launch: kept until the launch
/// comes (a fast launch completes before its execute hook records it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    t_ns: u64,
    device_index: u32,
}

/// When the devices of a launch finished it, from its completion events.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// `NOT_DONE` when no completion of the launch is in the trace.
    first_ns: u64,
    last_ns: u64,
}

const NOT_DONE: u64 = u64::MAX;

impl Done {
    pub(crate) const NONE: Done = Done {
        first_ns: NOT_DONE,
        last_ns: 0,
    };

    /// Completed first at `first_ns` and last at `last_ns`.
    pub(crate) fn new(first_ns: u64, last_ns: u64) -> Done {
        Done { first_ns, last_ns }
    }

    /// The first completion in file order (the first device to report).
    pub fn first_ns(&self) -> Option<u64> {
        (self.first_ns != NOT_DONE).then_some(self.first_ns)
    }

    /// The latest completion.
    pub fn last_ns(&self) -> Option<u64> {
        (self.first_ns != NOT_DONE).then_some(self.last_ns)
    }
}

/// What the analyses read of a run's event records.
#[derive(Clone, Debug, Default)]
pub struct Digest {
    /// How many event records the trace holds.
    pub events: usize,
    /// The earliest and the latest time of an event.
    pub first_t: Option<u64>,
    pub last_t: Option<u64>,
    /// The latest end (time plus duration) of an event.
    pub end_t: Option<u64>,
    /// The time of the last event, in file order, that has one.
    pub last_t_in_file: Option<u64>,
    /// Every execute, in file order, with when its devices finished it.
    pub launches: Launches,
    /// Each device's busy time, by device index: the union of the spans from dispatch to
    /// completion of the timed launches that succeeded, sorted and disjoint.
    pub device_busy: Vec<Vec<(u64, u64)>>,
    /// Host-to-device transfers that succeeded and have dimensions: their times, and the index
    /// in `shapes` of theirs ([`Digest::batches`]).
    batch_t: Column<u64>,
    batch_shape: Column<u32>,
    /// The distinct (dtype, dims) of `batches`.
    pub shapes: Vec<(String, Vec<i64>)>,
    /// The memory samples, by series.
    pub memory: crate::hbm::SeriesFold,
    /// Each step marker's name and the times it was recorded, in order of first appearance.
    pub step_marks: Vec<(String, Vec<u64>)>,
    /// The records read whole, with their place among the events, in file order: everything
    /// but executes that succeeded, completions, transfers that neither blocked on a read
    /// (device to host, sync) nor failed, memory samples and step markers.
    pub others: Vec<(usize, Record)>,
    /// The executables at addresses a plugin reused, as the records above name them.
    pub(crate) ids: ExecutableIds,
    /// Transfers host to device, and the others (device to host), failed ones included: most
    /// are not kept, so they are counted here (the summary `tpuscope run` prints).
    pub transfers_h2d: u64,
    pub transfers_d2h: u64,
    /// Where old launches and batches went ([`Digest::spill_to`]).
    spill: Option<Arc<dyn Spill>>,
}

impl Digest {
    /// Sends the old chunks of the launches and batches to `store` from now on (see
    /// [`crate::column`]).
    pub(crate) fn spill_to(&mut self, store: &Arc<dyn Spill>) {
        self.spill = Some(Arc::clone(store));
        self.launches.spill_to(store);
        self.batch_t.spill_to(Arc::clone(store));
        self.batch_shape.spill_to(Arc::clone(store));
    }

    /// Where the analyses of this digest may send what they make per step or per launch
    /// (see [`crate::column`]): the digest's own spill, when it has one.
    pub(crate) fn spill(&self) -> Option<Arc<dyn Spill>> {
        self.spill.clone()
    }

    /// `r`, a record of this run read back on its own, as the analyses read it: `None` when
    /// it is read as it is (see [`crate::executable_ids`]).
    pub fn as_analysed(&self, r: &Record) -> Option<Record> {
        self.ids.resolved(r)
    }

    /// Each launch with when it finished.
    pub fn launches_done(&self) -> impl Iterator<Item = (Launch, Done)> + '_ {
        self.launches.iter()
    }

    /// Each launch, in file order.
    pub fn launches(&self) -> impl Iterator<Item = Launch> + '_ {
        self.launches.iter().map(|(l, _)| l)
    }

    /// Each launch, from the last back.
    pub fn launches_rev(&self) -> impl Iterator<Item = Launch> + '_ {
        self.launches.iter_rev().map(|(l, _)| l)
    }

    /// Host-to-device transfers that succeeded and have dimensions, in file order: (time,
    /// index in `shapes`).
    pub fn batches(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.batch_t.iter().zip(self.batch_shape.iter())
    }

    /// How many batches [`Digest::batches`] gives.
    pub(crate) fn batch_count(&self) -> usize {
        self.batch_t.len()
    }

    /// Counts a transfer (`direction` as the record gives it).
    fn count_transfer(&mut self, direction: i32) {
        if direction == Direction::H2d as i32 {
            self.transfers_h2d += 1;
        } else {
            self.transfers_d2h += 1;
        }
    }

    pub(crate) fn batch(&mut self, t_ns: u64, shape: u32) {
        self.batch_t.push(t_ns);
        self.batch_shape.push(shape);
    }

    /// The digest of a trace decoded whole.
    pub fn of(trace: &Trace) -> Digest {
        let mut b = DigestBuilder::default();
        for r in &trace.events {
            b.push(r);
        }
        b.finish()
    }

    /// What is left of the digest once its run's own analyses are made (`report::AnalysedRun`):
    /// the counts, times and records read whole, which is all the report's join of runs reads
    /// (a job's hosts: clocks, errors, cache loads, the last time in the file); the launches,
    /// busy spans, batches, memory series and step markers, which grow with the run, go.
    pub fn without_bulk(self) -> Digest {
        Digest {
            events: self.events,
            first_t: self.first_t,
            last_t: self.last_t,
            end_t: self.end_t,
            last_t_in_file: self.last_t_in_file,
            others: self.others,
            transfers_h2d: self.transfers_h2d,
            transfers_d2h: self.transfers_d2h,
            ..Digest::default()
        }
    }

    /// The records read whole, with their place among the events.
    pub fn others(&self) -> impl DoubleEndedIterator<Item = (usize, &Record)> {
        self.others.iter().map(|(i, r)| (*i, r))
    }

    /// The `event`-th event record when it is one read whole (a compile, a host read, …).
    pub fn other(&self, event: usize) -> Option<&Record> {
        let i = self.others.binary_search_by_key(&event, |(e, _)| *e).ok()?;
        self.others.get(i).map(|(_, r)| r)
    }
}

/// Takes a run's event records one at a time, in file order (definitions, blobs and the
/// manifest are not events: they are the trace's tables).
#[derive(Clone, Default)]
pub struct DigestBuilder {
    d: Digest,
    /// A hash of each shape → its indices in `shapes` (one, unless two shapes share a hash).
    shape_ids: rustc_hash::FxHashMap<u64, Vec<u32>>,
    /// A step marker's name → its index in `step_marks`.
    mark_ids: rustc_hash::FxHashMap<String, usize>,
    seqs: Seqs,
    /// Completions whose launch has not come yet, by seq. A launch's completions are folded
    /// in file order: those before it when it comes, then each as it comes (one that finds its
    /// launch only in `finish` had every later one of that launch miss it too).
    pending: rustc_hash::FxHashMap<u64, Vec<Pending>>,
    /// Each device's busy spans, merged as they come.
    busy: Vec<SpanUnion>,
    /// Records handed raw that did not decode (not events: the reader would have counted them
    /// as undecodable).
    undecodable: u64,
    /// A transfer's dimensions, read in place.
    dims: Vec<i64>,
}

/// The launches' execute numbers, as runs of consecutive numbers: one run for the launches of
/// a thread that never raced another, so a run of millions of launches costs a few bytes.
#[derive(Clone, Default)]
struct Seqs {
    /// (first seq, first launch, launches) in launch order.
    runs: Vec<(u64, u32, u32)>,
    /// Every seq so far is greater than the one before: the runs are sorted by seq.
    increasing: bool,
}

/// Runs searched, newest first, for a completion's launch once threads have raced.
const RACED_RUNS: usize = 64;

impl Seqs {
    fn push(&mut self, seq: u64, launch: u32) {
        match self.runs.last_mut() {
            None => self.increasing = true,
            Some((first, at, n)) => {
                let last = *first + u64::from(*n - 1);
                if last.checked_add(1) == Some(seq) && at.checked_add(*n) == Some(launch) {
                    *n += 1;
                    return;
                }
                self.increasing &= seq > last;
            }
        }
        self.runs.push((seq, launch, 1));
    }

    /// The latest launch so far with this seq: any of them while the seqs increase, else
    /// among the last runs.
    fn find(&self, seq: u64) -> Option<u32> {
        let within = |&(first, at, n): &(u64, u32, u32)| {
            let k = seq.checked_sub(first)?;
            u32::try_from(k).ok().filter(|&k| k < n).map(|k| at + k)
        };
        if self.increasing {
            let i = self.runs.partition_point(|&(first, _, _)| first <= seq);
            return within(self.runs.get(i.checked_sub(1)?)?);
        }
        self.runs.iter().rev().take(RACED_RUNS).find_map(within)
    }
}

impl DigestBuilder {
    /// A builder whose launches and batches keep only their newest values in memory and the
    /// rest in `store` (see [`crate::column`]): what `report` holds of a long trace.
    pub fn spilling(store: &Arc<dyn Spill>) -> DigestBuilder {
        let mut b = DigestBuilder::default();
        b.d.spill_to(store);
        b
    }

    /// How many event records it took so far (the index the next one gets).
    pub fn events(&self) -> usize {
        self.d.events
    }

    /// The launch a completion of execute `seq` pushed now would be folded into (the latest
    /// launch so far with that seq), for a reader that draws the completion too.
    pub fn launch_of(&self, seq: u64) -> Option<Launch> {
        let i = self.seqs.find(seq)?;
        self.d.launches.get(i as usize).map(|(l, _)| l)
    }

    /// What a skimming reader should decode for [`DigestBuilder::push_skimmed`]: all but
    /// transfers, which are read in place (the one common record that allocates).
    pub fn decodes(kind: RecordKind) -> bool {
        kind != RecordKind::Transfer
    }

    /// One event record as a skimming reader hands it out (`TraceStream::skim_each` with
    /// [`DigestBuilder::decodes`]): a plain transfer is read in place, anything else raw is
    /// decoded; one that does not decode is no event (give the count to the trace with
    /// [`DigestBuilder::finish_for`]).
    pub fn push_skimmed(&mut self, r: Skimmed<'_>) {
        match r {
            Skimmed::Decoded(r) => self.push(&r),
            Skimmed::Raw(kind, payload) => {
                if kind == RecordKind::Transfer
                    && let Some(t) = TransferRef::parse(payload)
                {
                    self.push_transfer(&t);
                    return;
                }
                match Record::decode_payload(kind, payload) {
                    Ok(r) => self.push(&r),
                    Err(_) => self.undecodable += 1,
                }
            }
        }
    }

    /// A transfer read in place, as [`DigestBuilder::push`] takes a decoded one (a plain one
    /// has no error): for a reader that parsed it for itself too.
    pub fn push_transfer(&mut self, t: &TransferRef<'_>) {
        let event = self.event(Some(t.t_ns), t.dur_ns);
        self.d.count_transfer(t.direction);
        if t.direction == Direction::D2h as i32 && t.sync {
            let r = Record::Transfer(Box::new(t.to_owned()));
            self.d.others.push((event, r));
        } else if t.direction == Direction::H2d as i32 && t.has_dims() {
            let mut dims = std::mem::take(&mut self.dims);
            dims.clear();
            dims.extend(t.dims());
            let id = self.shape(t.dtype, &dims);
            self.dims = dims;
            self.d.batch(t.t_ns, id);
        }
    }

    /// The digest of the run whose trace (read skimming) is `trace`, with the records handed
    /// raw that did not decode counted among its undecodable ones, as a reader that decodes
    /// everything counts them.
    pub fn finish_for(mut self, mut trace: Trace) -> (Trace, Digest) {
        trace.undecodable_records += std::mem::take(&mut self.undecodable);
        (trace, self.finish())
    }

    /// Counts an event at time `t` lasting `dur_ns`; its place among the events.
    fn event(&mut self, t: Option<u64>, dur_ns: u64) -> usize {
        let event = self.d.events;
        self.d.events += 1;
        if let Some(t) = t {
            let d = &mut self.d;
            d.first_t = Some(d.first_t.map_or(t, |f| f.min(t)));
            d.last_t = Some(d.last_t.map_or(t, |l| l.max(t)));
            let end = t + dur_ns;
            d.end_t = Some(d.end_t.map_or(end, |e| e.max(end)));
            d.last_t_in_file = Some(t);
        }
        event
    }

    /// One event record (what is kept of it is copied: a streaming reader drops it after).
    pub fn push(&mut self, r: &Record) {
        let event = self.event(r.t_ns(), r.dur_ns());
        match r {
            Record::Execute(e) => {
                let failed = e.error.is_some();
                let launch = self.d.launches.push(&Launch {
                    event: u32::try_from(event).unwrap_or(u32::MAX),
                    t_ns: e.t_ns,
                    dur_ns: e.dur_ns,
                    executable_id: self.d.ids.launched(e.executable_id, e.t_ns),
                    completion_tracked: e.completion_tracked,
                    failed,
                });
                self.seqs.push(e.seq, launch);
                if failed {
                    self.keep(event, r);
                }
                if !self.pending.is_empty()
                    && let Some(early) = self.pending.remove(&e.seq)
                {
                    early.into_iter().for_each(|c| self.fold(launch, c));
                }
            }
            Record::ExecuteComplete(c) => {
                let p = Pending {
                    t_ns: c.t_ns,
                    device_index: c.device_index,
                };
                match self.seqs.find(c.seq) {
                    Some(launch) => self.fold(launch, p),
                    None => self.pending.entry(c.seq).or_default().push(p),
                }
            }
            Record::Memory(m) => self.d.memory.push(event, m),
            Record::Step(s) => {
                let marks = &mut self.d.step_marks;
                let i = *self.mark_ids.entry(s.marker.clone()).or_insert_with(|| {
                    marks.push((s.marker.clone(), Vec::new()));
                    marks.len() - 1
                });
                if let Some((_, times)) = marks.get_mut(i) {
                    times.push(s.t_ns);
                }
            }
            Record::Transfer(t) => {
                self.d.count_transfer(t.direction);
                let read = t.direction == Direction::D2h as i32 && t.sync;
                if t.error.is_some() || read {
                    self.keep(event, r);
                } else if t.direction == Direction::H2d as i32 && !t.dims.is_empty() {
                    let id = self.shape(&t.dtype, &t.dims);
                    self.d.batch(t.t_ns, id);
                }
            }
            other => self.keep(event, other),
        }
    }

    /// Keeps record `r` whole, its executable ids made unique (the few records that define or
    /// name executables are among those kept: compiles, loads, cache records, summaries).
    fn keep(&mut self, event: usize, r: &Record) {
        let kept = self.d.ids.apply(r).unwrap_or_else(|| r.clone());
        self.d.others.push((event, kept));
    }

    /// The index of a shape in `shapes`, added the first time.
    fn shape(&mut self, dtype: &str, dims: &[i64]) -> u32 {
        use std::hash::{Hash, Hasher};
        let mut h = rustc_hash::FxHasher::default();
        (dtype, dims).hash(&mut h);
        let ids = self.shape_ids.entry(h.finish()).or_default();
        let shapes = &mut self.d.shapes;
        if let Some(&id) = ids.iter().find(|&&id| {
            shapes
                .get(id as usize)
                .is_some_and(|(t, d)| t == dtype && d == dims)
        }) {
            return id;
        }
        let id = u32::try_from(shapes.len()).unwrap_or(u32::MAX);
        shapes.push((dtype.to_string(), dims.to_vec()));
        ids.push(id);
        id
    }

    /// A completion of the `launch`-th launch, into its [`Done`] and its device's busy time.
    fn fold(&mut self, launch: u32, c: Pending) {
        let Some((t_ns, busy)) = self.d.launches.complete(launch, c.t_ns) else {
            return;
        };
        if busy {
            let dev = c.device_index as usize;
            if self.busy.len() <= dev {
                self.busy.resize_with(dev + 1, SpanUnion::default);
            }
            if let Some(u) = self.busy.get_mut(dev) {
                u.push(t_ns, c.t_ns.max(t_ns));
            }
        }
    }

    /// The digest of the records so far, as [`DigestBuilder::finish`] would give it now (a
    /// live view's, while the stream goes on): costs a copy of what the builder holds.
    pub fn snapshot(&self) -> Digest {
        self.clone().finish()
    }

    /// The digest. A completion is matched to its launch by `seq` (the collector numbers a
    /// process's executes once each): the latest launch with it when the completion comes,
    /// else the first after; one whose launch was never found by then (threads raced far
    /// apart) to the last launch with it in the file; none when the trace holds no such launch
    /// (it was dropped, or ran before an attach).
    pub fn finish(mut self) -> Digest {
        if !self.pending.is_empty() {
            let mut by_seq: Vec<(u64, u32)> = Vec::with_capacity(self.d.launches.len());
            for &(first, at, n) in &self.seqs.runs {
                by_seq.extend((0..n).map(|k| (first + u64::from(k), at + k)));
            }
            // Stable: of launches sharing a seq, the last in file order.
            by_seq.sort_by_key(|&(s, _)| s);
            let mut left: Vec<(u64, Vec<Pending>)> =
                std::mem::take(&mut self.pending).into_iter().collect();
            left.sort_unstable_by_key(|&(s, _)| s);
            for (seq, cs) in left {
                let j = by_seq.partition_point(|&(s, _)| s <= seq);
                let Some(&(_, launch)) = j
                    .checked_sub(1)
                    .and_then(|j| by_seq.get(j))
                    .filter(|&&(s, _)| s == seq)
                else {
                    continue;
                };
                cs.into_iter().for_each(|c| self.fold(launch, c));
            }
        }
        self.d.device_busy = std::mem::take(&mut self.busy)
            .into_iter()
            .map(SpanUnion::finish)
            .collect();
        self.d
    }
}

/// The union of `[start, end)` spans pushed in about start order, merged as they come: a
/// device's busy time costs its busy periods, not its launches. Spans out of order wait in
/// `late` for one sort at the end; empty spans add nothing.
#[derive(Clone, Default)]
struct SpanUnion {
    /// Sorted and disjoint.
    spans: Vec<(u64, u64)>,
    late: Vec<(u64, u64)>,
}

impl SpanUnion {
    fn push(&mut self, start: u64, end: u64) {
        if end <= start {
            return;
        }
        match self.spans.last_mut() {
            // Starts inside or after the last span: no earlier span can overlap it.
            Some(last) if start >= last.0 => {
                if start <= last.1 {
                    last.1 = last.1.max(end);
                } else {
                    self.spans.push((start, end));
                }
            }
            Some(_) => self.late.push((start, end)),
            None => self.spans.push((start, end)),
        }
    }

    fn finish(self) -> Vec<(u64, u64)> {
        let SpanUnion { mut spans, late } = self;
        if late.is_empty() {
            spans.shrink_to_fit();
            return spans;
        }
        spans.extend(late);
        merged(spans)
    }
}

/// [`merged`] of the spans of several lists that are each sorted by start, a span at a time:
/// walked in step, in time order, never gathered nor sorted again (a long run's devices have
/// millions of busy spans; their union is measured against others without being held).
pub(crate) struct UnionOf<'a> {
    /// Each list's spans not yet taken.
    rest: Vec<&'a [(u64, u64)]>,
    /// The span being grown: the next one out.
    open: Option<(u64, u64)>,
}

impl<'a> UnionOf<'a> {
    pub(crate) fn new(lists: &[&'a [(u64, u64)]]) -> UnionOf<'a> {
        UnionOf {
            rest: lists.to_vec(),
            open: None,
        }
    }

    /// Where the walk of `lists` (those it was made of) is: the span being grown and how many
    /// spans of each list were taken, for [`UnionOf::resume`].
    pub(crate) fn state(&self, lists: &[&[(u64, u64)]]) -> (Option<(u64, u64)>, Vec<usize>) {
        let taken = lists
            .iter()
            .zip(&self.rest)
            .map(|(l, r)| l.len() - r.len())
            .collect();
        (self.open, taken)
    }

    /// The walk of `lists` where [`UnionOf::state`] said it was.
    pub(crate) fn resume(
        lists: &[&'a [(u64, u64)]],
        taken: &[usize],
        open: Option<(u64, u64)>,
    ) -> UnionOf<'a> {
        UnionOf {
            rest: lists
                .iter()
                .zip(taken)
                .map(|(l, &n)| l.get(n..).unwrap_or_default())
                .collect(),
            open,
        }
    }

    /// The earliest span left of any list, taken (the lists are a host's devices and a few
    /// more: a scan of their heads costs less than a heap's upkeep).
    fn take_first(&mut self) -> Option<(u64, u64)> {
        let mut first: Option<(usize, (u64, u64))> = None;
        for (k, l) in self.rest.iter().enumerate() {
            if let Some(&s) = l.first()
                && first.is_none_or(|(_, f)| s < f)
            {
                first = Some((k, s));
            }
        }
        let (k, s) = first?;
        if let Some(l) = self.rest.get_mut(k) {
            *l = l.get(1..).unwrap_or_default();
        }
        Some(s)
    }
}

impl Iterator for UnionOf<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        while let Some(s) = self.take_first() {
            if s.1 <= s.0 {
                continue;
            }
            match &mut self.open {
                Some(open) if s.0 <= open.1 => open.1 = open.1.max(s.1),
                open => {
                    if let Some(done) = open.replace(s) {
                        return Some(done);
                    }
                }
            }
        }
        self.open.take()
    }
}

/// Spans sorted, overlapping and touching ones merged, empty ones dropped; in place: a long
/// run's spans are not copied.
pub(crate) fn merged(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.retain(|s| s.1 > s.0);
    v.sort_unstable();
    v.dedup_by(|next, kept| {
        let overlaps = next.0 <= kept.1;
        if overlaps {
            kept.1 = kept.1.max(next.1);
        }
        overlaps
    });
    v.shrink_to_fit();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuscope_core::event::{Execute, ExecuteComplete};

    #[test]
    fn sorted_lists_merge_as_their_spans_sorted_would() {
        // Scrambled spans (strides coprime to 1000), some empty, touching or nested, in three
        // lists sorted by start, of lengths that differ from round to round.
        for round in 0..50u64 {
            let lists: Vec<Vec<(u64, u64)>> = (0..3u64)
                .map(|k| {
                    let mut l: Vec<(u64, u64)> = (0..(round * 7 + k * 13) % 40)
                        .map(|i| {
                            let a = (i * 7919 + k * 104_729 + round * 31) % 1000;
                            (a, a + (i * 31 + k * 7 + round) % 30)
                        })
                        .collect();
                    l.sort_unstable();
                    l
                })
                .collect();
            // One and two lists take another path than three.
            for n in 1..=3 {
                let refs: Vec<&[(u64, u64)]> = lists.iter().take(n).map(Vec::as_slice).collect();
                let all: Vec<(u64, u64)> = lists.iter().take(n).flatten().copied().collect();
                assert_eq!(
                    UnionOf::new(&refs).collect::<Vec<_>>(),
                    merged(all),
                    "{lists:?}"
                );
            }
        }
        assert!(UnionOf::new(&[]).next().is_none());
    }

    fn launch(seq: u64, t_ns: u64) -> Record {
        Record::Execute(Execute {
            t_ns,
            seq,
            executable_id: 7,
            completion_tracked: true,
            ..Execute::default()
        })
    }

    fn done(seq: u64, t_ns: u64, device_index: u32) -> Record {
        Record::ExecuteComplete(ExecuteComplete {
            t_ns,
            seq,
            device_index,
            ..ExecuteComplete::default()
        })
    }

    /// Each launch's (first, last) completion times.
    fn matched(records: &[Record]) -> Vec<(Option<u64>, Option<u64>)> {
        let mut b = DigestBuilder::default();
        records.iter().for_each(|r| b.push(r));
        let d = b.finish();
        d.launches_done()
            .map(|(_, x)| (x.first_ns(), x.last_ns()))
            .collect()
    }

    #[test]
    fn completions_find_their_launch_in_any_order() {
        // In seq order; one completion before its launch; one of a launch never recorded.
        let in_order = [
            launch(1, 10),
            done(2, 25, 0),
            launch(2, 20),
            done(1, 30, 0),
            done(1, 31, 1),
            done(9, 40, 0),
        ];
        let both = |t| (Some(t), Some(t));
        assert_eq!(matched(&in_order), vec![(Some(30), Some(31)), both(25)]);
        // Threads raced: launches out of seq order.
        let raced = [
            launch(5, 10),
            launch(3, 11),
            launch(4, 12),
            done(3, 20, 0),
            done(5, 21, 0),
        ];
        assert_eq!(matched(&raced), vec![both(21), both(20), (None, None)]);
        // A launch that repeats a seq later does not take the completions before it.
        let repeated = [
            launch(1, 10),
            launch(2, 11),
            done(2, 20, 0),
            done(1, 21, 0),
            launch(2, 30),
            launch(3, 31),
            done(3, 40, 0),
            done(7, 41, 0),
        ];
        assert_eq!(
            matched(&repeated),
            vec![both(21), both(20), (None, None), both(40)]
        );
        // Completions before any launch; a long run of consecutive seqs.
        let mut long = vec![done(0, 5, 0), done(1000, 6, 0)];
        long.extend((0..1000).map(|s| launch(s, 10 + s)));
        long.push(done(999, 2000, 0));
        let m = matched(&long);
        assert_eq!((m[0], m[999]), (both(5), both(2000)));
        assert_eq!(m.iter().filter(|x| x.0.is_some()).count(), 2);
        // Raced far apart: a completion of a launch more than RACED_RUNS runs back is matched
        // at the end.
        let mut far = vec![launch(500, 1)];
        far.extend((0..=100).map(|k| launch(2 * k, 10 + k)));
        far.extend([done(500, 300, 0), done(200, 301, 0)]);
        let m = matched(&far);
        assert_eq!((m[0], m[101]), (both(300), both(301)));
        assert_eq!(m.iter().filter(|x| x.0.is_some()).count(), 2);
    }

    #[test]
    fn busy_time_is_the_union_of_spans_in_any_order() {
        // Merged as they come, touching spans joined, empty ones dropped, late ones sorted in.
        let spans = [
            (10, 20),
            (15, 30),
            (30, 35),
            (40, 40),
            (50, 60),
            (5, 12),
            (45, 52),
            (70, 80),
        ];
        let mut u = SpanUnion::default();
        spans.iter().for_each(|&(a, b)| u.push(a, b));
        assert_eq!(u.finish(), vec![(5, 35), (45, 60), (70, 80)]);
        // Each launch's first completion in file order and its latest; devices apart.
        let mut b = DigestBuilder::default();
        for r in [
            done(1, 35, 1),
            launch(1, 10),
            done(1, 30, 0),
            launch(2, 40),
            done(2, 50, 1),
        ] {
            b.push(&r);
        }
        let d = b.finish();
        let done: Vec<_> = d
            .launches_done()
            .map(|(_, x)| (x.first_ns(), x.last_ns()))
            .collect();
        assert_eq!(done, vec![(Some(35), Some(35)), (Some(50), Some(50))]);
        assert_eq!(
            d.device_busy,
            vec![vec![(10, 30)], vec![(10, 35), (40, 50)]]
        );
    }
}
