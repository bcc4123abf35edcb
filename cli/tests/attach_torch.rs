//! `tpuscope attach PID` on torch_xla 2.9 and TorchTPU 0.2.0 training loops NOT started under
//! tpuscope, each on the real CPU plugin behind the test-only fault plugin (it makes the ABI
//! fixes these frontends need on that plugin: torch_xla's short `PJRT_ExecuteOptions`, TorchTPU's
//! `premapped_buffer_size` create option). Two plugins are mapped, so the attach names the one
//! the frontend calls through (`--plugin`). Attach, detach, attach again: compiles after the
//! attach, executes of an executable compiled before it, no more compiles than the frontend's
//! own counter says happened, findings that name the graph the workload really recompiles; the
//! workload's output and exit code are those of a run nobody attached to.
//!
//! Needs the fault plugin built (`cargo build -p tpuscope-fault-plugin`), like the other tests
//! that use it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use common::attach::{CLOSE_WAIT, Recipe, Target, closed_trace};
use common::*;
use tpuscope_core::event::{ExecutableSeen, Record};

/// The line of `needle` in a workload script (1-based).
fn line_of(script: &str, needle: &str) -> u64 {
    let text = std::fs::read_to_string(workload(script)).unwrap();
    text.lines().position(|l| l.contains(needle)).unwrap() as u64 + 1
}

/// What differs between the frontends: how they start, and what their sessions must show.
struct Frontend {
    recipe: Recipe,
    /// The format of the programs the frontend hands PJRT.
    program_format: &'static str,
    /// Checks one session's trace against what the workload does.
    check_trace: fn(&Trace, &[&ExecutableSeen]),
    /// Checks one `recompile` finding of the snapshot.
    check_recompile: fn(&serde_json::Value),
    /// How a name `attached.executables_before` of the snapshot must list begins (torch_xla
    /// names every graph `SyncTensorsGraph.N`).
    before: &'static str,
}

fn torch_xla() -> Frontend {
    Frontend {
        recipe: Recipe {
            env_name: "torch_xla",
            script: "attach_torch_xla.py",
            env: vec![
                (
                    "ATTACH_PJRT_PLUGIN".into(),
                    fault_plugin().display().to_string(),
                ),
                (
                    "TPUSCOPE_FAULT_REAL_PLUGIN".into(),
                    cpu_plugin("torch_xla").display().to_string(),
                ),
                ("TPUSCOPE_FAULT_EXTEND_EXECUTE_OPTIONS".into(), "1".into()),
                ("PJRT_DEVICE".into(), "cpuplugin".into()),
            ],
        },
        program_format: "hlo",
        check_trace: |trace, seen| {
            let compiled: HashSet<&str> = compiles(trace)
                .iter()
                .map(|c| c.executable_name.as_str())
                .collect();
            for name in &compiled {
                assert!(name.starts_with("SyncTensorsGraph."), "{name}");
            }
            // `weight_norm`'s graph: compiled before READY, never again, run every iteration.
            assert!(
                seen.iter()
                    .any(|x| x.executable_name.starts_with("SyncTensorsGraph.")
                        && !compiled.contains(x.executable_name.as_str())),
                "weight_norm's graph was not identified: seen {:?}, compiled {compiled:?}",
                seen.iter().map(|x| &x.executable_name).collect::<Vec<_>>()
            );
        },
        check_recompile: |f| {
            // The slice whose start is the Python int `off`, in train_step's graph.
            let line = line_of("attach_torch_xla.py", "# off: baked into the graph");
            assert_eq!(f["source"]["line"], line, "{f}");
            assert_eq!(f["source"]["function"], "train_step", "{f}");
            let title = f["title"].as_str().unwrap();
            assert!(title.starts_with("SyncTensorsGraph."), "{f}");
            assert!(title.contains("slice bounds"), "{f}");
        },
        before: "SyncTensorsGraph",
    }
}

/// The SGD update: its shapes are the parameters', which never change, so it compiles once,
/// before READY.
const TORCH_TPU_UPDATE: &str = "tt_jit_foreach_add_";

fn torch_tpu() -> Frontend {
    Frontend {
        recipe: Recipe {
            env_name: "torch_tpu",
            script: "attach_torch_tpu.py",
            env: vec![
                (
                    "TPU_LIBRARY_PATH".into(),
                    fault_plugin().display().to_string(),
                ),
                (
                    "TPUSCOPE_FAULT_REAL_PLUGIN".into(),
                    cpu_plugin("torch_tpu").display().to_string(),
                ),
                (
                    "TPUSCOPE_FAULT_DROP_CREATE_OPTIONS".into(),
                    "premapped_buffer_size".into(),
                ),
            ],
        },
        program_format: "mlir",
        check_trace: |trace, seen| {
            let compiled: HashSet<&str> = compiles(trace)
                .iter()
                .map(|c| c.executable_name.as_str())
                .collect();
            // A new batch size compiles the forward at least; the update never.
            assert!(compiled.contains("tt_jit_linear"), "{compiled:?}");
            assert!(!compiled.contains(TORCH_TPU_UPDATE), "{compiled:?}");
            assert!(
                seen.iter().any(|x| x.executable_name == TORCH_TPU_UPDATE),
                "{TORCH_TPU_UPDATE} was not identified: seen {:?}",
                seen.iter().map(|x| &x.executable_name).collect::<Vec<_>>()
            );
        },
        check_recompile: |f| {
            let title = f["title"].as_str().unwrap();
            assert!(title.contains("tt_jit_linear"), "{f}");
            assert!(!title.contains(TORCH_TPU_UPDATE), "{f}");
        },
        before: TORCH_TPU_UPDATE,
    }
}

