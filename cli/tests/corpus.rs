//! The outside-code corpus (tests/corpus/README.md): training scripts built on Flax, optax,
//! equinox, transformers and TorchTPU's `torch.compile`, run with the frontend's own
//! diagnostics on (the truth) and under `tpuscope run` — and the report held to the truth: the
//! true families with cause, count and line, **no other finding**, "No findings." on clean
//! cases, the steps the script ran. A script's clean case runs twice, bare with the
//! diagnostics and under tpuscope without them, and the script's output is held unchanged;
//! every other case runs once, under tpuscope with the diagnostics on.
//!
//! What each case expects comes from the marker comments in its script (which lines, which
//! causes) and from the frontend's logs (which functions recompiled in the loop and how often),
//! never from tpuscope; the markers are checked against those logs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{collector, cpu_plugin, repo_root, show, tpuscope, traces_in, venv_python};
use tpuscope_analyzers::report::Report;

/// Causes a marker can name.
const RECOMPILE_CAUSES: &[&str] = &[
    "constant_changed",
    "shape_changed",
    "dtype_changed",
    "structure_changed",
];

/// One script of the corpus.
struct Script {
    env: &'static str,
    name: &'static str,
}

impl Script {
    fn path(&self) -> PathBuf {
        repo_root()
            .join("tests/corpus")
            .join(self.env)
            .join(format!("{}.py", self.name))
    }

    fn text(&self) -> String {
        std::fs::read_to_string(self.path()).unwrap()
    }

    /// The cases its `CASES = (...)` tuple lists (on one line or several).
    fn cases(&self) -> Vec<String> {
        let text = self.text();
        let start = text
            .find("\nCASES = (")
            .unwrap_or_else(|| panic!("{}: no `CASES = (...)`", self.name));
        let body = &text[start + "\nCASES = (".len()..];
        let body = &body[..body.find(')').unwrap_or(body.len())];
        body.split(',')
            .map(|c| c.trim().trim_matches('"').to_string())
            .filter(|c| !c.is_empty())
            .collect()
    }

    /// Lines carrying `# KIND[...case...]: CAUSE` for this case, by cause.
    fn markers(&self, kind: &str, case: &str) -> BTreeMap<String, BTreeSet<u32>> {
        let mut out: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        let open = format!("# {kind}[");
        for (i, l) in self.text().lines().enumerate() {
            // A line may carry several markers: each runs to the next `#`.
            for (at, _) in l.match_indices(&open) {
                let rest = &l[at + open.len()..];
                let Some((cases, cause)) = rest.split_once("]:") else {
                    continue;
                };
                let cause = cause.split('#').next().unwrap_or("").trim();
                if cases.split(',').any(|c| c.trim() == case) {
                    out.entry(cause.to_string())
                        .or_default()
                        .insert(i as u32 + 1);
                }
            }
        }
        out
    }
}

/// The `key=value` fields of the one `RESULT` line of a run's stdout.
fn result_line(stdout: &str) -> String {
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("RESULT "))
        .collect();
    assert_eq!(lines.len(), 1, "one RESULT line expected in:\n{stdout}");
    lines[0].to_string()
}

fn result_field(line: &str, key: &str) -> Option<u64> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.parse().unwrap_or_else(|e| panic!("{key}={v}: {e}")))
}

/// Variables that change what a script or a frontend does: unset unless a run sets them.
const SCRUBBED_ENV: &[&str] = &[
    "XLA_HLO_DEBUG",
    "XLA_IR_DEBUG",
    "PT_XLA_DEBUG_LEVEL",
    "PT_XLA_DEBUG",
    "JAX_LOG_COMPILES",
    "JAX_EXPLAIN_CACHE_MISSES",
    "JAX_PLATFORMS",
    "PJRT_NAMES_AND_LIBRARY_PATHS",
    "PJRT_DEVICE",
    "TORCH_LOGS",
    "TORCH_TRACE",
    "TPUSCOPE_TORCH_TRACE",
    "TPUSCOPE_ENABLE",
    "TORCHINDUCTOR_CACHE_DIR",
];

