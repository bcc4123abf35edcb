//! The Syncs tab: the user lines that block the host, most first; a click marks a line's syncs
//! on the timeline.

use eframe::egui::{self, Color32, RichText, Sense, vec2};
use tpuscope_analyzers::describe::{self, ExecutableNames};
use tpuscope_analyzers::present;
use tpuscope_analyzers::syncs::SyncLine;
use tpuscope_analyzers::units::{bytes, ms, plural};

use crate::analysis::Analysis;
use crate::data::Source;
use crate::fmt;

/// Syncs of the selected line listed at most.
const MAX_LISTED: usize = 2000;

/// What a click in the tab asked for.
pub enum Action {
    /// Mark a line's syncs on the timeline.
    Line(usize),
    /// Show one sync on the timeline: (source, event).
    Event(usize, usize),
}

/// Draws the table of lines and the syncs of the selected one.
pub fn tab_ui(
    ui: &mut egui::Ui,
    a: &Analysis,
    sources: &[Source],
    t0: &[u64],
    selected: Option<usize>,
) -> Option<Action> {
    let lines = &a.report.syncs;
    // The report's own summary of the section: totals, stall, the runtime's waits.
    let summary = present::syncs(&a.report).summary.text();
    if lines.is_empty() {
        ui.label(summary);
        return None;
    }
    ui.label(
        RichText::new(format!(
            "{summary} — click a line to see its syncs on the timeline"
        ))
        .strong(),
    );
    ui.add_space(4.0);
    let action = lines_ui(ui, lines, selected);
    // The selected line (else the worst): its fix and its syncs one by one.
    let shown = selected.unwrap_or(0);
    let Some(l) = lines.get(shown) else {
        return action;
    };
    let events = a.sync_events.get(shown).map_or(&[][..], Vec::as_slice);
    // A click on a sync is the later one in the frame: it wins over a click on a line.
    selected_line_ui(ui, l, events, sources, t0).or(action)
}

/// The table of lines, most stalled first; a click on a line asks to mark it.
fn lines_ui(ui: &mut egui::Ui, lines: &[SyncLine], selected: Option<usize>) -> Option<Action> {
    let worst = lines.iter().map(|l| l.stall_ms).fold(0.0, f64::max);
    let mut action = None;
    egui::ScrollArea::vertical()
        .id_salt("sync_lines")
        .auto_shrink([false, true])
        .max_height(ui.available_height() * 0.45)
        .show(ui, |ui| {
            egui::Grid::new("syncs_table")
                .striped(true)
                .num_columns(8)
                .show(ui, |ui| {
                    for h in [
                        "line", "count", "stall ms", "", "per step", "bytes", "steps", "read",
                    ] {
                        ui.label(RichText::new(h).weak());
                    }
                    ui.end_row();
                    for (i, l) in lines.iter().enumerate() {
                        if ui
                            .selectable_label(selected == Some(i), l.label())
                            .clicked()
                        {
                            action = Some(Action::Line(i));
                        }
                        ui.label(l.count.to_string());
                        ui.label(ms(l.stall_ms));
                        // The line's share of the worst line's stall.
                        let share = if worst > 0.0 {
                            (l.stall_ms / worst) as f32
                        } else {
                            0.0
                        };
                        stall_bar_ui(ui, share);
                        ui.label(l.per_step.map(|p| format!("{p:.2}")).unwrap_or_default());
                        ui.label(bytes(i64::try_from(l.bytes).unwrap_or(i64::MAX)));
                        ui.label(l.steps_with_sync.to_string());
                        ui.label(l.what.join(", "));
                        ui.end_row();
                    }
                });
        });
    action
}

/// A bar filled to `share` (0..=1) of its width, at least a pixel.
fn stall_bar_ui(ui: &mut egui::Ui, share: f32) {
    let (r, _) = ui.allocate_exact_size(vec2(120.0, 10.0), Sense::hover());
    ui.painter()
        .rect_filled(r, 2.0, ui.visuals().faint_bg_color);
    let mut fill = r;
    fill.set_width((r.width() * share).max(1.0));
    ui.painter()
        .rect_filled(fill, 2.0, Color32::from_rgb(230, 70, 70));
}

/// One line's heading, its fix and its syncs; a click on a sync asks to show it.
fn selected_line_ui(
    ui: &mut egui::Ui,
    l: &SyncLine,
    events: &[(usize, usize)],
    sources: &[Source],
    t0: &[u64],
) -> Option<Action> {
    ui.separator();
    ui.label(
        RichText::new(format!(
            "{} — {}, {} ms stalled",
            l.label(),
            plural(l.count, "sync", "syncs"),
            ms(l.stall_ms)
        ))
        .strong()
        .size(15.0),
    );
    ui.horizontal_wrapped(|ui| {
        ui.label(
            RichText::new("fix:")
                .strong()
                .color(Color32::from_rgb(90, 190, 110)),
        );
        ui.label(&l.suggestion);
    });
    ui.label(
        RichText::new(format!(
            "its {} syncs (click one to see it on the timeline)",
            events.len()
        ))
        .weak(),
    );
    let mut action = None;
    egui::ScrollArea::vertical()
        .id_salt("sync_events")
        .auto_shrink([false, false])
        .show(ui, |ui| {
            action = sync_events_ui(ui, events, sources, t0);
            if events.len() > MAX_LISTED {
                ui.weak(format!("… and {} more", events.len() - MAX_LISTED));
            }
        });
    action
}

/// The first [`MAX_LISTED`] syncs of a line: when, how long, what.
fn sync_events_ui(
    ui: &mut egui::Ui,
    events: &[(usize, usize)],
    sources: &[Source],
    t0: &[u64],
) -> Option<Action> {
    let mut action = None;
    egui::Grid::new("sync_events_table")
        .striped(true)
        .show(ui, |ui| {
            for h in ["at", "stall", "what"] {
                ui.label(RichText::new(h).weak());
            }
            ui.end_row();
            // Reads and waits carry no executable id: no names needed.
            let names = ExecutableNames::new();
            for &(src, ev) in events.iter().take(MAX_LISTED) {
                let Some(run) = sources.get(src).and_then(Source::run) else {
                    continue;
                };
                let Ok(r) = run.record(ev) else {
                    continue;
                };
                let (Some(t), Some(d)) = (r.t_ns(), describe::record(&run.trace, &r, &names))
                else {
                    continue;
                };
                let at = t.saturating_sub(t0.get(src).copied().unwrap_or(0));
                if ui.link(fmt::dur(at as f64)).clicked() {
                    action = Some(Action::Event(src, ev));
                }
                // `blocked 0.518 ms` / `waited 2.50 s`: the stall the report sums.
                ui.label(d.detail);
                ui.label(d.what);
                ui.end_row();
            }
        });
    action
}
