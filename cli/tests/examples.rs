//! The example workloads (examples/) run for real under `tpuscope run` on the CPU stand-in, each
//! with its expected diagnosis: `tpuscope report --format json` must name the right cause, count
//! and file:line, stay quiet on the clean loops, and budgets must set the exit status.
//!
//! Expected lines come from the marker comments in the scripts (examples/README.md), counts from
//! the scripts' constants or their `RESULT` line, so editing an example does not silently break
//! (or silently pass) these tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{collector, repo_root, show, tpuscope, traces_in, venv_python};
use tpuscope_analyzers::SourceLoc;
use tpuscope_analyzers::report::{FamilyReport, Report};

/// One example script.
struct Example {
    env: &'static str,
    /// Path under examples/, e.g. `jax/lr_python_float.py`.
    script: &'static str,
}

impl Example {
    const fn new(env: &'static str, script: &'static str) -> Example {
        Example { env, script }
    }

    fn path(&self) -> PathBuf {
        repo_root().join("examples").join(self.script)
    }

    fn text(&self) -> String {
        std::fs::read_to_string(self.path())
            .unwrap_or_else(|e| panic!("{}: {e}", self.path().display()))
    }

    /// The suffix every source location in this script must end with.
    fn suffix(&self) -> String {
        format!("examples/{}", self.script)
    }

    /// The 1-based line of the single comment `# <kind>: <cause>` (kind `tpuscope`,
    /// `tpuscope-trigger` or `tpuscope-not`).
    fn marker(&self, kind: &str, cause: &str) -> u32 {
        let needle = format!("# {kind}: {cause}");
        let lines: Vec<u32> = self
            .text()
            .lines()
            .enumerate()
            .filter(|(_, l)| l.contains(&needle))
            .map(|(i, _)| i as u32 + 1)
            .collect();
        assert_eq!(
            lines.len(),
            1,
            "{}: expected exactly one `{needle}` marker, found lines {lines:?}",
            self.script
        );
        lines[0]
    }

    /// Lines marked `# tpuscope-not:`: no finding may point there.
    fn not_lines(&self) -> Vec<u32> {
        self.text()
            .lines()
            .enumerate()
            .filter(|(_, l)| l.contains("# tpuscope-not:"))
            .map(|(i, _)| i as u32 + 1)
            .collect()
    }

    /// A module-level constant `NAME = value` of the script, as text.
    fn constant(&self, name: &str) -> String {
        let prefix = format!("{name} = ");
        self.text()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("{}: no constant {name}", self.script))
    }
}

/// A finished `tpuscope run` of an example.
struct Run {
    out: Output,
    trace: PathBuf,
    /// The `key=value` fields of the workload's `RESULT` line.
    result: BTreeMap<String, String>,
}

impl Run {
    fn field(&self, key: &str) -> &str {
        self.result
            .get(key)
            .unwrap_or_else(|| panic!("RESULT has no {key}: {:?}", self.result))
    }

    fn num(&self, key: &str) -> u64 {
        self.field(key)
            .parse()
            .unwrap_or_else(|e| panic!("RESULT {key}={}: {e}", self.field(key)))
    }

    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
}

/// Variables that change what an example does: unset unless a test sets them, so the
/// environment the tests run in cannot change the diagnosis.
const EXAMPLE_ENV: &[&str] = &[
    "XLA_HLO_DEBUG",
    "TORCHINDUCTOR_CACHE_DIR",
    "TPUSCOPE_EXAMPLE_CACHE_DIR",
    "TPUSCOPE_EXAMPLE_CAPTURABLE",
    // Where dynamo's logs go, and whether `tpuscope run` turns them on (the tests say).
    "TORCH_TRACE",
    "TPUSCOPE_TORCH_TRACE",
    "XLA_IR_DEBUG",
    "TPUSCOPE_XLA_DEBUG_ON_RECOMPILE",
];

