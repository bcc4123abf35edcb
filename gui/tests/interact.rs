#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Interaction tests: the app driven through egui_kittest (real egui input, no window).

use std::io::Write;
use std::path::Path;

use eframe::egui;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use tpuscope_core::event::{Compile, Execute, Manifest, Record, Sync as SyncRec};
use tpuscope_core::{TraceWriter, read_trace};
use tpuscope_gui::{App, Source, Tab};

fn harness(app: App) -> Harness<'static, App> {
    Harness::builder()
        .with_size((1400.0, 900.0))
        // The app adds a system font for arrows and signs; a machine without one shows boxes.
        .allow_missing_glyphs()
        .build_ui_state(|ui, app: &mut App| app.ui(ui), app)
}

fn sample_app(tab: Tab) -> App {
    App::new(vec![Source::sample()], tab, false)
}

#[test]
fn selecting_a_family_shows_its_hlo_diff() {
    let mut h = harness(sample_app(Tab::Recompiles));
    h.run();
    // Nothing selected yet: no diff.
    assert!(h.state().rec.diff.is_none());
    assert!(h.query_by_label_contains("changed ·").is_none());
    let family = h.state().analysis.as_ref().unwrap().report.recompiles[0]
        .graph
        .clone();
    h.get_by_label_contains(&format!("{family}: ")).click();
    h.run();
    let d = h
        .state()
        .rec
        .diff
        .as_ref()
        .expect("a diff after selecting a family");
    assert!(d.note.is_none(), "{:?}", d.note);
    assert!(!d.rows.is_empty());
    // The learning rate is a constant baked into the program: some rows differ.
    assert!(d.changed > 0, "{} changed rows", d.changed);
    assert!(
        d.rows
            .iter()
            .any(|r| !r.right_spans.is_empty()
                && r.right.as_deref().unwrap_or("").contains("constant")),
        "no changed constant row"
    );
    // The counts and the member list are on screen.
    h.get_by_label_contains(&format!("{} changed ·", d.changed));
    h.get_by_label_contains("#2 ·");

    // Picking another member diffs that one.
    let before = h.state().rec.diff.as_ref().unwrap().key;
    h.get_by_label_contains("#3 ·").click();
    h.run();
    let after = h.state().rec.diff.as_ref().unwrap().key;
    assert_ne!(before, after);
    assert_eq!(after.1, 2);
}

#[test]
fn keys_zoom_and_pan_the_timeline() {
    let mut h = harness(sample_app(Tab::Timeline));
    h.run();
    let (a0, b0) = h.state().view.range();
    assert!(b0 > a0);
    let total = h.state().timeline.total_ns as f64;
    let first = h.state().timeline.first_ns as f64;
    assert!(first > 0.0 && first < total);
    assert!(
        a0 <= first && b0 >= total && a0 > first - (total - first) * 0.05,
        "fitted view {a0}..{b0} shows {first}..{total}"
    );

    h.key_press(egui::Key::Plus);
    h.run();
    let (a1, b1) = h.state().view.range();
    assert!(((b1 - a1) - (b0 - a0) / 2.0).abs() < 1.0, "{a1}..{b1}");

    h.key_press(egui::Key::ArrowRight);
    h.run();
    let (a2, b2) = h.state().view.range();
    assert!(a2 > a1 && ((b2 - a2) - (b1 - a1)).abs() < 1.0);

    h.key_press(egui::Key::Minus);
    h.key_press(egui::Key::Num0);
    h.run();
    let (a3, b3) = h.state().view.range();
    assert!((a3 - a0).abs() < 1.0 && (b3 - b0).abs() < 1.0);
}

#[test]
fn the_wheel_zooms_around_the_pointer() {
    let mut h = harness(sample_app(Tab::Timeline));
    h.run();
    let (a0, b0) = h.state().view.range();
    // Over the span area (right of the lane names, below the legend).
    h.hover_at(egui::pos2(900.0, 300.0));
    h.run();
    h.event(egui::Event::MouseWheel {
        unit: egui::MouseWheelUnit::Point,
        delta: egui::vec2(0.0, 200.0),
        modifiers: egui::Modifiers::NONE,
        phase: egui::TouchPhase::Move,
        source: egui::MouseWheelSource::Wheel,
    });
    h.run();
    let (a1, b1) = h.state().view.range();
    assert!(b1 - a1 < b0 - a0, "{a0}..{b0} → {a1}..{b1}");
}

