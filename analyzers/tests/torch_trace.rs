//! The TORCH_TRACE reader on real logs (sample_traces/torch_trace/, recorded with the PJRT trace
//! next to them): graph breaks and guard failures at their lines, joined to the PJRT compiles
//! they caused; time zones, damaged files, other processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use tpuscope_analyzers::report::{self, Input, Report};
use tpuscope_analyzers::torch_trace::{self, TorchLogs};
use tpuscope_core::{Record, Trace};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn samples() -> PathBuf {
    root().join("sample_traces/torch_trace")
}

/// The example the torch_tpu sample was recorded from.
const EXAMPLE: &str = "examples/torch_tpu/graph_break_and_guard.py";

/// The line of `# tpuscope: <cause>` in the example.
fn marker(cause: &str) -> u32 {
    let text = std::fs::read_to_string(root().join(EXAMPLE)).unwrap();
    let needle = format!("# tpuscope: {cause}");
    let lines: Vec<u32> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| l.contains(&needle))
        .map(|(i, _)| i as u32 + 1)
        .collect();
    assert_eq!(lines.len(), 1, "{needle}: {lines:?}");
    lines[0]
}

/// A module constant of the example, e.g. `SCALES = (0.5, 0.25, 0.125)` → its tuple's length.
fn tuple_len(name: &str) -> u64 {
    let text = std::fs::read_to_string(root().join(EXAMPLE)).unwrap();
    let v = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} = ")))
        .unwrap();
    v.trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .count() as u64
}

