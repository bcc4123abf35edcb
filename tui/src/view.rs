//! Drawing: header, counters, tabs, the tab's body (or a family's detail) and a footer of keys.
//! Reads only the model and the app state; renders at any size without panicking.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span, Text};
use ratatui::widgets::{
    Block, Borders, Cell, HighlightSpacing, LineGauge, Paragraph, Row, Sparkline, Table, Tabs,
};

use tpuscope_analyzers::units::{LongWord, bytes, ms, percent, plural, wrap};

use crate::app::{App, Tab};
use crate::fmt::{self, truncate};
use crate::model::{
    Category, DeviceMem, EventKind, EventLine, FamilyView, MemberView, Model, RunState, SplitWord,
    TimeView,
};

const ACCENT: Color = Color::Cyan;
const DIM: Style = Style::new().fg(Color::DarkGray);
const BOLD: Style = Style::new().add_modifier(Modifier::BOLD);
const BAD: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
const WARN: Style = Style::new().fg(Color::Yellow);
const GOOD: Style = Style::new().fg(Color::Green);
/// A family whose count just grew.
const GREW: Style = Style::new()
    .fg(Color::Black)
    .bg(Color::Yellow)
    .add_modifier(Modifier::BOLD);
const SELECTED: Style = Style::new().add_modifier(Modifier::REVERSED);

/// Draws the app's own model (the frozen one while paused), or a waiting screen before the
/// first model arrives.
pub fn draw_app(frame: &mut Frame, app: &mut App) {
    match app.take_model() {
        Some(m) => {
            draw(frame, app, &m);
            app.put_model(Some(m));
        }
        None => {
            let area = frame.area();
            frame.render_widget(
                Paragraph::new(vec![
                    Line::styled(" tpuscope", BOLD.fg(ACCENT)),
                    Line::from(" waiting for the first events…"),
                ]),
                area,
            );
        }
    }
}

/// Draws one frame of `model`.
pub fn draw(frame: &mut Frame, app: &mut App, model: &Model) {
    let area = frame.area();
    if area.width == 0 || area.height == 0 {
        return;
    }
    let h = area.height;
    let header_h = if h >= 16 { 2 } else { 1 };
    let counters_h = u16::from(h >= 6);
    let tabs_h = u16::from(h >= 4);
    let footer_h = u16::from(h >= 3);
    let [header, counters, tabs, body, footer] = Layout::vertical([
        Constraint::Length(header_h),
        Constraint::Length(counters_h),
        Constraint::Length(tabs_h),
        Constraint::Min(0),
        Constraint::Length(footer_h),
    ])
    .areas(area);
    draw_header(frame, header, app, model);
    draw_counters(frame, counters, model);
    draw_tabs(frame, tabs, app, model);
    if let Some(key) = app.detail().map(str::to_string) {
        match model.families.iter().find(|f| f.key == key) {
            Some(f) => draw_detail(frame, body, app, f),
            None => frame.render_widget(Paragraph::new(" (this family is gone)"), body),
        }
    } else {
        match app.tab() {
            Tab::Overview => draw_overview(frame, body, app, model),
            Tab::Recompiles => draw_recompiles(frame, body, app, model),
            Tab::Syncs => draw_syncs(frame, body, app, model),
            Tab::Memory => draw_memory(frame, body, model),
            Tab::Events => draw_events(frame, body, app, model),
            Tab::Output => draw_output(frame, body, app, model),
        }
    }
    draw_footer(frame, footer, app);
}

