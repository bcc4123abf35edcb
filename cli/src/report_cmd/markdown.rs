//! The Markdown report, for a CI step summary ($GITHUB_STEP_SUMMARY): a status line first, then
//! the text report's sections, in Markdown.

use std::fmt::Write as _;

use tpuscope_analyzers::present::{self, Align, Block, Line, Span, Table, Tone};
use tpuscope_analyzers::report::{Report, failed};
use tpuscope_analyzers::units::plural;

/// Where text goes: table cells also need `|` escaped (even inside code spans) and no newlines.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Prose,
    Cell,
}

/// Escapes text for Markdown, keeping the analyzers' `code spans` as code. Outside code, the
/// characters that start emphasis, links, HTML or tables are backslash-escaped.
fn md(s: &str, ctx: Ctx) -> String {
    let s = s.replace(['\r', '\n'], " ");
    // Unbalanced backticks would swallow the rest of the line: escape them all then.
    let keep_code = s.matches('`').count() & 1 == 0;
    let mut out = String::with_capacity(s.len());
    let mut in_code = false;
    for ch in s.chars() {
        if ch == '`' && keep_code {
            in_code = !in_code;
            out.push(ch);
            continue;
        }
        if in_code {
            if ch == '|' && ctx == Ctx::Cell {
                out.push('\\');
            }
            out.push(ch);
            continue;
        }
        match ch {
            '\\' | '`' | '*' | '_' | '[' | ']' | '|' | '#' | '~' => {
                out.push('\\');
                out.push(ch);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            c => out.push(c),
        }
    }
    out
}

/// A code span holding any text (backticks included).
fn code(s: &str, ctx: Ctx) -> String {
    let s = s.replace(['\r', '\n'], " ");
    let s = if ctx == Ctx::Cell {
        s.replace('|', "\\|")
    } else {
        s
    };
    if s.contains('`') {
        format!("`` {s} ``")
    } else {
        format!("`{s}`")
    }
}

/// How a span reads in Markdown: code spans for places and names, bold for what stands out.
fn span(s: &Span, ctx: Ctx) -> String {
    if s.text.is_empty() {
        return String::new();
    }
    match s.tone {
        Tone::Code => code(&s.text, ctx),
        Tone::Strong | Tone::Bad | Tone::Warn | Tone::Pass => {
            // Emphasis may not start or end with a space: keep those outside it.
            let t = s.text.trim();
            let lead = &s.text[..s.text.len() - s.text.trim_start().len()];
            let tail = &s.text[s.text.trim_end().len()..];
            format!("{lead}**{}**{tail}", md(t, ctx))
        }
        Tone::Plain | Tone::Dim | Tone::Good | Tone::Accent => md(&s.text, ctx),
    }
}

fn line(l: &Line, ctx: Ctx) -> String {
    l.0.iter().map(|s| span(s, ctx)).collect()
}

/// What kind of Markdown a block is part of: consecutive blocks of one kind form one list.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Run {
    Bullets,
    Numbered,
    Table,
}

/// The report as Markdown: a status line for the CI step summary, then the text report's
/// [`present::sections`], each a heading (a one-line section, such as the verdict, is a bold
/// line), its summary, then its blocks as nested bullets, numbered findings and GFM tables.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let mut sections = present::sections(r);
    super::term::clean(&mut sections);
    for (i, s) in sections.iter().enumerate() {
        if i == 0 {
            let _ = writeln!(o, "## {}\n", md(&s.title.text, Ctx::Prose));
            let _ = writeln!(o, "{}", status(r));
        } else if s.summary.is_empty() && s.blocks.is_empty() {
            let _ = writeln!(
                o,
                "\n{}",
                span(&Span::new(&s.title.text, Tone::Strong), Ctx::Prose)
            );
            continue;
        } else {
            let _ = writeln!(o, "\n### {}", md(&s.title.text, Ctx::Prose));
        }
        if !s.summary.is_empty() {
            let _ = writeln!(o, "\n{}", line(&s.summary, Ctx::Prose));
        }
        blocks(&mut o, &s.blocks);
    }
    o
}

