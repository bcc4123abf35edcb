//! `tpuscope run`: starts a workload with the collector in front of its PJRT plugin.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::locate::{self, PythonEnv};

/// The name the collector registers under in JAX (`JAX_PLATFORMS`) and torch_xla (`PJRT_DEVICE`).
pub const STANDIN_PLATFORM: &str = "tpuscope";

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Trace file, or a directory to write traces in (default: the current directory).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The real PJRT plugin to wrap (default: libtpu on a TPU machine, else the XLA CPU plugin from
    /// the workload's Python environment).
    #[arg(long)]
    pub plugin: Option<PathBuf>,
    /// Plain pass-through of the workload's terminal output (no live view).
    #[arg(long)]
    pub no_tui: bool,
    /// Do not print the summary after the workload exits.
    #[arg(long)]
    pub quiet: bool,
    /// Serve Prometheus metrics of the workload at http://ADDR/metrics while it runs: PORT or
    /// :PORT (loopback), HOST:PORT; port 0 picks a free one (the address is printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// The workload command.
    #[arg(last = true, required = true)]
    pub cmd: Vec<String>,
}

/// How the collector is put in front of the plugin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A real TPU plugin (libtpu): frontends find the collector through `TPU_LIBRARY_PATH`.
    Tpu,
    /// The XLA CPU plugin stands in for a TPU, reached through each frontend's plugin mechanism.
    CpuStandin,
}

pub fn mode_for_plugin(plugin: &Path) -> Mode {
    let name = plugin.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.contains("libtpu") {
        Mode::Tpu
    } else {
        Mode::CpuStandin
    }
}

/// A TPU is attached when the kernel exposes accel devices or vfio groups.
fn tpu_visible() -> bool {
    Path::new("/dev/accel0").exists()
        || std::fs::read_dir("/dev/vfio")
            .is_ok_and(|d| d.flatten().any(|e| e.file_name() != "vfio"))
}

/// Picks the real plugin: `--plugin`, else libtpu with a TPU attached, else the CPU plugin.
pub fn choose_plugin(explicit: Option<&Path>, py: Option<&PythonEnv>) -> Result<PathBuf> {
    if let Some(p) = explicit {
        if p.is_dir() {
            bail!(
                "--plugin {} is a directory: name the plugin's shared library{}",
                p.display(),
                plugins_in(p)
            );
        }
        if !p.is_file() {
            bail!("--plugin {} does not exist", p.display());
        }
        return Ok(p.canonicalize().unwrap_or_else(|_| p.to_path_buf()));
    }
    if let Some(p) = std::env::var_os("TPU_LIBRARY_PATH")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        && tpu_visible()
    {
        return Ok(p);
    }
    if let Some(py) = py {
        if tpu_visible()
            && let Some(l) = &py.libtpu
        {
            return Ok(PathBuf::from(l));
        }
        if let Some(c) = &py.cpu_plugin {
            return Ok(PathBuf::from(c));
        }
        bail!(
            "no PJRT plugin found for {} (Python {}): install the XLA CPU plugin to stand in for a TPU \
             (`{} -m pip install lammps-jax-pjrt-cpu==0.11.2`), install libtpu on a TPU VM, or pass --plugin PATH",
            py.executable,
            py.version,
            py.executable
        );
    }
    bail!("no PJRT plugin found: no Python environment to search (pass --plugin PATH)")
}

/// What `--plugin DIR` should have named: the PJRT plugins in DIR, by their usual names, or what
/// a plugin is.
fn plugins_in(dir: &Path) -> String {
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.ends_with(".so") && (n.starts_with("libtpu") || n.contains("pjrt")))
                .map(|n| dir.join(n).display().to_string())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    match found.as_slice() {
        [] => " (a .so exporting GetPjrtApi: libtpu.so on a TPU VM, pjrt_c_api_cpu_plugin.so for the CPU stand-in)".into(),
        [one] => format!(", e.g. {one}"),
        many => format!(" (one of {})", many.join(", ")),
    }
}