/// Runs an example under `tpuscope run --no-tui --quiet`; asserts it exited 0, printed one
/// `RESULT` line and left exactly one trace in `out_dir` (which must start empty).
fn run_example(ex: &Example, args: &[&str], env: &[(&str, &str)], out_dir: &Path) -> Run {
    std::fs::create_dir_all(out_dir).unwrap();
    let py = venv_python(ex.env);
    let mut c = Command::new(tpuscope());
    c.args(["run", "--no-tui", "--quiet", "--out"])
        .arg(out_dir)
        .arg("--")
        .arg(&py)
        .arg(ex.path())
        .args(args)
        .current_dir(repo_root())
        // The newest collector build, wherever cargo put it (target/<profile> or its deps/).
        .env("TPUSCOPE_COLLECTOR", collector());
    for k in EXAMPLE_ENV {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{} failed:\n{}",
        ex.script,
        show(&out)
    );
    let results: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("RESULT "))
        .map(String::from)
        .collect();
    assert_eq!(
        results.len(),
        1,
        "{}: no RESULT line:\n{}",
        ex.script,
        show(&out)
    );
    let result = results[0]
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let traces = traces_in(out_dir);
    assert_eq!(
        traces.len(),
        1,
        "{}: traces {traces:?}\n{}",
        ex.script,
        show(&out)
    );
    Run {
        out,
        trace: traces[0].clone(),
        result,
    }
}

/// `tpuscope report --format json` with budgets: the report and the exit status.
fn report_with(traces: &[&Path], budgets: &[&str]) -> (Report, i32) {
    let mut c = Command::new(tpuscope());
    c.args(["report", "--format", "json"]).args(traces);
    for b in budgets {
        c.arg("--budget").arg(b);
    }
    let out = c.output().unwrap();
    let code = out
        .status
        .code()
        .unwrap_or_else(|| panic!("{}", show(&out)));
    assert!(code == 0 || code == 1, "report failed:\n{}", show(&out));
    let report: Report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("report is not a JSON Report ({e}):\n{}", show(&out)));
    // The exit status and the budgets in the JSON tell the same story.
    assert_eq!(report.budgets.len(), budgets.len());
    assert_eq!(
        code == 1,
        report.budgets.iter().any(|b| !b.ok),
        "{:?}",
        report.budgets
    );
    (report, code)
}

fn report(traces: &[&Path]) -> Report {
    let (r, code) = report_with(traces, &[]);
    assert_eq!(code, 0, "no budget: nothing can fail");
    r
}

/// The report as text, for assertion messages.
fn dump(r: &Report) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "compiles": r.compiles,
        "recompiles": r.recompiles.iter().map(|f| serde_json::json!({
            "graph": f.graph, "count": f.count, "cause": f.cause.as_str(), "source": f.source,
            "finding": f.finding, "details": f.details, "suggestion": f.suggestion,
        })).collect::<Vec<_>>(),
        "syncs": r.syncs,
        "findings": r.findings,
        "cache": r.cache,
        "steps": r.steps.count,
    }))
    .unwrap()
}

/// Recompile families reported as findings.
fn finding_families(r: &Report) -> Vec<&FamilyReport> {
    r.recompiles.iter().filter(|f| f.finding).collect()
}

/// Asserts `loc` is `line` of the example's file.
fn assert_at(what: &str, loc: Option<&SourceLoc>, ex: &Example, line: u32, r: &Report) {
    let loc = loc.unwrap_or_else(|| panic!("{what}: no source\n{}", dump(r)));
    assert!(
        loc.file.ends_with(&ex.suffix()) && loc.line == line,
        "{what}: at {}:{}, expected {}:{line}\n{}",
        loc.file,
        loc.line,
        ex.suffix(),
        dump(r)
    );
}

/// No finding (and no recompile family reported as one) points at a `# tpuscope-not:` line.
fn assert_no_finding_at_not_lines(r: &Report, ex: &Example) {
    let not = ex.not_lines();
    let suffix = ex.suffix();
    let sources = r.findings.iter().filter_map(|f| f.source.as_ref()).chain(
        finding_families(r)
            .into_iter()
            .filter_map(|f| f.source.as_ref()),
    );
    for s in sources {
        assert!(
            !(s.file.ends_with(&suffix) && not.contains(&s.line)),
            "a finding points at {}:{}, marked `tpuscope-not`\n{}",
            s.file,
            s.line,
            dump(r)
        );
    }
}

/// Asserts `needles` occur in `hay` in this order.
fn assert_in_order(hay: &str, needles: &[String]) {
    let mut at = 0;
    for n in needles {
        match hay[at..].find(n.as_str()) {
            Some(i) => at += i + n.len(),
            None => panic!("{n:?} missing (in order {needles:?}) from {hay:?}"),
        }
    }
}

