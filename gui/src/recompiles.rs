//! The recompile explorer: families → members → the member's HLO beside the HLO of the member
//! it was compared with, changed rows and tokens highlighted, with the Python stack, the source
//! line and the fix.

use std::collections::HashMap;

use eframe::egui::{
    self, Align2, Color32, FontId, Rect, RichText, Sense, TextFormat, pos2, text::LayoutJob, vec2,
};
use tpuscope_analyzers::families::{CompileView, compiles_and_baselines};
use tpuscope_analyzers::hlo_text::{RowKind, SideRow, module_lines, side_by_side};
use tpuscope_analyzers::present::{self, Block, Section};
use tpuscope_analyzers::report::Report;
use tpuscope_analyzers::units::ms;

use crate::analysis::Analysis;
use crate::data::Source;
use crate::summary;

/// The diff shown for one member.
#[derive(Clone, Debug)]
pub struct DiffView {
    /// (family, member) it was computed for.
    pub key: (usize, usize),
    pub left_title: String,
    pub right_title: String,
    pub rows: Vec<SideRow>,
    /// Why there is no diff (no decodable HLO), when there is none.
    pub note: Option<String>,
    pub changed: usize,
    pub only_left: usize,
    pub only_right: usize,
}

/// State of the explorer.
#[derive(Debug, Default)]
pub struct RecState {
    pub family: Option<usize>,
    pub member: Option<usize>,
    pub only_changed: bool,
    /// Open the first family when none is selected (the window does; tests click).
    pub auto_select: bool,
    pub diff: Option<DiffView>,
    /// Compiles (with decoded programs) per source, decoded once.
    compiles: HashMap<usize, Vec<CompileView>>,
}

impl RecState {
    /// Forgets what was derived from the traces (they changed).
    pub fn invalidate(&mut self) {
        self.diff = None;
        self.compiles.clear();
    }

    /// Selects a family (and its first member that has a diff).
    pub fn select_family(&mut self, report: &Report, family: usize) {
        self.family = Some(family);
        let member = report
            .recompiles
            .get(family)
            .and_then(|f| f.members.iter().position(|m| m.against.is_some()))
            .unwrap_or(0);
        self.member = Some(member);
    }

    /// Makes sure the diff of the selected member is computed.
    pub fn ensure_diff(&mut self, report: &Report, a: &Analysis, sources: &[Source]) {
        let (Some(f), Some(m)) = (self.family, self.member) else {
            return;
        };
        if self.diff.as_ref().is_some_and(|d| d.key == (f, m)) {
            return;
        }
        self.diff = Some(self.compute(report, a, sources, f, m));
    }

    fn compute(
        &mut self,
        report: &Report,
        a: &Analysis,
        sources: &[Source],
        f: usize,
        m: usize,
    ) -> DiffView {
        let mut view = DiffView {
            key: (f, m),
            left_title: String::new(),
            right_title: String::new(),
            rows: Vec::new(),
            note: None,
            changed: 0,
            only_left: 0,
            only_right: 0,
        };
        let Some(fam) = report.recompiles.get(f) else {
            return view;
        };
        let Some(member) = fam.members.get(m) else {
            return view;
        };
        let source = a.run_source.get(fam.run).copied().unwrap_or(0);
        let Some(run) = sources.get(source).and_then(Source::run) else {
            view.note = Some("the trace of this family is not loaded".into());
            return view;
        };
        let list = self
            .compiles
            .entry(source)
            .or_insert_with(|| compiles_and_baselines(&run.trace, &run.digest, fam.run));
        let module = |event: usize| {
            list.iter()
                .find(|c| c.event == event)
                .and_then(|c| c.program.as_ref())
                .map(|p| &p.module)
        };
        let no_hlo = "no decodable HLO was recorded for this compile (JAX hands PJRT StableHLO \
                      bytecode; tpuscope reads the optimized HLO when the plugin returns it)";
        let Some(right) = module(member.event) else {
            view.note = Some(no_hlo.into());
            return view;
        };
        view.right_title = format!("#{} {} at {} ms", m + 1, member.executable, ms(member.t_ms));
        match member
            .against
            .and_then(|i| fam.members.get(i).map(|o| (i, o)))
        {
            Some((i, other)) => {
                let Some(left) = module(other.event) else {
                    view.note = Some(format!("#{}: {no_hlo}", i + 1));
                    return view;
                };
                view.left_title = if other.before_attach {
                    format!(
                        "#{} {} (compiled before the attach)",
                        i + 1,
                        other.executable
                    )
                } else {
                    format!("#{} {} at {} ms", i + 1, other.executable, ms(other.t_ms))
                };
                view.rows = side_by_side(left, right);
            }
            None => {
                view.left_title = "(first compile of the family: its HLO alone)".into();
                view.rows = module_lines(right)
                    .into_iter()
                    .map(|l| SideRow {
                        left: None,
                        right: Some(l.text),
                        kind: RowKind::Same,
                        left_spans: Vec::new(),
                        right_spans: Vec::new(),
                    })
                    .collect();
            }
        }
        for r in &view.rows {
            match r.kind {
                RowKind::Changed => view.changed += 1,
                RowKind::OnlyLeft => view.only_left += 1,
                RowKind::OnlyRight => view.only_right += 1,
                RowKind::Same => {}
            }
        }
        view
    }
}

