//! The timeline view: lanes of spans with zoom, pan, hover and click. Drawing asks each lane
//! for its bars at the current zoom ([`Spans::bars`](crate::lanes::Spans::bars)), so a frame
//! costs about one rectangle per pixel column per lane whatever the trace holds.

use eframe::egui::{
    self, Align2, Color32, CornerRadius, FontId, Key, Pos2, Rect, Sense, Stroke, StrokeKind, pos2,
    vec2,
};

use crate::fmt;
use crate::lanes::{Bar, Kind, Lane, Timeline};

/// Narrowest view: 200 ns across the window.
const MIN_RANGE_NS: f64 = 200.0;
const LABEL_W: f32 = 170.0;
const AXIS_H: f32 = 30.0;
/// Tints of the set-up and tail phases behind a lane (the steady state stays untinted).
const PHASE_SETUP: Color32 = Color32::from_rgba_premultiplied(10, 20, 38, 40);
const PHASE_TAIL: Color32 = Color32::from_rgba_premultiplied(38, 28, 8, 40);
const MIN_LANE_H: f32 = 16.0;
const MAX_LANE_H: f32 = 30.0;

pub fn colour(k: Kind) -> Color32 {
    match k {
        Kind::Compile => Color32::from_rgb(232, 145, 40),
        Kind::Execute => Color32::from_rgb(70, 150, 230),
        Kind::Device => Color32::from_rgb(60, 180, 120),
        Kind::H2d => Color32::from_rgb(160, 120, 220),
        Kind::D2h => Color32::from_rgb(200, 90, 200),
        Kind::Sync => Color32::from_rgb(230, 70, 70),
        Kind::Cache => Color32::from_rgb(150, 200, 60),
        Kind::Error => Color32::from_rgb(255, 30, 30),
        Kind::Note => Color32::from_gray(150),
        Kind::Other => Color32::from_gray(110),
    }
}

/// A selection (source, event) and where it is drawn (lane, span), if anywhere.
type Located = ((usize, usize), Option<(usize, usize)>);

/// What the timeline shows and what is selected on it.
#[derive(Clone, Debug, Default)]
pub struct TimelineView {
    /// Visible range, ns since the sources' starts.
    pub start: f64,
    pub end: f64,
    /// Set once the range has been fitted to the data.
    pub fitted: bool,
    /// The record shown in the details panel: (source, event).
    pub selected: Option<(usize, usize)>,
    /// Records marked (a sync line's): (lane, span).
    pub marks: Vec<(usize, usize)>,
    pub marks_label: String,
    /// First lane drawn (lanes scroll when they do not fit).
    pub lane_offset: usize,
    bars: Vec<Bar>,
    /// Bars drawn in the last frame: (lane, rect, bar), for hover and clicks.
    drawn: Vec<(usize, Rect, Bar)>,
    /// Width of the span area in the last frame (pixels), for key zooms before a frame.
    pub width: f32,
    /// Where the selected record is drawn: (selection, (lane, span)), found once per selection.
    located: Option<Located>,
}

/// What a click on the timeline asked for.
pub enum Clicked {
    Event(usize, usize),
    Nothing,
}

impl TimelineView {
    /// The lanes changed (a followed trace grew): span indices found before are stale.
    pub fn lanes_changed(&mut self) {
        self.located = None;
    }

    /// The bars drawn in the last frame: (lane, screen rect, bar).
    pub fn drawn(&self) -> &[(usize, Rect, Bar)] {
        &self.drawn
    }

    pub fn range(&self) -> (f64, f64) {
        (self.start, self.end)
    }

    /// Shows every span: from the first record to the last (not from the process's start,
    /// which may be seconds of imports earlier).
    pub fn fit(&mut self, tl: &Timeline) {
        let first = (tl.first_ns.min(tl.total_ns)) as f64;
        let w = (tl.total_ns as f64 - first).max(MIN_RANGE_NS);
        self.start = first - w * 0.01;
        self.end = first + w * 1.01;
        self.fitted = true;
    }

    /// Zooms by `factor` (< 1: in) keeping time `anchor` where it is.
    pub fn zoom(&mut self, factor: f64, anchor: f64) {
        let w = ((self.end - self.start) * factor).max(MIN_RANGE_NS);
        let f = if self.end > self.start {
            (anchor - self.start) / (self.end - self.start)
        } else {
            0.5
        };
        self.start = anchor - w * f;
        self.end = self.start + w;
    }

    pub fn pan(&mut self, dt: f64) {
        self.start += dt;
        self.end += dt;
    }

