//! GUI cost on a generated 1 M-event trace: time from the trace's bytes to the first frame
//! (decode, timeline lanes, one egui pass and its tessellation — the analysis runs on a thread
//! meanwhile), time until the report is there too, and CPU per frame while panning and zooming
//! the timeline. Headless: egui's `Context::run_ui` plus `tessellate`, no GPU, so the numbers are
//! the CPU side of a frame (what Mesa's software rasterizer adds is not counted).
//!
//! `cargo bench -p tpuscope-gui --bench frame` (plain `harness = false` main). `TPUSCOPE_BENCH_EVENTS`
//! sets the number of events (default 1 000 000), `TPUSCOPE_BENCH_WRITE=FILE` also writes the
//! trace there; `TPUSCOPE_BENCH_TRACE=FILE` opens that trace file instead, as `tpuscope view` does. Targets (issue 5): first frame < 1 s, ≤ 16 ms of
//! CPU per frame while panning.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use eframe::egui;
use tpuscope_core::event::*;
use tpuscope_core::{RawStackEntry, Record, TraceWriter, read_trace};
use tpuscope_gui::{App, Source, Tab};

const DEVICES: u32 = 4;

fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

/// A data-parallel training loop on 4 devices: per step, the batch's four host-to-device
/// shards, one execute with four completions, a blocking `float(loss)` with the user's stack, a
/// step marker; memory samples every 10 steps; a recompile every 5000 steps.
#[expect(
    clippy::too_many_lines,
    reason = "one benchmark table: each row a frame of the same window"
)]
fn generate(target_events: u64) -> Vec<u8> {
    let manifest = Manifest {
        pid: 4242,
        host: "bench".into(),
        start_wall_ns: 1_700_000_000_000_000_000,
        start_mono_ns: 1_000_000_000,
        frontend: "jax".into(),
        ..Manifest::default()
    };
    let mut w = ok(TraceWriter::new(Vec::with_capacity(80 << 20), &manifest));
    let stack = ok(w.intern_stack(&[
        RawStackEntry {
            file: Arc::from("/site-packages/jax/_src/array.py"),
            function: Arc::from("__float__"),
            line: 290,
        },
        RawStackEntry {
            file: Arc::from("/home/me/train.py"),
            function: Arc::from("main"),
            line: 57,
        },
    ]));
    let sig = ok(w.intern_string("f32[128,1024] f32[1024,1024]"));
    let mut t = 1_000_000_000u64 + 50_000_000;
    let mut seq = 0u64;
    let mut events = 0u64;
    let mut step = 0u64;
    let mut exe = 0u64;
    while events < target_events {
        if step.is_multiple_of(5000) {
            exe += 1;
            ok(w.write(&Record::Compile(Box::new(Compile {
                t_ns: t,
                thread: 1,
                dur_ns: 80_000_000,
                api: "PJRT_Client_Compile".into(),
                program_format: "mlir".into(),
                program_hash: exe,
                executable_name: "jit_train_step".into(),
                executable_id: exe,
                stack,
                num_devices: DEVICES,
                ..Compile::default()
            }))));
            t += 80_000_000;
            events += 1;
        }
        for d in 0..DEVICES {
            ok(w.write(&Record::Transfer(Box::new(Transfer {
                t_ns: t,
                thread: 1,
                dur_ns: 30_000,
                direction: Direction::H2d as i32,
                api: "PJRT_Client_BufferFromHostBuffer".into(),
                bytes: 128 * 1024 * 4,
                dims: vec![128, 1024],
                dtype: "f32".into(),
                device: d as i32,
                ..Transfer::default()
            }))));
            t += 35_000;
        }
        seq += 1;
        ok(w.write(&Record::Execute(Execute {
            t_ns: t,
            thread: 1,
            dur_ns: 60_000,
            executable_id: exe,
            num_devices: DEVICES,
            num_args: 2,
            arg_signature: sig,
            seq,
            completion_tracked: true,
            ..Execute::default()
        })));
        for d in 0..DEVICES {
            ok(w.write(&Record::ExecuteComplete(ExecuteComplete {
                t_ns: t + 900_000 + u64::from(d) * 10_000,
                seq,
                device_index: d,
                error: None,
            })));
        }
        t += 950_000;
        ok(w.write(&Record::Transfer(Box::new(Transfer {
            t_ns: t,
            thread: 1,
            dur_ns: 40_000,
            direction: Direction::D2h as i32,
            api: "PJRT_Buffer_ToHostBuffer".into(),
            bytes: 4,
            dtype: "f32".into(),
            device: 0,
            sync: true,
            blocked_ns: 35_000,
            stack,
            ..Transfer::default()
        }))));
        t += 50_000;
        step += 1;
        ok(w.write(&Record::Step(Step {
            t_ns: t,
            thread: 1,
            marker: "user".into(),
            number: step,
        })));
        events += 4 + 1 + u64::from(DEVICES) + 2;
        if step.is_multiple_of(10) {
            for d in 0..DEVICES {
                ok(w.write(&Record::Memory(Box::new(Memory {
                    t_ns: t,
                    device: d as i32,
                    origin: MemoryOrigin::PluginStats as i32,
                    bytes_in_use: 8 << 30,
                    bytes_limit: Some(16 << 30),
                    ..Memory::default()
                }))));
            }
            events += u64::from(DEVICES);
        }
        t += 20_000;
    }
    ok(w.write(&Record::End(End {
        t_ns: t,
        events_written: events,
        dropped_total: 0,
    })));
    w.into_inner()
}

