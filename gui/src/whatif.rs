//! The What-if tab: the run's programs compiled for a TPU topology by libtpu (`tpuscope
//! whatif`). A table per program with its TPU compile time and its HBM need as bars (the need
//! against one chip's HBM), the selected program's memory split against the chip, the
//! recompiles priced on the TPU and the compiler's heaviest passes. The compiles themselves
//! run in the CLI (child processes with libtpu); this tab asks for them through a [`Launcher`]
//! and shows their progress. Sentences come from `analyzers::whatif`, as in `tpuscope whatif`.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};

use eframe::egui::{self, Color32, RichText, Sense, Stroke, StrokeKind, Vec2};
use tpuscope_analyzers::digest::Digest;
use tpuscope_analyzers::units::{bytes, duration, fine_duration, num, percent};
use tpuscope_analyzers::whatif::{CompiledMemory, ProgramRow, WhatIfReport};
use tpuscope_core::Trace;

use crate::data::Source;

const BAD: Color32 = Color32::from_rgb(235, 80, 70);
const GOOD: Color32 = Color32::from_rgb(90, 190, 110);
const COMPILE: Color32 = Color32::from_rgb(230, 150, 60);
const TRACK: Color32 = Color32::from_gray(60);
/// The chip's HBM marker: seen on a green bar and on a red one.
const CHIP: Color32 = Color32::from_gray(235);
/// Memory parts, in the order they are stacked: arguments, outputs, temporaries, code.
const PARTS: [(&str, Color32); 4] = [
    ("arguments", Color32::from_rgb(70, 150, 230)),
    ("outputs (not aliased)", Color32::from_rgb(120, 220, 220)),
    ("temporaries", Color32::from_rgb(200, 90, 200)),
    ("generated code", Color32::from_rgb(230, 200, 60)),
];

/// Topologies offered in the picker (any GENERATION:SHAPE libtpu knows may be typed).
pub const TOPOLOGIES: [&str; 8] = [
    "v5e:1x1",
    "v5e:2x2",
    "v5e:4x4",
    "v6e:1x1",
    "v6e:2x2",
    "v4:2x2x1",
    "v5p:2x2x1",
    "v6e:4x4",
];

/// What a what-if in progress tells the tab.
pub enum Update {
    /// One program's compile ended: the `done`-th of `total`; `line` says how it went.
    Progress {
        done: usize,
        total: usize,
        line: String,
    },
    /// All done (or why it could not start: no libtpu, no program, …).
    Done(Result<Box<WhatIfReport>, String>),
}

/// A source as a what-if reads it: its label, its trace and the digest of its events.
pub type WhatIfInput = (String, Arc<Trace>, Arc<Digest>);

/// Starts a what-if of `traces` for a topology and returns at once; the work (the CLI's libtpu
/// compiles) reports through the sink, from any thread.
pub type Launcher = Arc<dyn Fn(String, Vec<WhatIfInput>, Box<dyn Fn(Update) + Send>) + Send + Sync>;

/// The tab's state.
pub struct WhatIf {
    launcher: Option<Launcher>,
    /// The topology in the picker.
    pub topology: String,
    rx: Option<Receiver<Update>>,
    /// (done, total, last line) of the what-if running.
    pub progress: Option<(usize, usize, String)>,
    pub report: Option<WhatIfReport>,
    pub error: Option<String>,
    /// Selected program (index in `report.programs`).
    pub selected: Option<usize>,
    ctx: Option<egui::Context>,
}

impl Default for WhatIf {
    fn default() -> Self {
        WhatIf::new(None, None)
    }
}

impl WhatIf {
    /// `launcher`: how to compile (absent: the tab only shows `report`).
    pub fn new(launcher: Option<Launcher>, report: Option<WhatIfReport>) -> WhatIf {
        WhatIf {
            launcher,
            topology: report
                .as_ref()
                .map_or_else(|| "v5e:2x2".to_string(), |r| r.topology.clone()),
            rx: None,
            progress: None,
            selected: report.as_ref().and_then(default_selection),
            report,
            error: None,
            ctx: None,
        }
    }

