//! The Time tab: where the time goes. The report's own section on top, then each step's wall
//! time stacked by category (the analyzers' split, `Report::time`), and the slow steps; a click
//! on a step (its column in the chart, or its row in the list) shows it on the timeline.

use std::sync::Arc;

use eframe::egui::{self, Color32, RichText, Stroke};
use egui_plot::{Bar, BarChart, HoverPosition, Legend, Plot, PlotPoint, PlotTransform, VLine};

use tpuscope_analyzers::breakdown::{Category, RunBreakdown, StepSplit};
use tpuscope_analyzers::digest::Digest;
use tpuscope_analyzers::present;
use tpuscope_analyzers::units::{ms, percent};
use tpuscope_core::Trace;

use crate::analysis::Analysis;

/// Steps drawn at most: past that a bar is narrower than a pixel and the chart is a smear. The
/// report keeps every split of a run's first this many steps.
pub const MAX_BARS: usize = tpuscope_analyzers::breakdown::KEPT_FIRST_STEPS;
/// Width of a step's bar, in steps.
const BAR_WIDTH: f64 = 0.8;
/// The selected step's outline.
const SELECTED: Color32 = Color32::from_rgb(255, 200, 0);

/// A category's colour, the same wherever the split is drawn.
pub fn colour(c: Category) -> Color32 {
    match c {
        Category::DeviceBusy => Color32::from_rgb(70, 185, 100),
        Category::Compiling => Color32::from_rgb(232, 145, 40),
        Category::HostBound => Color32::from_rgb(70, 140, 230),
        Category::Blocked => Color32::from_rgb(225, 70, 60),
        Category::Untimed => Color32::from_rgb(150, 150, 150),
    }
}

/// Warm-up steps are drawn fainter: they compile by design.
fn warm_up(c: Color32) -> Color32 {
    c.gamma_multiply(0.4)
}

/// What the tab keeps between frames.
#[derive(Default)]
pub struct TimeState {
    /// The run shown (index in `Report::time`).
    pub run: usize,
    /// Bars as shares of their step instead of milliseconds.
    pub shares: bool,
    /// The step last asked for: (run, step number).
    pub selected: Option<(usize, u32)>,
    /// The chart's plot-to-screen transform in the last frame (tests click columns with it).
    pub transform: Option<PlotTransform>,
}

impl TimeState {
    /// Where step `number`'s column was drawn in the last frame, halfway up its bar.
    pub fn column_at(&self, a: &Analysis, number: u32) -> Option<egui::Pos2> {
        let t = self.transform?;
        let run = a.report.time.get(self.run)?;
        let s = step(run, number)?;
        let h = if self.shares { 100.0 } else { s.split.wall_ms };
        Some(t.position_from_point(&PlotPoint::new(f64::from(number), h / 2.0)))
    }
}

/// What a click in the tab asked for.
pub enum Action {
    /// Show a step of a run (index in `Report::time`) on the timeline.
    Step { run: usize, number: u32 },
}

pub fn tab_ui(ui: &mut egui::Ui, state: &mut TimeState, a: &Arc<Analysis>) -> Option<Action> {
    let mut action = None;
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show(ui, |ui| {
            // The headline, phases, devices and slow steps in the report's words.
            crate::summary::section_ui(ui, 0, &present::time(&a.report));
            let runs = &a.report.time;
            if runs.is_empty() {
                return;
            }
            if state.run >= runs.len() {
                state.run = 0;
            }
            ui.add_space(6.0);
            ui.horizontal_wrapped(|ui| {
                if runs.len() > 1 {
                    for (i, r) in runs.iter().enumerate() {
                        let label = a.report.traces.get(r.run).map_or_else(
                            || format!("run {}", r.run),
                            |t| format!("run {}: {}", r.run, t.path),
                        );
                        ui.selectable_value(&mut state.run, i, label);
                    }
                    ui.separator();
                }
                ui.selectable_value(&mut state.shares, false, "ms per step");
                ui.selectable_value(&mut state.shares, true, "share of each step");
            });
            let run = &runs[state.run];
            if run.steps.is_empty() {
                ui.weak("No steps were found in this run: there is no step series to draw.");
                state.transform = None;
                return;
            }
            legend_ui(ui, run);
            if let Some(number) = chart_ui(ui, state, a) {
                action = Some(Action::Step {
                    run: state.run,
                    number,
                });
            }
            if let Some(number) = slow_list_ui(ui, run) {
                action = Some(Action::Step {
                    run: state.run,
                    number,
                });
            }
        });
    if let Some(Action::Step { run, number }) = action {
        state.selected = Some((run, number));
    }
    action
}