#[test]
fn clicking_a_sync_line_marks_its_syncs_on_the_timeline() {
    let mut h = harness(sample_app(Tab::Syncs));
    h.run();
    let line = {
        let a = h.state().analysis.as_ref().unwrap();
        a.report.syncs[0].label()
    };
    let count = h.state().analysis.as_ref().unwrap().report.syncs[0].count as usize;
    h.get_by_label(&line).click();
    h.run();
    let app = h.state();
    assert_eq!(app.tab, Tab::Timeline);
    assert_eq!(app.view.marks.len(), count);
    // Every mark is a sync record of that line, and the view covers them all.
    let (a, b) = app.view.range();
    for &(lane, span) in &app.view.marks {
        let l = &app.timeline.lanes[lane];
        assert!(l.start(span).unwrap() as f64 >= a && l.end(span).unwrap() as f64 <= b);
    }
    assert!(app.view.selected.is_some());
}

#[test]
fn a_file_that_is_not_a_trace_shows_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("notes.txt");
    std::fs::write(&p, "hello, not a trace at all\n").unwrap();
    let app = App::new(vec![Source::open(&p, false)], Tab::Summary, false);
    let mut h = harness(app);
    h.run();
    h.get_by_label("No trace could be opened");
    h.get_by_label_contains("not a tpuscope trace");
}

#[test]
fn a_newer_format_version_is_named() {
    let p =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/golden/v2.0-newer-major.tps");
    let app = App::new(vec![Source::open(&p, false)], Tab::Summary, false);
    let mut h = harness(app);
    h.run();
    h.get_by_label_contains("newer than this tpuscope understands");
}

#[test]
fn a_truncated_trace_opens_with_a_warning() {
    let bytes = tpuscope_gui::data::SAMPLE;
    let cut = bytes.len() * 2 / 3;
    let whole = read_trace(bytes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("cut.tps");
    std::fs::write(&p, &bytes[..cut]).unwrap();
    let partial = read_trace(&bytes[..cut]).unwrap();
    assert!(partial.events.len() < whole.events.len());
    let app = App::new(vec![Source::open(&p, false)], Tab::Summary, false);
    let mut h = harness(app);
    h.run();
    h.get_by_label_contains("trace cut at byte");
    let a = h.state().analysis.as_ref().unwrap();
    assert_eq!(a.report.traces[0].events, partial.events.len() as u64);
    assert!(h.state().timeline.spans > 0);
}

fn manifest() -> Manifest {
    Manifest {
        pid: 42,
        host: "testhost".into(),
        start_wall_ns: 1_700_000_000_000_000_000,
        start_mono_ns: 1_000_000,
        frontend: "jax".into(),
        ..Manifest::default()
    }
}

fn compile(t: u64, id: u64) -> Record {
    Record::Compile(Box::new(Compile {
        t_ns: t,
        thread: 1,
        dur_ns: 5_000_000,
        api: "PJRT_Client_Compile".into(),
        executable_name: format!("jit_step_{id}"),
        executable_id: id,
        program_hash: id,
        ..Compile::default()
    }))
}

fn execute(t: u64, id: u64, seq: u64) -> Record {
    Record::Execute(Execute {
        t_ns: t,
        thread: 1,
        dur_ns: 100_000,
        executable_id: id,
        seq,
        ..Execute::default()
    })
}

#[test]
fn a_growing_trace_is_followed_without_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("live.tps");
    let file = std::fs::File::create(&p).unwrap();
    let mut w = TraceWriter::new(file, &manifest()).unwrap();
    w.write(&compile(2_000_000, 1)).unwrap();
    for i in 0..10 {
        w.write(&execute(10_000_000 + i * 1_000_000, 1, i)).unwrap();
    }
    w.flush().unwrap();

    // No end record: followed without being asked.
    let src = Source::open(&p, false);
    assert!(src.is_live(), "{:?}", src.error);
    let mut h = harness(App::new(vec![src], Tab::Timeline, false));
    h.run();
    let spans0 = h.state().timeline.spans;
    let compiles0 = h.state().analysis.as_ref().unwrap().report.compiles.total;
    assert_eq!(spans0, 11);
    assert_eq!(compiles0, 1);

    // The workload goes on: a recompile, more executes, a sync, half of a frame.
    w.write(&compile(30_000_000, 2)).unwrap();
    for i in 10..30 {
        w.write(&execute(40_000_000 + i * 1_000_000, 2, i)).unwrap();
    }
    w.write(&Record::Sync(SyncRec {
        t_ns: 90_000_000,
        thread: 1,
        dur_ns: 2_000_000,
        reason: "PJRT_Event_Await".into(),
        ..SyncRec::default()
    }))
    .unwrap();
    w.flush().unwrap();
    let mut half = Vec::new();
    {
        let mut tmp = TraceWriter::new(Vec::new(), &manifest()).unwrap();
        let before = tmp.get_ref().len();
        tmp.write(&compile(95_000_000, 3)).unwrap();
        half.extend_from_slice(&tmp.get_ref()[before..before + (tmp.get_ref().len() - before) / 2]);
    }
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    f.write_all(&half).unwrap();
    f.flush().unwrap();

    // The watcher would set this; egui time moves on as frames are drawn.
    h.state()
        .changed
        .store(true, std::sync::atomic::Ordering::Relaxed);
    h.run_steps(60);
    let spans1 = h.state().timeline.spans;
    assert_eq!(
        spans1,
        11 + 1 + 20 + 1,
        "new records appear on the timeline"
    );
    let report = &h.state().analysis.as_ref().unwrap().report;
    assert_eq!(report.compiles.total, 2, "the report is re-analysed");

    // The rest of the cut frame lands later.
    let mut full = Vec::new();
    {
        let mut tmp = TraceWriter::new(Vec::new(), &manifest()).unwrap();
        let before = tmp.get_ref().len();
        tmp.write(&compile(95_000_000, 3)).unwrap();
        full.extend_from_slice(&tmp.get_ref()[before..]);
    }
    f.write_all(&full[half.len()..]).unwrap();
    f.flush().unwrap();
    h.state()
        .changed
        .store(true, std::sync::atomic::Ordering::Relaxed);
    h.run_steps(60);
    assert_eq!(h.state().timeline.spans, spans1 + 1);
    assert_eq!(
        h.state().analysis.as_ref().unwrap().report.compiles.total,
        3
    );
}