    pub fn set_context(&mut self, ctx: &egui::Context) {
        self.ctx = Some(ctx.clone());
    }

    pub fn can_compile(&self) -> bool {
        self.launcher.is_some()
    }

    pub fn running(&self) -> bool {
        self.rx.is_some()
    }

    /// Starts a what-if of the sources' traces for `self.topology` (nothing when one is running
    /// or there is no launcher).
    pub fn start(&mut self, sources: &[Source]) {
        let Some(launch) = self.launcher.clone() else {
            return;
        };
        if self.running() {
            return;
        }
        let (tx, rx): (Sender<Update>, Receiver<Update>) = mpsc::channel();
        let ctx = self.ctx.clone();
        self.rx = Some(rx);
        self.progress = Some((0, 0, format!("compiling for {}…", self.topology)));
        self.error = None;
        let traces = sources
            .iter()
            .filter_map(|s| {
                let r = s.run()?;
                Some((s.label.clone(), Arc::clone(&r.trace), Arc::clone(&r.digest)))
            })
            .collect();
        launch(
            self.topology.trim().to_string(),
            traces,
            Box::new(move |u| {
                let _ = tx.send(u);
                if let Some(c) = &ctx {
                    c.request_repaint();
                }
            }),
        );
    }

    /// Takes what the running what-if said since the last frame.
    pub fn poll(&mut self) {
        while let Some(rx) = &self.rx {
            match rx.try_recv() {
                Ok(u) => self.apply(u),
                Err(mpsc::TryRecvError::Empty) => return,
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.rx = None;
                    self.progress = None;
                    self.error = Some("the what-if stopped without an answer".into());
                }
            }
        }
    }

    /// Blocks until the running what-if is done (screenshots, tests).
    pub fn wait(&mut self) {
        while let Some(rx) = &self.rx {
            match rx.recv() {
                Ok(u) => self.apply(u),
                Err(_) => {
                    self.rx = None;
                    self.progress = None;
                    self.error = Some("the what-if stopped without an answer".into());
                }
            }
        }
    }

    fn apply(&mut self, u: Update) {
        match u {
            Update::Progress { done, total, line } => self.progress = Some((done, total, line)),
            Update::Done(r) => {
                self.rx = None;
                self.progress = None;
                match r {
                    Ok(w) => {
                        self.selected = default_selection(&w);
                        self.report = Some(*w);
                    }
                    Err(e) => self.error = Some(e),
                }
            }
        }
    }
}

/// The program to show first: one that does not fit, else the largest need.
fn default_selection(w: &WhatIfReport) -> Option<usize> {
    w.programs
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.tpu.as_ref().map(|t| (i, t)))
        .max_by_key(|(_, t)| (t.fits == Some(false), t.need_bytes))
        .map(|(i, _)| i)
}

pub fn tab_ui(ui: &mut egui::Ui, s: &mut WhatIf, sources: &[Source]) {
    s.poll();
    controls_ui(ui, s, sources);
    if let Some(e) = &s.error {
        ui.colored_label(BAD, format!("what-if: {e}"));
    }
    let Some(w) = s.report.as_ref() else {
        ui.add_space(20.0);
        ui.label(if s.can_compile() {
            "Compile this run's programs for a TPU topology with libtpu's compile-only path (no TPU \
             needed): whether each fits in a chip's HBM, what it costs to compile there, its \
             roofline time and what the recompiles would cost."
        } else {
            "No what-if in this view: `tpuscope view TRACE --whatif v5e:2x2` compiles the run's \
             programs for a TPU topology."
        });
        return;
    };
    let mut selected = s.selected;
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show(ui, |ui| {
            header_ui(ui, w);
            ui.add_space(6.0);
            // A long table scrolls on its own, so the selected program's memory stays in view.
            let max = (ui.available_height() * 0.55).max(200.0);
            egui::ScrollArea::vertical()
                .id_salt("whatif_programs_scroll")
                .max_height(max)
                .show(ui, |ui| programs_ui(ui, w, &mut selected));
            if let Some(p) = selected.and_then(|i| w.programs.get(i)) {
                ui.add_space(8.0);
                memory_ui(ui, w, p);
            }
            recompiles_ui(ui, w);
            passes_ui(ui, w);
        });
    s.selected = selected;
}