fn width(spans: &[Span<'_>]) -> usize {
    spans.iter().map(|s| s.content.chars().count()).sum()
}

fn draw_header(frame: &mut Frame, area: Rect, app: &App, model: &Model) {
    if area.height == 0 {
        return;
    }
    let hd = &model.header;
    let w = area.width as usize;
    let (state, state_style) = if app.paused() {
        ("‖ paused", WARN.add_modifier(Modifier::BOLD))
    } else {
        match model.state {
            RunState::Live => ("● live", GOOD.add_modifier(Modifier::BOLD)),
            RunState::Ended => ("■ ended", DIM),
            RunState::Paused => ("‖ reading paused", WARN),
        }
    };
    // An attached trace starts at the attach, not at the process's start.
    let up = match (model.state, hd.attached.is_some()) {
        (_, true) => "attached",
        (RunState::Ended, false) => "ran",
        (_, false) => "up",
    };
    let mut right = vec![Span::styled(state, state_style)];
    if !model.phase.is_empty() {
        right.push(Span::raw(" · "));
        right.push(Span::styled(model.phase.clone(), BOLD));
    }
    right.push(Span::raw(format!(" · {up} {} ", fmt::uptime(hd.uptime_ns))));
    let mut left = vec![
        Span::styled(" tpuscope ", BOLD.fg(Color::Black).bg(ACCENT)),
        Span::raw(format!(" pid {}", hd.pid)),
    ];
    if !hd.frontend.is_empty() {
        left.push(Span::raw(" · "));
        left.push(Span::styled(hd.frontend.clone(), BOLD.fg(ACCENT)));
    }
    // The command gets what the rest leaves; the right side goes first when it cannot fit.
    let fixed = width(&left) + 3;
    if fixed + width(&right) + 8 > w {
        right.clear();
    }
    let room = w.saturating_sub(fixed + width(&right) + 1);
    if room > 3 && !hd.command.is_empty() {
        left.push(Span::raw(" · "));
        left.push(Span::raw(truncate(&hd.command, room)));
    }
    let pad = w.saturating_sub(width(&left) + width(&right));
    left.push(Span::raw(" ".repeat(pad)));
    left.extend(right);
    let mut lines = vec![Line::from(left)];
    if area.height > 1 {
        // Versions first: a cut line loses the plugin's path, not what a bug report needs.
        let mut parts: Vec<String> = hd
            .packages
            .iter()
            .map(|(p, v)| format!("{p} {v}"))
            .collect();
        parts.push(format!("PJRT {}", hd.pjrt_api));
        parts.push(format!(
            "plugin {}",
            if hd.plugin.is_empty() {
                "?"
            } else {
                &hd.plugin
            }
        ));
        if let Some(why) = &hd.partial
            && model.state != RunState::Live
        {
            parts.insert(0, why.clone());
        }
        if let Some(a) = &hd.attached {
            parts.insert(0, a.clone());
        }
        lines.push(Line::styled(
            truncate(&format!(" {}", parts.join(" · ")), w),
            DIM,
        ));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

fn draw_counters(frame: &mut Frame, area: Rect, model: &Model) {
    if area.height == 0 {
        return;
    }
    let c = &model.counters;
    let num = |v: u64, bad: Style| {
        if v > 0 {
            Span::styled(v.to_string(), bad)
        } else {
            Span::styled(v.to_string(), BOLD)
        }
    };
    let rate = model
        .header
        .steps_per_s
        .map(|r| format!(" ({r:.1}/s)"))
        .unwrap_or_default();
    // (labels from longest to shortest, value, extras from longest to shortest)
    type Item<'a> = ([&'a str; 3], Span<'a>, [String; 3]);
    let same = |s: String| [s.clone(), s.clone(), s];
    let items: Vec<Item<'_>> = vec![
        (
            ["compiles", "compiles", "comp"],
            num(c.compiles, BOLD),
            if c.failed_compiles > 0 {
                [
                    format!(" ({} failed)", c.failed_compiles),
                    format!(" ({} failed)", c.failed_compiles),
                    format!("/{}!", c.failed_compiles),
                ]
            } else {
                same(String::new())
            },
        ),
        (
            ["cache hits", "hits", "hits"],
            num(c.cache_hits, BOLD),
            same(String::new()),
        ),
        (
            ["recompiles", "recompiles", "recomp"],
            num(c.recompiles, BAD),
            if c.warmup_recompiles > 0 {
                [
                    format!(" (+{} set-up/tail)", c.warmup_recompiles),
                    format!(" (+{} set-up)", c.warmup_recompiles),
                    format!("+{}", c.warmup_recompiles),
                ]
            } else {
                same(String::new())
            },
        ),
        (
            ["host syncs", "syncs", "syncs"],
            num(c.host_syncs, WARN),
            same(String::new()),
        ),
        (
            ["steps", "steps", "steps"],
            num(c.steps, BOLD),
            [rate.clone(), rate, String::new()],
        ),
        (
            ["dropped", "dropped", "drop"],
            num(c.dropped, WARN),
            same(String::new()),
        ),
        (
            ["viewer lost", "lost", "lost"],
            num(c.viewer_lost, WARN),
            same(String::new()),
        ),
    ];
    // Narrower and narrower: shorter labels, then single spaces, then the shortest labels.
    let tiers = [(0, "  "), (1, "  "), (1, " "), (2, " ")];
    let build = |(tier, sep): (usize, &'static str)| {
        let mut spans = vec![Span::raw(" ")];
        for (i, (labels, v, extra)) in items.iter().enumerate() {
            if i > 0 {
                spans.push(Span::raw(sep));
            }
            spans.push(Span::styled(format!("{} ", labels[tier]), DIM));
            spans.push(v.clone());
            if !extra[tier].is_empty() {
                spans.push(Span::styled(extra[tier].clone(), DIM));
            }
        }
        spans
    };
    let mut spans = build(tiers[0]);
    for t in &tiers[1..] {
        if width(&spans) <= area.width as usize {
            break;
        }
        spans = build(*t);
    }
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn draw_tabs(frame: &mut Frame, area: Rect, app: &App, model: &Model) {
    if area.height == 0 {
        return;
    }
    let tabs = app.tabs();
    let titles: Vec<Line<'_>> = tabs
        .iter()
        .map(|t| {
            let n = match t {
                Tab::Recompiles => Some(model.families.len()),
                Tab::Syncs => Some(model.syncs.len()),
                _ => None,
            };
            match n {
                Some(n) if n > 0 => Line::from(format!("{} {n}", t.title())),
                _ => Line::from(t.title()),
            }
        })
        .collect();
    let sel = tabs.iter().position(|t| *t == app.tab());
    frame.render_widget(
        Tabs::new(titles)
            .select(sel)
            .style(DIM)
            .highlight_style(BOLD.fg(ACCENT).add_modifier(Modifier::REVERSED))
            .divider("│"),
        area,
    );
}

fn draw_footer(frame: &mut Frame, area: Rect, app: &App) {
    if area.height == 0 {
        return;
    }
    let w = area.width as usize;
    let mut spans = Vec::new();
    if app.paused() {
        spans.push(Span::styled(
            " PAUSED ",
            BOLD.fg(Color::Black).bg(Color::Yellow),
        ));
    }
    if app.editing_filter() {
        spans.push(Span::styled(" /", BOLD.fg(ACCENT)));
        spans.push(Span::raw(app.filter().to_string()));
        spans.push(Span::styled("▏", BOLD.fg(ACCENT)));
        spans.push(Span::styled("  Enter keep · Esc clear", DIM));
        frame.render_widget(Paragraph::new(Line::from(spans)), area);
        return;
    }
    if !app.filter().is_empty() {
        spans.push(Span::styled(format!(" filter: {} ", app.filter()), WARN));
    }
    let keys: &[(&str, &str)] = if app.detail().is_some() {
        &[
            ("↑↓", "member"),
            ("PgUp/PgDn", "scroll"),
            ("Esc", "back"),
            ("p", "pause"),
            ("q", "quit"),
        ]
    } else {
        &[
            ("Tab", "view"),
            ("↑↓", "move"),
            ("Enter", "detail"),
            ("/", "filter"),
            ("p", "pause"),
            ("q", "quit"),
        ]
    };
    let with_words = |words: bool| {
        let mut s = Vec::new();
        for (k, d) in keys {
            s.push(Span::styled(format!(" {k}"), BOLD.fg(ACCENT)));
            if words {
                s.push(Span::styled(format!(" {d} "), DIM));
            }
        }
        s
    };
    let used = width(&spans);
    let mut k = with_words(true);
    if used + width(&k) > w {
        k = with_words(false);
    }
    spans.extend(k);
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// A section: a title on a rule line.
fn section<'a>(title: impl Into<Line<'a>>) -> Block<'a> {
    Block::new()
        .borders(Borders::TOP)
        .border_style(DIM)
        .title(title)
        .title_style(BOLD.fg(ACCENT))
}

fn draw_overview(frame: &mut Frame, area: Rect, app: &mut App, model: &Model) {
    if area.height == 0 {
        return;
    }
    let n_fams = app.visible_families(model).len();
    let needle = app.filter().to_lowercase();
    let n_syncs = model.syncs.iter().filter(|s| s.matches(&needle)).count();
    // A list section: title, column header, rows; a title and a message when empty.
    let list_need = |n: usize, max: usize| if n == 0 { 2 } else { n.min(max) as u16 + 2 };
    let fam_need = list_need(n_fams, 8);
    let sync_need = list_need(n_syncs, 5);
    let mem_need = model.memory.len().clamp(1, 4) as u16 + 1;
    let time_need = model
        .time
        .as_ref()
        .map_or(0, |t| time_lines(t, area.width as usize).len() as u16 + 1);
    if area.width >= 110 && area.height >= 20 {
        // Where the time goes across the top; two columns below it (what recompiles and syncs
        // | memory and the fix), events below them.
        let [time, area] =
            Layout::vertical([Constraint::Length(time_need), Constraint::Min(0)]).areas(area);
        time_section(frame, time, model);
        let fix = fix_lines(app, model, (area.width / 2).saturating_sub(2) as usize);
        let left_need = fam_need + sync_need;
        let right_need = mem_need + fix.len() as u16 + 1;
        let top_h = left_need.max(right_need).min(area.height * 3 / 5);
        let [top, events] =
            Layout::vertical([Constraint::Length(top_h), Constraint::Min(0)]).areas(area);
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                .spacing(2)
                .areas(top);
        let fam_h = fam_need.min(left.height.saturating_sub(sync_need.min(3)));
        let [fams, syncs] =
            Layout::vertical([Constraint::Length(fam_h), Constraint::Min(0)]).areas(left);
        families_table(frame, fams, app, model, true);
        syncs_table(frame, syncs, app, model, true);
        let [mem, fix_area] =
            Layout::vertical([Constraint::Length(mem_need), Constraint::Min(0)]).areas(right);
        memory_lines(frame, mem, model);
        let title = match app.selected_family(model) {
            Some(f) => format!(" Fix: {} ", f.graph),
            None => " Fix ".to_string(),
        };
        frame.render_widget(Paragraph::new(fix).block(section(title)), fix_area);
        events_list(frame, events, app, model, true);
        return;
    }
    // Stacked, by priority: a section is shown whole enough to read, or not at all.
    let mut rem = area.height;
    let mut take = |need: u16, min: u16| {
        let h = if rem >= min { need.min(rem) } else { 0 };
        rem -= h;
        h
    };
    let fam_h = take(fam_need, 2);
    // The headline and its bar at least.
    let time_h = take(time_need, time_need.min(3));
    let sync_h = take(sync_need, sync_need.min(3) + 2);
    let mem_h = take(mem_need, mem_need + 3);
    let [fams, time, syncs, mem, events] = Layout::vertical([
        Constraint::Length(fam_h),
        Constraint::Length(time_h),
        Constraint::Length(sync_h),
        Constraint::Length(mem_h),
        Constraint::Min(0),
    ])
    .areas(area);
    families_table(frame, fams, app, model, true);
    time_section(frame, time, model);
    syncs_table(frame, syncs, app, model, true);
    memory_lines(frame, mem, model);
    if events.height >= 2 {
        events_list(frame, events, app, model, true);
    }
}

/// The colour of a category, the same in the words, the bar and the sparkline.
fn category_color(c: Category) -> Color {
    match c {
        Category::DeviceBusy => Color::Green,
        Category::Compiling => Color::Yellow,
        Category::HostBound => Color::LightBlue,
        Category::Blocked => Color::Red,
        Category::Untimed => Color::Gray,
    }
}

/// `lead` then the words of a split, broken into lines of `width` between categories (the
/// separator at a break is left out); a word longer than a line is cut.
fn words(lead: Span<'static>, w: &[SplitWord], width: usize) -> Vec<Line<'static>> {
    let indent = lead.content.chars().count();
    let mut lines = Vec::new();
    let mut line = vec![lead];
    let mut used = indent;
    let mut sep: Option<&SplitWord> = None;
    for word in w {
        let Some(c) = word.category else {
            sep = Some(word);
            continue;
        };
        let sep_w = sep.map_or(0, |s| s.text.chars().count());
        let n = word.text.chars().count();
        if used > indent && used + sep_w + n > width {
            lines.push(Line::from(std::mem::take(&mut line)));
            line.push(Span::raw(" ".repeat(indent)));
            used = indent;
        } else if let Some(s) = sep.filter(|_| used > indent) {
            line.push(Span::styled(s.text.clone(), DIM));
            used += sep_w;
        }
        sep = None;
        let style = Style::new().fg(category_color(c));
        let style = if word.loud {
            style.add_modifier(Modifier::BOLD)
        } else {
            style
        };
        let text = truncate(&word.text, width.saturating_sub(used));
        used += text.chars().count();
        line.push(Span::styled(text, style));
    }
    lines.push(Line::from(line));
    lines
}

/// Cells of a `width`-cell bar per category, in [`Category::ALL`]'s order: each share rounded
/// down, the cells left over to the largest remainders, so the segments fill the bar exactly.
fn bar_cells(t: &crate::model::TimeSplit, width: usize) -> Vec<(Category, usize)> {
    let exact: Vec<(Category, f64)> = Category::ALL
        .into_iter()
        .map(|c| (c, t.share(c) * width as f64))
        .collect();
    let mut cells: Vec<(Category, usize)> = exact
        .iter()
        .map(|&(c, x)| (c, x.floor() as usize))
        .collect();
    let used: usize = cells.iter().map(|c| c.1).sum();
    if t.wall_ms > 0.0 {
        let mut order: Vec<usize> = (0..exact.len()).collect();
        order.sort_by(|&a, &b| {
            let frac = |i: usize| exact[i].1 - exact[i].1.floor();
            frac(b).total_cmp(&frac(a))
        });
        for &i in order.iter().take(width.saturating_sub(used)) {
            cells[i].1 += 1;
        }
    }
    cells
}

/// `▁▂▃█`: the step times scaled to the longest shown, each coloured by what took most of it.
fn step_sparkline(t: &TimeView, width: usize) -> Vec<Span<'static>> {
    const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let shown = &t.steps[t.steps.len().saturating_sub(width)..];
    let max = shown.iter().map(|s| s.ms).fold(0.0, f64::max);
    shown
        .iter()
        .map(|s| {
            let level = if max > 0.0 {
                ((s.ms / max * 8.0).ceil() as usize).clamp(1, 8)
            } else {
                1
            };
            Span::styled(
                LEVELS[level - 1].to_string(),
                Style::new().fg(category_color(s.dominant)),
            )
        })
        .collect()
}

/// The lines of the time section, most important first (a short section keeps the first):
/// the headline, its bar, what is unknown, the step times, the last step's split.
fn time_lines(t: &TimeView, width: usize) -> Vec<Line<'static>> {
    let w = width.saturating_sub(2);
    let mut lines = Vec::new();
    lines.extend(words(Span::raw(" "), &t.headline, w + 1));
    let mut bar = vec![Span::raw(" ")];
    for (c, n) in bar_cells(&t.total, w) {
        if n > 0 {
            bar.push(Span::styled(
                "█".repeat(n),
                Style::new().fg(category_color(c)),
            ));
        }
    }
    lines.push(Line::from(bar));
    if let Some(u) = &t.untimed {
        lines.push(Line::styled(format!(" {}", truncate(u, w)), WARN));
    }
    if !t.steps.is_empty() {
        let mut stats = String::new();
        if let Some(p) = t.step_time {
            stats.push_str(&format!(
                " steady p50 {} · p90 {} · p99 {} ms",
                ms(p.p50_ms),
                ms(p.p90_ms),
                ms(p.p99_ms)
            ));
        }
        if let Some(r) = t.steps_per_s {
            stats.push_str(&format!(" · {r:.1} steps/s"));
        }
        let label = " steps ";
        // The sparkline gets what the numbers leave, the numbers go when it would be too short.
        let mut room = w.saturating_sub(label.len() + stats.chars().count());
        if room < 10 {
            stats.clear();
            room = w.saturating_sub(label.len());
        }
        let mut line = vec![Span::styled(label, DIM)];
        line.extend(step_sparkline(t, room));
        line.push(Span::raw(stats));
        lines.push(Line::from(line));
    }
    if let Some((n, split)) = &t.current {
        let lead = Span::styled(format!(" step {n}: "), DIM);
        lines.extend(words(lead, split, w + 1));
    }
    lines
}

