//! Finding a trace's dynamo logs (TORCH_TRACE): `--torch-trace`, else `<trace stem>.torch_trace/`
//! next to the trace (where `tpuscope run` leaves them), else the directory the run recorded in
//! the trace's manifest (`TPUSCOPE_TORCH_TRACE`, set by `tpuscope run`, or `TORCH_TRACE`).

use std::path::{Path, PathBuf};

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
        match std::fs::read(&f) {
            Ok(bytes) => {
                let name = f
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                logs.files
                    .push((name, String::from_utf8_lossy(&bytes).into_owned()));
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