/// What the bars are and how many are drawn (the colours are in the chart's legend).
fn legend_ui(ui: &mut egui::Ui, run: &RunBreakdown) {
    let mut note = String::from("each bar a step, split as above");
    if run.steps.iter().any(|s| !s.steady) {
        note.push_str("; faint: warm-up, before the steady state");
    }
    let steps = run.steps.len() as u64 + run.steps_left_out;
    if steps > MAX_BARS as u64 {
        note.push_str(&format!("; the first {MAX_BARS} of {steps} steps drawn"));
    }
    note.push_str(" · hover for a step's split · click a step to show it on the timeline");
    ui.weak(note);
    if let Some(unknown) = present::device_time_unknown(&run.device_timing) {
        ui.colored_label(colour(Category::Untimed), format!("grey: {unknown}"));
    }
}

/// The stacked chart; returns the step whose column was clicked.
fn chart_ui(ui: &mut egui::Ui, state: &mut TimeState, a: &Arc<Analysis>) -> Option<u32> {
    let run = &a.report.time[state.run];
    let steps = &run.steps[..run.steps.len().min(MAX_BARS)];
    let shares = state.shares;
    let selected = state
        .selected
        .filter(|(r, _)| *r == state.run)
        .map(|(_, n)| n);
    let value = move |s: &StepSplit, c: Category| {
        if shares {
            s.split.share(c) * 100.0
        } else {
            s.split.get(c)
        }
    };
    // Stacked from the bottom in headline order, each chart on the one below it.
    let mut charts: Vec<BarChart> = Vec::new();
    for c in Category::ALL {
        if c == Category::Untimed && run.device_timing.complete() {
            continue;
        }
        let bars: Vec<Bar> = steps
            .iter()
            .map(|s| {
                let fill = if s.steady {
                    colour(c)
                } else {
                    warm_up(colour(c))
                };
                let stroke = if selected == Some(s.number) {
                    Stroke::new(1.5, SELECTED)
                } else {
                    Stroke::NONE
                };
                Bar::new(f64::from(s.number), value(s, c))
                    .width(BAR_WIDTH)
                    .fill(fill)
                    .stroke(stroke)
            })
            .collect();
        let words = hover_words(a, state.run);
        let mut chart = BarChart::new(c.label(), bars)
            .color(colour(c))
            .element_formatter(Box::new(move |b, _| words(b.argument)));
        if let Some(below) = charts.last() {
            chart = chart.stack_on(&[below]);
        }
        charts.push(chart);
    }
    let first_steady = steps.iter().find(|s| s.steady).map(|s| s.number);
    let warm = steps.first().is_some_and(|s| !s.steady);
    let words = hover_words(a, state.run);
    let response = Plot::new(("time_chart", state.run))
        .height(340.0)
        .legend(Legend::default().follow_insertion_order(true))
        .x_axis_label("step")
        .y_axis_label(if shares { "% of the step" } else { "ms" })
        .include_y(0.0)
        // The page scrolls with the wheel; the chart zooms with ctrl + wheel and drags.
        .allow_scroll(false)
        .label_formatter(move |h| match h {
            HoverPosition::NearDataPoint { position, .. }
            | HoverPosition::Elsewhere { position } => Some(words(position.x)),
        })
        .show(ui, |p| {
            // The legend lists the categories top-down as they are stacked.
            for chart in charts.into_iter().rev() {
                p.bar_chart(chart);
            }
            if let (Some(n), true) = (first_steady, warm) {
                p.vline(
                    VLine::new("steady state starts", f64::from(n) - 0.5)
                        .color(Color32::from_gray(160))
                        .width(1.0),
                );
            }
            p.pointer_coordinate()
        });
    state.transform = Some(response.transform);
    if !response.response.clicked() {
        return None;
    }
    let x = response.inner?.x;
    step_near(run, x)
        .filter(|s| (f64::from(s.number) - x).abs() <= 0.5)
        .map(|s| s.number)
}

