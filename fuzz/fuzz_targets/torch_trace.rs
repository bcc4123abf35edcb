//! The TORCH_TRACE parser (`analyzers::torch_trace::parse`) and the join of what it parsed to a
//! real PJRT trace (`torch_trace::attach`), on arbitrary text.
//!
//! Input: the log files' text, files separated by NUL bytes (invalid UTF-8 replaced, as a lossy
//! read would). The logs are attached to both traces of `sample_traces/torch_trace/`, whose
//! processes the seed logs come from, so the join runs on real compiles.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tpuscope_analyzers::report::{self, Input, Report};
use tpuscope_analyzers::torch_trace::{self, TorchLogs};
use tpuscope_core::{Trace, read_trace};

const TRACES: &[(&str, &[u8])] = &[
    (
        "graph_break_and_guard.tps",
        include_bytes!("../../sample_traces/torch_trace/graph_break_and_guard.tps"),
    ),
    (
        "torch_xla_openxla.tps",
        include_bytes!("../../sample_traces/torch_trace/torch_xla_openxla.tps"),
    ),
];

fn base() -> &'static (Vec<Trace>, Report) {
    static B: OnceLock<(Vec<Trace>, Report)> = OnceLock::new();
    B.get_or_init(|| {
        let traces: Vec<Trace> = TRACES
            .iter()
            .map(|(name, b)| read_trace(b).unwrap_or_else(|e| panic!("{name}: {e}")))
            .collect();
        let inputs: Vec<Input<'_>> = TRACES
            .iter()
            .zip(&traces)
            .map(|((name, _), trace)| Input::new(name.to_string(), trace))
            .collect();
        let report = report::analyze(&inputs);
        (traces, report)
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let files: Vec<&str> = text.split('\0').collect();

    let parsed = torch_trace::parse(files.iter().copied());
    let again = torch_trace::parse(files.iter().copied());
    assert_eq!(
        format!("{parsed:?}"),
        format!("{again:?}"),
        "parse is not deterministic"
    );
    // Every line is at most one entry's header or one skipped line.
    let lines: u64 = files.iter().map(|f| f.split('\n').count() as u64).sum();
    let entries: u64 = parsed.processes.values().map(|p| p.entries).sum();
    assert!(
        entries + parsed.skipped_lines <= lines,
        "{entries} entries + {} skipped lines from {lines} lines",
        parsed.skipped_lines
    );
    for p in parsed.processes.values() {
        for f in p.frames.values() {
            if let Some((a, b)) = f.span_us() {
                let _ = (a, b);
            }
            let _ = f.code();
            let _ = f.called_at();
        }
    }

    let (traces, report) = base();
    let inputs: Vec<Input<'_>> = TRACES
        .iter()
        .zip(traces)
        .map(|((name, _), trace)| Input::new(name.to_string(), trace))
        .collect();
    let logs: Vec<TorchLogs> = TRACES
        .iter()
        .map(|(name, _)| TorchLogs {
            trace_path: name.to_string(),
            dir: format!("{name}.torch_trace"),
            files: files
                .iter()
                .enumerate()
                .map(|(i, t)| (format!("log{i}.log"), t.to_string()))
                .collect(),
            note: None,
        })
        .collect();
    let mut r = report.clone();
    torch_trace::attach(&mut r, &inputs, &logs);
    // What the CLI renders, and what `--baseline` reads back.
    let json = serde_json::to_string(&r).unwrap_or_else(|e| panic!("report to JSON: {e}"));
    if let Err(e) = serde_json::from_str::<Report>(&json) {
        panic!("the report's JSON does not read back: {e}");
    }
    if let Some(d) = &r.dynamo {
        assert!(!d.headline().is_empty());
        assert_eq!(d.logs.len(), TRACES.len(), "one logs entry per trace");
    }
});
