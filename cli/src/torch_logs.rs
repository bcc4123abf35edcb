//! Finding a trace's dynamo logs (TORCH_TRACE): `--torch-trace`, else `<trace stem>.torch_trace/`
//! next to the trace (where `tpuscope run` leaves them), else the directory the run recorded in
//! the trace's manifest (`TPUSCOPE_TORCH_TRACE`, set by `tpuscope run`, or `TORCH_TRACE`).
//!
//! The live views (the live view, `attach`, `/metrics`) look the logs up again at every
//! re-analysis, at most twice a second: they keep a [`LogCache`], so a file is read again only
//! when its length or modification time changed, and then only the bytes appended since.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use tpuscope_analyzers::torch_trace::TorchLogs;
use tpuscope_core::Trace;

/// The directory next to a trace where `tpuscope run` puts its logs.
pub fn sibling_dir(trace_file: &Path) -> PathBuf {
    trace_file.with_extension("torch_trace")
}

/// The manifest's record of where the run's logs went.
fn recorded(trace: &Trace) -> Option<PathBuf> {
    let env = &trace.manifest.as_ref()?.environment;
    ["TPUSCOPE_TORCH_TRACE", "TORCH_TRACE"]
        .iter()
        .find_map(|k| env.iter().find(|kv| kv.key == *k))
        .map(|kv| PathBuf::from(&kv.value))
        .filter(|p| !p.as_os_str().is_empty())
}

/// The logs for one trace; `None` when nothing points at any (no section in the report).
/// `trace_file` is `None` for a live stream, which has only the directory the run recorded.
pub fn find(
    explicit: Option<&Path>,
    trace_file: Option<&Path>,
    trace: Option<&Trace>,
    input_path: &str,
) -> Option<TorchLogs> {
    read_logs(explicit, trace_file, trace, input_path, &mut |f| {
        std::fs::read(f).map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    })
}

/// [`find`], each log file read with `read`.
fn read_logs(
    explicit: Option<&Path>,
    trace_file: Option<&Path>,
    trace: Option<&Trace>,
    input_path: &str,
    read: &mut dyn FnMut(&Path) -> std::io::Result<String>,
) -> Option<TorchLogs> {
    let sibling = trace_file.map(sibling_dir).filter(|s| s.exists());
    let (dir, how) = match (explicit, sibling) {
        (Some(p), _) => (p.to_path_buf(), "--torch-trace"),
        (None, Some(sibling)) => (sibling, "next to the trace"),
        (None, None) => (recorded(trace?)?, "recorded in the trace"),
    };
    let mut logs = TorchLogs {
        trace_path: input_path.to_string(),
        dir: dir.display().to_string(),
        ..TorchLogs::default()
    };
    let files: Vec<PathBuf> = if dir.is_file() {
        vec![dir.clone()]
    } else {
        match std::fs::read_dir(&dir) {
            Ok(rd) => {
                let mut v: Vec<PathBuf> = rd
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_file())
                    .collect();
                v.sort();
                v
            }
            Err(e) => {
                // The report stands without them: say so rather than fail.
                logs.note = Some(if e.kind() == std::io::ErrorKind::NotFound {
                    format!(
                        "no logs ({how}): nothing was torch.compiled, or they were moved \
                         (pass --torch-trace DIR)"
                    )
                } else {
                    format!("cannot read the logs ({how}): {e}")
                });
                return Some(logs);
            }
        }
    };
    for f in files {
        match read(&f) {
            Ok(text) => {
                let name = f
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                logs.files.push((name, text));
            }
            Err(e) => {
                logs.note = Some(format!("cannot read {}: {e}", f.display()));
            }
        }
    }
    if logs.files.is_empty() && logs.note.is_none() {
        logs.note = Some(format!("no log files ({how})"));
    }
    Some(logs)
}

/// The log files a live view read, so that looking the logs up twice a second costs a directory
/// listing and a `stat` per file while nothing changes. dynamo appends to its logs: a file that
/// grew is read from where the last read stopped; one that shrank or changed without growing is
/// read whole again. Files no longer listed are forgotten.
#[derive(Debug, Default)]
pub struct LogCache {
    files: HashMap<PathBuf, CachedFile>,
    /// Which lookup this is; a file not seen in the latest one is dropped.
    lookup: u64,
}

#[derive(Debug, Default)]
struct CachedFile {
    len: u64,
    modified: Option<SystemTime>,
    /// The file's complete lines, decoded once (a newline never falls inside a UTF-8 sequence,
    /// so decoding line by line is decoding the whole).
    lines: String,
    /// The bytes after the last newline (an entry dynamo is still writing).
    tail: Vec<u8>,
    seen: u64,
}

impl CachedFile {
    /// The whole text, as `String::from_utf8_lossy` of the file would give it.
    fn text(&self) -> String {
        let mut text = self.lines.clone();
        text.push_str(&String::from_utf8_lossy(&self.tail));
        text
    }

    fn append(&mut self, bytes: &[u8]) {
        self.tail.extend_from_slice(bytes);
        if let Some(nl) = self.tail.iter().rposition(|&b| b == b'\n') {
            let complete: Vec<u8> = self.tail.drain(..=nl).collect();
            self.lines.push_str(&String::from_utf8_lossy(&complete));
        }
    }
}