/// What the explorer asked the app to do.
pub enum Action {
    /// Show this compile record on the timeline: (source, event).
    Timeline(usize, usize),
}

const CHANGED_BG: Color32 = Color32::from_rgba_premultiplied(90, 75, 10, 90);
const LEFT_BG: Color32 = Color32::from_rgba_premultiplied(100, 25, 25, 90);
const RIGHT_BG: Color32 = Color32::from_rgba_premultiplied(25, 90, 35, 90);
const TOKEN_BG: Color32 = Color32::from_rgb(150, 110, 0);

pub fn tab_ui(
    ui: &mut egui::Ui,
    st: &mut RecState,
    report: &Report,
    a: &Analysis,
    sources: &[Source],
) -> Option<Action> {
    let mut action = None;
    let section = present::recompiles(report);
    if report.recompiles.is_empty() {
        summary::section_ui(ui, 0, &section);
        return None;
    }
    let families = family_blocks(&section);
    if st.family.is_none() && st.auto_select {
        st.select_family(report, 0);
    }
    egui::Panel::left("rec_list")
        .resizable(true)
        .default_size(320.0)
        .show(ui, |ui| {
            egui::ScrollArea::vertical()
                .auto_shrink([false, false])
                .show(ui, |ui| {
                    ui.label(RichText::new("Families").strong());
                    for (i, f) in report.recompiles.iter().enumerate() {
                        // The report's line for the family, else its name.
                        let text = match families.get(i).and_then(|b| b.first()) {
                            Some(Block::Line { line, .. }) => summary::line_job(ui, line).into(),
                            _ => egui::WidgetText::from(f.graph.as_str()),
                        };
                        if ui.selectable_label(st.family == Some(i), text).clicked() {
                            st.select_family(report, i);
                        }
                    }
                    ui.separator();
                    if let Some(f) = st.family.and_then(|i| report.recompiles.get(i)) {
                        ui.label(RichText::new("Members").strong());
                        for (i, m) in f.members.iter().enumerate() {
                            let cause = m.cause_label();
                            let text = format!(
                                "#{} · {} ms · {} ms compile · {cause}",
                                i + 1,
                                ms(m.t_ms),
                                ms(m.compile_ms)
                            );
                            if ui.selectable_label(st.member == Some(i), text).clicked() {
                                st.member = Some(i);
                            }
                        }
                    }
                });
        });
    st.ensure_diff(report, a, sources);
    let (Some(fi), Some(mi)) = (st.family, st.member) else {
        egui::CentralPanel::default().show(ui, |ui| {
            ui.label("Select a family on the left: its members, what changed between them, and their HLO side by side.");
        });
        return None;
    };
    let f = report.recompiles.get(fi)?;
    let m = f.members.get(mi)?;
    egui::CentralPanel::default().show(ui, |ui| {
        // The family as the report says it: its line, where, details, the fix.
        if let Some(blocks) = families.get(fi) {
            let mut none = None;
            summary::blocks_ui(ui, fi, blocks, &mut none);
        }
        ui.separator();
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new(format!("member #{}", mi + 1)).strong());
            match (m.against, &m.diff) {
                (Some(a), Some(d)) => {
                    ui.label(format!("vs #{}: {} — {}", a + 1, d.cause, d.summary));
                }
                _ => {
                    ui.label("the first compile of this graph");
                }
            }
            if ui.small_button("show on timeline").clicked() {
                let source = a.run_source.get(f.run).copied().unwrap_or(0);
                action = Some(Action::Timeline(source, m.event));
            }
        });
        if !m.parameters.is_empty() {
            ui.weak(format!("parameters: {}", m.parameters.join(", ")));
        }
        if let Some(s) = &m.source {
            ui.weak(format!("compiled from {s}"));
        }
        egui::CollapsingHeader::new(format!("Python stack ({} frames)", m.stack.len()))
            .default_open(false)
            .show(ui, |ui| {
                for f in &m.stack {
                    if f.user {
                        ui.label(RichText::new(f.to_string()).strong());
                    } else {
                        ui.weak(f.to_string());
                    }
                }
            });
        ui.separator();
        diff_panel_ui(ui, st);
    });
    action
}

