//! The window: tabs over the loaded traces, linked by selection, and following traces that grow.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver};

use eframe::egui::{self, Color32, RichText};
use tpuscope_analyzers::flame::FlameKind;
use tpuscope_analyzers::torch_trace::TorchLogs;
use tpuscope_analyzers::units::plural;

use crate::analysis::Analysis;
use crate::data::{Run, Source};
use crate::describe;
use crate::flame::{self, FlameState, Tree};
use crate::lanes::Timeline;
use crate::recompiles::{self, RecState};
use crate::timeline::{self, Clicked, TimelineView};
use crate::whatif::{self, WhatIf};
use crate::{hbm, summary, syncs, time};

/// The views.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tab {
    Summary,
    Time,
    Timeline,
    Recompiles,
    Syncs,
    Hbm,
    Flame,
    WhatIf,
}

impl Tab {
    pub const ALL: [Tab; 8] = [
        Tab::Summary,
        Tab::Time,
        Tab::Timeline,
        Tab::Recompiles,
        Tab::Syncs,
        Tab::Hbm,
        Tab::Flame,
        Tab::WhatIf,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Summary => "Summary",
            Tab::Time => "Time",
            Tab::Timeline => "Timeline",
            Tab::Recompiles => "Recompiles",
            Tab::Syncs => "Syncs",
            Tab::Hbm => "HBM",
            Tab::Flame => "Flamegraph",
            Tab::WhatIf => "What-if on TPU",
        }
    }

    /// The name `--tab` takes.
    pub fn name(self) -> &'static str {
        match self {
            Tab::Summary => "summary",
            Tab::Time => "time",
            Tab::Timeline => "timeline",
            Tab::Recompiles => "recompiles",
            Tab::Syncs => "syncs",
            Tab::Hbm => "hbm",
            Tab::Flame => "flame",
            Tab::WhatIf => "whatif",
        }
    }
}

impl std::str::FromStr for Tab {
    type Err = String;
    fn from_str(s: &str) -> Result<Tab, String> {
        Tab::ALL
            .into_iter()
            .find(|t| t.name() == s.to_ascii_lowercase())
            .ok_or_else(|| {
                format!(
                    "unknown tab {s:?} (one of {})",
                    Tab::ALL.map(Tab::name).join(", ")
                )
            })
    }
}

/// Seconds between re-analyses of a growing trace.
pub const REANALYZE_S: f64 = 0.5;
/// Seconds between checks of a followed file when no change notification came.
const POLL_S: f64 = 1.0;

/// The application state (everything but the native window).
pub struct App {
    pub sources: Vec<Source>,
    pub timeline: Timeline,
    pub analysis: Option<Arc<Analysis>>,
    pub tab: Tab,
    pub view: TimelineView,
    pub rec: RecState,
    pub sync_selected: Option<usize>,
    pub flame: FlameState,
    pub whatif: WhatIf,
    pub time: time::TimeState,
    /// Run the analysis on a thread (the window) or inline (tests, benchmarks).
    background: bool,
    pending: Option<Receiver<Analysis>>,
    /// A re-analysis is due once the running one is done.
    stale: bool,
    /// Followed files changed (set by the file watcher).
    pub changed: Arc<std::sync::atomic::AtomicBool>,
    /// egui time of the last analysis start and of the last file check.
    last_analysis: f64,
    last_poll: f64,
    /// Records absorbed since the last analysis.
    new_records: usize,
    ctx: Option<egui::Context>,
    names: Vec<HashMap<u64, String>>,
    analysis_failed: bool,
    torch_logs: Arc<Vec<TorchLogs>>,
}

impl App {
    /// An app over loaded sources. With `background`, the analysis runs on a thread and the
    /// window shows the timeline meanwhile; without it, it runs here before returning.
    pub fn new(sources: Vec<Source>, tab: Tab, background: bool) -> App {
        App::with_torch_logs(sources, tab, background, Vec::new())
    }

