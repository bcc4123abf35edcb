//! `tpuscope report`: the analyzers' findings over one or several traces, for a human or for CI.

mod junit;
mod markdown;
pub(crate) mod term;
pub(crate) mod text;

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use tpuscope_analyzers::digest::Digest;
use tpuscope_analyzers::report::{self, Budget, Input, REPORT_VERSION, Report};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For a person at a terminal (coloured when stdout is one; NO_COLOR turns colour off).
    Text,
    /// The whole report as JSON: for scripts, and as a later `--baseline`.
    Json,
    /// For a CI step summary ($GITHUB_STEP_SUMMARY): status line, findings, tables.
    Markdown,
    /// JUnit XML for CI test reporters (see below).
    Junit,
}

const AFTER_HELP: &str = "\
Budgets (--budget KEY=N, repeatable; the report fails when the actual value is above N):
  compiles                  compiles in all traces
  recompiles                recompiles in the steady state (Σ compiles − 1 over recompiled graphs)
  syncs-per-step            host syncs in the worst step after the first
  graph-fragments-per-step  executable launches in the worst step after the first
  cache-misses              compiles of a program that was already compiled
  hbm-peak-fraction         peak device memory / limit (0..1); unknown, and passing, when the
                            plugin reports no limit

JUnit (--format junit): one <testsuite name=\"tpuscope\"> with a <testcase> per budget (classname
tpuscope.budget, name the budget's key; a <failure> when exceeded, <skipped> when the trace cannot
tell) and, with --baseline, a testcase \"baseline\" that fails on regressions. Without budgets and
baseline nothing can fail (as the exit status): it holds one passing testcase per usual finding
kind (classname tpuscope.findings: recompile, sync, cache, hbm, oom — always there, so these test
names are the same in every run) and one per rarer kind found (setup_compile, graph_break,
guard_failure, host), each with that kind's findings in <system-out>.

Exit status: 0 when every budget holds and nothing regressed against the baseline (findings
alone never fail), 1 when a budget is exceeded or the baseline regressed, 2 for usage and input
errors (unreadable or not a trace, a trace format newer than this tpuscope, a bad budget, a
baseline that is not a tpuscope JSON report). A cut or unfinished trace is not an error: the
report covers what it holds and says so on stderr.";

#[derive(Debug, clap::Args)]
#[command(after_long_help = AFTER_HELP)]
pub struct ReportArgs {
    /// Traces: one run, successive runs of one program, or the hosts of one job.
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// A CI budget, KEY=N (compiles, recompiles, syncs-per-step, graph-fragments-per-step,
    /// cache-misses, hbm-peak-fraction); exit 1 when exceeded. See --help.
    // Parsed here rather than by clap so that a bad budget gives the one-line `tpuscope: error:`
    // of every other input error.
    #[arg(long = "budget", value_name = "KEY=N")]
    pub budgets: Vec<String>,
    /// An earlier `report --format json`: exit 1 on regressions against it.
    #[arg(long, value_name = "OLD.json")]
    pub baseline: Option<PathBuf>,
    /// dynamo's structured logs (a TORCH_TRACE directory, or one of its files) for the traces'
    /// graph breaks and guard failures. Default: `<trace>.torch_trace/` next to each trace, else
    /// the directory its `tpuscope run` recorded.
    #[arg(long = "torch-trace", value_name = "DIR")]
    pub torch_trace: Option<PathBuf>,
    /// Add what the traces' programs would do on this TPU topology (`tpuscope whatif`): fit in
    /// HBM, TPU compile time, roofline step time, cost of the recompiles.
    #[arg(long, value_name = "TOPOLOGY")]
    pub whatif: Option<String>,
    /// With --whatif: the libtpu to compile with (default: the run's Python's `libtpu` package).
    #[arg(long, value_name = "PATH", requires = "whatif")]
    pub libtpu: Option<PathBuf>,
}