fn read_dir_logs(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read_to_string(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

fn tpu_log() -> String {
    read_dir_logs(&samples().join("graph_break_and_guard.torch_trace"))
        .pop()
        .unwrap()
        .1
}

fn trace(name: &str) -> Trace {
    tpuscope_core::read_trace_file(&samples().join(name)).unwrap()
}

/// The report of `trace` with `files` as its logs.
fn report_with(trace: &Trace, files: Vec<(String, String)>) -> Report {
    let inputs = [Input::new("t.tps", trace)];
    let mut r = report::analyze(&inputs);
    torch_trace::attach(
        &mut r,
        &inputs,
        &[TorchLogs {
            trace_path: "t.tps".into(),
            dir: "t.torch_trace".into(),
            files,
            note: None,
        }],
    );
    r
}

fn compile_events(trace: &Trace) -> BTreeSet<usize> {
    trace
        .events
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!(r, Record::Compile(_)))
        .map(|(i, _)| i)
        .collect()
}

/// Rewrites every header's time as if the log had been written in a zone `shift_s` ahead of
/// the original (which was UTC), the day rolling over as needed.
fn shift_headers(text: &str, shift_s: i64) -> String {
    text.split('\n')
        .map(|l| {
            let b = l.as_bytes();
            let header = b.len() > 21
                && b[0] == b'V'
                && b[5] == b' '
                && b[8] == b':'
                && l[1..5].bytes().all(|c| c.is_ascii_digit());
            if !header {
                return l.to_string();
            }
            let (month, day): (i64, i64) = (l[1..3].parse().unwrap(), l[3..5].parse().unwrap());
            let h: i64 = l[6..8].parse().unwrap();
            let m: i64 = l[9..11].parse().unwrap();
            let s: i64 = l[12..14].parse().unwrap();
            let mut t = h * 3600 + m * 60 + s + shift_s;
            let mut day = day;
            // November has 30 days; the samples are from late November.
            let mut month = month;
            while t < 0 {
                t += 86_400;
                day -= 1;
            }
            while t >= 86_400 {
                t -= 86_400;
                day += 1;
                if day > 30 && month == 11 {
                    day = 1;
                    month = 12;
                }
            }
            format!(
                "V{month:02}{day:02} {:02}:{:02}:{:02}{}",
                t / 3600,
                t / 60 % 60,
                t % 60,
                &l[14..]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn torch_tpu_graph_break_and_guard_failure_at_their_lines_with_the_compiles_they_caused() {
    let t = trace("graph_break_and_guard.tps");
    let r = report_with(
        &t,
        read_dir_logs(&samples().join("graph_break_and_guard.torch_trace")),
    );
    let d = r.dynamo.as_ref().expect("no dynamo section");
    let json = serde_json::to_string_pretty(d).unwrap();
    assert_eq!(d.logs.len(), 1);
    assert_eq!(d.logs[0].skipped_lines, 0, "{json}");
    assert!(d.logs[0].other_pids.is_empty(), "{json}");
    assert_eq!(d.logs[0].utc_offset_min, Some(0), "recorded in UTC");
    assert!(d.logs[0].torch_version.starts_with("2.15"), "{json}");
    let compiles = compile_events(&t);

    // The graph break: once (the first call), at the marked line, with dynamo's own reason.
    assert_eq!(d.graph_breaks.len(), 1, "{json}");
    let gb = &d.graph_breaks[0];
    let src = gb.source.as_ref().unwrap();
    assert!(src.file.ends_with(EXAMPLE), "{json}");
    assert_eq!(src.line, marker("graph_break"), "{json}");
    assert_eq!(gb.count, 1);
    assert!(gb.reason.contains("graph_break()"), "{}", gb.reason);
    assert!(!gb.hint.is_empty(), "{json}");
    // It caused the compile of the graph before it and of the resume function after it.
    let graphs: BTreeSet<&str> = gb.compiles.iter().map(|c| c.graph.as_str()).collect();
    assert!(graphs.len() >= 2, "{json}");
    assert!(
        graphs
            .iter()
            .any(|g| g.contains(&format!("resume_in_step_at_{}", src.line))),
        "{graphs:?}"
    );
    assert!(gb.compiles.iter().all(|c| compiles.contains(&c.event)));

    // The guard failure: at the line reading the global, once per new value.
    assert_eq!(d.guard_failures.len(), 1, "{json}");
    let gf = &d.guard_failures[0];
    let src = gf.source.as_ref().unwrap();
    assert!(src.file.ends_with(EXAMPLE), "{json}");
    assert_eq!(src.line, marker("guard_failure"), "{json}");
    let recompiles = tuple_len("SCALES") - 1;
    assert_eq!(gf.count, recompiles, "{json}");
    assert!(gf.guards.iter().all(|g| g.contains("LOSS_SCALE")), "{json}");
    assert_eq!(gf.guards.len() as u64, recompiles, "one per old value");
    // Those recompiles are exactly the later members of the PJRT family the report found on its
    // own, from the programs alone.
    let fam = r
        .recompiles
        .iter()
        .find(|f| f.graph.contains("resume_in_step"))
        .expect("no recompile family of the resume function");
    assert_eq!(fam.count, recompiles + 1);
    let later: Vec<usize> = fam.members.iter().skip(1).map(|m| m.event).collect();
    let caused: Vec<usize> = gf.compiles.iter().map(|c| c.event).collect();
    assert_eq!(caused, later, "{json}");

    // Frame compiles: each PJRT compile belongs to at most one; all of them compiled something.
    let ids: Vec<&str> = d
        .frame_compiles
        .iter()
        .map(|f| f.compile_id.as_str())
        .collect();
    assert_eq!(ids, ["0/0", "1/0", "1/1", "1/2"], "{json}");
    let mut seen = BTreeSet::new();
    for f in &d.frame_compiles {
        assert!(
            !f.compiles.is_empty(),
            "{} compiled nothing\n{json}",
            f.compile_id
        );
        for c in &f.compiles {
            assert!(seen.insert(c.event), "compile {} twice\n{json}", c.event);
            assert!(compiles.contains(&c.event));
        }
    }
    let whys: Vec<&str> = d.frame_compiles.iter().map(|f| f.why.as_str()).collect();
    assert_eq!(
        whys,
        [
            "first",
            "graph_break_resume",
            "guard_failure",
            "guard_failure"
        ]
    );

    // Findings: the break on its own; the guard failure explains the recompile finding of the
    // same family rather than repeating it.
    let gbf: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.kind == tpuscope_analyzers::report::FindingKind::GraphBreak)
        .collect();
    assert_eq!(gbf.len(), 1, "{:?}", r.findings);
    assert_eq!(gbf[0].source.as_ref().unwrap().line, marker("graph_break"));
    assert!(
        gbf[0].title.starts_with("graph break at "),
        "{}",
        gbf[0].title
    );
    let rec: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.kind == tpuscope_analyzers::report::FindingKind::Recompile)
        .collect();
    assert_eq!(rec.len(), 1, "{:?}", r.findings);
    let needle = format!("graph_break_and_guard.py:{}", marker("guard_failure"));
    assert!(
        rec[0].title.contains("dynamo: guard `G['LOSS_SCALE']") && rec[0].title.contains(&needle),
        "{}",
        rec[0].title
    );
    assert!(
        r.findings
            .iter()
            .all(|f| f.kind != tpuscope_analyzers::report::FindingKind::GuardFailure)
    );
}

#[test]
fn the_time_zone_of_the_log_is_calibrated_from_the_log_itself() {
    let t = trace("graph_break_and_guard.tps");
    let utc = report_with(&t, vec![("a.log".into(), tpu_log())]);
    // India (+5:30) and a zone behind UTC whose local date is the day before.
    for (shift, minutes) in [(5 * 3600 + 1800, 330), (-7 * 3600, -420)] {
        let shifted = shift_headers(&tpu_log(), shift);
        assert_ne!(shifted, tpu_log());
        let r = report_with(&t, vec![("a.log".into(), shifted)]);
        let d = r.dynamo.as_ref().unwrap();
        assert_eq!(d.logs[0].utc_offset_min, Some(minutes));
        let u = utc.dynamo.as_ref().unwrap();
        let key = |d: &torch_trace::DynamoReport| {
            serde_json::to_value((&d.graph_breaks, &d.guard_failures, &d.frame_compiles)).unwrap()
        };
        assert_eq!(key(d), key(u), "shift {shift}");
    }
}

#[test]
fn a_damaged_log_gives_what_it_holds() {
    let clean = torch_trace::parse([tpu_log().as_str()]);
    let damaged_text = std::fs::read_to_string(samples().join("damaged.log")).unwrap();
    let damaged = torch_trace::parse([damaged_text.as_str()]);
    // Garbage, a broken header and its payload, an orphan payload line, a header of an unknown
    // level, and the cut last entry are skipped and counted.
    // 1 orphan + 1 garbage + broken header and its payload (2) + 1 unknown level + the cut
    // entry: its header, its one whole payload line and the cut line (3).
    assert_eq!(damaged.skipped_lines, 8);
    assert_eq!(clean.skipped_lines, 0);
    // Another process's entry is kept apart.
    assert!(damaged.processes.contains_key(&424242));
    let pid = *clean.processes.keys().next().unwrap();
    let (c, d) = (&clean.processes[&pid], &damaged.processes[&pid]);
    assert_eq!(c.graph_breaks, d.graph_breaks);
    // The second guard failure's entry was cut: dropped whole, the first kept.
    assert_eq!(c.guard_failures.len(), 2);
    assert_eq!(d.guard_failures.len(), 1);
    assert_eq!(c.guard_failures[0], d.guard_failures[0]);
    assert_eq!(c.utc_offset_s, d.utc_offset_s);

    // The report over it still works and says what it skipped.
    let t = trace("graph_break_and_guard.tps");
    let r = report_with(&t, vec![("damaged.log".into(), damaged_text)]);
    let dy = r.dynamo.as_ref().unwrap();
    assert_eq!(dy.logs[0].skipped_lines, damaged.skipped_lines);
    assert_eq!(dy.logs[0].other_pids, [424242]);
    assert_eq!(dy.graph_breaks.len(), 1);
    assert_eq!(dy.guard_failures[0].count, 1);

    // Nothing but garbage: no panic, nothing found.
    let p = torch_trace::parse(["\u{0}\u{1}garbage\n\t\tx\nV1122 zz\n", "", "V"]);
    assert!(p.processes.is_empty());
    assert_eq!(p.skipped_lines, 4);
}

#[test]
fn torch_xla_2_9_openxla_log_with_shortened_guard_paths() {
    let dir = samples().join("torch_xla_openxla.torch_trace");
    let files = read_dir_logs(&dir);
    let p = torch_trace::parse(files.iter().map(|(_, t)| t.as_str()));
    assert_eq!(p.skipped_lines, 0);
    let log = p.processes.values().next().unwrap();
    // torch 2.9 logs no `torch_version` artifact (2.15 does).
    assert!(log.torch_version.is_empty(), "{}", log.torch_version);
    // torch 2.9 writes the graph break's reason on its header line and the recompile reasons
    // as a JSON list without a user stack: the guard's path is shortened (`mp/tt/gbx.py`) and
    // resolved against the full paths the log names.
    assert_eq!(log.graph_breaks.len(), 1);
    let gb = &log.graph_breaks[0];
    assert!(
        gb.reason
            .starts_with("Call to `torch._dynamo.graph_break()`")
    );
    let resume = log
        .frames
        .values()
        .find(|f| f.function.starts_with("torch_dynamo_resume_in_"))
        .unwrap();
    assert!(resume.function.ends_with(&format!("_at_{}", gb.line)));
    assert_eq!(gb.file, resume.file);
    assert_eq!(log.guard_failures.len(), 1);
    let g = &log.guard_failures[0].guards[0];
    assert_eq!(g.guard, "G['scale'] == 1.0");
    assert_eq!(g.file, resume.file, "shortened path resolved");
    assert!(g.line > gb.line);

    let t = trace("torch_xla_openxla.tps");
    let r = report_with(&t, files);
    let d = r.dynamo.as_ref().unwrap();
    assert_eq!(d.graph_breaks.len(), 1);
    assert!(!d.graph_breaks[0].compiles.is_empty(), "{d:?}");
    assert_eq!(d.guard_failures.len(), 1);
    assert!(!d.guard_failures[0].compiles.is_empty(), "{d:?}");
}

#[test]
fn logs_of_other_processes_and_missing_logs() {
    let t = trace("graph_break_and_guard.tps");
    let alone = report_with(&t, vec![("a.log".into(), tpu_log())]);
    let xla = read_dir_logs(&samples().join("torch_xla_openxla.torch_trace"));
    let mut both = xla.clone();
    both.push(("a.log".into(), tpu_log()));
    let r = report_with(&t, both);
    let (a, b) = (alone.dynamo.unwrap(), r.dynamo.unwrap());
    assert_eq!(b.logs[0].other_pids.len(), 1);
    assert_eq!(b.logs[0].files, 2);
    assert_eq!(
        serde_json::to_value(&a.guard_failures).unwrap(),
        serde_json::to_value(&b.guard_failures).unwrap()
    );
    // Only another process's log: said, nothing reported.
    let r = report_with(&t, xla);
    let d = r.dynamo.unwrap();
    assert!(d.logs[0].note.contains("pid"), "{:?}", d.logs);
    assert!(d.graph_breaks.is_empty());
    assert!(
        r.findings
            .iter()
            .all(|f| f.kind != tpuscope_analyzers::report::FindingKind::GraphBreak)
    );

    // The directory is gone: a note, no error, no findings.
    let inputs = [Input::new("t.tps", &t)];
    let mut r = report::analyze(&inputs);
    let before = r.findings.len();
    torch_trace::attach(
        &mut r,
        &inputs,
        &[TorchLogs {
            trace_path: "t.tps".into(),
            dir: "/nonexistent.torch_trace".into(),
            files: Vec::new(),
            note: Some("gone".into()),
        }],
    );
    let d = r.dynamo.as_ref().unwrap();
    assert_eq!(d.logs[0].note, "gone");
    assert_eq!(r.findings.len(), before);
    // No logs at all: no section.
    let mut r = report::analyze(&inputs);
    torch_trace::attach(&mut r, &inputs, &[]);
    assert!(r.dynamo.is_none());
}
