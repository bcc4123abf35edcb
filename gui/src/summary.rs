//! The Summary tab: `tpuscope report` itself, laid out with egui. The sections, their words and
//! their tones come from `analyzers::present`, as the text and Markdown reports do; this file
//! only maps tones to colours and blocks to widgets, and turns rows that name a recompile
//! family or a sync line into buttons.

use eframe::egui::{self, Color32, FontId, RichText, TextFormat, text::LayoutJob};
use tpuscope_analyzers::present::{
    self, Align, Block, Item, Line, Section, SectionId, Span, Table, Target, Tone,
};
use tpuscope_analyzers::report::Report;

const WARN: Color32 = Color32::from_rgb(230, 180, 40);
const BAD: Color32 = Color32::from_rgb(235, 80, 70);
const GOOD: Color32 = Color32::from_rgb(90, 190, 110);
const ACCENT: Color32 = Color32::from_rgb(110, 170, 240);

/// Points of indentation per nesting level below a section's own content.
const INDENT: f32 = 16.0;

/// What a click in the summary asked for.
pub enum Action {
    /// Open a recompile family (index in `report.recompiles`).
    Family(usize),
    /// Show a sync line (index in `report.syncs`) on the timeline.
    SyncLine(usize),
}

pub fn tab_ui(ui: &mut egui::Ui, r: &Report) -> Option<Action> {
    let mut action = None;
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show(ui, |ui| {
            for (i, s) in present::sections(r).iter().enumerate() {
                // Warnings are in the banner above every tab.
                if s.id == SectionId::Warnings {
                    continue;
                }
                if let Some(a) = section_ui(ui, i, s) {
                    action = Some(a);
                }
                ui.add_space(4.0);
            }
        });
    action
}

/// One section. The title, findings and verdict are always shown; a section with content
/// folds under its title; a section that is one sentence is one line. `index` tells sections
/// of one panel apart.
pub fn section_ui(ui: &mut egui::Ui, index: usize, s: &Section) -> Option<Action> {
    let mut action = None;
    match s.id {
        SectionId::Header => {
            ui.heading(s.title.text.as_str());
            blocks_ui(ui, index, &s.blocks, &mut action);
        }
        SectionId::Findings | SectionId::Verdict => {
            ui.label(title_job(ui, s, 16.0));
            blocks_ui(ui, index, &s.blocks, &mut action);
        }
        _ if s.blocks.is_empty() => {
            // Aligned with the titles of the sections that fold.
            ui.horizontal_top(|ui| {
                ui.add_space(ui.spacing().icon_width + ui.spacing().icon_spacing);
                ui.add(egui::Label::new(title_job(ui, s, 14.0)).wrap());
            });
        }
        _ => {
            egui::CollapsingHeader::new(title_job(ui, s, 14.0))
                .id_salt(("summary_section", index))
                .default_open(true)
                .show(ui, |ui| blocks_ui(ui, index, &s.blocks, &mut action));
        }
    }
    action
}

/// `Host syncs: 6 syncs from 2 lines, …`: the title in its tone, then the summary.
fn title_job(ui: &egui::Ui, s: &Section, size: f32) -> LayoutJob {
    let mut job = LayoutJob::default();
    let strong = TextFormat {
        font_id: FontId::proportional(size),
        ..span_format(ui, s.title.tone)
    };
    job.append(&s.title.text, 0.0, strong);
    if !s.summary.is_empty() {
        job.append(": ", 0.0, span_format(ui, Tone::Plain));
        append_line(ui, &mut job, &s.summary);
    }
    job
}

/// Blocks of a section, laid out as the summary does (`section` tells panels' grids apart).
pub fn blocks_ui(ui: &mut egui::Ui, section: usize, blocks: &[Block], action: &mut Option<Action>) {
    for (i, b) in blocks.iter().enumerate() {
        match b {
            Block::Line { depth, line } => at_depth_ui(ui, *depth, |ui| {
                ui.label(line_job(ui, line));
            }),
            Block::Para { depth, label, text } => at_depth_ui(ui, *depth, |ui| {
                labeled_para_ui(ui, label.as_ref(), text);
            }),
            Block::Labeled {
                depth,
                label,
                lines,
            } => at_depth_ui(ui, *depth, |ui| {
                ui.horizontal_top(|ui| {
                    ui.label(span_job(ui, label));
                    ui.vertical(|ui| {
                        for l in lines {
                            ui.label(line_job(ui, l));
                        }
                    });
                });
            }),
            Block::Table { depth, table } => at_depth_ui(ui, *depth, |ui| {
                if let Some(a) = table_ui(ui, (section, i), table) {
                    *action = Some(a);
                }
            }),
            Block::Item(item) => item_ui(ui, item),
        }
    }
}

