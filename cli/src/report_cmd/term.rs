//! The terminal kit of the text report: ANSI styling of a [`Tone`], prose wrapped at the
//! terminal's width (with its tones kept), aligned tables. It knows nothing of reports.

use std::fmt::Write as _;

use tpuscope_analyzers::present::{Align, Block, Item, Line, Section, Span, Table, Tone};
use tpuscope_analyzers::units::{LongWord, wrap};

/// How to draw: colours (ANSI) or not, and the width to wrap prose at.
pub struct Style {
    pub color: bool,
    pub width: usize,
}

impl Style {
    pub fn for_stdout() -> Style {
        Style {
            color: super::stdout_wants_color(),
            width: columns(),
        }
    }

    /// `s` in the tone's colour (nothing around empty text, or without colour).
    pub fn paint(&self, tone: Tone, s: &str) -> String {
        let code = match tone {
            Tone::Plain => return s.to_string(),
            Tone::Strong | Tone::Code => "1",
            Tone::Dim => "2",
            Tone::Good => "32",
            Tone::Warn => "33",
            Tone::Bad => "1;31",
            Tone::Pass => "1;32",
            Tone::Accent => "36",
        };
        if self.color && !s.is_empty() {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }

    pub fn span(&self, s: &Span) -> String {
        self.paint(s.tone, &s.text)
    }

    /// Each span in its tone.
    pub fn line(&self, l: &Line) -> String {
        l.0.iter().map(|s| self.span(s)).collect()
    }
}

/// The sections with every control character a trace may carry (an error message, a file name,
/// a what-was-read) made harmless: a tab is a space, a newline stays, anything else is U+FFFD.
/// What is shown is bounded, so this costs nothing on a long run (the report is never copied).
pub fn clean(sections: &mut [Section]) {
    fn text(s: &mut String) {
        if s.chars().any(|c| c.is_control() && c != '\n') {
            *s = s
                .chars()
                .map(|c| match c {
                    '\n' => '\n',
                    '\t' => ' ',
                    c if c.is_control() => '\u{FFFD}',
                    c => c,
                })
                .collect();
        }
    }
    fn line(l: &mut Line) {
        l.0.iter_mut().for_each(|s| text(&mut s.text));
    }
    for s in sections {
        text(&mut s.title.text);
        line(&mut s.summary);
        for b in &mut s.blocks {
            match b {
                Block::Line { line: l, .. } => line(l),
                Block::Para { label, text: t, .. } => {
                    if let Some(l) = label {
                        text(&mut l.text);
                    }
                    line(t);
                }
                Block::Labeled { label, lines, .. } => {
                    text(&mut label.text);
                    lines.iter_mut().for_each(line);
                }
                Block::Table { table, .. } => {
                    table.columns.iter_mut().for_each(|c| text(&mut c.title));
                    for r in &mut table.rows {
                        r.cells.iter_mut().for_each(line);
                    }
                }
                Block::Item(item) => {
                    line(&mut item.head);
                    for (label, t) in &mut item.paras {
                        if let Some(l) = label {
                            text(&mut l.text);
                        }
                        line(t);
                    }
                }
            }
        }
    }
}

/// The terminal's width from COLUMNS (shells set it), else 100; prose wraps at it.
pub fn columns() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .map_or(100, |c| c.clamp(60, 200))
}

/// Text being laid out for the terminal.
pub struct Out<'a> {
    pub s: String,
    pub st: &'a Style,
}

