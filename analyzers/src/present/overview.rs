//! The top of the report: what was traced and the headline counts, the warnings, the findings.

use super::{Block, Item, Line, Section, SectionId, Span, Tone};
use crate::frontend::Frontend;
use crate::report::{Finding, Report, TraceCompleteness};
use crate::source::short_path;
use crate::units::{ms, plural};

/// The plugin's file with its folder: enough to tell libtpu from the CPU plugin.
fn plugin_name(path: &str) -> &str {
    if path.is_empty() {
        "?"
    } else {
        short_path(path)
    }
}

/// The title, one entry per trace (frontend, process, completeness, plugin, command) and the
/// headline: compiles · recompiles · host syncs · steps.
pub fn header(r: &Report) -> Section {
    let many = r.traces.len() > 1;
    let title = match r.traces.as_slice() {
        [one] => format!("tpuscope report: {}", one.path),
        all => format!("tpuscope report: {} traces", all.len()),
    };
    let mut s = Section::new(SectionId::Header, title, Line::default());
    for t in &r.traces {
        let depth = if many {
            s.line(1, Line::plain(format!("run {}: {}", t.run, t.path)));
            2
        } else {
            1
        };
        let frontend = match &t.frontend {
            Frontend::Unknown => "unknown frontend",
            f => f.name(),
        };
        let process = if t.job_id.is_empty() {
            String::new()
        } else {
            format!(", job {} process {}", t.job_id, t.process_index)
        };
        let completeness = match t.completeness {
            TraceCompleteness::Complete => Tone::Plain,
            _ => Tone::Warn,
        };
        let dropped = if t.dropped_events > 0 {
            format!(", {} dropped", t.dropped_events)
        } else {
            String::new()
        };
        s.line(
            depth,
            Line::new(frontend, Tone::Accent)
                .then(format!(
                    " · pid {} on {}{process} · ",
                    t.pid,
                    if t.host.is_empty() { "?" } else { &t.host },
                ))
                .and(t.completeness_line(), completeness)
                .then(format!(" ({} events", t.events))
                .and(dropped, Tone::Warn)
                .then(")"),
        );
        s.line(
            depth,
            Line::plain(format!(
                "plugin {} (PJRT {})",
                plugin_name(&t.plugin),
                t.pjrt_api
            )),
        );
        if !t.command.is_empty() {
            s.line(depth, Line::new(format!("$ {}", t.command), Tone::Dim));
        }
    }
    if many {
        s.line(1, Line::plain(format!("assumed: {}", r.runs.note)));
    }
    s.line(1, headline(r));
    s
}

/// `12 compiles (3.4 s, 1 failed) of 5 graphs + 2 eager ops · 3 recompiles · 40 host syncs ·
/// 10 steps`.
fn headline(r: &Report) -> Line {
    let c = &r.compiles;
    let warmup = if c.warmup_recompiles > 0 {
        format!(" (+{} outside the steady state)", c.warmup_recompiles)
    } else {
        String::new()
    };
    let failed = if c.failed > 0 {
        format!(", {} failed", c.failed)
    } else {
        String::new()
    };
    let ops = if c.op_compiles > 0 {
        format!(" + {}", plural(c.op_compiles, "eager op", "eager ops"))
    } else {
        String::new()
    };
    Line::plain(format!(
        "{} ({} ms",
        plural(c.total, "compile", "compiles"),
        ms(c.compile_ms)
    ))
    .and(failed, Tone::Bad)
    .then(format!(
        ") of {}{ops} · {}{warmup} · {} · {}",
        plural(c.families, "graph", "graphs"),
        plural(c.recompiles, "recompile", "recompiles"),
        plural(r.sync_total(), "host sync", "host syncs"),
        plural(r.steps.count, "step", "steps"),
    ))
}

/// What the reader must know before trusting the rest (partial traces, dropped events…).
pub fn warnings(r: &Report) -> Option<Section> {
    if r.warnings.is_empty() {
        return None;
    }
    let mut s = Section::new(SectionId::Warnings, "Warnings", Line::default());
    s.title.tone = Tone::Warn;
    for w in &r.warnings {
        s.para(1, Some(Span::new("!", Tone::Warn)), Line::plain(w.as_str()));
    }
    Some(s)
}

/// The findings, most important first: `kind at file.py:33`, what happened, `fix:`. Without
/// any, the section is its title: the report's no-findings verdict.
pub fn findings(r: &Report) -> Section {
    if r.findings.is_empty() {
        let mut s = Section::new(SectionId::Findings, r.no_findings_text(), Line::default());
        // A partial trace is not a clean run.
        s.title.tone = if r.is_partial() {
            Tone::Warn
        } else {
            Tone::Pass
        };
        return s;
    }
    let mut s = Section::new(
        SectionId::Findings,
        format!("Findings ({})", r.findings.len()),
        Line::default(),
    );
    for (i, f) in r.findings.iter().enumerate() {
        s.blocks.push(Block::Item(finding(i + 1, f)));
    }
    s
}

/// A finding as the report words it: `kind at file.py:33`, what happened, `fix:` what to do.
pub fn finding(number: usize, f: &Finding) -> Item {
    let mut head = Line::new(f.kind.as_str(), Tone::Bad);
    if let Some(at) = &f.source {
        head = head.then(" at ").and(at.to_string(), Tone::Code);
    }
    Item {
        number,
        head,
        paras: vec![
            (None, Line::plain(f.title.as_str())),
            (
                Some(Span::new("fix:", Tone::Good)),
                Line::plain(f.suggestion.as_str()),
            ),
        ],
    }
}