fn blocks(o: &mut String, blocks: &[Block]) {
    let mut last: Option<Run> = None;
    for b in blocks {
        let run = match b {
            Block::Table { .. } => Run::Table,
            Block::Item(_) => Run::Numbered,
            _ => Run::Bullets,
        };
        // A blank line starts a list or a table; a table ends with one.
        if last != Some(run) || run == Run::Table {
            o.push('\n');
        }
        last = Some(run);
        let bullet =
            |depth: &u8| format!("{}- ", "  ".repeat(usize::from(*depth).saturating_sub(1)));
        let label = |l: &Option<Span>| {
            l.as_ref()
                .map(|l| format!("{} ", span(l, Ctx::Prose)))
                .unwrap_or_default()
        };
        match b {
            Block::Line { depth, line: l } => {
                let _ = writeln!(o, "{}{}", bullet(depth), line(l, Ctx::Prose));
            }
            Block::Para {
                depth,
                label: l,
                text,
            } => {
                let _ = writeln!(o, "{}{}{}", bullet(depth), label(l), line(text, Ctx::Prose));
            }
            Block::Labeled {
                depth,
                label: l,
                lines,
            } => {
                let pad = "  ".repeat(usize::from(*depth));
                let lines: Vec<String> = lines.iter().map(|x| line(x, Ctx::Prose)).collect();
                let _ = writeln!(
                    o,
                    "{}{} {}",
                    bullet(depth),
                    span(l, Ctx::Prose),
                    lines.join(&format!("  \n{pad}"))
                );
            }
            Block::Table { table, .. } => self::table(o, table),
            Block::Item(item) => {
                let _ = write!(o, "{}. {}", item.number, line(&item.head, Ctx::Prose));
                for (l, text) in &item.paras {
                    let _ = write!(o, "  \n   {}{}", label(l), line(text, Ctx::Prose));
                }
                o.push('\n');
            }
        }
    }
}

/// A GFM table (numbers right-aligned).
fn table(o: &mut String, t: &Table) {
    let head: Vec<String> = t.columns.iter().map(|c| md(&c.title, Ctx::Cell)).collect();
    let _ = writeln!(o, "| {} |", head.join(" | "));
    let seps: Vec<&str> = t
        .columns
        .iter()
        .map(|c| match c.align {
            Align::Right => "---:",
            Align::Left => "---",
        })
        .collect();
    let _ = writeln!(o, "|{}|", seps.join("|"));
    for r in &t.rows {
        let cells: Vec<String> = r.cells.iter().map(|c| line(c, Ctx::Cell)).collect();
        let _ = writeln!(o, "| {} |", cells.join(" | "));
    }
}

/// The first line a CI step summary shows: the verdict of budgets and baseline when there
/// are some, else the findings.
fn status(r: &Report) -> String {
    let n = r.findings.len() as u64;
    let findings = if n == 0 {
        "no findings".to_string()
    } else {
        plural(n, "finding", "findings")
    };
    if r.budgets.is_empty() && r.baseline.is_none() {
        if n == 0 {
            let mark = if r.is_partial() { "⚠️" } else { "✅" };
            format!("{mark} **{}**", md(r.no_findings_text(), Ctx::Prose))
        } else {
            format!("⚠️ **{findings}** (no budgets checked)")
        }
    } else if failed(r) {
        format!(
            "❌ **{}** · {findings}",
            md(&r.failure_summary(), Ctx::Prose)
        )
    } else {
        format!(
            "✅ **{}** · {findings}",
            md(&r.failure_summary(), Ctx::Prose)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_keeps_code_and_guards_tables() {
        assert_eq!(md("a|b", Ctx::Cell), "a\\|b");
        assert_eq!(md("use `x|y` now", Ctx::Cell), "use `x\\|y` now");
        assert_eq!(md("use `x|y` now", Ctx::Prose), "use `x|y` now");
        assert_eq!(md("main.<locals>.f", Ctx::Prose), "main.&lt;locals&gt;.f");
        assert_eq!(md("*a* [b]", Ctx::Prose), "\\*a\\* \\[b\\]");
        assert_eq!(md("one ` tick", Ctx::Prose), "one \\` tick");
        assert_eq!(md("two\nlines", Ctx::Cell), "two lines");
        assert_eq!(code("a`b", Ctx::Prose), "`` a`b ``");
        assert_eq!(code("a|b", Ctx::Cell), "`a\\|b`");
    }
}