/// Checks `--plugin` as `doctor` does, loading it in a child `tpuscope __probe-plugin` (a
/// library that crashes while loading does not take tpuscope with it): a file that is not a
/// PJRT plugin is one line here, not the frontend's traceback after the workload started.
fn check_plugin(plugin: &Path) -> Result<()> {
    match crate::doctor::probe_in_child(plugin, &[]) {
        Ok(_) => Ok(()),
        Err(e) if e.starts_with("not a PJRT plugin") => {
            bail!("--plugin {} is {}", plugin.display(), one_line(&e))
        }
        Err(e) => bail!(
            "--plugin {} is not a PJRT plugin: {}",
            plugin.display(),
            one_line(&e)
        ),
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Environment variables that put the collector in front of `plugin`.
pub fn launch_env(
    mode: Mode,
    collector: &Path,
    plugin: &Path,
    agent_dir: &Path,
    out: &Path,
) -> Vec<(String, OsString)> {
    let mut env: Vec<(String, OsString)> = vec![
        ("TPUSCOPE_COLLECTOR".into(), collector.into()),
        ("TPUSCOPE_REAL_PLUGIN".into(), plugin.into()),
        ("TPUSCOPE_OUT".into(), out.into()),
    ];
    let mut pythonpath = OsString::from(agent_dir);
    if let Some(old) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
        pythonpath.push(":");
        pythonpath.push(old);
    }
    env.push(("PYTHONPATH".into(), pythonpath));
    match mode {
        Mode::Tpu => {
            env.push(("TPU_LIBRARY_PATH".into(), collector.into()));
            if !tpu_visible() && std::env::var_os("TPU_SKIP_MDS_QUERY").is_none() {
                // Without a TPU, libtpu otherwise spends minutes retrying the cloud metadata server.
                env.push(("TPU_SKIP_MDS_QUERY".into(), "1".into()));
            }
        }
        Mode::CpuStandin => {
            let mut jax_plugin = OsString::from(format!("{STANDIN_PLATFORM}:"));
            jax_plugin.push(collector);
            env.push(("PJRT_NAMES_AND_LIBRARY_PATHS".into(), jax_plugin));
            env.push(("JAX_PLATFORMS".into(), STANDIN_PLATFORM.into()));
            env.push(("PJRT_DEVICE".into(), STANDIN_PLATFORM.to_uppercase().into()));
            env.push(("TPU_LIBRARY_PATH".into(), collector.into()));
            env.push(("TPUSCOPE_ROLE".into(), "standin".into()));
            env.push(("TPUSCOPE_STANDIN".into(), "1".into()));
        }
    }
    env
}

/// Whether the collector will be able to create its trace in `dir` (tried with a file of ours,
/// removed at once): else the run would end with no trace and a wrong guess at why.
fn check_writable(dir: &Path, named: Option<&PathBuf>) -> Result<()> {
    match crate::output::can_create_file_in(dir) {
        Ok(()) => Ok(()),
        Err(e) => match named {
            Some(t) if *t != dir => bail!(
                "--out {} cannot be written: cannot create a file in {}: {e}",
                t.display(),
                dir.display()
            ),
            Some(_) => bail!(
                "--out {} cannot be written: cannot create a file in it: {e}",
                dir.display()
            ),
            None => bail!(
                "cannot write a trace in the current directory {}: {e} (pass --out DIR)",
                dir.display()
            ),
        },
    }
}

/// Where traces go and how to recognise the ones this run created.
struct OutSpec {
    /// Value of `TPUSCOPE_OUT`.
    target: PathBuf,
    /// Directory to scan for new traces after the run.
    dir: PathBuf,
    /// Traces present before the run.
    before: BTreeSet<PathBuf>,
}

fn list_traces(dir: &Path) -> BTreeSet<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.to_str()
                        .is_some_and(|s| s.ends_with(".tps") || s.contains(".tps."))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The traces a run may have written: the `.tps` files of its directory and, for a file
/// `--out` (which need not end in `.tps`), that file and the `.1`, `.2`, … the collector
/// falls back to when it exists.
fn traces_of(out: &OutSpec) -> BTreeSet<PathBuf> {
    let mut all = list_traces(&out.dir);
    if out.target != out.dir {
        let name = out
            .target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        if let (Some(name), Ok(rd)) = (name, std::fs::read_dir(&out.dir)) {
            all.extend(rd.flatten().map(|e| e.path()).filter(|p| {
                p.file_name().is_some_and(|f| {
                    let f = f.to_string_lossy();
                    f == name
                        || f.strip_prefix(&format!("{name}."))
                            .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
                })
            }));
        }
    }
    all
}

fn out_spec(out: Option<&Path>) -> Result<OutSpec> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (target, dir) = match out {
        None => (cwd.clone(), cwd),
        Some(p) => {
            let p = if p.is_absolute() {
                p.to_path_buf()
            } else {
                cwd.join(p)
            };
            let is_dir = p.is_dir() || p.as_os_str().to_string_lossy().ends_with('/');
            if is_dir {
                std::fs::create_dir_all(&p)
                    .with_context(|| format!("cannot create {}", p.display()))?;
                (p.clone(), p)
            } else {
                if p.exists() {
                    bail!(
                        "{} already exists; tpuscope never overwrites a trace (choose another --out)",
                        p.display()
                    );
                }
                let parent = p.parent().map(Path::to_path_buf).unwrap_or(cwd);
                if !parent.is_dir() {
                    bail!("the directory of --out {} does not exist", p.display());
                }
                (p, parent)
            }
        }
    };
    check_writable(&dir, out.is_some().then_some(&target))?;
    let mut spec = OutSpec {
        target,
        dir,
        before: BTreeSet::new(),
    };
    spec.before = traces_of(&spec);
    Ok(spec)
}

