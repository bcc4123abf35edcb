//! `tpuscope report` end to end on the committed real traces: the JSON's facts, budgets and
//! baselines with their exit statuses, the text/markdown/JUnit renderings, bad input, cut traces
//! and closed pipes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{repo_root, show, tpuscope};
use serde_json::Value;

fn real(name: &str) -> PathBuf {
    repo_root().join("sample_traces/real").join(name)
}

fn report(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(tpuscope());
    c.arg("report").args(args).current_dir(repo_root());
    // The tests read plain text unless they ask for colour.
    c.env_remove("NO_COLOR").env_remove("CLICOLOR_FORCE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

fn json_of(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", show(o)))
}

/// The line of `return w - lr * g` in the workload that produced jax_lr.tps (1-based).
fn lr_line() -> u64 {
    let src = std::fs::read_to_string(repo_root().join("tests/workloads/jax_lr.py")).unwrap();
    let idx = src
        .lines()
        .position(|l| l.contains("return w - lr * g"))
        .expect("jax_lr.py no longer holds `return w - lr * g`");
    idx as u64 + 1
}

fn lr_json(extra: &[&str]) -> (Output, Value) {
    let lr = real("jax_lr.tps");
    let mut args = vec![path_str(&lr), "--format", "json"];
    args.extend_from_slice(extra);
    let out = report(&args, &[]);
    let v = json_of(&out);
    (out, v)
}

fn budget<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == name)
        .unwrap_or_else(|| panic!("no budget {name} in {}", v["budgets"]))
}