    /// Shows `[a, b]` with a margin (a single instant: 1 ms around it, or the current width).
    pub fn focus(&mut self, a: f64, b: f64) {
        let w = (b - a).max(MIN_RANGE_NS * 10.0);
        let margin = w * 0.15;
        self.start = a - margin;
        self.end = a + w + margin;
        self.fitted = true;
    }
}

/// Draws the timeline in the space left and handles its input.
pub fn tab_ui(
    ui: &mut egui::Ui,
    tl: &Timeline,
    view: &mut TimelineView,
    describe: &dyn Fn(usize, usize) -> String,
) -> Option<Clicked> {
    if !view.fitted {
        view.fit(tl);
    }
    legend_ui(ui, view);
    let avail = ui.available_rect_before_wrap();
    let (rect, response) = ui.allocate_exact_size(avail.size(), Sense::click_and_drag());
    let layout = Layout::new(rect, tl.lanes.len());
    view.width = layout.area.width();
    handle_input(ui, tl, view, &response, &layout);

    // Recompute with the range after input.
    let scale = Scale {
        left: layout.area.left(),
        start: view.start,
        ns_per_px: layout.ns_per_px(view),
    };
    let canvas = Canvas {
        painter: ui.painter_at(rect),
        visuals: ui.visuals().clone(),
        layout,
        scale,
    };
    canvas
        .painter
        .rect_filled(rect, 0.0, canvas.visuals.extreme_bg_color);
    axis(
        &canvas.painter,
        layout.area,
        view,
        scale.ns_per_px,
        &canvas.visuals,
    );
    canvas.phase_names(tl, view);
    canvas.steps(tl, view);
    canvas.lanes(tl, view);
    canvas.marks(tl, view);
    canvas.selection(tl, view);
    canvas.notes(tl, view);
    pointer(&response, tl, view, scale.ns_per_px, describe)
}

/// Where the parts of the timeline go, from its rectangle and its number of lanes.
#[derive(Clone, Copy)]
struct Layout {
    /// The whole timeline: lane names on the left, the span area on the right.
    rect: Rect,
    /// The span area, the axis at its top.
    area: Rect,
    /// Top of the first lane row, under the axis.
    top: f32,
    lane_h: f32,
    /// Lanes that fit, at least one.
    visible_lanes: usize,
    /// The last first lane the lanes scroll to.
    max_offset: usize,
}

impl Layout {
    fn new(rect: Rect, lanes: usize) -> Layout {
        let area = Rect::from_min_max(pos2(rect.left() + LABEL_W, rect.top()), rect.max);
        let lanes_h = (rect.height() - AXIS_H).max(0.0);
        let lane_h = if lanes == 0 {
            MAX_LANE_H
        } else {
            (lanes_h / lanes as f32).clamp(MIN_LANE_H, MAX_LANE_H)
        };
        let visible_lanes = ((lanes_h / lane_h).floor() as usize).max(1);
        Layout {
            rect,
            area,
            top: rect.top() + AXIS_H,
            lane_h,
            visible_lanes,
            max_offset: lanes.saturating_sub(visible_lanes),
        }
    }

    /// Nanoseconds per pixel of the span area showing `view`'s range.
    fn ns_per_px(&self, view: &TimelineView) -> f64 {
        (view.end - view.start) / f64::from(self.area.width().max(1.0))
    }

    /// Top of the `row`th lane drawn.
    fn row_top(&self, row: usize) -> f32 {
        self.top + row as f32 * self.lane_h
    }
}

/// Time (ns since the sources' starts) to x on screen.
#[derive(Clone, Copy)]
struct Scale {
    /// Left edge of the span area.
    left: f32,
    /// Time at that edge.
    start: f64,
    ns_per_px: f64,
}

impl Scale {
    fn x(&self, t: f64) -> f32 {
        self.left + ((t - self.start) / self.ns_per_px) as f32
    }
}

/// Keys anywhere in the tab, the wheel and drags over the canvas.
fn handle_input(
    ui: &egui::Ui,
    tl: &Timeline,
    view: &mut TimelineView,
    response: &egui::Response,
    layout: &Layout,
) {
    // A drag pans by the scale of the range before the keys and the wheel moved it.
    let ns_per_px = layout.ns_per_px(view);
    handle_keys(ui, tl, view, layout);
    if let Some(hover) = response.hover_pos() {
        handle_wheel(ui, view, layout, hover);
    }
    if response.dragged() {
        view.pan(-f64::from(response.drag_delta().x) * ns_per_px);
    }
    view.lane_offset = view.lane_offset.min(layout.max_offset);
}