pub fn run(args: &RunArgs) -> Result<i32> {
    let program = args.cmd.first().context("no command given")?;
    locate::resolve_command(program)?;
    if let Some(m) = &args.metrics {
        // Checked before any work; bound just before the workload starts.
        crate::metrics::parse_addr(m)?;
    }
    let collector = locate::collector_path()?;
    let agent_dir = locate::agent_dir()?;
    let python = locate::workload_python(&args.cmd);
    // A command that names no Python: the plugin is looked for with python3 on PATH, a guess
    // that a failure must say it made.
    let guessed = |e: anyhow::Error| match locate::named_python(&args.cmd) {
        Some(_) => e,
        None => e.context(format!(
            "{program} is not a Python interpreter nor a script with a Python shebang, so \
             tpuscope looked for the PJRT plugin with the python3 on PATH (set TPUSCOPE_PYTHON \
             to the workload's Python, or pass --plugin PATH)"
        )),
    };
    let py_env = match (&python, &args.plugin) {
        (Some(p), _) => match locate::probe_python(p) {
            Ok(env) => Some(env),
            // With an explicit plugin the Python environment is only informative.
            Err(e) if args.plugin.is_some() => {
                eprintln!("tpuscope: note: {e:#}");
                None
            }
            Err(e) => return Err(guessed(e)),
        },
        (None, _) => None,
    };
    let plugin = choose_plugin(args.plugin.as_deref(), py_env.as_ref()).map_err(guessed)?;
    if let Some(p) = &args.plugin {
        // As the user named it.
        check_plugin(p)?;
    }
    let mode = mode_for_plugin(&plugin);
    let out = out_spec(args.out.as_deref())?;
    let mut env = launch_env(mode, &collector, &plugin, &agent_dir, &out.target);
    if let Some(f) = py_env.as_ref().and_then(PythonEnv::only_frontend) {
        env.push(("TPUSCOPE_FRONTEND".into(), f.into()));
    }
    // dynamo's structured logs, for `tpuscope report` to show next to the PJRT findings.
    let torch_trace = torch_trace_plan(py_env.as_ref(), &out);
    if let Some(t) = &torch_trace {
        env.extend(t.env());
    }

    // Bound before the workload starts: a taken port is bad input, not a run without metrics.
    let metrics = args
        .metrics
        .as_deref()
        .map(crate::metrics::Exporter::start)
        .transpose()?;

    let mut command = Command::new(args.cmd.first().context("no command given")?);
    command.args(args.cmd.iter().skip(1));
    for (k, v) in &env {
        command.env(k, v);
    }
    let live = !args.no_tui && std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    let mut log = None;
    let status = if live {
        let (status, log_path) = run_with_live_view(
            &mut command,
            &out.dir,
            metrics
                .as_ref()
                .map(|m| format!("tpuscope: metrics on {}", m.url)),
        )
        .with_context(|| {
            format!(
                "cannot start {}",
                args.cmd.first().map(String::as_str).unwrap_or("")
            )
        })?;
        log = Some(log_path);
        status
    } else {
        wait_forwarding_signals(&mut command).with_context(|| {
            format!(
                "cannot start {}",
                args.cmd.first().map(String::as_str).unwrap_or("")
            )
        })?
    };
    // The endpoint closes with the workload (its last scrape saw the counts; the trace has all).
    drop(metrics);

    let new: Vec<PathBuf> = traces_of(&out).difference(&out.before).cloned().collect();
    if new.is_empty() {
        eprintln!(
            "tpuscope: no trace was written: {}",
            no_trace_why(status, &plugin)
        );
    }
    if let Some(log) = log {
        // Next to the trace, under its name, when there is exactly one.
        let log = match new.as_slice() {
            [one] => {
                let named = one.with_extension("log");
                match std::fs::rename(&log, &named) {
                    Ok(()) => named,
                    Err(_) => log,
                }
            }
            _ => log,
        };
        eprintln!("tpuscope: workload output: {}", log.display());
    }
    if let Some(t) = &torch_trace {
        t.finish(&new);
    }
    for path in &new {
        if args.quiet {
            eprintln!("tpuscope: trace: {}", path.display());
        } else {
            crate::summary::print_trace_summary(path);
        }
    }
    Ok(exit_code(status))
}