/// Builds the report; returns the exit status (1 when a budget or the baseline failed).
pub fn report(args: &ReportArgs) -> Result<i32> {
    // Every input is checked before anything is written, so an error leaves stdout empty.
    let budgets = args
        .budgets
        .iter()
        .map(|b| {
            b.parse::<Budget>()
                .map_err(|e| anyhow!("--budget {b}: {e}"))
        })
        .collect::<Result<Vec<Budget>>>()?;
    if let Some(d) = &args.torch_trace
        && !d.exists()
    {
        bail!("--torch-trace {}: no such file or directory", d.display());
    }
    if let Some(t) = &args.whatif {
        if args.format == Format::Junit {
            bail!("--whatif adds a section to the text, Markdown and JSON reports, not to JUnit");
        }
        crate::whatif::check_topology(t)?;
    }
    let read = read_inputs(args)?;
    let baseline = match &args.baseline {
        Some(p) => Some(read_baseline(p)?),
        None => None,
    };
    let options = report::Options {
        torch_logs: Vec::new(),
        budgets,
        baseline,
        threads: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
    };
    let (
        rep,
        Held {
            traces, digests, ..
        },
    ) = build_report(args, read, options)?;

    print_warnings(&rep);

    let whatif = match &args.whatif {
        Some(topology) => {
            let runs: Vec<tpuscope_analyzers::whatif::Run<'_>> = traces
                .iter()
                .zip(&digests)
                .map(|((_, trace), digest)| tpuscope_analyzers::whatif::Run { trace, digest })
                .collect();
            Some(crate::whatif::compute(
                &runs,
                &rep,
                &crate::whatif::Settings {
                    topology,
                    libtpu: args.libtpu.as_deref(),
                    price_per_chip_hour: None,
                    jobs: 2,
                    timeout: std::time::Duration::from_secs(600),
                    progress: &crate::whatif::print_progress,
                },
            )?)
        }
        None => None,
    };
    let mut out = match args.format {
        Format::Json => {
            // The report's own field order, then `whatif`.
            #[derive(serde::Serialize)]
            struct WithWhatif<'a> {
                #[serde(flatten)]
                report: &'a Report,
                #[serde(skip_serializing_if = "Option::is_none")]
                whatif: Option<&'a tpuscope_analyzers::whatif::WhatIfReport>,
            }
            let with = WithWhatif {
                report: &rep,
                whatif: whatif.as_ref(),
            };
            // Streamed: a long run's JSON (a line per step) is not held as one string.
            write_json_stdout(&with)?;
            String::new()
        }
        Format::Text => text::render(&rep, &text::Style::for_stdout()),
        Format::Markdown => markdown::render(&rep),
        Format::Junit => junit::render(&rep),
    };
    if let Some(w) = &whatif
        && args.format != Format::Json
    {
        out.push('\n');
        out.push_str(&crate::whatif::text(w, args.format == Format::Markdown));
    }
    write_stdout(&out)?;

    let failed = report::failed(&rep);
    // The text report says this itself; machine formats get one line for the CI log.
    if failed && args.format != Format::Text {
        eprintln!("tpuscope: {}", rep.failure_summary());
    }
    Ok(i32::from(failed))
}

/// A report's traces, read: a merged job file's hosts each analysed as it was read, or every
/// trace's tables and digest held.
enum Read<'a> {
    Hosts(&'a Path, Vec<report::AnalysedRun>),
    Held(Held<'a>),
}

/// Traces read with their digests, held (what-if reads every launch), and the file each came
/// from (for the logs next to it).
#[derive(Default)]
struct Held<'a> {
    traces: Vec<(String, tpuscope_core::Trace)>,
    sources: Vec<&'a Path>,
    digests: Vec<Digest>,
}

/// Reads the report's traces: a merged job file alone (and no what-if) host by host.
fn read_inputs(args: &ReportArgs) -> Result<Read<'_>> {
    if let ([p], None) = (args.traces.as_slice(), &args.whatif)
        && let Some(runs) = read_analysed(p)?
    {
        return Ok(Read::Hosts(p, runs));
    }
    read_held(&args.traces).map(Read::Held)
}

/// Each trace's tables and digest, read as its events stream by; a merged job file gives one
/// per host.
fn read_held(paths: &[PathBuf]) -> Result<Held<'_>> {
    let mut held = Held::default();
    for p in paths {
        let (read, digested) = read_digested(p)?;
        for t in read {
            held.traces.push((input_path(p, &t), t));
            held.sources.push(p);
        }
        held.digests.extend(digested);
    }
    Ok(held)
}

