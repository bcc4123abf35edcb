//! `tpuscope whatif` on what it cannot do: a topology no TPU generation has, a `--libtpu` that is
//! not libtpu, a price that is not one, every program failing — each is one line naming the
//! cause and a non-zero exit, before (or instead of) any per-program work or any summary. A cut
//! trace is compiled as far as it goes, with the report's own warning of where it was cut. With
//! the real libtpu 0.0.52 of the torch_tpu env (the tests fail without it, also under CI).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::*;
use tpuscope_core::event::{Compile, Manifest, Record};

fn jax_lr() -> PathBuf {
    repo_root().join("sample_traces/real/jax_lr.tps")
}

/// One compile cache for the tests that compile: jax_lr's programs compile once.
fn cache() -> &'static Path {
    static CACHE: OnceLock<tempfile::TempDir> = OnceLock::new();
    CACHE.get_or_init(|| tempfile::tempdir().unwrap()).path()
}

fn whatif(trace: &Path, args: &[&str]) -> Output {
    Command::new(tpuscope())
        .arg("whatif")
        .arg(trace)
        .args(args)
        .env("XDG_CACHE_HOME", cache())
        .output()
        .unwrap()
}

fn whatif_with_libtpu(trace: &Path, topology: &str, extra: &[&str]) -> Output {
    let libtpu = libtpu();
    let mut args = vec!["--topology", topology, "--libtpu", libtpu.to_str().unwrap()];
    args.extend_from_slice(extra);
    whatif(trace, &args)
}

