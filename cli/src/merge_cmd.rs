//! `tpuscope merge`: the traces of one job's hosts in one file, each host a segment with the
//! offset that puts its monotonic clock on the job's (wall-clock) timeline.
//!
//! Frames are copied byte for byte (ids, times and records a newer minor added stay as the
//! collector wrote them); only a `Segment` record is added before each host. See
//! docs/trace-format.md, "Merged job files".

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow, bail};
use tpuscope_analyzers::hosts;
use tpuscope_core::event::{RecordKind, SEGMENT_KIND, SEGMENT_MINOR, Segment};
use tpuscope_core::format::{self, FORMAT_MAJOR};
use tpuscope_core::stream::{Skimmed, TraceFile, TraceStream};
use tpuscope_core::{Completeness, Record, Trace, align};

use crate::output::Output;

#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Traces of the job's hosts (plain traces or earlier merged files).
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// The merged trace to write.
    #[arg(short = 'o', long = "out", value_name = "JOB.tps")]
    pub out: PathBuf,
    /// Replace the output if it exists, and merge traces that do not look like one job
    /// (different programs, job ids or times, or one process slot twice).
    #[arg(long)]
    pub force: bool,
}

/// One host's part, found in pass 1; its frames are copied in pass 2.
struct Part {
    input: usize,
    /// Byte ranges of the frames to copy, in file order.
    ranges: Vec<(usize, usize)>,
    segment: Segment,
    start_wall_ns: u64,
    /// The trace without its tables and with only its last timed event: what tells whether
    /// the parts are one job.
    slim: Trace,
}

pub fn merge(args: &MergeArgs) -> Result<i32> {
    // Opened first: an output we may not write, or one that is an input, is refused before
    // anything is read.
    let inputs: Vec<&Path> = args.traces.iter().map(PathBuf::as_path).collect();
    let mut out = Output::create(&args.out, args.force, &inputs)?;
    // Pass 1 on all cores, an input at a time per thread; warnings and errors in input order.
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let found = tpuscope_core::par::map_indices(args.traces.len(), threads, |input| {
        let mut warnings = Vec::new();
        let parts = args.traces.get(input).map_or_else(
            || Err(anyhow!("no input {input}")),
            |path| parts_of(input, path, &mut warnings),
        );
        (warnings, parts)
    });
    let mut parts = Vec::new();
    for found in found {
        let (warnings, p) = found.unwrap_or_else(|| {
            (
                Vec::new(),
                Err(anyhow!("a thread reading an input panicked")),
            )
        });
        for w in warnings {
            eprintln!("{w}");
        }
        parts.extend(p?);
    }
    let job_id = job_id(&args.traces, &parts, args.force)?;
    parts.sort_by(|a, b| {
        (a.segment.process_index, &a.segment.host, a.start_wall_ns).cmp(&(
            b.segment.process_index,
            &b.segment.host,
            b.start_wall_ns,
        ))
    });
    for w in parts.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        if (&a.segment.host, a.segment.pid, a.start_wall_ns)
            == (&b.segment.host, b.segment.pid, b.start_wall_ns)
        {
            bail!(
                "{} and {} hold the same process (host {}, pid {}): give each trace once",
                args.traces[a.input].display(),
                args.traces[b.input].display(),
                a.segment.host,
                a.segment.pid
            );
        }
    }

    let slims: Vec<&Trace> = parts.iter().map(|p| &p.slim).collect();
    if let Some(n) = hosts::not_one_job(&slims) {
        let (a, b) = (part_name(args, &parts, n.a), part_name(args, &parts, n.b));
        if !args.force {
            bail!(
                "{a} and {b} do not look like one job: {}; merge only the hosts of one job (--force merges them anyway)",
                n.why
            );
        }
        eprintln!(
            "tpuscope: warning: {a} and {b} do not look like one job: {}; merged anyway (--force)",
            n.why
        );
    }

    // The newest minor among the hosts' (a host's packs are copied as they are), segments' at least.
    let minor = parts
        .iter()
        .map(|p| p.slim.header.minor)
        .fold(SEGMENT_MINOR, u16::max);
    out.write_all(&format::encode_header(FORMAT_MAJOR, minor))?;
    // Pass 2: each part's frames copied from its input, file to file.
    let mut opened: Option<(usize, TraceFile)> = None;
    for (index, part) in parts.iter_mut().enumerate() {
        let path = &args.traces[part.input];
        if opened.as_ref().is_none_or(|(i, _)| *i != part.input) {
            let f = TraceFile::open(path).map_err(|e| crate::dump::read_error(path, e))?;
            opened = Some((part.input, f));
        }
        let Some((_, input)) = &mut opened else {
            continue;
        };
        part.segment.index = u32::try_from(index).unwrap_or(u32::MAX);
        part.segment.job_id.clone_from(&job_id);
        let body: u64 = part.ranges.iter().map(|&(a, b)| (b - a) as u64).sum();
        let mut frame = Vec::new();
        let payload = part.segment.payload_with_len(body);
        format::encode_frame(&mut frame, SEGMENT_KIND, 0, &payload);
        // The output's write errors name it already.
        out.write_all(&frame)?;
        for &(a, b) in &part.ranges {
            let len = (b - a) as u64;
            let cannot = |e| anyhow!("{}: cannot read: {e}", path.display());
            let copied = out.append_from(&mut input.range(a as u64, len).map_err(cannot)?)?;
            if copied != len {
                bail!(
                    "{}: the file changed while it was merged (it holds {copied} of the {len} bytes read at offset {a} before); merge it again once its writer is done",
                    path.display()
                );
            }
        }
    }
    out.commit()?;
    for p in &parts {
        let s = &p.segment;
        eprintln!(
            "tpuscope: host {} (process {}, pid {}) from {}: offset {} ns ({}, {} anchors, spread {} µs)",
            s.host,
            s.process_index,
            s.pid,
            s.source,
            s.offset_ns,
            s.alignment,
            s.anchors,
            s.spread_ns / 1000
        );
    }
    eprintln!(
        "tpuscope: wrote {} ({} hosts, job {job_id})",
        args.out.display(),
        parts.len()
    );
    Ok(0)
}

