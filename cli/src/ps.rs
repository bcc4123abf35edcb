//! `tpuscope ps`: this user's instrumented processes, found by their live sockets; sockets left by
//! dead processes are removed. `--all` adds the user's processes that have a PJRT plugin mapped
//! but no socket: those `tpuscope attach PID` can instrument.

use std::collections::HashSet;
use std::io::{ErrorKind, Read};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde::Serialize;
use tpuscope_core::event::Manifest;
use tpuscope_core::live;
use tpuscope_inject::PluginScan;

/// How long a process may take to send its manifest.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// Bytes read at most for it: a trace starts with its manifest, a few KiB (a socket that sends
/// more without one is not a tpuscope process).
const PROBE_MAX_BYTES: usize = 4 << 20;

#[derive(Debug, clap::Args)]
pub struct PsArgs {
    /// A JSON array of objects (pid, command, socket, frontend, plugin, uptime_s, trace,
    /// attachable).
    #[arg(long)]
    pub json: bool,
    /// Also list this user's processes that have a PJRT plugin mapped and no tpuscope socket
    /// (started without tpuscope): `tpuscope attach PID` instruments them. Their socket is null.
    #[arg(long)]
    pub all: bool,
}

#[derive(Debug, Serialize)]
struct Entry {
    pid: u32,
    command: String,
    /// Null for a process found by `--all` (no tpuscope in it yet).
    socket: Option<PathBuf>,
    /// `jax`, `torch_xla`, `torch_tpu`, or null when unknown.
    frontend: Option<String>,
    /// File name of the real PJRT plugin.
    plugin: Option<String>,
    uptime_s: Option<f64>,
    /// The trace file the process writes, when it can be seen among its open files.
    trace: Option<PathBuf>,
    /// Found by `--all`: a PJRT plugin is mapped but tpuscope does not listen in it.
    attachable: bool,
}

/// What probing one socket found.
enum Probe {
    /// Nobody listens there any more: the process is gone (its pid may have been reused).
    Stale,
    /// The socket went away meanwhile (the process exited).
    Gone,
    Live(Entry),
}

pub fn ps(args: &PsArgs) -> Result<i32> {
    let sockets = live::pids_with_sockets();
    let seen: Vec<u32> = sockets.iter().map(|(pid, _)| *pid).collect();
    // Probed in parallel: each may take up to the timeout.
    let probes: Vec<(u32, PathBuf, Probe)> = std::thread::scope(|s| {
        let handles: Vec<_> = sockets
            .into_iter()
            .map(|(pid, path)| s.spawn(move || (pid, path.clone(), probe(pid, &path))))
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut entries = Vec::new();
    for (pid, path, p) in probes {
        match p {
            Probe::Stale => {
                let removed = std::fs::remove_file(&path).is_ok();
                if !args.json && removed {
                    eprintln!(
                        "tpuscope: removed the stale socket {} (nobody listens: process {pid} is gone)",
                        path.display()
                    );
                }
            }
            Probe::Gone => {}
            Probe::Live(e) => entries.push(e),
        }
    }
    if args.all {
        let known: HashSet<u32> = seen.into_iter().collect();
        entries.extend(attachable(&known));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&entries)?);
    } else {
        print_table(&entries, args.all);
    }
    Ok(0)
}

fn probe(pid: u32, socket: &Path) -> Probe {
    // Whether someone listens decides, not the pid alone (a pid is reused, and a process of
    // another pid namespace sharing the directory has no /proc entry here).
    let manifest = match UnixStream::connect(socket) {
        Ok(s) => read_manifest(s),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Probe::Stale,
        Err(e) if e.kind() == ErrorKind::NotFound => return Probe::Gone,
        Err(_) if !Path::new(&format!("/proc/{pid}")).exists() => return Probe::Stale,
        Err(_) => None,
    };
    let command = manifest
        .as_ref()
        .map(|m| m.command_line.join(" "))
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| proc_cmdline(pid));
    Probe::Live(Entry {
        pid,
        command,
        socket: Some(socket.to_path_buf()),
        frontend: manifest.as_ref().and_then(frontend),
        plugin: manifest.as_ref().and_then(|m| {
            Path::new(&m.plugin_path)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        }),
        uptime_s: manifest.as_ref().and_then(|m| {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .ok()?
                .as_nanos();
            let start = u128::from(m.start_wall_ns);
            (m.start_wall_ns > 0 && now >= start).then(|| (now - start) as f64 / 1e9)
        }),
        trace: trace_file(pid),
        attachable: false,
    })
}

/// This user's processes (but us and those in `known`, which have a socket) that have a PJRT
/// plugin mapped. Each mapped file is read once however many processes map it.
fn attachable(known: &HashSet<u32>) -> Vec<Entry> {
    let me = std::process::id();
    let Ok(our_uid) = std::fs::metadata("/proc/self").map(|m| m.uid()) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    pids.sort_unstable();
    let mut scan = PluginScan::new();
    let mut out = Vec::new();
    for pid in pids {
        // The owner of /proc/PID is the process's effective uid: a cheap first filter.
        if pid == me
            || known.contains(&pid)
            || std::fs::metadata(format!("/proc/{pid}"))
                .ok()
                .map(|m| m.uid())
                != Some(our_uid)
        {
            continue;
        }
        // A process that exits meanwhile, or is not ours after all, is simply not listed.
        let Ok(plugins) = scan.plugins(pid) else {
            continue;
        };
        let Some(plugin) = plugins.iter().find(|p| !p.is_tpuscope).or(plugins.first()) else {
            continue;
        };
        let Ok(target) = tpuscope_inject::check_target(pid) else {
            continue;
        };
        out.push(Entry {
            pid,
            command: target.command,
            socket: None,
            frontend: frontend_from_maps(pid),
            plugin: plugin
                .path
                .file_name()
                .map(|f| f.to_string_lossy().into_owned()),
            uptime_s: uptime_since(target.start_time_ticks),
            trace: None,
            attachable: true,
        });
    }
    out
}

