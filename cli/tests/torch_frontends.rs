//! Acceptance: torch_xla 2.9 and TorchTPU 0.2.0 on the CPU stand-in through `tpuscope run`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use tpuscope_core::event::{Direction, Record};

/// The line of `needle` in a workload script (1-based).
fn line_of(script: &str, needle: &str) -> u32 {
    let text = std::fs::read_to_string(workload(script)).unwrap();
    text.lines().position(|l| l.contains(needle)).unwrap() as u32 + 1
}

#[test]
fn torch_xla_training_loop_with_item_shows_compiles_executes_and_the_item_line() {
    let py = venv_python("torch_xla");
    let dir = tempfile::tempdir().unwrap();
    // torch_xla's own in-process CPU client: the reference output.
    let reference = std::process::Command::new(&py)
        .arg(workload("torch_xla_item.py"))
        .env("PJRT_DEVICE", "CPU")
        .output()
        .unwrap();
    assert!(reference.status.success(), "{}", show(&reference));

    let out = run_tpuscope(
        &[
            "run",
            "--out",
            dir.path().to_str().unwrap(),
            "--",
            py.to_str().unwrap(),
            workload("torch_xla_item.py").to_str().unwrap(),
        ],
        &[],
        dir.path(),
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        stdout_lines_with(&out, "RESULT"),
        stdout_lines_with(&reference, "RESULT")
    );

    let trace = only_trace(dir.path());
    let m = trace.manifest.as_ref().unwrap();
    assert!(
        m.package_versions
            .iter()
            .any(|kv| kv.key == "torch_xla" && kv.value == "2.9.0")
    );
    let compiles = compiles(&trace);
    assert!(!compiles.is_empty());
    for c in &compiles {
        assert_eq!(
            c.program_format, "hlo",
            "torch_xla hands PJRT serialized HLO"
        );
        assert!(trace.blobs.contains_key(&c.program_hash));
        assert!(
            c.executable_name.starts_with("SyncTensorsGraph"),
            "{}",
            c.executable_name
        );
    }
    assert!(count(&trace, "execute") >= 5, "{:?}", kinds(&trace));
    // The ExecuteOptions bridge was needed and said so.
    assert!(
        trace
            .events
            .iter()
            .any(|r| matches!(r, Record::Note(n) if n.topic == "abi_bridge"))
    );

    // Five `.item()` reads: D2H syncs whose innermost frame is the `.item()` line.
    let item_line = line_of("torch_xla_item.py", "losses.append(loss.item())");
    let item_reads = trace
        .events
        .iter()
        .filter(|r| match r {
            Record::Transfer(t) if t.direction == Direction::D2h as i32 && t.sync => trace
                .stacks
                .get(&t.stack)
                .and_then(|s| s.frames.first())
                .is_some_and(|f| {
                    trace.string(f.file).ends_with("torch_xla_item.py") && f.line == item_line
                }),
            _ => false,
        })
        .count();
    assert_eq!(item_reads, 5, "{:?}", kinds(&trace));
    // Step markers from torch_xla.sync.
    let syncs = trace
        .events
        .iter()
        .filter(|r| matches!(r, Record::Step(s) if s.marker == "torch_xla.sync"))
        .count();
    assert_eq!(syncs, 5);
}

#[test]
fn torch_tpu_eager_and_compiled_with_tier3_cache_stores_then_loads() {
    let py = venv_python("torch_tpu");
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("tier3");
    // TorchTPU's tier-2 cache is machine-wide shared memory, /dev/shm/torch_tpu_cache/<name>,
    // that outlives processes: a fresh name for this test, so run 1 starts cold. (With a cold
    // tier 2 and a warm tier 3, TorchTPU 0.2.0 loads from tier 3 but recompiles some programs.)
    let stamp = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let tier2 = format!("tpuscope-test-{stamp}");
    let run = |n: usize| {
        let out_dir = dir.path().join(format!("run{n}"));
        std::fs::create_dir(&out_dir).unwrap();
        let out = run_tpuscope(
            &[
                "run",
                "--out",
                out_dir.to_str().unwrap(),
                "--",
                py.to_str().unwrap(),
                workload("torch_tpu_cache.py").to_str().unwrap(),
            ],
            &[
                (
                    "TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT",
                    cache.to_str().unwrap(),
                ),
                ("TORCH_TPU_TIER2_COMPILATION_CACHE", &tier2),
                // The agent brings the device up, not the workload.
                ("TPUSCOPE_WORKLOAD_NO_FORCE_INIT", "1"),
            ],
            dir.path(),
        );
        assert!(out.status.success(), "{}", show(&out));
        (stdout_lines_with(&out, "RESULT"), only_trace(&out_dir))
    };
    let (result1, t1) = run(1);
    let (result2, t2) = run(2);
    let _ = std::fs::remove_dir_all(format!("/dev/shm/torch_tpu_cache/{tier2}"));
    assert_eq!(result1.len(), 1);
    assert_eq!(result1, result2);
    let m = t1.manifest.as_ref().unwrap();
    assert!(
        m.package_versions
            .iter()
            .any(|kv| kv.key == "torch_tpu" && kv.value == "0.2.0"),
        "{:?}",
        m.package_versions
    );
    assert_eq!(m.role, "standin");
    // The TPU-only create option was dropped, and said so.
    assert!(t1.events.iter().any(|r| matches!(r, Record::Note(n) if n.topic == "abi_bridge" && n.message.contains("premapped_buffer_size"))));
    // Eager ops and the compiled model run on the device.
    assert!(
        count(&t1, "execute") > 0 && count(&t1, "transfer_h2d") > 0,
        "{:?}",
        kinds(&t1)
    );
    // Run 1 compiles and stores; run 2 loads and does not compile.
    assert!(count(&t1, "compile") > 0, "{:?}", kinds(&t1));
    assert!(count(&t1, "cache_store") > 0, "{:?}", kinds(&t1));
    assert_eq!(count(&t2, "compile"), 0, "{:?}", kinds(&t2));
    let loads: Vec<_> = t2
        .events
        .iter()
        .filter_map(|r| {
            if let Record::CacheLoad(l) = r {
                Some(l)
            } else {
                None
            }
        })
        .collect();
    assert!(!loads.is_empty());
    assert!(loads.iter().all(|l| l.ok && l.bytes > 0), "{loads:?}");
    // What run 2 loaded is what run 1 stored.
    let stored: std::collections::HashSet<u64> = t1
        .events
        .iter()
        .filter_map(|r| {
            if let Record::CacheStore(s) = r {
                Some(s.serialized_hash)
            } else {
                None
            }
        })
        .collect();
    assert!(
        loads.iter().any(|l| stored.contains(&l.serialized_hash)),
        "no load matches a store"
    );
}
