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

/// A JAX training-style loop: `STEPS` jitted steps, each read back to the host. With
/// `XFSZ_DEFAULT=1` it first restores SIGXFSZ's default action (Python ignores it), as a
/// non-Python host would have it.
const XFSZ_LOOP: &str = r#"
import os, signal
if os.environ.get("XFSZ_DEFAULT") == "1":
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
import jax, jax.numpy as jnp

@jax.jit
def step(w, x):
    return w - 0.01 * jnp.tanh(w @ x)

steps = int(os.environ.get("STEPS", "2000"))
w = jnp.ones((32, 32))
total = 0.0
for i in range(steps):
    w = step(w, jnp.full((32, 32), (i % 7) * 0.1))
    total += float(w[0, 0])
print(f"RESULT steps={steps} checksum={total:.4f}")
"#;

/// The loop's output without tpuscope (the CPU plugin loaded directly).
fn xfsz_loop_direct(script: &std::path::Path) -> String {
    let out = std::process::Command::new(venv_python("jax"))
        .arg(script)
        .env(
            "PJRT_NAMES_AND_LIBRARY_PATHS",
            format!("cpuplugin:{}", cpu_plugin("jax").display()),
        )
        .env("JAX_PLATFORMS", "cpuplugin")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// `tpuscope run` of the loop under `ulimit -f <kib>`, with extra environment.
fn run_under_ulimit(
    dir: &std::path::Path,
    script: &std::path::Path,
    kib: u64,
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut c = std::process::Command::new("bash");
    c.arg("-c")
        .arg(format!("ulimit -f {kib}; exec \"$0\" \"$@\""))
        .arg(tpuscope())
        .args(["run", "--no-tui", "--out"])
        .arg(dir)
        .arg("--")
        .arg(venv_python("jax"))
        .arg(script)
        .current_dir(dir)
        .env("TPUSCOPE_COLLECTOR", collector());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// The collector's own lines (not `tracing to`, not the run summary's indented lines).
fn collector_lines(out: &std::process::Output) -> Vec<String> {
    tpuscope_lines(out)
        .into_iter()
        // The summary's header is `tpuscope: trace PATH (PLATFORM)`, without a `;`.
        .filter(|l| {
            let summary_header = l.starts_with("tpuscope: trace ") && !l.contains(';');
            !l.starts_with("tpuscope: tracing to") && !summary_header
        })
        .collect()
}

fn xfsz_script(dir: &std::path::Path) -> std::path::PathBuf {
    let script = dir.join("xfsz_loop.py");
    std::fs::write(&script, XFSZ_LOOP).unwrap();
    script
}

/// `ulimit -f` with SIGXFSZ at its default: the collector's writes must not kill the workload
/// (before: exit 153 at the first write past the limit). The trace ends with the stop record,
/// and the run summary and the report say how much is missing.
#[test]
fn a_file_size_limit_with_sigxfsz_at_its_default_never_kills_the_workload() {
    let dir = tempfile::tempdir().unwrap();
    let script = xfsz_script(dir.path());
    let direct = xfsz_loop_direct(&script);
    let out = run_under_ulimit(dir.path(), &script, 256, &[("XFSZ_DEFAULT", "1")]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), direct);
    let ours = collector_lines(&out);
    assert_eq!(ours.len(), 1, "{}", show(&out));
    assert!(
        ours[0].contains("reached the file size limit (ulimit -f: 262144 bytes)"),
        "{}",
        ours[0]
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("  warning: ") && err.contains(": recording stopped early, "),
        "{err}"
    );
    // The kinds are listed by count, and execute_complete can outnumber execute by one.
    let listed = err
        .split("events not recorded (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_default();
    assert!(
        listed.split(", ").any(|kind| kind.starts_with("execute ")),
        "{err}"
    );

    let path = traces_in(dir.path()).remove(0);
    assert!(std::fs::metadata(&path).unwrap().len() <= 256 << 10);
    let trace = only_trace(dir.path());
    assert_eq!(trace.completeness, tpuscope_core::Completeness::Complete);
    let stopped = trace.recording_stopped().expect("a stop record");
    assert!(
        stopped.reason.contains("file size limit"),
        "{}",
        stopped.reason
    );
    let executes = count(&trace, "execute") as u64;
    let missing: u64 = stopped
        .not_recorded
        .iter()
        .filter(|k| k.kind == "execute")
        .map(|k| k.count)
        .sum();
    // Each step launches the jitted step (and a few eager ops); all were seen, most not recorded.
    assert!(executes + missing >= 2000, "{executes} + {missing}");
    assert!(missing > executes / 2, "{executes} recorded, {missing} not");

    let report = run_tpuscope(
        &["report", "--format", "json", path.to_str().unwrap()],
        &[],
        dir.path(),
    );
    assert!(report.status.success(), "{}", show(&report));
    let json: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let s = &json["traces"][0]["recording_stopped"];
    assert_eq!(s["not_recorded"]["execute"].as_u64(), Some(missing), "{s}");
    let share = s["share_after"].as_f64().unwrap();
    assert!(share > 0.2 && share < 1.0, "{s}");
    let text = run_tpuscope(&["report", path.to_str().unwrap()], &[], dir.path());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("recording stopped early"), "{text}");
}

/// SIGXFSZ ignored (Python's default) and a limit the collector does not know (as with a full
/// disk): the write fails with EFBIG, the file is cut after its last whole frame and closed with
/// the stop record — not "the process died while writing".
#[test]
fn a_write_that_fails_with_no_known_limit_still_ends_with_the_stop_record() {
    let dir = tempfile::tempdir().unwrap();
    let script = xfsz_script(dir.path());
    let direct = xfsz_loop_direct(&script);
    let out = run_under_ulimit(
        dir.path(),
        &script,
        256,
        &[("TPUSCOPE_TEST_IGNORE_FILE_LIMIT", "1")],
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), direct);
    let ours = collector_lines(&out);
    assert_eq!(ours.len(), 1, "{}", show(&out));
    assert!(
        ours[0].contains("cannot write trace") && ours[0].contains("File too large"),
        "{}",
        ours[0]
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("died while writing"), "{err}");
    assert!(
        err.contains("  warning: ") && err.contains(": recording stopped early, "),
        "{err}"
    );
    let trace = only_trace(dir.path());
    assert_eq!(trace.completeness, tpuscope_core::Completeness::Complete);
    assert!(trace.damage.is_empty());
    let stopped = trace.recording_stopped().expect("a stop record");
    assert!(
        stopped.reason.contains("File too large"),
        "{}",
        stopped.reason
    );
    assert!(stopped.exit_t_ns > stopped.t_ns);
    assert!(stopped.not_recorded.iter().any(|k| k.kind == "execute"));
}