/// A numbered entry (a finding) in a frame of its own.
fn item_ui(ui: &mut egui::Ui, item: &Item) {
    egui::Frame::group(ui.style()).show(ui, |ui| {
        ui.set_width(ui.available_width());
        let mut head = LayoutJob::default();
        head.append(
            &format!("{}. ", item.number),
            0.0,
            span_format(ui, Tone::Strong),
        );
        append_line(ui, &mut head, &item.head);
        ui.label(head);
        for (label, text) in &item.paras {
            labeled_para_ui(ui, label.as_ref(), text);
        }
    });
}

/// Prose after an optional label; wrapped lines align under the text, not the label.
fn labeled_para_ui(ui: &mut egui::Ui, label: Option<&Span>, text: &Line) {
    match label {
        Some(l) => {
            ui.horizontal_top(|ui| {
                ui.label(span_job(ui, l));
                ui.add(egui::Label::new(line_job(ui, text)).wrap());
            });
        }
        None => {
            ui.add(egui::Label::new(line_job(ui, text)).wrap());
        }
    }
}

/// A table: a header row, then the cells; a row about a family or a sync line ends with the
/// button that opens it.
fn table_ui(ui: &mut egui::Ui, id: (usize, usize), t: &Table) -> Option<Action> {
    let mut action = None;
    egui::Grid::new(("summary_table", id))
        .striped(true)
        .show(ui, |ui| {
            for c in &t.columns {
                ui.label(RichText::new(&c.title).weak());
            }
            ui.end_row();
            for row in &t.rows {
                for (cell, c) in row.cells.iter().zip(&t.columns) {
                    let job = line_job(ui, cell);
                    match c.align {
                        Align::Left => {
                            ui.label(job);
                        }
                        Align::Right => {
                            ui.with_layout(
                                egui::Layout::right_to_left(egui::Align::Center),
                                |ui| {
                                    ui.label(job);
                                },
                            );
                        }
                    }
                }
                let button = match row.target {
                    Some(Target::Family(f)) => Some(("open", Action::Family(f))),
                    Some(Target::SyncLine(l)) => Some(("timeline", Action::SyncLine(l))),
                    None => None,
                };
                if let Some((text, a)) = button
                    && ui.small_button(text).clicked()
                {
                    action = Some(a);
                }
                ui.end_row();
            }
        });
    action
}

/// Content `depth` levels under its section: level 1 is the section's own indentation.
fn at_depth_ui(ui: &mut egui::Ui, depth: u8, add: impl FnOnce(&mut egui::Ui)) {
    if depth <= 1 {
        add(ui);
    } else {
        ui.horizontal_top(|ui| {
            ui.add_space(INDENT * f32::from(depth - 1));
            ui.vertical(add);
        });
    }
}

fn span_job(ui: &egui::Ui, s: &Span) -> LayoutJob {
    let mut job = LayoutJob::default();
    job.append(&s.text, 0.0, span_format(ui, s.tone));
    job
}

/// A line with its tones, for any egui text widget.
pub fn line_job(ui: &egui::Ui, l: &Line) -> LayoutJob {
    let mut job = LayoutJob::default();
    append_line(ui, &mut job, l);
    job
}

fn append_line(ui: &egui::Ui, job: &mut LayoutJob, l: &Line) {
    for s in &l.0 {
        job.append(&s.text, 0.0, span_format(ui, s.tone));
    }
}

/// The GUI's styling of a tone.
fn span_format(ui: &egui::Ui, tone: Tone) -> TextFormat {
    let v = ui.visuals();
    let color = match tone {
        Tone::Plain => v.text_color(),
        Tone::Strong | Tone::Code => v.strong_text_color(),
        Tone::Dim => v.weak_text_color(),
        Tone::Good | Tone::Pass => GOOD,
        Tone::Warn => WARN,
        Tone::Bad => BAD,
        Tone::Accent => ACCENT,
    };
    TextFormat {
        font_id: egui::TextStyle::Body.resolve(ui.style()),
        color,
        ..TextFormat::default()
    }
}
