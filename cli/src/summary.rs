//! The short summary `tpuscope run` prints for each trace it produced.

use std::path::Path;

#[cfg(test)]
use tpuscope_core::event::Direction;
use tpuscope_core::event::Record;
use tpuscope_core::{Completeness, ReadError, Trace};

use tpuscope_analyzers::digest::Digest;
use tpuscope_analyzers::present;

use crate::report_cmd::term::Style;
use crate::report_cmd::text;

/// Counts of what a trace holds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub compiles: u64,
    pub compile_errors: u64,
    pub loads: u64,
    pub executes: u64,
    pub h2d: u64,
    pub d2h: u64,
    pub cache_stores: u64,
    pub cache_loads: u64,
    pub cache_load_failures: u64,
    pub errors: u64,
    pub steps: u64,
    pub dropped: u64,
}

/// The counts of a trace decoded whole (what [`read_counted`] must agree with).
#[cfg(test)]
pub fn count(trace: &Trace) -> Counts {
    let mut c = Counts::default();
    for r in &trace.events {
        match r {
            Record::Compile(x) => {
                c.compiles += 1;
                c.compile_errors += u64::from(x.error.is_some());
            }
            Record::Load(_) => c.loads += 1,
            Record::Execute(_) => c.executes += 1,
            Record::ExecuteSummary(s) => c.executes += s.count,
            Record::Transfer(t) if t.direction == Direction::H2d as i32 => c.h2d += 1,
            Record::Transfer(_) => c.d2h += 1,
            Record::CacheStore(_) => c.cache_stores += 1,
            Record::CacheLoad(l) => {
                c.cache_loads += 1;
                c.cache_load_failures += u64::from(!l.ok);
            }
            Record::Error(_) => c.errors += 1,
            Record::Step(_) => c.steps += 1,
            Record::Dropped(d) => c.dropped = c.dropped.max(d.total),
            _ => {}
        }
    }
    c
}

impl Counts {
    /// The counts of a run, from its digest: every record they count is kept there whole, or
    /// counted (launches, transfers, step markers).
    pub fn of(d: &Digest) -> Counts {
        let mut c = Counts {
            executes: d.launches.len() as u64,
            h2d: d.transfers_h2d,
            d2h: d.transfers_d2h,
            steps: d.step_marks.iter().map(|(_, t)| t.len() as u64).sum(),
            ..Counts::default()
        };
        for (_, r) in d.others() {
            match r {
                Record::Compile(x) => {
                    c.compiles += 1;
                    c.compile_errors += u64::from(x.error.is_some());
                }
                Record::Load(_) => c.loads += 1,
                Record::ExecuteSummary(s) => c.executes += s.count,
                Record::CacheStore(_) => c.cache_stores += 1,
                Record::CacheLoad(l) => {
                    c.cache_loads += 1;
                    c.cache_load_failures += u64::from(!l.ok);
                }
                Record::Error(_) => c.errors += 1,
                Record::Dropped(d) => c.dropped = c.dropped.max(d.total),
                _ => {}
            }
        }
        c
    }
}

/// A trace file read as `report` reads it: on all cores, its events never held (a long run's
/// trace costs what its digest holds), through the cache of reads, so that a `report` or
/// `whatif` of a long run right after it reads the cache instead. The (first) run's tables,
/// the digest of its events and their counts.
pub fn read_counted(path: &Path) -> anyhow::Result<(Trace, Digest, Counts)> {
    let (traces, digests) = crate::report_cmd::read_digested(path)?;
    // A stream that read a header holds one run at least.
    let (Some(trace), Some(digest)) = (traces.into_iter().next(), digests.into_iter().next())
    else {
        return Err(crate::dump::read_error(path, ReadError::NotATrace));
    };
    let counts = Counts::of(&digest);
    Ok((trace, digest, counts))
}

/// A warning line about an incomplete trace, when it is one.
pub fn completeness_warning(path: &Path, trace: &Trace) -> Option<String> {
    match &trace.completeness {
        Completeness::Complete => None,
        Completeness::Cut { offset, file_len } => Some(format!(
            "warning: {} was cut at byte {offset} of {file_len} (the process died while writing); showing everything before it",
            path.display()
        )),
        Completeness::NoEndRecord { file_len } => Some(format!(
            "warning: {} has no end record after {file_len} bytes: the process died or is still running; showing everything it holds",
            path.display()
        )),
    }
}