/// A panic in the collector's writer thread (a debug-build trigger): the workload's output is
/// unchanged, one line says recording stopped, and the trace says why.
#[test]
fn a_writer_panic_stops_recording_and_the_workload_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let script = xfsz_script(dir.path());
    let direct = xfsz_loop_direct(&script);
    let out = run_under_ulimit(
        dir.path(),
        &script,
        1 << 20,
        &[("TPUSCOPE_TEST_WRITER_PANIC_AFTER", "300")],
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), direct);
    let ours = collector_lines(&out);
    assert_eq!(ours.len(), 1, "{}", show(&out));
    assert!(
        ours[0].contains("the collector's writer failed"),
        "{}",
        ours[0]
    );
    let trace = only_trace(dir.path());
    let stopped = trace.recording_stopped().expect("a stop record");
    assert!(
        stopped.reason.contains("writer failed"),
        "{}",
        stopped.reason
    );
}

/// A `PJRT_Device_MemoryStats` call that hangs (60 s injected by the fault plugin) must not hang
/// the workload's exit: the collector never calls the plugin under the lock that client destroy
/// and exit take, and waits a bounded time for a poll in progress.
#[test]
fn a_hung_memory_stats_call_does_not_hang_exit() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = std::time::Instant::now();
    let out = run_tpuscope(
        &[
            "run",
            "--no-tui",
            "--out",
            dir.path().to_str().unwrap(),
            "--plugin",
            fault_plugin().to_str().unwrap(),
            "--",
            venv_python("jax").to_str().unwrap(),
            workload("jax_shapes.py").to_str().unwrap(),
        ],
        &[
            (
                "TPUSCOPE_FAULT_REAL_PLUGIN",
                cpu_plugin("jax").to_str().unwrap(),
            ),
            ("TPUSCOPE_FAULT_SPEC", "memory_stats:delay_ms=60000@*"),
            // Only the collector's sampler hangs (JAX asks for memory stats itself too).
            ("TPUSCOPE_FAULT_THREAD", "tpuscope-memory"),
            ("TPUSCOPE_MEMORY_INTERVAL_MS", "5"),
        ],
        dir.path(),
    );
    let took = t0.elapsed();
    assert!(out.status.success(), "{}", show(&out));
    // Bounded waits: 2 s at client destroy, 0.2 s at exit; a hang would be the full 60 s.
    assert!(
        took < std::time::Duration::from_secs(40),
        "exit waited for the hung call: {took:?}"
    );
    let trace = only_trace(dir.path());
    assert_eq!(trace.completeness, tpuscope_core::Completeness::Complete);
    assert!(count(&trace, "execute") >= 12);
}
