//! The traces the window shows: read once, or followed while a workload still writes them.

use std::borrow::Cow;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use tpuscope_analyzers::digest::{Digest, DigestBuilder};

use tpuscope_core::event::{Record, RecordKind, SEGMENT_KIND};
use tpuscope_core::format::{HEADER_LEN, parse_frame_header};
use tpuscope_core::stream::{Skimmed, TraceFile, TraceStream};
use tpuscope_core::wire::TransferRef;
use tpuscope_core::{Completeness, ReadError, Trace, TraceBuilder, read_trace, read_traces};

use crate::lanes::{LaneBuilder, SourceLanes};

/// The sample opened when no trace is given: a real JAX run that recompiles its train step.
pub const SAMPLE: &[u8] = include_bytes!("../../sample_traces/real/jax_lr.tps");
pub const SAMPLE_LABEL: &str = "jax_lr.tps (bundled sample)";
/// `tpuscope whatif` of the sample for v5e:2x2 (libtpu 0.0.52), shown in its What-if tab.
const SAMPLE_WHATIF: &str = include_str!("../../sample_traces/real/jax_lr.whatif-v5e-2x2.json");

/// The bundled sample's what-if.
pub fn sample_whatif() -> Option<tpuscope_analyzers::whatif::WhatIfReport> {
    serde_json::from_str(SAMPLE_WHATIF).ok()
}

/// How many events apart the offsets a run read from its file notes are: reading one back
/// decodes at most this many records.
const MARK_EVERY: usize = 256;

/// A run as the window holds it: its trace's tables, the digest of its events and its lanes,
/// made once, and its records: held whole (a trace given as bytes, or followed as it grows),
/// or read back from its file when one is asked for (a finished file, read as it streamed by:
/// its records are never held).
#[derive(Debug)]
pub struct Run {
    /// The tables (strings, stacks, blobs, manifest); its events only when they are held.
    pub trace: Arc<Trace>,
    pub digest: Arc<Digest>,
    pub lanes: Arc<SourceLanes>,
    records: Records,
}

#[derive(Debug)]
enum Records {
    /// In `trace.events`.
    Held,
    /// In the file at `path`: `marks[k]` is the offset of the frame of event `k·MARK_EVERY`.
    File {
        path: PathBuf,
        /// The file as it was read: a record is read back only from that file.
        read: FileId,
        marks: Vec<u64>,
        /// The last one read back (a hovered bar asks for the same record every frame).
        last: Mutex<Option<(usize, Record)>>,
    },
}

/// Which file, as it was: its device, inode, length and change time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
    ctime_ns: i128,
}

impl FileId {
    fn of(path: &Path) -> std::io::Result<FileId> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path)?;
        Ok(FileId {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        })
    }
}

/// What a run read from its file gathers per segment as the events stream by.
#[derive(Default)]
struct Fold {
    digest: DigestBuilder,
    lanes: LaneBuilder,
    marks: Vec<u64>,
}

impl Run {
    /// A run whose records are all held.
    pub fn held(trace: Trace) -> Run {
        let (digest, lanes) = LaneBuilder::of(&trace);
        Run {
            trace: Arc::new(trace),
            digest: Arc::new(digest),
            lanes: Arc::new(lanes),
            records: Records::Held,
        }
    }

    /// The runs of a regular file (one per host of a merged job), read as it streams by: each
    /// event goes into its segment's digest and lanes, and every [`MARK_EVERY`]th one's offset is
    /// noted for reading records back.
    fn read_folded(path: &Path) -> Result<Vec<Run>, ReadError> {
        let read = FileId::of(path).map_err(|err| ReadError::Io {
            path: path.display().to_string(),
            err,
        })?;
        let mut folds: Vec<Fold> = Vec::new();
        let traces =
            TraceStream::open(path)?.skim_piped(DigestBuilder::decodes, |segment, frame, r| {
                if folds.len() <= segment {
                    folds.resize_with(segment + 1, Fold::default);
                }
                let Some(f) = folds.get_mut(segment) else {
                    return;
                };
                let e = f.digest.events();
                let e32 = u32::try_from(e).unwrap_or(u32::MAX);
                match r {
                    Skimmed::Raw(RecordKind::Transfer, payload)
                        if let Some(t) = TransferRef::parse(payload) =>
                    {
                        // Most of a long trace: parsed once, for both.
                        f.lanes.add_transfer(e32, &t);
                        f.digest.push_transfer(&t);
                    }
                    Skimmed::Decoded(rec) => {
                        f.lanes.add(e32, &rec, &f.digest);
                        f.digest.push(&rec);
                    }
                    Skimmed::Raw(kind, payload) => {
                        if let Ok(rec) = Record::decode_payload(kind, payload) {
                            f.lanes.add(e32, &rec, &f.digest);
                        }
                        f.digest.push_skimmed(Skimmed::Raw(kind, payload));
                    }
                }
                if f.digest.events() > e && e.is_multiple_of(MARK_EVERY) {
                    f.marks.push(frame);
                }
            })?;
        folds.resize_with(traces.len(), Fold::default);
        Ok(traces
            .into_iter()
            .zip(folds)
            .map(|(t, f)| {
                let (trace, digest) = f.digest.finish_for(t);
                let lanes = f.lanes.finish(&trace);
                Run {
                    trace: Arc::new(trace),
                    digest: Arc::new(digest),
                    lanes: Arc::new(lanes),
                    records: Records::File {
                        path: path.to_path_buf(),
                        read,
                        marks: f.marks,
                        last: Mutex::new(None),
                    },
                }
            })
            .collect())
    }

