//! `tpuscope whatif` end to end: a JAX run on the CPU stand-in (tests/workloads/whatif_mlp.py
//! under `tpuscope run`), its programs compiled for v5e topologies with the real libtpu 0.0.52.
//! What each program needs is checked against what the replay measured, the program larger
//! than a chip is found too big by the right amount, a 4-device program is refused on one chip
//! without a crash, the CPU-only LAPACK call is named, and a second run answers from the cache.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::*;

/// whatif_mlp.py recorded once under `tpuscope run` on the CPU stand-in.
fn trace() -> &'static Path {
    static TRACE: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &TRACE
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let out = dir.path().join("mlp.tps");
            let py = venv_python("jax");
            let o = run_tpuscope(
                &[
                    "run",
                    "--quiet",
                    "--no-tui",
                    "--out",
                    out.to_str().unwrap(),
                    "--",
                    py.to_str().unwrap(),
                    workload("whatif_mlp.py").to_str().unwrap(),
                ],
                &[],
                dir.path(),
            );
            assert!(o.status.success(), "{}", show(&o));
            (dir, out)
        })
        .1
}

fn whatif(topology: &str, cache: &Path, extra: &[&str]) -> Output {
    Command::new(tpuscope())
        .args([
            "whatif",
            trace().to_str().unwrap(),
            "--topology",
            topology,
            "--libtpu",
        ])
        .arg(libtpu())
        .args(extra)
        .env("XDG_CACHE_HOME", cache)
        .output()
        .unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", show(out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn row<'a>(w: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    w["programs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("no program {name} in {w}"))
}

#[test]
fn whatif_v5e_finds_what_fits_what_does_not_and_what_cannot_compile() {
    let cache = tempfile::tempdir().unwrap();
    let out = whatif(
        "v5e:2x2",
        cache.path(),
        &["--format", "json", "--price-per-chip-hour", "2"],
    );
    let w = json(&out);
    assert_eq!(w["chips"], 4, "{w}");
    assert_eq!(w["hbm_source"], "libtpu");
    let hbm = w["hbm_bytes_per_chip"].as_i64().unwrap();
    assert!(hbm > 15 << 30 && hbm < 17 << 30, "{hbm}");

    let step = row(&w, "jit_train_step");
    let tpu = &step["tpu"];
    let m = &tpu["memory"];
    let need = m["argument"].as_i64().unwrap() + m["output"].as_i64().unwrap()
        - m["alias"].as_i64().unwrap()
        + m["temp"].as_i64().unwrap()
        + m["generated_code"].as_i64().unwrap();
    assert_eq!(tpu["need_bytes"].as_i64().unwrap(), need);
    assert_eq!(tpu["fits"], true);
    assert!(tpu["flops"].as_f64().unwrap() > 7e8, "{tpu}");

    // libtpu itself refuses it (CompileTimeHbmOom) and says what it needs: 5e9 f32 = 18.63 GiB.
    let big = row(&w, "jit_oversized");
    let tpu = &big["tpu"];
    assert_eq!(tpu["fits"], false, "{big}");
    let need = tpu["need_bytes"].as_i64().unwrap();
    let exact: i64 = 20_000_000_000;
    assert!((need - exact).abs() < exact / 1000, "{need}");
    assert_eq!(tpu["overflow_bytes"].as_i64().unwrap(), need - hbm);
    assert_eq!(w["not_fitting"], 1);

    assert!(row(&w, "jit_sharded_train_step")["tpu"].is_object());
    // jnp.linalg.inv: it failed on the CPU stand-in too (no LAPACK handler there), and libtpu
    // cannot emit it: named, not compiled.
    let lapack: Vec<_> = w["programs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| {
            p["not_replayed"]
                .as_str()
                .is_some_and(|s| s.contains("lapack_"))
        })
        .collect();
    assert_eq!(lapack.len(), 1, "{w}");
    assert!(
        lapack[0]["name"]
            .as_str()
            .unwrap()
            .contains("failed on the CPU")
    );

    // The same answers from the cache, without compiling.
    let again = whatif(
        "v5e:2x2",
        cache.path(),
        &["--format", "json", "--price-per-chip-hour", "2"],
    );
    // (Compile times equal to the float's last digits: the cache's answer, not a new compile.)
    let again = json(&again);
    let (a, b) = (
        again["programs"].as_array().unwrap(),
        w["programs"].as_array().unwrap(),
    );
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x["program_hash"], y["program_hash"]);
        let (tx, ty) = (&x["tpu"]["compile_ms"], &y["tpu"]["compile_ms"]);
        if let (Some(tx), Some(ty)) = (tx.as_f64(), ty.as_f64()) {
            assert!((tx - ty).abs() <= ty * 1e-9, "{x} vs {y}");
        }
    }
    let cached = std::fs::read_dir(cache.path().join("tpuscope/whatif"))
        .unwrap()
        .count();
    assert!(cached >= 3, "{cached} cached answers");

    // Text: the table and the verdicts.
    let text = whatif("v5e:2x2", cache.path(), &[]);
    assert!(text.status.success(), "{}", show(&text));
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(t.starts_with("tpuscope whatif: v5e:2x2 (4 chips"), "{t}");
    assert!(t.contains("; 1 does not fit in a chip's HBM"), "{t}");
    assert!(t.contains("NO (+"), "{t}");
}

