//! Finds what `tpuscope run` puts into a workload: the collector library, the Python agent, the
//! workload's Python, and the PJRT plugin the collector should wrap.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde::Deserialize;

include!(concat!(env!("OUT_DIR"), "/agent_files.rs"));

pub const COLLECTOR_FILE: &str = "libtpuscope_collector.so";

/// The collector library: `$TPUSCOPE_COLLECTOR`, else next to this binary, else `../lib/tpuscope/`.
pub fn collector_path() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("TPUSCOPE_COLLECTOR") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        if p.is_dir() {
            bail!(
                "TPUSCOPE_COLLECTOR={} is a directory: name the library ({})",
                p.display(),
                p.join(COLLECTOR_FILE).display()
            );
        }
        bail!("TPUSCOPE_COLLECTOR={} does not exist", p.display());
    }
    let exe = std::env::current_exe().context("cannot locate the tpuscope binary")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [
        dir.join(COLLECTOR_FILE),
        // `cargo test` runs binaries from target/<profile>/deps.
        dir.join("..").join(COLLECTOR_FILE),
        dir.join("../lib/tpuscope").join(COLLECTOR_FILE),
        dir.join("../lib").join(COLLECTOR_FILE),
    ];
    for c in &candidates {
        if c.is_file() {
            return Ok(c.canonicalize().unwrap_or_else(|_| c.clone()));
        }
    }
    if let Some(bytes) = EMBEDDED_COLLECTOR {
        return unpack_once(
            &format!("collector-{:016x}", fnv1a(&[("", bytes)])),
            &[(COLLECTOR_FILE, bytes)],
        )
        .map(|d| d.join(COLLECTOR_FILE));
    }
    bail!(
        "cannot find {COLLECTOR_FILE} next to {} (build it with `cargo build -p tpuscope-collector`, or set TPUSCOPE_COLLECTOR)",
        exe.display()
    )
}

pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("tpuscope");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(h).join(".cache/tpuscope");
    }
    std::env::temp_dir().join(format!("tpuscope-{}", users_uid()))
}

fn users_uid() -> u32 {
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
        .unwrap_or(0)
}

/// The Python agent directory (to put first on `PYTHONPATH`): unpacked once per agent version from
/// the copy embedded in this binary.
pub fn agent_dir() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("TPUSCOPE_AGENT_DIR") {
        return Ok(PathBuf::from(p));
    }
    unpack_once(&format!("agent-{:016x}", fnv1a(AGENT_FILES)), AGENT_FILES)
}

