//! The report laid out for reading, without saying how it is drawn: sections of lines, wrapped
//! paragraphs, tables and numbered findings, each piece tagged with a [`Tone`] (what it means
//! to the reader: good, bad, a place in the code…), never a colour or a markup.
//!
//! Every view of a report (the terminal text, Markdown, the GUI's summary panel) lays out the
//! same [`Section`]s, so a fact is worded once, here; a view only maps tones to its styling
//! (ANSI, backticks, egui colours) and blocks to its layout. [`sections`] gives them in the
//! text report's order; each builder is also public, for a view that places sections itself.
//!
//! Pure: no I/O, no escape codes, no markup escaping (a view escapes for its own format).

mod compiles;
mod execution;
mod memory;
mod outcome;
mod overview;
mod time;

pub use compiles::{dynamo, phases, recompiles};
pub use execution::{errors, hosts, steps, syncs};
pub use memory::{cache, device_line, largest_compiled, memory, oom};
pub use outcome::{baseline, budgets, verdict};
pub use overview::{finding, findings, header, warnings};
pub use time::{device_time_unknown, split_line, time};

use crate::report::Report;

/// What a piece of text means to the reader; each view styles it its own way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tone {
    /// Ordinary text.
    Plain,
    /// Stands out: a title, a heading.
    Strong,
    /// Secondary: table headers, notes, what can be skipped.
    Dim,
    /// Healthy: `fix:`, `ok`, no regressions.
    Good,
    /// Needs a look but is not a failure: partial traces, warnings, unknowns.
    Warn,
    /// A problem: a finding's kind, a failed compile, an exceeded budget, a regression.
    Bad,
    /// A clean verdict (no findings, a passing CI check): stronger than [`Tone::Good`].
    Pass,
    /// A name to spot at a glance (the frontend of a trace).
    Accent,
    /// A place or a name from the program: `file.py:33`, a graph's name (Markdown: a code span).
    Code,
}

/// A piece of text with one tone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    pub text: String,
    pub tone: Tone,
}

impl Span {
    pub fn new(text: impl Into<String>, tone: Tone) -> Span {
        Span {
            text: text.into(),
            tone,
        }
    }

    pub fn plain(text: impl Into<String>) -> Span {
        Span::new(text, Tone::Plain)
    }
}

/// A line of text: spans side by side (no line break inside).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Line(pub Vec<Span>);

impl Line {
    /// A line of one span.
    pub fn new(text: impl Into<String>, tone: Tone) -> Line {
        Line(vec![Span::new(text, tone)])
    }

    pub fn plain(text: impl Into<String>) -> Line {
        Line::new(text, Tone::Plain)
    }

    /// This line with `text` in `tone` appended (empty text is left out).
    pub fn and(mut self, text: impl Into<String>, tone: Tone) -> Line {
        let text = text.into();
        if !text.is_empty() {
            self.0.push(Span::new(text, tone));
        }
        self
    }

    /// This line with plain `text` appended.
    pub fn then(self, text: impl Into<String>) -> Line {
        self.and(text, Tone::Plain)
    }

    /// The words without tones.
    pub fn text(&self) -> String {
        self.0.iter().map(|s| s.text.as_str()).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|s| s.text.is_empty())
    }
}

/// How a table column is aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    /// Numbers.
    Right,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    /// May be empty (a column of row numbers).
    pub title: String,
    pub align: Align,
}

/// What a table row is about, for a view that can open it (the GUI's buttons).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `Report::recompiles[i]`.
    Family(usize),
    /// `Report::syncs[i]`.
    SyncLine(usize),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    /// One per column.
    pub cells: Vec<Line>,
    pub target: Option<Target>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    pub columns: Vec<Column>,
    pub rows: Vec<Row>,
}

impl Table {
    /// A table of these columns (title, right-aligned?) and no rows yet.
    pub fn new(columns: &[(&str, Align)]) -> Table {
        Table {
            columns: columns
                .iter()
                .map(|(t, a)| Column {
                    title: (*t).to_string(),
                    align: *a,
                })
                .collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<Line>, target: Option<Target>) {
        self.rows.push(Row { cells, target });
    }
}

/// One numbered entry of a list (a finding): a heading line, then paragraphs, each with an
/// optional label (`fix:`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    /// From 1.
    pub number: usize,
    pub head: Line,
    pub paras: Vec<(Option<Span>, Line)>,
}

impl Item {
    /// Plain lines without layout: the heading, then each paragraph after its label (for
    /// plain-text contexts such as a JUnit test's output).
    pub fn plain_lines(&self) -> Vec<String> {
        let mut out = vec![self.head.text()];
        for (label, text) in &self.paras {
            match label {
                Some(l) => out.push(format!("{} {}", l.text, text.text())),
                None => out.push(text.text()),
            }
        }
        out
    }
}

/// A piece of a section. `depth` is the nesting level under the section (1: its direct
/// content, 2: content of an entry of it…); a terminal indents two columns per level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Block {
    /// One line, never wrapped.
    Line {
        depth: u8,
        line: Line,
    },
    /// Prose to wrap at the view's width, after an optional label (`fix:`, `✗`); the wrapped
    /// lines align under the text, not the label.
    Para {
        depth: u8,
        label: Option<Span>,
        text: Line,
    },
    /// A label followed by lines that align under the first one's text (never wrapped).
    Labeled {
        depth: u8,
        label: Span,
        lines: Vec<Line>,
    },
    Table {
        depth: u8,
        table: Table,
    },
    /// A numbered entry (a finding).
    Item(Item),
}