/// What pass 1 keeps of a segment's events: it decodes only clock anchors.
#[derive(Default)]
struct Kept {
    events: usize,
    /// The clock anchors, for the alignment.
    clocks: Vec<Record>,
    /// The last event in file order (every event record has a time), decoded at the end.
    last: Option<Last>,
}

/// The last event seen: decoded already (a clock, the client) or its raw payload.
enum Last {
    Decoded(Record),
    Raw(RecordKind, Vec<u8>),
}

impl Kept {
    /// What pass 1 decodes of the events.
    fn decodes(kind: RecordKind) -> bool {
        kind == RecordKind::Clock
    }

    fn add(&mut self, r: Skimmed<'_>) {
        self.events += 1;
        match r {
            Skimmed::Decoded(r) => {
                if matches!(r, Record::Clock(_)) {
                    self.clocks.push(r.clone());
                }
                self.last = Some(Last::Decoded(r));
            }
            Skimmed::Raw(kind, payload) => match &mut self.last {
                // One buffer for the whole pass.
                Some(Last::Raw(k, bytes)) => {
                    *k = kind;
                    bytes.clear();
                    bytes.extend_from_slice(payload);
                }
                last => *last = Some(Last::Raw(kind, payload.to_vec())),
            },
        }
    }

    /// The last event with a time, decoded (none when it does not decode).
    fn last_timed(&mut self) -> Option<Record> {
        let r = match self.last.take()? {
            Last::Decoded(r) => r,
            Last::Raw(kind, bytes) => Record::decode_payload(kind, &bytes).ok()?,
        };
        r.t_ns().is_some().then_some(r)
    }
}

/// A part as the user knows it: its input, and its host when the input holds several.
fn part_name(args: &MergeArgs, parts: &[Part], i: usize) -> String {
    let Some(p) = parts.get(i) else {
        return format!("part {i}");
    };
    let path = args.traces[p.input].display();
    if parts.iter().filter(|q| q.input == p.input).count() > 1 {
        format!(
            "{path} (host {}, process {})",
            p.segment.host, p.segment.process_index
        )
    } else {
        path.to_string()
    }
}

