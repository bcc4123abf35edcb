//! UI state and keys. Time is passed in (milliseconds of any monotonic clock), never read here,
//! so the behaviour is the same in tests as on a terminal.

use std::collections::HashMap;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::widgets::TableState;

use crate::model::{FamilyView, Model};

/// How long a family row stays highlighted after its count grew.
pub const HIGHLIGHT_MS: u64 = 3_000;

/// The views, in tab order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tab {
    Overview,
    Recompiles,
    Syncs,
    Memory,
    Events,
    /// The workload's output (`tpuscope run`): only when there is some.
    Output,
}

impl Tab {
    pub const ALL: [Tab; 6] = [
        Tab::Overview,
        Tab::Recompiles,
        Tab::Syncs,
        Tab::Memory,
        Tab::Events,
        Tab::Output,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Tab::Overview => "Overview",
            Tab::Recompiles => "Recompiles",
            Tab::Syncs => "Syncs",
            Tab::Memory => "Memory",
            Tab::Events => "Events",
            Tab::Output => "Output",
        }
    }
}

/// What the driver should do after a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing beyond a redraw.
    None,
    Quit,
}

/// The state of the screen between frames.
#[derive(Debug, Default)]
pub struct App {
    tab: Option<Tab>,
    /// The model on screen (frozen while paused).
    shown: Option<Model>,
    /// The newest model, held back while paused.
    pending: Option<Model>,
    paused: bool,
    now_ms: u64,
    /// Family key → count in the previous model shown.
    counts: HashMap<String, u64>,
    /// Family key → when its count last grew.
    grown: HashMap<String, u64>,
    shown_once: bool,
    pub(crate) families: TableState,
    pub(crate) syncs: TableState,
    /// Key of the family whose detail is open.
    detail: Option<String>,
    pub(crate) detail_member: usize,
    pub(crate) detail_scroll: u16,
    filter: String,
    editing_filter: bool,
    /// Lines scrolled up from the newest in the events / output views (0: follow the end).
    pub(crate) events_back: usize,
    pub(crate) output_back: usize,
}

impl App {
    pub fn new() -> App {
        App::default()
    }

    /// A new model from the driver at `now_ms`. While paused it is kept aside and shown on
    /// resume.
    pub fn set_model(&mut self, model: Model, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        if self.paused {
            self.pending = Some(model);
        } else {
            self.show(model);
        }
    }

    fn show(&mut self, model: Model) {
        let mut counts = HashMap::with_capacity(model.families.len());
        for f in &model.families {
            let before = self.counts.get(&f.key).copied();
            // The first model holds the history of a late attach: nothing in it is news.
            if self.shown_once && before.is_none_or(|b| f.count > b) {
                self.grown.insert(f.key.clone(), self.now_ms);
            }
            counts.insert(f.key.clone(), f.count);
        }
        self.counts = counts;
        self.shown_once = true;
        self.shown = Some(model);
    }

    /// The model on screen.
    pub fn model(&self) -> Option<&Model> {
        self.shown.as_ref()
    }

    pub(crate) fn take_model(&mut self) -> Option<Model> {
        self.shown.take()
    }

    pub(crate) fn put_model(&mut self, m: Option<Model>) {
        self.shown = m;
    }

    /// Advances the clock (expires highlights).
    pub fn tick(&mut self, now_ms: u64) {
        self.now_ms = self.now_ms.max(now_ms);
        let now = self.now_ms;
        self.grown
            .retain(|_, t| now.saturating_sub(*t) < HIGHLIGHT_MS);
    }

    /// Whether the family of this key grew less than [`HIGHLIGHT_MS`] ago.
    pub fn is_highlighted(&self, key: &str) -> bool {
        self.grown
            .get(key)
            .is_some_and(|t| self.now_ms.saturating_sub(*t) < HIGHLIGHT_MS)
    }

    pub fn paused(&self) -> bool {
        self.paused
    }

    pub fn filter(&self) -> &str {
        &self.filter
    }

    pub fn editing_filter(&self) -> bool {
        self.editing_filter
    }

    /// The tab shown.
    pub fn tab(&self) -> Tab {
        self.tab.unwrap_or(Tab::Overview)
    }

    /// The tabs there are: Output only when the workload printed something.
    pub fn tabs(&self) -> Vec<Tab> {
        let output = self.shown.as_ref().is_some_and(|m| !m.output.is_empty());
        Tab::ALL
            .into_iter()
            .filter(|t| *t != Tab::Output || output)
            .collect()
    }

    pub fn set_tab(&mut self, tab: Tab) {
        self.tab = Some(tab);
        self.detail = None;
    }

