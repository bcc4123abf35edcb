//! One pass over a run's event records into what the analyses read of them: the launches and
//! their completions as a few integers each, the host-to-device batches as (time, shape), the
//! few records the analyses need whole (compiles, host reads, memory samples, step markers,
//! errors, notes, clocks, …) with their place in the file, and the time span.
//!
//! Why: a decoded record takes about 200 bytes and most of a long trace is launches, completions
//! and transfers, of which the analyses read a few fields. A [`DigestBuilder`] takes records one
//! at a time, so `tpuscope report` can stream a trace file and never hold its records
//! ([`Digest::of`] does the same for a trace decoded whole). Every analysis of the report reads a
//! run through its digest and the trace's tables (strings, stacks, blobs, manifest), never
//! `Trace::events`, so both ways give the same report.

use tpuscope_core::event::{Direction, Record};
use tpuscope_core::{ReadError, Trace, TraceStream};

/// Reads a trace file without keeping its events: one trace per segment with its tables (and
/// no events), and that segment's digest.
pub fn read_stream<R: std::io::Read>(
    stream: TraceStream<R>,
) -> Result<Vec<(Trace, Digest)>, ReadError> {
    let mut builders: Vec<DigestBuilder> = Vec::new();
    let traces = stream.read_each(|segment, r| {
        builders.resize_with(builders.len().max(segment + 1), DigestBuilder::default);
        if let Some(b) = builders.get_mut(segment) {
            b.push(&r);
        }
    })?;
    builders.resize_with(traces.len(), DigestBuilder::default);
    Ok(traces
        .into_iter()
        .zip(builders.into_iter().map(DigestBuilder::finish))
        .collect())
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

/// A device finished an execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub t_ns: u64,
    pub device_index: u32,
    /// Its execute: the index in `launches` of the launch with its `seq` (the collector numbers
    /// a process's executes once each), matched once here for every analysis; None when the
    /// trace holds no such launch (it was dropped, or ran before an attach).
    pub launch: Option<u32>,
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
    /// Every execute, in file order.
    pub launches: Vec<Launch>,
    /// Every completion, in file order.
    pub completions: Vec<Completion>,
    /// Host-to-device transfers that succeeded and have dimensions: (time, index in `shapes`).
    pub batches: Vec<(u64, u32)>,
    /// The distinct (dtype, dims) of `batches`.
    pub shapes: Vec<(String, Vec<i64>)>,
    /// The records read whole, with their place among the events, in file order: everything
    /// but executes that succeeded, completions, and transfers that neither blocked on a read
    /// (device to host, sync) nor failed.
    pub others: Vec<(usize, Record)>,
}

impl Digest {
    /// The launch a completion finished.
    pub fn launch_of(&self, c: &Completion) -> Option<&Launch> {
        self.launches.get(c.launch? as usize)
    }

    /// The digest of a trace decoded whole.
    pub fn of(trace: &Trace) -> Digest {
        let mut b = DigestBuilder::default();
        for r in &trace.events {
            b.push(r);
        }
        b.finish()
    }

    /// The records read whole, with their place among the events.
    pub fn others(&self) -> impl DoubleEndedIterator<Item = (usize, &Record)> {
        self.others.iter().map(|(i, r)| (*i, r))
    }
}

/// Takes a run's event records one at a time, in file order (definitions, blobs and the
/// manifest are not events: they are the trace's tables).
#[derive(Default)]
pub struct DigestBuilder {
    d: Digest,
    /// A hash of each shape → its indices in `shapes` (one, unless two shapes share a hash).
    shape_ids: rustc_hash::FxHashMap<u64, Vec<u32>>,
    /// Each launch's and each completion's execute number, until `finish` matches them.
    launch_seqs: Vec<u64>,
    completion_seqs: Vec<u64>,
}

impl DigestBuilder {
    /// One event record (what is kept of it is copied: a streaming reader drops it after).
    pub fn push(&mut self, r: &Record) {
        let event = self.d.events;
        self.d.events += 1;
        if let Some(t) = r.t_ns() {
            let d = &mut self.d;
            d.first_t = Some(d.first_t.map_or(t, |f| f.min(t)));
            d.last_t = Some(d.last_t.map_or(t, |l| l.max(t)));
            let end = t + r.dur_ns();
            d.end_t = Some(d.end_t.map_or(end, |e| e.max(end)));
            d.last_t_in_file = Some(t);
        }
        match r {
            Record::Execute(e) => {
                let failed = e.error.is_some();
                self.d.launches.push(Launch {
                    event: u32::try_from(event).unwrap_or(u32::MAX),
                    t_ns: e.t_ns,
                    dur_ns: e.dur_ns,
                    executable_id: e.executable_id,
                    completion_tracked: e.completion_tracked,
                    failed,
                });
                self.launch_seqs.push(e.seq);
                if failed {
                    self.d.others.push((event, r.clone()));
                }
            }
            Record::ExecuteComplete(c) => {
                self.d.completions.push(Completion {
                    t_ns: c.t_ns,
                    device_index: c.device_index,
                    launch: None,
                });
                self.completion_seqs.push(c.seq);
            }
            Record::Transfer(t)
                if t.error.is_none() && !(t.direction == Direction::D2h as i32 && t.sync) =>
            {
                if t.direction == Direction::H2d as i32 && !t.dims.is_empty() {
                    let id = self.shape(&t.dtype, &t.dims);
                    self.d.batches.push((t.t_ns, id));
                }
            }
            other => self.d.others.push((event, other.clone())),
        }
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

    /// The digest, each completion matched to its launch. A fast launch completes before its
    /// execute hook records it, so a completion may come first in the file: matched at the end.
    pub fn finish(mut self) -> Digest {
        let seqs = &self.launch_seqs;
        let index = |i: usize| u32::try_from(i).ok();
        let completions = self.d.completions.iter_mut().zip(&self.completion_seqs);
        // Launches come in seq order unless threads raced: then sort (seq, index) pairs. Of
        // launches sharing a seq, the last in file order (the sort is stable).
        if seqs.is_sorted() {
            for (c, &seq) in completions {
                let i = seqs.partition_point(|&s| s <= seq);
                c.launch = i
                    .checked_sub(1)
                    .filter(|&i| seqs.get(i) == Some(&seq))
                    .and_then(index);
            }
        } else {
            let mut by_seq: Vec<(u64, usize)> = seqs.iter().copied().zip(0..).collect();
            by_seq.sort_by_key(|&(s, _)| s);
            for (c, &seq) in completions {
                let i = by_seq.partition_point(|&(s, _)| s <= seq);
                c.launch = i
                    .checked_sub(1)
                    .and_then(|i| by_seq.get(i))
                    .filter(|&&(s, _)| s == seq)
                    .and_then(|&(_, l)| index(l));
            }
        }
        self.d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuscope_core::event::{Execute, ExecuteComplete};

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

    fn matched(records: &[Record]) -> Vec<Option<u32>> {
        let mut b = DigestBuilder::default();
        records.iter().for_each(|r| b.push(r));
        b.finish().completions.iter().map(|c| c.launch).collect()
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
        assert_eq!(matched(&in_order), vec![Some(1), Some(0), Some(0), None]);
        // Threads raced: launches out of seq order.
        let raced = [
            launch(5, 10),
            launch(3, 11),
            launch(4, 12),
            done(3, 20, 0),
            done(5, 21, 0),
        ];
        assert_eq!(matched(&raced), vec![Some(1), Some(0)]);
    }
}