type Trace = tpuscope_core::reader::Trace;

/// One attach session's trace: closed, role attach, compiles after the attach (never of an
/// executable seen before it), executables compiled before it identified with their optimized
/// program and their executes named. Returns the number of compiles.
fn check_session(fe: &Frontend, trace_path: &Path) -> usize {
    let trace = closed_trace(trace_path, CLOSE_WAIT);
    let m = trace.manifest.as_ref().unwrap();
    assert_eq!(m.role, "attach");
    assert!(m.process_start_wall_ns > 0 && m.process_start_wall_ns < m.start_wall_ns);
    assert!(
        trace.end.is_some(),
        "the session's trace was not closed at detach"
    );
    assert!(
        trace
            .events
            .iter()
            .any(|r| matches!(r, Record::Note(n) if n.topic == "detach")),
        "no detach note"
    );
    let seen: Vec<&ExecutableSeen> = trace
        .events
        .iter()
        .filter_map(|r| match r {
            Record::ExecutableSeen(x) => Some(&**x),
            _ => None,
        })
        .collect();
    let executed: HashSet<u64> = trace
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Execute(e) => Some(e.executable_id),
            _ => None,
        })
        .collect();
    assert!(!seen.is_empty(), "nothing compiled before the attach seen");
    for x in &seen {
        assert!(
            x.optimized_hash != 0 && trace.blobs.contains_key(&x.optimized_hash),
            "{}",
            x.executable_name
        );
        assert!(executed.contains(&x.executable_id), "{}", x.executable_name);
    }
    let compiles = compiles(&trace);
    assert!(
        !compiles.is_empty(),
        "no compile after the attach in {}",
        trace_path.display()
    );
    for c in &compiles {
        assert_eq!(c.program_format, fe.program_format);
        assert!(trace.blobs.contains_key(&c.program_hash));
        assert!(seen.iter().all(|x| x.executable_id != c.executable_id));
    }
    (fe.check_trace)(&trace, &seen);
    compiles.len()
}

/// The snapshot of the first session: the state, what it could not see, and findings that name
/// what the workload really recompiles.
fn check_snapshot(fe: &Frontend, target: &Target, out: &std::process::Output) {
    assert!(out.status.success(), "{}", show(out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("attached to pid"), "{err}");
    let state: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(state["pid"], target.pid());
    assert!(state["compiles"]["total"].as_u64().unwrap() >= 1, "{state}");
    let attached = &state["traces"][0]["attached"];
    assert!(
        attached["executables_before"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().is_some_and(|n| n.starts_with(fe.before))),
        "{attached}"
    );
    assert!(
        attached["process_age_s"].as_f64().unwrap() > 0.0,
        "{attached}"
    );
    let findings = state["findings"].as_array().unwrap();
    let recompiles: Vec<_> = findings
        .iter()
        .filter(|f| f["kind"] == "recompile")
        .collect();
    assert!(!recompiles.is_empty(), "{findings:?}");
    for f in recompiles {
        (fe.check_recompile)(f);
    }
}

/// `ATTACH_COUNTS ready=R end=E …` on the workload's stderr: the frontend's own compile count
/// when it printed READY and when its loop ended.
fn frontend_compiles(stderr: &str) -> (u64, u64) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("ATTACH_COUNTS "))
        .unwrap_or_else(|| panic!("no ATTACH_COUNTS line: {stderr}"));
    let field = |key: &str| -> u64 {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key))
            .unwrap()
            .parse()
            .unwrap()
    };
    (field("ready="), field("end="))
}

fn attach_detach_and_attach_again(fe: &Frontend) {
    let reference = fe.recipe.plain_stdout();
    let mut target = fe.recipe.start();
    let plugin = fault_plugin();
    let plugin = plugin.to_str().unwrap();

    let first = target.path("first.tps");
    let out = target.attach(&[
        "--plugin",
        plugin,
        "--snapshot",
        "--json",
        // Long enough for a recompile finding under load: it needs compiles in a few steps.
        "--duration",
        "5",
        "--out",
        first.to_str().unwrap(),
    ]);
    check_snapshot(fe, &target, &out);
    assert!(
        target.wait_detached(Duration::from_secs(10)),
        "never detached"
    );
    let first_compiles = check_session(fe, &first);

    // Again: the collector is loaded already; a new session with its own trace.
    let second = target.path("second.tps");
    let out = target.attach(&[
        "--plugin",
        plugin,
        "--duration",
        "2",
        "--out",
        second.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("pid {}: ", target.pid())),
        "{text}"
    );
    assert!(text.contains("attached to a process"), "{text}");
    assert!(
        target.wait_detached(Duration::from_secs(10)),
        "never detached"
    );
    let second_compiles = check_session(fe, &second);

    let done = target.finish();
    done.assert_like_plain_run(&reference, 2);
    // Both sessions lie between READY and the loop's end: together they cannot have seen more
    // compiles than the frontend counted there.
    let (ready, end) = frontend_compiles(&done.stderr);
    let traced = (first_compiles + second_compiles) as u64;
    assert!(
        traced <= end - ready,
        "{traced} compiles traced, the frontend counted {} after READY",
        end - ready
    );
    eprintln!(
        "compiles traced {first_compiles} + {second_compiles}, frontend counted {} after READY",
        end - ready
    );
}

#[test]
fn torch_xla_attach_detach_and_attach_again_leaves_the_workload_unchanged() {
    attach_detach_and_attach_again(&torch_xla());
}

#[test]
fn torch_tpu_attach_detach_and_attach_again_leaves_the_workload_unchanged() {
    attach_detach_and_attach_again(&torch_tpu());
}