fn time_section(frame: &mut Frame, area: Rect, model: &Model) {
    let Some(t) = &model.time else {
        return;
    };
    if area.height == 0 {
        return;
    }
    let title = format!(
        " Where the time goes · {} ",
        tpuscope_analyzers::units::duration(t.total.wall_ms)
    );
    frame.render_widget(
        Paragraph::new(time_lines(t, area.width as usize)).block(section(title)),
        area,
    );
}

/// What to fix first: the selected family's change and fix, else the worst sync line's.
fn fix_lines(app: &App, model: &Model, w: usize) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    if let Some(f) = app.selected_family(model) {
        if let Some(s) = &f.source {
            lines.push(Line::from(vec![
                Span::raw(" at "),
                Span::styled(s.clone(), BOLD.fg(ACCENT)),
            ]));
        }
        push_para(&mut lines, "changed: ", &f.details, w, Style::new());
        push_para(&mut lines, "fix: ", &f.suggestion, w, GOOD);
    } else if let Some(s) = model.syncs.first() {
        push_para(&mut lines, "fix: ", &s.suggestion, w, GOOD);
    } else {
        lines.push(Line::styled(" nothing to fix so far", DIM));
        for l in &model.phase_lines {
            push_para(&mut lines, "", l, w, DIM);
        }
    }
    lines
}

