//! Replays one captured program on a TPU topology with libtpu's compile-only path
//! (`PJRT_TopologyDescription_Create` + `PJRT_Compile` without a client), no TPU needed.
//!
//! Every compile runs in a child `tpuscope __whatif-compile` process with a deadline: libtpu
//! aborts the whole process for a topology smaller than the program's replicas × partitions
//! (`Check failed: id < CoreCount`), and may hang. The parent writes the program and its compile
//! options to a private temp dir, the child loads libtpu, compiles, and prints one JSON line after
//! [`MARKER`].
//!
//! - [`replay`]: the parent side, what `tpuscope whatif` calls per distinct program;
//! - [`find_libtpu`]: which libtpu to use;
//! - [`compile_cmd`]: the hidden subcommand (the child, or with `--via-child` the parent, for
//!   tests and debugging).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tpuscope_analyzers::whatif::{CompiledMemory, CompilerPass, HbmOom, Replayed};
use tpuscope_pjrt::compile_only::Topology;
use tpuscope_pjrt::driver::Status;
use tpuscope_pjrt::profiler::{HOST_TRACE_OPTIONS, Profiler};

use crate::child::{self, RunError};

/// The line of the child's stdout that carries its answer (libtpu may print too).
const MARKER: &str = "tpuscope-whatif: ";
/// What `find_libtpu` allows a Python to take to say where its libtpu is.
const PYTHON_TIMEOUT: Duration = Duration::from_secs(30);

/// One captured program: the `input_program` blob, its format (`mlir`, `hlo`), and the
/// `compile_options` blob (a serialized `CompileOptionsProto`) of a Compile record.
#[derive(Clone, Copy, Debug)]
pub struct Program<'a> {
    pub format: &'a str,
    pub code: &'a [u8],
    pub options: &'a [u8],
}

/// Compiles `program` for `topology` (e.g. `"v5e:2x2"`) with the libtpu at `libtpu`, in a child
/// `tpuscope __whatif-compile` process that `timeout` bounds (killed with its process group past
/// it). The child has `TPU_SKIP_MDS_QUERY=1` unless the caller's environment sets it, and
/// `ALLOW_MULTIPLE_LIBTPU_LOAD=1`: replays may run in parallel. `cost` holds libtpu's numeric
/// cost properties, `optimal_seconds` only when positive (libtpu gives ≈ -1 when it has none).
///
/// `Err` is one line saying why not: a topology with fewer devices than the program's replicas ×
/// partitions (checked before compiling, from the `CompileOptionsProto`), a CPU-only custom call
/// (`lapack_*`, named), libtpu's own message, a timeout ("timed out after …"), or the child's
/// crash. Must be called from the `tpuscope` binary: the child is `current_exe()`.
pub fn replay(
    libtpu: &Path,
    topology: &str,
    program: &Program,
    timeout: Duration,
) -> Result<Replayed, String> {
    let dir = tempdir().map_err(|e| format!("cannot make a temp dir: {e}"))?;
    let write = |name: &str, bytes: &[u8]| {
        std::fs::write(dir.path().join(name), bytes)
            .map_err(|e| format!("cannot write the program to {}: {e}", dir.path().display()))
    };
    write("program", program.code)?;
    write("options", program.options)?;
    write("format", program.format.as_bytes())?;
    let exe = std::env::current_exe().map_err(|e| format!("cannot find tpuscope itself: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.arg("__whatif-compile")
        .arg("--libtpu")
        .arg(libtpu)
        .arg("--topology")
        .arg(topology)
        .arg("--dir")
        .arg(dir.path());
    libtpu_env(&mut cmd);
    let child = child::run(&mut cmd, timeout).map_err(|e| match e {
        RunError::Spawn(e) => format!("cannot start the compile process: {e}"),
        RunError::TimedOut(_) => format!(
            "timed out after {} (the compile process was killed)",
            human(timeout)
        ),
    })?;
    let answer = child
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix(MARKER))
        .and_then(|j| serde_json::from_str::<Answer>(j).ok());
    match answer {
        Some(Answer {
            replayed: Some(r), ..
        }) => Ok(r),
        Some(Answer { error: Some(e), .. }) => Err(e),
        _ => Err(crash_line(&child.status, &child.stderr, "compile process")),
    }
}

/// The environment of a child that loads libtpu without a TPU, beside others doing the same.
pub(super) fn libtpu_env(cmd: &mut Command) {
    // Without it libtpu retries a cloud metadata server for minutes on a machine without a TPU.
    if std::env::var_os("TPU_SKIP_MDS_QUERY").is_none() {
        cmd.env("TPU_SKIP_MDS_QUERY", "1");
    }
    // libtpu takes /tmp/libtpu_lockfile at initialization: a second compile process would fail
    // ("Internal error when accessing libtpu multi-process lockfile") while the first runs.
    cmd.env("ALLOW_MULTIPLE_LIBTPU_LOAD", "1");
}

/// The libtpu to use: `explicit`; else the `libtpu` package of the Python at `python` (its
/// `libtpu.get_library_path()`, or the `libtpu.so` in the package's directory); else `None`.
pub fn find_libtpu(explicit: Option<&Path>, python: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    let python = python?;
    // Run from a temp dir: `import libtpu` must not pick up a libtpu.so in the caller's cwd.
    let cwd = tempdir().ok()?;
    let script = "import os, libtpu\n\
        p = getattr(libtpu, 'get_library_path', None)\n\
        p = p() if p else os.path.join(os.path.dirname(libtpu.__file__), 'libtpu.so')\n\
        print('tpuscope-libtpu: ' + str(p))";
    let mut cmd = Command::new(python);
    cmd.args(["-c", script]).current_dir(cwd.path());
    let out = child::run(&mut cmd, PYTHON_TIMEOUT).ok()?;
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix("tpuscope-libtpu: "))
        .map(|p| PathBuf::from(p.trim()))
        .filter(|p| p.is_file())
}

