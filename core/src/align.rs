//! Puts the traces of one job's hosts on one timeline: each host's `CLOCK_MONOTONIC` times are
//! shifted by the host's offset to wall-clock time, found from the trace's own clock anchors.

use crate::event::Record;
use crate::reader::Trace;

/// How a trace's monotonic times map to the job timeline (wall-clock ns since the epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alignment {
    /// `job_ns = t_ns + offset_ns`.
    pub offset_ns: i64,
    /// `clock_anchors`, `manifest_start` or `none`.
    pub method: &'static str,
    pub anchors: u32,
    /// Largest minus smallest wall − mono over the anchors.
    pub spread_ns: u64,
}

/// The alignment computed from the trace's `Clock` records: the median of wall − mono, so one
/// anchor taken across a wall-clock step (NTP) or a descheduled writer does not move the host.
/// Without anchors, the manifest's start pair; without that, 0.
pub fn alignment(trace: &Trace) -> Alignment {
    alignment_of(trace.manifest.as_ref(), trace.events.iter())
}

/// [`alignment`] from a manifest and records in file order that hold the trace's `Clock`
/// records (all its events, or fewer: a reader that kept only some of them).
pub fn alignment_of<'a>(
    manifest: Option<&crate::event::Manifest>,
    records: impl Iterator<Item = &'a Record>,
) -> Alignment {
    let mut diffs: Vec<i64> = records
        .filter_map(|r| match r {
            Record::Clock(c) if c.wall_ns != 0 => Some(diff(c.wall_ns, c.mono_ns)),
            _ => None,
        })
        .collect();
    if !diffs.is_empty() {
        diffs.sort_unstable();
        let n = diffs.len();
        let median = if n % 2 == 1 {
            diffs[n / 2]
        } else {
            // Mean of the two middle values without overflow.
            diffs[n / 2 - 1] + (diffs[n / 2] - diffs[n / 2 - 1]) / 2
        };
        return Alignment {
            offset_ns: median,
            method: "clock_anchors",
            anchors: u32::try_from(n).unwrap_or(u32::MAX),
            spread_ns: diffs[n - 1].abs_diff(diffs[0]),
        };
    }
    match manifest {
        Some(m) if m.start_wall_ns != 0 => Alignment {
            offset_ns: diff(m.start_wall_ns, m.start_mono_ns),
            method: "manifest_start",
            anchors: 0,
            spread_ns: 0,
        },
        _ => Alignment {
            offset_ns: 0,
            method: "none",
            anchors: 0,
            spread_ns: 0,
        },
    }
}

/// The offset that puts `trace` on its job's timeline: the one `tpuscope merge` stored for a
/// segment of a merged file, else the one its clock anchors give.
pub fn job_offset_ns(trace: &Trace) -> i64 {
    job_offset_of(trace, trace.events.iter())
}

/// [`job_offset_ns`] with the records that hold the trace's `Clock` records (see
/// [`alignment_of`]).
pub fn job_offset_of<'a>(trace: &Trace, records: impl Iterator<Item = &'a Record>) -> i64 {
    match &trace.segment {
        Some(s) => s.offset_ns,
        None => alignment_of(trace.manifest.as_ref(), records).offset_ns,
    }
}

/// A monotonic time on the job timeline.
pub fn to_job_ns(t_ns: u64, offset_ns: i64) -> i64 {
    i64::try_from(t_ns)
        .unwrap_or(i64::MAX)
        .saturating_add(offset_ns)
}

fn diff(wall: u64, mono: u64) -> i64 {
    let d = i128::from(wall) - i128::from(mono);
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}