fn families_table(frame: &mut Frame, area: Rect, app: &mut App, model: &Model, compact: bool) {
    if area.height == 0 {
        return;
    }
    let fams = app.visible_families(model);
    let title = if app.filter().is_empty() {
        format!(" Recompile families ({}) ", fams.len())
    } else {
        format!(
            " Recompile families ({} of {}, filtered) ",
            fams.len(),
            model.families.len()
        )
    };
    let block = section(title);
    if fams.is_empty() {
        let msg = if model.families.is_empty() {
            " no recompiles: every graph compiled once so far"
        } else {
            " no family matches the filter"
        };
        frame.render_widget(Paragraph::new(Span::styled(msg, DIM)).block(block), area);
        return;
    }
    let header = Row::new(if compact {
        vec!["graph", "×", "cause", "at"]
    } else {
        vec!["graph", "×", "cause", "at", "compile", "details"]
    })
    .style(DIM);
    let graph_w = fams
        .iter()
        .map(|f| f.graph.chars().count())
        .max()
        .unwrap_or(5)
        .clamp(5, 28) as u16;
    let cause_w = fams
        .iter()
        .map(|f| f.cause.chars().count() + if f.finding { 0 } else { 10 })
        .max()
        .unwrap_or(5)
        .clamp(5, 28) as u16;
    let src_w = fams
        .iter()
        .map(|f| f.source.as_deref().map_or(1, |s| s.chars().count()))
        .max()
        .unwrap_or(2)
        .clamp(2, 36) as u16;
    // The room of the `at` column: all that is left in the compact table.
    let at_w = if compact {
        area.width.saturating_sub(graph_w + 3 + cause_w + 4) as usize
    } else {
        src_w as usize
    };
    let rows: Vec<Row<'_>> = fams
        .iter()
        .map(|f| {
            let cause = match &f.not_a_finding {
                None => Span::styled(f.cause.clone(), Style::new().fg(Color::Red)),
                Some(why) => Span::styled(format!("{} ({why})", f.cause), DIM),
            };
            let mut cells = vec![
                Cell::from(f.graph.clone()),
                Cell::from(f.count.to_string()),
                Cell::from(cause),
                Cell::from(
                    f.source
                        .as_deref()
                        .map_or_else(|| "—".to_string(), |s| fmt::truncate_left(s, at_w)),
                ),
            ];
            if !compact {
                cells.push(Cell::from(format!("{} ms", ms(f.compile_ms))));
                cells.push(Cell::from(f.details.clone()));
            }
            let row = Row::new(cells);
            if app.is_highlighted(&f.key) {
                row.style(GREW)
            } else {
                row
            }
        })
        .collect();
    let widths: Vec<Constraint> = if compact {
        vec![
            Constraint::Length(graph_w),
            Constraint::Length(3),
            Constraint::Length(cause_w),
            Constraint::Fill(1),
        ]
    } else {
        vec![
            Constraint::Length(graph_w),
            Constraint::Length(3),
            Constraint::Length(cause_w),
            Constraint::Length(src_w),
            Constraint::Length(9),
            Constraint::Fill(1),
        ]
    };
    clamp_selection(&mut app.families, fams.len());
    frame.render_stateful_widget(
        Table::new(rows, widths)
            .header(header)
            .block(block)
            .row_highlight_style(SELECTED)
            .highlight_symbol("▶")
            .highlight_spacing(HighlightSpacing::Always),
        area,
        &mut app.families,
    );
}