/// Arguments of the hidden `tpuscope __whatif-compile`.
#[derive(Debug, clap::Args)]
pub struct CompileArgs {
    /// libtpu.so to load (default: the libtpu package of `--python`).
    #[arg(long)]
    pub libtpu: Option<PathBuf>,
    /// A Python whose `libtpu` package to use when `--libtpu` is not given.
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// TPU topology, e.g. v5e:2x2.
    #[arg(long)]
    pub topology: String,
    /// Directory holding `program`, `options` (serialized CompileOptionsProto) and `format`.
    #[arg(long)]
    pub dir: PathBuf,
    /// Act as the parent: replay in a child process with this deadline (tests, debugging).
    #[arg(long)]
    pub via_child: bool,
    #[arg(long, default_value_t = 120_000)]
    pub timeout_ms: u64,
}

/// The child's answer (also what `--via-child` prints).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Answer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    replayed: Option<Replayed>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// `tpuscope __whatif-compile`: compiles the program in `args.dir` in this process (or, with
/// `--via-child`, through [`replay`]) and prints the answer as one JSON line after [`MARKER`].
pub fn compile_cmd(args: &CompileArgs) -> anyhow::Result<i32> {
    let read = |name: &str| {
        std::fs::read(args.dir.join(name))
            .map_err(|e| format!("cannot read {}: {e}", args.dir.join(name).display()))
    };
    let result = (|| {
        let libtpu = find_libtpu(args.libtpu.as_deref(), args.python.as_deref())
            .ok_or("no libtpu: give --libtpu, or a --python with the libtpu package")?;
        let code = read("program")?;
        let options = read("options")?;
        let format = String::from_utf8_lossy(&read("format")?).trim().to_string();
        let program = Program {
            format: &format,
            code: &code,
            options: &options,
        };
        if args.via_child {
            let timeout = Duration::from_millis(args.timeout_ms);
            replay(&libtpu, &args.topology, &program, timeout)
        } else {
            compile_here(&libtpu, &args.topology, &program)
        }
    })();
    let answer = match result {
        Ok(r) => Answer {
            replayed: Some(r),
            error: None,
        },
        Err(e) => Answer {
            replayed: None,
            error: Some(e),
        },
    };
    println!("{MARKER}{}", serde_json::to_string(&answer)?);
    Ok(0)
}

