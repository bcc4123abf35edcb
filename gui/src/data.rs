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

use crate::kept::ReadCache;
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

/// Bytes a followed file is read in at a time.
const FOLLOW_PIECE: usize = 8 << 20;

/// How many events apart the offsets a run read from its file notes are: reading one back
/// decodes at most this many records.
const MARK_EVERY: usize = 256;

/// Where an event is read back from: the offset of its frame and the events before it in that
/// frame (a pack holds many).
pub(crate) type Mark = (u64, u32);

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
    /// In the file at `path`: `marks[k]` is the offset of the frame of event `k·MARK_EVERY`
    /// and how many events come before it in that frame (a pack holds many).
    File {
        path: PathBuf,
        /// The file as it was read: a record is read back only from that file.
        read: FileId,
        marks: Vec<Mark>,
        /// The last one read back (a hovered bar asks for the same record every frame).
        last: Mutex<Option<(usize, Record)>>,
    },
}

/// Which file, as it was: its device, inode, length and change time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
    ctime_ns: i128,
    /// A file followed as it grows: the same file is one at least as long.
    growing: bool,
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
            growing: false,
        })
    }

    /// Whether `path` is still the file read.
    fn still(&self, path: &Path) -> bool {
        FileId::of(path).is_ok_and(|now| {
            if self.growing {
                (now.dev, now.ino) == (self.dev, self.ino) && now.len >= self.len
            } else {
                now == *self
            }
        })
    }
}

/// What a run read from its file gathers per segment as the events stream by.
#[derive(Clone, Default)]
struct Fold {
    digest: DigestBuilder,
    lanes: LaneBuilder,
    marks: Vec<Mark>,
    /// The frame of the last event, and the index of its first event.
    frame: (u64, usize),
}

impl std::fmt::Debug for Fold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fold({} events)", self.digest.events())
    }
}

impl Fold {
    /// An event record whose frame starts at `frame`, as a skimming reader hands it out.
    fn push(&mut self, frame: u64, r: Skimmed<'_>) {
        let e = self.digest.events();
        let e32 = u32::try_from(e).unwrap_or(u32::MAX);
        match r {
            Skimmed::Raw(RecordKind::Transfer, payload)
                if let Some(t) = TransferRef::parse(payload) =>
            {
                // Most of a long trace: parsed once, for both.
                self.lanes.add_transfer(e32, &t);
                self.digest.push_transfer(&t);
            }
            Skimmed::Decoded(rec) => {
                self.lanes.add(e32, &rec, &self.digest);
                self.digest.push(&rec);
            }
            // A kind the reader was not asked to decode, or a transfer that does not read in
            // place: decoded once, for both (one that does not decode is counted by the digest).
            Skimmed::Raw(kind, payload) => match Record::decode_payload(kind, payload) {
                Ok(rec) => {
                    self.lanes.add(e32, &rec, &self.digest);
                    self.digest.push(&rec);
                }
                Err(_) => self.digest.push_skimmed(Skimmed::Raw(kind, payload)),
            },
        }
        if frame != self.frame.0 {
            self.frame = (frame, e);
        }
        if self.digest.events() > e && e.is_multiple_of(MARK_EVERY) {
            let lead = u32::try_from(e - self.frame.1).unwrap_or(u32::MAX);
            self.marks.push((frame, lead));
        }
    }

    /// The run of `trace` (its tables), whose records are in the file at `path`.
    fn finish(self, trace: Trace, path: &Path, read: FileId) -> Run {
        let (trace, digest) = self.digest.finish_for(trace);
        let lanes = self.lanes.finish(&trace);
        Run {
            trace: Arc::new(trace),
            digest: Arc::new(digest),
            lanes: Arc::new(lanes),
            records: Records::File {
                path: path.to_path_buf(),
                read,
                marks: self.marks,
                last: Mutex::new(None),
            },
        }
    }
}

impl Run {
    /// A run read back from the cache of reads: its records are in the file at `path`, as it
    /// was (`read`) when they were kept.
    pub(crate) fn read_back(
        trace: Trace,
        digest: Arc<Digest>,
        lanes: Arc<SourceLanes>,
        path: &Path,
        read: FileId,
        marks: Vec<Mark>,
    ) -> Run {
        Run {
            trace: Arc::new(trace),
            digest,
            lanes,
            records: Records::File {
                path: path.to_path_buf(),
                read,
                marks,
                last: Mutex::new(None),
            },
        }
    }