fn input(time: f64, events: Vec<egui::Event>) -> egui::RawInput {
    egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(
            egui::Pos2::ZERO,
            egui::vec2(1400.0, 900.0),
        )),
        time: Some(time),
        events,
        ..egui::RawInput::default()
    }
}

/// One frame: the egui pass and its tessellation; returns the triangles' vertex count.
fn frame(ctx: &egui::Context, app: &mut App, time: f64, events: Vec<egui::Event>) -> usize {
    let out = ctx.run_ui(input(time, events), |ui| app.ui(ui));
    let prims = ctx.tessellate(out.shapes, out.pixels_per_point);
    prims
        .iter()
        .map(|p| match &p.primitive {
            egui::epaint::Primitive::Mesh(m) => m.vertices.len(),
            egui::epaint::Primitive::Callback(_) => 0,
        })
        .sum()
}

fn key(k: egui::Key) -> Vec<egui::Event> {
    vec![
        egui::Event::Key {
            key: k,
            physical_key: None,
            pressed: true,
            repeat: false,
            modifiers: egui::Modifiers::NONE,
        },
        egui::Event::Key {
            key: k,
            physical_key: None,
            pressed: false,
            repeat: false,
            modifiers: egui::Modifiers::NONE,
        },
    ]
}

fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = v.iter().map(|d| ms(*d)).sum::<f64>() / v.len() as f64;
    let p95 = ms(v[(v.len() * 95 / 100).min(v.len() - 1)]);
    let max = ms(v[v.len() - 1]);
    (mean, p95, max)
}

fn verdict(ok: bool) -> &'static str {
    if ok { "PASS" } else { "MISS" }
}