/// A finished run: its stdout, stderr and (under tpuscope) trace.
struct RunOut {
    stdout: String,
    stderr: String,
    trace: Option<PathBuf>,
}

fn command(script: &Script, case: &str, dir: &Path) -> Command {
    let mut c = Command::new(venv_python(script.env));
    c.arg(script.path())
        .args(["--case", case])
        .current_dir(dir)
        .env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("TORCHINDUCTOR_CACHE_DIR", dir.join("inductor"));
    for k in SCRUBBED_ENV
        .iter()
        .filter(|k| **k != "TORCHINDUCTOR_CACHE_DIR")
    {
        c.env_remove(k);
    }
    c
}

/// `tpuscope run` of a case (through `wrapper` when given), traces to `out`, in `dir`.
fn tpuscope_command(
    script: &Script,
    case: &str,
    dir: &Path,
    out: &Path,
    wrapper: Option<&Path>,
) -> Command {
    let mut c = Command::new(tpuscope());
    c.args(["run", "--no-tui", "--quiet", "--out"])
        .arg(out)
        .arg("--")
        .arg(venv_python(script.env));
    if let Some(w) = wrapper {
        c.arg(w);
    }
    c.arg(script.path())
        .args(["--case", case])
        .current_dir(dir)
        .env("TPUSCOPE_COLLECTOR", collector());
    for k in SCRUBBED_ENV {
        c.env_remove(k);
    }
    c.env("HF_HUB_OFFLINE", "1")
        .env("TRANSFORMERS_OFFLINE", "1")
        .env("TORCHINDUCTOR_CACHE_DIR", dir.join("inductor"));
    c
}

/// A run with the frontend's own diagnostics on: the truth. Under `tpuscope run` with a trace
/// when `record`, else bare.
fn diagnosed_run(script: &Script, case: &str, dir: &Path, record: bool) -> RunOut {
    let dir = dir.join(if record { "diagnosed" } else { "bare" });
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let c = match script.env {
        "jax" => {
            let mut c = if record {
                tpuscope_command(script, case, &dir, &out_dir, None)
            } else {
                let mut c = command(script, case, &dir);
                c.env(
                    "PJRT_NAMES_AND_LIBRARY_PATHS",
                    format!("cpuplugin:{}", cpu_plugin("jax").display()),
                )
                .env("JAX_PLATFORMS", "cpuplugin");
                c
            };
            c.env("JAX_LOG_COMPILES", "1")
                .env("JAX_EXPLAIN_CACHE_MISSES", "1");
            c
        }
        "torch_xla" | "torch_tpu" => {
            // torch_xla and TorchTPU reach the CPU plugin here only through the collector (it
            // bridges torch_xla's older ExecuteOptions and TorchTPU's TPU-only options): as a
            // pure pass-through (`TPUSCOPE_ENABLE=0`, nothing recorded) it is the bare run.
            let (diag, truth_wrapper): (&[(&str, &str)], bool) = if script.env == "torch_xla" {
                (&[("PT_XLA_DEBUG_LEVEL", "2")], true)
            } else {
                (&[("TORCH_LOGS", "recompiles,graph_breaks")], false)
            };
            // truth_torch_xla.py prints torch_xla's metrics report at exit.
            let wrapper =
                truth_wrapper.then(|| repo_root().join("tests/corpus/truth_torch_xla.py"));
            let mut c = tpuscope_command(script, case, &dir, &out_dir, wrapper.as_deref());
            if !record {
                c.env("TPUSCOPE_ENABLE", "0");
            }
            for (k, v) in diag {
                c.env(k, v);
            }
            c
        }
        other => panic!("no diagnosed run for env {other}"),
    };
    let what = if record { "diagnosed tpuscope" } else { "bare" };
    finish(
        c,
        &format!("{what} run of {} --case {case}", script.name),
        record.then_some(out_dir.as_path()),
    )
}