impl Out<'_> {
    pub fn line(&mut self, l: &str) {
        self.s.push_str(l);
        self.s.push('\n');
    }

    pub fn blank(&mut self) {
        self.s.push('\n');
    }

    /// `line` after `indent` spaces. A line of one styled span is styled with its indent (as
    /// one piece: a dim note, a highlighted sentence).
    pub fn styled(&mut self, indent: usize, line: &Line) {
        let pad = " ".repeat(indent);
        match line.0.as_slice() {
            [one] if one.tone != Tone::Plain => {
                let l = self.st.paint(one.tone, &format!("{pad}{}", one.text));
                self.line(&l);
            }
            _ => {
                let l = format!("{pad}{}", self.st.line(line));
                self.line(&l);
            }
        }
    }

    /// `text` word-wrapped at the width, after an optional label; continuation lines align
    /// under the text.
    pub fn para(&mut self, indent: usize, label: Option<&Span>, text: &Line) {
        let label_len = label.map_or(0, |l| l.text.chars().count());
        let pad = if label_len > 0 {
            indent + label_len + 1
        } else {
            indent
        };
        let avail = self.st.width.saturating_sub(pad).max(40);
        let mut lines = wrap_styled(self.st, text, avail).into_iter();
        let first = lines.next().unwrap_or_default();
        let head = match label {
            Some(l) if label_len > 0 => {
                format!("{}{} {first}", " ".repeat(indent), self.st.span(l))
            }
            _ => format!("{}{first}", " ".repeat(indent)),
        };
        self.line(head.trim_end());
        for l in lines {
            self.line(&format!("{}{l}", " ".repeat(pad)));
        }
    }

    /// `   3. kind at file.py:33`, then its paragraphs under the kind.
    pub fn item(&mut self, item: &Item) {
        let head = self.st.line(&item.head);
        self.line(&format!("  {:>2}. {head}", item.number));
        for (label, text) in &item.paras {
            self.para(6, label.as_ref(), text);
        }
    }

    /// A label, then lines aligned under the first one's text.
    pub fn labeled(&mut self, indent: usize, label: &Span, lines: &[Line]) {
        let pad = indent + label.text.chars().count() + 1;
        for (i, l) in lines.iter().enumerate() {
            let text = self.st.line(l);
            if i == 0 {
                let head = format!("{}{} {text}", " ".repeat(indent), self.st.span(label));
                self.line(&head);
            } else {
                self.line(&format!("{}{text}", " ".repeat(pad)));
            }
        }
    }

    /// A table: a dim header, columns as wide as their widest cell (the last one never
    /// padded), numbers right-aligned.
    pub fn table(&mut self, indent: usize, t: &Table) {
        let n = t.columns.len();
        let mut w: Vec<usize> = t.columns.iter().map(|c| c.title.chars().count()).collect();
        for r in &t.rows {
            for (i, c) in r.cells.iter().enumerate().take(n.saturating_sub(1)) {
                w[i] = w[i].max(c.text().chars().count());
            }
        }
        // Cells as (visible width, drawn text).
        let fmt_row = |cells: &[(usize, String)]| {
            let mut l = " ".repeat(indent);
            for (i, (len, c)) in cells.iter().enumerate().take(n) {
                if i + 1 == n {
                    l.push_str(c);
                    break;
                }
                let fill = " ".repeat(w[i].saturating_sub(*len));
                if t.columns[i].align == Align::Right {
                    let _ = write!(l, "{fill}{c}  ");
                } else {
                    let _ = write!(l, "{c}{fill}  ");
                }
            }
            l.trim_end().to_string()
        };
        let head: Vec<(usize, String)> = t
            .columns
            .iter()
            .map(|c| (c.title.chars().count(), c.title.clone()))
            .collect();
        let head = self.st.paint(Tone::Dim, &fmt_row(&head));
        self.line(&head);
        for r in &t.rows {
            let cells: Vec<(usize, String)> = r
                .cells
                .iter()
                .map(|c| (c.text().chars().count(), self.st.line(c)))
                .collect();
            let l = fmt_row(&cells);
            self.line(&l);
        }
    }
}

/// `text` wrapped at `width` (a long word kept whole), each piece in its span's tone.
fn wrap_styled(st: &Style, text: &Line, width: usize) -> Vec<String> {
    let chars: Vec<(char, Tone)> = text
        .0
        .iter()
        .flat_map(|s| s.text.chars().map(move |c| (c, s.tone)))
        .collect();
    let plain: String = chars.iter().map(|(c, _)| c).collect();
    let wrapped = wrap(&plain, width, LongWord::Keep);
    if !st.color {
        return wrapped;
    }
    // Wrapping only drops and merges whitespace: walk the source beside each wrapped line to
    // find every character's tone (a space takes the tone of the first one it replaces).
    let mut src = chars.iter().peekable();
    wrapped
        .iter()
        .map(|l| {
            while src.next_if(|(c, _)| c.is_whitespace()).is_some() {}
            let mut runs: Vec<(Tone, String)> = Vec::new();
            for ch in l.chars() {
                let tone = if ch == ' ' {
                    let tone = src.peek().map_or(Tone::Plain, |(_, t)| *t);
                    while src.next_if(|(c, _)| c.is_whitespace()).is_some() {}
                    tone
                } else {
                    src.next().map_or(Tone::Plain, |(_, t)| *t)
                };
                match runs.last_mut() {
                    Some((t, s)) if *t == tone => s.push(ch),
                    _ => runs.push((tone, ch.to_string())),
                }
            }
            runs.iter().map(|(t, s)| st.paint(*t, s)).collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_style_has_no_escapes_and_colour_has() {
        let plain = Style {
            color: false,
            width: 100,
        };
        let color = Style {
            color: true,
            width: 100,
        };
        assert_eq!(plain.paint(Tone::Bad, "x"), "x");
        assert_eq!(color.paint(Tone::Bad, "x"), "\x1b[1;31mx\x1b[0m");
    }

    #[test]
    fn wrapped_prose_keeps_its_tones() {
        let color = Style {
            color: true,
            width: 100,
        };
        let text = Line::plain("aaa — ").and("bb cc dd", Tone::Warn);
        assert_eq!(
            wrap_styled(&color, &text, 9),
            vec![
                "aaa — \x1b[33mbb\x1b[0m".to_string(),
                "\x1b[33mcc dd\x1b[0m".to_string()
            ]
        );
        assert_eq!(
            wrap_styled(&color, &text, 100),
            vec!["aaa — \x1b[33mbb cc dd\x1b[0m".to_string()]
        );
    }
}