/// The report of what was read, with dynamo's logs found next to the traces; what was held
/// comes back for what-if (nothing when a job's hosts were analysed as read).
fn build_report<'a>(
    args: &'a ReportArgs,
    read: Read<'a>,
    mut options: report::Options,
) -> Result<(Report, Held<'a>)> {
    let logs = |file: &Path, t: &tpuscope_core::Trace, path: &str| {
        crate::torch_logs::find(args.torch_trace.as_deref(), Some(file), Some(t), path)
    };
    let held = match read {
        Read::Hosts(p, runs) => {
            options.torch_logs = runs
                .iter()
                .filter_map(|r| logs(p, r.trace(), r.path()))
                .collect();
            if let Some(rep) = report::build_analysed(runs, &options) {
                return Ok((rep, Held::default()));
            }
            // Hosts the report orders otherwise than the file: read again, held.
            read_held(&args.traces)?
        }
        Read::Held(held) => held,
    };
    let inputs: Vec<Input<'_>> = held
        .traces
        .iter()
        .zip(&held.digests)
        .map(|((path, trace), d)| Input {
            digest: Some(d),
            ..Input::new(path.clone(), trace)
        })
        .collect();
    options.torch_logs = held
        .traces
        .iter()
        .zip(&held.sources)
        .filter_map(|((path, t), file)| logs(file, t, path))
        .collect();
    let rep = report::build(&inputs, &options);
    Ok((rep, held))
}

/// The report's warnings (a cut trace, no end record, recording stopped…) on stderr, as every
/// command that builds a report says them: each kind a few times at most (a forged file of
/// 100 000 segments is not 100 000 lines).
pub fn print_warnings(rep: &Report) {
    let mut warnings = crate::dump::Warnings::default();
    for w in &rep.warnings {
        warnings.add(format!("tpuscope: warning: {w}"));
    }
    warnings.print();
}

/// Each segment's tables (no events) and the digest of its events, read as they stream by: the
/// events are never held. The hosts of a merged file are read on all cores, a long trace's
/// chunks too (`chunked`). A long trace read
/// before comes from the cache of reads (`digest_cache`), and goes into it when read.
pub(crate) fn read_digested(path: &Path) -> Result<(Vec<tpuscope_core::Trace>, Vec<Digest>)> {
    let cache = crate::digest_cache::Entry::of(path, crate::digest_cache::Content::Reads);
    if let Some(read) = cache.as_ref().and_then(crate::digest_cache::Entry::load) {
        return Ok(read.into_iter().unzip());
    }
    let read = read_uncached(path)?;
    if let Some(cache) = &cache {
        cache.store(path, &read);
    }
    Ok(read.into_iter().unzip())
}

fn read_uncached(path: &Path) -> Result<Vec<(tpuscope_core::Trace, Digest)>> {
    let read_error = |e| crate::dump::read_error(path, e);
    if let Some(ranges) = tpuscope_core::stream::segment_ranges(path).map_err(read_error)? {
        // Damage a segment read alone cannot resync past: read in one pass below.
        if let Some(read) = read_hosts(path, &ranges, |_, t, d| (t, d))? {
            return Ok(read);
        }
    }
    let stream = tpuscope_core::TraceStream::open(path).map_err(read_error)?;
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    tpuscope_analyzers::digest::read_file_stream(stream, threads, Some(crate::spill::new()))
        .map_err(read_error)
}

/// The hosts of a merged file (`ranges`, as `segment_ranges` gave them) read on all cores,
/// each one's digest made as its events stream by, then `then(index, trace, digest)` on the
/// thread that read it: `None` when a host shows damage it cannot resync past alone.
fn read_hosts<R: Send>(
    path: &Path,
    ranges: &[(u64, u64)],
    then: impl Fn(usize, tpuscope_core::Trace, Digest) -> R + Sync,
) -> Result<Option<Vec<R>>> {
    use tpuscope_analyzers::digest::DigestBuilder;
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    tpuscope_core::stream::read_segments_then(
        path,
        ranges,
        threads,
        || DigestBuilder::spilling(&crate::spill::new()),
        DigestBuilder::decodes,
        |b, r| b.push_skimmed(r),
        |i, t, b| {
            let (t, d) = b.finish_for(t);
            then(i, t, d)
        },
    )
    .map_err(|e| crate::dump::read_error(path, e))
}

/// What the report calls a trace read from `file`: a merged file's host by its name and
/// process index.
fn input_path(file: &Path, t: &tpuscope_core::Trace) -> String {
    match &t.segment {
        Some(s) => format!("{}#{}/p{}", file.display(), s.host, s.process_index),
        None => file.display().to_string(),
    }
}