    /// [`App::new`] with dynamo's logs of the sources (TORCH_TRACE), read by the caller.
    pub fn with_torch_logs(
        sources: Vec<Source>,
        tab: Tab,
        background: bool,
        torch_logs: Vec<TorchLogs>,
    ) -> App {
        let mut app = App {
            torch_logs: Arc::new(torch_logs),
            sources,
            timeline: Timeline::default(),
            analysis: None,
            tab,
            view: TimelineView::default(),
            rec: RecState::default(),
            sync_selected: None,
            flame: FlameState::default(),
            whatif: WhatIf::default(),
            time: time::TimeState::default(),
            background,
            pending: None,
            stale: false,
            changed: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            last_analysis: f64::NEG_INFINITY,
            last_poll: 0.0,
            new_records: 0,
            ctx: None,
            names: Vec::new(),
            analysis_failed: false,
        };
        app.rebuild_timeline();
        app.start_analysis();
        app
    }

    /// Lets a background analysis wake the window when it is done.
    pub fn set_context(&mut self, ctx: &egui::Context) {
        install_fonts(ctx);
        self.whatif.set_context(ctx);
        self.ctx = Some(ctx.clone());
    }

    pub fn labels(&self) -> Vec<String> {
        self.sources.iter().map(|s| s.label.clone()).collect()
    }

    /// Errors of sources that could not be read (or stopped being followed).
    pub fn errors(&self) -> Vec<&str> {
        self.sources
            .iter()
            .filter_map(|s| s.error.as_deref())
            .collect()
    }

    /// Each source's run (`None` for one that could not be read).
    fn runs(&self) -> Vec<Option<Arc<Run>>> {
        self.sources.iter().map(Source::run).collect()
    }