fn clamp_selection(state: &mut ratatui::widgets::TableState, n: usize) {
    let sel = state.selected().unwrap_or(0).min(n.saturating_sub(1));
    state.select(Some(sel));
}

fn syncs_table(frame: &mut Frame, area: Rect, app: &mut App, model: &Model, compact: bool) {
    if area.height == 0 {
        return;
    }
    let needle = app.filter().to_lowercase();
    let rows_src: Vec<_> = model.syncs.iter().filter(|s| s.matches(&needle)).collect();
    let shown = if rows_src.len() < model.syncs.len() {
        format!(" ({} of {} lines shown)", rows_src.len(), model.syncs.len())
    } else {
        String::new()
    };
    let block = section(if model.syncs.is_empty() {
        " Host syncs ".to_string()
    } else {
        format!(" Host syncs: {}{shown} ", model.sync_summary)
    });
    if rows_src.is_empty() {
        let msg = if model.syncs.is_empty() {
            format!(" {}", model.sync_summary)
        } else {
            " no sync line matches the filter".to_string()
        };
        frame.render_widget(Paragraph::new(Span::styled(msg, DIM)).block(block), area);
        return;
    }
    let header = Row::new(if compact {
        vec!["line", "count", "/step", "stall ms", "read"]
    } else {
        vec![
            "line", "count", "/step", "stall ms", "ms/step", "bytes", "read",
        ]
    })
    .style(DIM);
    // Missing numbers and decimals as the report's table has them.
    let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |v| format!("{v:.prec$}"));
    let line_w = rows_src
        .iter()
        .map(|s| s.line.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(4, 48) as u16;
    // The numbers and a few characters of what was read keep their room; the line gives way.
    let others: u16 = if compact {
        5 + 5 + 8 + 6 + 5
    } else {
        5 + 5 + 8 + 8 + 9 + 6 + 7
    };
    let line_w = line_w.min(area.width.saturating_sub(others + 1)).max(4);
    let rows: Vec<Row<'_>> = rows_src
        .iter()
        .map(|s| {
            // A cut line keeps its number: the function goes first, then the path's start.
            let text = if s.line.chars().count() <= line_w as usize {
                s.line.clone()
            } else {
                fmt::truncate_left(&s.place, line_w as usize)
            };
            let line = if s.user {
                Span::raw(text)
            } else {
                Span::styled(text, DIM)
            };
            let mut cells = vec![
                Cell::from(line),
                Cell::from(s.count.to_string()),
                Cell::from(opt(s.per_step, 2)),
                Cell::from(ms(s.stall_ms)),
            ];
            if !compact {
                cells.push(Cell::from(opt(s.stall_ms_per_step, 3)));
                cells.push(Cell::from(bytes(s.bytes as i64)));
            }
            cells.push(Cell::from(s.what.join(", ")));
            Row::new(cells)
        })
        .collect();
    let mut widths = vec![
        Constraint::Length(line_w),
        Constraint::Length(5),
        Constraint::Length(5),
        Constraint::Length(8),
    ];
    if !compact {
        widths.push(Constraint::Length(8));
        widths.push(Constraint::Length(9));
    }
    widths.push(Constraint::Fill(1));
    clamp_selection(&mut app.syncs, rows_src.len());
    let mut table = Table::new(rows, widths)
        .header(header)
        .block(block)
        .highlight_spacing(HighlightSpacing::Always)
        .highlight_symbol(" ");
    if app.tab() == Tab::Syncs {
        table = table.row_highlight_style(SELECTED).highlight_symbol("▶");
    }
    frame.render_stateful_widget(table, area, &mut app.syncs);
}