    /// The offsets its records are read back from (`None` when they are held).
    pub(crate) fn marks(&self) -> Option<&[Mark]> {
        match &self.records {
            Records::Held => None,
            Records::File { marks, .. } => Some(marks),
        }
    }

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
    /// noted for reading records back. A read kept in `cache` is taken from there, and one made
    /// is kept there.
    fn read_folded(path: &Path, cache: Option<&dyn ReadCache>) -> Result<Vec<Run>, ReadError> {
        let read = FileId::of(path).map_err(|err| ReadError::Io {
            path: path.display().to_string(),
            err,
        })?;
        let slot = cache.and_then(|c| c.slot(path));
        if let Some(runs) = slot
            .as_ref()
            .and_then(|s| s.open())
            .and_then(|(mut src, at)| crate::kept::decode(&mut *src, at, path, read))
        {
            return Ok(runs);
        }
        let runs = Run::read_unkept(path, read)?;
        // One that is followed instead is read again as it grows: nothing to keep.
        if let Some(slot) = slot.filter(|_| !Run::followed_instead(&runs)) {
            let ended = runs
                .iter()
                .all(|r| matches!(r.trace.completeness, Completeness::Complete));
            slot.store(path, ended, &mut |w| crate::kept::write(&runs, w));
        }
        Ok(runs)
    }

    /// Whether the runs read from a finished-looking file are one trace without an end record
    /// (not a merged job's host): its writer may still be running, so it is followed instead.
    fn followed_instead(runs: &[Run]) -> bool {
        let merged = runs.iter().any(|r| r.trace.segment.is_some());
        matches!(runs, [r] if !merged
            && matches!(r.trace.completeness, Completeness::NoEndRecord { .. }))
    }

    fn read_unkept(path: &Path, read: FileId) -> Result<Vec<Run>, ReadError> {
        let mut folds: Vec<Fold> = Vec::new();
        let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let traces = TraceStream::open(path)?.skim_parallel(
            threads,
            DigestBuilder::decodes,
            |segment, frame, r| {
                if folds.len() <= segment {
                    folds.resize_with(segment + 1, Fold::default);
                }
                if let Some(f) = folds.get_mut(segment) {
                    f.push(frame, r);
                }
            },
        )?;
        folds.resize_with(traces.len(), Fold::default);
        Ok(traces
            .into_iter()
            .zip(folds)
            .map(|(t, f)| f.finish(t, path, read))
            .collect())
    }

    /// Its `event`-th event record: held, kept in the digest, or read back from the file.
    /// `Err` says why there is none: no such record, or the file changed since it was read (a
    /// record read back from another file would describe something that never ran).
    pub fn record(&self, event: usize) -> Result<Cow<'_, Record>, String> {
        // As the analyses read it (an executable at an address the plugin reused is its own).
        let r = self.record_as_written(event)?;
        Ok(match self.digest.as_analysed(&r) {
            Some(unique) => Cow::Owned(unique),
            None => r,
        })
    }

    fn record_as_written(&self, event: usize) -> Result<Cow<'_, Record>, String> {
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
        if !read.still(path) {
            return Err(format!(
                "{shown} changed since it was opened: reopen it to see this record"
            ));
        }
        let (offset, lead) = *marks.get(event / MARK_EVERY).ok_or_else(none)?;
        let skip = lead as usize + event % MARK_EVERY;
        let r = tpuscope_core::stream::event_at(path, offset, skip)
            .map_err(|e| e.line(path))?
            .ok_or_else(none)?;
        *last = Some((event, r.clone()));
        Ok(Cow::Owned(r))
    }
}

/// A trace file that may still grow: the bytes after `offset` are pushed into a builder, and
/// the events it decodes are folded as they come (never held).
#[derive(Debug)]
pub struct Follower {
    pub path: PathBuf,
    /// Bytes of the file consumed so far.
    pub offset: u64,
    /// The file followed: records are read back from it while it is still this one.
    id: FileId,
    builder: TraceBuilder,
    fold: Fold,
    /// The run made of what was read so far, made when first asked for after it changed.
    run: OnceLock<Arc<Run>>,
}