/// The hover text of the step under plot x: its time and its split, in the report's words.
fn hover_words(a: &Arc<Analysis>, run: usize) -> impl Fn(f64) -> String + 'static {
    let a = Arc::clone(a);
    move |x| {
        let Some(r) = a.report.time.get(run) else {
            return String::new();
        };
        match step_near(r, x).filter(|s| (f64::from(s.number) - x).abs() <= 0.5) {
            Some(s) => step_words(s),
            None => String::new(),
        }
    }
}

/// `step 5 · 217 ms at 412 ms (steady state)` then one line per category present.
pub fn step_words(s: &StepSplit) -> String {
    let mut out = format!(
        "step {} · {} ms, from {} ms into the run{}",
        s.number,
        ms(s.split.wall_ms),
        ms(s.t_ms),
        if s.steady { "" } else { " (warm-up)" }
    );
    for c in Category::ALL {
        let v = s.split.get(c);
        if v > 0.0 {
            out.push_str(&format!(
                "\n{} {} ms ({})",
                c.label(),
                ms(v),
                percent(s.split.share(c))
            ));
        }
    }
    out
}

fn step(run: &RunBreakdown, number: u32) -> Option<&StepSplit> {
    run.steps
        .binary_search_by_key(&number, |s| s.number)
        .ok()
        .and_then(|i| run.steps.get(i))
}

/// The step whose number is nearest plot x.
fn step_near(run: &RunBreakdown, x: f64) -> Option<&StepSplit> {
    if !x.is_finite() {
        return None;
    }
    let n = x.round().clamp(0.0, f64::from(u32::MAX)) as u32;
    step(run, n)
}

/// The slow steps as buttons; returns the one clicked.
fn slow_list_ui(ui: &mut egui::Ui, run: &RunBreakdown) -> Option<u32> {
    if run.slow_steps.is_empty() {
        return None;
    }
    let mut clicked = None;
    ui.add_space(6.0);
    ui.label(
        RichText::new("Slow steps (at least twice the median step): click to show on the timeline")
            .strong(),
    );
    for x in &run.slow_steps {
        let mut text = format!(
            "step {} · {} ms · {:.1}× median · {} +{} ms",
            x.number,
            ms(x.ms),
            x.times_median,
            x.cause.label(),
            ms(x.cause_extra_ms)
        );
        if !x.notes.is_empty() {
            text.push_str(&format!(": {}", x.notes.join(", ")));
        }
        if ui
            .add(egui::Button::new(RichText::new(text).color(colour(x.cause))).frame(false))
            .on_hover_text("show this step on the timeline")
            .clicked()
        {
            clicked = Some(x.number);
        }
    }
    clicked
}

/// Step `number`'s start and end on the trace's clock (ns): the analyzers number steps from 1
/// in the order of [`tpuscope_analyzers::steps::boundaries_of`].
pub fn step_range(trace: &Trace, digest: &Digest, number: u32) -> Option<(u64, u64)> {
    let (_, bounds) = tpuscope_analyzers::steps::boundaries_of(trace, digest);
    let i = usize::try_from(number).ok()?.checked_sub(1)?;
    bounds.get(i).copied()
}
