//! The text report: what a tired engineer reads in ten seconds, most important first. It lays
//! out the report's [`present::sections`] on a terminal: a blank line between sections, two
//! columns of indent per level, prose wrapped at the width.

use tpuscope_analyzers::present::{self, Block, Section};
use tpuscope_analyzers::report::Report;

use super::term::Out;
pub use super::term::Style;

pub fn render(r: &Report, st: &Style) -> String {
    let mut o = Out {
        s: String::new(),
        st,
    };
    let mut sections = present::sections(r);
    super::term::clean(&mut sections);
    for (i, s) in sections.iter().enumerate() {
        if i > 0 {
            o.blank();
        }
        section(&mut o, s);
    }
    o.s
}

/// One section as the text report lays it out (for the run summary and `attach --snapshot`,
/// which show a part of the report).
pub fn section_text(s: &Section, st: &Style) -> String {
    let mut o = Out {
        s: String::new(),
        st,
    };
    let mut s = [s.clone()];
    super::term::clean(&mut s);
    section(&mut o, &s[0]);
    o.s
}

/// The title (`Title: summary` when there is one), then the blocks.
fn section(o: &mut Out<'_>, s: &Section) {
    let title = o.st.span(&s.title);
    if s.summary.is_empty() {
        o.line(&title);
    } else {
        let summary = o.st.line(&s.summary);
        o.line(&format!("{title}: {summary}"));
    }
    for b in &s.blocks {
        block(o, b);
    }
}

/// Columns of indent for a nesting level.
fn indent(depth: u8) -> usize {
    2 * usize::from(depth)
}

fn block(o: &mut Out<'_>, b: &Block) {
    match b {
        Block::Line { depth, line } => o.styled(indent(*depth), line),
        Block::Para { depth, label, text } => o.para(indent(*depth), label.as_ref(), text),
        Block::Labeled {
            depth,
            label,
            lines,
        } => o.labeled(indent(*depth), label, lines),
        Block::Table { depth, table } => o.table(indent(*depth), table),
        Block::Item(item) => o.item(item),
    }
}