/// The child's work: load libtpu, create the topology, check it is large enough, compile, read
/// what the executable says.
fn compile_here(libtpu: &Path, topology: &str, program: &Program) -> Result<Replayed, String> {
    let (replicas, partitions) = tpuscope_core::compile_options::device_counts(program.options)
        .map_err(|e| format!("the compile options do not decode: {e}"))?;
    let (d, _) = tpuscope_pjrt::probe::load_driver(libtpu)
        .map_err(|e| format!("libtpu at {}: {e}", libtpu.display()))?;
    let pjrt = |what: &str, e: Status| format!("{what}: {}", first_line(&e.message));
    d.plugin_initialize()
        .map_err(|e| pjrt("libtpu does not initialize", e))?;
    let topo =
        Topology::create(d, topology).map_err(|e| pjrt(&format!("topology {topology}"), e))?;
    let devices = topo
        .devices()
        .map_err(|e| pjrt("the topology's devices", e))? as u64;
    let needed = replicas.saturating_mul(partitions);
    // libtpu aborts the process rather than return an error for this.
    if needed > devices {
        return Err(format!(
            "topology {topology} is too small: the program needs {needed} devices (replicas × partitions = {replicas} × {partitions}), {topology} has {devices}"
        ));
    }
    let (hbm, hbm_source) = match topo.device_memory_limit() {
        Some(b) => (Some(b), "libtpu".to_string()),
        None => match hbm_of_generation(topology) {
            Some(b) => (Some(b), "tpuscope's table".to_string()),
            None => (None, String::new()),
        },
    };
    let started = std::time::Instant::now();
    // The TPU compiler's passes, traced by libtpu's profiler extension around `PJRT_Compile`
    // only. Without the extension, or when its trace does not come or decode, no passes: the
    // replay itself stands.
    let profiler = Profiler::of(&d);
    let (compiled, passes) = match &profiler {
        Some(p) => match topo.compile_profiled(
            program.format,
            program.code,
            program.options,
            p,
            HOST_TRACE_OPTIONS,
        ) {
            Ok((c, xspace)) => (
                Ok(c),
                xspace.ok().map(|x| heaviest_passes(&x)).unwrap_or_default(),
            ),
            Err(e) => (Err(e), Vec::new()),
        },
        None => (
            topo.compile(program.format, program.code, program.options),
            Vec::new(),
        ),
    };
    // What the topology says, whatever the compile's answer.
    let topology = Replayed {
        topology_devices: u32::try_from(devices).unwrap_or(u32::MAX),
        topology_chips: topo
            .chips()
            .ok()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        hbm_bytes_per_chip: hbm,
        hbm_source,
        ..Replayed::default()
    };
    let c = match compiled {
        Ok(c) => c,
        // Not an error of the replay: the answer "does not fit", with what libtpu says it needs.
        Err(e) => match HbmOom::parse(&e.message) {
            Some(oom) => {
                return Ok(Replayed {
                    compile_ms: started.elapsed().as_secs_f64() * 1e3,
                    hbm_oom: Some(oom),
                    ..topology
                });
            }
            None => return Err(compile_error(&e.message, program.code)),
        },
    };
    let (optimized_format, optimized_bytes) = c
        .optimized
        .map_or((String::new(), 0), |(f, n)| (f, n as u64));
    Ok(Replayed {
        passes,
        compile_ms: c.compile_time.as_secs_f64() * 1e3,
        memory: c.memory.map(|m| CompiledMemory {
            argument: m.argument,
            output: m.output,
            alias: m.alias,
            temp: m.temp,
            generated_code: m.generated_code,
            peak: m.peak,
        }),
        cost: c
            .cost
            .into_iter()
            .filter_map(|(n, v)| v.as_f64().map(|x| (n, x)))
            // libtpu says `optimal_seconds` ≈ -1 when it has no roofline for a program (seen on
            // an MLP train step; JAX's AOT cost_analysis shows the same): left out, unknown.
            .filter(|(n, x)| n != "optimal_seconds" || *x > 0.0)
            .collect(),
        optimized_format,
        optimized_bytes,
        ..topology
    })
}

/// How many passes a replay keeps: the heaviest by self time.
const PASSES_KEPT: usize = 15;

/// The [`PASSES_KEPT`] heaviest compiler passes of a serialized `XSpace` (none if it does not
/// decode).
fn heaviest_passes(xspace: &[u8]) -> Vec<CompilerPass> {
    let Ok(space) = tpuscope_core::xplane::decode(xspace) else {
        return Vec::new();
    };
    let ms = |ps: i64| ps as f64 / 1e9;
    tpuscope_core::xplane::compiler_passes(&space)
        .into_iter()
        .take(PASSES_KEPT)
        .map(|t| CompilerPass {
            self_ms: ms(t.self_ps),
            total_ms: ms(t.total_ps),
            count: t.count,
            name: t.name,
        })
        .collect()
}