/// Which section this is, for a view that places or skips sections itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SectionId {
    /// The report's title, its traces and the headline counts.
    Header,
    Warnings,
    Findings,
    Phases,
    Recompiles,
    Dynamo,
    Syncs,
    Steps,
    /// Where the time goes: compiling, blocked, devices busy, host-bound.
    Time,
    Hosts,
    Cache,
    Memory,
    Oom,
    Errors,
    Budgets,
    Baseline,
    /// The CI verdict of budgets and baseline: its title is the whole verdict.
    Verdict,
}

/// A part of the report: a title, an optional one-line summary after it, then blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub id: SectionId,
    /// `Host syncs`, `Findings (3)`; a one-line section (the verdict, `No findings.`) is only
    /// a title. Its tone says how it reads (Strong for most).
    pub title: Span,
    /// Said right after the title (`Host syncs: 12 syncs from 2 lines…`); empty when none.
    pub summary: Line,
    pub blocks: Vec<Block>,
}

impl Section {
    fn new(id: SectionId, title: impl Into<String>, summary: Line) -> Section {
        Section {
            id,
            title: Span::new(title, Tone::Strong),
            summary,
            blocks: Vec::new(),
        }
    }

    fn line(&mut self, depth: u8, line: Line) {
        self.blocks.push(Block::Line { depth, line });
    }

    fn para(&mut self, depth: u8, label: Option<Span>, text: Line) {
        self.blocks.push(Block::Para { depth, label, text });
    }

    fn table(&mut self, depth: u8, table: Table) {
        self.blocks.push(Block::Table { depth, table });
    }
}

/// Every section the report has, in the text report's order (the optional ones only when
/// they have something to say).
pub fn sections(r: &Report) -> Vec<Section> {
    let mut out = vec![header(r)];
    out.extend(warnings(r));
    out.push(time(r));
    out.push(findings(r));
    out.push(phases(r));
    out.push(recompiles(r));
    out.extend(dynamo(r));
    out.push(syncs(r));
    out.push(steps(r));
    out.extend(hosts(r));
    out.push(cache(r));
    out.push(memory(r));
    out.extend(oom(r));
    out.push(errors(r));
    out.extend(budgets(r));
    out.extend(baseline(r));
    out.extend(verdict(r));
    out
}

/// ` (run 2)` when the report covers several runs, else nothing.
fn run_suffix(r: &Report, run: usize) -> String {
    if r.traces.len() > 1 {
        format!(" (run {run})")
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::report::{Budget, BudgetKey, Finding, FindingKind, Input, Options, build};
    use tpuscope_core::TraceWriter;
    use tpuscope_core::event::{End, Manifest, Record};

    /// The report of a process that ran one second and did nothing.
    fn idle(budgets: Vec<Budget>) -> Report {
        let m = Manifest {
            pid: 7,
            host: "vm".into(),
            start_mono_ns: 1_000_000_000,
            ..Manifest::default()
        };
        let mut w = TraceWriter::new(Vec::new(), &m).unwrap();
        w.write(&Record::End(End {
            t_ns: 2_000_000_000,
            ..Default::default()
        }))
        .unwrap();
        let trace = tpuscope_core::read_trace(&w.into_inner()).unwrap();
        let options = Options {
            budgets,
            ..Options::default()
        };
        build(&[Input::new("idle.tps", &trace)], &options)
    }

    #[test]
    fn sections_come_in_the_text_reports_order_and_optional_ones_only_when_asked() {
        let r = idle(Vec::new());
        let ids: Vec<SectionId> = sections(&r).iter().map(|s| s.id).collect();
        use SectionId::*;
        assert_eq!(
            ids,
            [
                Header, Time, Findings, Phases, Recompiles, Syncs, Steps, Cache, Memory, Errors
            ]
        );
        let f = findings(&r);
        assert_eq!(f.title, Span::new("No findings.", Tone::Pass));
        assert!(f.summary.is_empty() && f.blocks.is_empty());
        assert_eq!(syncs(&r).summary.text(), "no host syncs in the loop");
        // A process that launched nothing: its devices were idle, all of it host-bound.
        assert_eq!(
            time(&r).summary.text(),
            "devices busy 0.0% · host-bound 100%"
        );

        let r = idle(vec![Budget {
            key: BudgetKey::Compiles,
            limit: 0.0,
        }]);
        let ids: Vec<SectionId> = sections(&r).iter().map(|s| s.id).collect();
        assert_eq!(ids.last(), Some(&Verdict));
        assert!(ids.contains(&Budgets));
        assert_eq!(verdict(&r).unwrap().title, Span::new("passed", Tone::Pass));
    }

    #[test]
    fn a_finding_reads_kind_at_place_then_title_then_fix() {
        let f = Finding {
            kind: FindingKind::Sync,
            title: "a host sync every step".into(),
            source: Some(crate::SourceLoc {
                file: "train.py".into(),
                line: 33,
                function: "step".into(),
            }),
            suggestion: "keep it on the device".into(),
        };
        let item = finding(2, &f);
        assert_eq!(
            item.head,
            Line::new("sync", Tone::Bad)
                .then(" at ")
                .and("train.py:33", Tone::Code)
        );
        assert_eq!(
            item.plain_lines(),
            [
                "sync at train.py:33",
                "a host sync every step",
                "fix: keep it on the device"
            ]
        );
    }
}