/// The frontend whose native package the process has mapped (torch_tpu and torch_xla before
/// jax, whose packages they may load too).
pub fn frontend_from_maps(pid: u32) -> Option<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    ["torch_tpu", "torch_xla", "jaxlib"]
        .into_iter()
        .find(|pkg| maps.contains(&format!("/{pkg}/")))
        .map(|pkg| if pkg == "jaxlib" { "jax" } else { pkg }.to_string())
}

/// Seconds since a process started, from its start time in clock ticks since boot (USER_HZ is
/// 100 on Linux, a fixed part of its ABI).
fn uptime_since(start_ticks: u64) -> Option<f64> {
    const USER_HZ: f64 = 100.0;
    let boot = std::fs::read_to_string("/proc/uptime").ok()?;
    let since_boot: f64 = boot.split_whitespace().next()?.parse().ok()?;
    let up = since_boot - start_ticks as f64 / USER_HZ;
    (up >= 0.0).then_some(up)
}

/// Reads the stream's first bytes until the manifest decodes (a trace starts with it), then
/// hangs up; gives up past [`PROBE_TIMEOUT`] or [`PROBE_MAX_BYTES`].
pub(crate) fn read_manifest(mut s: UnixStream) -> Option<Manifest> {
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let mut bytes = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        match s.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) if bytes.len() + n <= PROBE_MAX_BYTES => {
                bytes.extend_from_slice(buf.get(..n)?);
            }
            Ok(_) => return None,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
        if let Some(m) = live::manifest_from_prefix(&bytes) {
            return Some(m);
        }
    }
}

/// The frontend the manifest names, else the one whose package the process loaded.
fn frontend(m: &Manifest) -> Option<String> {
    Some(
        tpuscope_analyzers::report::manifest_frontend(m)
            .name()
            .to_string(),
    )
    .filter(|f| !f.is_empty())
}

fn proc_cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// The `.tps` file among the process's open files (the collector keeps its trace open).
fn trace_file(pid: u32) -> Option<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .find(|p| p.extension().is_some_and(|x| x == "tps"))
}

fn uptime(s: f64) -> String {
    let s = s as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

fn print_table(entries: &[Entry], all: bool) {
    if entries.is_empty() {
        if all {
            println!("no instrumented or attachable (PJRT plugin loaded) processes of this user");
        } else {
            println!("no instrumented processes of this user");
        }
        return;
    }
    let unknown = || "?".to_string();
    let rows: Vec<[String; 5]> = entries
        .iter()
        .map(|e| {
            [
                e.pid.to_string(),
                e.uptime_s.map_or_else(unknown, uptime),
                e.frontend.clone().unwrap_or_else(unknown),
                e.plugin.clone().unwrap_or_else(unknown),
                e.command.clone(),
            ]
        })
        .collect();
    let header = ["PID", "UPTIME", "FRONTEND", "PLUGIN", "COMMAND"];
    let width = |i: usize| {
        rows.iter()
            .map(|r| r[i].len())
            .chain([header[i].len()])
            .max()
            .unwrap_or(0)
    };
    let w: Vec<usize> = (0..4).map(width).collect();
    let line = |c: [&str; 5]| {
        format!(
            "{:<w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {}",
            c[0],
            c[1],
            c[2],
            c[3],
            c[4],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2],
            w3 = w[3]
        )
    };
    println!("{}", line(header));
    for (r, e) in rows.iter().zip(entries) {
        println!("{}", line([&r[0], &r[1], &r[2], &r[3], &r[4]]).trim_end());
        let mut where_ = match &e.socket {
            Some(socket) => format!("{:w0$}  socket {}", "", socket.display(), w0 = w[0]),
            None => format!(
                "{:w0$}  attachable: a PJRT plugin is loaded, no tpuscope yet (tpuscope attach {})",
                "",
                e.pid,
                w0 = w[0]
            ),
        };
        if let Some(t) = &e.trace {
            where_.push_str(&format!("  trace {}", t.display()));
        }
        println!("{where_}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuscope_core::event::KeyValue;

    #[test]
    fn uptimes_read_naturally() {
        assert_eq!(uptime(5.9), "5s");
        assert_eq!(uptime(65.0), "1m05s");
        assert_eq!(uptime(7322.0), "2h02m");
    }

    #[test]
    fn the_frontend_comes_from_the_manifest_else_the_loaded_packages() {
        let kv = |k: &str| KeyValue {
            key: k.into(),
            value: "1".into(),
        };
        let mut m = Manifest {
            package_versions: vec![kv("jax"), kv("jaxlib")],
            ..Default::default()
        };
        assert_eq!(frontend(&m).as_deref(), Some("jax"));
        m.package_versions.push(kv("torch_xla"));
        assert_eq!(frontend(&m).as_deref(), Some("torch_xla"));
        m.frontend = "torch_tpu".into();
        assert_eq!(frontend(&m).as_deref(), Some("torch_tpu"));
        assert_eq!(frontend(&Manifest::default()), None);
    }
}