fn main() {
    // Bytes → first frame, with the analysis on its thread (what the window does).
    let ctx = egui::Context::default();
    tpuscope_gui::app::install_fonts(&ctx);
    let (t0, src) = if let Ok(p) = std::env::var("TPUSCOPE_BENCH_TRACE") {
        // A trace file, read as `tpuscope view` reads it (folded as it streams by).
        let path = std::path::PathBuf::from(p);
        let mb = std::fs::metadata(&path).map_or(0.0, |m| m.len() as f64 / 1e6);
        println!("trace: {} ({mb:.1} MB)", path.display());
        let t0 = Instant::now();
        (t0, Source::open(&path, false))
    } else {
        let n: u64 = std::env::var("TPUSCOPE_BENCH_EVENTS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        eprintln!("generating a {n}-event trace…");
        let bytes = generate(n);
        if let Ok(p) = std::env::var("TPUSCOPE_BENCH_WRITE") {
            // For looking at the same trace in the window: `tpuscope view $TPUSCOPE_BENCH_WRITE`.
            ok(std::fs::write(&p, &bytes));
            eprintln!("wrote {p}");
        }
        let trace_events = ok(read_trace(&bytes)).events.len();
        println!(
            "trace: {trace_events} events, {:.1} MB",
            bytes.len() as f64 / 1e6
        );
        let t0 = Instant::now();
        (t0, Source::from_bytes("bench.tps", &bytes))
    };
    if let Some(e) = &src.error {
        panic!("{e}");
    }
    let t_read = t0.elapsed();
    let mut app = App::new(vec![src], Tab::Timeline, true);
    let t_lanes = t0.elapsed();
    let verts = frame(&ctx, &mut app, 0.0, Vec::new());
    let first = t0.elapsed();
    app.wait_analysis();
    let full = t0.elapsed();
    let analysis_ms = app.analysis.as_ref().map_or(0.0, |a| a.elapsed_ms);
    println!(
        "first frame: {:.0} ms (decode {:.0} ms, lanes {:.0} ms, frame {:.0} ms; {} spans in {} lanes, {verts} vertices)  target < 1000 ms  {}",
        first.as_secs_f64() * 1e3,
        t_read.as_secs_f64() * 1e3,
        (t_lanes - t_read).as_secs_f64() * 1e3,
        (first - t_lanes).as_secs_f64() * 1e3,
        app.timeline.spans,
        app.timeline.lanes.len(),
        verdict(first < Duration::from_secs(1))
    );
    println!(
        "report ready: {:.0} ms after the bytes (analysis {analysis_ms:.0} ms on its thread)",
        full.as_secs_f64() * 1e3
    );

    // Frames while panning and zooming the timeline: whole trace in view (every span merged),
    // then zoomed in step by step, panning at each zoom.
    let mut time = 1.0;
    let mut warm = frame(&ctx, &mut app, time, Vec::new());
    black_box(&mut warm);
    let mut pans = Vec::new();
    let mut max_vertices = 0;
    let mut bars = Vec::new();
    let mut max_bars = 0;
    let mut zooms = Vec::new();
    for _zoom_level in 0..12 {
        // Right then back left: the view stays over the data at every zoom.
        for i in 0..10 {
            time += 1.0 / 60.0;
            let k = if i < 5 {
                egui::Key::ArrowRight
            } else {
                egui::Key::ArrowLeft
            };
            let s = Instant::now();
            let v = frame(&ctx, &mut app, time, key(k));
            pans.push(s.elapsed());
            max_vertices = max_vertices.max(v);
            max_bars = max_bars.max(app.view.drawn().len());
        }
        bars.push(app.view.drawn().len());
        time += 1.0 / 60.0;
        let s = Instant::now();
        black_box(frame(&ctx, &mut app, time, key(egui::Key::Plus)));
        zooms.push(s.elapsed());
    }
    // Fitted to the whole trace again: the worst case for merging.
    time += 1.0 / 60.0;
    frame(&ctx, &mut app, time, key(egui::Key::Num0));
    let mut whole = Vec::new();
    for i in 0..30 {
        time += 1.0 / 60.0;
        let k = if i % 10 < 5 {
            egui::Key::ArrowRight
        } else {
            egui::Key::ArrowLeft
        };
        let s = Instant::now();
        black_box(frame(&ctx, &mut app, time, key(k)));
        whole.push(s.elapsed());
    }
    let (pm, p95, pmax) = stats(pans.clone());
    let (zm, _, zmax) = stats(zooms);
    let (wm, w95, wmax) = stats(whole);
    println!(
        "pan frames (12 zoom levels × 10, up to {max_vertices} vertices): mean {pm:.2} ms, p95 {p95:.2} ms, max {pmax:.2} ms  target ≤ 16 ms  {}",
        verdict(p95 <= 16.0)
    );
    println!("zoom frames: mean {zm:.2} ms, max {zmax:.2} ms");
    println!("bars drawn per zoom level (all lanes; at most {max_bars}): {bars:?}");
    println!(
        "whole trace in view: mean {wm:.2} ms, p95 {w95:.2} ms, max {wmax:.2} ms  target ≤ 16 ms  {}",
        verdict(w95 <= 16.0)
    );
}