/// +/−: zoom, ←/→: pan, 0 or Home: fit, PgUp/PgDn: scroll the lanes.
fn handle_keys(ui: &egui::Ui, tl: &Timeline, view: &mut TimelineView, layout: &Layout) {
    let (keys_in, keys_out, left, right, fit, page_up, page_down) = ui.input(|i| {
        (
            i.key_pressed(Key::Plus) || i.key_pressed(Key::Equals),
            i.key_pressed(Key::Minus),
            i.key_pressed(Key::ArrowLeft),
            i.key_pressed(Key::ArrowRight),
            i.key_pressed(Key::Num0) || i.key_pressed(Key::Home),
            i.key_pressed(Key::PageUp),
            i.key_pressed(Key::PageDown),
        )
    });
    let centre = (view.start + view.end) / 2.0;
    let width_ns = view.end - view.start;
    if keys_in {
        view.zoom(0.5, centre);
    }
    if keys_out {
        view.zoom(2.0, centre);
    }
    if left {
        view.pan(-width_ns * 0.2);
    }
    if right {
        view.pan(width_ns * 0.2);
    }
    if fit {
        view.fit(tl);
    }
    if page_down {
        view.lane_offset = (view.lane_offset + layout.visible_lanes).min(layout.max_offset);
    }
    if page_up {
        view.lane_offset = view.lane_offset.saturating_sub(layout.visible_lanes);
    }
}

/// The wheel and pinch with the pointer at `hover`: over the lane names the wheel scrolls the
/// lanes; over the spans it zooms around the pointer, and a sideways wheel pans.
fn handle_wheel(ui: &egui::Ui, view: &mut TimelineView, layout: &Layout, hover: Pos2) {
    let area = layout.area;
    let (scroll, zoom) = ui.input(|i| (i.smooth_scroll_delta, i.zoom_delta()));
    let now_per_px = layout.ns_per_px(view);
    let anchor = view.start + f64::from(hover.x.max(area.left()) - area.left()) * now_per_px;
    if hover.x < area.left() && scroll.y != 0.0 {
        let step = if scroll.y > 0.0 { -1isize } else { 1 };
        view.lane_offset =
            (view.lane_offset as isize + step).clamp(0, layout.max_offset as isize) as usize;
    } else {
        if zoom != 1.0 {
            view.zoom(1.0 / f64::from(zoom), anchor);
        }
        if scroll.y != 0.0 {
            view.zoom((-f64::from(scroll.y) * 0.003).exp(), anchor);
        }
        if scroll.x != 0.0 {
            view.pan(-f64::from(scroll.x) * now_per_px);
        }
    }
}

/// What paints the timeline in one redraw, once input has set its range.
struct Canvas {
    painter: egui::Painter,
    visuals: egui::Visuals,
    layout: Layout,
    scale: Scale,
}

impl Canvas {
    /// Phases: set-up and tail are tinted on their source's lanes (see [`Canvas::phase_tints`]);
    /// named here at their start, just under the axis.
    fn phase_names(&self, tl: &Timeline, view: &TimelineView) {
        let Some(&(_, steady, tail)) = tl.phases.first() else {
            return;
        };
        let area = self.layout.area;
        let spans = [
            ("set-up", 0.0, steady as f64),
            ("steady state", steady as f64, tail as f64),
            ("tail", tail as f64, f64::MAX),
        ];
        for (name, a, b) in spans {
            let x0 = self.scale.x(a.max(view.start)).max(area.left());
            let x1 = self.scale.x(b.min(view.end)).min(area.right());
            if x1 - x0 > 70.0 {
                self.painter.text(
                    pos2(x0 + 4.0, area.top() + AXIS_H + 1.0),
                    Align2::LEFT_TOP,
                    name,
                    FontId::proportional(10.0),
                    self.visuals.text_color().gamma_multiply(0.7),
                );
            }
        }
    }