/// The hosts one input holds (one for a plain trace), with the alignment of each.
fn parts_of(input: usize, path: &Path, warnings: &mut Vec<String>) -> Result<Vec<Part>> {
    // One pass as the file streams by (a FIFO with no writer is refused, not waited on; the
    // header is checked before anything else is read): of the events only what pass 1 needs is
    // kept, per segment, and the frames' byte ranges per segment (adjacent frames make one
    // range; damaged bytes, a cut tail and segment markers are left out).
    let mut kept: Vec<Kept> = Vec::new();
    let mut ranges: Vec<Vec<(usize, usize)>> = Vec::new();
    let read_error = |e| crate::dump::read_error(path, e);
    let traces = TraceStream::open(path)
        .map_err(read_error)?
        .skim_frames(
            Kept::decodes,
            |segment, r| {
                if kept.len() <= segment {
                    kept.resize_with(segment + 1, Kept::default);
                }
                if let Some(k) = kept.get_mut(segment) {
                    k.add(r);
                }
            },
            |segment, start, end| {
                if ranges.len() <= segment {
                    ranges.resize_with(segment + 1, Vec::new);
                }
                let [start, end] = [start, end].map(|o| usize::try_from(o).unwrap_or(usize::MAX));
                if let Some(r) = ranges.get_mut(segment) {
                    match r.last_mut() {
                        Some(last) if last.1 == start => last.1 = end,
                        _ => r.push((start, end)),
                    }
                }
            },
        )
        .map_err(read_error)?;
    kept.resize_with(traces.len(), Kept::default);
    ranges.resize_with(traces.len(), Vec::new);
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let mut parts = Vec::new();
    for ((trace, ranges), mut kept) in traces.into_iter().zip(ranges).zip(kept) {
        let Some(m) = &trace.manifest else {
            warnings.push(format!(
                "tpuscope: warning: {}: a part without a manifest (damaged start) is left out",
                path.display()
            ));
            continue;
        };
        let completeness = match trace.completeness {
            Completeness::Complete => "complete",
            Completeness::NoEndRecord { .. } => "no_end_record",
            Completeness::Cut { offset, .. } => {
                warnings.push(format!(
                    "tpuscope: warning: {}: cut at byte {offset} (the process was killed or the file is incomplete): merging the {} records before the cut",
                    path.display(),
                    kept.events
                ));
                "cut"
            }
        };
        if !trace.damage.is_empty() {
            let bytes: u64 = trace.damage.iter().map(|d| d.len).sum();
            warnings.push(format!(
                "tpuscope: warning: {}: {bytes} damaged bytes skipped",
                path.display()
            ));
        }
        let a = align::alignment_of(trace.manifest.as_ref(), kept.clocks.iter());
        let mut slim = trace.clone();
        slim.strings.clear();
        slim.stacks.clear();
        slim.blobs.clear();
        slim.events = kept.last_timed().into_iter().collect();
        // A segment of an earlier merge keeps the name of the file it first came from.
        let source = trace
            .segment
            .as_ref()
            .map_or_else(|| name.clone(), |s| s.source.clone());
        parts.push(Part {
            input,
            ranges,
            slim,
            start_wall_ns: m.start_wall_ns,
            segment: Segment {
                index: 0,
                host: m.host.clone(),
                process_index: tpuscope_analyzers::hosts::process_index(&trace),
                job_id: m.job_id.clone(),
                offset_ns: a.offset_ns,
                alignment: a.method.to_string(),
                anchors: a.anchors,
                spread_ns: a.spread_ns,
                source,
                source_completeness: completeness.to_string(),
                pid: m.pid,
                // Set when the segment is written, from the frames it copies.
                len: 0,
            },
        });
    }
    if parts.is_empty() {
        bail!(
            "{}: no process in this trace has a manifest",
            path.display()
        );
    }
    Ok(parts)
}

/// The job the hosts share: their manifests' id, or one made from the processes when none
/// carries one (or, with `force`, when they carry different ones). Hosts of different jobs are
/// refused without `force`.
fn job_id(paths: &[PathBuf], parts: &[Part], force: bool) -> Result<String> {
    let mut ids: Vec<(&str, usize)> = parts
        .iter()
        .filter(|p| !p.segment.job_id.is_empty())
        .map(|p| (p.segment.job_id.as_str(), p.input))
        .collect();
    ids.sort_unstable();
    ids.dedup_by(|a, b| a.0 == b.0);
    match ids.as_slice() {
        [(id, _)] => Ok((*id).to_string()),
        [(a, ia), (b, ib), ..] if !force => bail!(
            "the traces belong to different jobs ({} has job id {a:?}, {} has {b:?}); merge the hosts of one job (--force merges them anyway)",
            paths[*ia].display(),
            paths[*ib].display()
        ),
        _ => {
            let mut key = String::new();
            for p in parts {
                key.push_str(&format!(
                    "{}/{}/{};",
                    p.segment.host, p.segment.pid, p.start_wall_ns
                ));
            }
            Ok(format!(
                "merged-{:016x}",
                tpuscope_core::writer::blob_hash(key.as_bytes())
            ))
        }
    }
}
