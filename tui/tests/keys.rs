#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Keys, pause, the highlight of a growing family, and drawing at any size.

use std::path::Path;

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::Color;
use tpuscope_analyzers::report::{self, Input};
use tpuscope_core::{Record, Trace, read_trace_file};
use tpuscope_tui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use tpuscope_tui::{Action, App, Extra, HIGHLIGHT_MS, Model, RunState, Tab, view};

fn load(name: &str) -> Trace {
    read_trace_file(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sample_traces/real")
            .join(name),
    )
    .unwrap()
}

fn build(trace: &Trace, extra: Extra) -> Model {
    let report = report::build(
        &[Input::new("trace.tps", trace)],
        &report::Options::default(),
    );
    Model::build(trace, report, None, extra)
}

fn app_with(trace: &Trace) -> App {
    let mut app = App::new();
    app.set_model(build(trace, Extra::default()), 0);
    app
}

/// The model of `jax_shapes.tps` (one recompile family, `jit_f`) with two renamed copies of it
/// around it: three families to move and filter through, in the order
/// `jit_stage`, `jit_f`, `jit__reduce_sum`.
fn three_families(trace: &Trace) -> App {
    let mut m = build(trace, Extra::default());
    assert_eq!(m.families.len(), 1, "{:?}", m.families);
    let f = m.families[0].clone();
    let renamed = |name: &str| {
        let mut c = f.clone();
        c.graph = name.to_string();
        c.key = format!("{}-{name}", f.key);
        c
    };
    m.families = vec![renamed("jit_stage"), f.clone(), renamed("jit__reduce_sum")];
    let mut app = App::new();
    app.set_model(m, 0);
    app
}

fn press(app: &mut App, code: KeyCode) -> Action {
    app.handle_key(KeyEvent::new(code, KeyModifiers::NONE), 0)
}

fn type_text(app: &mut App, s: &str) {
    for c in s.chars() {
        press(app, KeyCode::Char(c));
    }
}

fn screen(app: &mut App, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut term = Terminal::new(TestBackend::new(w, h)).unwrap();
    term.draw(|f| view::draw_app(f, app)).unwrap();
    term
}

/// The trace cut just before the `n`-th compile of `graph` (1-based): an earlier moment of the run.
fn before_compile(trace: &Trace, graph: &str, n: usize) -> Trace {
    let mut seen = 0;
    let cut = trace
        .events
        .iter()
        .position(|r| {
            if let Record::Compile(c) = r
                && c.executable_name == graph
            {
                seen += 1;
                return seen == n;
            }
            false
        })
        .unwrap();
    let mut t = trace.clone();
    t.events.truncate(cut);
    t.end = None;
    t
}

#[test]
fn tab_and_shift_tab_cycle_the_views() {
    let trace = load("jax_lr.tps");
    let mut app = app_with(&trace);
    assert_eq!(app.tab(), Tab::Overview);
    // No workload output: no Output tab.
    assert_eq!(app.tabs().len(), 5);
    press(&mut app, KeyCode::Tab);
    assert_eq!(app.tab(), Tab::Recompiles);
    press(&mut app, KeyCode::Tab);
    assert_eq!(app.tab(), Tab::Syncs);
    press(&mut app, KeyCode::BackTab);
    press(&mut app, KeyCode::BackTab);
    assert_eq!(app.tab(), Tab::Overview);
    press(&mut app, KeyCode::BackTab);
    assert_eq!(app.tab(), Tab::Events);
    press(&mut app, KeyCode::Char('4'));
    assert_eq!(app.tab(), Tab::Memory);
    // The tab bar shows the selected view.
    let term = screen(&mut app, 80, 24);
    let buf = term.backend().buffer();
    let row: String = (0..80).map(|x| buf[(x, 3)].symbol().to_string()).collect();
    let at = row.find("Memory").unwrap();
    let x = row[..at].chars().count() as u16;
    assert!(
        buf[(x, 3)]
            .modifier
            .contains(ratatui::style::Modifier::REVERSED)
    );

    let extra = Extra {
        output: vec!["hello".into()],
        ..Extra::default()
    };
    app.set_model(build(&trace, extra), 0);
    assert_eq!(app.tabs().len(), 6);
    press(&mut app, KeyCode::Char('6'));
    assert_eq!(app.tab(), Tab::Output);
}