/// Content hash naming an unpacked directory, so each version unpacks once.
pub(crate) fn fnv1a(files: &[(&str, &[u8])]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (name, data) in files {
        for b in name.as_bytes().iter().chain(data.iter()) {
            h = (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    h
}

/// Writes `files` into `<cache>/<name>/` unless a complete copy is there; atomic via rename.
fn unpack_once(name: &str, files: &[(&str, &[u8])]) -> Result<PathBuf> {
    let dir = cache_dir().join(name);
    if dir.join(".complete").is_file() {
        return Ok(dir);
    }
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let tmp = parent.join(format!(".{name}-tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    for (name, data) in files {
        let p = tmp.join(name);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).with_context(|| format!("cannot create {}", d.display()))?;
        }
        std::fs::write(&p, data).with_context(|| format!("cannot write {}", p.display()))?;
    }
    std::fs::write(tmp.join(".complete"), b"").context("cannot finish the agent directory")?;
    // Another tpuscope may have unpacked the same version meanwhile: either copy is fine.
    if std::fs::rename(&tmp, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
        if !dir.join(".complete").is_file() {
            bail!("cannot unpack into {}", dir.display());
        }
    }
    Ok(dir)
}

/// What the workload's Python has installed, found without importing any framework.
#[derive(Debug, Default, Deserialize)]
pub struct PythonEnv {
    pub executable: String,
    pub version: String,
    /// The XLA CPU PJRT plugin, when a package providing it is installed.
    pub cpu_plugin: Option<String>,
    /// libtpu's library, when the libtpu package is installed.
    pub libtpu: Option<String>,
    pub has_jax: bool,
    pub has_torch_xla: bool,
    pub has_torch_tpu: bool,
}

impl PythonEnv {
    /// The frontend, when exactly one is installed (a hint for the manifest; the agent knows better).
    pub fn only_frontend(&self) -> Option<&'static str> {
        match (self.has_jax, self.has_torch_xla, self.has_torch_tpu) {
            (true, false, false) => Some("jax"),
            (false, true, false) => Some("torch_xla"),
            (false, false, true) => Some("torch_tpu"),
            _ => None,
        }
    }
}

pub(crate) const PROBE: &str = r#"
import importlib.util, json, os, sys
def pkgdir(name):
    try:
        s = importlib.util.find_spec(name)
    except Exception:
        return None
    if s is None or not s.submodule_search_locations:
        return None
    return list(s.submodule_search_locations)[0]
def lib(pkg, files):
    d = pkgdir(pkg)
    if d:
        for f in files:
            p = os.path.join(d, f)
            if os.path.isfile(p):
                return p
    return None
def has(name):
    try:
        return importlib.util.find_spec(name) is not None
    except Exception:
        return False
print(json.dumps({
    "executable": sys.executable,
    "version": "%d.%d.%d" % sys.version_info[:3],
    "cpu_plugin": lib("lammps_jax_pjrt_cpu", ["pjrt_c_api_cpu_plugin.so"]),
    "libtpu": lib("libtpu", ["libtpu.so"]),
    "has_jax": has("jax"), "has_torch_xla": has("torch_xla"), "has_torch_tpu": has("torch_tpu"),
}))
"#;

/// The Python a command will run: [`named_python`], else `python3` on `PATH` (a guess).
pub fn workload_python(cmd: &[String]) -> Option<PathBuf> {
    named_python(cmd).or_else(|| resolve_in_path("python3"))
}

/// The Python the command names: `$TPUSCOPE_PYTHON`, the command itself when it is a Python
/// interpreter, or the Python of its shebang (a console script such as torchrun). `None` when
/// it names none.
pub fn named_python(cmd: &[String]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TPUSCOPE_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let first = cmd.first()?;
    let name = Path::new(first).file_name()?.to_str()?;
    if name.starts_with("python") {
        return resolve_in_path(first);
    }
    // A console script (torchrun, a venv's entry point) starts with a Python shebang.
    if let Some(script) = resolve_in_path(first)
        && let Ok(head) = std::fs::read(&script)
        && let Some(rest) = head
            .split(|&b| b == b'\n')
            .next()
            .unwrap_or(&[])
            .strip_prefix(b"#!")
    {
        let interp = String::from_utf8_lossy(rest);
        let mut parts = interp.split_whitespace();
        let prog = parts.next().unwrap_or("");
        let prog = if prog.ends_with("/env") {
            parts.next().unwrap_or("")
        } else {
            prog
        };
        if Path::new(prog)
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("python"))
        {
            return resolve_in_path(prog);
        }
    }
    None
}

/// The program `prog` names, as `execvp` finds it: a path when it holds a `/`, else the first
/// executable file of that name on `PATH`.
pub fn resolve_in_path(prog: &str) -> Option<PathBuf> {
    resolve_command(prog).ok()
}

/// Like [`resolve_in_path`], with why not in one line: nothing by that name, a directory, or a
/// file that is not executable.
pub fn resolve_command(prog: &str) -> Result<PathBuf> {
    let runnable =
        |p: &Path| p.is_file() && nix::unistd::access(p, nix::unistd::AccessFlags::X_OK).is_ok();
    let not_executable = |p: &Path| {
        anyhow::anyhow!(
            "cannot run {}: it is not an executable file (run it with its interpreter, e.g. \
             `tpuscope run -- python3 {}`, or make it executable)",
            p.display(),
            p.display()
        )
    };
    if prog.contains('/') {
        let p = PathBuf::from(prog);
        return match std::fs::metadata(&p) {
            Err(_) => bail!("cannot run {prog}: no such file"),
            Ok(m) if m.is_dir() => bail!("cannot run {prog}: it is a directory"),
            Ok(_) if runnable(&p) => Ok(p),
            Ok(_) => Err(not_executable(&p)),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found: Vec<PathBuf> = std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .filter(|p| p.is_file())
        .collect();
    if let Some(p) = found.iter().find(|p| runnable(p)) {
        return Ok(p.clone());
    }
    match found.first() {
        Some(p) => Err(not_executable(p)),
        None => bail!("cannot run {prog}: no such command on PATH"),
    }
}

/// Asks the workload's Python what it has installed.
pub fn probe_python(python: &Path) -> Result<PythonEnv> {
    let out = Command::new(python)
        .args(["-I", "-c", PROBE])
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().last().unwrap_or("no output").to_string();
        bail!("{} is not a working Python: {last}", python.display());
    }
    serde_json::from_slice(&out.stdout)
        .with_context(|| format!("unexpected answer from {}", python.display()))
}