/// A merged job file's hosts, each analysed on the thread that read it as soon as it is read
/// (`report::AnalysedRun`), its launches then dropped: the report of a job holds each host's
/// summaries, not every host's digest at once. Each host's read goes into the cache of reads
/// as it is made, in file order; when the cache has them, each is read back from there alone.
/// `None` when the file is not a merged one, shows damage a host read alone cannot resync
/// past (one pass reads it), or cannot be read this way (the read that holds every host then
/// says why).
fn read_analysed(path: &Path) -> Result<Option<Vec<report::AnalysedRun>>> {
    let read_error = |e| crate::dump::read_error(path, e);
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let cache = crate::digest_cache::Entry::of(path, crate::digest_cache::Content::Reads);
    if let Some(kept) = cache.as_ref().and_then(crate::digest_cache::Entry::parts) {
        // Read before: each host's read back and analysed alone. One run is read whole.
        if kept.len() < 2 {
            return Ok(None);
        }
        let runs = kept.each(threads, |i, t, d| {
            report::AnalysedRun::new(i, input_path(path, &t), t, d)
        });
        if runs.is_some() {
            return Ok(runs);
        }
    }
    let Some(ranges) = tpuscope_core::stream::segment_ranges(path).map_err(read_error)? else {
        return Ok(None);
    };
    let storing = cache.as_ref().and_then(|c| c.storing(ranges.len()));
    let runs = read_hosts(path, &ranges, |i, t, d| {
        if let Some(s) = &storing {
            s.put(i, &t, &d);
        }
        report::AnalysedRun::new(i, input_path(path, &t), t, d)
    })
    // A read error, or a host's analysis that panicked on its thread, is met again by the
    // read that holds every host, and shows as it would there (one error line; a panic).
    .unwrap_or(None);
    if let (Some(s), Some(_)) = (storing, &runs) {
        s.finish(path);
    }
    Ok(runs)
}

fn read_baseline(path: &Path) -> Result<serde_json::Value> {
    let text = crate::dump::read_text_input(path, "baseline")?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        anyhow!(
            "baseline {} is not JSON ({e}); make one with `tpuscope report --format json`",
            path.display()
        )
    })?;
    let Some(version) = v.get("tpuscope_report").and_then(serde_json::Value::as_u64) else {
        bail!(
            "baseline {} is not a tpuscope JSON report (make one with `tpuscope report --format json`)",
            path.display()
        );
    };
    if version > u64::from(REPORT_VERSION) {
        eprintln!(
            "tpuscope: warning: baseline {} is report version {version}, newer than this tpuscope's {REPORT_VERSION}: comparing the fields this version knows",
            path.display()
        );
    }
    Ok(v)
}

/// Writes a value as pretty JSON and a newline, as it serializes; a closed pipe is the
/// reader's choice, as for [`write_stdout`].
fn write_json_stdout<T: serde::Serialize>(value: &T) -> Result<()> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let written = serde_json::to_writer_pretty(&mut out, value)
        .map_err(io::Error::from)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    match written {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e).context("cannot write the JSON report to stdout"),
    }
}

/// Writes the whole report; a closed pipe (`| head`) is the reader's choice, not an error.
fn write_stdout(s: &str) -> Result<()> {
    let stdout = io::stdout();
    let mut out = stdout.lock();
    match out.write_all(s.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e).context("cannot write to stdout"),
    }
}

/// Colour for a terminal unless NO_COLOR is set (non-empty); CLICOLOR_FORCE forces it for
/// pagers (`| less -R`).
fn want_color(
    is_tty: bool,
    no_color: Option<std::ffi::OsString>,
    force: Option<std::ffi::OsString>,
) -> bool {
    let set = |v: &Option<std::ffi::OsString>| v.as_ref().is_some_and(|v| !v.is_empty());
    if set(&no_color) {
        return false;
    }
    is_tty || (set(&force) && force.as_deref() != Some("0".as_ref()))
}