#[test]
fn enter_opens_the_family_and_esc_closes_it() {
    let trace = load("jax_lr.tps");
    let mut app = app_with(&trace);
    press(&mut app, KeyCode::Tab);
    assert_eq!(app.detail(), None);
    press(&mut app, KeyCode::Enter);
    let key = app.detail().unwrap().to_string();
    assert!(key.contains("jit_train_step"), "{key}");
    let text = screen(&mut app, 100, 30).backend().to_string();
    assert!(text.contains("What changed vs #3"), "{text}");
    assert!(text.contains("0.025 → 0.0125"), "{text}");
    assert!(text.contains("Python stack"), "{text}");
    // Up selects the previous member, whose change is another value.
    press(&mut app, KeyCode::Up);
    let text = screen(&mut app, 100, 30).backend().to_string();
    assert!(text.contains("What changed vs #2"), "{text}");
    assert!(text.contains("0.05 → 0.025"), "{text}");
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.detail(), None);
    assert_eq!(app.tab(), Tab::Recompiles);
    press(&mut app, KeyCode::Enter);
    assert!(app.detail().is_some());
    press(&mut app, KeyCode::Backspace);
    assert_eq!(app.detail(), None);
    // Enter on a view without families opens nothing.
    app.set_tab(Tab::Events);
    press(&mut app, KeyCode::Enter);
    assert_eq!(app.detail(), None);
}

#[test]
fn filter_narrows_the_families() {
    let trace = load("jax_shapes.tps");
    let mut app = three_families(&trace);
    let all = app.visible_families(app.model().unwrap()).len();
    assert_eq!(all, 3);
    press(&mut app, KeyCode::Char('/'));
    assert!(app.editing_filter());
    // While typing, q is text, not quit.
    assert_eq!(press(&mut app, KeyCode::Char('q')), Action::None);
    press(&mut app, KeyCode::Backspace);
    type_text(&mut app, "REDUCE");
    assert_eq!(app.filter(), "REDUCE");
    let m = app.model().unwrap();
    let names: Vec<&str> = app
        .visible_families(m)
        .iter()
        .map(|f| f.graph.as_str())
        .collect();
    assert_eq!(names, ["jit__reduce_sum"]);
    press(&mut app, KeyCode::Enter);
    assert!(!app.editing_filter());
    assert_eq!(app.filter(), "REDUCE");
    let text = screen(&mut app, 80, 24).backend().to_string();
    assert!(text.contains("jit__reduce_sum"), "{text}");
    assert!(!text.contains("jit_stage"), "{text}");
    assert!(text.contains("filter: REDUCE"), "{text}");
    // Enter now opens the one family that is left.
    press(&mut app, KeyCode::Enter);
    assert!(app.detail().unwrap().contains("jit__reduce_sum"));
    press(&mut app, KeyCode::Esc);
    // Esc with no detail open clears the filter.
    press(&mut app, KeyCode::Esc);
    assert_eq!(app.filter(), "");
    assert_eq!(app.visible_families(app.model().unwrap()).len(), 3);
    // Esc while typing clears too.
    press(&mut app, KeyCode::Char('/'));
    type_text(&mut app, "zzz");
    assert_eq!(app.visible_families(app.model().unwrap()).len(), 0);
    press(&mut app, KeyCode::Esc);
    assert!(!app.editing_filter());
    assert_eq!(app.visible_families(app.model().unwrap()).len(), 3);
}

#[test]
fn pause_freezes_the_model_shown() {
    let full = load("jax_lr.tps");
    let early = before_compile(&full, "jit_train_step", 3);
    let mut app = app_with(&early);
    let events_before = app.model().unwrap().counters.events;
    press(&mut app, KeyCode::Char('p'));
    assert!(app.paused());
    app.set_model(build(&full, Extra::default()), 100);
    assert_eq!(app.model().unwrap().counters.events, events_before);
    let text = screen(&mut app, 80, 24).backend().to_string();
    assert!(text.contains("PAUSED"), "{text}");
    press(&mut app, KeyCode::Char('p'));
    assert!(!app.paused());
    assert_eq!(
        app.model().unwrap().counters.events,
        full.events.len() as u64
    );
    assert!(events_before < full.events.len() as u64);
}