fn click_at(h: &mut Harness<'static, App>, pos: egui::Pos2) {
    h.hover_at(pos);
    h.run();
    for pressed in [true, false] {
        h.event(egui::Event::PointerButton {
            pos,
            button: egui::PointerButton::Primary,
            pressed,
            modifiers: egui::Modifiers::NONE,
        });
    }
    h.run();
}

#[test]
fn clicking_a_recompile_on_the_timeline_leads_to_its_diff() {
    let mut h = harness(sample_app(Tab::Timeline));
    h.run();
    // A compile bar drawn on its own that is a member of a recompile family.
    let (pos, event) = {
        let app = h.state();
        let a = app.analysis.as_ref().unwrap();
        app.view
            .drawn()
            .iter()
            .filter(|(_, r, b)| b.count == 1 && r.width() > 6.0)
            .find_map(|(lane, r, b)| {
                let l = &app.timeline.lanes[*lane];
                let e = l.event(b.span as usize).unwrap();
                a.members.get(&(l.source, e)).map(|_| (r.center(), e))
            })
            .expect("a family member drawn on the timeline")
    };
    click_at(&mut h, pos);
    assert_eq!(h.state().view.selected, Some((0, event)));
    // The details panel names the compile; its button opens the family.
    h.get_by_label_contains("compile jit_train_step");
    h.get_by_label("open in recompile explorer").click();
    h.run();
    let app = h.state();
    assert_eq!(app.tab, Tab::Recompiles);
    let (f, m) = app.analysis.as_ref().unwrap().members[&(0, event)];
    assert_eq!(app.rec.family, Some(f));
    assert_eq!(app.rec.member, Some(m));
    assert!(app.rec.diff.as_ref().is_some_and(|d| d.key == (f, m)));
}