fn diff_panel_ui(ui: &mut egui::Ui, st: &mut RecState) {
    let Some(d) = &st.diff else {
        return;
    };
    if let Some(note) = &d.note {
        ui.label(note);
        return;
    }
    ui.horizontal(|ui| {
        ui.label(
            RichText::new(format!(
                "{} changed · {} only left · {} only right of {} rows",
                d.changed,
                d.only_left,
                d.only_right,
                d.rows.len()
            ))
            .strong(),
        );
        ui.checkbox(&mut st.only_changed, "only differing rows");
    });
    let Some(d) = &st.diff else {
        return;
    };
    let shown: Vec<usize> = (0..d.rows.len())
        .filter(|&i| !st.only_changed || d.rows[i].kind != RowKind::Same)
        .collect();
    let width = ui.available_width();
    let half = (width - 8.0) / 2.0;
    ui.horizontal(|ui| {
        ui.add_sized(
            vec2(half, 16.0),
            egui::Label::new(RichText::new(&d.left_title).strong()),
        );
        ui.add_sized(
            vec2(half, 16.0),
            egui::Label::new(RichText::new(&d.right_title).strong()),
        );
    });
    let font = FontId::monospace(12.0);
    let row_h = ui.fonts_mut(|f| f.row_height(&font)) + 2.0;
    let text_colour = ui.visuals().text_color();
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show_rows(ui, row_h, shown.len(), |ui, range| {
            for &i in &shown[range] {
                let r = &d.rows[i];
                let (rect, resp) = ui.allocate_exact_size(vec2(width, row_h), Sense::hover());
                let left = Rect::from_min_size(rect.min, vec2(half, row_h));
                let right = Rect::from_min_size(
                    pos2(rect.min.x + half + 8.0, rect.min.y),
                    vec2(half, row_h),
                );
                let painter = ui.painter();
                let (lbg, rbg) = match r.kind {
                    RowKind::Same => (Color32::TRANSPARENT, Color32::TRANSPARENT),
                    RowKind::Changed => (CHANGED_BG, CHANGED_BG),
                    RowKind::OnlyLeft => (LEFT_BG, Color32::TRANSPARENT),
                    RowKind::OnlyRight => (Color32::TRANSPARENT, RIGHT_BG),
                };
                painter.rect_filled(left, 0.0, lbg);
                painter.rect_filled(right, 0.0, rbg);
                for (side, text, spans) in [
                    (left, &r.left, &r.left_spans),
                    (right, &r.right, &r.right_spans),
                ] {
                    let Some(text) = text else { continue };
                    let job = highlighted(text, spans, &font, text_colour);
                    let galley = painter.layout_job(job);
                    painter.with_clip_rect(side).galley(
                        side.min + vec2(2.0, 1.0),
                        galley,
                        text_colour,
                    );
                }
                if r.kind != RowKind::Same {
                    painter.text(
                        pos2(rect.min.x + half + 4.0, rect.center().y),
                        Align2::CENTER_CENTER,
                        match r.kind {
                            RowKind::Changed => "≠",
                            RowKind::OnlyLeft => "−",
                            _ => "+",
                        },
                        font.clone(),
                        text_colour,
                    );
                }
                resp.on_hover_ui(|ui| {
                    ui.set_max_width(900.0);
                    if let Some(l) = &r.left {
                        ui.monospace(format!("left:  {l}"));
                    }
                    if let Some(rt) = &r.right {
                        ui.monospace(format!("right: {rt}"));
                    }
                });
            }
        });
}

/// `text` with the byte ranges in `spans` on a highlight.
fn highlighted(text: &str, spans: &[(usize, usize)], font: &FontId, colour: Color32) -> LayoutJob {
    let mut job = LayoutJob::default();
    let plain = TextFormat::simple(font.clone(), colour);
    let hot = TextFormat {
        background: TOKEN_BG,
        color: Color32::WHITE,
        ..TextFormat::simple(font.clone(), colour)
    };
    let mut at = 0;
    let mut sorted = spans.to_vec();
    sorted.sort_unstable();
    for (a, b) in sorted {
        let (a, b) = (a.max(at).min(text.len()), b.min(text.len()));
        if a >= b || !text.is_char_boundary(a) || !text.is_char_boundary(b) {
            continue;
        }
        job.append(&text[at..a], 0.0, plain.clone());
        job.append(&text[a..b], 0.0, hot.clone());
        at = b;
    }
    job.append(&text[at..], 0.0, plain);
    job
}

/// The report's blocks of each recompiled family, in `report.recompiles` order: its line (the
/// section's depth-1 line), then where, details and the fix; its table of compiles and what
/// follows it are left out (the explorer lists the members itself).
fn family_blocks(section: &Section) -> Vec<Vec<Block>> {
    let mut out: Vec<Vec<Block>> = Vec::new();
    // After a family's table come notes about the table (members left out): not shown.
    let mut after_table = false;
    for b in &section.blocks {
        match b {
            Block::Line { depth: 1, .. } => {
                out.push(vec![b.clone()]);
                after_table = false;
            }
            Block::Table { .. } => after_table = true,
            _ if after_table => {}
            _ => {
                if let Some(f) = out.last_mut() {
                    f.push(b.clone());
                }
            }
        }
    }
    out
}