    /// Steps: faint lines, labelled when there is room.
    fn steps(&self, tl: &Timeline, view: &TimelineView) {
        let area = self.layout.area;
        let visible_steps: Vec<&(usize, u64, u64)> = tl
            .steps
            .iter()
            .filter(|s| (s.1 as f64) >= view.start && (s.1 as f64) <= view.end)
            .take(area.width() as usize)
            .collect();
        // Steps closer than a few pixels would only grey the lanes over: then none are drawn.
        let dense = visible_steps.len() as f32 > area.width() / 6.0;
        let mut last_label = f32::NEG_INFINITY;
        for s in visible_steps.iter().filter(|_| !dense) {
            let x = self.scale.x(s.1 as f64);
            self.painter.vline(
                x,
                area.top()..=area.bottom(),
                Stroke::new(1.0, self.visuals.weak_text_color().gamma_multiply(0.35)),
            );
            // Labelled only where the previous label leaves room.
            if x - last_label > 56.0 {
                last_label = x;
                self.painter.text(
                    pos2(x + 2.0, area.top() + AXIS_H - 2.0),
                    Align2::LEFT_BOTTOM,
                    format!("step {}", s.2),
                    FontId::proportional(10.0),
                    self.visuals.weak_text_color(),
                );
            }
        }
    }

    /// The lanes that fit from `view.lane_offset`, noting each bar drawn in `view.drawn`.
    fn lanes(&self, tl: &Timeline, view: &mut TimelineView) {
        view.drawn.clear();
        let font = FontId::proportional(12.0);
        let rows = (view.lane_offset..tl.lanes.len()).take(self.layout.visible_lanes);
        for (row, li) in rows.enumerate() {
            self.lane(tl, view, row, li, &font);
        }
    }

    /// Lane `li` in row `row`: its background, its name and its bars.
    fn lane(&self, tl: &Timeline, view: &mut TimelineView, row: usize, li: usize, font: &FontId) {
        let (rect, area) = (self.layout.rect, self.layout.area);
        let lane = &tl.lanes[li];
        let y0 = self.layout.row_top(row);
        let lane_h = self.layout.lane_h;
        let lane_rect = Rect::from_min_max(pos2(rect.left(), y0), pos2(rect.right(), y0 + lane_h));
        if row % 2 == 1 {
            self.painter
                .rect_filled(lane_rect, 0.0, self.visuals.faint_bg_color);
        }
        self.phase_tints(tl, view, lane.source, lane_rect);
        self.painter
            .with_clip_rect(Rect::from_min_max(
                lane_rect.min,
                pos2(area.left() - 4.0, lane_rect.max.y),
            ))
            .text(
                pos2(rect.left() + 6.0, lane_rect.center().y),
                Align2::LEFT_CENTER,
                &lane.label,
                font.clone(),
                if lane.device {
                    self.visuals.strong_text_color()
                } else {
                    self.visuals.text_color()
                },
            );
        view.bars.clear();
        lane.bars(view.start, view.end, area.width(), &mut view.bars);
        let bar_top = y0 + 2.0;
        let bar_bot = y0 + lane_h - 2.0;
        for b in &view.bars {
            let x0 = (area.left() + b.x0).max(area.left() - 1.0);
            let x1 = (area.left() + b.x1).min(area.right() + 1.0).max(x0 + 1.0);
            let r = Rect::from_min_max(pos2(x0, bar_top), pos2(x1, bar_bot));
            let c = colour(b.kind);
            let c = if b.count > 1 {
                c.gamma_multiply(0.8)
            } else {
                c
            };
            self.painter.rect_filled(r, CornerRadius::ZERO, c);
            view.drawn.push((li, r, *b));
        }
    }

    /// The set-up and tail of `source` tinted behind one of its lanes.
    fn phase_tints(&self, tl: &Timeline, view: &TimelineView, source: usize, lane_rect: Rect) {
        let Some(&(_, steady, tail)) = tl.phases.iter().find(|p| p.0 == source) else {
            return;
        };
        let area = self.layout.area;
        for (a, b, tint) in [
            (view.start.min(steady as f64), steady as f64, PHASE_SETUP),
            (tail as f64, view.end.max(tail as f64), PHASE_TAIL),
        ] {
            let x0 = self.scale.x(a).max(area.left());
            let x1 = self.scale.x(b).min(area.right());
            if x1 > x0 {
                self.painter.rect_filled(
                    Rect::from_min_max(pos2(x0, lane_rect.top()), pos2(x1, lane_rect.bottom())),
                    0.0,
                    tint,
                );
            }
        }
    }