fn controls_ui(ui: &mut egui::Ui, s: &mut WhatIf, sources: &[Source]) {
    if !s.can_compile() {
        return;
    }
    ui.horizontal(|ui| {
        let label = ui.label("topology").id;
        let running = s.running();
        ui.add_enabled_ui(!running, |ui| {
            egui::ComboBox::from_id_salt("whatif_topology")
                .selected_text(s.topology.as_str())
                .show_ui(ui, |ui| {
                    for t in TOPOLOGIES {
                        ui.selectable_value(&mut s.topology, t.to_string(), t);
                    }
                })
                .response
                .labelled_by(label);
            ui.add(egui::TextEdit::singleline(&mut s.topology).desired_width(90.0))
                .labelled_by(label);
            if ui.button("Compile for this topology").clicked() {
                s.start(sources);
            }
        });
        if let Some((done, total, line)) = &s.progress {
            ui.spinner();
            if *total > 0 {
                ui.add(
                    egui::ProgressBar::new(*done as f32 / *total as f32)
                        .desired_width(160.0)
                        .text(format!("{done}/{total}")),
                );
            }
            ui.weak(line);
        }
    });
}

fn header_ui(ui: &mut egui::Ui, w: &WhatIfReport) {
    ui.heading(format!("What-if: {}", w.title()));
    ui.weak(format!("compiled by {}", w.libtpu));
    let tone = if w.not_fitting > 0 { BAD } else { GOOD };
    ui.colored_label(tone, w.programs_line());
    ui.label(w.compile_line());
    if let Some(step) = w.step_line() {
        ui.label(step);
    }
}

fn programs_ui(ui: &mut egui::Ui, w: &WhatIfReport, selected: &mut Option<usize>) {
    let max_compile = w
        .programs
        .iter()
        .filter_map(|p| p.tpu.as_ref().map(|t| t.compile_ms))
        .fold(0.0f64, f64::max);
    let hbm = w.hbm_bytes_per_chip.map(|b| b as f64);
    ui.weak(
        "orange: TPU compile time (longest = full bar) · HBM: what one device needs at once, \
         against one chip's HBM (red past it) · click a program for its memory",
    );
    egui::Grid::new("whatif_programs")
        .striped(true)
        .num_columns(9)
        .spacing([12.0, 4.0])
        .show(ui, |ui| {
            for h in [
                "program",
                "compiles",
                "TPU compile",
                "CPU compile",
                "HBM need (of a chip)",
                "fits",
                "flops",
                "bytes accessed",
                "roofline",
            ] {
                ui.strong(h);
            }
            ui.end_row();
            for (i, p) in w.programs.iter().enumerate() {
                let name = RichText::new(&p.name).monospace();
                if ui
                    .selectable_label(*selected == Some(i), name)
                    .on_hover_text(format!("program {}", p.program_hash))
                    .clicked()
                {
                    *selected = Some(i);
                }
                ui.label(p.compiles.to_string());
                match &p.tpu {
                    Some(t) => {
                        bar_ui(
                            ui,
                            frac(t.compile_ms, max_compile),
                            COMPILE,
                            &duration(t.compile_ms),
                        );
                        ui.label(duration(p.cpu_compile_ms));
                        let share = hbm.map(|h| t.need_bytes as f64 / h);
                        let colour = if t.fits == Some(false) { BAD } else { GOOD };
                        let text = match share {
                            Some(f) => format!("{} · {}", bytes(t.need_bytes), percent(f)),
                            None => bytes(t.need_bytes),
                        };
                        bar_ui(ui, share.unwrap_or(0.0).min(1.0), colour, &text);
                        let fits = t.fits_label();
                        match t.fits {
                            Some(false) => ui.colored_label(BAD, fits),
                            _ => ui.label(fits),
                        };
                        ui.label(t.flops.map_or_else(|| "?".to_string(), num));
                        ui.label(
                            t.bytes_accessed
                                .map_or_else(|| "?".to_string(), |b| bytes(b as i64)),
                        );
                        ui.label(t.roofline_ms.map_or_else(|| "?".to_string(), fine_duration));
                    }
                    None => {
                        ui.colored_label(BAD, "not compiled");
                        ui.label(duration(p.cpu_compile_ms));
                        // The reason can be a long libtpu message: cut here, whole on hover.
                        let why = p.not_replayed.as_deref().unwrap_or("not replayed");
                        let short: String = if why.chars().count() > 60 {
                            why.chars().take(59).chain(['…']).collect()
                        } else {
                            why.to_string()
                        };
                        ui.label(short).on_hover_text(why);
                    }
                }
                ui.end_row();
            }
        });
}