fn stdout_wants_color() -> bool {
    want_color(
        io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR"),
        std::env::var_os("CLICOLOR_FORCE"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tpuscope_analyzers::cache::StoredNotLoaded;
    use tpuscope_analyzers::hbm::{ExecutableMemory, OomReport};
    use tpuscope_analyzers::report::{
        BaselineResult, BudgetKey, ErrorSummary, Finding, Report, apply_budgets,
    };

    /// The golden all-kinds trace's report, with what no committed trace has: an OOM, a cache
    /// written but not read back, text full of markup, budgets of every status and a baseline.
    fn everything_report() -> Report {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sample_traces/golden/v1.0-all-kinds.tps");
        let trace = tpuscope_core::read_trace_file(&path).unwrap();
        let mut r = report::analyze(&[Input::new("golden|<a>.tps", &trace)]);
        let big = ExecutableMemory {
            run: 0,
            graph: "jit_big".into(),
            argument_bytes: 1 << 30,
            output_bytes: 1 << 20,
            temp_bytes: 3 << 30,
            generated_code_bytes: 0,
            peak_bytes: 4 << 30,
        };
        r.oom = Some(OomReport {
            run: 0,
            t_ms: 12.5,
            api: "PJRT_Client_BufferFromHostBuffer".into(),
            message: "RESOURCE_EXHAUSTED: Out of memory allocating 4.00G\nmore".into(),
            last_events: vec!["12.000 ms execute jit_big".into()],
            largest_executables: vec![big],
            memory_at_error: [(0, 15 << 30)].into_iter().collect(),
        });
        r.cache.stored_but_recompiled.push(StoredNotLoaded {
            graph: "jit_step".into(),
            stored_in_run: 0,
            recompiled_in_run: 1,
            loads_attempted_in_run: 0,
        });
        r.errors.push(ErrorSummary {
            api: "PJRT_Execute".into(),
            message: "bad \"quote\" & <tag> | pipe \u{7}bell".into(),
            count: 2,
        });
        r.findings.push(Finding {
            kind: tpuscope_analyzers::report::FindingKind::Cache,
            title: "x | y <z> *w* `a|b`".into(),
            source: None,
            suggestion: "do [this]".into(),
        });
        apply_budgets(
            &mut r,
            &[
                Budget {
                    key: BudgetKey::Compiles,
                    limit: 1.0,
                },
                Budget {
                    key: BudgetKey::HbmPeakFraction,
                    limit: 0.5,
                },
                Budget {
                    key: BudgetKey::CacheMisses,
                    limit: 0.0,
                },
            ],
        );
        r.baseline = Some(BaselineResult {
            regressions: vec![
                "syncs per step: 1 → 2".into(),
                "new recompile family: <tag> & \u{7}bell".into(),
            ],
            improvements: vec!["cache misses: 3 → 0".into()],
            ok: false,
        });
        r
    }

    #[test]
    fn every_section_renders_in_every_format() {
        let r = everything_report();
        let st = text::Style {
            color: false,
            width: 100,
        };
        let t = text::render(&r, &st);
        for needle in [
            "Out of device memory",
            "RESOURCE_EXHAUSTED: Out of memory allocating 4.00G",
            "jit_big: peak 4.0 GiB",
            "device 0 15.0 GiB",
            "jit_step: stored in run 0, compiled again in run 1",
            "UNIMPLEMENTED: DeserializeAndLoad",
            "2× PJRT_Execute",
            "EXCEEDED",
            "(<0.1% of 16.0 GiB)",
            "✗ syncs per step: 1 → 2",
            "FAILED: budget exceeded: compiles 2 > 1; 2 regressions against the baseline",
        ] {
            assert!(t.contains(needle), "no {needle:?} in:\n{t}");
        }
        // Control characters from the trace never reach the terminal.
        assert!(t.contains("pipe \u{FFFD}bell"), "{t}");
        assert!(!t.contains('\u{7}'), "{t}");
        // Only the first line of a long error message, in one-line contexts.
        assert!(!t.contains("more"), "{t}");

        let md = markdown::render(&r);
        assert!(md.contains("x \\| y &lt;z&gt; \\*w\\* `a|b`"), "{md}");
        assert!(md.contains("\n### Out of device memory\n"), "{md}");
        assert!(md.contains("| compiles | 1 | 2 | **EXCEEDED** |"), "{md}");
        assert!(
            md.contains("| hbm-peak-fraction | 0.5 | 0.0001221 | ok |"),
            "{md}"
        );
        assert!(md.contains("- **✗** syncs per step: 1 → 2"), "{md}");
        assert!(!md.contains('\u{7}'), "{md}");

        let x = junit::render(&r);
        assert!(x.contains("name=\"baseline\""), "{x}");
        assert!(x.contains("failures=\"2\""), "{x}");
        assert!(x.contains("value=\"golden|&lt;a&gt;.tps\""), "{x}");
        // The regression's markup and control character are escaped or replaced.
        assert!(x.contains("&lt;tag&gt; &amp; \u{FFFD}bell"), "{x}");
        assert!(!x.contains('\u{7}'), "{x}");
        assert!(!x.contains("<tag>"), "{x}");
    }

    #[test]
    fn no_color_wins_and_force_needs_a_value() {
        let s = |v: &str| Some(std::ffi::OsString::from(v));
        assert!(want_color(true, None, None));
        assert!(!want_color(false, None, None));
        assert!(!want_color(true, s("1"), None));
        // An empty NO_COLOR does not count (no-color.org).
        assert!(want_color(true, s(""), None));
        assert!(want_color(false, None, s("1")));
        assert!(!want_color(false, None, s("0")));
        assert!(!want_color(false, s("1"), s("1")));
    }
}