    /// Key of the family whose detail is open.
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    /// The families that pass the filter, in order.
    pub fn visible_families<'m>(&self, model: &'m Model) -> Vec<&'m FamilyView> {
        let needle = self.filter.to_lowercase();
        model
            .families
            .iter()
            .filter(|f| f.matches(&needle))
            .collect()
    }

    /// The family the cursor is on.
    pub fn selected_family<'m>(&self, model: &'m Model) -> Option<&'m FamilyView> {
        let v = self.visible_families(model);
        let i = self
            .families
            .selected()
            .unwrap_or(0)
            .min(v.len().checked_sub(1)?);
        v.get(i).copied()
    }

    /// Handles one key at `now_ms`.
    pub fn handle_key(&mut self, key: KeyEvent, now_ms: u64) -> Action {
        self.tick(now_ms);
        if key.kind == KeyEventKind::Release {
            return Action::None;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(key.code, KeyCode::Char('c')) {
            return Action::Quit;
        }
        if self.editing_filter {
            self.filter_key(key.code);
            return Action::None;
        }
        match key.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Char('p') => self.toggle_pause(),
            KeyCode::Char('/') => {
                self.editing_filter = true;
                self.detail = None;
            }
            KeyCode::Tab => self.step_tab(1),
            KeyCode::BackTab => self.step_tab(-1),
            KeyCode::Right | KeyCode::Char('l') if self.detail.is_none() => self.step_tab(1),
            KeyCode::Left | KeyCode::Char('h') if self.detail.is_none() => self.step_tab(-1),
            KeyCode::Char(c @ '1'..='6') => {
                let i = c as usize - '1' as usize;
                if let Some(&t) = self.tabs().get(i) {
                    self.set_tab(t);
                }
            }
            KeyCode::Esc | KeyCode::Backspace => {
                if self.detail.is_some() {
                    self.detail = None;
                } else if !self.filter.is_empty() {
                    self.set_filter(String::new());
                }
            }
            KeyCode::Enter => self.open_detail(),
            KeyCode::Up | KeyCode::Char('k') => self.move_by(-1),
            KeyCode::Down | KeyCode::Char('j') => self.move_by(1),
            KeyCode::PageUp => self.page(-1),
            KeyCode::PageDown => self.page(1),
            KeyCode::Home | KeyCode::Char('g') => self.move_by(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => self.move_by(isize::MAX / 2),
            _ => {}
        }
        Action::None
    }

    fn filter_key(&mut self, code: KeyCode) {
        match code {
            KeyCode::Enter => self.editing_filter = false,
            KeyCode::Esc => {
                self.editing_filter = false;
                self.set_filter(String::new());
            }
            KeyCode::Backspace => {
                let mut f = self.filter.clone();
                f.pop();
                self.set_filter(f);
            }
            KeyCode::Char(c) => {
                let mut f = self.filter.clone();
                f.push(c);
                self.set_filter(f);
            }
            _ => {}
        }
    }

    fn set_filter(&mut self, f: String) {
        if f != self.filter {
            self.filter = f;
            // The lists changed under the cursor: start at the top.
            self.families.select(Some(0));
            self.syncs.select(Some(0));
            *self.families.offset_mut() = 0;
            *self.syncs.offset_mut() = 0;
            self.events_back = 0;
            self.output_back = 0;
        }
    }

    fn toggle_pause(&mut self) {
        self.paused = !self.paused;
        if !self.paused
            && let Some(m) = self.pending.take()
        {
            self.show(m);
        }
    }

    fn step_tab(&mut self, by: isize) {
        let tabs = self.tabs();
        let cur = tabs.iter().position(|t| *t == self.tab()).unwrap_or(0) as isize;
        let n = tabs.len() as isize;
        if let Some(&t) = tabs.get((cur + by).rem_euclid(n.max(1)) as usize) {
            self.set_tab(t);
        }
    }

    fn open_detail(&mut self) {
        if !matches!(self.tab(), Tab::Overview | Tab::Recompiles) {
            return;
        }
        let Some(model) = self.shown.as_ref() else {
            return;
        };
        if let Some(f) = self.selected_family(model) {
            self.detail = Some(f.key.clone());
            self.detail_member = f.members.len().saturating_sub(1);
            self.detail_scroll = 0;
        }
    }

    fn page(&mut self, dir: isize) {
        if self.detail.is_some() {
            self.detail_scroll = if dir < 0 {
                self.detail_scroll.saturating_sub(10)
            } else {
                self.detail_scroll.saturating_add(10)
            };
            return;
        }
        self.move_by(dir * 10);
    }

    fn move_by(&mut self, by: isize) {
        let Some(model) = self.shown.as_ref() else {
            return;
        };
        if let Some(key) = &self.detail {
            let n = model
                .families
                .iter()
                .find(|f| &f.key == key)
                .map_or(0, |f| f.members.len());
            self.detail_member = clamp_add(self.detail_member, by, n);
            self.detail_scroll = 0;
            return;
        }
        let needle = self.filter.to_lowercase();
        match self.tab() {
            Tab::Overview | Tab::Recompiles => {
                let n = model.families.iter().filter(|f| f.matches(&needle)).count();
                let cur = self.families.selected().unwrap_or(0);
                self.families.select(Some(clamp_add(cur, by, n)));
            }
            Tab::Syncs => {
                let n = model.syncs.iter().filter(|s| s.matches(&needle)).count();
                let cur = self.syncs.selected().unwrap_or(0);
                self.syncs.select(Some(clamp_add(cur, by, n)));
            }
            // Up scrolls back in time: the offset counts lines up from the newest.
            Tab::Events => {
                let n = model.events.iter().filter(|e| e.matches(&needle)).count();
                self.events_back = clamp_add(self.events_back, -by, n);
            }
            Tab::Output => {
                let n = model
                    .output
                    .iter()
                    .filter(|l| needle.is_empty() || l.to_lowercase().contains(&needle))
                    .count();
                self.output_back = clamp_add(self.output_back, -by, n);
            }
            Tab::Memory => {}
        }
    }
}

/// `cur + by` kept within `0..n` (0 when `n` is 0).
fn clamp_add(cur: usize, by: isize, n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    (cur as isize).saturating_add(by).clamp(0, n as isize - 1) as usize
}