/// The run under `tpuscope run`, with its trace.
fn tpuscope_run(script: &Script, case: &str, dir: &Path) -> RunOut {
    let dir = dir.join("tpuscope");
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let c = tpuscope_command(script, case, &dir, &out_dir, None);
    finish(
        c,
        &format!("tpuscope run of {} --case {case}", script.name),
        Some(&out_dir),
    )
}

/// Runs `c`, which must succeed, and takes the one trace it wrote to `out_dir` when given.
fn finish(mut c: Command, what: &str, out_dir: Option<&Path>) -> RunOut {
    let out = c.output().unwrap();
    assert!(out.status.success(), "{what} failed:\n{}", show(&out));
    let trace = out_dir.map(|d| {
        let traces = traces_in(d);
        assert_eq!(traces.len(), 1, "{traces:?}\n{}", show(&out));
        traces[0].clone()
    });
    RunOut {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        trace,
    }
}

/// What the frontend's own logs say recompiled while the loop ran.
#[derive(Debug, Default)]
struct Truth {
    /// Function → its compiles over the whole run, for functions that compiled again after the
    /// loop started (user or library functions; the frontend's own eager ops are left out).
    recompiled: BTreeMap<String, u64>,
    /// Function → the lines of the script its recompiles were asked for at, as the frontend
    /// logged them (when it logs a line of the script).
    lines: BTreeMap<String, BTreeSet<u32>>,
    /// The frontend's log, for messages.
    log: String,
}

/// The loop section of a log: between the script's loop start and end lines.
fn sections(stderr: &str) -> (&str, &str, &str) {
    let start = "tpuscope-corpus: loop start";
    let end = "tpuscope-corpus: loop end";
    let a = stderr
        .find(start)
        .unwrap_or_else(|| panic!("no `{start}` line on stderr:\n{stderr}"));
    let b = stderr[a..]
        .find(end)
        .map(|i| a + i)
        .unwrap_or_else(|| panic!("no `{end}` line on stderr"));
    (&stderr[..a], &stderr[a..b], &stderr[b..])
}

/// JAX: `Compiling jit(NAME) ...` per compile (`jax_log_compiles`); `TRACING CACHE MISS at
/// FILE:LINE[:COL] (CALLER):` followed by `... NAME ... defined at FILE:LINE`
/// (`jax_explain_cache_misses`) tells whose function NAME is and where it was called.
fn jax_truth(stderr: &str, script: &Path) -> Truth {
    let (_, in_loop, _) = sections(stderr);
    let compiles = |text: &str| {
        let mut n: BTreeMap<String, u64> = BTreeMap::new();
        for l in text.lines() {
            if let Some(rest) = l.strip_prefix("Compiling jit(")
                && let Some((name, _)) = rest.split_once(')')
            {
                *n.entry(name.to_string()).or_default() += 1;
            }
        }
        n
    };
    let total = compiles(stderr);
    let looped = compiles(in_loop);
    // Cache-miss records: (call file, call line, function, defined-at file).
    let mut misses: Vec<(String, u32, String, String)> = Vec::new();
    let lines: Vec<&str> = stderr.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let Some(rest) = l.strip_prefix("TRACING CACHE MISS at ") else {
            continue;
        };
        let loc = rest.rsplit_once(" (").map_or(rest, |(a, _)| a);
        let mut parts = loc.rsplitn(3, ':').collect::<Vec<_>>();
        parts.reverse();
        // FILE:LINE:COL or FILE:LINE.
        let (file, line) = match parts.as_slice() {
            [f, l, c]
                if c.chars().all(|x| x.is_ascii_digit())
                    && l.chars().all(|x| x.is_ascii_digit()) =>
            {
                (f.to_string(), l.parse().unwrap_or(0))
            }
            [f, l, c] => (format!("{f}:{l}"), c.parse().unwrap_or(0)),
            _ => continue,
        };
        for next in lines.iter().skip(i + 1).take(3) {
            let t = next.trim();
            let (name, def) = if let Some(r) = t.strip_prefix("for ") {
                match r.split_once(" defined at ") {
                    Some((n, d)) => (n.to_string(), d.to_string()),
                    None => continue,
                }
            } else if let Some((n, d)) = t.split_once(" defined at ") {
                (
                    n.split_whitespace().next().unwrap_or("").to_string(),
                    d.to_string(),
                )
            } else {
                continue;
            };
            misses.push((file.clone(), line, name, def));
            break;
        }
    }
    let mut truth = Truth {
        log: in_loop.to_string(),
        ..Truth::default()
    };
    let script = script.to_string_lossy();
    for (name, &n_loop) in &looped {
        let n = total[name];
        // Compiled again once the loop ran: more than once in all, at least once in the loop.
        if n < 2 || n_loop == 0 {
            continue;
        }
        let defined: Vec<&(String, u32, String, String)> =
            misses.iter().filter(|m| m.2 == *name).collect();
        // JAX's own functions (eager ops, `jnp` helpers) are not the user's graphs.
        let jax_own = |def: &str| def.contains("/site-packages/jax/") || def.contains("/jax/_src/");
        if defined.is_empty() || defined.iter().all(|m| jax_own(&m.3)) {
            continue;
        }
        truth.recompiled.insert(name.clone(), n);
        let at: BTreeSet<u32> = defined
            .iter()
            .filter(|m| m.0 == script)
            .map(|m| m.1)
            .collect();
        truth.lines.insert(name.clone(), at);
    }
    truth
}

