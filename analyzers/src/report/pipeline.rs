//! The one way from traces to a report: analyse, join dynamo's logs, evaluate budgets, compare
//! with a baseline. Every command and view calls [`build`], so a trace gives the same report in
//! `report`, the run summary, the live view, `attach`, `/metrics` and the GUI.

use super::*;
use crate::torch_trace::{self, TorchLogs};

/// What a report may be built with besides the traces.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// dynamo's logs of the inputs (found by the caller: reading them is I/O).
    pub torch_logs: Vec<TorchLogs>,
    pub budgets: Vec<Budget>,
    /// An earlier `report --format json`.
    pub baseline: Option<serde_json::Value>,
    /// Threads the runs (a job's hosts) may be analysed on; 0 and 1 mean this one.
    pub threads: usize,
}

/// Analyses `inputs` and completes the report with `options`.
pub fn build(inputs: &[Input<'_>], options: &Options) -> Report {
    let digests = Digests::of(inputs);
    let report = analyze_digested(inputs, &digests, options.threads);
    complete(report, inputs, &digests, options)
}

/// [`build`] of runs whose own analyses were made as each was read ([`AnalysedRun`], in
/// run order: a merged job file's hosts as it holds them). The same report as [`build`] of the
/// same traces and digests, holding each run's summaries instead of its digest. `None` when
/// the `k`-th run was not analysed as run `k`, or the report orders the runs otherwise (hosts
/// not in order of process index, runs of no one job): then only [`build`] can make it.
pub fn build_analysed(runs: Vec<AnalysedRun>, options: &Options) -> Option<Report> {
    let (held, parts) = super::analysis::take_apart(runs)?;
    let inputs: Vec<Input<'_>> = held
        .iter()
        .map(|(path, trace, digest)| Input {
            digest: Some(digest),
            ..Input::new(path.clone(), trace)
        })
        .collect();
    let digests = Digests::of(&inputs);
    let report = super::analysis::analyze_analysed(&inputs, &digests, parts)?;
    Some(complete(report, &inputs, &digests, options))
}

/// The report completed with `options`: dynamo's logs joined, budgets, the baseline.
fn complete(
    mut report: Report,
    inputs: &[Input<'_>],
    digests: &Digests<'_>,
    options: &Options,
) -> Report {
    if !options.torch_logs.is_empty() {
        torch_trace::attach_digested(&mut report, inputs, digests, &options.torch_logs);
    }
    apply_budgets(&mut report, &options.budgets);
    if let Some(b) = &options.baseline {
        compare_baseline(&mut report, b);
    }
    report
}

/// [`build`] for one trace decoded whole, with the dynamo logs found for it.
pub fn build_one(
    label: &str,
    trace: &tpuscope_core::Trace,
    torch_logs: Option<TorchLogs>,
) -> Report {
    build_one_digested(label, trace, None, torch_logs)
}

/// [`build`] for one run (a file, or a live stream so far) with the dynamo logs found for it:
/// its trace's tables and the digest of its events made as it streamed by (`None`: made here
/// from the trace's events). The case of the run summary, the live view, `attach` and
/// `/metrics`.
pub fn build_one_digested(
    label: &str,
    trace: &tpuscope_core::Trace,
    digest: Option<&crate::digest::Digest>,
    torch_logs: Option<TorchLogs>,
) -> Report {
    build(
        &[Input {
            digest,
            ..Input::new(label, trace)
        }],
        &Options {
            torch_logs: torch_logs.into_iter().collect(),
            ..Options::default()
        },
    )
}