#[test]
fn the_flamegraph_switches_kind_and_exports_svg() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = sample_app(Tab::Flame);
    app.flame.export_to = dir.path().join("flame.svg");
    let mut h = harness(app);
    h.run();
    let compile_total = {
        let (_, _, t) = h.state().flame.tree.as_ref().unwrap();
        t.nodes[0].value
    };
    // The sample compiled for about half a second (the report's compile time, in µs).
    let report_us = h
        .state()
        .analysis
        .as_ref()
        .unwrap()
        .report
        .compiles
        .compile_ms
        * 1e3;
    assert!(
        (compile_total as f64 - report_us).abs() < report_us * 0.01 + 20.0,
        "{compile_total} vs {report_us}"
    );
    h.get_by_label("Export SVG").click();
    h.run();
    let svg = std::fs::read_to_string(dir.path().join("flame.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("jax_lr.py"));
    h.get_by_label_contains("wrote ");

    h.get_by_label("sync stall").click();
    h.run();
    let (kind, _, t) = h.state().flame.tree.as_ref().unwrap();
    assert_eq!(*kind, tpuscope_analyzers::flame::FlameKind::SyncStall);
    assert!(t.nodes[0].value < compile_total);
}

/// dynamo's logs handed to the viewer (as `tpuscope view` finds them next to the trace) show in
/// the summary: the graph break and the guard failure at their lines, with the compiles caused.
#[test]
fn the_summary_shows_dynamo_graph_breaks_and_guard_failures_from_torch_trace_logs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/torch_trace");
    let trace = root.join("graph_break_and_guard.tps");
    let label = trace.display().to_string();
    let mut files = Vec::new();
    for e in std::fs::read_dir(root.join("graph_break_and_guard.torch_trace")).unwrap() {
        let p = e.unwrap().path();
        files.push((
            p.file_name().unwrap().to_string_lossy().into_owned(),
            std::fs::read_to_string(&p).unwrap(),
        ));
    }
    let logs = tpuscope_analyzers::torch_trace::TorchLogs {
        trace_path: label.clone(),
        dir: "graph_break_and_guard.torch_trace".into(),
        files,
        note: None,
    };
    let sources = tpuscope_gui::data::open_all(std::slice::from_ref(&trace), false);
    let app = App::with_torch_logs(sources, Tab::Summary, false, vec![logs]);
    let mut h = harness(app);
    h.run();
    let d = h
        .state()
        .analysis
        .as_ref()
        .unwrap()
        .report
        .dynamo
        .clone()
        .expect("a dynamo section");
    assert_eq!(d.graph_breaks.len(), 1);
    let gb = &d.graph_breaks[0];
    // The section's line (the finding's title words it otherwise).
    let src = gb.source.as_ref().unwrap();
    h.get_by_label_contains(&format!("graph break at {src}: {}×", gb.count));
    assert!(!d.guard_failures.is_empty());
    let g = &d.guard_failures[0];
    h.get_by_label_contains(&format!(
        "guard failed at {}: {} of {}",
        g.source.as_ref().unwrap(),
        tpuscope_analyzers::units::plural(g.count, "recompile", "recompiles"),
        g.function,
    ));
    // Each caused compile is named under its line.
    let first = &gb.compiles[0];
    h.get_by_label_contains(&format!("{} {}", first.compile_id, first.graph));

    // Without the logs, no such section.
    let sources = tpuscope_gui::data::open_all(std::slice::from_ref(&trace), false);
    let mut h = harness(App::new(sources, Tab::Summary, false));
    h.run();
    assert!(h.state().analysis.as_ref().unwrap().report.dynamo.is_none());
    assert!(h.query_by_label_contains("guard failed at ").is_none());
}

fn whatif_app(w: tpuscope_gui::whatif::WhatIf) -> App {
    let mut app = sample_app(Tab::WhatIf);
    app.whatif = w;
    app
}

/// The bundled sample's saved what-if (a real `tpuscope whatif` of it for v5e:2x2).
fn sample_whatif() -> tpuscope_analyzers::whatif::WhatIfReport {
    tpuscope_gui::data::sample_whatif().expect("the bundled what-if parses")
}