/// Runs the workload with its output in the live view; returns its status and its log's path.
/// `notice` is shown first in the Output tab (the terminal's stderr is behind the view).
///
/// The workload owns its output: it writes into a log file in `dir` (which the view reads), not
/// into a pipe of tpuscope's, and it runs in a process group of its own, so that neither
/// tpuscope's death nor the terminal's hang-up reaches it. Signals sent to tpuscope are passed
/// on (`Forwarded`).
fn run_with_live_view(
    command: &mut Command,
    dir: &Path,
    notice: Option<String>,
) -> Result<(ExitStatus, PathBuf)> {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;

    let log_path = dir.join(format!("tpuscope-run-{}.log", std::process::id()));
    let log = std::fs::File::options()
        .append(true)
        .create_new(true)
        .open(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    if let Some(n) = notice {
        // First in the log too: the view shows the log.
        use std::io::Write as _;
        writeln!(&log, "{n}").with_context(|| format!("writing {}", log_path.display()))?;
    }
    let reader = std::fs::File::open(&log_path)
        .with_context(|| format!("cannot read {}", log_path.display()))?;
    command
        .stdin(Stdio::null())
        .stdout(
            log.try_clone()
                .context("duplicating the log's descriptor")?,
        )
        .stderr(log)
        // Unbuffered, so that its lines show as they are printed.
        .env("PYTHONUNBUFFERED", "1")
        .process_group(0);
    let signals = Forwarded::install()?;
    let child = command.spawn()?;
    let status = crate::live_ui::run_workload(crate::live_ui::Workload {
        child,
        output: crate::live_ui::LogTail::new(reader),
        signals,
    })?;
    Ok((status, log_path))
}

/// Signals sent to tpuscope while the workload runs in a process group of its own (the live
/// view): SIGTERM, SIGINT and SIGQUIT are passed on to it. SIGHUP is not: it means the terminal
/// went away, which ends the view, never the workload.
pub struct Forwarded {
    flags: [(Arc<AtomicBool>, nix::sys::signal::Signal); 3],
}

impl Forwarded {
    fn install() -> Result<Forwarded> {
        use nix::sys::signal::Signal;
        let flags = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGQUIT]
            .map(|sig| (Arc::new(AtomicBool::new(false)), sig));
        for (flag, sig) in &flags {
            signal_hook::flag::register(*sig as i32, Arc::clone(flag))
                .context("cannot install signal handlers")?;
        }
        Ok(Forwarded { flags })
    }

    /// Passes on what arrived since the last call to process `pid`; whether SIGTERM was among it.
    pub fn pass_on(&self, pid: u32) -> bool {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(0));
        let mut terminate = false;
        for (flag, sig) in &self.flags {
            if flag.swap(false, Ordering::SeqCst) {
                // Gone already: nothing to pass on to.
                let _ = nix::sys::signal::kill(pid, *sig);
                terminate |= *sig == nix::sys::signal::Signal::SIGTERM;
            }
        }
        terminate
    }
}