#[test]
fn json_explains_the_lr_recompiles_at_the_users_line() {
    let (out, v) = lr_json(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let fam = &v["recompiles"][0];
    assert_eq!(fam["graph"], "jit_train_step", "{fam}");
    assert_eq!(fam["count"], 4, "{fam}");
    assert_eq!(fam["cause"], "constant_changed", "{fam}");
    assert!(
        fam["source"]["file"]
            .as_str()
            .unwrap()
            .ends_with("tests/workloads/jax_lr.py"),
        "{fam}"
    );
    assert_eq!(fam["source"]["line"].as_u64(), Some(lr_line()), "{fam}");
    assert_eq!(v["tpuscope_report"], 1);
    assert!(v["budgets"].as_array().unwrap().is_empty());
}

#[test]
fn recompile_budget_below_the_count_fails_with_exit_1() {
    let (out, v) = lr_json(&["--budget", "recompiles=2"]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let b = budget(&v, "recompiles");
    assert_eq!(b["limit"].as_f64(), Some(2.0));
    // Four compiles of the one recompiling graph: three recompiles.
    let expected = v["recompiles"][0]["count"].as_f64().unwrap() - 1.0;
    assert_eq!(expected, 3.0);
    assert_eq!(b["actual"].as_f64(), Some(expected));
    assert_eq!(b["ok"], false);
    assert_eq!(b["status"], "exceeded");
    // Machine formats get one line on stderr saying why the step failed.
    let err = stderr(&out);
    assert!(err.contains("recompiles 3 > 2"), "{err}");
}

#[test]
fn recompile_budget_at_the_count_passes() {
    let (out, v) = lr_json(&["--budget", "recompiles=3"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let b = budget(&v, "recompiles");
    assert_eq!(b["ok"], true);
    assert_eq!(b["status"], "ok");
    assert!(!stderr(&out).contains("FAILED"), "{}", show(&out));
}

#[test]
fn hbm_budget_is_unknown_and_passing_on_the_cpu_plugin() {
    let (out, v) = lr_json(&["--budget", "hbm-peak-fraction=0.5"]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    // The CPU plugin reports no memory limit: nothing to divide by.
    assert!(
        v["hbm"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d.get("limit_bytes").is_none()),
        "{}",
        v["hbm"]
    );
    let b = budget(&v, "hbm-peak-fraction");
    assert_eq!(b["status"], "unknown");
    assert_eq!(b["ok"], true);
    assert!(b["actual"].is_null(), "{b}");
}

#[test]
fn text_names_the_line_the_cause_and_the_fix() {
    let lr = real("jax_lr.tps");
    let out = report(&[path_str(&lr)], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let text = stdout(&out);
    let at = format!("jax_lr.py:{}", lr_line());
    assert!(text.contains(&at), "no {at}:\n{text}");
    assert!(text.contains("constant_changed"), "{text}");
    assert!(text.contains("jit_train_step"), "{text}");
    assert!(text.contains("fix:"), "{text}");
    assert!(text.contains("Findings (1)"), "{text}");
    assert!(!text.contains("No findings."), "{text}");
    // Every section is there, the empty ones in one line.
    for section in [
        "Recompiles",
        "Host syncs",
        "Steps",
        "Cache",
        "Device memory",
        "Errors: none",
    ] {
        assert!(text.contains(section), "no {section}:\n{text}");
    }
    // Not a terminal: no colour.
    assert!(!text.contains('\x1b'), "escapes in piped output:\n{text}");
    // One row per member of the family, each with its cause.
    let rows = text
        .lines()
        .filter(|l| l.trim_start().starts_with('#') && l.contains("constant_changed"))
        .count();
    assert_eq!(rows, 3, "{text}");
}

#[test]
fn text_of_torch_xla_item_points_at_the_item_call() {
    let item = real("torch_xla_item.tps");
    let out = report(&[path_str(&item)], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let text = stdout(&out);
    let src =
        std::fs::read_to_string(repo_root().join("tests/workloads/torch_xla_item.py")).unwrap();
    let item_line = src
        .lines()
        .position(|l| l.contains("losses.append(loss.item())"))
        .expect("torch_xla_item.py has no `losses.append(loss.item())`")
        + 1;
    let at = format!("torch_xla_item.py:{item_line}");
    assert!(text.contains(&at), "no {at}:\n{text}");
    assert!(text.contains("no recompiles"), "{text}");
    assert!(text.contains("marker torch_xla.sync"), "{text}");
}

#[test]
fn clean_trace_reads_as_clean() {
    let aot = real("jax_aot_v5e.tps");
    let (json, text) = (
        report(&[path_str(&aot), "--format", "json"], &[]),
        report(&[path_str(&aot)], &[]),
    );
    let v = json_of(&json);
    // Only meaningful while the trace really has no findings.
    assert!(
        v["findings"].as_array().unwrap().is_empty(),
        "{}",
        v["findings"]
    );
    assert_eq!(text.status.code(), Some(0), "{}", show(&text));
    let t = stdout(&text);
    assert!(t.contains("No findings."), "{t}");
    assert!(t.contains("no recompiles"), "{t}");
    assert!(t.contains("no host syncs"), "{t}");
    // libtpu compiled without running: no memory samples.
    assert!(t.contains("not reported by this plugin"), "{t}");
}

#[test]
fn colour_follows_clicolor_force_and_no_color() {
    let lr = real("jax_lr.tps");
    let forced = report(&[path_str(&lr)], &[("CLICOLOR_FORCE", "1")]);
    assert!(stdout(&forced).contains("\x1b["), "{}", show(&forced));
    let off = report(
        &[path_str(&lr)],
        &[("CLICOLOR_FORCE", "1"), ("NO_COLOR", "1")],
    );
    assert!(!stdout(&off).contains('\x1b'), "{}", show(&off));
    // Machine formats never carry colour.
    let json = report(
        &[path_str(&lr), "--format", "json"],
        &[("CLICOLOR_FORCE", "1")],
    );
    assert!(!stdout(&json).contains('\x1b'));
}

#[test]
fn markdown_has_a_status_line_and_a_row_for_the_family() {
    let lr = real("jax_lr.tps");
    let out = report(
        &[
            path_str(&lr),
            "--format",
            "markdown",
            "--budget",
            "recompiles=2",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let md = stdout(&out);
    assert!(md.starts_with("## tpuscope report"), "{md}");
    assert!(md.lines().any(|l| l.starts_with("❌")), "{md}");
    // The family's line, where it compiles, and one table row per compile.
    let family = md
        .lines()
        .find(|l| l.starts_with("- `jit_train_step`:"))
        .unwrap_or_else(|| panic!("no line for the family:\n{md}"));
    assert!(family.contains(": 4× **constant\\_changed**, "), "{family}");
    assert!(
        md.contains(&format!("  - at `workloads/jax_lr.py:{} (", lr_line())),
        "{md}"
    );
    // Rows have as many cells as their header: no stray `|` from the text.
    let header = md.lines().find(|l| l.starts_with("|  | at ms |")).unwrap();
    let unescaped = |l: &str| l.replace("\\|", "").matches('|').count();
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| \\#")).collect();
    assert_eq!(rows.len(), 4, "{md}");
    for row in rows {
        assert_eq!(unescaped(row), unescaped(header), "{row}");
    }
    assert!(
        md.lines()
            .any(|l| l.starts_with("| recompiles | 2 | 3 |") && l.contains("EXCEEDED")),
        "{md}"
    );

    let ok = report(
        &[
            path_str(&lr),
            "--format",
            "markdown",
            "--budget",
            "recompiles=3",
        ],
        &[],
    );
    assert_eq!(ok.status.code(), Some(0), "{}", show(&ok));
    assert!(
        stdout(&ok).lines().any(|l| l.starts_with("✅")),
        "{}",
        show(&ok)
    );
}

/// Parses JUnit XML with Python's parser: (suite attributes, [(name, outcome)]).
fn parse_junit(xml: &[u8]) -> Value {
    let script = r#"
import json, sys, xml.etree.ElementTree as ET
root = ET.fromstring(sys.stdin.buffer.read())
cases = []
for c in root.iter('testcase'):
    if c.find('failure') is not None:
        outcome = 'failure:' + c.find('failure').get('message', '')
    elif c.find('skipped') is not None:
        outcome = 'skipped'
    else:
        outcome = 'pass'
    out = c.find('system-out')
    cases.append({'name': c.get('name'), 'classname': c.get('classname'), 'outcome': outcome,
                  'text': (c.find('failure').text if c.find('failure') is not None else None) or '',
                  'out': out.text if out is not None else ''})
print(json.dumps({'tag': root.tag, 'attrib': root.attrib, 'cases': cases}))
"#;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is needed to parse the JUnit XML");
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), xml).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "not well-formed XML: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(xml)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn junit_is_xml_with_one_case_per_budget() {
    let lr = real("jax_lr.tps");
    let out = report(
        &[
            path_str(&lr),
            "--format",
            "junit",
            "--budget",
            "recompiles=2",
            "--budget",
            "compiles=1000",
            "--budget",
            "hbm-peak-fraction=0.9",
        ],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let j = parse_junit(&out.stdout);
    assert_eq!(j["tag"], "testsuite");
    assert_eq!(j["attrib"]["name"], "tpuscope");
    assert_eq!(j["attrib"]["tests"], "3");
    assert_eq!(j["attrib"]["failures"], "1");
    assert_eq!(j["attrib"]["skipped"], "1");
    let case = |name: &str| {
        j["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .unwrap_or_else(|| panic!("no testcase {name}: {j}"))
            .clone()
    };
    let rec = case("recompiles");
    assert!(
        rec["outcome"].as_str().unwrap().starts_with("failure:"),
        "{rec}"
    );
    assert!(rec["outcome"].as_str().unwrap().contains('3'), "{rec}");
    // The failure text says where to look.
    assert!(
        rec["text"]
            .as_str()
            .unwrap()
            .contains(&format!("jax_lr.py:{}", lr_line())),
        "{rec}"
    );
    assert_eq!(case("compiles")["outcome"], "pass");
    assert_eq!(case("hbm-peak-fraction")["outcome"], "skipped");
}

#[test]
fn junit_without_budgets_never_fails_and_lists_findings_by_kind() {
    let lr = real("jax_lr.tps");
    let out = report(&[path_str(&lr), "--format", "junit"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let j = parse_junit(&out.stdout);
    assert_eq!(j["attrib"]["failures"], "0");
    let cases = j["cases"].as_array().unwrap();
    let names: Vec<&str> = cases.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["recompile", "sync", "cache", "hbm", "oom"]);
    assert!(cases.iter().all(|c| c["outcome"] == "pass"), "{j}");
    let rec = &cases[0];
    assert!(
        rec["out"].as_str().unwrap().contains("jit_train_step"),
        "{rec}"
    );
}

#[test]
fn baseline_flags_a_new_family_and_passes_against_itself() {
    let dir = tempfile::tempdir().unwrap();
    let write_json = |trace: &str, file: &str| {
        let t = real(trace);
        let out = report(&[path_str(&t), "--format", "json"], &[]);
        assert_eq!(out.status.code(), Some(0), "{}", show(&out));
        let p = dir.path().join(file);
        std::fs::write(&p, &out.stdout).unwrap();
        p
    };
    let shapes = write_json("jax_shapes.tps", "shapes.json");
    let same = write_json("jax_lr.tps", "lr.json");

    let (out, v) = lr_json(&["--baseline", path_str(&shapes)]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let b = &v["baseline"];
    assert_eq!(b["ok"], false, "{b}");
    let regs: Vec<&str> = b["regressions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(
        regs.iter()
            .any(|r| r.contains("new recompile family") && r.contains("jit_train_step")),
        "{regs:?}"
    );

    let (out, v) = lr_json(&["--baseline", path_str(&same)]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    assert_eq!(v["baseline"]["ok"], true, "{}", v["baseline"]);
    assert!(v["baseline"]["regressions"].as_array().unwrap().is_empty());

    // The text report ends with the verdict.
    let lr = real("jax_lr.tps");
    let text = report(&[path_str(&lr), "--baseline", path_str(&shapes)], &[]);
    assert_eq!(text.status.code(), Some(1));
    let t = stdout(&text);
    let last = t.lines().rev().find(|l| !l.is_empty()).unwrap();
    assert!(last.starts_with("FAILED"), "{t}");
}

/// Exit 2, nothing on stdout, and one `tpuscope: error:` line on stderr.
fn assert_input_error(out: &Output, what: &str) {
    assert_eq!(out.status.code(), Some(2), "{what}: {}", show(out));
    assert!(out.stdout.is_empty(), "{what}: {}", show(out));
    let err = stderr(out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{what}: {}", show(out));
    assert!(
        lines[0].starts_with("tpuscope: error: "),
        "{what}: {}",
        show(out)
    );
}

#[test]
fn bad_inputs_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let text_file = dir.path().join("notes.txt");
    std::fs::write(&text_file, "hello, not a trace\n").unwrap();
    let missing = dir.path().join("missing.tps");
    let newer = repo_root().join("sample_traces/golden/v2.0-newer-major.tps");
    let lr = real("jax_lr.tps");
    let lr = path_str(&lr);

    let out = report(&[path_str(&text_file)], &[]);
    assert_input_error(&out, "text file");
    assert!(
        stderr(&out).contains("not a tpuscope trace"),
        "{}",
        show(&out)
    );

    let out = report(&[path_str(&missing)], &[]);
    assert_input_error(&out, "missing file");
    assert!(stderr(&out).contains("missing.tps"), "{}", show(&out));

    let out = report(&[path_str(&newer)], &[]);
    assert_input_error(&out, "newer major");
    assert!(stderr(&out).contains("newer"), "{}", show(&out));

    // A good trace before a bad one still fails the whole command, with nothing printed.
    let out = report(&[lr, path_str(&text_file)], &[]);
    assert_input_error(&out, "good then bad");

    for bad in ["foo=1", "compiles=abc", "recompiles", "compiles=-1"] {
        let out = report(&[lr, "--budget", bad], &[]);
        assert_input_error(&out, bad);
        assert!(stderr(&out).contains(bad), "{}", show(&out));
    }

    let not_json = dir.path().join("old.json");
    std::fs::write(&not_json, "this is not json").unwrap();
    assert_input_error(
        &report(&[lr, "--baseline", path_str(&not_json)], &[]),
        "baseline not JSON",
    );
    let other_json = dir.path().join("other.json");
    std::fs::write(&other_json, r#"{"recompiles": []}"#).unwrap();
    let out = report(&[lr, "--baseline", path_str(&other_json)], &[]);
    assert_input_error(&out, "baseline not a report");
    assert!(
        stderr(&out).contains("not a tpuscope JSON report"),
        "{}",
        show(&out)
    );
    assert_input_error(
        &report(&[lr, "--baseline", path_str(&missing)], &[]),
        "baseline missing",
    );
}

#[test]
fn cut_trace_reports_what_it_holds_and_warns() {
    let full = std::fs::read(real("jax_lr.tps")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.tps");
    std::fs::write(&cut, &full[..full.len() / 2]).unwrap();

    let out = report(&[path_str(&cut), "--format", "json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let err = stderr(&out);
    assert!(err.contains("warning") && err.contains("cut"), "{err}");
    let v = json_of(&out);
    assert_eq!(v["traces"][0]["completeness"], "cut");
    let (_, whole) = lr_json(&[]);
    let compiles = v["compiles"]["total"].as_u64().unwrap();
    assert!(
        compiles > 0,
        "the first half holds compiles: {}",
        v["compiles"]
    );
    assert!(compiles < whole["compiles"]["total"].as_u64().unwrap());
    assert!(!v["warnings"].as_array().unwrap().is_empty());

    let text = report(&[path_str(&cut)], &[]);
    assert_eq!(text.status.code(), Some(0), "{}", show(&text));
    let t = stdout(&text);
    assert!(t.contains("CUT"), "{t}");
    assert!(t.contains("Warnings"), "{t}");
    // A partial trace never reads as a clean run.
    assert!(!t.contains("No findings."), "{t}");
    assert!(t.contains(&format!("{compiles} compiles")), "{t}");

    // Budgets still apply to what it holds.
    let over = report(&[path_str(&cut), "--budget", "compiles=1"], &[]);
    assert_eq!(over.status.code(), Some(1), "{}", show(&over));
}

#[test]
fn closed_pipe_is_not_a_crash() {
    // Output larger than a pipe buffer, so the write meets the closed pipe whatever the timing.
    let lr = real("jax_lr.tps");
    let lr = path_str(&lr);
    let mut child = Command::new(tpuscope())
        .args(["report", "--format", "json", lr, lr, lr, lr, lr, lr, lr, lr])
        .current_dir(repo_root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 1];
    let mut so = child.stdout.take().unwrap();
    so.read_exact(&mut first).unwrap();
    drop(so);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(first[0], b'{');
}

#[test]
fn several_traces_say_how_they_were_related() {
    let (a, b) = (real("jax_lr.tps"), real("jax_shapes.tps"));
    let out = report(&[path_str(&a), path_str(&b), "--format", "json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let v = json_of(&out);
    assert_eq!(v["traces"].as_array().unwrap().len(), 2);
    assert_eq!(v["runs"]["assumed"], "successive_runs");
    let text = report(&[path_str(&a), path_str(&b)], &[]);
    let t = stdout(&text);
    let note = v["runs"]["note"].as_str().unwrap();
    assert!(t.contains(note), "{t}");
    assert!(t.contains("run 0:") && t.contains("run 1:"), "{t}");
}

#[test]
fn help_documents_formats_budgets_and_exit_status() {
    let out = Command::new(tpuscope())
        .args(["report", "--help"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let h = stdout(&out);
    for needle in [
        "markdown",
        "junit",
        "hbm-peak-fraction",
        "tpuscope.findings",
        "Exit status",
    ] {
        assert!(h.contains(needle), "no {needle} in --help:\n{h}");
    }
}