impl Follower {
    /// Reads `path` as it is now, folding its events as they are read.
    pub fn open(path: &Path) -> Result<Follower, String> {
        let shown = path.display();
        let id = FileId::of(path).map_err(|e| format!("{shown}: {e}"))?;
        // Its header first: a file that is not a trace (or is empty) is refused, not waited on.
        let file = File::open(path).map_err(|e| format!("{shown}: cannot read: {e}"))?;
        header_checked(path, file)?;
        let mut f = Follower {
            path: path.to_path_buf(),
            offset: 0,
            id,
            builder: TraceBuilder::noting_offsets(),
            fold: Fold::default(),
            run: OnceLock::new(),
        };
        f.poll()?;
        Ok(f)
    }

    /// Folds the events the builder decoded since the last call.
    fn fold_events(&mut self) {
        for (frame, r) in self.builder.take_events_at() {
            self.fold.push(frame, Skimmed::Decoded(r));
        }
    }

    /// The trace so far: its tables (its events are folded as they come).
    pub fn trace(&self) -> Option<&Trace> {
        self.builder.trace()
    }

    /// The file as read so far: it may grow.
    fn read_so_far(&self) -> FileId {
        FileId {
            len: self.offset,
            growing: true,
            ..self.id
        }
    }

    /// What was read so far as a run (of a copy of the fold: it goes on).
    pub fn run(&self) -> Option<Arc<Run>> {
        let t = self.trace()?;
        Some(Arc::clone(self.run.get_or_init(|| {
            Arc::new(
                self.fold
                    .clone()
                    .finish(t.clone(), &self.path, self.read_so_far()),
            )
        })))
    }

    /// The run of everything read, once following stops.
    fn into_run(self) -> Option<Run> {
        let read = self.read_so_far();
        let trace = self.builder.into_trace()?;
        Some(self.fold.finish(trace, &self.path, read))
    }