/// The command failed with exactly one line on stderr, nothing on stdout, and no per-program
/// progress: that line.
fn one_error_line(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{}", show(out));
    assert!(out.stdout.is_empty(), "{}", show(out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{}", show(out));
    lines[0].to_string()
}

#[test]
fn topologies_no_generation_has_are_one_line_before_any_compile() {
    for (topology, line) in [
        (
            "v5e:0x0",
            "tpuscope: error: topology \"v5e:0x0\": a slice has at least one chip along each axis, e.g. v5e:2x2",
        ),
        (
            "v99:2x2",
            "tpuscope: error: topology \"v99:2x2\": unknown TPU generation \"v99\" (known: v2, v3, v4, v5e, v5p, v6e)",
        ),
        (
            "v5e:3x3",
            "tpuscope: error: topology \"v5e:3x3\": v5e has no 3x3 slice (its slices: 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16)",
        ),
        (
            "v5e:64x64",
            "tpuscope: error: topology \"v5e:64x64\": v5e has no 64x64 slice (its slices: 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, 8x16, 16x16)",
        ),
        (
            "v4:2x2",
            "tpuscope: error: topology \"v4:2x2\": a v4 shape is 3 numbers joined by x, e.g. v4:2x2x1",
        ),
        (
            "v5e",
            "tpuscope: error: topology \"v5e\": expected GENERATION:SHAPE, e.g. v5e:2x2 or v4:2x2x1",
        ),
    ] {
        let out = whatif_with_libtpu(&jax_lr(), topology, &[]);
        assert_eq!(one_error_line(&out), line, "{topology}");
    }
    // `report --whatif` checks it the same way, before reading anything.
    let out = Command::new(tpuscope())
        .arg("report")
        .arg(jax_lr())
        .args(["--whatif", "v5e:3x3"])
        .output()
        .unwrap();
    assert!(
        one_error_line(&out).starts_with("tpuscope: error: topology \"v5e:3x3\": v5e has no 3x3"),
        "{}",
        show(&out)
    );
}

#[test]
fn a_libtpu_that_is_not_one_is_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("libtpu.so");
    let text = dir.path().join("text.so");
    std::fs::write(&text, "not a library").unwrap();
    let cpu = cpu_plugin("jax");
    let shown = |p: &Path| p.display().to_string();
    let cases: Vec<(PathBuf, String)> = vec![
        (
            missing.clone(),
            format!(
                "tpuscope: error: libtpu {}: no such file (pass --libtpu the path of libtpu.so, e.g. from `python -c 'import libtpu; print(libtpu.get_library_path())'`)",
                shown(&missing)
            ),
        ),
        (
            dir.path().to_path_buf(),
            format!(
                "tpuscope: error: libtpu {}: a directory, not a library (pass --libtpu the path of libtpu.so)",
                shown(dir.path())
            ),
        ),
        (
            PathBuf::from("/dev/null"),
            "tpuscope: error: libtpu /dev/null: not a regular file (pass --libtpu the path of libtpu.so)"
                .to_string(),
        ),
        (
            text.clone(),
            format!(
                "tpuscope: error: libtpu {}: cannot load it: ",
                shown(&text)
            ),
        ),
        (
            cpu.clone(),
            format!(
                "tpuscope: error: libtpu {}: a PJRT plugin, but not libtpu (no TPU topology extension; the XLA CPU plugin is not one): pass --libtpu the path of libtpu.so",
                shown(&cpu)
            ),
        ),
    ];
    for (path, line) in cases {
        let out = whatif(
            &jax_lr(),
            &["--topology", "v5e:2x2", "--libtpu", path.to_str().unwrap()],
        );
        let got = one_error_line(&out);
        assert!(got.starts_with(&line), "{}\nexpected: {line}", show(&out));
    }
}

#[test]
fn prices_are_finite_and_above_zero() {
    for price in ["NaN", "inf", "-5", "0", "two"] {
        let out = whatif_with_libtpu(
            &jax_lr(),
            "v5e:2x2",
            &[&format!("--price-per-chip-hour={price}")],
        );
        assert_eq!(out.status.code(), Some(2), "{}", show(&out));
        assert!(out.stdout.is_empty(), "{}", show(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.lines().next().unwrap(),
            format!(
                "error: invalid value '{price}' for '--price-per-chip-hour <PRICE>': a price is a finite number above 0, e.g. 1.2"
            ),
            "{}",
            show(&out)
        );
        assert!(tpuscope_lines(&out).is_empty(), "{}", show(&out));
    }
}

/// Upper case is the same name: `V5E:2X2` compiles for v5e:2x2 and the report says so.
#[test]
fn upper_case_names_the_same_topology() {
    let out = whatif_with_libtpu(&jax_lr(), "V5E:2X2", &["--format", "json", "--jobs", "4"]);
    assert!(out.status.success(), "{}", show(&out));
    let w: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(w["topology"], "v5e:2x2");
    assert_eq!(w["chips"], 4);
    assert_eq!(w["not_replayed"], 0, "{w}");
    let progress = tpuscope_lines(&out);
    assert!(!progress.is_empty());
    assert!(
        progress
            .iter()
            .all(|l| l.contains(" for v5e:2x2: compiled in ")),
        "{progress:?}"
    );
}

/// A cut trace: its programs up to the cut compile, after the report's own warning of where the
/// trace was cut and when recording stopped.
#[test]
fn a_cut_trace_is_said_to_be_cut_and_its_programs_compile() {
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.tps");
    let bytes = std::fs::read(jax_lr()).unwrap();
    std::fs::write(&cut, &bytes[..40_000]).unwrap();
    let trace = tpuscope_core::read_trace_file(&cut).unwrap();
    let mut programs: Vec<(u64, u64)> = compiles(&trace)
        .iter()
        .filter(|c| c.program_hash != 0)
        .map(|c| (c.program_hash, c.options_hash))
        .collect();
    programs.sort_unstable();
    programs.dedup();
    let whole = tpuscope_core::read_trace_file(&jax_lr()).unwrap();
    assert!(
        programs.len() < compiles(&whole).len(),
        "the cut loses programs"
    );

    let out = whatif_with_libtpu(&cut, "v5e:2x2", &["--format", "json", "--jobs", "4"]);
    assert!(out.status.success(), "{}", show(&out));
    // The warning `tpuscope report` gives, from the one place it is worded.
    let report = tpuscope_analyzers::report::build_one(&cut.display().to_string(), &trace, None);
    let warning = &report.warnings[0];
    assert!(
        warning.contains(": trace cut at byte ") && warning.contains("recording stopped "),
        "{warning}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().next(),
        Some(format!("tpuscope: warning: {warning}").as_str()),
        "{}",
        show(&out)
    );
    let w: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(w["programs"].as_array().unwrap().len(), programs.len());
    assert_eq!(w["not_replayed"], 0, "{w}");
}

/// An addition on `[n]` f32, as JAX lowers it.
fn add_program(n: u32) -> String {
    format!(
        "module @add_{n} {{\n  func.func public @main(%arg0: tensor<{n}xf32>) -> tensor<{n}xf32> {{\n    %0 = stablehlo.add %arg0, %arg0 : tensor<{n}xf32>\n    return %0 : tensor<{n}xf32>\n  }}\n}}\n"
    )
}

/// A trace of two programs that each need 8 devices (8 replicas in their compile options).
fn eight_device_trace(path: &Path) {
    let manifest = Manifest {
        pid: 1,
        start_mono_ns: 1_000,
        command_line: vec!["python".into(), "train.py".into()],
        ..Manifest::default()
    };
    let mut w = tpuscope_core::TraceWriter::new(Vec::new(), &manifest).unwrap();
    // CompileOptionsProto { executable_build_options: { num_replicas: 8, num_partitions: 1 } }.
    let options = w
        .put_blob(
            "compile_options",
            "proto",
            &[0x1a, 0x04, 0x20, 0x08, 0x28, 0x01],
        )
        .unwrap();
    for (i, n) in [2u32, 3].into_iter().enumerate() {
        let program = w
            .put_blob("program", "mlir", add_program(n).as_bytes())
            .unwrap();
        w.write(&Record::Compile(Box::new(Compile {
            t_ns: 2_000 + i as u64 * 1_000,
            dur_ns: 500,
            api: "PJRT_Client_Compile".into(),
            program_format: "mlir".into(),
            program_hash: program,
            options_hash: options,
            executable_name: format!("jit_add_{n}"),
            executable_id: i as u64 + 1,
            ..Default::default()
        })))
        .unwrap();
    }
    w.write(&Record::End(tpuscope_core::event::End {
        t_ns: 10_000,
        ..Default::default()
    }))
    .unwrap();
    std::fs::write(path, w.into_inner()).unwrap();
}

/// Every program failed: no summary, one line with the reason they share, non-zero.
#[test]
fn when_no_program_compiles_the_command_fails_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("eight.tps");
    eight_device_trace(&trace);
    let out = whatif_with_libtpu(&trace, "v5e:2x2", &[]);
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    assert!(out.stdout.is_empty(), "no summary: {}", show(&out));
    let lines = tpuscope_lines(&out);
    // The two programs' progress, then the error.
    assert_eq!(lines.len(), 3, "{}", show(&out));
    assert_eq!(
        lines[2],
        "tpuscope: error: none of the 2 programs compiled for v5e:2x2 (4 chips, TPU v5 lite): topology v5e:2x2 is too small: the program needs 8 devices (replicas × partitions = 8 × 1), v5e:2x2 has 4"
    );

    // On 8 chips they compile: the failure was the topology's, not the trace's.
    let out = whatif_with_libtpu(&trace, "v5e:2x4", &["--format", "json"]);
    assert!(out.status.success(), "{}", show(&out));
    let w: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(w["replayed"], 2, "{w}");
}

/// The `__whatif-compile` children running now for the whatif process `parent`.
fn compile_children(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains("__whatif-compile")
                && String::from_utf8_lossy(&environ)
                    .contains(&format!("TPUSCOPE_PARENT_PID={parent}\0"))
        })
        .collect()
}

