//! `tpuscope export` end to end on a committed real trace: Chrome trace-event JSON (plain and
//! gzip), flamegraph SVG, refusal to overwrite, and bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{repo_root, show, tpuscope};
use serde_json::Value;
use tpuscope_core::event::Record;

fn jax_lr() -> PathBuf {
    repo_root().join("sample_traces/real/jax_lr.tps")
}

fn export(trace: &Path, args: &[&str]) -> Output {
    Command::new(tpuscope())
        .arg("export")
        .arg(trace)
        .args(args)
        .output()
        .unwrap()
}

fn export_ok(trace: &Path, args: &[&str]) {
    let out = export(trace, args);
    assert!(out.status.success(), "{}", show(&out));
    assert!(out.stdout.is_empty(), "{}", show(&out));
}

fn events(doc: &Value) -> &Vec<Value> {
    doc["traceEvents"].as_array().expect("traceEvents array")
}

#[test]
fn chrome_json_has_every_compile_lane_and_memory_counter() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.json");
    export_ok(
        &jax_lr(),
        &["--format", "chrome-json", "-o", out.to_str().unwrap()],
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(doc["displayTimeUnit"], "ms");
    let ev = events(&doc);

    let trace = tpuscope_core::read_trace_file(&jax_lr()).unwrap();
    let compiles = trace
        .events
        .iter()
        .filter(|r| matches!(r, Record::Compile(_)))
        .count();
    let compile_x = ev
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "compile")
        .count();
    assert!(compiles > 0);
    assert_eq!(compile_x, compiles);

    // Every compile's name is its executable's, with the program format in its args.
    for e in ev.iter().filter(|e| e["cat"] == "compile") {
        assert!(e["name"].as_str().unwrap().starts_with("jit_"), "{e}");
        assert_eq!(e["args"]["program_format"], "mlir", "{e}");
        assert!(e["dur"].as_f64().unwrap() > 0.0, "{e}");
    }

    // One named lane per host thread and per device the trace mentions.
    let mut threads = BTreeSet::new();
    let mut devices = BTreeSet::new();
    let mut memory = 0;
    for r in &trace.events {
        match r {
            Record::Compile(c) => _ = threads.insert(c.thread),
            Record::Execute(e) => _ = threads.insert(e.thread),
            Record::Transfer(t) => _ = threads.insert(t.thread),
            Record::ExecuteComplete(c) => _ = devices.insert(c.device_index),
            Record::Memory(_) => memory += 1,
            _ => {}
        }
    }
    let lane_names: BTreeSet<String> = ev
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(!threads.is_empty() && !devices.is_empty());
    for t in &threads {
        assert!(
            lane_names.contains(&format!("thread {t}")),
            "{lane_names:?}"
        );
    }
    for d in &devices {
        assert!(
            lane_names.contains(&format!("device {d}")),
            "{lane_names:?}"
        );
    }
    let process = ev.iter().find(|e| e["name"] == "process_name").unwrap();
    assert!(
        process["args"]["name"]
            .as_str()
            .unwrap()
            .contains("jax_lr.py")
    );

    // Device work: one event per completion, on a device lane.
    let completions = trace
        .events
        .iter()
        .filter(|r| matches!(r, Record::ExecuteComplete(_)))
        .count();
    let device_x: Vec<&Value> = ev.iter().filter(|e| e["cat"] == "device").collect();
    assert_eq!(device_x.len(), completions);
    assert!(
        device_x
            .iter()
            .all(|e| e["tid"].as_u64().unwrap() >= 1_000_000)
    );

    let counters: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "C").collect();
    assert!(memory > 0);
    assert_eq!(counters.len(), memory);
    for c in &counters {
        assert!(
            c["name"].as_str().unwrap().starts_with("HBM device "),
            "{c}"
        );
        assert!(c["args"]["bytes_in_use"].as_i64().is_some(), "{c}");
    }

    // Times relative to the run's start, durations never negative.
    for e in ev.iter().filter(|e| e["ph"] != "M") {
        assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}");
        if e["ph"] == "X" {
            assert!(e["dur"].as_f64().unwrap() >= 0.0, "{e}");
        }
    }
}