fn frac(v: f64, max: f64) -> f32 {
    if max > 0.0 {
        (v / max).clamp(0.0, 1.0) as f32
    } else {
        0.0
    }
}

/// A horizontal bar filled to `fill` (0‥1) with its value written beside it.
fn bar_ui(ui: &mut egui::Ui, fill: impl Into<f64>, colour: Color32, text: &str) {
    const W: f32 = 110.0;
    let fill = fill.into().clamp(0.0, 1.0) as f32;
    ui.horizontal(|ui| {
        let (rect, _) = ui.allocate_exact_size(Vec2::new(W, 12.0), Sense::hover());
        let p = ui.painter();
        p.rect_filled(rect, 2.0, TRACK);
        if fill > 0.0 {
            // At least a pixel: a program that needs 0.01 % of a chip is still there.
            let w = (W * fill).max(1.5);
            p.rect_filled(
                egui::Rect::from_min_size(rect.min, Vec2::new(w, rect.height())),
                2.0,
                colour,
            );
        }
        ui.label(text);
    });
}

/// The selected program's memory on one device, stacked against one chip's HBM.
fn memory_ui(ui: &mut egui::Ui, w: &WhatIfReport, p: &ProgramRow) {
    let Some(t) = &p.tpu else { return };
    ui.strong(format!("{}: HBM on one device", p.name));
    let hbm = w.hbm_bytes_per_chip.map(|b| b as f64);
    // Two bars: the need against one chip's HBM (white line: the chip), then the need itself split
    // into its parts (a program needing 0.01 % of a chip still shows what it is made of).
    let width = ui.available_width().min(900.0);
    if let Some(h) = hbm {
        let need = t.need_bytes.max(0) as f64;
        let scale = h.max(need);
        let (rect, _) = ui.allocate_exact_size(Vec2::new(width, 14.0), Sense::hover());
        let painter = ui.painter();
        painter.rect_filled(rect, 3.0, TRACK);
        let dx = ((need / scale) * f64::from(width)) as f32;
        let colour = if t.fits == Some(false) { BAD } else { GOOD };
        painter.rect_filled(
            egui::Rect::from_min_size(rect.min, Vec2::new(dx.max(1.5), rect.height())),
            3.0,
            colour,
        );
        let cx = rect.min.x + (h / scale * f64::from(width)) as f32;
        painter.line_segment(
            [
                egui::pos2(cx, rect.min.y - 3.0),
                egui::pos2(cx, rect.max.y + 3.0),
            ],
            Stroke::new(2.0, CHIP),
        );
        ui.weak("against one chip's HBM (white line)");
    }
    let Some(m) = t.memory else {
        // libtpu refused it at compile time: only its total is known.
        ui.colored_label(
            BAD,
            format!(
                "libtpu refused it: needs {}{} (no breakdown: the compile stopped there)",
                bytes(t.need_bytes),
                hbm.map_or_else(String::new, |h| format!(", a chip has {}", bytes(h as i64)))
            ),
        );
        return;
    };
    let parts = parts(&m);
    let total = parts.iter().sum::<i64>().max(1) as f64;
    let (rect, _) = ui.allocate_exact_size(Vec2::new(width, 22.0), Sense::hover());
    let painter = ui.painter();
    painter.rect_filled(rect, 3.0, TRACK);
    let mut x = rect.min.x;
    for (v, (_, colour)) in parts.iter().zip(PARTS) {
        let dx = (*v as f64 / total * f64::from(width)) as f32;
        if dx <= 0.0 {
            continue;
        }
        let r = egui::Rect::from_min_size(egui::pos2(x, rect.min.y), Vec2::new(dx.max(1.0), 22.0));
        painter.rect_filled(r, 0.0, colour);
        x += dx;
    }
    painter.rect_stroke(
        rect,
        3.0,
        Stroke::new(1.0, Color32::GRAY),
        StrokeKind::Inside,
    );
    ui.horizontal_wrapped(|ui| {
        for (v, (name, colour)) in parts.iter().zip(PARTS) {
            ui.colored_label(colour, "■");
            ui.label(format!("{name} {}", bytes(*v)));
        }
        if m.alias > 0 {
            ui.weak(format!("({} of outputs alias arguments)", bytes(m.alias)));
        }
    });
    let verdict = match (t.fits, hbm) {
        (Some(true), Some(h)) => (
            GOOD,
            format!(
                "needs {} of the chip's {} ({}): fits, {} free",
                bytes(t.need_bytes),
                bytes(h as i64),
                percent(t.need_bytes as f64 / h),
                bytes(h as i64 - t.need_bytes)
            ),
        ),
        (Some(false), Some(h)) => (
            BAD,
            format!(
                "needs {}: {} more than the chip's {} (white line)",
                bytes(t.need_bytes),
                bytes(t.overflow_bytes),
                bytes(h as i64)
            ),
        ),
        _ => (
            Color32::GRAY,
            format!(
                "needs {}; the chip's HBM is unknown for this topology",
                bytes(t.need_bytes)
            ),
        ),
    };
    ui.colored_label(verdict.0, verdict.1);
}