/// SIGTERM (or any death) of `whatif` ends its libtpu compiles at once: they run in a process
/// group of their own, out of the terminal's reach, and die with the tpuscope that started them.
/// (A compile child lives 0.25-0.5 s here, most of it loading libtpu: one left to itself would
/// outlive the 150 ms allowed.)
#[test]
fn a_whatif_stopped_by_sigterm_leaves_no_compile_behind() {
    use std::time::{Duration, Instant};
    let libtpu = libtpu();
    for round in 0..3 {
        let own_cache = tempfile::tempdir().unwrap();
        let mut child = Command::new(tpuscope())
            .arg("whatif")
            .arg(jax_lr())
            .args([
                "--topology",
                "v5e:2x2",
                "--libtpu",
                libtpu.to_str().unwrap(),
            ])
            .env("XDG_CACHE_HOME", own_cache.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let parent = child.id();
        let deadline = Instant::now() + Duration::from_secs(60);
        while compile_children(parent).is_empty() {
            assert!(Instant::now() < deadline, "no compile started");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(30));
        let running = compile_children(parent);
        assert!(
            Command::new("kill")
                .arg(parent.to_string())
                .status()
                .unwrap()
                .success()
        );
        assert!(!child.wait().unwrap().success());
        let gone = Instant::now() + Duration::from_millis(150);
        while running.iter().any(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                !s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
        }) {
            assert!(
                Instant::now() < gone,
                "round {round}: compiles {running:?} still run after their whatif ended"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
