//! The traces the window shows: read once, or followed while a workload still writes them.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use tpuscope_analyzers::digest::Digest;

use tpuscope_core::event::SEGMENT_KIND;
use tpuscope_core::format::{HEADER_LEN, parse_frame_header};
use tpuscope_core::stream::{TraceFile, TraceStream};
use tpuscope_core::{Completeness, ReadError, Trace, TraceBuilder, read_trace, read_traces};

/// The sample opened when no trace is given: a real JAX run that recompiles its train step.
pub const SAMPLE: &[u8] = include_bytes!("../../sample_traces/real/jax_lr.tps");
pub const SAMPLE_LABEL: &str = "jax_lr.tps (bundled sample)";
/// `tpuscope whatif` of the sample for v5e:2x2 (libtpu 0.0.52), shown in its What-if tab.
const SAMPLE_WHATIF: &str = include_str!("../../sample_traces/real/jax_lr.whatif-v5e-2x2.json");

/// The bundled sample's what-if.
pub fn sample_whatif() -> Option<tpuscope_analyzers::whatif::WhatIfReport> {
    serde_json::from_str(SAMPLE_WHATIF).ok()
}

/// A trace file that may still grow: the bytes after `offset` are pushed into a builder.
#[derive(Debug)]
pub struct Follower {
    pub path: PathBuf,
    /// Bytes of the file consumed so far.
    pub offset: u64,
    builder: TraceBuilder,
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
        })
    }

    pub fn trace(&self) -> Option<&Trace> {
        self.builder.trace()
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
        self.builder.push(&buf).map_err(|e| e.to_string())
    }
}

/// How a source holds its trace.
#[derive(Debug)]
pub enum Held {
    Static(Arc<Trace>),
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
    /// The digest of a trace that cannot change, made once: the timeline, the analysis and
    /// a click on a step all read it (each made its own, a second or more on a long trace).
    digest: OnceLock<Arc<Digest>>,
}

impl Source {
    pub fn trace(&self) -> Option<&Trace> {
        match self.held.as_ref()? {
            Held::Static(t) => Some(t),
            Held::Live(f) => f.trace(),
        }
    }

    /// A trace the analysis thread can own: shared when it cannot change, copied when it grows.
    pub fn snapshot(&self) -> Option<Arc<Trace>> {
        match self.held.as_ref()? {
            Held::Static(t) => Some(Arc::clone(t)),
            Held::Live(f) => f.trace().map(|t| Arc::new(t.clone())),
        }
    }

    /// The digest of its trace's events: made once for a trace that cannot change, afresh for
    /// one followed as it grows.
    pub fn digest(&self) -> Option<Arc<Digest>> {
        match self.held.as_ref()? {
            Held::Static(t) => Some(Arc::clone(
                self.digest.get_or_init(|| Arc::new(Digest::of(t))),
            )),
            Held::Live(f) => f.trace().map(|t| Arc::new(Digest::of(t))),
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
            Ok(t) => Source {
                label: label.to_string(),
                path: None,
                held: Some(Held::Static(Arc::new(t))),
                error: None,
                digest: OnceLock::new(),
            },
            Err(e) => Source::failed(label, None, e.to_string()),
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
                    digest: OnceLock::new(),
                },
                Err(e) => Source::failed(&label, Some(path), format!("{label}: {e}")),
            }
        } else {
            Source {
                label,
                path: Some(path.to_path_buf()),
                held: Some(Held::Static(Arc::new(trace))),
                error: None,
                digest: OnceLock::new(),
            }
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
        Some(traces.into_iter().map(|t| Source::read(path, t)).collect())
    }

    /// A trace read whole from `path` (a host of a merged job is named by process index and
    /// host).
    fn read(path: &Path, t: Trace) -> Source {
        let host = t.segment.as_ref().map_or_else(String::new, |s| {
            format!(" · p{} {}", s.process_index, s.host)
        });
        Source {
            label: format!("{}{host}", path.display()),
            path: Some(path.to_path_buf()),
            held: Some(Held::Static(Arc::new(t))),
            error: None,
            digest: OnceLock::new(),
        }
    }

    /// A regular file that will not grow, read as it streams by (its bytes are never held
    /// whole): its sources (one per host of a merged job), or the failed source when it cannot be
    /// read. `None` when it is not a regular file, or is one trace without an end record (its
    /// writer may still be running: it is read whole and followed).
    fn read_finished(path: &Path) -> Option<Result<Vec<Source>, Source>> {
        // Asked before opening: a FIFO gives its bytes to one read only, which must be the
        // whole read.
        if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
            return None;
        }
        let read = TraceStream::open(path).and_then(|s| s.read_all(false));
        let traces = match read {
            Ok(t) => t,
            Err(e) => {
                let label = path.display().to_string();
                return Some(Err(Source::failed(&label, Some(path), e.line(path))));
            }
        };
        let merged = traces.iter().any(|t| t.segment.is_some());
        if let [t] = traces.as_slice()
            && !merged
            && matches!(t.completeness, Completeness::NoEndRecord { .. })
        {
            return None;
        }
        Some(Ok(traces
            .into_iter()
            .map(|t| Source::read(path, t))
            .collect()))
    }

    fn failed(label: &str, path: Option<&Path>, error: String) -> Source {
        Source {
            label: label.to_string(),
            path: path.map(Path::to_path_buf),
            held: None,
            error: Some(error),
            digest: OnceLock::new(),
        }
    }

    /// Reads what a followed file gained; returns the records absorbed.
    pub fn poll(&mut self) -> usize {
        let Some(Held::Live(f)) = self.held.as_mut() else {
            return 0;
        };
        match f.poll() {
            Ok(n) => {
                // The writer closed the trace: nothing more will come.
                if f.trace().is_some_and(|t| t.end.is_some())
                    && let Some(Held::Live(f)) = self.held.take()
                {
                    self.held = f.builder.into_trace().map(|t| Held::Static(Arc::new(t)));
                }
                n
            }
            Err(e) => {
                // Keep what was read; stop following.
                if let Some(Held::Live(f)) = self.held.take() {
                    self.held = f.builder.into_trace().map(|t| Held::Static(Arc::new(t)));
                }
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