    /// Its `event`-th event record: held, kept in the digest, or read back from the file.
    /// `Err` says why there is none: no such record, or the file changed since it was read (a
    /// record read back from another file would describe something that never ran).
    pub fn record(&self, event: usize) -> Result<Cow<'_, Record>, String> {
        let none = || format!("no record {event} in this trace");
        let (path, read, marks, last) = match &self.records {
            Records::Held => {
                return self
                    .trace
                    .events
                    .get(event)
                    .map(Cow::Borrowed)
                    .ok_or_else(none);
            }
            Records::File {
                path,
                read,
                marks,
                last,
            } => (path, read, marks, last),
        };
        if let Some(r) = self.digest.other(event) {
            return Ok(Cow::Borrowed(r));
        }
        let mut last = last.lock().map_err(|_| none())?;
        if let Some((e, r)) = last.as_ref()
            && *e == event
        {
            return Ok(Cow::Owned(r.clone()));
        }
        let shown = path.display();
        if FileId::of(path).ok().as_ref() != Some(read) {
            return Err(format!(
                "{shown} changed since it was opened: reopen it to see this record"
            ));
        }
        let offset = *marks.get(event / MARK_EVERY).ok_or_else(none)?;
        let r = tpuscope_core::stream::event_at(path, offset, event % MARK_EVERY)
            .map_err(|e| e.line(path))?
            .ok_or_else(none)?;
        *last = Some((event, r.clone()));
        Ok(Cow::Owned(r))
    }
}

/// A trace file that may still grow: the bytes after `offset` are pushed into a builder.
#[derive(Debug)]
pub struct Follower {
    pub path: PathBuf,
    /// Bytes of the file consumed so far.
    pub offset: u64,
    builder: TraceBuilder,
    /// The run made of what was read so far, made when first asked for after it changed.
    run: OnceLock<Arc<Run>>,
}

impl Follower {
    /// Starts from the bytes already read from `path`.
    pub fn new(path: &Path, bytes: &[u8]) -> Result<Follower, ReadError> {
        let mut builder = TraceBuilder::new();
        builder.push(bytes)?;
        Ok(Follower {
            path: path.to_path_buf(),
            offset: bytes.len() as u64,
            builder,
            run: OnceLock::new(),
        })
    }

    pub fn trace(&self) -> Option<&Trace> {
        self.builder.trace()
    }

    /// What was read so far as a run (its trace copied: the builder goes on).
    pub fn run(&self) -> Option<Arc<Run>> {
        let t = self.trace()?;
        Some(Arc::clone(
            self.run.get_or_init(|| Arc::new(Run::held(t.clone()))),
        ))
    }

    /// Reads what was appended since the last call; returns how many records it held.
    pub fn poll(&mut self) -> Result<usize, String> {
        let shown = self.path.display();
        // Opening a FIFO put in the file's place would wait for a writer: looked at first.
        if !std::fs::metadata(&self.path).is_ok_and(|m| m.is_file()) {
            return Err(format!(
                "{shown}: no longer a regular file; reopen it to read what is there now"
            ));
        }
        let mut f = File::open(&self.path).map_err(|e| format!("{shown}: {e}"))?;
        let len = f.metadata().map_err(|e| format!("{shown}: {e}"))?.len();
        if len < self.offset {
            // Replaced or truncated under us: what was read no longer describes the file.
            return Err(format!(
                "{}: the file shrank from {} to {len} bytes; reopen it to read the new one",
                self.path.display(),
                self.offset
            ));
        }
        if len == self.offset {
            return Ok(0);
        }
        f.seek(SeekFrom::Start(self.offset))
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        let mut buf = Vec::with_capacity((len - self.offset) as usize);
        f.read_to_end(&mut buf)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        self.offset += buf.len() as u64;
        let n = self.builder.push(&buf).map_err(|e| e.to_string())?;
        if n > 0 {
            self.run = OnceLock::new();
        }
        Ok(n)
    }
}