/// torch_xla (`PT_XLA_DEBUG_LEVEL=2`): a `Compilation Analysis:` block per compile, with its
/// cause and the Python frames that triggered it (innermost first), and an `Execution
/// Analysis:` block per execution; each execution caused by `user torch_xla.sync` ends a step.
/// torch_xla has no names for its graphs: a graph is known by the script line that asked for
/// it. One that compiles again once warm-up (the first two steps) is over recompiled.
fn xla_truth(stderr: &str, script: &Path) -> Truth {
    let (_, in_loop, _) = sections(stderr);
    let script_name = script.file_name().unwrap().to_string_lossy().into_owned();
    #[derive(PartialEq)]
    enum Block {
        None,
        Compile,
        Execute,
    }
    let mut block = Block::None;
    let mut cause = String::new();
    let mut frames: Vec<String> = Vec::new();
    let mut step = 0usize;
    // Script line → (compiles in the loop, compiles after warm-up).
    let mut by_line: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    let line_of = |frames: &[String]| {
        frames.iter().find_map(|f| {
            // `main (tests/corpus/torch_xla/hf_gpt2.py:137)`
            let inside = f.rsplit_once('(')?.1.trim_end_matches(')');
            let (file, line) = inside.rsplit_once(':')?;
            file.ends_with(&script_name)
                .then(|| line.parse::<u32>().ok())?
        })
    };
    let mut finish = |block: &Block, cause: &str, frames: &[String], step: &mut usize| match block {
        Block::Compile => {
            if let Some(line) = line_of(frames) {
                let e = by_line.entry(line).or_default();
                e.0 += 1;
                if *step >= 2 {
                    e.1 += 1;
                }
            }
        }
        Block::Execute if cause == "user torch_xla.sync" => *step += 1,
        _ => {}
    };
    for l in in_loop.lines() {
        let (kind, body) = if let Some(b) = l.strip_prefix("Compilation Analysis: ") {
            (Block::Compile, b)
        } else if let Some(b) = l.strip_prefix("Execution Analysis: ") {
            (Block::Execute, b)
        } else {
            continue;
        };
        if body.starts_with("=====") {
            // A block opens and closes with a row of `=`: close the one open, if any.
            if block != Block::None {
                finish(&block, &cause, &frames, &mut step);
                block = Block::None;
            } else {
                block = kind;
                cause.clear();
                frames.clear();
            }
            continue;
        }
        if body == "Compilation Cause" || body == "Execution Cause" {
            continue;
        }
        if let Some(c) = body.strip_prefix("  ")
            && cause.is_empty()
            && !c.starts_with("Graph Hash")
        {
            cause = c.trim().to_string();
            continue;
        }
        if body.starts_with("  ") && body.contains(" (") && body.ends_with(')') {
            frames.push(body.trim().to_string());
        }
    }
    let mut truth = Truth {
        log: in_loop
            .lines()
            .filter(|l| l.starts_with("Compilation Analysis: "))
            .collect::<Vec<_>>()
            .join("\n"),
        ..Truth::default()
    };
    for (line, (n, after_warmup)) in by_line {
        if after_warmup > 0 && n >= 2 {
            let key = format!("line {line}");
            truth.recompiled.insert(key.clone(), n);
            truth.lines.insert(key, [line].into_iter().collect());
        }
    }
    truth
}