/// One line per device: a sparkline and the numbers.
fn memory_lines(frame: &mut Frame, area: Rect, model: &Model) {
    if area.height == 0 {
        return;
    }
    let reported = model.memory.iter().any(|d| d.reported);
    let long = " HBM: not reported by this plugin · live buffers (counted by tpuscope) ";
    let title = if model.memory.is_empty() || reported {
        " HBM "
    } else if area.width as usize >= long.chars().count() + 4 {
        long
    } else {
        " HBM not reported · live buffers (tpuscope's count) "
    };
    let block = section(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if model.memory.is_empty() {
        let msg = if model.state == RunState::Live {
            " no memory samples yet"
        } else {
            " no memory samples in this trace"
        };
        frame.render_widget(Paragraph::new(Span::styled(msg, DIM)), inner);
        return;
    }
    for (i, d) in model.memory.iter().enumerate() {
        let y = inner.y + i as u16;
        if y >= inner.bottom() {
            break;
        }
        let row = Rect::new(inner.x, y, inner.width, 1);
        device_line(frame, row, d);
    }
}

fn device_line(frame: &mut Frame, row: Rect, d: &DeviceMem) {
    let label = format!(" dev {:<2} ", d.device);
    let spark_w = match row.width {
        70.. => 24,
        50.. => 12,
        _ => 6,
    };
    let [l, spark, text] = Layout::horizontal([
        Constraint::Length(label.chars().count() as u16),
        Constraint::Length(spark_w),
        Constraint::Fill(1),
    ])
    .areas(row);
    frame.render_widget(Span::styled(label, BOLD), l);
    frame.render_widget(sparkline(d, spark.width), spark);
    frame.render_widget(Paragraph::new(Line::from(device_text(d))), text);
}

fn device_text(d: &DeviceMem) -> Vec<Span<'static>> {
    let mut s = vec![Span::raw(format!(" {} in use", bytes(d.last_bytes)))];
    match (d.limit_bytes, d.fraction) {
        (Some(l), Some(f)) => {
            let style = if d.near_limit { BAD } else { Style::new() };
            s.push(Span::styled(
                format!(" of {} ({})", bytes(l), percent(f)),
                style,
            ));
            s.push(Span::styled(
                format!(
                    " · peak {}{}",
                    bytes(d.peak_bytes),
                    d.peak_fraction
                        .map(|p| format!(" ({})", percent(p)))
                        .unwrap_or_default()
                ),
                DIM,
            ));
        }
        _ => {
            s.push(Span::styled(
                format!(" · peak {}", bytes(d.peak_bytes)),
                DIM,
            ));
            if let Some(n) = d.live_buffers {
                let n = plural(u64::try_from(n).unwrap_or(0), "live buffer", "live buffers");
                s.push(Span::styled(format!(" · {n}"), DIM));
            }
        }
    }
    s
}

/// The device's samples across `width` columns: the newest ones, each held over several
/// columns when there are fewer samples than columns. Scaled to the limit when there is one.
fn sparkline(d: &DeviceMem, width: u16) -> Sparkline<'static> {
    let w = width as usize;
    let data: Vec<u64> = if d.series.is_empty() || w == 0 {
        Vec::new()
    } else if d.series.len() >= w {
        d.series[d.series.len() - w..].to_vec()
    } else {
        let n = d.series.len();
        (0..w).map(|x| d.series[x * n / w]).collect()
    };
    let mut sl = Sparkline::default()
        .data(data)
        .style(Style::new().fg(ACCENT));
    if let Some(limit) = d.limit_bytes {
        sl = sl.max(limit.max(1) as u64);
    }
    sl
}

fn event_style(k: EventKind) -> Style {
    match k {
        EventKind::Compile => Style::new().fg(Color::Magenta),
        EventKind::Sync => Style::new().fg(Color::Yellow),
        EventKind::Error => Style::new().fg(Color::Red),
        EventKind::Note => Style::new().fg(Color::Blue),
        EventKind::Step => Style::new().fg(Color::Green),
        EventKind::Cache => Style::new().fg(Color::Cyan),
        EventKind::Execute | EventKind::Transfer | EventKind::Memory | EventKind::Other => {
            Style::new()
        }
    }
}

fn event_line(e: &EventLine, w: usize) -> Line<'static> {
    let t = format!("{:>9.3}s ", e.t_ms / 1000.0);
    let rep = if e.repeat > 1 {
        format!(" ×{}", e.repeat)
    } else {
        String::new()
    };
    let room = w.saturating_sub(t.chars().count() + rep.chars().count());
    Line::from(vec![
        Span::styled(t, DIM),
        Span::styled(truncate(&e.text, room), event_style(e.kind)),
        Span::styled(rep, BOLD),
    ])
}