/// Where dynamo's `TORCH_TRACE` logs of a torch workload go.
struct TorchTrace {
    dir: PathBuf,
    /// Chosen by tpuscope (else the user's own `TORCH_TRACE`, left alone).
    ours: bool,
}

/// Where dynamo's logs go: the user's `TORCH_TRACE` when set; else, when tpuscope turns it on,
/// `<trace stem>.torch_trace/` next to the trace when `--out` names the file, or a directory in
/// the output directory renamed after the trace when the run ends.
///
/// On by default for torch_xla, where only dynamo reads `TORCH_TRACE`. TorchTPU also reads it:
/// it then captures a Python traceback for every eager op and names its programs after the
/// line (`tt_jit_<file>_L67C0_main_sum` instead of `tt_jit_sum`), which changes what the trace
/// holds — so for TorchTPU (or when the frontend is unknown) it is on only with
/// `TPUSCOPE_TORCH_TRACE=1`. `TPUSCOPE_TORCH_TRACE=0` turns it off everywhere.
fn torch_trace_plan(py: Option<&PythonEnv>, out: &OutSpec) -> Option<TorchTrace> {
    let asked = std::env::var_os("TPUSCOPE_TORCH_TRACE");
    if asked.as_deref().is_some_and(|v| v == "0") {
        return None;
    }
    if let Some(user) = std::env::var_os("TORCH_TRACE") {
        // An empty one is passed on as it is (torch 2.15 fails on it), not recorded.
        if user.is_empty() {
            return None;
        }
        let p = PathBuf::from(user);
        // Relative to the workload's directory, which is ours: recorded absolute for the report.
        let dir = std::env::current_dir().map_or(p.clone(), |cwd| cwd.join(&p));
        return Some(TorchTrace { dir, ours: false });
    }
    let py = py?;
    let on = match asked.as_deref() {
        Some(v) if v == "1" => py.has_torch_xla || py.has_torch_tpu,
        _ => py.only_frontend() == Some("torch_xla"),
    };
    if !on {
        return None;
    }
    let dir = if out.target == out.dir {
        out.dir
            .join(format!("tpuscope-{}.torch_trace", std::process::id()))
    } else {
        out.target.with_extension("torch_trace")
    };
    Some(TorchTrace { dir, ours: true })
}

impl TorchTrace {
    /// `TORCH_TRACE` for torch (unless the user set it), and `TPUSCOPE_TORCH_TRACE`, which the
    /// collector records in the manifest so that `tpuscope report` finds the logs.
    fn env(&self) -> Vec<(String, OsString)> {
        let mut env = vec![("TPUSCOPE_TORCH_TRACE".into(), self.dir.clone().into())];
        if self.ours {
            env.push(("TORCH_TRACE".into(), self.dir.clone().into()));
        }
        env
    }

    /// After the run: no clutter when nothing was logged; with one trace, the logs are renamed
    /// `<trace stem>.torch_trace/`, where `tpuscope report` looks first.
    fn finish(&self, new_traces: &[PathBuf]) {
        if !self.ours {
            return;
        }
        let empty = std::fs::read_dir(&self.dir).is_ok_and(|mut d| d.next().is_none());
        if empty {
            let _ = std::fs::remove_dir(&self.dir);
            return;
        }
        if !self.dir.exists() {
            return;
        }
        let dir = match new_traces {
            [one] => {
                let named = one.with_extension("torch_trace");
                if named == self.dir || named.exists() {
                    self.dir.clone()
                } else {
                    match std::fs::rename(&self.dir, &named) {
                        Ok(()) => named,
                        Err(_) => self.dir.clone(),
                    }
                }
            }
            _ => self.dir.clone(),
        };
        eprintln!("tpuscope: dynamo logs (TORCH_TRACE): {}", dir.display());
    }
}

