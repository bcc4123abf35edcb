//! Environment pitfalls (variables that bypass or stall the plugin, stale tpuscope settings) and
//! the places tpuscope writes to (live socket directory, trace directory, free space).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::python::Found;
use super::{Check, Status};
use crate::run::{Mode, STANDIN_PLATFORM};

fn var(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

/// `TPU_SKIP_MDS_QUERY`, in the direction that hurts on this machine.
pub fn skip_mds_query(tpu_visible: bool, libtpu: Option<&Path>) -> Check {
    let name = "tpu-skip-mds-query";
    let set = var("TPU_SKIP_MDS_QUERY");
    let on = set
        .as_deref()
        .is_some_and(|v| !matches!(v.trim(), "" | "0" | "false" | "False"));
    match (tpu_visible, libtpu, on) {
        (false, Some(l), false) => Check::new(
            name,
            Status::Warn,
            format!(
                "libtpu is installed ({}), no TPU is attached and TPU_SKIP_MDS_QUERY is unset: a workload that loads libtpu outside `tpuscope run` (TPU_LIBRARY_PATH, compile-only jobs) first spends minutes retrying the cloud metadata server",
                l.display()
            ),
        )
        .fix("export TPU_SKIP_MDS_QUERY=1 (tpuscope run sets it itself when it wraps libtpu without a TPU)"),
        (true, _, true) => Check::new(
            name,
            Status::Warn,
            format!(
                "TPU_SKIP_MDS_QUERY={} on a machine with a TPU: libtpu then skips the metadata server, where a Cloud TPU VM describes its accelerator type and topology (not verified on a TPU by tpuscope's tests)",
                set.unwrap_or_default()
            ),
        )
        .fix("unset TPU_SKIP_MDS_QUERY on a Cloud TPU VM unless you set it on purpose"),
        (false, _, true) => Check::new(
            name,
            Status::Ok,
            "TPU_SKIP_MDS_QUERY=1 (no TPU: libtpu starts without asking the metadata server)",
        ),
        (false, None, false) => {
            Check::new(name, Status::Ok, "unset (no libtpu in this environment)")
        }
        (true, _, false) => Check::new(name, Status::Ok, "unset (a TPU is attached)"),
    }
}

/// `TPU_LIBRARY_PATH` naming a missing file.
pub fn tpu_library_path(py: Option<&Found>) -> Check {
    let name = "tpu-library-path";
    let Some(v) = var("TPU_LIBRARY_PATH") else {
        return Check::new(name, Status::Ok, "unset");
    };
    if Path::new(&v).is_file() {
        return Check::new(name, Status::Ok, format!("TPU_LIBRARY_PATH={v}"));
    }
    let py = py.map_or_else(|| "python".to_string(), |f| f.path.display().to_string());
    Check::new(
        name,
        Status::Fail,
        format!(
            "TPU_LIBRARY_PATH={v} does not exist: tpuscope run ignores it, but torch_tpu started without tpuscope fails to load its plugin and JAX silently falls back to the libtpu package"
        ),
    )
    .fix(format!(
        "unset TPU_LIBRARY_PATH, or point it at libtpu.so (`{py} -c 'import libtpu; print(libtpu.get_library_path())'`)"
    ))
}

/// `JAX_PLATFORMS` that keeps JAX off the plugin the collector wraps.
pub fn jax_platforms(mode: Option<Mode>, py: Option<&Found>) -> Check {
    let name = "jax-platforms";
    let Some(v) = var("JAX_PLATFORMS") else {
        return Check::new(name, Status::Ok, "unset");
    };
    let platforms: Vec<&str> = v.split(',').map(str::trim).collect();
    let has_jax = py.is_none_or(|f| f.env.has_jax);
    if platforms.is_empty() || platforms == [""] || platforms.contains(&STANDIN_PLATFORM) {
        return Check::new(name, Status::Ok, format!("JAX_PLATFORMS={v}"));
    }
    if !has_jax {
        return Check::new(
            name,
            Status::Ok,
            format!("JAX_PLATFORMS={v} (jax is not installed)"),
        );
    }
    match mode {
        Some(Mode::Tpu) if !platforms.contains(&"tpu") => Check::new(
            name,
            Status::Fail,
            format!(
                "JAX_PLATFORMS={v}: JAX initializes only these backends, so it never loads libtpu nor the collector in front of it (the trace stays empty)"
            ),
        )
        .fix("unset JAX_PLATFORMS (or add tpu to it)"),
        Some(Mode::Tpu) => Check::new(name, Status::Ok, format!("JAX_PLATFORMS={v}")),
        _ => Check::new(
            name,
            Status::Warn,
            format!(
                "JAX_PLATFORMS={v} selects JAX's built-in backends, not a PJRT plugin: tpuscope run overrides it (JAX_PLATFORMS={STANDIN_PLATFORM}), but a JAX process started otherwise with the collector's variables records nothing"
            ),
        )
        .fix(format!(
            "unset JAX_PLATFORMS (tpuscope run and the `tpuscope env` lines set JAX_PLATFORMS={STANDIN_PLATFORM})"
        )),
    }
}

/// `PJRT_DEVICE` that keeps torch_xla off the plugin.
pub fn pjrt_device(mode: Option<Mode>, py: Option<&Found>) -> Check {
    let name = "pjrt-device";
    let Some(v) = var("PJRT_DEVICE") else {
        return Check::new(name, Status::Ok, "unset");
    };
    let has_xla = py.is_none_or(|f| f.env.has_torch_xla);
    let standin = STANDIN_PLATFORM.to_uppercase();
    if !has_xla || v.eq_ignore_ascii_case(&standin) || v.eq_ignore_ascii_case("TPU") {
        return Check::new(name, Status::Ok, format!("PJRT_DEVICE={v}"));
    }
    let what = format!(
        "PJRT_DEVICE={v}: torch_xla then runs an in-process client that is not a PJRT plugin, so the collector sees nothing"
    );
    match mode {
        Some(Mode::Tpu) => Check::new(name, Status::Fail, what).fix("unset PJRT_DEVICE (or set PJRT_DEVICE=TPU)"),
        _ => Check::new(
            name,
            Status::Warn,
            format!("{what} unless started by tpuscope run (which sets PJRT_DEVICE={standin})"),
        )
        .fix(format!(
            "unset PJRT_DEVICE (tpuscope run and the `tpuscope env` lines set PJRT_DEVICE={standin})"
        )),
    }
}

/// `PJRT_NAMES_AND_LIBRARY_PATHS` naming missing libraries.
pub fn pjrt_names() -> Check {
    let name = "pjrt-names";
    let Some(v) = var("PJRT_NAMES_AND_LIBRARY_PATHS") else {
        return Check::new(name, Status::Ok, "unset");
    };
    let missing: Vec<&str> = v
        .split(',')
        .filter_map(|e| e.split_once(':').map(|(_, p)| p.trim()))
        .filter(|p| !p.is_empty() && !Path::new(p).is_file())
        .collect();
    if missing.is_empty() {
        return Check::new(
            name,
            Status::Ok,
            format!("PJRT_NAMES_AND_LIBRARY_PATHS={v}"),
        );
    }
    Check::new(
        name,
        Status::Fail,
        format!(
            "PJRT_NAMES_AND_LIBRARY_PATHS names missing files: {} (JAX fails to initialize that backend)",
            missing.join(", ")
        ),
    )
    .fix("unset PJRT_NAMES_AND_LIBRARY_PATHS, or re-run the `tpuscope env` lines after rebuilding")
}

/// Collector settings left in the shell from an earlier `tpuscope env` that no longer hold.
pub fn tpuscope_env() -> Check {
    let name = "tpuscope-env";
    let mut fails = Vec::new();
    let mut warns = Vec::new();
    let mut seen = Vec::new();
    for (k, is_dir) in [
        ("TPUSCOPE_REAL_PLUGIN", false),
        ("TPUSCOPE_COLLECTOR", false),
        ("TPUSCOPE_AGENT_DIR", true),
        ("TPUSCOPE_PYTHON", false),
    ] {
        if let Some(v) = var(k).filter(|v| !v.is_empty()) {
            seen.push(format!("{k}={v}"));
            let ok = if is_dir {
                Path::new(&v).is_dir()
            } else {
                Path::new(&v).is_file()
            };
            if !ok {
                fails.push(format!("{k}={v} does not exist"));
            }
        }
    }
    if let Some(v) = var("TPUSCOPE_OUT").filter(|v| !v.is_empty()) {
        seen.push(format!("TPUSCOPE_OUT={v}"));
        let p = Path::new(&v);
        let dir = if p.is_dir() || v.ends_with('/') {
            p
        } else {
            p.parent().unwrap_or(Path::new("."))
        };
        if !dir.as_os_str().is_empty() && !dir.is_dir() {
            fails.push(format!(
                "TPUSCOPE_OUT={v}: {} does not exist",
                dir.display()
            ));
        }
    }
    if let Some(v) = var("TPUSCOPE_ENABLE")
        && matches!(v.trim(), "0" | "off" | "false" | "no")
    {
        warns.push(format!(
            "TPUSCOPE_ENABLE={v}: the collector records nothing"
        ));
    }
    if fails.is_empty() && warns.is_empty() {
        let found = if seen.is_empty() {
            "no collector settings in the environment".to_string()
        } else {
            seen.join(" ")
        };
        return Check::new(name, Status::Ok, found);
    }
    let status = if fails.is_empty() {
        Status::Warn
    } else {
        Status::Fail
    };
    fails.extend(warns);
    Check::new(name, status, fails.join("; ")).fix(
        "unset the stale TPUSCOPE_* variables (tpuscope run sets its own), or re-run `eval \"$(tpuscope env)\"`",
    )
}

/// The live socket directory: ours, a real directory, 0700.
pub fn live_socket_dir() -> Check {
    let name = "live-socket-dir";
    let dir = tpuscope_core::live::socket_dir();
    let shown = dir.display().to_string();
    let meta = match std::fs::symlink_metadata(&dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Check::new(
                name,
                Status::Ok,
                format!("{shown} (absent: the first instrumented process creates it, mode 0700)"),
            );
        }
        Err(e) => {
            return Check::new(name, Status::Fail, format!("{shown}: {e}"))
                .fix("set XDG_RUNTIME_DIR to a directory of yours");
        }
    };
    let remove = format!(
        "remove it (`rm -rf {shown}`) so the collector can create its own, or set XDG_RUNTIME_DIR to a directory of yours"
    );
    let refuse = "the collector refuses it: no process is listed by `tpuscope ps` or attachable";
    if meta.file_type().is_symlink() {
        return Check::new(
            name,
            Status::Fail,
            format!("{shown} is a symbolic link: {refuse}"),
        )
        .fix(remove);
    }
    if !meta.is_dir() {
        return Check::new(
            name,
            Status::Fail,
            format!("{shown} is not a directory: {refuse}"),
        )
        .fix(remove);
    }
    let uid = tpuscope_core::live::current_uid();
    if uid.is_some_and(|u| u != meta.uid()) {
        return Check::new(
            name,
            Status::Fail,
            format!(
                "{shown} is owned by uid {}, not you (uid {}): {refuse}",
                meta.uid(),
                uid.unwrap_or_default()
            ),
        )
        .fix(remove);
    }
    let mode = meta.mode() & 0o7777;
    let sockets = std::fs::read_dir(&dir)
        .map(|d| d.flatten().count())
        .unwrap_or(0);
    if mode & 0o077 != 0 {
        return Check::new(
            name,
            Status::Warn,
            format!(
                "{shown} has mode {mode:04o}: other users can see the sockets in it until the next instrumented process resets it to 0700"
            ),
        )
        .fix(format!("chmod 700 {shown}"));
    }
    Check::new(
        name,
        Status::Ok,
        format!("{shown} (yours, mode {mode:04o}, {sockets} entries)"),
    )
}