fn events_list(frame: &mut Frame, area: Rect, app: &mut App, model: &Model, follow: bool) {
    if area.height == 0 {
        return;
    }
    let needle = app.filter().to_lowercase();
    let lines: Vec<&EventLine> = model.events.iter().filter(|e| e.matches(&needle)).collect();
    let title = if follow {
        " Recent events ".to_string()
    } else {
        format!(" Recent events ({} lines) ", lines.len())
    };
    let block = section(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let h = inner.height as usize;
    let back = if follow {
        0
    } else {
        app.events_back = app.events_back.min(lines.len().saturating_sub(h));
        app.events_back
    };
    let end = lines.len().saturating_sub(back);
    let start = end.saturating_sub(h);
    let text: Vec<Line<'_>> = lines[start..end]
        .iter()
        .map(|e| event_line(e, inner.width as usize))
        .collect();
    if text.is_empty() {
        frame.render_widget(Paragraph::new(Span::styled(" no events yet", DIM)), inner);
        return;
    }
    frame.render_widget(Paragraph::new(text), inner);
}

fn draw_recompiles(frame: &mut Frame, area: Rect, app: &mut App, model: &Model) {
    if area.height == 0 {
        return;
    }
    let n = app.visible_families(model).len() as u16;
    // The table as tall as its rows (keeping room for the preview), the selected family below.
    let preview_min = if area.height >= 14 { 6 } else { 0 };
    let table_h = (n.max(1) + 2).min(area.height.saturating_sub(preview_min));
    let [table, preview] =
        Layout::vertical([Constraint::Length(table_h), Constraint::Min(0)]).areas(area);
    families_table(frame, table, app, model, area.width < 100);
    if preview.height < 2 {
        return;
    }
    let Some(f) = app.selected_family(model) else {
        return;
    };
    let w = preview.width.saturating_sub(1) as usize;
    let mut lines = fix_lines(app, model, w);
    lines.push(Line::styled(" Members:", BOLD));
    for (i, m) in f.members.iter().enumerate() {
        let text = format!(
            "   #{:<2} {:>6.0} ms  {:<17} {}",
            i + 1,
            m.t_ms,
            m.cause,
            m.summary
        );
        lines.push(Line::raw(truncate(&text, w)));
    }
    frame.render_widget(
        Paragraph::new(lines).block(section(format!(" {} — Enter for detail ", f.graph))),
        preview,
    );
}

/// `label` then `text` wrapped to `w`, continuation lines under the text.
fn push_para(lines: &mut Vec<Line<'static>>, label: &str, text: &str, w: usize, style: Style) {
    if text.is_empty() {
        return;
    }
    let pad = label.chars().count() + 1;
    for (i, l) in wrap(text, w.saturating_sub(pad).max(10), LongWord::Cut)
        .into_iter()
        .enumerate()
    {
        let head = if i == 0 {
            Span::styled(format!(" {label}"), style.add_modifier(Modifier::BOLD))
        } else {
            Span::raw(" ".repeat(pad))
        };
        lines.push(Line::from(vec![head, Span::raw(l)]));
    }
}

fn draw_syncs(frame: &mut Frame, area: Rect, app: &mut App, model: &Model) {
    if area.height == 0 {
        return;
    }
    let needle = app.filter().to_lowercase();
    let visible: Vec<_> = model.syncs.iter().filter(|s| s.matches(&needle)).collect();
    let preview_min = if area.height >= 12 { 5 } else { 0 };
    let table_h = (visible.len().max(1) as u16 + 2).min(area.height.saturating_sub(preview_min));
    let [table, preview] =
        Layout::vertical([Constraint::Length(table_h), Constraint::Min(0)]).areas(area);
    syncs_table(frame, table, app, model, area.width < 100);
    if preview.height < 2 {
        return;
    }
    let sel = app.syncs.selected().unwrap_or(0);
    let Some(s) = visible.get(sel) else {
        return;
    };
    let w = preview.width.saturating_sub(1) as usize;
    let mut lines = Vec::new();
    let per_step = match (s.per_step, s.stall_ms_per_step) {
        (Some(p), Some(st)) => format!(", {p:.2} per step, {} ms stalled per step", ms(st)),
        _ => String::new(),
    };
    lines.push(Line::raw(format!(
        " {}× · {} ms stalled · {}{per_step}",
        s.count,
        ms(s.stall_ms),
        bytes(s.bytes as i64)
    )));
    if !s.what.is_empty() {
        lines.push(Line::raw(truncate(
            &format!(" read: {}", s.what.join(", ")),
            w,
        )));
    }
    push_para(&mut lines, "fix: ", &s.suggestion, w, GOOD);
    frame.render_widget(
        Paragraph::new(lines).block(section(format!(" {} ", s.line))),
        preview,
    );
}

fn draw_memory(frame: &mut Frame, area: Rect, model: &Model) {
    if area.height == 0 {
        return;
    }
    let n = model.memory.len() as u16;
    let compiled_need = if model.largest_compiled.is_empty() {
        0
    } else {
        model.largest_compiled.len() as u16 + 2
    };
    let avail = area.height.saturating_sub(compiled_need);
    // A panel per device (numbers, gauge, sparkline) when each gets four lines; else a line each.
    let (devs_h, panels) = if n > 0 && avail >= n * 4 {
        (avail.min(n * 10), true)
    } else {
        (model.memory.len().clamp(1, 16) as u16 + 1, false)
    };
    let [devs, compiled] =
        Layout::vertical([Constraint::Length(devs_h), Constraint::Min(0)]).areas(area);
    if panels {
        let rows = Layout::vertical(vec![Constraint::Fill(1); n as usize]).split(devs);
        for (d, r) in model.memory.iter().zip(rows.iter()) {
            device_panel(frame, *r, d);
        }
    } else {
        memory_lines(frame, devs, model);
    }
    if compiled_need > 0 && compiled.height >= 3 {
        let rows: Vec<Row<'_>> = model
            .largest_compiled
            .iter()
            .map(|(g, peak, temp)| {
                Row::new(vec![
                    Cell::from(format!(" {g}")),
                    Cell::from(bytes(*peak)),
                    Cell::from(bytes(*temp)),
                ])
            })
            .collect();
        frame.render_widget(
            Table::new(
                rows,
                [
                    Constraint::Fill(1),
                    Constraint::Length(12),
                    Constraint::Length(12),
                ],
            )
            .header(Row::new(vec![" graph", "peak", "temp"]).style(DIM))
            .block(section(" Largest compiled executables ")),
            compiled,
        );
    }
}

fn device_panel(frame: &mut Frame, area: Rect, d: &DeviceMem) {
    let title = if d.reported {
        format!(" device {} · HBM ", d.device)
    } else {
        format!(
            " device {}: HBM not reported by this plugin · live buffers (counted by tpuscope) ",
            d.device
        )
    };
    let block = section(title);
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [top, spark] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(inner);
    match d.fraction {
        Some(f) => {
            let label = device_text(d)
                .into_iter()
                .map(|s| s.content.into_owned())
                .collect::<String>();
            frame.render_widget(
                LineGauge::default()
                    .ratio(f.clamp(0.0, 1.0))
                    .label(label)
                    .filled_style(Style::new().fg(if d.near_limit { Color::Red } else { ACCENT }))
                    .unfilled_style(DIM),
                top,
            );
        }
        None => frame.render_widget(Paragraph::new(Line::from(device_text(d))), top),
    }
    frame.render_widget(sparkline(d, spark.width), spark);
}

fn draw_events(frame: &mut Frame, area: Rect, app: &mut App, model: &Model) {
    events_list(frame, area, app, model, false);
}

fn draw_output(frame: &mut Frame, area: Rect, app: &mut App, model: &Model) {
    if area.height == 0 {
        return;
    }
    let needle = app.filter().to_lowercase();
    let lines: Vec<&String> = model
        .output
        .iter()
        .filter(|l| needle.is_empty() || l.to_lowercase().contains(&needle))
        .collect();
    let block = section(format!(" Workload output ({} lines) ", lines.len()));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let h = inner.height as usize;
    app.output_back = app.output_back.min(lines.len().saturating_sub(h));
    let end = lines.len() - app.output_back;
    let start = end.saturating_sub(h);
    let text: Vec<Line<'_>> = lines[start..end]
        .iter()
        .map(|l| {
            Line::raw(format!(
                " {}",
                truncate(l, inner.width.saturating_sub(1) as usize)
            ))
        })
        .collect();
    frame.render_widget(Paragraph::new(text), inner);
}

fn draw_detail(frame: &mut Frame, area: Rect, app: &mut App, f: &FamilyView) {
    if area.height == 0 {
        return;
    }
    let w = area.width.saturating_sub(1) as usize;
    // Summary: the family, where, what changed, the fix.
    let mut summary = Vec::new();
    let mut head = vec![
        Span::styled(format!(" {}", f.graph), BOLD),
        Span::raw(format!("  {}× ", f.count)),
        Span::styled(f.cause.clone(), if f.finding { BAD } else { DIM }),
        Span::raw(format!("  {} ms compiling", ms(f.compile_ms))),
    ];
    if let Some(why) = &f.not_a_finding {
        head.push(Span::styled(format!("  not a finding ({why})"), DIM));
    }
    summary.push(Line::from(head));
    if let Some(s) = &f.source_label {
        summary.push(Line::from(vec![
            Span::raw(" at "),
            Span::styled(s.clone(), BOLD.fg(ACCENT)),
        ]));
    }
    let body = area.height;
    // On a short screen the members' own changes say what the one-line summary says.
    if body >= 24 {
        push_para(&mut summary, "changed: ", &f.details, w, Style::new());
    }
    push_para(&mut summary, "fix: ", &f.suggestion, w, GOOD);

    let n = f.members.len() as u16;
    let summary_h = (summary.len() as u16).min((body / 2).max(2));
    // The selected member's pane keeps about seven lines; the members table takes the rest.
    let members_h = (n + 2).min(body.saturating_sub(summary_h + 7).max(3));
    let [sum_area, mem_area, sel_area] = Layout::vertical([
        Constraint::Length(summary_h),
        Constraint::Length(members_h),
        Constraint::Min(0),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(summary), sum_area);

    // Members, the selected one highlighted.
    app.detail_member = app.detail_member.min(f.members.len().saturating_sub(1));
    let rows: Vec<Row<'_>> = f
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let change = match m.against {
                Some(j) if j != i => format!("vs #{j}: {}", m.summary),
                _ => m.summary.clone(),
            };
            Row::new(vec![
                Cell::from(format!("#{}", i + 1)),
                Cell::from(ms(m.t_ms)),
                Cell::from(ms(m.compile_ms)),
                Cell::from(m.cause.clone()),
                Cell::from(change),
            ])
        })
        .collect();
    let mut state = ratatui::widgets::TableState::new().with_selected(Some(app.detail_member));
    frame.render_stateful_widget(
        Table::new(
            rows,
            [
                Constraint::Length(3),
                Constraint::Length(7),
                Constraint::Length(7),
                Constraint::Length(17),
                Constraint::Fill(1),
            ],
        )
        .header(Row::new(vec!["#", "at ms", "compile", "cause", "change"]).style(DIM))
        .block(section(format!(" Members ({}) ", f.members.len())))
        .row_highlight_style(SELECTED)
        .highlight_symbol("▶")
        .highlight_spacing(HighlightSpacing::Always),
        mem_area,
        &mut state,
    );

    if let Some(m) = f.members.get(app.detail_member) {
        draw_member(frame, sel_area, app, m, w);
    }
}

