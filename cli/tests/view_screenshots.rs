#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `tpuscope view --screenshot` under Xvfb (software OpenGL through Mesa): every view of the
//! bundled sample renders at the asked size with real content. Bad input is refused with one
//! line and no PNG (`fail_loud_io.rs`); the window's error screen is `gui/tests/interact.rs`'s.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use tpuscope_gui::PngStats;

fn view(args: &[&str], png: &Path) -> Output {
    Command::new("xvfb-run")
        .args(["-a", "-s", "-screen 0 1600x1000x24"])
        .arg(env!("CARGO_BIN_EXE_tpuscope"))
        .arg("view")
        .args(args)
        .arg("--screenshot")
        .arg(png)
        .env("LIBGL_ALWAYS_SOFTWARE", "1")
        .output()
        .expect("xvfb-run")
}

/// Colours the views draw (see gui/src/timeline.rs and recompiles.rs).
const COMPILE_ORANGE: [u8; 3] = [232, 145, 40];
const TOKEN_HIGHLIGHT: [u8; 3] = [150, 110, 0];
/// gui/src/whatif.rs: TPU compile-time bars and the memory split's generated code.
const WHATIF_COMPILE: [u8; 3] = [230, 150, 60];
const WHATIF_CODE: [u8; 3] = [230, 200, 60];
/// gui/src/time.rs: the compiling and host-bound parts of the steps' bars.
const TIME_COMPILING: [u8; 3] = [232, 145, 40];
const TIME_HOST_BOUND: [u8; 3] = [70, 140, 230];

#[test]
fn every_view_of_the_sample_renders() {
    if !common::have_xvfb() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut seen: Vec<(String, usize, f64)> = Vec::new();
    for tab in [
        "summary",
        "time",
        "timeline",
        "recompiles",
        "syncs",
        "hbm",
        "flame",
        "whatif",
    ] {
        let png = dir.path().join(format!("{tab}.png"));
        let out = view(&["--tab", tab], &png);
        assert!(
            out.status.success(),
            "{tab}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let s = PngStats::read(&png).unwrap();
        assert_eq!((s.width, s.height), (1400, 900), "{tab}");
        // Text and shapes, not one flat colour.
        assert!(
            s.distinct_colours > 40,
            "{tab}: {} colours",
            s.distinct_colours
        );
        assert!(
            s.dominant_share < 0.97,
            "{tab}: {:.3} one colour",
            s.dominant_share
        );
        match tab {
            // The recompiles of the train step are orange compile spans.
            "timeline" => assert!(s.count_near(COMPILE_ORANGE, 6) > 2000, "{tab}"),
            // The sample's three slow steps are mostly compiling (orange) with some host-bound
            // time (blue) on top: about 340 ms and 90 ms of bars.
            "time" => {
                let (c, b) = (
                    s.count_near(TIME_COMPILING, 6),
                    s.count_near(TIME_HOST_BOUND, 6),
                );
                assert!(
                    c > 15_000 && b > 3000,
                    "{tab}: {c} compiling, {b} host-bound"
                );
            }
            // The changed learning-rate constant is highlighted in the HLO diff.
            "recompiles" => assert!(s.count_near(TOKEN_HIGHLIGHT, 6) > 20, "{tab}"),
            // The sample's saved what-if: a compile-time bar per program (13) and the selected
            // program's memory, mostly generated code.
            "whatif" => {
                assert!(s.count_near(WHATIF_COMPILE, 6) > 13 * 300, "{tab}");
                assert!(s.count_near(WHATIF_CODE, 6) > 5000, "{tab}");
            }
            _ => {}
        }
        seen.push((tab.to_string(), s.distinct_colours, s.dominant_share));
    }
    // Eight different pictures.
    for (i, a) in seen.iter().enumerate() {
        for b in &seen[i + 1..] {
            assert!(
                a.1 != b.1 || a.2 != b.2,
                "{} and {} look the same",
                a.0,
                b.0
            );
        }
    }
}

#[test]
fn an_unknown_tab_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_tpuscope"))
        .args([
            "view",
            "--tab",
            "nope",
            "--screenshot",
            "/nonexistent/x.png",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("unknown tab") && e.contains("timeline"), "{e}");
}