#[test]
fn gz_output_decompresses_to_the_same_json() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("t.json");
    let gz = dir.path().join("t.json.gz");
    export_ok(
        &jax_lr(),
        &["--format", "chrome-json", "-o", plain.to_str().unwrap()],
    );
    export_ok(
        &jax_lr(),
        &["--format", "chrome-json", "-o", gz.to_str().unwrap()],
    );
    let compressed = std::fs::read(&gz).unwrap();
    assert_eq!(&compressed[..2], &[0x1f, 0x8b], "gzip magic");
    let mut text = String::new();
    flate2::read::GzDecoder::new(compressed.as_slice())
        .read_to_string(&mut text)
        .unwrap();
    let a: Value = serde_json::from_str(&text).unwrap();
    let b: Value = serde_json::from_slice(&std::fs::read(&plain).unwrap()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn flamegraph_svg_of_compile_and_sync_time() {
    let dir = tempfile::tempdir().unwrap();
    let compile = dir.path().join("c.svg");
    export_ok(
        &jax_lr(),
        &[
            "--format",
            "flamegraph-svg",
            "-o",
            compile.to_str().unwrap(),
        ],
    );
    let svg = std::fs::read_to_string(&compile).unwrap();
    assert!(
        svg.starts_with("<?xml") || svg.starts_with("<svg"),
        "{}",
        &svg[..80]
    );
    assert!(svg.contains("jax_lr.py"));
    assert!(svg.contains("Compile time"));

    let sync = dir.path().join("s.svg");
    export_ok(
        &jax_lr(),
        &[
            "--format",
            "flamegraph-svg",
            "--flame",
            "sync",
            "-o",
            sync.to_str().unwrap(),
        ],
    );
    let svg = std::fs::read_to_string(&sync).unwrap();
    assert!(svg.contains("Host sync stall"));
    assert_ne!(svg, std::fs::read_to_string(&compile).unwrap());
}

#[test]
fn existing_output_is_kept_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.json");
    std::fs::write(&out, "precious").unwrap();
    let o = export(
        &jax_lr(),
        &["--format", "chrome-json", "-o", out.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("tpuscope: error:") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "precious");

    export_ok(
        &jax_lr(),
        &[
            "--format",
            "chrome-json",
            "--force",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert!(!events(&doc).is_empty());
}

#[test]
fn not_a_trace_is_one_error_line_and_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("bogus.tps");
    std::fs::write(&bogus, "this is not a trace\n").unwrap();
    for format in ["chrome-json", "flamegraph-svg"] {
        let out = dir.path().join(format!("o-{format}"));
        let o = export(&bogus, &["--format", format, "-o", out.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("tpuscope: error:"), "{err}");
        assert!(err.contains("bogus.tps"), "{err}");
        assert!(!out.exists());
    }
}

/// A plugin reused a destroyed executable's address for the next compile: the export and the
/// dump name each launch after the executable it ran (as the report counts it), not after the
/// first executable that had the address.
#[test]
fn a_launch_at_a_reused_address_is_named_after_its_own_executable() {
    use tpuscope_core::TraceWriter;
    use tpuscope_core::event::{Compile, End, Execute, Manifest};
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("reuse.tps");
    let mut w =
        TraceWriter::new(std::fs::File::create(&trace).unwrap(), &Manifest::default()).unwrap();
    let compile = |t_ns, name: &str| {
        Record::Compile(Box::new(Compile {
            t_ns,
            dur_ns: 1_000,
            executable_name: name.into(),
            executable_id: 0x7f00,
            ..Compile::default()
        }))
    };
    let execute = |t_ns| {
        Record::Execute(Execute {
            t_ns,
            dur_ns: 100,
            executable_id: 0x7f00,
            ..Execute::default()
        })
    };
    for r in [
        compile(1_000, "jit_warm_up"),
        execute(5_000),
        compile(10_000, "jit_train_step"),
        execute(20_000),
        execute(30_000),
        Record::End(End {
            t_ns: 40_000,
            ..End::default()
        }),
    ] {
        w.write(&r).unwrap();
    }
    w.flush().unwrap();
    drop(w);

    let out = dir.path().join("t.json");
    export_ok(
        &trace,
        &["--format", "chrome-json", "-o", out.to_str().unwrap()],
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let launches: Vec<&str> = events(&doc)
        .iter()
        .filter(|e| e["ph"] == "X" && e["cat"] == "execute")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        launches,
        ["jit_warm_up", "jit_train_step", "jit_train_step"],
        "{launches:?}"
    );

    let dump = Command::new(tpuscope())
        .arg("dump")
        .arg(&trace)
        .output()
        .unwrap();
    assert!(dump.status.success(), "{}", show(&dump));
    let text = String::from_utf8(dump.stdout).unwrap();
    let named: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split(" execute ").nth(1)?.split_whitespace().next())
        .collect();
    assert_eq!(
        named,
        ["jit_warm_up", "jit_train_step", "jit_train_step"],
        "{text}"
    );
}
