//! `tpuscope whatif TRACE... --topology v5e:2x2`: the programs a run compiled on the CPU stand-in,
//! compiled again for a TPU topology with libtpu's compile-only path (no TPU needed): whether
//! each fits in a chip's HBM, what it costs to compile there, its roofline time, a TPU lower
//! bound for the step, and what the run's recompiles would cost. Each program is compiled in a
//! child process (`replay`), results are cached by program, topology and libtpu; the report is
//! `analyzers::whatif`.

pub mod replay;
pub mod topology;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tpuscope_analyzers::digest::Digest;
use tpuscope_analyzers::report::{self, Input, Options};
use tpuscope_analyzers::units::{bytes, duration, fine_duration, num};
use tpuscope_analyzers::whatif::{self, ProgramKey, Replayed, WhatIfReport};
use tpuscope_core::Trace;

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    Markdown,
}

#[derive(Debug, clap::Args)]
pub struct WhatifArgs {
    /// Traces (`tpuscope run` on the CPU stand-in records every program and its compile options).
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    /// The TPU topology, GENERATION:SHAPE, a slice that generation has: v5e:2x2, v6e:4x4,
    /// v4:2x2x1, v5p:2x2x1, … (any case: V5E:2X2 is v5e:2x2).
    #[arg(long)]
    pub topology: String,
    /// The libtpu to compile with. Default: the `libtpu` package of the run's Python.
    #[arg(long, value_name = "PATH")]
    pub libtpu: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// What one chip-hour costs, to price the recompiles.
    #[arg(long, value_name = "PRICE", value_parser = price)]
    pub price_per_chip_hour: Option<f64>,
    /// Seconds one program may take to compile.
    #[arg(long, default_value = "600", value_name = "S", value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// Compiles at once, 1 to 16 (each is a child process that uses up to all cores).
    #[arg(long, default_value = "2", value_name = "N", value_parser = clap::value_parser!(u8).range(1..=16))]
    pub jobs: u8,
}

/// `--price-per-chip-hour`: a finite amount above 0.
fn price(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(p) if p.is_finite() && p > 0.0 => Ok(p),
        _ => Err("a price is a finite number above 0, e.g. 1.2".to_string()),
    }
}

/// One distinct program to replay, with the bytes the trace holds for it.
struct Job {
    key: ProgramKey,
    name: String,
    format: String,
    code: Option<Vec<u8>>,
    options: Option<Vec<u8>>,
}

/// How to compile: for `whatif` and for `report --whatif`.
pub struct Settings<'a> {
    pub topology: &'a str,
    pub libtpu: Option<&'a Path>,
    pub price_per_chip_hour: Option<f64>,
    pub jobs: usize,
    pub timeout: Duration,
    /// Told of each program as its compile ends ([`print_progress`] on the command line; the
    /// GUI's What-if tab shows it).
    pub progress: &'a (dyn Fn(&Progress<'_>) + Sync),
}

/// One program done: the `done`-th of `total`.
pub struct Progress<'a> {
    pub done: usize,
    pub total: usize,
    pub name: &'a str,
    pub topology: &'a str,
    pub result: &'a Result<Replayed, String>,
}

/// The command line's progress: a line on stderr per program.
pub fn print_progress(p: &Progress<'_>) {
    eprintln!(
        "tpuscope: {}/{} {} for {}: {}",
        p.done,
        p.total,
        p.name,
        p.topology,
        match p.result {
            Ok(x) => format!("compiled in {}", duration(x.compile_ms)),
            Err(e) => format!("not compiled: {e}"),
        }
    );
}

/// Checks a topology name before anything runs: a generation tpuscope knows and a slice shape
/// it has (see [`topology::parse`]).
pub fn check_topology(topology: &str) -> Result<()> {
    topology::parse(topology).map_err(anyhow::Error::msg)?;
    Ok(())
}