#[test]
fn a_growing_family_is_highlighted_for_a_while() {
    let full = load("jax_lr.tps");
    let three = before_compile(&full, "jit_train_step", 4);
    let two = before_compile(&full, "jit_train_step", 3);
    let mut app = App::new();
    // The first model is history: nothing in it is highlighted.
    app.set_model(build(&two, Extra::default()), 0);
    let key = app.model().unwrap().families[0].key.clone();
    assert_eq!(app.model().unwrap().families[0].count, 2);
    assert!(!app.is_highlighted(&key));

    app.set_model(build(&three, Extra::default()), 10_000);
    assert_eq!(app.model().unwrap().families[0].count, 3);
    assert!(app.is_highlighted(&key));
    // The row is drawn in the highlight colour.
    let term = screen(&mut app, 80, 24);
    let buf = term.backend().buffer();
    let y = (0..24)
        .find(|&y| {
            (0..80)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
                .contains("jit_train_step 3")
        })
        .unwrap();
    assert_eq!(buf[(3, y)].bg, Color::Yellow);

    app.tick(10_000 + HIGHLIGHT_MS - 1);
    assert!(app.is_highlighted(&key));
    app.tick(10_000 + HIGHLIGHT_MS);
    assert!(!app.is_highlighted(&key));
    let term = screen(&mut app, 80, 24);
    assert_ne!(term.backend().buffer()[(3, y)].bg, Color::Yellow);

    // The same count again is no growth; a higher one is.
    app.set_model(build(&three, Extra::default()), 20_000);
    assert!(!app.is_highlighted(&key));
    app.set_model(build(&full, Extra::default()), 21_000);
    assert!(app.is_highlighted(&key));
}

#[test]
fn q_and_ctrl_c_quit() {
    let trace = load("jax_lr.tps");
    let mut app = app_with(&trace);
    assert_eq!(press(&mut app, KeyCode::Char('j')), Action::None);
    assert_eq!(press(&mut app, KeyCode::Char('q')), Action::Quit);
    press(&mut app, KeyCode::Char('/'));
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(app.handle_key(ctrl_c, 0), Action::Quit);
}

#[test]
fn arrows_move_and_scroll() {
    let trace = load("jax_shapes.tps");
    let mut app = three_families(&trace);
    app.set_tab(Tab::Recompiles);
    let m = app.model().unwrap().clone();
    assert_eq!(app.selected_family(&m).unwrap().graph, "jit_stage");
    press(&mut app, KeyCode::Down);
    press(&mut app, KeyCode::Char('j'));
    assert_eq!(app.selected_family(&m).unwrap().graph, "jit__reduce_sum");
    // The end of the list holds.
    press(&mut app, KeyCode::Down);
    assert_eq!(app.selected_family(&m).unwrap().graph, "jit__reduce_sum");
    press(&mut app, KeyCode::Char('k'));
    assert_eq!(app.selected_family(&m).unwrap().graph, "jit_f");
    // The events view follows the newest line until scrolled back.
    app.set_tab(Tab::Events);
    let newest = m.events.last().unwrap().text.clone();
    let text = screen(&mut app, 200, 20).backend().to_string();
    assert!(text.contains(&newest), "{text}");
    press(&mut app, KeyCode::PageUp);
    let text = screen(&mut app, 200, 20).backend().to_string();
    assert!(!text.contains(&newest), "{text}");
    press(&mut app, KeyCode::End);
    let text = screen(&mut app, 200, 20).backend().to_string();
    assert!(text.contains(&newest), "{text}");
}

#[test]
fn draws_at_every_size_and_across_resizes() {
    let mut apps = Vec::new();
    for name in ["jax_lr.tps", "torch_xla_item.tps", "jax_aot_v5e.tps"] {
        let trace = load(name);
        let mut app = App::new();
        app.set_model(
            build(
                &trace,
                Extra {
                    state: RunState::Live,
                    viewer_lost: 3,
                    output: vec!["x".repeat(500)],
                },
            ),
            0,
        );
        apps.push(app);
    }
    let sizes: Vec<(u16, u16)> = [(40, 10), (80, 24), (200, 60), (120, 40)]
        .into_iter()
        .chain(
            (1..=45)
                .step_by(4)
                .flat_map(|w| (1..=14).map(move |h| (w, h))),
        )
        .collect();
    for app in &mut apps {
        let mut term = Terminal::new(TestBackend::new(80, 24)).unwrap();
        for tab in app.tabs() {
            app.set_tab(tab);
            for &(w, h) in &sizes {
                term.backend_mut().resize(w, h);
                term.draw(|f| view::draw_app(f, app)).unwrap();
                assert_eq!(term.backend().buffer().area.width, w);
            }
        }
        // The family detail, where there is one.
        app.set_tab(Tab::Recompiles);
        press(app, KeyCode::Enter);
        for &(w, h) in &sizes {
            term.backend_mut().resize(w, h);
            term.draw(|f| view::draw_app(f, app)).unwrap();
        }
        for code in [
            KeyCode::PageDown,
            KeyCode::PageDown,
            KeyCode::Up,
            KeyCode::End,
        ] {
            press(app, code);
            term.draw(|f| view::draw_app(f, app)).unwrap();
        }
    }
    // Before the first model: a waiting screen.
    let mut empty = App::new();
    let text = screen(&mut empty, 40, 10).backend().to_string();
    assert!(text.contains("waiting"), "{text}");
}