/// The single recompile finding of the report: its family, which must be the only one.
fn only_finding_family<'a>(r: &'a Report, graph_prefix: &str) -> &'a FamilyReport {
    let fams = finding_families(r);
    assert_eq!(fams.len(), 1, "expected one recompile finding\n{}", dump(r));
    assert!(
        fams[0].graph.starts_with(graph_prefix),
        "graph {} is not {graph_prefix}*",
        fams[0].graph
    );
    let recompile_findings = r
        .findings
        .iter()
        .filter(|f| f.kind == tpuscope_analyzers::report::FindingKind::Recompile)
        .count();
    assert_eq!(recompile_findings, 1, "{}", dump(r));
    fams[0]
}

/// A clean loop: no finding, no recompile, and the strictest budgets hold.
fn assert_clean(ex: &Example, run: &Run) {
    let (r, code) = report_with(&[&run.trace], &["recompiles=0", "syncs-per-step=0"]);
    assert!(r.findings.is_empty(), "{}", dump(&r));
    assert!(finding_families(&r).is_empty(), "{}", dump(&r));
    assert_eq!(r.compiles.recompiles, 0, "{}", dump(&r));
    assert!(r.compiles.total > 0, "nothing compiled?\n{}", dump(&r));
    assert!(r.steps.count > 0, "no steps detected\n{}", dump(&r));
    assert_eq!(code, 0, "budgets {:?}", r.budgets);
    assert_no_finding_at_not_lines(&r, ex);
}

const LR_PYTHON_FLOAT: Example = Example::new("jax", "jax/lr_python_float.py");
const VARIABLE_BATCHES: Example = Example::new("jax", "jax/variable_batches.py");
const FLOAT_LOSS: Example = Example::new("jax", "jax/float_loss_in_loop.py");
const JAX_CLEAN: Example = Example::new("jax", "jax/clean_loop.py");
const STEP_INDEX_SLICE: Example = Example::new("torch_xla", "torch_xla/step_index_slice.py");
const BRANCH_ON_LOSS: Example = Example::new("torch_xla", "torch_xla/branch_on_loss.py");
const PERSISTENT_CACHE: Example = Example::new("torch_xla", "torch_xla/persistent_cache.py");
const ADAMW: Example = Example::new("torch_xla", "torch_xla/adamw_lr_scheduler.py");
const XLA_CLEAN: Example = Example::new("torch_xla", "torch_xla/clean_loop.py");
const VARIABLE_SEQ: Example = Example::new("torch_tpu", "torch_tpu/compile_variable_seq.py");
const TPU_CLEAN: Example = Example::new("torch_tpu", "torch_tpu/clean_loop.py");
const GRAPH_BREAK_AND_GUARD: Example =
    Example::new("torch_tpu", "torch_tpu/graph_break_and_guard.py");

#[test]
fn jax_lr_python_float_is_a_constant_change_at_the_lr_line() {
    let ex = &LR_PYTHON_FLOAT;
    let dir = tempfile::tempdir().unwrap();
    let run = run_example(ex, &[], &[], dir.path());
    let epochs = run.num("epochs");
    let r = report(&[&run.trace]);

    let fam = only_finding_family(&r, "jit_train_step");
    assert_eq!(fam.graph, "jit_train_step");
    assert_eq!(fam.cause.as_str(), "constant_changed", "{}", dump(&r));
    // One compile per epoch: the step is rebuilt with a new rate each time.
    assert_eq!(fam.count, epochs, "{}", dump(&r));
    assert_at(
        "family",
        fam.source.as_ref(),
        ex,
        ex.marker("tpuscope", "constant_changed"),
        &r,
    );
    // The rates, as the f32 constants baked into each compile (shortest f32 repr), in order.
    let base: f64 = ex.constant("BASE_LR").parse().unwrap();
    let decay: f64 = ex.constant("DECAY").parse().unwrap();
    let rates: Vec<String> = (0..epochs)
        .scan(base, |lr, _| {
            let v = *lr;
            *lr *= decay;
            Some((v as f32).to_string())
        })
        .collect();
    assert_in_order(&fam.details, &rates);

    assert_eq!(r.findings.len(), 1, "no other finding\n{}", dump(&r));
    assert_eq!(r.compiles.recompiles, epochs - 1, "{}", dump(&r));
    assert_no_finding_at_not_lines(&r, ex);

    // Budgets: exceeded at 0, held at exactly the recompile count.
    let (_, code) = report_with(&[&run.trace], &["recompiles=0"]);
    assert_eq!(code, 1);
    let limit = format!("recompiles={}", epochs - 1);
    let (_, code) = report_with(&[&run.trace], &[&limit]);
    assert_eq!(code, 0);
}