    /// Where span `span` of lane `lane` is drawn, a pixel around it; `None` when its lane is
    /// scrolled out of sight.
    fn span_rect(
        &self,
        tl: &Timeline,
        lane_offset: usize,
        lane: usize,
        span: usize,
    ) -> Option<Rect> {
        let row = lane.checked_sub(lane_offset)?;
        if row >= self.layout.visible_lanes {
            return None;
        }
        let l = tl.lanes.get(lane)?;
        let a = l.start(span)? as f64;
        let b = l.end(span)? as f64;
        let y0 = self.layout.row_top(row);
        let x0 = self.scale.x(a);
        let x1 = self.scale.x(b).max(x0 + 1.0);
        Some(Rect::from_min_max(
            pos2(x0 - 1.0, y0 + 1.0),
            pos2(x1 + 1.0, y0 + self.layout.lane_h - 1.0),
        ))
    }

    /// The marked records (a sync line's): outlined, with a pointer above.
    fn marks(&self, tl: &Timeline, view: &TimelineView) {
        let mark = Color32::from_rgb(255, 200, 0);
        let clip = self.painter.with_clip_rect(self.layout.area);
        for &(lane, span) in &view.marks {
            if let Some(r) = self.span_rect(tl, view.lane_offset, lane, span) {
                let c = r.center_top();
                clip.add(egui::Shape::convex_polygon(
                    vec![
                        pos2(c.x - 5.0, c.y - 1.0),
                        pos2(c.x + 5.0, c.y - 1.0),
                        pos2(c.x, c.y + 6.0),
                    ],
                    mark,
                    Stroke::NONE,
                ));
                clip.rect_stroke(r, 0.0, Stroke::new(1.5, mark), StrokeKind::Outside);
            }
        }
    }

    /// The selected record outlined; where it is drawn is looked up once per selection.
    fn selection(&self, tl: &Timeline, view: &mut TimelineView) {
        let found = match (view.selected, view.located) {
            (Some(sel), Some((k, at))) if k == sel => at,
            (Some(sel), _) => tl.locate(sel.0, sel.1),
            (None, _) => None,
        };
        view.located = view.selected.map(|s| (s, found));
        if let Some((lane, span)) = found
            && let Some(r) = self.span_rect(tl, view.lane_offset, lane, span)
        {
            self.painter.with_clip_rect(self.layout.area).rect_stroke(
                r,
                0.0,
                Stroke::new(2.0, self.visuals.strong_text_color()),
                StrokeKind::Outside,
            );
        }
    }

    /// Which lanes are shown when not all fit, or that there are none.
    fn notes(&self, tl: &Timeline, view: &TimelineView) {
        let (rect, area) = (self.layout.rect, self.layout.area);
        let n = tl.lanes.len();
        let visible_lanes = self.layout.visible_lanes;
        if n > visible_lanes {
            self.painter.text(
                pos2(rect.left() + 6.0, rect.bottom() - 4.0),
                Align2::LEFT_BOTTOM,
                format!(
                    "lanes {}–{} of {n} (wheel over names, PgUp/PgDn)",
                    view.lane_offset + 1,
                    (view.lane_offset + visible_lanes).min(n)
                ),
                FontId::proportional(11.0),
                self.visuals.weak_text_color(),
            );
        }
        if tl.lanes.is_empty() {
            self.painter.text(
                area.center(),
                Align2::CENTER_CENTER,
                "no timed records in this trace",
                FontId::proportional(14.0),
                self.visuals.weak_text_color(),
            );
        }
    }
}

/// Hover and click on the bars drawn: a tooltip describes the bar under the pointer; a click
/// selects its record (and zooms onto a merged bar), a double click zooms onto its span.
fn pointer(
    response: &egui::Response,
    tl: &Timeline,
    view: &mut TimelineView,
    ns_per_px: f64,
    describe: &dyn Fn(usize, usize) -> String,
) -> Option<Clicked> {
    let hovered = response.hover_pos().and_then(|p| hit(&view.drawn, p));
    if let Some((lane, bar)) = hovered {
        show_tooltip(response, &tl.lanes[lane], bar, describe);
    }
    let mut clicked = None;
    if response.clicked() {
        clicked = Some(match hovered {
            Some((lane, bar)) => {
                let l = &tl.lanes[lane];
                if bar.count > 1 {
                    // A merged bar: zoom onto it.
                    let a = view.start + f64::from(bar.x0) * ns_per_px;
                    let b = view.start + f64::from(bar.x1) * ns_per_px;
                    view.focus(a, b);
                }
                match l.event(bar.span as usize) {
                    Some(e) => Clicked::Event(l.source, e),
                    None => Clicked::Nothing,
                }
            }
            None => Clicked::Nothing,
        });
    }
    if response.double_clicked()
        && let Some((lane, bar)) = hovered
    {
        let l = &tl.lanes[lane];
        let i = bar.span as usize;
        if let (Some(a), Some(b)) = (l.start(i), l.end(i)) {
            view.focus(a as f64, b as f64);
        }
    }
    clicked
}

