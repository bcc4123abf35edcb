//! What a CI step decides on: the budgets, the comparison with a baseline, and the verdict.

use super::{Align, Line, Section, SectionId, Span, Table, Tone};
use crate::report::{BudgetStatus, Report, failed};
use crate::units::{num, plural};

/// How a budget's status reads.
fn status_tone(s: BudgetStatus) -> Tone {
    match s {
        BudgetStatus::Ok => Tone::Good,
        BudgetStatus::Exceeded => Tone::Bad,
        BudgetStatus::Unknown => Tone::Warn,
    }
}

/// One row per `--budget`: its limit, the actual value and the status. None without budgets.
pub fn budgets(r: &Report) -> Option<Section> {
    if r.budgets.is_empty() {
        return None;
    }
    let mut s = Section::new(SectionId::Budgets, "Budgets", Line::default());
    let mut t = Table::new(&[
        ("budget", Align::Left),
        ("limit", Align::Right),
        ("actual", Align::Right),
        ("status", Align::Left),
    ]);
    for b in &r.budgets {
        t.row(
            vec![
                Line::plain(b.name.as_str()),
                Line::plain(num(b.limit)),
                Line::plain(b.actual.map_or_else(|| "?".to_string(), num)),
                Line::new(b.status.label(), status_tone(b.status)),
            ],
            None,
        );
    }
    s.table(1, t);
    Some(s)
}

/// The regressions and improvements against `--baseline`. None without a baseline.
pub fn baseline(r: &Report) -> Option<Section> {
    let b = r.baseline.as_ref()?;
    let head = if b.regressions.is_empty() {
        Line::new("no regressions", Tone::Good)
    } else {
        Line::new(
            plural(b.regressions.len() as u64, "regression", "regressions"),
            Tone::Bad,
        )
    };
    let mut s = Section::new(SectionId::Baseline, "Baseline", head);
    for x in &b.regressions {
        s.para(1, Some(Span::new("✗", Tone::Bad)), Line::plain(x.as_str()));
    }
    for x in &b.improvements {
        s.para(1, Some(Span::new("✓", Tone::Good)), Line::plain(x.as_str()));
    }
    Some(s)
}

/// The verdict of budgets and baseline (`passed`, or `FAILED: …` and why), last, where a CI
/// log's reader looks. None when nothing was asked to gate.
pub fn verdict(r: &Report) -> Option<Section> {
    if r.budgets.is_empty() && r.baseline.is_none() {
        return None;
    }
    let mut s = Section::new(SectionId::Verdict, r.failure_summary(), Line::default());
    s.title.tone = if failed(r) { Tone::Bad } else { Tone::Pass };
    Some(s)
}
