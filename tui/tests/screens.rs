#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every view rendered from the recorded traces into ratatui's TestBackend, checked with insta
//! snapshots (CI fails on a snapshot that differs or is new: insta never writes when `CI` is set).

use std::path::{Path, PathBuf};

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Color;
use tpuscope_analyzers::report::{self, Input};
use tpuscope_core::{Trace, read_trace_file};
use tpuscope_tui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use tpuscope_tui::{App, Extra, Model, RunState, Tab, view};

fn trace_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sample_traces/real")
        .join(name)
}

fn load(name: &str) -> Trace {
    read_trace_file(&trace_path(name)).unwrap()
}

fn build(trace: &Trace, now_ns: Option<u64>, extra: Extra) -> Model {
    let report = report::build(
        &[Input::new("trace.tps", trace)],
        &report::Options::default(),
    );
    Model::build(trace, report, now_ns, extra)
}

fn ended() -> Extra {
    Extra {
        state: RunState::Ended,
        ..Extra::default()
    }
}

fn app_for(name: &str) -> App {
    let trace = load(name);
    let mut app = App::new();
    app.set_model(build(&trace, None, ended()), 0);
    app
}

fn key(app: &mut App, code: KeyCode) {
    app.handle_key(KeyEvent::new(code, KeyModifiers::NONE), 0);
}

fn render(app: &mut App, w: u16, h: u16) -> String {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| view::draw_app(f, app)).unwrap();
    term.backend().to_string()
}

fn render_buffer(app: &mut App, w: u16, h: u16) -> Buffer {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| view::draw_app(f, app)).unwrap();
    term.backend().buffer().clone()
}

/// The cells of the row that holds `█`s (the time bar), by foreground colour.
fn bar_colours(buf: &Buffer) -> Vec<(Color, usize)> {
    let area = buf.area;
    for y in 0..area.height {
        let cells: Vec<_> = (0..area.width)
            .map(|x| &buf[(x, y)])
            .filter(|c| c.symbol() == "█")
            .collect();
        if cells.len() > area.width as usize / 2 {
            let mut out: Vec<(Color, usize)> = Vec::new();
            for c in cells {
                match out.iter_mut().find(|(col, _)| *col == c.fg) {
                    Some((_, n)) => *n += 1,
                    None => out.push((c.fg, 1)),
                }
            }
            return out;
        }
    }
    Vec::new()
}

#[test]
fn overview_jax_lr() {
    let mut app = app_for("jax_lr.tps");
    insta::assert_snapshot!("overview_jax_lr_80x24", render(&mut app, 80, 24));
    insta::assert_snapshot!("overview_jax_lr_120x40", render(&mut app, 120, 40));
    insta::assert_snapshot!("overview_jax_lr_200x60", render(&mut app, 200, 60));
}

/// A session `tpuscope attach` recorded from the middle of a run: the header says so and counts
/// time from the attach.
#[test]
fn overview_of_an_attached_session() {
    let mut app = app_for("jax_attach.tps");
    let screen = render(&mut app, 120, 40);
    assert!(screen.contains("attached 1.89 s into the run"), "{screen}");
    assert!(
        screen.contains("· attached 3.1 s") && !screen.contains("· ran "),
        "{screen}"
    );
    insta::assert_snapshot!("overview_jax_attach_120x40", screen);
}

/// A run killed with SIGKILL, shown after it ended: the header says where recording stopped, in
/// the report's words.
#[test]
fn overview_of_a_killed_run() {
    let mut app = app_for("jax_killed.tps");
    let screen = render(&mut app, 200, 40);
    assert!(
        screen.contains("partial report; recording stopped 1.15 s into the run, in step 35"),
        "{screen}"
    );
    insta::assert_snapshot!("overview_jax_killed_200x40", screen);
}

#[test]
fn recompiles_jax_lr() {
    let mut app = app_for("jax_lr.tps");
    app.set_tab(Tab::Recompiles);
    insta::assert_snapshot!("recompiles_jax_lr_80x24", render(&mut app, 80, 24));
    insta::assert_snapshot!("recompiles_jax_lr_120x40", render(&mut app, 120, 40));
}

#[test]
fn detail_jax_lr_constant_changed() {
    let mut app = app_for("jax_lr.tps");
    app.set_tab(Tab::Recompiles);
    key(&mut app, KeyCode::Enter);
    insta::assert_snapshot!("detail_jax_lr_80x24", render(&mut app, 80, 24));
    insta::assert_snapshot!("detail_jax_lr_120x40", render(&mut app, 120, 40));
}

#[test]
fn recompiles_and_detail_jax_shapes() {
    let mut app = app_for("jax_shapes.tps");
    app.set_tab(Tab::Recompiles);
    insta::assert_snapshot!("recompiles_jax_shapes_120x40", render(&mut app, 120, 40));
    key(&mut app, KeyCode::Down);
    key(&mut app, KeyCode::Enter);
    insta::assert_snapshot!("detail_jax_shapes_80x24", render(&mut app, 80, 24));
}