/// What `tpuscope run` prints of a trace it produced: its counts, then what `report` would
/// say first.
pub fn print_trace_summary(path: &Path) {
    let (trace, digest, c) = match read_counted(path) {
        Ok(t) => t,
        Err(e) => {
            // The error line names the file.
            eprintln!("tpuscope: trace {e}");
            return;
        }
    };
    let platform = trace
        .client
        .as_ref()
        .map(|c| c.platform_name.as_str())
        .unwrap_or("?");
    eprintln!("tpuscope: trace {} ({platform})", path.display());
    eprintln!(
        "  compiles {} ({} failed), executes {}, transfers h2d {} / d2h {}",
        c.compiles, c.compile_errors, c.executes, c.h2d, c.d2h
    );
    eprintln!(
        "  cache stores {}, cache loads {} ({} failed), errors {}, dropped events {}",
        c.cache_stores, c.cache_loads, c.cache_load_failures, c.errors, c.dropped
    );
    eprint!("{}", findings_text(path, &trace, &digest));
}

/// What `tpuscope report` would say first, worded as it says it: its warnings (a cut trace,
/// recording stopped early…), where the time went, steps and phases, host syncs and the findings.
fn findings_text(path: &Path, trace: &Trace, digest: &Digest) -> String {
    use std::fmt::Write as _;
    let label = path.display().to_string();
    // dynamo's graph breaks and guard failures, when the run logged them (TORCH_TRACE).
    let logs = crate::torch_logs::find(None, Some(path), Some(trace), &label);
    let report = tpuscope_analyzers::report::build_one_digested(&label, trace, Some(digest), logs);
    let mut o = String::new();
    for w in &report.warnings {
        let _ = writeln!(o, "  warning: {w}");
    }
    // The steps the analyzers found (agent markers, else the loop's graph), not only markers;
    // the phases they give, and host syncs as the report counts them (the user's lines, not
    // every transfer marked sync): each section's heading line, as the report words it.
    let heading = |s: &present::Section| format!("  {}: {}", s.title.text, s.summary.text());
    let _ = writeln!(o, "{}", heading(&present::time(&report)));
    let _ = writeln!(o, "{}", heading(&present::steps(&report)));
    for l in tpuscope_analyzers::report::phases_lines(&report) {
        let _ = writeln!(o, "  {l}");
    }
    if let Some(l) = tpuscope_analyzers::report::setup_compile_line(&report) {
        let _ = writeln!(o, "  {l}");
    }
    let _ = writeln!(o, "{}", heading(&present::syncs(&report)));
    // Not wrapped: the run's own output around it is not either.
    let style = Style {
        color: false,
        width: usize::MAX,
    };
    let findings = text::section_text(&present::findings(&report), &style);
    for l in findings.lines() {
        let _ = writeln!(o, "  {l}");
    }
    let _ = writeln!(o, "  full report: tpuscope report {}", path.display());
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cut trace is said to be one in the report's words, and the verdict says it is partial.
    #[test]
    fn a_cut_trace_gets_the_reports_warning_and_partial_verdict() {
        let src =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/real/jax_aot_v5e.tps");
        let bytes = std::fs::read(&src).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cut = dir.path().join("cut.tps");
        std::fs::write(&cut, &bytes[..bytes.len() - 7]).unwrap();
        let (trace, digest, _) = read_counted(&cut).unwrap();
        let text = findings_text(&cut, &trace, &digest);
        assert!(text.contains(": trace cut at byte "), "{text}");
        assert!(
            text.contains("  No findings in what the trace holds"),
            "{text}"
        );
    }

    /// A run's dynamo logs sit next to its trace (`<trace>.torch_trace/`), as the sample does:
    /// the findings printed after the run include the graph break.
    #[test]
    fn findings_after_a_run_include_dynamo_graph_breaks_from_the_logs_next_to_the_trace() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/torch_trace");
        let path = root.join("graph_break_and_guard.tps");
        let (trace, digest, _) = read_counted(&path).unwrap();
        let text = findings_text(&path, &trace, &digest);
        assert!(text.contains(". graph_break at "), "{text}");

        // The same trace without its logs has no such finding.
        let dir = tempfile::tempdir().unwrap();
        let alone = dir.path().join("alone.tps");
        std::fs::copy(&path, &alone).unwrap();
        let mut trace = trace;
        if let Some(m) = trace.manifest.as_mut() {
            m.environment.retain(|kv| !kv.key.contains("TORCH_TRACE"));
        }
        let text = findings_text(&alone, &trace, &digest);
        assert!(!text.contains(". graph_break at "), "{text}");
    }
}

#[cfg(test)]
mod snapshot_tests;