/// Why a run left no trace, as far as its end tells. (`--out` was checked before the start, and
/// the collector says itself when it cannot create or write its trace.)
fn no_trace_why(status: ExitStatus, plugin: &Path) -> String {
    use std::os::unix::process::ExitStatusExt;
    if let Some(sig) = status.signal() {
        let name = nix::sys::signal::Signal::try_from(sig)
            .map(|s| format!(" ({})", s.as_str()))
            .unwrap_or_default();
        return format!(
            "the workload was killed by signal {sig}{name} before it loaded a PJRT plugin"
        );
    }
    match status.code() {
        Some(code) if code != 0 => {
            format!("the workload exited with status {code} before it loaded a PJRT plugin")
        }
        _ => format!(
            "the workload never loaded a PJRT plugin through the collector (plugin {}; see `tpuscope env` for the variables each frontend needs)",
            plugin.display()
        ),
    }
}

/// The workload's exit code; a signal death maps to 128 + signal like a shell does.
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Runs the child; Ctrl-C reaches it through the terminal (tpuscope ignores it and waits), and
/// SIGTERM/SIGHUP sent to tpuscope are passed on.
fn wait_forwarding_signals(command: &mut Command) -> Result<ExitStatus> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let interrupted = Arc::new(AtomicBool::new(false));
    let term = Arc::new(AtomicBool::new(false));
    let hup = Arc::new(AtomicBool::new(false));
    for (sig, flag) in [
        (SIGINT, &interrupted),
        (SIGQUIT, &interrupted),
        (SIGTERM, &term),
        (SIGHUP, &hup),
    ] {
        signal_hook::flag::register(sig, Arc::clone(flag))
            .context("cannot install signal handlers")?;
    }
    let mut child = command.spawn()?;
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        for (flag, sig) in [
            (&term, nix::sys::signal::Signal::SIGTERM),
            (&hup, nix::sys::signal::Signal::SIGHUP),
        ] {
            if flag.swap(false, Ordering::SeqCst) {
                let _ = nix::sys::signal::kill(pid, sig);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libtpu_means_tpu_mode() {
        assert_eq!(mode_for_plugin(Path::new("/x/libtpu.so")), Mode::Tpu);
        assert_eq!(
            mode_for_plugin(Path::new("/x/pjrt_c_api_cpu_plugin.so")),
            Mode::CpuStandin
        );
    }

    #[test]
    fn standin_env_points_every_frontend_at_the_collector() {
        let env = launch_env(
            Mode::CpuStandin,
            Path::new("/c/libtpuscope_collector.so"),
            Path::new("/p/cpu.so"),
            Path::new("/a"),
            Path::new("/o"),
        );
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(
            get("PJRT_NAMES_AND_LIBRARY_PATHS").as_deref(),
            Some("tpuscope:/c/libtpuscope_collector.so")
        );
        assert_eq!(get("JAX_PLATFORMS").as_deref(), Some("tpuscope"));
        assert_eq!(get("PJRT_DEVICE").as_deref(), Some("TPUSCOPE"));
        assert_eq!(
            get("TPU_LIBRARY_PATH").as_deref(),
            Some("/c/libtpuscope_collector.so")
        );
        assert_eq!(get("TPUSCOPE_REAL_PLUGIN").as_deref(), Some("/p/cpu.so"));
        assert!(get("PYTHONPATH").is_some_and(|p| p.starts_with("/a")));
    }

    #[test]
    fn existing_out_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t.tps");
        std::fs::write(&f, b"keep me").unwrap();
        assert!(out_spec(Some(&f)).is_err());
        assert_eq!(std::fs::read(&f).unwrap(), b"keep me");
    }
}