#[test]
fn jax_variable_batches_is_a_shape_change_at_the_call() {
    let ex = &VARIABLE_BATCHES;
    let dir = tempfile::tempdir().unwrap();
    let run = run_example(ex, &[], &[], dir.path());
    let shapes = run.num("shapes");
    // The distinct batch sizes the loader produced, from the workload's own output.
    let stdout = run.stdout();
    let sizes: std::collections::BTreeSet<u64> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("batch sizes: "))
        .expect("no `batch sizes:` line")
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    assert_eq!(sizes.len() as u64, shapes);
    let r = report(&[&run.trace]);

    let fam = only_finding_family(&r, "jit_train_step");
    assert_eq!(fam.graph, "jit_train_step");
    assert_eq!(fam.cause.as_str(), "shape_changed", "{}", dump(&r));
    assert_eq!(
        fam.count,
        shapes,
        "one compile per batch size\n{}",
        dump(&r)
    );
    assert_at(
        "family",
        fam.source.as_ref(),
        ex,
        ex.marker("tpuscope-trigger", "shape_changed"),
        &r,
    );
    for s in &sizes {
        assert!(
            fam.details.contains(&s.to_string()),
            "size {s} not in details: {}",
            fam.details
        );
    }
    assert!(
        fam.suggestion.to_lowercase().contains("pad"),
        "suggestion does not mention padding: {}",
        fam.suggestion
    );
    assert_eq!(r.findings.len(), 1, "{}", dump(&r));
    assert_no_finding_at_not_lines(&r, ex);
}

#[test]
fn jax_float_loss_in_loop_is_one_host_sync_per_step_at_the_float_line() {
    let ex = &FLOAT_LOSS;
    let dir = tempfile::tempdir().unwrap();
    let run = run_example(ex, &[], &[], dir.path());
    let steps = run.num("steps");
    let r = report(&[&run.trace]);

    let line = ex.marker("tpuscope", "host_sync");
    let at_line: Vec<_> = r
        .syncs
        .iter()
        .filter(|s| {
            s.source
                .as_ref()
                .is_some_and(|l| l.file.ends_with(&ex.suffix()) && l.line == line)
        })
        .collect();
    assert_eq!(at_line.len(), 1, "{}", dump(&r));
    assert_eq!(at_line[0].count, steps, "{}", dump(&r));
    assert_eq!(at_line[0].what, vec!["f32[]".to_string()], "{}", dump(&r));

    assert_eq!(r.findings.len(), 1, "only the sync\n{}", dump(&r));
    assert_eq!(
        r.findings[0].kind,
        tpuscope_analyzers::report::FindingKind::Sync
    );
    assert_at("finding", r.findings[0].source.as_ref(), ex, line, &r);
    assert!(finding_families(&r).is_empty(), "{}", dump(&r));
    assert_eq!(r.compiles.recompiles, 0, "{}", dump(&r));
    assert_eq!(r.steps.syncs_per_step, 1, "{}", dump(&r));
    assert_no_finding_at_not_lines(&r, ex);

    let (_, code) = report_with(&[&run.trace], &["syncs-per-step=0"]);
    assert_eq!(code, 1);
    let (_, code) = report_with(&[&run.trace], &["syncs-per-step=1"]);
    assert_eq!(code, 0);
}

#[test]
fn jax_clean_loop_has_no_finding() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_example(&JAX_CLEAN, &[], &[], dir.path());
    assert_clean(&JAX_CLEAN, &run);
}