/// How a source holds its trace.
#[derive(Debug)]
pub enum Held {
    Static(Arc<Run>),
    Live(Box<Follower>),
}

/// One trace given to the viewer.
#[derive(Debug)]
pub struct Source {
    /// What the window and the report call it (the path as given).
    pub label: String,
    pub path: Option<PathBuf>,
    pub held: Option<Held>,
    /// Why it could not be read (then `held` is `None`), or why following it stopped.
    pub error: Option<String>,
}

impl Source {
    /// Whether it holds a trace (one that could not be read does not).
    pub fn has_trace(&self) -> bool {
        match &self.held {
            Some(Held::Static(_)) => true,
            Some(Held::Live(f)) => f.trace().is_some(),
            None => false,
        }
    }

    /// Its run: made once for a trace that cannot change, afresh after a followed one grew.
    pub fn run(&self) -> Option<Arc<Run>> {
        match self.held.as_ref()? {
            Held::Static(r) => Some(Arc::clone(r)),
            Held::Live(f) => f.run(),
        }
    }

    pub fn is_live(&self) -> bool {
        matches!(self.held, Some(Held::Live(_)))
    }

    /// The bundled sample.
    pub fn sample() -> Source {
        Source::from_bytes(SAMPLE_LABEL, SAMPLE)
    }

    /// A trace held in memory (never followed).
    pub fn from_bytes(label: &str, bytes: &[u8]) -> Source {
        match read_trace(bytes) {
            Ok(t) => Source::held(label.to_string(), None, t),
            Err(e) => Source::failed(label, None, e.to_string()),
        }
    }

    fn held(label: String, path: Option<&Path>, t: Trace) -> Source {
        Source {
            label,
            path: path.map(Path::to_path_buf),
            held: Some(Held::Static(Arc::new(Run::held(t)))),
            error: None,
        }
    }

    /// Opens a trace file. A regular file is followed when `follow` is set, or when it has no
    /// end record (its writer may still be running); a FIFO or device is read once.
    pub fn open(path: &Path, follow: bool) -> Source {
        match read_checked(path) {
            Ok((bytes, regular)) => Source::from_file(path, &bytes, follow && regular, regular),
            Err(e) => Source::failed(&path.display().to_string(), Some(path), e),
        }
    }

    /// A trace read from `path`; followed when `follow`, or when `may_grow` and it has no end
    /// record.
    fn from_file(path: &Path, bytes: &[u8], follow: bool, may_grow: bool) -> Source {
        let label = path.display().to_string();
        let trace = match read_trace(bytes) {
            Ok(t) => t,
            Err(e) => return Source::failed(&label, Some(path), format!("{label}: {e}")),
        };
        let growing = may_grow && matches!(trace.completeness, Completeness::NoEndRecord { .. });
        if follow || growing {
            drop(trace);
            match Follower::new(path, bytes) {
                Ok(f) => Source {
                    label,
                    path: Some(path.to_path_buf()),
                    held: Some(Held::Live(Box::new(f))),
                    error: None,
                },
                Err(e) => Source::failed(&label, Some(path), format!("{label}: {e}")),
            }
        } else {
            Source::held(label, Some(path), trace)
        }
    }

    /// The hosts of a merged job file (`tpuscope merge`) read from `path`, one source each in
    /// the file's order (process index); `None` when `bytes` are not a merged file. Never
    /// followed: a merge is written whole.
    fn segments(path: &Path, bytes: &[u8]) -> Option<Vec<Source>> {
        // A merged file starts with a segment record right after the header.
        let first = parse_frame_header(bytes.get(HEADER_LEN..)?)?;
        if first.kind != SEGMENT_KIND {
            return None;
        }
        let traces = read_traces(bytes).ok()?;
        Some(
            traces
                .into_iter()
                .map(|t| Source::of_run(path, Run::held(t)))
                .collect(),
        )
    }

    /// A run read from `path` (a host of a merged job is named by process index and host).
    fn of_run(path: &Path, run: Run) -> Source {
        let host = run.trace.segment.as_ref().map_or_else(String::new, |s| {
            format!(" · p{} {}", s.process_index, s.host)
        });
        Source {
            label: format!("{}{host}", path.display()),
            path: Some(path.to_path_buf()),
            held: Some(Held::Static(Arc::new(run))),
            error: None,
        }
    }