/// Where traces would go: `--out`, else `$TPUSCOPE_OUT`, else the current directory.
pub fn out_target(explicit: Option<&Path>) -> PathBuf {
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let p = explicit
        .map(Path::to_path_buf)
        .or_else(|| {
            var("TPUSCOPE_OUT")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| cwd.clone());
    if p.is_absolute() { p } else { cwd.join(p) }
}

/// The directory a trace file lands in (a target that is not a directory names a file).
fn out_dir(target: &Path) -> PathBuf {
    if target.is_dir() || target.as_os_str().to_string_lossy().ends_with('/') {
        target.to_path_buf()
    } else {
        target.parent().unwrap_or(Path::new("/")).to_path_buf()
    }
}

/// The nearest part of `p` that exists (itself included); a file there blocks the directory.
fn existing_ancestor(p: &Path) -> Option<&Path> {
    p.ancestors().find(|a| a.exists())
}

pub fn out_dir_check(target: &Path) -> Check {
    let name = "out-dir";
    let dir = out_dir(target);
    let shown = dir.display().to_string();
    let fix = "choose a writable directory: `tpuscope run --out DIR/` (TPUSCOPE_OUT=DIR/ for the collector alone)";
    let Some(base) = existing_ancestor(&dir) else {
        return Check::new(name, Status::Fail, format!("{shown}: no part of it exists")).fix(fix);
    };
    if !base.is_dir() {
        return Check::new(
            name,
            Status::Fail,
            format!(
                "{} is not a directory, so {shown} cannot be one",
                base.display()
            ),
        )
        .fix(fix);
    }
    match crate::output::can_create_file_in(base) {
        Ok(()) => {
            let found = if base == dir {
                format!("{shown} (writable)")
            } else {
                format!(
                    "{shown} (absent; {} is writable, tpuscope run creates it)",
                    base.display()
                )
            };
            Check::new(name, Status::Ok, found)
        }
        Err(e) => Check::new(
            name,
            Status::Fail,
            format!(
                "cannot create a file in {}: {e} (the collector would record nothing)",
                base.display()
            ),
        )
        .fix(fix),
    }
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

pub fn disk_check(target: &Path, writable: bool) -> Check {
    let name = "disk";
    let dir = out_dir(target);
    if !writable {
        return Check::new(
            name,
            Status::Warn,
            format!(
                "{}: not checked, nothing can be written there",
                dir.display()
            ),
        )
        .fix("fix the out-dir check first");
    }
    let Some(base) = existing_ancestor(&dir) else {
        return Check::new(
            name,
            Status::Warn,
            format!("{}: not checked", dir.display()),
        )
        .fix("fix the out-dir check first");
    };
    let st = match nix::sys::statvfs::statvfs(base) {
        Ok(s) => s,
        Err(e) => {
            return Check::new(
                name,
                Status::Warn,
                format!("{}: cannot read free space: {e}", base.display()),
            )
            .fix("check the file system with `df -h`");
        }
    };
    // fsblkcnt_t and c_ulong are u64 here, other widths elsewhere.
    #[allow(clippy::useless_conversion)]
    let free = u64::from(st.blocks_available()).saturating_mul(u64::from(st.fragment_size()));
    let found = format!("{} free under {}", gib(free), base.display());
    let fix = "free space there or trace to another disk (`tpuscope run --out DIR/`); past TPUSCOPE_SIZE_CAP_MB (default 4096) of trace, executes are aggregated";
    if free < 100 << 20 {
        Check::new(name, Status::Fail, format!("{found}: a trace may not fit")).fix(fix)
    } else if free < 1 << 30 {
        Check::new(
            name,
            Status::Warn,
            format!("{found}: a long run's trace may not fit"),
        )
        .fix(fix)
    } else {
        Check::new(name, Status::Ok, found)
    }
}