#[test]
fn torch_xla_step_index_slice_is_a_constant_change_at_the_slice_line() {
    let ex = &STEP_INDEX_SLICE;
    let dir = tempfile::tempdir().unwrap();
    let check = |run: &Run, line: u32| {
        let steps = run.num("steps");
        let r = report(&[&run.trace]);
        let fam = only_finding_family(&r, "SyncTensorsGraph");
        assert_eq!(fam.cause.as_str(), "constant_changed", "{}", dump(&r));
        // One compile per loop step, all in one family: every step's graph is the same but for
        // the slice offset, except the first step's, which also differs in structure (warm-up)
        // yet is the same graph. The setup graph before the loop is another family.
        assert_eq!(fam.count, steps, "{}", dump(&r));
        assert_eq!(r.compiles.recompiles, steps - 1, "{}", dump(&r));
        assert_at("family", fam.source.as_ref(), ex, line, &r);
        assert!(
            fam.details.contains("slice bounds"),
            "details: {}",
            fam.details
        );
        // The last step's slice, as its bounds.
        let last = format!("[{}:{}", steps - 1, steps);
        assert!(fam.details.contains(&last), "{last} not in {}", fam.details);
        assert_eq!(r.findings.len(), 1, "{}", dump(&r));
        assert_no_finding_at_not_lines(&r, ex);
    };
    // Without XLA_HLO_DEBUG the agent switches torch_xla's IR debug on once the graph keeps
    // compiling after warm-up: the later members' HLO names the slice line.
    let plain = run_example(ex, &[], &[], &dir.path().join("plain"));
    check(&plain, ex.marker("tpuscope", "constant_changed"));
    // Opted out, the HLO keeps no source: the family points at the line that asked for the
    // compile.
    let opted_out = run_example(
        ex,
        &[],
        &[("TPUSCOPE_XLA_DEBUG_ON_RECOMPILE", "0")],
        &dir.path().join("opted_out"),
    );
    check(
        &opted_out,
        ex.marker("tpuscope-trigger", "constant_changed"),
    );
    // With it, the changed slice's metadata names the slice line.
    let debug = run_example(
        ex,
        &[],
        &[("XLA_HLO_DEBUG", "1")],
        &dir.path().join("debug"),
    );
    check(&debug, ex.marker("tpuscope", "constant_changed"));
}

#[test]
fn torch_xla_branch_on_loss_is_a_sync_at_the_if_and_two_graph_variants() {
    let ex = &BRANCH_ON_LOSS;
    let dir = tempfile::tempdir().unwrap();
    let run = run_example(ex, &[], &[], dir.path());
    let steps = run.num("steps");
    let damped = run.num("damped");
    // Both branches must have been taken for two variants to exist.
    assert!(damped > 0 && damped < steps, "damped={damped} of {steps}");
    let r = report(&[&run.trace]);

    let if_line = ex.marker("tpuscope", "host_sync");
    let sync = r
        .syncs
        .iter()
        .find(|s| {
            s.source
                .as_ref()
                .is_some_and(|l| l.file.ends_with(&ex.suffix()) && l.line == if_line)
        })
        .unwrap_or_else(|| panic!("no sync at the `if` line {if_line}\n{}", dump(&r)));
    assert_eq!(sync.count, steps, "{}", dump(&r));
    assert_eq!(sync.what, vec!["pred[]".to_string()], "{}", dump(&r));
    let sync_findings: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.kind == tpuscope_analyzers::report::FindingKind::Sync)
        .collect();
    assert_eq!(sync_findings.len(), 1, "{}", dump(&r));
    assert_at(
        "sync finding",
        sync_findings[0].source.as_ref(),
        ex,
        if_line,
        &r,
    );

    // Two variants of the step graph; without XLA_HLO_DEBUG the HLO has no source, so the family
    // points at the line that asked for the compile.
    let fam = only_finding_family(&r, "SyncTensorsGraph");
    assert_eq!(fam.cause.as_str(), "structure_changed", "{}", dump(&r));
    assert_eq!(fam.count, 2, "{}", dump(&r));
    assert_at(
        "family",
        fam.source.as_ref(),
        ex,
        ex.marker("tpuscope-trigger", "branch_variant"),
        &r,
    );
    assert_eq!(r.findings.len(), 2, "{}", dump(&r));
    assert_no_finding_at_not_lines(&r, ex);

    // With XLA_HLO_DEBUG=1 the ops carry their Python lines: the family points at the branch
    // whose ops come and go, not at the sync that cut the graph.
    let debug_dir = dir.path().join("hlo_debug");
    let run = run_example(ex, &[], &[("XLA_HLO_DEBUG", "1")], &debug_dir);
    let r = report(&[&run.trace]);
    let fam = only_finding_family(&r, "SyncTensorsGraph");
    assert_eq!(fam.cause.as_str(), "structure_changed", "{}", dump(&r));
    assert_at(
        "family with XLA_HLO_DEBUG",
        fam.source.as_ref(),
        ex,
        ex.marker("tpuscope", "branch_variant"),
        &r,
    );
    assert_no_finding_at_not_lines(&r, ex);
}