#[test]
fn a_topology_too_small_for_a_program_is_said_per_program_not_a_crash() {
    let cache = tempfile::tempdir().unwrap();
    let w = json(&whatif("v5e:1x1", cache.path(), &["--format", "json"]));
    let sharded = row(&w, "jit_sharded_train_step");
    assert!(sharded["tpu"].is_null());
    assert!(
        sharded["not_replayed"]
            .as_str()
            .unwrap()
            .contains("too small"),
        "{sharded}"
    );
    // The one-device step compiles on one chip.
    assert!(row(&w, "jit_train_step")["tpu"].is_object());
}

/// `report --whatif`: the same answers as a section of the report.
#[test]
fn report_adds_the_whatif_section() {
    let cache = tempfile::tempdir().unwrap();
    let run = |format: &str| {
        Command::new(tpuscope())
            .args(["report", trace().to_str().unwrap(), "--whatif", "v5e:2x2"])
            .args(["--format", format, "--libtpu"])
            .arg(libtpu())
            .env("XDG_CACHE_HOME", cache.path())
            .output()
            .unwrap()
    };
    let j = json(&run("json"));
    assert!(j["compiles"]["total"].as_u64().unwrap() > 0);
    assert_eq!(j["whatif"]["topology"], "v5e:2x2");
    assert_eq!(j["whatif"]["not_fitting"], 1, "{}", j["whatif"]);
    let text = run("text");
    assert!(text.status.success(), "{}", show(&text));
    let t = String::from_utf8_lossy(&text.stdout);
    assert!(t.starts_with("tpuscope report:"), "{t}");
    assert!(t.contains("tpuscope whatif: v5e:2x2"), "{t}");
    let junit = run("junit");
    assert!(!junit.status.success());
    assert_eq!(tpuscope_lines(&junit).len(), 1, "{}", show(&junit));
}

#[test]
fn bad_arguments_are_one_line() {
    let cache = tempfile::tempdir().unwrap();
    let out = whatif("v5e", cache.path(), &[]);
    assert!(!out.status.success());
    assert_eq!(tpuscope_lines(&out).len(), 1, "{}", show(&out));
    assert!(show(&out).contains("GENERATION:SHAPE"), "{}", show(&out));
    let out = Command::new(tpuscope())
        .args(["whatif", "/nonexistent.tps", "--topology", "v5e:2x2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert_eq!(tpuscope_lines(&out).len(), 1, "{}", show(&out));
}

/// The GUI's What-if tab compiles the run's programs through `tpuscope view --whatif` (the same
/// child processes as the command) and shows the program that does not fit first, in red.
#[test]
fn the_gui_whatif_tab_compiles_and_shows_what_does_not_fit() {
    if !have_xvfb() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let png = dir.path().join("whatif.png");
    let out = Command::new("xvfb-run")
        .args(["-a", "-s", "-screen 0 1600x1000x24"])
        .arg(tpuscope())
        .arg("view")
        .arg(trace())
        .args(["--tab", "whatif", "--whatif", "v5e:2x2", "--libtpu"])
        .arg(libtpu())
        .arg("--screenshot")
        .arg(&png)
        .env("XDG_CACHE_HOME", dir.path())
        .env("LIBGL_ALWAYS_SOFTWARE", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let s = tpuscope_gui::PngStats::read(&png).unwrap();
    // gui/src/whatif.rs: red (the program that does not fit: its row, its bar past the chip,
    // its verdict), orange TPU compile-time bars.
    let red = s.count_near([235, 80, 70], 6);
    let orange = s.count_near([230, 150, 60], 6);
    eprintln!("red {red} px, orange {orange} px");
    assert!(red > 3000, "red {red} px");
    assert!(orange > 1500, "orange {orange} px");
    // What it compiled went through the cache like the command's.
    let cached = std::fs::read_dir(dir.path().join("tpuscope/whatif"))
        .unwrap()
        .count();
    assert!(cached >= 4, "{cached} cached answers");
}