/// torch_xla's `MarkStep` counter from the metrics report `truth_torch_xla.py` prints at exit.
fn mark_steps(stderr: &str) -> u64 {
    let mut lines = stderr.lines();
    while let Some(l) = lines.next() {
        if l.trim() == "Counter: MarkStep" {
            let v = lines.next().unwrap_or("");
            return v
                .trim()
                .strip_prefix("Value: ")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("MarkStep counter: {v:?}"));
        }
    }
    panic!("no `Counter: MarkStep` in torch_xla's metrics report:\n{stderr}");
}

/// TorchTPU (dynamo): `[__recompiles] Recompiling function NAME in FILE:LINE` per recompile.
fn dynamo_truth(stderr: &str) -> Truth {
    let mut truth = Truth {
        log: stderr
            .lines()
            .filter(|l| l.contains("[__recompiles]") || l.contains("[__graph_breaks]"))
            .collect::<Vec<_>>()
            .join("\n"),
        ..Truth::default()
    };
    for l in stderr.lines() {
        if let Some((_, rest)) = l.split_once("[__recompiles] Recompiling function ") {
            let name = rest.split_whitespace().next().unwrap_or("").to_string();
            // The count is compiles: the first one plus each recompile.
            *truth.recompiled.entry(name).or_insert(1) += 1;
        }
    }
    truth
}

fn dump(r: &Report) -> String {
    serde_json::to_string_pretty(&serde_json::json!({
        "findings": r.findings,
        "recompiles": r.recompiles.iter().map(|f| serde_json::json!({
            "graph": f.graph, "count": f.count, "cause": f.cause.as_str(), "source": f.source,
            "finding": f.finding, "with": f.recompiled_with, "details": f.details,
        })).collect::<Vec<_>>(),
        "syncs": r.syncs,
        "steps": [r.steps.count.to_string(), r.steps.detected_by.clone()],
        "phases": r.phases.iter().map(|p| format!("{} {:.0} ms {} steps", p.phase.as_str(), p.dur_ms, p.steps)).collect::<Vec<_>>(),
    }))
    .unwrap()
}