    pub fn rebuild_timeline(&mut self) {
        let runs = self.runs();
        let present: Vec<(usize, Arc<Run>)> = runs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.clone().map(|r| (i, r)))
            .collect();
        let tl = Timeline::build(&present);
        let names = runs
            .iter()
            .map(|r| {
                r.as_deref()
                    .map(|r| tpuscope_analyzers::steps::executable_names_of(&r.digest))
                    .unwrap_or_default()
            })
            .collect();
        self.timeline = tl;
        self.names = names;
        self.view.lanes_changed();
        // Marks and the selection point at spans by index: recompute them.
        if let Some(line) = self.sync_selected {
            self.mark_sync_line(line, false);
        }
    }

    /// Starts the analysis (or runs it, without a background thread).
    pub fn start_analysis(&mut self) {
        if self.pending.is_some() {
            self.stale = true;
            return;
        }
        self.stale = false;
        let labels = self.labels();
        // Each source's run (made once for a trace that cannot change).
        let traces = self.runs();
        if traces.iter().all(Option::is_none) {
            return;
        }
        let torch_logs = Arc::clone(&self.torch_logs);
        if !self.background {
            let a = Analysis::compute(&labels, &traces, &torch_logs);
            self.install(a);
            return;
        }
        let (tx, rx) = mpsc::channel();
        let ctx = self.ctx.clone();
        std::thread::spawn(move || {
            let a = Analysis::compute(&labels, &traces, &torch_logs);
            let _ = tx.send(a);
            if let Some(c) = ctx {
                c.request_repaint();
            }
        });
        self.pending = Some(rx);
    }

    fn install(&mut self, a: Analysis) {
        self.analysis = Some(Arc::new(a));
        self.analysis_failed = false;
        self.rec.invalidate();
        self.flame.tree = None;
    }

    /// Takes a finished background analysis, if any.
    fn collect(&mut self) {
        let Some(rx) = &self.pending else { return };
        match rx.try_recv() {
            Ok(a) => {
                self.pending = None;
                self.install(a);
                if self.stale {
                    self.start_analysis();
                }
            }
            Err(mpsc::TryRecvError::Empty) => {}
            Err(mpsc::TryRecvError::Disconnected) => {
                // The thread died (an analyzer bug): say so instead of spinning forever.
                self.pending = None;
                self.analysis_failed = true;
            }
        }
    }

    /// Blocks until the running analysis is done (tests, screenshots).
    pub fn wait_analysis(&mut self) {
        if let Some(rx) = self.pending.take()
            && let Ok(a) = rx.recv()
        {
            self.install(a);
        }
    }

    pub fn analyzing(&self) -> bool {
        self.pending.is_some()
    }

    pub fn is_following(&self) -> bool {
        self.sources.iter().any(Source::is_live)
    }

    /// Reads what followed files gained; returns the records absorbed. The views catch up at
    /// the next [`App::follow_tick`] that is due.
    pub fn poll_sources(&mut self) -> usize {
        let mut n = 0;
        for s in &mut self.sources {
            n += s.poll();
        }
        self.new_records += n;
        n
    }

    /// Follow logic for one frame at egui time `now`: check the files when told they changed
    /// (or every second), re-analyse at most every [`REANALYZE_S`].
    pub fn follow_tick(&mut self, now: f64) {
        // Records read before the trace ended still need their analysis.
        if !self.is_following() && self.new_records == 0 {
            return;
        }
        let notified = self
            .changed
            .swap(false, std::sync::atomic::Ordering::Relaxed);
        if notified || now - self.last_poll >= POLL_S {
            self.last_poll = now;
            self.poll_sources();
        }
        // Lanes and report are rebuilt from the whole trace: at most every REANALYZE_S, however
        // fast records land.
        if self.new_records > 0 && now - self.last_analysis >= REANALYZE_S {
            self.last_analysis = now;
            self.new_records = 0;
            self.rebuild_timeline();
            self.start_analysis();
        }
        if let Some(ctx) = &self.ctx {
            let wait = if self.new_records > 0 {
                (REANALYZE_S - (now - self.last_analysis)).max(0.05)
            } else {
                POLL_S
            };
            ctx.request_repaint_after(std::time::Duration::from_secs_f64(wait));
        }
    }

    /// Marks a sync line's records on the timeline; with `go`, shows them there.
    pub fn mark_sync_line(&mut self, line: usize, go: bool) {
        self.sync_selected = Some(line);
        let Some(a) = &self.analysis else { return };
        let Some(events) = a.sync_events.get(line) else {
            return;
        };
        let marks: Vec<(usize, usize)> = events
            .iter()
            .filter_map(|&(s, e)| self.timeline.locate(s, e))
            .collect();
        let label = a
            .report
            .syncs
            .get(line)
            .map(|l| {
                format!(
                    "{} at {}",
                    plural(marks.len() as u64, "sync", "syncs"),
                    l.label()
                )
            })
            .unwrap_or_default();
        if go {
            let times: Vec<(u64, u64)> = marks
                .iter()
                .map(|&(l, s)| {
                    let lane = &self.timeline.lanes[l];
                    (lane.start(s).unwrap_or(0), lane.end(s).unwrap_or(0))
                })
                .collect();
            if let (Some(a), Some(b)) = (
                times.iter().map(|t| t.0).min(),
                times.iter().map(|t| t.1).max(),
            ) {
                self.view.focus(a as f64, b as f64);
            }
            if let Some(&(s, e)) = events.first() {
                self.view.selected = Some((s, e));
            }
            self.tab = Tab::Timeline;
        }
        self.view.marks = marks;
        self.view.marks_label = label;
    }

    /// Selects a record and shows it on the timeline.
    pub fn show_on_timeline(&mut self, source: usize, event: usize) {
        self.view.selected = Some((source, event));
        if let Some((l, s)) = self.timeline.locate(source, event) {
            let lane = &self.timeline.lanes[l];
            let (a, b) = (
                lane.start(s).unwrap_or(0) as f64,
                lane.end(s).unwrap_or(0) as f64,
            );
            let w = (self.view.end - self.view.start).max(b - a);
            if !(a >= self.view.start && b <= self.view.end) {
                self.view.focus(a - w * 0.4, a + w * 0.6);
            }
        }
        self.tab = Tab::Timeline;
    }

    /// Shows step `number` of report run `run` on the timeline: the view spans the step.
    pub fn show_step(&mut self, run: usize, number: u32) {
        let Some(a) = &self.analysis else { return };
        let source = a.run_source.get(run).copied().unwrap_or(0);
        let Some(s) = self.sources.get(source) else {
            return;
        };
        let Some(r) = s.run() else {
            return;
        };
        let Some((start, end)) = time::step_range(&r.trace, &r.digest, number) else {
            return;
        };
        // The timeline draws each source from its own origin (or the job's, for hosts).
        let t0 = self.timeline.t0.get(source).copied().unwrap_or(0);
        self.view.focus(
            start.saturating_sub(t0) as f64,
            end.saturating_sub(t0) as f64,
        );
        self.view.marks.clear();
        let prefix = if a.report.traces.len() > 1 {
            format!("run {run} · ")
        } else {
            String::new()
        };
        self.view.marks_label = format!(
            "{prefix}step {number}: {}",
            tpuscope_analyzers::units::duration(end.saturating_sub(start) as f64 / 1e6)
        );
        self.tab = Tab::Timeline;
    }

    /// The whole window, for one frame.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        if self.ctx.is_none() {
            self.set_context(&ui.ctx().clone());
        }
        self.collect();
        if self.analyzing() {
            // An analysis started before the window had a context cannot wake it: look again.
            ui.ctx()
                .request_repaint_after(std::time::Duration::from_millis(100));
        }
        let now = ui.input(|i| i.time);
        self.follow_tick(now);
        egui::Panel::top("top").show(ui, |ui| self.top_bar_ui(ui));
        if self.tab == Tab::Timeline {
            self.details_panel_ui(ui);
        }
        egui::CentralPanel::default().show(ui, |ui| self.central_ui(ui));
    }

    fn top_bar_ui(&mut self, ui: &mut egui::Ui) {
        ui.horizontal_wrapped(|ui| {
            ui.label(RichText::new("tpuscope").strong().size(16.0));
            for s in &self.sources {
                let mut t = s.label.clone();
                if s.is_live() {
                    t.push_str(" · following");
                }
                ui.weak(t);
            }
            if self.analyzing() {
                ui.spinner();
                ui.weak("analyzing…");
            }
            ui.weak(format!(
                "{} spans in {} lanes",
                self.timeline.spans,
                self.timeline.lanes.len()
            ));
        });
        // With nothing loaded the central panel lists the errors instead.
        let any = self.sources.iter().any(|s| s.has_trace());
        for e in self.errors().into_iter().filter(|_| any) {
            ui.label(
                RichText::new(format!("error: {e}"))
                    .color(Color32::from_rgb(255, 90, 80))
                    .strong(),
            );
        }
        if let Some(a) = &self.analysis {
            for w in &a.report.warnings {
                ui.label(
                    RichText::new(format!("warning: {w}")).color(Color32::from_rgb(230, 180, 40)),
                );
            }
        }
        ui.horizontal(|ui| {
            for t in Tab::ALL {
                let mut title = t.title().to_string();
                if let Some(a) = &self.analysis {
                    match t {
                        Tab::Recompiles if !a.report.recompiles.is_empty() => {
                            title = format!("{title} ({})", a.report.recompiles.len());
                        }
                        Tab::Syncs if !a.report.syncs.is_empty() => {
                            title = format!("{title} ({})", a.report.syncs.len());
                        }
                        Tab::WhatIf if self.whatif.running() => {
                            title = format!("{title} (compiling…)");
                        }
                        _ => {}
                    }
                }
                if ui.selectable_label(self.tab == t, title).clicked() {
                    self.tab = t;
                }
            }
        });
    }

    fn central_ui(&mut self, ui: &mut egui::Ui) {
        if self.sources.iter().all(|s| !s.has_trace()) {
            ui.vertical_centered(|ui| {
                ui.add_space(40.0);
                ui.heading("No trace could be opened");
                for e in self.errors() {
                    ui.label(RichText::new(e).color(Color32::from_rgb(255, 90, 80)));
                }
                ui.label("tpuscope view opens .tps traces written by `tpuscope run`.");
            });
            return;
        }
        if self.tab == Tab::Timeline {
            let names = &self.names;
            let sources = &self.sources;
            let no_names = HashMap::new();
            let describe = |source: usize, event: usize| -> String {
                let Some(run) = sources.get(source).and_then(Source::run) else {
                    return String::new();
                };
                match run.record(event) {
                    Ok(r) => describe::line(&run.trace, &r, names.get(source).unwrap_or(&no_names)),
                    Err(why) => why,
                }
            };
            match timeline::tab_ui(ui, &self.timeline, &mut self.view, &describe) {
                Some(Clicked::Event(s, e)) => self.view.selected = Some((s, e)),
                Some(Clicked::Nothing) => self.view.selected = None,
                None => {}
            }
            return;
        }
        // The what-if needs the traces' programs, not their analysis.
        if self.tab == Tab::WhatIf {
            whatif::tab_ui(ui, &mut self.whatif, &self.sources);
            return;
        }
        let Some(a) = self.analysis.clone() else {
            if self.analysis_failed {
                ui.colored_label(
                    Color32::from_rgb(255, 90, 80),
                    "The analysis of this trace failed (a tpuscope bug: please report it with the trace). The timeline still works.",
                );
                return;
            }
            ui.vertical_centered(|ui| {
                ui.add_space(40.0);
                ui.spinner();
                ui.label("analyzing the trace…");
            });
            return;
        };
        match self.tab {
            Tab::Summary => match summary::tab_ui(ui, &a.report) {
                Some(summary::Action::Family(f)) => {
                    self.rec.select_family(&a.report, f);
                    self.tab = Tab::Recompiles;
                }
                Some(summary::Action::SyncLine(l)) => self.mark_sync_line(l, true),
                None => {}
            },
            Tab::Recompiles => {
                if let Some(recompiles::Action::Timeline(s, e)) =
                    recompiles::tab_ui(ui, &mut self.rec, &a.report, &a, &self.sources)
                {
                    self.show_on_timeline(s, e);
                }
            }
            Tab::Syncs => {
                match syncs::tab_ui(ui, &a, &self.sources, &self.timeline.t0, self.sync_selected) {
                    Some(syncs::Action::Line(l)) => self.mark_sync_line(l, true),
                    Some(syncs::Action::Event(s, e)) => self.show_on_timeline(s, e),
                    None => {}
                }
            }
            Tab::Hbm => hbm::tab_ui(ui, &a, &self.labels()),
            Tab::Time => {
                if let Some(time::Action::Step { run, number }) =
                    time::tab_ui(ui, &mut self.time, &a)
                {
                    self.show_step(run, number);
                }
            }
            Tab::Flame => self.flame_tab_ui(ui, &a),
            Tab::Timeline | Tab::WhatIf => {}
        }
    }

    fn flame_tab_ui(&mut self, ui: &mut egui::Ui, a: &Analysis) {
        let folded = match self.flame.kind {
            FlameKind::CompileTime => &a.flame_compile,
            FlameKind::SyncStall => &a.flame_sync,
        };
        ui.horizontal(|ui| {
            let before = self.flame.kind;
            ui.selectable_value(&mut self.flame.kind, FlameKind::CompileTime, "compile time");
            ui.selectable_value(&mut self.flame.kind, FlameKind::SyncStall, "sync stall");
            if before != self.flame.kind {
                self.flame.zoom = 0;
            }
            if self.flame.zoom != 0 && ui.button("reset zoom").clicked() {
                self.flame.zoom = 0;
            }
            if ui.button("Export SVG").clicked() {
                self.flame.status = export_svg(folded, self.flame.kind, &self.flame.export_to);
            }
            ui.weak(&self.flame.status);
        });
        ui.weak("by Python stack, outermost frame on top; orange: your code, blue: frameworks; click a frame to zoom");
        let key = folded.len() as u64 ^ folded.iter().map(|f| f.1).sum::<u64>();
        let rebuild =
            !matches!(&self.flame.tree, Some((k, h, _)) if *k == self.flame.kind && *h == key);
        if rebuild {
            let root = match self.flame.kind {
                FlameKind::CompileTime => "all compile time",
                FlameKind::SyncStall => "all sync stall",
            };
            self.flame.tree = Some((self.flame.kind, key, Tree::build(folded, root)));
        }
        if let Some((_, _, tree)) = &self.flame.tree {
            egui::ScrollArea::vertical()
                .auto_shrink([false, false])
                .show(ui, |ui| {
                    if let Some(n) = flame::chart_ui(ui, tree, self.flame.zoom) {
                        self.flame.zoom = n;
                    }
                });
        }
    }

    fn details_panel_ui(&mut self, ui: &mut egui::Ui) {
        let Some((source, event)) = self.view.selected else {
            return;
        };
        let Some(run) = self.sources.get(source).and_then(Source::run) else {
            return;
        };
        let t0 = self.timeline.t0.get(source).copied().unwrap_or(0);
        let no_names = HashMap::new();
        let names = self.names.get(source).unwrap_or(&no_names);
        let d = match run.record(event) {
            Ok(record) => describe::details(&run.trace, &record, t0, names),
            // Said where the details would be.
            Err(why) => describe::Details {
                title: why,
                fields: Vec::new(),
                stack: Vec::new(),
            },
        };
        let member = self
            .analysis
            .as_ref()
            .and_then(|a| a.members.get(&(source, event)).copied());
        let mut open_family = None;
        let mut close = false;
        egui::Panel::bottom("details")
            .resizable(true)
            .default_size(170.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical()
                    .auto_shrink([false, false])
                    .show(ui, |ui| {
                        ui.horizontal(|ui| {
                            ui.label(RichText::new(&d.title).strong());
                            if let Some((f, m)) = member
                                && ui.button("open in recompile explorer").clicked()
                            {
                                open_family = Some((f, m));
                            }
                            if ui.small_button("close").clicked() {
                                close = true;
                            }
                        });
                        egui::Grid::new("details_fields").show(ui, |ui| {
                            for (k, v) in &d.fields {
                                ui.weak(k);
                                ui.label(v);
                                ui.end_row();
                            }
                        });
                        if !d.stack.is_empty() {
                            ui.label(RichText::new("Python stack (innermost first)").strong());
                            for (l, user) in &d.stack {
                                if *user {
                                    ui.label(RichText::new(l).strong());
                                } else {
                                    ui.weak(l);
                                }
                            }
                        }
                    });
            });
        if close {
            self.view.selected = None;
        }
        if let (Some((f, m)), Some(a)) = (open_family, self.analysis.clone()) {
            self.rec.select_family(&a.report, f);
            self.rec.member = Some(m);
            self.tab = Tab::Recompiles;
        }
    }
}