#[test]
fn torch_xla_persistent_cache_written_but_never_read_back() {
    let ex = &PERSISTENT_CACHE;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("xla-cache");
    let cache_arg = cache.to_str().unwrap();
    let run1 = run_example(ex, &[cache_arg], &[], &dir.path().join("run1"));
    let run2 = run_example(ex, &[cache_arg], &[], &dir.path().join("run2"));
    // Run 1 started empty and filled the cache; run 2 found it filled.
    assert_eq!(run1.num("entries_before"), 0);
    assert!(run1.num("entries_after") > 0, "{:?}", run1.result);
    assert!(run2.num("entries_before") > 0, "{:?}", run2.result);

    let both = report(&[&run1.trace, &run2.trace]);
    assert!(both.cache.persistent_stores > 0, "{}", dump(&both));
    assert!(
        !both.cache.stored_but_recompiled.is_empty(),
        "{}",
        dump(&both)
    );
    assert!(both.cache.recompiled_same_program >= 1, "{}", dump(&both));
    let cache_findings: Vec<_> = both
        .findings
        .iter()
        .filter(|f| f.kind == tpuscope_analyzers::report::FindingKind::Cache)
        .collect();
    assert_eq!(cache_findings.len(), 1, "{}", dump(&both));
    for s in &both.cache.stored_but_recompiled {
        assert!(
            cache_findings[0].title.contains(&s.graph),
            "{} not named in {}",
            s.graph,
            cache_findings[0].title
        );
    }
    assert_no_finding_at_not_lines(&both, ex);

    // Alone, neither run says anything about the cache: there is no earlier run to miss.
    for run in [&run1, &run2] {
        let r = report(&[&run.trace]);
        assert!(
            r.findings
                .iter()
                .all(|f| f.kind != tpuscope_analyzers::report::FindingKind::Cache),
            "{}",
            dump(&r)
        );
        assert!(r.cache.stored_but_recompiled.is_empty(), "{}", dump(&r));
    }
}

#[test]
fn torch_xla_adamw_lr_scheduler_has_no_finding_with_either_capturable() {
    let ex = &ADAMW;
    let dir = tempfile::tempdir().unwrap();
    for (name, args) in [("plain", &[][..]), ("capturable", &["--capturable"][..])] {
        let run = run_example(ex, args, &[], &dir.path().join(name));
        assert_eq!(
            run.field("capturable"),
            if name == "capturable" {
                "True"
            } else {
                "False"
            }
        );
        // The scheduler did change the rate: the quiet report is not for lack of a change.
        assert!(run.num("distinct_lrs") > 1, "{:?}", run.result);
        let r = report(&[&run.trace]);
        assert!(r.findings.is_empty(), "{name}\n{}", dump(&r));
        assert_eq!(r.compiles.recompiles, 0, "{name}\n{}", dump(&r));
        assert_no_finding_at_not_lines(&r, ex);
    }
}

#[test]
fn torch_xla_clean_loop_has_no_finding() {
    let dir = tempfile::tempdir().unwrap();
    let run = run_example(&XLA_CLEAN, &[], &[], dir.path());
    assert_clean(&XLA_CLEAN, &run);
}