impl LogCache {
    /// The logs of a live stream: it has no trace file, so the directory the run recorded in the
    /// manifest (see [`find`]).
    pub fn find(&mut self, trace: &Trace, input_path: &str) -> Option<TorchLogs> {
        self.lookup += 1;
        let logs = read_logs(None, None, Some(trace), input_path, &mut |f| self.read(f));
        let lookup = self.lookup;
        self.files.retain(|_, c| c.seen == lookup);
        logs
    }

    /// The text of `path`, read only as far as it changed since the last lookup.
    fn read(&mut self, path: &Path) -> std::io::Result<String> {
        let mut file = std::fs::File::open(path)?;
        let meta = file.metadata()?;
        let (len, modified) = (meta.len(), meta.modified().ok());
        let cached = self.files.entry(path.to_path_buf()).or_default();
        cached.seen = self.lookup;
        let unchanged = cached.len == len && cached.modified == modified && modified.is_some();
        if !unchanged {
            // Appended to: read the new bytes only (up to the length just seen, so that the
            // cached length and text agree even while the file grows).
            let from = if len > cached.len && cached.modified.is_some() {
                cached.len
            } else {
                *cached = CachedFile {
                    seen: self.lookup,
                    ..CachedFile::default()
                };
                0
            };
            // Until the read succeeds, what is cached is read whole next time.
            cached.modified = None;
            file.seek(SeekFrom::Start(from))?;
            let mut added = Vec::new();
            file.take(len - from).read_to_end(&mut added)?;
            cached.append(&added);
            cached.len = from + added.len() as u64;
            // A file cut while read is read whole next time.
            cached.modified = if cached.len == len { modified } else { None };
        }
        Ok(cached.text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample trace whose manifest records `dir` (`None`: records nothing).
    fn trace_recording(dir: Option<&Path>) -> Trace {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sample_traces/torch_trace/graph_break_and_guard.tps");
        let mut trace = tpuscope_core::read_trace(&std::fs::read(path).unwrap()).unwrap();
        let env = &mut trace.manifest.as_mut().unwrap().environment;
        env.retain(|kv| !kv.key.contains("TORCH_TRACE"));
        if let Some(dir) = dir {
            env.push(tpuscope_core::event::KeyValue {
                key: "TPUSCOPE_TORCH_TRACE".into(),
                value: dir.display().to_string(),
            });
        }
        trace
    }

    #[test]
    fn the_cache_reads_a_file_again_only_as_far_as_it_grew_and_agrees_with_find() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("dedicated_log_torch_trace_x.log");
        std::fs::write(&log, "first line\n").unwrap();
        let trace = trace_recording(Some(dir.path()));
        let mut cache = LogCache::default();
        let live = cache.find(&trace, "pid 1").unwrap();
        let fresh = find(None, None, Some(&trace), "pid 1").unwrap();
        assert_eq!(live.files, fresh.files);
        assert_eq!(live.dir, fresh.dir);
        assert_eq!(live.note, fresh.note);
        assert_eq!(live.files[0].1, "first line\n");

        // Unchanged: served from the cache (the bytes on disk are not looked at).
        cache.files.get_mut(&log).unwrap().lines = "cached\n".into();
        assert_eq!(cache.find(&trace, "pid 1").unwrap().files[0].1, "cached\n");
        cache.files.get_mut(&log).unwrap().lines = "first line\n".into();

        // Appended to: only the new bytes are read.
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        std::io::Write::write_all(&mut f, "second \u{e9}\n".as_bytes()).unwrap();
        drop(f);
        let live = cache.find(&trace, "pid 1").unwrap();
        assert_eq!(live.files[0].1, "first line\nsecond \u{e9}\n");
        assert_eq!(
            live.files,
            find(None, None, Some(&trace), "pid 1").unwrap().files
        );

        // An entry still being written, cut inside a character: the same text as a fresh read,
        // then the whole character once the rest arrives.
        for (piece, want) in [
            (&b"third \xc3"[..], "third \u{fffd}"),
            (&b"\xa9 end"[..], "third \u{e9} end"),
        ] {
            let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            std::io::Write::write_all(&mut f, piece).unwrap();
            drop(f);
            let live = cache.find(&trace, "pid 1").unwrap();
            assert!(live.files[0].1.ends_with(want), "{:?}", live.files[0].1);
            assert_eq!(
                live.files,
                find(None, None, Some(&trace), "pid 1").unwrap().files
            );
        }

        // Rewritten shorter: read whole again; a removed file is forgotten.
        std::fs::write(&log, "new\n").unwrap();
        assert_eq!(cache.find(&trace, "pid 1").unwrap().files[0].1, "new\n");
        std::fs::remove_file(&log).unwrap();
        let live = cache.find(&trace, "pid 1").unwrap();
        assert!(live.files.is_empty());
        assert!(cache.files.is_empty());
        assert_eq!(
            live.note,
            find(None, None, Some(&trace), "pid 1").unwrap().note
        );
    }

    #[test]
    fn a_live_stream_without_a_recorded_directory_has_no_logs() {
        let mut cache = LogCache::default();
        let trace = trace_recording(None);
        assert!(cache.find(&trace, "pid 1").is_none());
        assert!(find(None, None, Some(&trace), "pid 1").is_none());
    }
}