/// Runs one case both ways and holds the report to the truth.
#[expect(
    clippy::too_many_lines,
    reason = "the corpus table: one row per case, read top to bottom"
)]
fn check_case(env: &'static str, name: &'static str, case: &str) {
    let script = Script { env, name };
    assert!(
        script.cases().iter().any(|c| c == case),
        "{name} has no case {case}"
    );
    let dir = tempfile::tempdir().unwrap();
    let label = format!("{name} --case {case}");
    // A script's clean case runs twice: bare with the frontend's diagnostics (the truth), and
    // under tpuscope as a user runs it, so that the script's output is held unchanged under
    // tpuscope. Every other case runs once, under tpuscope with the diagnostics on: truth and
    // report from one run (the diagnostics only log; half the corpus's minutes).
    let (bare, run) = if case == "clean" {
        (
            Some(diagnosed_run(&script, case, dir.path(), false)),
            tpuscope_run(&script, case, dir.path()),
        )
    } else {
        (None, diagnosed_run(&script, case, dir.path(), true))
    };
    let bare = bare.as_ref().unwrap_or(&run);

    // tpuscope changes nothing the script computes.
    let result = result_line(&bare.stdout);
    assert_eq!(
        result,
        result_line(&run.stdout),
        "{label}: output differs under tpuscope\n--- tpuscope stderr\n{}",
        run.stderr
    );

    let truth = match env {
        "jax" => jax_truth(&bare.stderr, &script.path()),
        "torch_xla" => xla_truth(&bare.stderr, &script.path()),
        "torch_tpu" => dynamo_truth(&bare.stderr),
        other => panic!("no truth for env {other}"),
    };

    let trace = run.trace.as_ref().unwrap();
    let out = Command::new(tpuscope())
        .args(["report", "--format", "json"])
        .arg(trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let r: Report = serde_json::from_slice(&out.stdout).unwrap();
    let d = dump(&r);

    // Steps: as the frontend counts them — torch_xla's `MarkStep` counter (every
    // `torch_xla.sync()`, an evaluation's too); elsewhere the steps the script ran.
    let steps = match env {
        "torch_xla" => mark_steps(&bare.stderr),
        _ => result_field(&result, "steps").expect("RESULT has no steps="),
    };
    assert_eq!(r.steps.count, steps, "{label}: steps\n{d}");

    // The expected findings, from the markers of this case.
    let bug = script.markers("tpuscope", case);
    let trigger = script.markers("tpuscope-trigger", case);
    let used = script.markers("tpuscope-use", case);
    let lib = script.markers("tpuscope-lib", case);
    let lines_for = |cause: &str| -> BTreeSet<u32> {
        [&bug, &trigger, &used]
            .iter()
            .filter_map(|m| m.get(cause))
            .flatten()
            .copied()
            .collect()
    };
    let expected_recompiles: Vec<&str> = RECOMPILE_CAUSES
        .iter()
        .copied()
        .filter(|c| bug.contains_key(*c) || trigger.contains_key(*c))
        .collect();

    // Graphs that recompile along with a marked one (same steps, same cause).
    let with: BTreeSet<u32> = script
        .markers("tpuscope-with", case)
        .values()
        .flatten()
        .copied()
        .collect();
    type Recompiled<'a> = Vec<(&'a String, &'a u64)>;
    let (with_truth, main_truth): (Recompiled<'_>, Recompiled<'_>) =
        truth.recompiled.iter().partition(|(f, _)| {
            truth
                .lines
                .get(*f)
                .is_some_and(|at| !at.is_empty() && at.is_subset(&with))
        });
    assert_eq!(
        with_truth.len(),
        with.len(),
        "{label}: `tpuscope-with` lines {with:?} vs what the frontend saw recompile {:?}\n--- log\n{}",
        truth.recompiled,
        truth.log
    );

    // The truth agrees with the markers: as many recompiling functions as marked causes, each
    // asked for at a marked line when the frontend names a line of the script, and as many
    // compiles as the script says it made distinct programs (shapes=, lrs=, indices=).
    assert_eq!(
        main_truth.len(),
        expected_recompiles.len(),
        "{label}: the frontend's logs and the markers disagree: recompiled {:?}, marked {expected_recompiles:?}\n--- log\n{}",
        truth.recompiled,
        truth.log
    );
    for (f, at) in truth
        .lines
        .iter()
        .filter(|(f, _)| main_truth.iter().any(|(m, _)| m == f))
    {
        let marked: BTreeSet<u32> = expected_recompiles
            .iter()
            .flat_map(|c| lines_for(c))
            .collect();
        assert!(
            at.is_empty() || at.iter().any(|l| marked.contains(l)),
            "{label}: the frontend asked for {f} at lines {at:?}, none marked ({marked:?})"
        );
    }
    for key in ["shapes", "lrs", "indices"] {
        if let Some(n) = result_field(&result, key) {
            assert!(
                truth.recompiled.values().any(|&c| c == n),
                "{label}: RESULT {key}={n} but the frontend compiled {:?}",
                truth.recompiled
            );
        }
    }

    // Recompile findings: exactly the marked ones, with the frontend's count and a marked line.
    let rec: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.kind == tpuscope_analyzers::report::FindingKind::Recompile)
        .collect();
    assert_eq!(
        rec.len(),
        expected_recompiles.len(),
        "{label}: recompile findings\n{d}"
    );
    let fams: Vec<_> = r.recompiles.iter().filter(|f| f.finding).collect();
    assert_eq!(fams.len(), expected_recompiles.len(), "{label}\n{d}");
    for cause in &expected_recompiles {
        let fam = fams
            .iter()
            .find(|f| f.cause.as_str() == *cause)
            .unwrap_or_else(|| panic!("{label}: no {cause} family\n{d}"));
        let lines = lines_for(cause);
        let src = fam
            .source
            .as_ref()
            .unwrap_or_else(|| panic!("{label}: {cause} family without a line\n{d}"));
        assert!(
            src.file.ends_with(&format!("{}.py", script.name)) && lines.contains(&src.line),
            "{label}: {cause} at {}:{}, expected one of lines {lines:?}\n{d}",
            src.file,
            src.line
        );
        // The frontend's count for the one function it saw recompile (for JAX, by name).
        let count = if env == "jax" {
            let name = fam.graph.strip_prefix("jit_").unwrap_or(&fam.graph);
            truth.recompiled.get(name).copied()
        } else {
            (main_truth.len() == 1).then(|| *main_truth[0].1)
        };
        assert_eq!(
            Some(fam.count),
            count,
            "{label}: {} compiled {}× per tpuscope, per the frontend {:?}\n{d}",
            fam.graph,
            fam.count,
            truth.recompiled
        );
    }

    // Each graph that recompiled along is named under the main finding, with its count.
    for (f, n) in &with_truth {
        let companion = r
            .recompiles
            .iter()
            .find(|c| c.recompiled_with.is_some() && c.count == **n)
            .unwrap_or_else(|| panic!("{label}: {f} recompiled {n}× along with the main graph per the frontend, not so in the report\n{d}"));
        let main = companion.recompiled_with.as_deref().unwrap();
        assert!(
            r.findings.iter().any(
                |x| x.kind == tpuscope_analyzers::report::FindingKind::Recompile
                    && x.title.starts_with(main)
                    && x.title.contains(&companion.graph)
            ),
            "{label}: the finding for {main} does not name {}\n{d}",
            companion.graph
        );
    }

    // Sync findings: exactly the marked ones, at their line, with the count the script made.
    let sync_lines: BTreeSet<u32> = [&bug, &lib]
        .iter()
        .filter_map(|m| m.get("host_sync"))
        .flatten()
        .copied()
        .collect();
    let syncs: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.kind == tpuscope_analyzers::report::FindingKind::Sync)
        .collect();
    assert_eq!(syncs.len(), sync_lines.len(), "{label}: sync findings\n{d}");
    for line in &sync_lines {
        let s = r
            .syncs
            .iter()
            .find(|s| {
                s.source.as_ref().is_some_and(|l| {
                    l.line == *line && l.file.ends_with(&format!("{}.py", script.name))
                })
            })
            .unwrap_or_else(|| panic!("{label}: no sync line at {line}\n{d}"));
        if let Some(n) = result_field(&result, "syncs") {
            assert_eq!(s.count, n, "{label}: syncs at line {line}\n{d}");
        }
        let in_library = lib.get("host_sync").is_some_and(|l| l.contains(line));
        assert_eq!(
            s.library.is_some(),
            in_library,
            "{label}: sync at {line}: library frame {:?}\n{d}",
            s.library
        );
    }

    // Nothing else: every finding is one of those.
    assert_eq!(
        r.findings.len(),
        rec.len() + syncs.len(),
        "{label}: findings beyond the true ones\n{d}"
    );
    if r.findings.is_empty() {
        let text = Command::new(tpuscope())
            .args(["report"])
            .arg(trace)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.contains("\nNo findings.\n"), "{label}:\n{text}");
        // The set-up compile time is stated, finding or not.
        assert!(text.contains("set-up compiled "), "{label}:\n{text}");
    }
}