#[test]
fn the_whatif_tab_shows_a_saved_report_and_a_clicked_programs_memory() {
    use tpuscope_gui::whatif::WhatIf;
    let w = sample_whatif();
    let mut h = harness(whatif_app(WhatIf::new(None, Some(w.clone()))));
    h.run();
    h.get_by_label(&format!("What-if: {}", w.title()));
    h.get_by_label(&w.programs_line());
    for f in &w.recompiles {
        h.get_by_label(&w.family_line(f));
    }
    // No launcher: nothing to compile with, so no button.
    assert!(h.query_by_label("Compile for this topology").is_none());
    // The program needing the most is shown first; clicking another shows that one's memory.
    let first = h.state().whatif.selected.unwrap();
    h.get_by_label(&format!("{}: HBM on one device", w.programs[first].name));
    let other = w
        .programs
        .iter()
        .position(|p| p.name != w.programs[first].name)
        .unwrap();
    h.get_all_by_label(&w.programs[other].name)
        .next()
        .unwrap()
        .click();
    h.run();
    let picked = h.state().whatif.selected.unwrap();
    assert_eq!(w.programs[picked].name, w.programs[other].name);
    h.get_by_label(&format!("{}: HBM on one device", w.programs[other].name));
    h.get_by_label_contains("fits, ");
}

/// The tab asks its launcher (the CLI's whatif in the real window) and shows its progress and
/// answer. The launcher here answers with the sample's saved report, one program of it made
/// larger than a chip, to see how a program that does not fit is shown.
#[test]
fn the_whatif_tab_compiles_through_its_launcher_and_shows_what_does_not_fit() {
    use std::sync::{Arc, Mutex};
    use tpuscope_gui::whatif::{Launcher, Update, WhatIf};
    let mut w = sample_whatif();
    let chip = w.hbm_bytes_per_chip.unwrap() as i64;
    let big = &mut w.programs[0];
    let t = big.tpu.as_mut().unwrap();
    t.memory.as_mut().unwrap().temp = chip;
    t.need_bytes = t.memory.unwrap().need();
    t.fits = Some(false);
    t.overflow_bytes = t.need_bytes - chip;
    w.not_fitting = 1;
    let asked: Arc<Mutex<Vec<(String, usize)>>> = Arc::default();
    let seen = Arc::clone(&asked);
    let answer = w.clone();
    let launcher: Launcher = Arc::new(move |topology, traces, sink| {
        seen.lock().unwrap().push((topology.clone(), traces.len()));
        let answer = answer.clone();
        std::thread::spawn(move || {
            sink(Update::Progress {
                done: 1,
                total: 2,
                line: "jit_stage: compiled in 400 ms".into(),
            });
            if topology == "v9z:1x1" {
                sink(Update::Done(Err("libtpu: unknown topology v9z:1x1".into())));
            } else {
                sink(Update::Done(Ok(Box::new(answer))));
            }
        });
    });
    let mut h = harness(whatif_app(WhatIf::new(Some(launcher), None)));
    h.run();
    h.get_by_label_contains("Compile this run's programs for a TPU topology");
    h.get_by_label("Compile for this topology").click();
    // One frame: while the what-if runs the tab shows a spinner, which repaints forever.
    h.step();
    h.state_mut().whatif.wait();
    h.run();
    assert_eq!(
        asked.lock().unwrap().as_slice(),
        &[("v5e:2x2".to_string(), 1)]
    );
    h.get_by_label(&w.programs_line());
    assert!(w.programs_line().contains("1 does not fit"));
    // The program that does not fit is the one shown, with its overflow.
    assert_eq!(h.state().whatif.selected, Some(0));
    let over = w.programs[0].tpu.as_ref().unwrap().fits_label();
    assert!(over.starts_with("NO (+"), "{over}");
    h.get_by_label(&over);
    h.get_by_label_contains("more than the chip's");

    // A what-if that fails says why, and the last answer stays.
    h.state_mut().whatif.topology = "v9z:1x1".into();
    h.get_by_label("Compile for this topology").click();
    // One frame: while the what-if runs the tab shows a spinner, which repaints forever.
    h.step();
    h.state_mut().whatif.wait();
    h.run();
    h.get_by_label("what-if: libtpu: unknown topology v9z:1x1");
    h.get_by_label(&w.programs_line());
}

/// Step `number` of the sample's run on the timeline's clock (ns since the source's origin),
/// from the report's own step rows (ms since the manifest's start, which is the sample's
/// origin).
fn sample_step_on_timeline(app: &App, number: u32) -> (f64, f64) {
    let a = app.analysis.as_ref().unwrap();
    let row = a
        .report
        .steps
        .per_step
        .iter()
        .find(|r| r.number == number)
        .unwrap();
    let run = app.sources[0].run().unwrap();
    let manifest_start = run.trace.manifest.as_ref().unwrap().start_mono_ns;
    let shift = manifest_start as f64 - app.timeline.t0[0] as f64;
    let a = row.t_ms * 1e6 + shift;
    (a, a + row.dur_ms * 1e6)
}

