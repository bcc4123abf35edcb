//! `tpuscope dump`: every record of a trace, as JSON lines or as text, printed as it is read
//! (memory holds the interned definitions, not the events: a trace of any length, or a FIFO).

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

use anyhow::{Context, Result};
use tpuscope_analyzers::describe::{self, ExecutableNames};
use tpuscope_analyzers::executable_ids::ExecutableIds;
use tpuscope_core::event::Record;
use tpuscope_core::json::{manifest_json, record_json};
use tpuscope_core::{ReadError, Streamed, Trace, TraceStream};

use crate::summary::completeness_warning;

/// In JSON, the manifest line folds in the first client record (platform, devices), which comes
/// a few records after it: events before it wait, up to this many, then the line goes without.
const WAIT_FOR_CLIENT: usize = 4096;

/// The one-line message of a trace that cannot be read (the path once, the OS error once).
pub fn read_error(path: &Path, e: ReadError) -> anyhow::Error {
    anyhow::Error::msg(e.line(path))
}

/// The text of an input that is not a trace (a baseline report, a saved what-if), opened as a
/// trace is: a FIFO without a writer is refused after a few seconds, never waited on forever.
pub fn read_text_input(path: &Path, what: &str) -> Result<String> {
    use std::io::Read as _;
    let cannot = |e: String| anyhow::anyhow!("{what} {}: cannot read: {e}", path.display());
    let mut f = tpuscope_core::stream::TraceFile::open(path).map_err(|e| match e {
        ReadError::Io { err, .. } => cannot(err.to_string()),
        other => cannot(other.to_string()),
    })?;
    let mut text = String::new();
    f.read_to_string(&mut text)
        .map_err(|e| cannot(e.to_string()))?;
    Ok(text)
}

pub fn dump(path: &Path, as_json: bool) -> Result<()> {
    let mut stream = TraceStream::open(path).map_err(|e| read_error(path, e))?;
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let mut warnings = Warnings::default();
    let mut seg = Segment::new(as_json);
    // A merged job file holds one trace per host: each is dumped after a line naming it.
    let mut result: Result<(), DumpError> = (|| {
        while let Some(item) = stream.next_record()? {
            match item {
                Streamed::Event(r) => {
                    if let Some(t) = stream.trace() {
                        seg.event(t, r, &mut out)?;
                    }
                }
                Streamed::SegmentDone(prev) => {
                    seg.finish(&prev, &mut out)?;
                    trace_warnings(path, &prev, &mut warnings);
                }
            }
        }
        Ok(())
    })();
    if result.is_ok()
        && let Some(last) = stream.finish()
    {
        result = seg.finish(&last, &mut out).map_err(DumpError::from);
        trace_warnings(path, &last, &mut warnings);
    }
    let flushed = out.flush();
    match (result, flushed) {
        (Ok(()), Ok(())) => {}
        // A closed pipe (`| head`) is the reader's choice, not an error.
        (Err(DumpError::Write(e)), _) | (Ok(()), Err(e))
            if e.kind() == io::ErrorKind::BrokenPipe =>
        {
            return Ok(());
        }
        (Err(DumpError::Write(e)), _) | (Ok(()), Err(e)) => {
            return Err(e).context("cannot write to stdout");
        }
        (Err(DumpError::Read(e)), _) => {
            warnings.print();
            return Err(read_error(path, e));
        }
    }
    warnings.print();
    Ok(())
}

enum DumpError {
    Read(ReadError),
    Write(io::Error),
}

impl From<ReadError> for DumpError {
    fn from(e: ReadError) -> Self {
        DumpError::Read(e)
    }
}

impl From<io::Error> for DumpError {
    fn from(e: io::Error) -> Self {
        DumpError::Write(e)
    }
}

/// Printing state of the segment being read.
struct Segment {
    as_json: bool,
    /// The segment line and manifest are out.
    started: bool,
    /// Events read before the manifest line could be printed (JSON: waiting for the client).
    waiting: Vec<Record>,
    /// Executable names learned from this segment's records so far (text lines name them).
    names: ExecutableNames,
    /// Executable ids as the report makes them unique.
    ids: ExecutableIds,
}

impl Segment {
    fn new(as_json: bool) -> Segment {
        Segment {
            as_json,
            started: false,
            waiting: Vec::new(),
            names: ExecutableNames::new(),
            ids: ExecutableIds::default(),
        }
    }

    fn event(&mut self, trace: &Trace, r: Record, out: &mut impl Write) -> io::Result<()> {
        if !self.started {
            let client = matches!(r, Record::Client(_));
            self.waiting.push(r);
            if self.as_json && !client && self.waiting.len() < WAIT_FOR_CLIENT {
                return Ok(());
            }
            return self.start(trace, out);
        }
        self.record(trace, &r, out)
    }

    fn start(&mut self, trace: &Trace, out: &mut impl Write) -> io::Result<()> {
        self.started = true;
        segment_line(trace, self.as_json, out)?;
        if self.as_json {
            writeln!(out, "{}", manifest_json(trace))?;
        } else {
            text_header(trace, out)?;
        }
        for r in std::mem::take(&mut self.waiting) {
            self.record(trace, &r, out)?;
        }
        Ok(())
    }