/// What the bar under the pointer stands for, at the pointer.
fn show_tooltip(
    response: &egui::Response,
    l: &Lane,
    bar: Bar,
    describe: &dyn Fn(usize, usize) -> String,
) {
    let i = bar.span as usize;
    let text = l
        .event(i)
        .map(|e| describe(l.source, e))
        .unwrap_or_default();
    let at = fmt::dur(l.start(i).unwrap_or(0) as f64);
    response.clone().on_hover_ui_at_pointer(|ui| {
        if bar.count > 1 {
            ui.label(format!(
                "{} records merged at this zoom (zoom in to separate)",
                bar.count
            ));
            ui.label(format!("longest: {text}"));
        } else {
            ui.label(text);
        }
        ui.weak(format!("at {at} · {}", l.label));
    });
}

fn hit(drawn: &[(usize, Rect, Bar)], p: Pos2) -> Option<(usize, Bar)> {
    // Small bars get a few pixels of slack.
    drawn
        .iter()
        .filter(|(_, r, _)| r.expand2(vec2(2.0, 0.0)).contains(p))
        .min_by(|a, b| {
            let da = (a.1.center().x - p.x).abs();
            let db = (b.1.center().x - p.x).abs();
            da.total_cmp(&db)
        })
        .map(|(l, _, b)| (*l, *b))
}

fn legend_ui(ui: &mut egui::Ui, view: &TimelineView) {
    ui.horizontal_wrapped(|ui| {
        for k in Kind::ALL {
            let (r, _) = ui.allocate_exact_size(vec2(12.0, 12.0), Sense::hover());
            ui.painter().rect_filled(r, 2.0, colour(k));
            ui.label(k.name());
            ui.add_space(6.0);
        }
        ui.separator();
        ui.weak("wheel or +/−: zoom · drag or ←/→: pan · 0: fit · click: details");
        if !view.marks_label.is_empty() {
            ui.separator();
            ui.colored_label(Color32::from_rgb(255, 200, 0), &view.marks_label);
        }
    });
    ui.label(format!(
        "showing {} – {} ({} across)",
        fmt::dur(view.start.max(0.0)),
        fmt::dur(view.end),
        fmt::dur(view.end - view.start)
    ));
}

/// Tick step: 1, 2 or 5 × 10^k ns, about 110 px apart.
fn tick_step(ns_per_px: f64) -> f64 {
    let raw = (ns_per_px * 110.0).max(1.0);
    let mag = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if mag * m >= raw {
            return mag * m;
        }
    }
    mag * 10.0
}

fn axis(
    painter: &egui::Painter,
    area: Rect,
    view: &TimelineView,
    ns_per_px: f64,
    visuals: &egui::Visuals,
) {
    let step = tick_step(ns_per_px);
    let mut t = (view.start / step).ceil() * step;
    let x_of = |t: f64| area.left() + ((t - view.start) / ns_per_px) as f32;
    let mut guard = 0;
    while t <= view.end && guard < 200 {
        let x = x_of(t);
        painter.vline(
            x,
            area.top()..=area.top() + AXIS_H,
            Stroke::new(1.0, visuals.weak_text_color()),
        );
        painter.vline(
            x,
            area.top() + AXIS_H..=area.bottom(),
            Stroke::new(1.0, visuals.weak_text_color().gamma_multiply(0.12)),
        );
        painter.text(
            pos2(x + 3.0, area.top() + 2.0),
            Align2::LEFT_TOP,
            // Before the start there is nothing to read: no negative times.
            if t < -step * 1e-6 {
                String::new()
            } else {
                // `-0.0` prints with its sign.
                fmt::tick(if t.abs() < step * 1e-6 { 0.0 } else { t }, step)
            },
            FontId::monospace(10.0),
            visuals.text_color(),
        );
        t += step;
        guard += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zoom_keeps_the_anchor() {
        let mut v = TimelineView {
            start: 0.0,
            end: 1000.0,
            ..TimelineView::default()
        };
        v.zoom(0.5, 250.0);
        assert!((v.end - v.start - 500.0).abs() < 1e-9);
        assert!((v.start - 125.0).abs() < 1e-9);
        v.zoom(1e-9, 300.0);
        assert!(v.end - v.start >= MIN_RANGE_NS);
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick_step(1.0), 200.0);
        assert_eq!(tick_step(10_000.0), 2_000_000.0);
    }
}