#[test]
fn torch_tpu_compile_variable_seq_is_a_shape_change_cold_and_a_cache_hit_warm() {
    let ex = &VARIABLE_SEQ;
    let dir = tempfile::tempdir().unwrap();
    // Inductor's FX graph cache would otherwise make this a warm run (examples/README.md).
    let inductor = dir.path().join("inductor");
    let env = [("TORCHINDUCTOR_CACHE_DIR", inductor.to_str().unwrap())];
    let cold = run_example(ex, &[], &env, &dir.path().join("cold"));
    let lengths = cold.num("lengths");
    let r = report(&[&cold.trace]);

    let fam = only_finding_family(&r, "");
    // TorchTPU names the program after the compiled module and its forward.
    assert!(fam.graph.contains("forward"), "{}", fam.graph);
    assert_eq!(fam.cause.as_str(), "shape_changed", "{}", dump(&r));
    assert_eq!(fam.count, lengths, "one compile per length\n{}", dump(&r));
    assert_at(
        "family",
        fam.source.as_ref(),
        ex,
        ex.marker("tpuscope-trigger", "shape_changed"),
        &r,
    );
    let seq_lens = ex.constant("SEQ_LENS");
    let distinct: std::collections::BTreeSet<u64> = seq_lens
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    assert_eq!(distinct.len() as u64, lengths);
    for l in &distinct {
        assert!(
            fam.details.contains(&l.to_string()),
            "length {l} not in {}",
            fam.details
        );
    }
    assert_eq!(r.findings.len(), 1, "{}", dump(&r));
    assert_no_finding_at_not_lines(&r, ex);

    // Warm: the same Inductor cache, so every length's program is loaded, not compiled.
    let warm = run_example(ex, &[], &env, &dir.path().join("warm"));
    let r = report(&[&warm.trace]);
    assert!(r.cache.persistent_hits >= 1, "{}", dump(&r));
    assert!(finding_families(&r).is_empty(), "{}", dump(&r));
    assert_eq!(r.compiles.recompiles, 0, "{}", dump(&r));
    assert!(r.findings.is_empty(), "{}", dump(&r));
}

#[test]
fn torch_tpu_clean_loop_has_no_finding() {
    let dir = tempfile::tempdir().unwrap();
    let inductor = dir.path().join("inductor");
    let run = run_example(
        &TPU_CLEAN,
        &[],
        &[("TORCHINDUCTOR_CACHE_DIR", inductor.to_str().unwrap())],
        &dir.path().join("out"),
    );
    assert_clean(&TPU_CLEAN, &run);
}