    /// Reads what was appended since the last call; returns how many records it held.
    pub fn poll(&mut self) -> Result<usize, String> {
        let shown = self.path.display().to_string();
        // Opening a FIFO put in the file's place would wait for a writer: looked at first.
        if !std::fs::metadata(&self.path).is_ok_and(|m| m.is_file()) {
            return Err(format!(
                "{shown}: no longer a regular file; reopen it to read what is there now"
            ));
        }
        let mut f = File::open(&self.path).map_err(|e| format!("{shown}: {e}"))?;
        let len = f.metadata().map_err(|e| format!("{shown}: {e}"))?.len();
        if FileId::of(&self.path).is_ok_and(|now| (now.dev, now.ino) != (self.id.dev, self.id.ino))
        {
            return Err(format!(
                "{shown}: replaced by another file; reopen it to read the new one"
            ));
        }
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
            .map_err(|e| format!("{shown}: {e}"))?;
        // In pieces, each folded before the next is read: what is held is a piece's records,
        // not the file's.
        let mut n = 0;
        let mut buf = vec![0u8; FOLLOW_PIECE.min((len - self.offset) as usize)];
        while self.offset < len {
            let got = f.read(&mut buf).map_err(|e| format!("{shown}: {e}"))?;
            if got == 0 {
                break;
            }
            self.offset += got as u64;
            n += self
                .builder
                .push(&buf[..got])
                .map_err(|e| format!("{shown}: {e}"))?;
            self.fold_events();
        }
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

    /// Opens a trace file (the first host of a merged job file); see [`open_all`].
    pub fn open(path: &Path, follow: bool) -> Source {
        Source::open_each(path, follow, None)
            .into_iter()
            .next()
            .unwrap_or_else(|| {
                let label = path.display().to_string();
                Source::failed(&label, Some(path), format!("{label}: no trace in it"))
            })
    }

    /// The sources of one path. A regular file that will not grow is read as it streams by; one
    /// is followed when `follow` is set (unless it is a merged job file, written whole), or when
    /// it has no end record (its writer may still be running); a FIFO or device is read once.
    fn open_each(path: &Path, follow: bool, cache: Option<&dyn ReadCache>) -> Vec<Source> {
        let regular = std::fs::metadata(path).is_ok_and(|m| m.is_file());
        if regular && (!follow || merged_file(path)) {
            match Source::read_finished(path, cache) {
                Some(Ok(sources)) => return sources,
                Some(Err(s)) => return vec![s],
                None => {}
            }
        }
        if regular {
            return vec![Source::follow(path)];
        }
        // Read once: a FIFO gives its bytes to one read only.
        match read_checked(path) {
            Ok(bytes) => Source::segments(path, &bytes)
                .unwrap_or_else(|| vec![Source::read_once(path, &bytes)]),
            Err(e) => vec![Source::failed(&path.display().to_string(), Some(path), e)],
        }
    }

    /// A regular file followed as it grows.
    fn follow(path: &Path) -> Source {
        let label = path.display().to_string();
        let held = match Follower::open(path) {
            // Its writer closed it already: nothing more will come.
            Ok(f) if f.trace().is_some_and(|t| t.end.is_some()) => {
                f.into_run().map(|r| Held::Static(Arc::new(r)))
            }
            Ok(f) => Some(Held::Live(Box::new(f))),
            Err(e) => return Source::failed(&label, Some(path), e),
        };
        Source {
            label,
            path: Some(path.to_path_buf()),
            held,
            error: None,
        }
    }

    /// A trace read whole from the bytes a FIFO or device gave.
    fn read_once(path: &Path, bytes: &[u8]) -> Source {
        let label = path.display().to_string();
        match read_trace(bytes) {
            Ok(t) => Source::held(label, Some(path), t),
            Err(e) => Source::failed(&label, Some(path), format!("{label}: {e}")),
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
    /// it cannot be read. `None` when it is one trace without an end record (its writer may
    /// still be running: it is followed). Only for a regular file: a FIFO gives its bytes to
    /// one read only.
    fn read_finished(
        path: &Path,
        cache: Option<&dyn ReadCache>,
    ) -> Option<Result<Vec<Source>, Source>> {
        let runs = match Run::read_folded(path, cache) {
            Ok(r) => r,
            Err(e) => {
                let label = path.display().to_string();
                return Some(Err(Source::failed(&label, Some(path), e.line(path))));
            }
        };
        if Run::followed_instead(&runs) {
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
                *held = f.into_run().map(|r| Held::Static(Arc::new(r)));
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
    open_all_with(paths, follow, None)
}

/// [`open_all`], taking the reads of finished files kept in `cache` and keeping those it makes.
pub fn open_all_with(
    paths: &[PathBuf],
    follow: bool,
    cache: Option<&dyn ReadCache>,
) -> Vec<Source> {
    if paths.is_empty() {
        return vec![Source::sample()];
    }
    let mut out: Vec<Source> = Vec::new();
    for p in paths {
        let sources = Source::open_each(p, follow, cache);
        push_unique(&mut out, sources);
    }
    out
}

/// Whether the regular file at `path` is a merged job file: one that starts with a segment
/// record right after its header.
fn merged_file(path: &Path) -> bool {
    let mut head = Vec::new();
    let read =
        File::open(path).and_then(|f| f.take((HEADER_LEN + 16) as u64).read_to_end(&mut head));
    read.is_ok()
        && head
            .get(HEADER_LEN..)
            .and_then(parse_frame_header)
            .is_some_and(|f| f.kind == SEGMENT_KIND)
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

/// The bytes of a FIFO or device given as a trace, its header checked first (an endless
/// device that is not a trace is refused after 16 bytes). A FIFO with no writer is refused, not
/// waited on (`TraceFile::open`).
fn read_checked(path: &Path) -> Result<Vec<u8>, String> {
    let mut f = TraceFile::open(path).map_err(|e| e.to_string())?;
    let mut bytes = header_checked(path, &mut f)?;
    f.read_to_end(&mut bytes)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    Ok(bytes)
}

/// The first 16 bytes of the trace `path` that `f` reads, once they are the start of a trace
/// header: what is not a trace is refused before more of it is read.
fn header_checked(path: &Path, f: impl Read) -> Result<Vec<u8>, String> {
    let label = path.display();
    let mut head = Vec::new();
    f.take(16)
        .read_to_end(&mut head)
        .map_err(|e| format!("{label}: cannot read: {e}"))?;
    tpuscope_core::reader::parse_header_start(&head).map_err(|e| format!("{label}: {e}"))?;
    Ok(head)
}