    /// A regular file that will not grow, read as it streams by (its bytes and records are
    /// never held whole): its sources (one per host of a merged job), or the failed source when
    /// it cannot be read. `None` when it is not a regular file, or is one trace without an end
    /// record (its writer may still be running: it is read whole and followed).
    fn read_finished(path: &Path) -> Option<Result<Vec<Source>, Source>> {
        // Asked before opening: a FIFO gives its bytes to one read only, which must be the
        // whole read.
        if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
            return None;
        }
        let runs = match Run::read_folded(path) {
            Ok(r) => r,
            Err(e) => {
                let label = path.display().to_string();
                return Some(Err(Source::failed(&label, Some(path), e.line(path))));
            }
        };
        let merged = runs.iter().any(|r| r.trace.segment.is_some());
        if let [r] = runs.as_slice()
            && !merged
            && matches!(r.trace.completeness, Completeness::NoEndRecord { .. })
        {
            return None;
        }
        Some(Ok(runs
            .into_iter()
            .map(|r| Source::of_run(path, r))
            .collect()))
    }

    fn failed(label: &str, path: Option<&Path>, error: String) -> Source {
        Source {
            label: label.to_string(),
            path: path.map(Path::to_path_buf),
            held: None,
            error: Some(error),
        }
    }

    /// Reads what a followed file gained; returns the records absorbed.
    pub fn poll(&mut self) -> usize {
        let Some(Held::Live(f)) = self.held.as_mut() else {
            return 0;
        };
        let stop = |held: &mut Option<Held>| {
            if let Some(Held::Live(f)) = held.take() {
                *held = f
                    .builder
                    .into_trace()
                    .map(|t| Held::Static(Arc::new(Run::held(t))));
            }
        };
        match f.poll() {
            Ok(n) => {
                // The writer closed the trace: nothing more will come.
                if f.trace().is_some_and(|t| t.end.is_some()) {
                    stop(&mut self.held);
                }
                n
            }
            Err(e) => {
                // Keep what was read; stop following.
                stop(&mut self.held);
                self.error = Some(e);
                0
            }
        }
    }
}

/// Opens every path (the sample when there are none); labels are made unique so that the
/// report's runs can be matched back to their sources by label.
pub fn open_all(paths: &[PathBuf], follow: bool) -> Vec<Source> {
    if paths.is_empty() {
        return vec![Source::sample()];
    }
    let mut out: Vec<Source> = Vec::new();
    for p in paths {
        if !follow {
            match Source::read_finished(p) {
                Some(Ok(sources)) => {
                    push_unique(&mut out, sources);
                    continue;
                }
                Some(Err(s)) => {
                    push_unique(&mut out, vec![s]);
                    continue;
                }
                None => {}
            }
        }
        // Read once: a FIFO gives its bytes to one read only.
        let s = match read_checked(p) {
            Ok((bytes, regular)) => {
                if let Some(hosts) = Source::segments(p, &bytes) {
                    out.extend(hosts);
                    continue;
                }
                Source::from_file(p, &bytes, follow && regular, regular)
            }
            Err(e) => Source::failed(&p.display().to_string(), Some(p), e),
        };
        push_unique(&mut out, vec![s]);
    }
    out
}

/// Appends `sources`, each label made unique among those already there.
fn push_unique(out: &mut Vec<Source>, sources: Vec<Source>) {
    for mut s in sources {
        let base = s.label.clone();
        let mut n = 2;
        while out.iter().any(|o| o.label == s.label) {
            s.label = format!("{base} ({n})");
            n += 1;
        }
        out.push(s);
    }
}

/// A trace file's bytes, its header checked first (a large file that is not a trace, or an
/// endless device, is refused after 16 bytes), and whether it is a regular file (one that may
/// grow). A FIFO with no writer is refused, not waited on (`TraceFile::open`).
fn read_checked(path: &Path) -> Result<(Vec<u8>, bool), String> {
    let label = path.display();
    let cannot = |e| format!("{label}: cannot read: {e}");
    let mut f = TraceFile::open(path).map_err(|e| e.to_string())?;
    let regular = f.file_len().is_some();
    let mut bytes = Vec::new();
    (&mut f).take(16).read_to_end(&mut bytes).map_err(cannot)?;
    tpuscope_core::reader::parse_header_start(&bytes).map_err(|e| format!("{label}: {e}"))?;
    f.read_to_end(&mut bytes).map_err(cannot)?;
    Ok((bytes, regular))
}