#[test]
fn syncs_torch_xla_item() {
    let mut app = app_for("torch_xla_item.tps");
    insta::assert_snapshot!("overview_torch_xla_item_80x24", render(&mut app, 80, 24));
    app.set_tab(Tab::Syncs);
    insta::assert_snapshot!("syncs_torch_xla_item_80x24", render(&mut app, 80, 24));
    insta::assert_snapshot!("syncs_torch_xla_item_120x40", render(&mut app, 120, 40));
}

#[test]
fn memory_views() {
    let mut app = app_for("torch_xla_item.tps");
    app.set_tab(Tab::Memory);
    insta::assert_snapshot!("memory_torch_xla_item_80x24", render(&mut app, 80, 24));
    let mut app = app_for("jax_aot_v5e.tps");
    app.set_tab(Tab::Memory);
    insta::assert_snapshot!("memory_jax_aot_v5e_80x24", render(&mut app, 80, 24));
}

#[test]
fn events_torch_tpu_cache() {
    let mut app = app_for("torch_tpu_cache.tps");
    app.set_tab(Tab::Events);
    insta::assert_snapshot!("events_torch_tpu_cache_80x24", render(&mut app, 80, 24));
    app.set_tab(Tab::Overview);
    insta::assert_snapshot!("overview_torch_tpu_cache_120x40", render(&mut app, 120, 40));
}

#[test]
fn output_pane_and_live_header() {
    let trace = load("jax_lr.tps");
    let start = trace.manifest.as_ref().unwrap().start_mono_ns;
    let extra = Extra {
        state: RunState::Live,
        viewer_lost: 7,
        output: (1..=30)
            .map(|i| format!("epoch {i} loss {:.3}", 1.0 / i as f64))
            .collect(),
    };
    let mut app = App::new();
    app.set_model(build(&trace, Some(start + 2_500_000_000), extra), 0);
    assert!(app.tabs().contains(&Tab::Output));
    app.set_tab(Tab::Output);
    insta::assert_snapshot!("output_jax_lr_live_80x24", render(&mut app, 80, 24));
}

#[test]
fn small_terminal() {
    let mut app = app_for("jax_lr.tps");
    insta::assert_snapshot!("overview_jax_lr_40x10", render(&mut app, 40, 10));
}

/// The bar of the split fills its row, each category's colour over its share of the cells.
#[test]
fn the_time_bar_is_the_split_in_colours() {
    let mut app = app_for("jax_lr.tps");
    let t = app.model().unwrap().time.clone().unwrap();
    let buf = render_buffer(&mut app, 120, 40);
    let bar = bar_colours(&buf);
    let cells: usize = bar.iter().map(|(_, n)| n).sum();
    assert_eq!(cells, 118, "{bar:?}");
    let of = |c: Color| bar.iter().find(|(col, _)| *col == c).map_or(0, |x| x.1);
    let expect = |ms: f64| ms / t.total.wall_ms * 118.0;
    for (colour, ms) in [
        (Color::Green, t.total.device_busy_ms),
        (Color::Yellow, t.total.compiling_ms),
        (Color::LightBlue, t.total.host_bound_ms),
        (Color::Red, t.total.blocked_ms),
    ] {
        let want = expect(ms);
        let got = of(colour) as f64;
        assert!(
            (got - want).abs() <= 1.0,
            "{colour:?}: {got} cells for {want}"
        );
    }
    // Compiling and host-bound are about half each in this run: both are drawn.
    assert!(
        of(Color::Yellow) > 40 && of(Color::LightBlue) > 40,
        "{bar:?}"
    );
    assert_eq!(of(Color::Gray), 0);
}

/// Without completion events the bar has no devices-busy part: the rest is grey and the screen
/// says why.
#[test]
fn missing_device_timing_is_grey_and_said() {
    let mut app = app_for("torch_tpu_cache.tps");
    let screen = render(&mut app, 120, 40);
    assert!(
        screen.contains("device time unknown: 12 of 12 launches have no completion event"),
        "{screen}"
    );
    let bar = bar_colours(&render_buffer(&mut app, 120, 40));
    assert!(bar.iter().all(|(c, _)| *c != Color::Green), "{bar:?}");
    assert!(
        bar.iter().any(|(c, n)| *c == Color::Gray && *n > 100),
        "{bar:?}"
    );
    // At 80 columns the note is still there, under the bar.
    let screen = render(&mut app, 80, 24);
    assert!(
        screen.contains("device time unknown: 12 of 12 launches have no completion event"),
        "{screen}"
    );
    insta::assert_snapshot!("overview_torch_tpu_cache_80x24", screen);
}

/// A run in progress: the running step is not shown as the current one.
#[test]
fn overview_of_a_live_run() {
    let trace = load("torch_xla_item.tps");
    let mut app = App::new();
    app.set_model(build(&trace, None, Extra::default()), 0);
    let screen = render(&mut app, 120, 40);
    insta::assert_snapshot!("overview_torch_xla_item_live_120x40", screen);
    let mut app = app_for("jax_shapes.tps");
    insta::assert_snapshot!("overview_jax_shapes_80x24", render(&mut app, 80, 24));
}