/// Writes the flamegraph as SVG; returns what happened.
fn export_svg(folded: &[(String, u64)], kind: FlameKind, to: &std::path::Path) -> String {
    let title = match kind {
        FlameKind::CompileTime => "tpuscope: compile time by Python stack (µs)",
        FlameKind::SyncStall => "tpuscope: host sync stall by Python stack (µs)",
    };
    match tpuscope_analyzers::flame::svg(folded, title) {
        Ok(svg) => match std::fs::write(to, svg) {
            Ok(()) => {
                let at = std::path::absolute(to).unwrap_or_else(|_| to.to_path_buf());
                format!("wrote {}", at.display())
            }
            Err(e) => format!("cannot write {}: {e}", to.display()),
        },
        Err(e) => e.to_string(),
    }
}

/// System fonts tried as fallbacks: egui's own font has no arrows (→) or math signs (≠, ≥), which
/// the report's texts use.
const FALLBACK_FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial Unicode.ttf",
];

/// Adds the first fallback font found (to both families); false when there is none.
pub fn install_fonts(ctx: &egui::Context) -> bool {
    use egui::epaint::text::{FontData, FontInsert, FontPriority, InsertFontFamily};
    let Some(bytes) = FALLBACK_FONTS.iter().find_map(|p| std::fs::read(p).ok()) else {
        return false;
    };
    ctx.add_font(FontInsert::new(
        "fallback",
        FontData::from_owned(bytes),
        vec![
            InsertFontFamily {
                family: egui::FontFamily::Proportional,
                priority: FontPriority::Lowest,
            },
            InsertFontFamily {
                family: egui::FontFamily::Monospace,
                priority: FontPriority::Lowest,
            },
        ],
    ));
    true
}