/// The what-if report of `traces` (whose report is `rep`). `Err` is one line when nothing can
/// be compiled (a bad topology, a libtpu that is not one or that refuses the topology, traces
/// without programs) or nothing was: then no report claims anything about the programs.
pub fn compute(
    traces: &[whatif::Run<'_>],
    rep: &report::Report,
    s: &Settings<'_>,
) -> Result<WhatIfReport> {
    let name = topology::parse(s.topology).map_err(anyhow::Error::msg)?;
    let canonical = name.canonical();
    let python = traces.iter().find_map(|r| run_python(r.trace));
    let Some(libtpu) = replay::find_libtpu(s.libtpu, python.as_deref()) else {
        bail!(
            "no libtpu found: pass --libtpu PATH, or `pip install libtpu` in the run's Python environment"
        );
    };
    topology::check_libtpu_file(&libtpu).map_err(anyhow::Error::msg)?;
    let jobs = jobs(traces);
    if jobs.is_empty() {
        bail!("the traces hold no compile: nothing to compile for a TPU");
    }
    // libtpu's own answer once, before any program: a library that is not libtpu, or a shape
    // libtpu aborts on, is one line here rather than the same failure for every program.
    let facts = topology::check_with_libtpu(&libtpu, &canonical).map_err(anyhow::Error::msg)?;
    let s = Settings {
        topology: &canonical,
        ..*s
    };
    let replays = replay_all(&s, &libtpu, &jobs);
    if let Some(why) = nothing_compiled(&jobs, &replays, &canonical, &facts) {
        bail!(why);
    }
    let libtpu_text = libtpu.display().to_string();
    Ok(whatif::build(
        traces,
        rep,
        &whatif::Inputs {
            topology: &canonical,
            libtpu: &libtpu_text,
            price_per_chip_hour: s.price_per_chip_hour,
            replays: &replays,
        },
    ))
}

/// When no program compiled: one line with the reason they share, else the first program's.
fn nothing_compiled(
    jobs: &[Job],
    replays: &BTreeMap<ProgramKey, Result<Replayed, String>>,
    topology: &str,
    facts: &topology::TopologyFacts,
) -> Option<String> {
    if replays.values().any(Result::is_ok) {
        return None;
    }
    let why = |j: &Job| match replays.get(&j.key) {
        Some(Err(e)) => e.clone(),
        _ => "not replayed".to_string(),
    };
    let first = jobs.first()?;
    let target = format!(
        "{topology} ({}, {})",
        tpuscope_analyzers::units::plural(u64::from(facts.chips), "chip", "chips"),
        facts.device_kind
    );
    Some(if jobs.len() == 1 {
        format!(
            "the traces' one program, {}, did not compile for {target}: {}",
            first.name,
            why(first)
        )
    } else if jobs.iter().all(|j| why(j) == why(first)) {
        format!(
            "none of the {} programs compiled for {target}: {}",
            jobs.len(),
            why(first)
        )
    } else {
        format!(
            "none of the {} programs compiled for {target}; the first, {}: {} (the others' reasons are above)",
            jobs.len(),
            first.name,
            why(first)
        )
    })
}

pub fn whatif(args: &WhatifArgs) -> Result<i32> {
    check_topology(&args.topology)?;
    if let Some(libtpu) = &args.libtpu {
        topology::check_libtpu_file(libtpu).map_err(anyhow::Error::msg)?;
    }
    // Each trace as it streams by (of a merged job file, its first host): its tables and the
    // digest of its events, never the events themselves.
    let mut read: Vec<(Trace, Digest)> = Vec::new();
    for p in &args.traces {
        let (traces, digests) = crate::report_cmd::read_digested(p)?;
        match traces.into_iter().zip(digests).next() {
            Some(run) => read.push(run),
            None => bail!("{}: no trace in it", p.display()),
        }
    }
    let runs: Vec<whatif::Run<'_>> = read
        .iter()
        .map(|(trace, digest)| whatif::Run { trace, digest })
        .collect();
    let inputs: Vec<Input<'_>> = args
        .traces
        .iter()
        .zip(&read)
        .map(|(p, (t, d))| Input {
            digest: Some(d),
            ..Input::new(p.display().to_string(), t)
        })
        .collect();
    let rep = report::build(&inputs, &Options::default());
    // What the traces do not hold (a cut file: programs after the cut are not compiled here).
    crate::report_cmd::print_warnings(&rep);
    let w = compute(
        &runs,
        &rep,
        &Settings {
            topology: &args.topology,
            libtpu: args.libtpu.as_deref(),
            price_per_chip_hour: args.price_per_chip_hour,
            jobs: usize::from(args.jobs),
            timeout: Duration::from_secs(args.timeout),
            progress: &print_progress,
        },
    )?;
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&w).context("serializing the report")? + "\n",
        Format::Text => text(&w, false),
        Format::Markdown => text(&w, true),
    };
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .context("writing to stdout")?;
    Ok(0)
}

/// The run's Python (the first word of its command line, when it is one).
fn run_python(t: &Trace) -> Option<PathBuf> {
    let first = t.manifest.as_ref()?.command_line.first()?;
    let p = Path::new(first);
    let name = p.file_name()?.to_string_lossy();
    (name.starts_with("python") && p.is_file()).then(|| p.to_path_buf())
}

