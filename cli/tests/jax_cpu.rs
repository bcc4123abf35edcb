//! Acceptance: JAX on the XLA CPU plugin through `tpuscope run`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use tpuscope_core::event::Record;

/// The trace holds exactly the calls a counting plugin between the collector and the real plugin
/// saw, and the workload's output is the same as without tpuscope.
#[test]
fn jax_shapes_counts_match_an_independent_counter_and_output_is_unchanged() {
    let py = venv_python("jax");
    let cpu = cpu_plugin("jax");
    let dir = tempfile::tempdir().unwrap();
    let counts_file = dir.path().join("counts.json");
    let traces = dir.path().join("traces");
    std::fs::create_dir(&traces).unwrap();

    // Without tpuscope: the plugin registered under the same platform name the stand-in uses.
    let direct = std::process::Command::new(&py)
        .arg(workload("jax_shapes.py"))
        .env(
            "PJRT_NAMES_AND_LIBRARY_PATHS",
            format!("tpuscope:{}", cpu.display()),
        )
        .env("JAX_PLATFORMS", "tpuscope")
        .output()
        .unwrap();
    assert!(direct.status.success(), "{}", show(&direct));

    let fault = fault_plugin();
    // The summary reads the trace as `report` does, into the cache of reads (kept here for
    // traces of any size).
    let cache_home = dir.path().join("cache");
    let out = run_tpuscope(
        &[
            "run",
            "--out",
            traces.to_str().unwrap(),
            "--plugin",
            fault.to_str().unwrap(),
            "--",
            py.to_str().unwrap(),
            workload("jax_shapes.py").to_str().unwrap(),
        ],
        &[
            ("TPUSCOPE_FAULT_REAL_PLUGIN", cpu.to_str().unwrap()),
            ("TPUSCOPE_FAULT_COUNTS", counts_file.to_str().unwrap()),
            ("XDG_CACHE_HOME", cache_home.to_str().unwrap()),
            ("TPUSCOPE_DIGEST_CACHE_MIN_MB", "0"),
        ],
        dir.path(),
    );
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&direct.stdout),
        "workload output differs under tpuscope"
    );

    report_after_the_run_reads_what_the_summary_kept(dir.path(), &traces, &cache_home);

    let trace = only_trace(&traces);
    let counts = read_counts(&counts_file);
    let c = |k: &str| counts.get(k).copied().unwrap_or(0) as usize;
    let k = kinds(&trace);
    eprintln!("trace kinds: {k:?}\nplugin counts: {counts:?}");
    assert_eq!(trace.completeness, tpuscope_core::Completeness::Complete);
    assert_eq!(count(&trace, "compile"), c("Client_Compile") + c("Compile"));
    assert!(
        count(&trace, "compile") >= 4,
        "4 shapes need at least 4 compiles"
    );
    assert_eq!(count(&trace, "execute"), c("LoadedExecutable_Execute"));
    assert_eq!(
        count(&trace, "transfer_h2d"),
        c("Client_BufferFromHostBuffer")
    );
    // Every host read is one D2H sync, whichever path JAX took (copy or zero-copy).
    let d2h_calls = c("Buffer_ToHostBuffer")
        + c("Buffer_CopyRawToHost")
        + c("Buffer_IncreaseExternalReferenceCount");
    assert_eq!(count(&trace, "transfer_d2h"), d2h_calls);
    // The workload reads 24 results back.
    assert!(count(&trace, "transfer_d2h") >= 24, "{k:?}");
    let syncs = trace
        .events
        .iter()
        .filter(|r| matches!(r, Record::Transfer(t) if t.sync))
        .count();
    assert_eq!(syncs, count(&trace, "transfer_d2h"));

    // Compile events name the jitted function and keep the optimized HLO.
    let compiles = compiles(&trace);
    assert!(
        compiles.iter().any(|c| c.executable_name.contains("jit_f")),
        "{compiles:?}"
    );
    for c in &compiles {
        assert!(c.error.is_none());
        assert_eq!(c.program_format, "mlir");
        assert!(
            trace.blobs.contains_key(&c.program_hash),
            "input program stored"
        );
        assert!(
            trace.blobs.contains_key(&c.optimized_hash),
            "optimized program stored"
        );
    }
    // JAX compiles on a worker thread: the agent hands over the stack of the Python thread that
    // asked, so the user's line is on every compile of `f`.
    for c in compiles.iter().filter(|c| c.executable_name == "jit_f") {
        let frames = &trace
            .stacks
            .get(&c.stack)
            .expect("compile of f has a Python stack")
            .frames;
        assert!(
            frames
                .iter()
                .any(|f| trace.string(f.file).ends_with("jax_shapes.py")),
            "{frames:?}"
        );
    }
    // Manifest: API version and the frontend's versions.
    let m = trace.manifest.as_ref().unwrap();
    assert_eq!((m.pjrt_api_major, m.pjrt_api_minor), (0, 115));
    assert!(
        m.package_versions
            .iter()
            .any(|kv| kv.key == "jax" && kv.value == "0.10.2"),
        "{:?}",
        m.package_versions
    );
}

/// `--out` naming a file that does not end in `.tps`: the trace is written there, and the run
/// says so (it once reported "no trace was written" for it).
#[test]
fn a_file_out_without_the_tps_extension_is_the_trace() {
    let py = venv_python("jax");
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("last-run");
    let out = run_tpuscope(
        &[
            "run",
            "--no-tui",
            "--out",
            target.to_str().unwrap(),
            "--",
            py.to_str().unwrap(),
            repo_root()
                .join("examples/jax/clean_loop.py")
                .to_str()
                .unwrap(),
        ],
        &[("TPUSCOPE_COLLECTOR", collector().to_str().unwrap())],
        dir.path(),
    );
    assert!(out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("no trace was written"), "{err}");
    assert!(
        err.contains(&format!("tpuscope: trace {}", target.display())),
        "{err}"
    );
    let trace = tpuscope_core::read_trace_file(&target).unwrap();
    assert_eq!(trace.completeness, tpuscope_core::Completeness::Complete);
    assert!(count(&trace, "compile") > 0);
}

/// A `report` right after a run (its traces in `traces`, the cache of reads under
/// `cache_home`) reads what the run's summary kept, and says what reading the trace says.
fn report_after_the_run_reads_what_the_summary_kept(
    cwd: &std::path::Path,
    traces: &std::path::Path,
    cache_home: &std::path::Path,
) {
    let kept: Vec<_> = std::fs::read_dir(cache_home.join("tpuscope/digests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let trace_file = std::fs::read_dir(traces)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "tps"))
        .unwrap();
    let report = |cache: &str| {
        let out = run_tpuscope(
            &["report", trace_file.to_str().unwrap(), "--format", "json"],
            &[
                ("XDG_CACHE_HOME", cache_home.to_str().unwrap()),
                ("TPUSCOPE_DIGEST_CACHE_MIN_MB", "0"),
                ("TPUSCOPE_DIGEST_CACHE", cache),
            ],
            cwd,
        );
        assert!(out.status.success(), "{}", show(&out));
        out.stdout
    };
    // A cache file is written anew through a temporary file renamed into place.
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(&kept[0]).unwrap().ino();
    assert_eq!(report("1"), report("0"));
    assert_eq!(
        std::fs::metadata(&kept[0]).unwrap().ino(),
        inode,
        "the report read the cache, it did not write it again"
    );
}