#[test]
fn the_time_tab_shows_the_headline_and_a_clicked_slow_step_on_the_timeline() {
    let mut h = harness(sample_app(Tab::Time));
    h.run();
    let (headline, slow) = {
        let a = h.state().analysis.as_ref().unwrap();
        let split = tpuscope_analyzers::present::split_line(&a.report.time[0].total).text();
        (split, a.report.time[0].slow_steps[0].clone())
    };
    assert!(headline.starts_with("devices busy"), "{headline}");
    h.get_by_label_contains(&headline);
    h.get_by_label_contains("Where the time goes");
    // The sample's slowest step compiles its loss's eager ops.
    assert_eq!(slow.number, 5);
    h.get_by_label_contains(&format!(
        "step {} · {} ms",
        slow.number,
        tpuscope_analyzers::units::ms(slow.ms)
    ))
    .click();
    h.run();
    let app = h.state();
    assert_eq!(app.tab, Tab::Timeline);
    let (s0, s1) = sample_step_on_timeline(app, slow.number);
    let (v0, v1) = app.view.range();
    assert!(
        v0 <= s0 && v1 >= s1,
        "view {v0}..{v1} misses step {s0}..{s1}"
    );
    // Focused on the step, not the whole run.
    assert!(
        v1 - v0 < (s1 - s0) * 2.0,
        "view {v0}..{v1} for step {s0}..{s1}"
    );
    assert!(
        app.view.marks_label.starts_with("step 5: "),
        "{}",
        app.view.marks_label
    );
    // The step's compiles (its notes) are drawn inside the view.
    let compiles: Vec<(u64, u64)> = app
        .timeline
        .lanes
        .iter()
        .flat_map(|l| (0..l.len()).map(move |i| (l.start(i).unwrap(), l.end(i).unwrap())))
        .filter(|&(a, b)| a as f64 >= s0 && b as f64 <= s1)
        .collect();
    assert!(!compiles.is_empty(), "no span inside step 5");
    assert_eq!(app.time.selected, Some((0, 5)));
}

#[test]
fn clicking_a_steps_bar_in_the_time_chart_shows_that_step_on_the_timeline() {
    let mut h = harness(sample_app(Tab::Time));
    h.run();
    h.run();
    let pos = {
        let app = h.state();
        app.time
            .column_at(app.analysis.as_ref().unwrap(), 10)
            .expect("the chart was drawn")
    };
    click_at(&mut h, pos);
    let app = h.state();
    assert_eq!(app.tab, Tab::Timeline, "clicked at {pos:?}");
    assert_eq!(app.time.selected, Some((0, 10)));
    let (s0, s1) = sample_step_on_timeline(app, 10);
    let (v0, v1) = app.view.range();
    assert!(
        v0 <= s0 && v1 >= s1,
        "view {v0}..{v1} misses step {s0}..{s1}"
    );
    // Step 10, not its neighbour: the view is centred on it.
    let mid = (v0 + v1) / 2.0;
    assert!(
        s0 <= mid && mid <= s1,
        "view {v0}..{v1} centred off step {s0}..{s1}"
    );
    let (n0, n1) = sample_step_on_timeline(app, 11);
    assert!(!(n0 <= mid && mid <= n1));
}

#[test]
fn the_time_tab_of_a_run_without_device_timing_draws_it_unknown_and_says_why() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/real/torch_tpu_cache.tps");
    let mut h = harness(App::new(vec![Source::open(&p, false)], Tab::Time, false));
    h.run();
    let run = h.state().analysis.as_ref().unwrap().report.time[0].clone();
    assert!(!run.device_timing.complete());
    assert!(run.steps.iter().any(|s| s.split.untimed_ms > 0.0));
    h.get_by_label_contains(&format!(
        "grey: device time unknown: {} of {} launches have no completion event",
        run.device_timing.launches - run.device_timing.timed,
        run.device_timing.launches
    ));
    // No step is said to be host-bound or busy when that cannot be known.
    assert!(
        run.steps
            .iter()
            .all(|s| s.split.host_bound_ms == 0.0 && s.split.device_busy_ms == 0.0)
    );
}