pub(super) fn first_line(message: &str) -> &str {
    message
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("failed")
}

/// libtpu's compile error as one line, naming a CPU-only custom call when the program has one.
fn compile_error(message: &str, code: &[u8]) -> String {
    let first = first_line(message);
    // libtpu names the first call it cannot emit; the program's first such call otherwise.
    let named = cpu_only_custom_call(first.as_bytes()).or_else(|| cpu_only_custom_call(code));
    match named {
        Some(name) => format!("custom call {name} runs on CPU only (libtpu: {first})"),
        None => format!("libtpu: {first}"),
    }
}

/// The first custom-call target of jaxlib's CPU-only kernels (LAPACK, DUCC FFT) named in a
/// program's bytes: MLIR bytecode and HLO protos both keep the target as plain text.
fn cpu_only_custom_call(code: &[u8]) -> Option<String> {
    ["lapack_", "ducc_"].iter().find_map(|prefix| {
        let p = prefix.as_bytes();
        let at = code.windows(p.len()).position(|w| w == p)?;
        let end = code[at..]
            .iter()
            .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
            .map_or(code.len(), |n| at + n);
        Some(String::from_utf8_lossy(&code[at..end]).into_owned())
    })
}

/// HBM per chip by TPU generation, when libtpu does not say it (libtpu 0.0.52 does, as
/// `device_memory_bytes_limit`: v5e 15.75 GiB, v6e 31.2 GiB, v5p 95.7 GiB, v4 30.5 GiB); the
/// Cloud TPU docs' figures, which libtpu's limits show to be GiB.
fn hbm_of_generation(topology: &str) -> Option<u64> {
    super::topology::generation_of(topology).map(|g| g.hbm_gib << 30)
}

/// A private directory for one compile's files, removed when dropped.
fn tempdir() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("tpuscope-whatif-")
        .tempdir()
}

/// One line for a child (`what`: "compile process") that gave no answer: how it ended and what
/// it said last (libtpu's `Check failed` line when it aborted).
pub(super) fn crash_line(status: &ExitStatus, stderr: &str, what: &str) -> String {
    let how = match (status.code(), status.signal()) {
        (Some(c), _) => format!("the {what} exited with status {c}"),
        (None, Some(6)) => format!("the {what} aborted (SIGABRT)"),
        (None, Some(8)) => format!("the {what} crashed (SIGFPE)"),
        (None, Some(11)) => format!("the {what} crashed (SIGSEGV)"),
        (None, Some(s)) => format!("the {what} was killed by signal {s}"),
        (None, None) => format!("the {what} ended abnormally"),
    };
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let said = lines
        .iter()
        .rev()
        .find(|l| l.contains("Check failed"))
        .or(lines.last());
    match said {
        Some(l) => format!("{how}: {}", child::truncate(l, 300)),
        None => how,
    }
}

fn human(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_only_custom_calls_are_named() {
        let code = b"\x00\x01stablehlo.custom_call\x00lapack_sgetrf_ffi\x00more";
        assert_eq!(
            cpu_only_custom_call(code).as_deref(),
            Some("lapack_sgetrf_ffi")
        );
        assert_eq!(cpu_only_custom_call(b"tanh dot add"), None);
        let e = compile_error("Custom emitter for lapack_strsm_ffi not found\nmore", code);
        assert!(
            e.starts_with("custom call lapack_strsm_ffi runs on CPU only"),
            "{e}"
        );
    }

    #[test]
    fn hbm_table_by_generation() {
        assert_eq!(hbm_of_generation("v5e:2x2"), Some(16 << 30));
        assert_eq!(hbm_of_generation("v5p:2x2x1"), Some(95 << 30));
        assert_eq!(hbm_of_generation("V4:2x2x1"), Some(32 << 30));
        assert_eq!(hbm_of_generation("v6e:4x4"), Some(32 << 30));
        assert_eq!(hbm_of_generation("v9:1x1"), None);
    }

    #[test]
    fn a_crash_says_how_and_libtpus_check_line() {
        let status = ExitStatus::from_raw(6);
        let l = crash_line(
            &status,
            "noise\nF1125 check.cc:1] Check failed: id < CoreCount() (1 vs. 1)\n*** trace\n",
            "compile process",
        );
        assert!(
            l.contains("SIGABRT") && l.contains("Check failed: id < CoreCount"),
            "{l}"
        );
    }
}