/// The distinct programs of the traces (by input program and options), in compile order.
fn jobs(traces: &[whatif::Run<'_>]) -> Vec<Job> {
    let mut out: Vec<Job> = Vec::new();
    for run in traces {
        let t = run.trace;
        for c in run.compiles() {
            let key = (c.program_hash, c.options_hash);
            // Failed compiles too: what the CPU stand-in could not compile may compile for the
            // TPU, or be named as what cannot (a CPU-only custom call).
            if c.program_hash == 0 || out.iter().any(|j| j.key == key) {
                continue;
            }
            let blob = |h: u64| t.blobs.get(&h).filter(|_| h != 0).map(|b| b.data.clone());
            out.push(Job {
                key,
                name: c.executable_name.clone(),
                format: c.program_format.clone(),
                code: blob(c.program_hash),
                options: blob(c.options_hash),
            });
        }
    }
    out
}

/// Replays every job (`--jobs` at once), from the cache when it has the answer.
fn replay_all(
    args: &Settings<'_>,
    libtpu: &Path,
    jobs: &[Job],
) -> BTreeMap<ProgramKey, Result<Replayed, String>> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results = Mutex::new(BTreeMap::new());
    let timeout = args.timeout;
    let cache = Cache::new(libtpu, args.topology);
    std::thread::scope(|s| {
        for _ in 0..args.jobs.clamp(1, 16) {
            s.spawn(|| {
                while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let r = replay_one(job, libtpu, args.topology, timeout, &cache);
                    (args.progress)(&Progress {
                        done: done.fetch_add(1, Ordering::Relaxed) + 1,
                        total: jobs.len(),
                        name: &job.name,
                        topology: args.topology,
                        result: &r,
                    });
                    if let Ok(mut m) = results.lock() {
                        m.insert(job.key, r);
                    }
                }
            });
        }
    });
    results.into_inner().unwrap_or_default()
}

fn replay_one(
    job: &Job,
    libtpu: &Path,
    topology: &str,
    timeout: Duration,
    cache: &Cache,
) -> Result<Replayed, String> {
    let Some(code) = &job.code else {
        return Err("its program is not in the trace (it was larger than a trace frame)".into());
    };
    let options = job.options.as_deref().unwrap_or_default();
    if let Some(hit) = cache.get(job.key) {
        return Ok(hit);
    }
    let r = replay::replay(
        libtpu,
        topology,
        &replay::Program {
            format: &job.format,
            code,
            options,
        },
        timeout,
    )?;
    cache.put(job.key, &r);
    Ok(r)
}

/// Replays by program, topology and libtpu (its path, size and modification time), under
/// `~/.cache/tpuscope/whatif/`. Only answers are kept: a failure is tried again next time.
struct Cache {
    dir: Option<PathBuf>,
    salt: String,
}