    fn record(&mut self, trace: &Trace, r: &Record, out: &mut impl Write) -> io::Result<()> {
        if self.as_json {
            writeln!(out, "{}", record_json(trace, r))
        } else {
            // Named as the report names them: an address a plugin reused is another executable.
            let unique = self.ids.apply(r);
            let r = unique.as_ref().unwrap_or(r);
            describe::learn_name(&mut self.names, r);
            text_record(trace, r, &self.names, out)
        }
    }

    /// The segment ended (`trace` is it, finished): what is left of it, then the end record.
    fn finish(&mut self, trace: &Trace, out: &mut impl Write) -> io::Result<()> {
        if !self.started {
            self.start(trace, out)?;
        }
        if self.as_json
            && let Some(e) = &trace.end
        {
            writeln!(out, "{}", record_json(trace, &Record::End(e.clone())))?;
        }
        *self = Segment::new(self.as_json);
        Ok(())
    }
}

/// Warnings said after the output, each kind a few times at most: a forged file of 100 000
/// segments is not 100 000 lines.
#[derive(Default)]
pub struct Warnings {
    /// By shape (the text without its numbers), in first-seen order: lines kept, lines dropped.
    kinds: Vec<(String, Vec<String>, u64)>,
    index: HashMap<String, usize>,
}

impl Warnings {
    /// Lines of one kind shown before "… and N more like this".
    const SHOWN: usize = 3;

    pub fn add(&mut self, line: String) {
        let shape: String = line.chars().filter(|c| !c.is_ascii_digit()).collect();
        let i = *self.index.entry(shape).or_insert_with(|| {
            self.kinds.push((String::new(), Vec::new(), 0));
            self.kinds.len() - 1
        });
        let (_, shown, more) = &mut self.kinds[i];
        if shown.len() < Self::SHOWN {
            shown.push(line);
        } else {
            *more += 1;
        }
    }

    pub fn print(&self) {
        for (_, shown, more) in &self.kinds {
            for l in shown {
                eprintln!("{l}");
            }
            if *more > 0 {
                eprintln!("tpuscope: … and {more} more like this");
            }
        }
    }
}

/// The header of one host's part of a merged file (nothing for a plain trace).
fn segment_line(trace: &Trace, as_json: bool, out: &mut impl Write) -> io::Result<()> {
    let Some(s) = &trace.segment else {
        return Ok(());
    };
    if as_json {
        let v = serde_json::json!({
            "kind": "segment",
            "index": s.index,
            "host": s.host,
            "process_index": s.process_index,
            "pid": s.pid,
            "job_id": s.job_id,
            "offset_ns": s.offset_ns,
            "alignment": s.alignment,
            "anchors": s.anchors,
            "spread_ns": s.spread_ns,
            "source": s.source,
            "source_completeness": s.source_completeness,
        });
        writeln!(out, "{v}")
    } else {
        writeln!(
            out,
            "== segment {}: host {} process {} (from {}; job {}; clock offset {} ns by {})",
            s.index, s.host, s.process_index, s.source, s.job_id, s.offset_ns, s.alignment
        )
    }
}

/// What a reader of `trace` (read from `path`, or one host of it) must know of what it holds: damage
/// skipped, records too new to read, a cut or a missing end. `dump` and `export` say these.
pub fn trace_warnings(path: &Path, trace: &Trace, warnings: &mut Warnings) {
    if !trace.damage.is_empty() {
        let bytes: u64 = trace.damage.iter().map(|d| d.len).sum();
        warnings.add(format!(
            "tpuscope: warning: {}: {} damaged region(s), {bytes} bytes skipped (first at byte {})",
            path.display(),
            trace.damage.len(),
            trace.damage.first().map(|d| d.offset).unwrap_or(0)
        ));
    }
    if trace.unknown_records > 0 {
        warnings.add(format!(
            "tpuscope: note: {}: {} record(s) of kinds newer than this tpuscope were skipped",
            path.display(),
            trace.unknown_records
        ));
    }
    if let Some(w) = completeness_warning(path, trace) {
        warnings.add(format!("tpuscope: {w}"));
    }
}

fn text_header(trace: &Trace, out: &mut impl Write) -> io::Result<()> {
    if let Some(m) = &trace.manifest {
        writeln!(
            out,
            "trace of pid {} on {}: {}",
            m.pid,
            m.host,
            m.command_line.join(" ")
        )?;
        writeln!(
            out,
            "plugin {} (PJRT API {}.{}), role {}",
            m.plugin_path, m.pjrt_api_major, m.pjrt_api_minor, m.role
        )?;
        let versions: Vec<String> = m
            .package_versions
            .iter()
            .map(|kv| format!("{}=={}", kv.key, kv.value))
            .collect();
        if !versions.is_empty() {
            writeln!(out, "packages {}", versions.join(" "))?;
        }
    }
    Ok(())
}

/// One record, one line: the time since the process started, then the record as every view
/// words it.
fn text_record(
    trace: &Trace,
    r: &Record,
    names: &ExecutableNames,
    out: &mut impl Write,
) -> io::Result<()> {
    let Some(d) = describe::record(trace, r, names) else {
        return Ok(());
    };
    let t0 = trace
        .manifest
        .as_ref()
        .map(|m| m.start_mono_ns)
        .unwrap_or(0);
    let t = r.t_ns().map(|t| t.saturating_sub(t0)).unwrap_or(0);
    // One record, one line: messages give their first line, and a name or a shape from a
    // hostile trace cannot break the line either.
    let line = d.line().replace(['\n', '\r'], " ");
    writeln!(out, "{:>12} {line}", format!("{:.3}ms", t as f64 / 1e6))
}
