//! Acceptance: injected plugin errors reach the workload exactly as without tpuscope and are in
//! the trace; many Python threads compiling and reading under the collector finish.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use tpuscope_core::event::Record;

const SPEC: &str = "compile:error@2,execute:error@4,execute:delay_ms=200@5,to_host:error@3";

#[test]
fn injected_errors_reach_the_workload_unchanged_and_are_recorded() {
    let py = venv_python("jax");
    let cpu = cpu_plugin("jax");
    let fault = fault_plugin();
    let dir = tempfile::tempdir().unwrap();

    // Without tpuscope: the fault plugin directly under JAX.
    let direct = std::process::Command::new(&py)
        .arg(workload("jax_faults.py"))
        .env(
            "PJRT_NAMES_AND_LIBRARY_PATHS",
            format!("tpuscope:{}", fault.display()),
        )
        .env("JAX_PLATFORMS", "tpuscope")
        .env("TPUSCOPE_FAULT_REAL_PLUGIN", &cpu)
        .env("TPUSCOPE_FAULT_SPEC", SPEC)
        .output()
        .unwrap();
    assert!(direct.status.success(), "{}", show(&direct));
    let direct_out = String::from_utf8_lossy(&direct.stdout).into_owned();
    assert!(
        direct_out.contains("tpuscope fault injection: compile call #2"),
        "{direct_out}"
    );
    assert!(
        direct_out.contains("tpuscope fault injection: execute call #4"),
        "{direct_out}"
    );

    let out = run_tpuscope(
        &[
            "run",
            "--out",
            dir.path().to_str().unwrap(),
            "--plugin",
            fault.to_str().unwrap(),
            "--",
            py.to_str().unwrap(),
            workload("jax_faults.py").to_str().unwrap(),
        ],
        &[
            ("TPUSCOPE_FAULT_REAL_PLUGIN", cpu.to_str().unwrap()),
            ("TPUSCOPE_FAULT_SPEC", SPEC),
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        direct_out,
        "the workload saw different errors under tpuscope"
    );

    let trace = only_trace(dir.path());
    let errors: Vec<_> = trace
        .events
        .iter()
        .filter_map(|r| {
            if let Record::Error(e) = r {
                Some(e)
            } else {
                None
            }
        })
        .collect();
    let by_api = |api: &str| errors.iter().filter(|e| e.api == api).collect::<Vec<_>>();
    let compile_errs = by_api("PJRT_Client_Compile");
    assert_eq!(compile_errs.len(), 1, "{errors:?}");
    assert_eq!(compile_errs[0].code, 3);
    assert_eq!(
        compile_errs[0].message,
        "tpuscope fault injection: compile call #2"
    );
    let exec_errs = by_api("PJRT_LoadedExecutable_Execute");
    assert_eq!(exec_errs.len(), 1, "{errors:?}");
    assert_eq!(
        exec_errs[0].message,
        "tpuscope fault injection: execute call #4"
    );
    // The failed compile is a compile event carrying the error.
    let failed: Vec<_> = trace
        .events
        .iter()
        .filter_map(|r| {
            if let Record::Compile(c) = r {
                c.error.as_ref()
            } else {
                None
            }
        })
        .collect();
    assert_eq!(failed.len(), 1);
    // The delayed execute shows its delay as host dispatch time.
    let slow = trace
        .events
        .iter()
        .filter(|r| matches!(r, Record::Execute(e) if e.dur_ns >= 200_000_000))
        .count();
    assert_eq!(slow, 1);
    // Every error the workload printed is in the trace.
    for line in direct_out.lines().filter(|l| l.contains("fault injection")) {
        assert!(
            errors.iter().any(|e| line.contains(&e.message)),
            "{line} not in {errors:?}"
        );
    }
}

/// Eight Python threads compile and read for 60 s (CI; 20 s locally) under the collector; the run
/// finishes and every thread completes.
#[test]
fn eight_threads_compiling_and_reading_finish() {
    let py = venv_python("jax");
    let dir = tempfile::tempdir().unwrap();
    let secs = if std::env::var("CI").is_ok_and(|v| v == "true") {
        "60"
    } else {
        "20"
    };
    let started = std::time::Instant::now();
    let out = run_tpuscope(
        &[
            "run",
            "--out",
            dir.path().to_str().unwrap(),
            "--",
            py.to_str().unwrap(),
            workload("threads_stress.py").to_str().unwrap(),
        ],
        &[
            ("TPUSCOPE_STRESS_THREADS", "8"),
            ("TPUSCOPE_STRESS_SECONDS", secs),
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", show(&out));
    let secs: u64 = secs.parse().unwrap();
    assert!(
        started.elapsed().as_secs() < secs + 120,
        "took {:?}",
        started.elapsed()
    );
    let result = stdout_lines_with(&out, "RESULT");
    assert_eq!(
        result,
        vec!["RESULT threads_stress threads=8 finished=8 errors=0".to_string()],
        "{}",
        show(&out)
    );
    let trace = only_trace(dir.path());
    assert_eq!(trace.completeness, tpuscope_core::Completeness::Complete);
    assert!(count(&trace, "compile") > 8, "{:?}", kinds(&trace));
    assert!(count(&trace, "transfer_d2h") > 8, "{:?}", kinds(&trace));
    // Compiles run on JAX's worker threads, host reads on the 8 Python threads: reads carry stacks.
    let with_stack = trace
        .events
        .iter()
        .filter(|r| matches!(r, Record::Transfer(t) if t.stack != 0))
        .count();
    eprintln!("kinds {:?}; d2h with stack {with_stack}", kinds(&trace));
}

/// A launcher with two worker processes: each worker writes its own trace, nothing is overwritten,
/// and `--out FILE` names the first while the second gets a sibling named for its host and pid.
#[test]
fn every_instrumented_process_writes_its_own_trace() {
    let py = venv_python("jax");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.tps");
    let out = run_tpuscope(
        &[
            "run",
            "--out",
            file.to_str().unwrap(),
            "--",
            py.to_str().unwrap(),
            workload("multi_process.py").to_str().unwrap(),
        ],
        &[],
        dir.path(),
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        stdout_lines_with(&out, "RESULT"),
        vec!["RESULT multi_process workers=2 codes=[0, 0] same=True".to_string()]
    );
    let traces = traces_in(dir.path());
    assert_eq!(traces.len(), 2, "{traces:?}");
    assert!(traces.contains(&file), "{traces:?}");
    let pids: std::collections::HashSet<u32> = traces
        .iter()
        .map(|p| {
            tpuscope_core::read_trace_file(p)
                .unwrap()
                .manifest
                .unwrap()
                .pid
        })
        .collect();
    assert_eq!(pids.len(), 2);
    for p in &traces {
        let t = tpuscope_core::read_trace_file(p).unwrap();
        assert_eq!(t.completeness, tpuscope_core::Completeness::Complete);
        assert!(count(&t, "compile") >= 4);
        let pid = t.manifest.as_ref().unwrap().pid;
        if *p != file {
            assert!(
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .contains(&format!("-{pid}")),
                "{p:?}"
            );
        }
    }
    // The summary names both traces.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("tpuscope: trace ").count(), 2, "{err}");
}

/// A device out of memory (injected with libtpu's wording) gets a post-mortem in the report: the
/// failing call, the last launches before it, the largest compiled executables.
#[test]
fn out_of_memory_gets_a_post_mortem_in_the_report() {
    let py = venv_python("jax");
    let cpu = cpu_plugin("jax");
    let fault = fault_plugin();
    let dir = tempfile::tempdir().unwrap();
    let out = run_tpuscope(
        &[
            "run",
            "--quiet",
            "--out",
            dir.path().to_str().unwrap(),
            "--plugin",
            fault.to_str().unwrap(),
            "--",
            py.to_str().unwrap(),
            workload("jax_faults.py").to_str().unwrap(),
        ],
        &[
            ("TPUSCOPE_FAULT_REAL_PLUGIN", cpu.to_str().unwrap()),
            ("TPUSCOPE_FAULT_SPEC", "execute:oom@6"),
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Ran out of memory"), "{stdout}");
    let traces = traces_in(dir.path());
    let rep = run_tpuscope(
        &["report", "--format", "json", traces[0].to_str().unwrap()],
        &[],
        dir.path(),
    );
    assert!(rep.status.success(), "{}", show(&rep));
    let v: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap();
    let oom = &v["oom"];
    assert!(
        oom["message"]
            .as_str()
            .unwrap()
            .contains("Ran out of memory"),
        "{oom}"
    );
    assert!(oom["api"].as_str().unwrap().contains("Execute"), "{oom}");
    let last = oom["last_events"].as_array().unwrap();
    // Five launches succeeded before the sixth failed.
    assert!(
        last.iter()
            .filter(|e| e.as_str().unwrap().contains("execute"))
            .count()
            >= 5,
        "{last:?}"
    );
    assert!(!oom["largest_executables"].as_array().unwrap().is_empty());
    assert!(
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["kind"] == "oom"),
        "{}",
        v["findings"]
    );
}