/// The selected member: what changed, arguments, the Python stack.
fn draw_member(frame: &mut Frame, sel_area: Rect, app: &mut App, m: &MemberView, w: usize) {
    let mut lines: Vec<Line<'_>> = Vec::new();
    let vs = m.against.map(|j| format!(" vs #{j}")).unwrap_or_default();
    lines.push(Line::styled(format!(" What changed{vs}:"), BOLD));
    if m.against.is_none() {
        lines.push(Line::styled("   the first compile of this graph", DIM));
    }
    for c in &m.changes {
        for (i, l) in wrap(c, w.saturating_sub(5).max(10), LongWord::Cut)
            .into_iter()
            .enumerate()
        {
            let lead = if i == 0 { "   • " } else { "     " };
            lines.push(Line::from(vec![Span::raw(lead), Span::raw(l)]));
        }
    }
    // The arguments of later members are in what changed.
    if m.against.is_none() && !m.parameters.is_empty() {
        lines.push(Line::from(vec![
            Span::styled(" Arguments: ", BOLD),
            Span::raw(m.parameters.join(", ")),
        ]));
    }
    lines.push(Line::styled(" Python stack (innermost first):", BOLD));
    if m.stack.is_empty() {
        lines.push(Line::styled("   no Python stack recorded", DIM));
    }
    // The pane's height less its title: when the whole stack does not fit, runs of frontend
    // frames shrink to their innermost frame and a count, so the user's lines show.
    let room = sel_area.height.saturating_sub(1) as usize;
    let collapse = lines.len() + m.stack.len() > room;
    let mut i = 0;
    while i < m.stack.len() {
        let fr = &m.stack[i];
        if fr.user {
            lines.push(Line::from(vec![
                Span::raw("   "),
                Span::styled(fr.text.clone(), BOLD.fg(ACCENT)),
            ]));
            i += 1;
            continue;
        }
        let run = m.stack[i..].iter().take_while(|f| !f.user).count();
        if collapse && run > 1 {
            lines.push(Line::styled(
                format!("   ⋮ {run} frontend frames, innermost {}", fr.text),
                DIM,
            ));
            i += run;
        } else {
            lines.push(Line::styled(format!("   {}", fr.text), DIM));
            i += 1;
        }
    }
    let title = format!(
        " Member #{} · {} · at {} ms · {} ms compiling ",
        app.detail_member + 1,
        m.executable,
        ms(m.t_ms),
        ms(m.compile_ms)
    );
    let block = section(title);
    let inner_h = block.inner(sel_area).height;
    let max_scroll = (lines.len() as u16).saturating_sub(inner_h);
    app.detail_scroll = app.detail_scroll.min(max_scroll);
    frame.render_widget(
        Paragraph::new(Text::from(lines))
            .block(block)
            .scroll((app.detail_scroll, 0)),
        sel_area,
    );
}
