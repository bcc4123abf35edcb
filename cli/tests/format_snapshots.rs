//! Snapshots of every output format of the binary on the real traces in `sample_traces/`:
//! `report` as text, Markdown, JSON and JUnit (with budgets and a baseline), and `dump`. Any
//! change of wording in any view shows up as a snapshot diff (`cargo insta review`, or
//! `INSTA_UPDATE=always` and read the `.snap` files).
//!
//! The binary runs in `sample_traces/` on relative paths, so the output holds no path of this
//! machine; the one that still would (the temporary baseline file) is replaced by a placeholder. Every number in these views comes from the trace, none is measured at render time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The traces every report format is snapshotted on: every recording of a real workload (one of
/// them killed mid-run), the torch traces with their dynamo logs next to them
/// (`<name>.torch_trace/`), and a merged multi-host file.
const TRACES: &[&str] = &[
    "real/jax_aot_v5e.tps",
    "real/jax_attach.tps",
    "real/jax_killed.tps",
    "real/jax_lr.tps",
    "real/jax_shapes.tps",
    "real/torch_tpu_cache.tps",
    "real/torch_xla_item.tps",
    "torch_trace/graph_break_and_guard.tps",
    "torch_trace/torch_xla_openxla.tps",
    "golden/v1.1-merged.tps",
];

/// How many lines of a `dump` the snapshot keeps.
const DUMP_LINES: usize = 200;

fn samples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sample_traces")
        .canonicalize()
        .unwrap()
}

/// Runs `tpuscope ARGS` in `sample_traces/` with a fixed terminal width and no colour; returns
/// the exit status, stderr and stdout as one text, with `replace` applied.
fn run(args: &[&str], replace: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tpuscope"))
        .args(args)
        .current_dir(samples())
        .env("COLUMNS", "100")
        .env("NO_COLOR", "1")
        .env_remove("CLICOLOR_FORCE")
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    let text = format!(
        "$ tpuscope {}\nexit status: {code}\n--- stderr\n{}--- stdout\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    (code, redact(&text, replace))
}

/// `text` with each `(from, to)` of `replace` applied: the paths of this run's temporary files.
/// Nothing else is replaced: the traces were recorded in a checkout at `/work/main`, so their
/// own paths (commands, stacks, environment) are content, the same on every machine.
fn redact(text: &str, replace: &[(&str, &str)]) -> String {
    let mut text = text.to_string();
    for (from, to) in replace {
        text = text.replace(from, to);
    }
    text
}

/// `real/jax_lr.tps` → `real_jax_lr`.
fn snap_name(trace: &str) -> String {
    trace.trim_end_matches(".tps").replace(['/', '.', '-'], "_")
}

fn report_in(format: &str) {
    for trace in TRACES {
        let (code, text) = run(&["report", trace, "--format", format], &[]);
        assert_eq!(code, 0, "{text}");
        insta::assert_snapshot!(format!("report_{format}__{}", snap_name(trace)), text);
    }
}

#[test]
fn report_text() {
    report_in("text");
}

#[test]
fn report_markdown() {
    report_in("markdown");
}

#[test]
fn report_json() {
    report_in("json");
}

#[test]
fn report_junit() {
    report_in("junit");
}

/// One budget set that holds and one that fails, in every format (the budget section, the
/// failure line on stderr for machine formats, the JUnit testcases, the exit status).
#[test]
fn report_with_budgets() {
    let trace = "real/jax_lr.tps";
    let passing = [
        "--budget",
        "compiles=20",
        "--budget",
        "syncs-per-step=5",
        "--budget",
        "hbm-peak-fraction=0.9",
    ];
    let failing = [
        "--budget",
        "compiles=5",
        "--budget",
        "recompiles=0",
        "--budget",
        "syncs-per-step=5",
        "--budget",
        "cache-misses=0",
        "--budget",
        "graph-fragments-per-step=2",
    ];
    for (name, budgets, expect) in [("pass", &passing[..], 0), ("fail", &failing[..], 1)] {
        for format in ["text", "markdown", "json", "junit"] {
            let mut args = vec!["report", trace, "--format", format];
            args.extend_from_slice(budgets);
            let (code, text) = run(&args, &[]);
            assert_eq!(code, expect, "{text}");
            insta::assert_snapshot!(format!("report_budget_{name}_{format}"), text);
        }
    }
}

/// A report against the JSON report of another run of the same program (`jax_shapes` as the
/// baseline of `jax_lr`: different compiles, syncs and steps), in every format.
#[test]
fn report_with_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let baseline = dir.path().join("baseline.json");
    let out = Command::new(env!("CARGO_BIN_EXE_tpuscope"))
        .args(["report", "real/jax_shapes.tps", "--format", "json"])
        .current_dir(samples())
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(&baseline, &out.stdout).unwrap();
    let baseline = baseline.display().to_string();
    for format in ["text", "markdown", "json", "junit"] {
        let (code, text) = run(
            &[
                "report",
                "real/jax_lr.tps",
                "--format",
                format,
                "--baseline",
                &baseline,
            ],
            &[(&baseline, "[BASELINE]")],
        );
        assert!(code == 0 || code == 1, "{text}");
        insta::assert_snapshot!(format!("report_baseline_{format}"), text);
    }
}

/// `dump`, one line per record (the first [`DUMP_LINES`]), on a single-process trace and on a
/// merged file with records of unknown kinds; and `dump --json` once.
#[test]
fn dump() {
    for (trace, json) in [
        ("real/jax_lr.tps", false),
        ("torch_trace/graph_break_and_guard.tps", false),
        ("golden/v1.1-merged.tps", false),
        ("real/torch_xla_item.tps", true),
    ] {
        let mut args = vec!["dump"];
        if json {
            args.push("--json");
        }
        args.push(trace);
        let (code, text) = run(&args, &[]);
        assert_eq!(code, 0, "{text}");
        let (head, body) = text.split_once("--- stdout\n").unwrap();
        let lines: Vec<&str> = body.lines().collect();
        let kept = lines.len().min(DUMP_LINES);
        let text = format!(
            "{head}--- stdout ({kept} of {} lines)\n{}\n",
            lines.len(),
            lines[..kept].join("\n")
        );
        let name = if json { "dump_json" } else { "dump" };
        insta::assert_snapshot!(format!("{name}__{}", snap_name(trace)), text);
    }
}