impl Cache {
    fn new(libtpu: &Path, topology: &str) -> Cache {
        let meta = std::fs::metadata(libtpu).ok();
        let stamp = meta.as_ref().map_or((0, 0), |m| {
            (
                m.len(),
                m.modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs()),
            )
        });
        let dir = crate::locate::cache_dir().join("whatif");
        Cache {
            dir: std::fs::create_dir_all(&dir).ok().map(|()| dir),
            // `v2`: replays hold the compiler's passes; older entries, without them, are not reused.
            salt: format!("v2|{}|{}|{}|{topology}", libtpu.display(), stamp.0, stamp.1),
        }
    }

    fn path(&self, key: ProgramKey) -> Option<PathBuf> {
        let id = tpuscope_core::writer::blob_hash(
            format!("{}|{:016x}|{:016x}", self.salt, key.0, key.1).as_bytes(),
        );
        self.dir.as_ref().map(|d| d.join(format!("{id:016x}.json")))
    }

    fn get(&self, key: ProgramKey) -> Option<Replayed> {
        let text = std::fs::read_to_string(self.path(key)?).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn put(&self, key: ProgramKey, r: &Replayed) {
        let (Some(path), Ok(text)) = (self.path(key), serde_json::to_string(r)) else {
            return;
        };
        // Written whole under a temporary name, then renamed: a reader never sees half a file.
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        if std::fs::write(&tmp, text).is_ok() && std::fs::rename(&tmp, &path).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// The report in words (`markdown`: the same lines as a Markdown list and table).
pub fn text(w: &WhatIfReport, markdown: bool) -> String {
    let mut out = String::new();
    let title = format!("tpuscope whatif: {}", w.title());
    if markdown {
        out.push_str(&format!("## {title}\n\n"));
    } else {
        out.push_str(&format!("{title}\n"));
    }
    let item = if markdown { "- " } else { "  " };
    out.push_str(&format!("{item}{}\n", w.programs_line()));
    out.push_str(&format!("{item}{}\n", w.compile_line()));
    if let Some(step) = w.step_line() {
        out.push_str(&format!("{item}{step}\n"));
    }
    out.push('\n');
    out.push_str(&programs_table(w, markdown));
    out.push_str(&passes(w, markdown));
    if !w.recompiles.is_empty() {
        out.push_str(if markdown {
            "\n### Recompiles on the TPU\n\n"
        } else {
            "\nRecompiles on the TPU\n"
        });
        for f in &w.recompiles {
            out.push_str(&format!("{item}{}\n", w.family_line(f)));
        }
    }
    out
}

/// Passes shown: the heaviest of those the replay kept.
const PASSES_SHOWN: usize = 10;

/// The TPU compiler's heaviest passes in the slowest compile (nothing when libtpu's profiler
/// gave none). The name comes last: libtpu's can be 60 characters long.
fn passes(w: &WhatIfReport, markdown: bool) -> String {
    let Some(slowest) = w.slowest_compile.as_ref().filter(|s| !s.passes.is_empty()) else {
        return String::new();
    };
    let title = slowest.title();
    let mut out = if markdown {
        format!("\n### {title}\n\n| pass | self | total | runs |\n|---|---|---|---|\n")
    } else {
        format!(
            "\n{title}\n  {:>10} {:>10} {:>6}  pass\n",
            "self", "total", "runs"
        )
    };
    for p in slowest.passes.iter().take(PASSES_SHOWN) {
        let (own, total) = (fine_duration(p.self_ms), fine_duration(p.total_ms));
        if markdown {
            out.push_str(&format!(
                "| {} | {own} | {total} | {} |\n",
                p.name.replace('|', "\\|"),
                p.count
            ));
        } else {
            out.push_str(&format!(
                "  {own:>10} {total:>10} {:>6}  {}\n",
                format!("×{}", p.count),
                p.name
            ));
        }
    }
    let shown = slowest.passes.len().min(PASSES_SHOWN);
    out.push_str(&if markdown {
        format!("\n{}\n", slowest.coverage_line(shown))
    } else {
        format!("  {}\n", slowest.coverage_line(shown))
    });
    out
}

fn programs_table(w: &WhatIfReport, markdown: bool) -> String {
    let mut out = String::new();
    let head = [
        "program",
        "compiles",
        "TPU compile",
        "HBM need",
        "fits",
        "flops",
        "bytes",
        "roofline",
    ];
    if markdown {
        out.push_str(&format!(
            "| {} |\n|{}\n",
            head.join(" | "),
            "---|".repeat(head.len())
        ));
    } else {
        out.push_str(&format!(
            "  {:<36} {:>8} {:>11} {:>10} {:>6} {:>10} {:>10} {:>10}\n",
            head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7]
        ));
    }
    for p in &w.programs {
        let cells: Vec<String> = match &p.tpu {
            Some(t) => vec![
                p.name.clone(),
                p.compiles.to_string(),
                duration(t.compile_ms),
                bytes(t.need_bytes),
                t.fits_label(),
                t.flops.map_or_else(|| "?".to_string(), num),
                t.bytes_accessed
                    .map_or_else(|| "?".to_string(), |b| bytes(b as i64)),
                t.roofline_ms.map_or_else(|| "?".to_string(), fine_duration),
            ],
            None => vec![
                p.name.clone(),
                p.compiles.to_string(),
                format!(
                    "not compiled: {}",
                    p.not_replayed.as_deref().unwrap_or("unknown")
                ),
            ],
        };
        if markdown {
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        } else if cells.len() == 3 {
            out.push_str(&format!(
                "  {:<36} {:>8} {}\n",
                cells[0], cells[1], cells[2]
            ));
        } else {
            out.push_str(&format!(
                "  {:<36} {:>8} {:>11} {:>10} {:>6} {:>10} {:>10} {:>10}\n",
                cells[0], cells[1], cells[2], cells[3], cells[4], cells[5], cells[6], cells[7]
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `tpuscope whatif`'s text and Markdown of a real whatif JSON (jax_lr on v5e:2x2, libtpu
    /// 0.0.52, from `scripts/record-samples.sh`), with the compiler's passes of the slowest
    /// compile. Kept with the binary's snapshots, in `cli/tests/snapshots/`.
    #[test]
    fn whatif_text_and_markdown_of_the_jax_lr_sample() {
        let json =
            std::fs::read_to_string("../sample_traces/real/jax_lr.whatif-v5e-2x2.json").unwrap();
        let w: WhatIfReport = serde_json::from_str(&json).unwrap();
        let slowest = w.slowest_compile.as_ref().unwrap();
        assert!(!slowest.passes.is_empty(), "the sample holds passes");
        let plain = text(&w, false);
        assert!(
            plain.contains("TPU compiler's heaviest passes (slowest compile: "),
            "{plain}"
        );
        insta::with_settings!({ snapshot_path => "../../tests/snapshots", prepend_module_to_snapshot => false }, {
            insta::assert_snapshot!("whatif_text__jax_lr_v5e_2x2", plain);
            insta::assert_snapshot!("whatif_markdown__jax_lr_v5e_2x2", text(&w, true));
        });
    }
}