/// `tpuscope report --format json` with extra arguments; must exit 0.
fn report_args(trace: &Path, args: &[&std::ffi::OsStr]) -> Report {
    let out = Command::new(tpuscope())
        .args(["report", "--format", "json"])
        .arg(trace)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one example run and checked against the frontend's own diagnostics, in the order a user reads them"
)]
fn torch_tpu_graph_break_and_guard_failure_from_dynamo_logs_next_to_their_compiles() {
    let ex = &GRAPH_BREAK_AND_GUARD;
    let dir = tempfile::tempdir().unwrap();
    let inductor = dir.path().join("inductor");
    let out = dir.path().join("out");
    // TorchTPU reads TORCH_TRACE too (it then names programs after their lines), so `tpuscope
    // run` sets it for TorchTPU only when asked.
    let run = run_example(
        ex,
        &[],
        &[
            ("TORCHINDUCTOR_CACHE_DIR", inductor.to_str().unwrap()),
            ("TPUSCOPE_TORCH_TRACE", "1"),
        ],
        &out,
    );
    let recompiles = run.num("recompiles");
    assert_eq!(recompiles + 1, run.num("scales"));
    // `tpuscope run` set TORCH_TRACE and left the logs next to the trace, under its name.
    let logs = run.trace.with_extension("torch_trace");
    let files = std::fs::read_dir(&logs)
        .unwrap_or_else(|e| panic!("{}: {e}", logs.display()))
        .count();
    assert!(files >= 1, "no log in {}", logs.display());
    let trace = tpuscope_core::read_trace_file(&run.trace).unwrap();
    let compile_events: std::collections::BTreeSet<usize> = trace
        .events
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r, tpuscope_core::Record::Compile(_)))
        .map(|(i, _)| i)
        .collect();

    // `report` finds them by itself.
    let r = report(&[&run.trace]);
    let d = r
        .dynamo
        .as_ref()
        .unwrap_or_else(|| panic!("no dynamo section\n{}", dump(&r)));
    let json = serde_json::to_string_pretty(d).unwrap();
    assert_eq!(d.logs.len(), 1, "{json}");
    assert!(d.logs[0].note.is_empty(), "{json}");

    // The graph break, at its line, once, with the two programs it split the step into.
    assert_eq!(d.graph_breaks.len(), 1, "{json}");
    let gb = &d.graph_breaks[0];
    assert_at(
        "graph break",
        gb.source.as_ref(),
        ex,
        ex.marker("tpuscope", "graph_break"),
        &r,
    );
    assert_eq!(gb.count, 1, "{json}");
    assert!(gb.reason.contains("graph_break()"), "{json}");
    let graphs: std::collections::BTreeSet<&str> =
        gb.compiles.iter().map(|c| c.graph.as_str()).collect();
    assert_eq!(graphs.len(), 2, "{json}");
    let resume = format!("resume_in_step_at_{}", ex.marker("tpuscope", "graph_break"));
    assert!(graphs.iter().any(|g| g.contains(&resume)), "{graphs:?}");

    // The guard failure, at the line reading the global, once per new value, next to exactly
    // the recompiles PJRT saw of the resume function's program.
    assert_eq!(d.guard_failures.len(), 1, "{json}");
    let gf = &d.guard_failures[0];
    assert_at(
        "guard failure",
        gf.source.as_ref(),
        ex,
        ex.marker("tpuscope", "guard_failure"),
        &r,
    );
    assert_eq!(gf.count, recompiles, "{json}");
    assert!(gf.guards.iter().all(|g| g.contains("LOSS_SCALE")), "{json}");
    let fam = r
        .recompiles
        .iter()
        .find(|f| f.graph.contains(&resume))
        .unwrap_or_else(|| panic!("no recompile family of the resume function\n{}", dump(&r)));
    assert_eq!(fam.count, recompiles + 1, "{}", dump(&r));
    let later: Vec<usize> = fam.members.iter().skip(1).map(|m| m.event).collect();
    let caused: Vec<usize> = gf.compiles.iter().map(|c| c.event).collect();
    assert_eq!(caused, later, "{json}");

    // Every frame compile compiled its own programs: no PJRT compile counted twice, all real.
    assert_eq!(d.frame_compiles.len() as u64, 2 + recompiles, "{json}");
    let mut seen = std::collections::BTreeSet::new();
    for f in &d.frame_compiles {
        assert!(!f.compiles.is_empty(), "{json}");
        for c in &f.compiles {
            assert!(compile_events.contains(&c.event), "{json}");
            assert!(seen.insert(c.event), "{json}");
        }
    }

    // Findings: the graph break with its fix; the guard failure explains the recompile finding.
    let gbf: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.kind == tpuscope_analyzers::report::FindingKind::GraphBreak)
        .collect();
    assert_eq!(gbf.len(), 1, "{}", dump(&r));
    assert_at(
        "graph break finding",
        gbf[0].source.as_ref(),
        ex,
        gb.source.as_ref().unwrap().line,
        &r,
    );
    let rec: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.kind == tpuscope_analyzers::report::FindingKind::Recompile)
        .collect();
    assert_eq!(rec.len(), 1, "{}", dump(&r));
    let guard_at = format!(
        "graph_break_and_guard.py:{}",
        ex.marker("tpuscope", "guard_failure")
    );
    assert!(
        rec[0].title.contains("dynamo: guard") && rec[0].title.contains(&guard_at),
        "{}",
        rec[0].title
    );
    assert_eq!(r.findings.len(), 2, "{}", dump(&r));

    // Logs moved away: the report still works and says where they were; --torch-trace finds
    // them again.
    let moved = dir.path().join("moved");
    std::fs::rename(&logs, &moved).unwrap();
    let r = report_args(&run.trace, &[]);
    let d = r.dynamo.as_ref().expect("no dynamo section");
    assert!(d.logs[0].note.contains("--torch-trace"), "{:?}", d.logs);
    assert!(d.graph_breaks.is_empty());
    assert!(
        r.findings
            .iter()
            .all(|f| f.kind != tpuscope_analyzers::report::FindingKind::GraphBreak),
        "{}",
        dump(&r)
    );
    let r = report_args(&run.trace, &["--torch-trace".as_ref(), moved.as_os_str()]);
    let d = r.dynamo.as_ref().expect("no dynamo section");
    assert_eq!(d.graph_breaks.len(), 1);
    assert_eq!(d.guard_failures[0].count, recompiles);

    // The text report puts both next to the compiles they caused.
    let out = Command::new(tpuscope())
        .args(["report", "--torch-trace"])
        .arg(&moved)
        .arg(&run.trace)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_in_order(
        &text,
        &[
            "Dynamo:".to_string(),
            format!(
                "graph break at torch_tpu/graph_break_and_guard.py:{}",
                gb.source.as_ref().unwrap().line
            ),
            "caused: 0/0".to_string(),
            format!("guard failed at torch_tpu/{guard_at}"),
            "caused: 1/1".to_string(),
        ],
    );
}
