//! `tpuscope report`: the analyzers' findings over one or several traces, for a human or for CI.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use tpuscope_analyzers::report::{self, Budget, Input, Report};

use crate::summary::completeness_warning;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Json,
    Markdown,
    Junit,
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Traces: one run, successive runs of one program, or the hosts of one job.
    #[arg(required = true)]
    pub traces: Vec<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// A CI budget, KEY=N (compiles, recompiles, syncs-per-step, graph-fragments-per-step,
    /// cache-misses, hbm-peak-fraction); exit 1 when exceeded.
    #[arg(long = "budget", value_name = "KEY=N")]
    pub budgets: Vec<Budget>,
    /// An earlier `report --format json`: exit 1 on regressions against it.
    #[arg(long, value_name = "OLD.json")]
    pub baseline: Option<PathBuf>,
}

/// Builds the report; returns the exit status (1 when a budget or the baseline failed).
pub fn report(args: &ReportArgs) -> Result<i32> {
    let mut traces = Vec::new();
    for p in &args.traces {
        let t = tpuscope_core::read_trace_file(p).with_context(|| format!("{}", p.display()))?;
        if let Some(w) = completeness_warning(p, &t) {
            eprintln!("tpuscope: {w}");
        }
        traces.push((p.display().to_string(), t));
    }
    let baseline = match &args.baseline {
        Some(p) => Some(read_baseline(p)?),
        None => None,
    };
    let inputs: Vec<Input<'_>> = traces
        .iter()
        .map(|(path, trace)| Input {
            path: path.clone(),
            trace,
        })
        .collect();
    let mut rep = report::analyze(&inputs);
    report::apply_budgets(&mut rep, &args.budgets);
    if let Some(b) = &baseline {
        report::compare_baseline(&mut rep, b);
    }
    let text = match args.format {
        Format::Json => serde_json::to_string_pretty(&rep).context("serializing the report")?,
        Format::Text | Format::Markdown | Format::Junit => render_text(&rep),
    };
    println!("{text}");
    Ok(i32::from(report::failed(&rep)))
}

fn read_baseline(path: &Path) -> Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("baseline {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("baseline {} is not JSON", path.display()))?;
    if v.get("tpuscope_report").is_none() {
        bail!(
            "baseline {} is not a tpuscope JSON report (make one with `tpuscope report --format json`)",
            path.display()
        );
    }
    Ok(v)
}

fn render_text(r: &Report) -> String {
    let mut out = String::new();
    for f in &r.findings {
        out.push_str(&format!(
            "[{}] {}\n    fix: {}\n",
            f.kind, f.title, f.suggestion
        ));
    }
    out
}