macro_rules! cases {
    ($($test:ident: $env:literal $script:literal $case:literal;)*) => {
        $(
            #[test]
            fn $test() {
                check_case($env, $script, $case);
            }
        )*

        /// Every case a corpus script lists has a test here.
        #[test]
        fn every_case_of_the_corpus_is_tested() {
            let tested: BTreeSet<(&str, &str, &str)> = [$(($env, $script, $case)),*].into_iter().collect();
            for env in ["jax", "torch_xla", "torch_tpu"] {
                let dir = repo_root().join("tests/corpus").join(env);
                for e in std::fs::read_dir(&dir).unwrap().flatten() {
                    let p = e.path();
                    if p.extension().is_none_or(|x| x != "py") {
                        continue;
                    }
                    let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
                    let script = Script { env, name: Box::leak(stem.into_boxed_str()) };
                    for case in script.cases() {
                        assert!(
                            tested.iter().any(|(e, s, c)| *e == env && *s == script.name && *c == case),
                            "{env}/{}.py --case {case} has no test in cli/tests/corpus.rs",
                            script.name
                        );
                    }
                }
            }
        }
    };
}

cases! {
    torch_xla_gpt2_clean: "torch_xla" "hf_gpt2" "clean";
    torch_xla_gpt2_attn_mask: "torch_xla" "hf_gpt2" "attn_mask";
    torch_xla_gpt2_pad_longest: "torch_xla" "hf_gpt2" "pad_longest";
    torch_xla_gpt2_item_logging: "torch_xla" "hf_gpt2" "item_logging";
    torch_xla_gpt2_python_int_index: "torch_xla" "hf_gpt2" "python_int_index";
    torch_xla_gpt2_python_float_scale: "torch_xla" "hf_gpt2" "python_float_scale";
    torch_xla_gpt2_partial_batch: "torch_xla" "hf_gpt2" "partial_batch";
    torch_xla_gpt2_eval_batch: "torch_xla" "hf_gpt2" "eval_batch";
    jax_flax_mlp_clean: "jax" "flax_linen_mlp" "clean";
    jax_flax_mlp_python_float_lr: "jax" "flax_linen_mlp" "python_float_lr";
    jax_flax_mlp_partial_batch: "jax" "flax_linen_mlp" "partial_batch";
    jax_flax_mlp_float_logging: "jax" "flax_linen_mlp" "float_logging";
    jax_flax_mlp_eval_batch: "jax" "flax_linen_mlp" "eval_batch";
    jax_flax_mlp_python_int_index: "jax" "flax_linen_mlp" "python_int_index";
    jax_flax_cnn_clean: "jax" "flax_linen_cnn" "clean";
    jax_flax_cnn_partial_batch_logging: "jax" "flax_linen_cnn" "partial_batch_logging";
    jax_nnx_clean: "jax" "flax_nnx" "clean";
    jax_nnx_partial_batch: "jax" "flax_nnx" "partial_batch";
    jax_nnx_float_logging: "jax" "flax_nnx" "float_logging";
    jax_equinox_clean: "jax" "equinox_mlp" "clean";
    jax_equinox_python_float_lr: "jax" "equinox_mlp" "python_float_lr";
    jax_equinox_partial_batch: "jax" "equinox_mlp" "partial_batch";
    jax_gpt2_clean: "jax" "transformers_flax_gpt2" "clean";
    jax_gpt2_pad_longest: "jax" "transformers_flax_gpt2" "pad_longest";
    jax_gpt2_float_logging: "jax" "transformers_flax_gpt2" "float_logging";
    torch_tpu_compiled_gpt2_clean: "torch_tpu" "compiled_transformer" "clean";
    torch_tpu_compiled_gpt2_pad_longest: "torch_tpu" "compiled_transformer" "pad_longest";
    torch_tpu_compiled_gpt2_item_logging: "torch_tpu" "compiled_transformer" "item_logging";
    torch_tpu_compiled_gpt2_eval_batch: "torch_tpu" "compiled_transformer" "eval_batch";
}