/// Arguments, outputs not aliased to an argument, temporaries, code (they add up to `need`).
fn parts(m: &CompiledMemory) -> [i64; 4] {
    [
        m.argument,
        (m.output - m.alias).max(0),
        m.temp,
        m.generated_code,
    ]
}

fn recompiles_ui(ui: &mut egui::Ui, w: &WhatIfReport) {
    if w.recompiles.is_empty() {
        return;
    }
    ui.add_space(8.0);
    ui.strong("Recompiles on the TPU");
    for f in &w.recompiles {
        ui.label(w.family_line(f));
    }
}

fn passes_ui(ui: &mut egui::Ui, w: &WhatIfReport) {
    let Some(slow) = &w.slowest_compile else {
        return;
    };
    ui.add_space(8.0);
    ui.strong(slow.title());
    if slow.passes.is_empty() {
        ui.weak("libtpu's profiler gave no passes for it");
        return;
    }
    let max = slow.passes.iter().map(|p| p.self_ms).fold(0.0, f64::max);
    egui::Grid::new("whatif_passes")
        .striped(true)
        .spacing([12.0, 2.0])
        .show(ui, |ui| {
            for h in ["pass", "self time", "with nested", "runs"] {
                ui.strong(h);
            }
            ui.end_row();
            for p in &slow.passes {
                ui.monospace(&p.name);
                bar_ui(ui, frac(p.self_ms, max), COMPILE, &duration(p.self_ms));
                ui.label(duration(p.total_ms));
                ui.label(p.count.to_string());
                ui.end_row();
            }
        });
    ui.weak(slow.coverage_line(slow.passes.len()));
}
