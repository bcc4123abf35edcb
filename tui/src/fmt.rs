//! Number, size and text formatting for the screen (the report's wording, kept narrow).

pub use tpuscope_analyzers::units::{bytes, ms, percent};

/// A duration as `42.0 s`, `3m05s`, `2h03m`.
pub fn duration(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    if s < 60 {
        format!("{:.1} s", ns as f64 / 1e9)
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
}

/// Greedy word wrap by characters; a word longer than the width is cut into pieces.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut cur = String::new();
    let mut cur_len = 0;
    for word in text.split_whitespace() {
        let mut word: Vec<char> = word.chars().collect();
        while word.len() > width {
            if cur_len > 0 {
                lines.push(std::mem::take(&mut cur));
                cur_len = 0;
            }
            let rest = word.split_off(width);
            lines.push(word.into_iter().collect());
            word = rest;
        }
        let len = word.len();
        if cur_len > 0 && cur_len + 1 + len > width {
            lines.push(std::mem::take(&mut cur));
            cur_len = 0;
        }
        if cur_len > 0 {
            cur.push(' ');
            cur_len += 1;
        }
        cur.extend(word);
        cur_len += len;
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

/// `s` cut to `width` characters, with `…` when cut.
pub fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// `s` cut to its last `width` characters, with `…` in front when cut (keeps a path's line).
pub fn truncate_left(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        return s.to_string();
    }
    if width == 0 {
        return String::new();
    }
    let mut out = String::from("…");
    out.extend(s.chars().skip(n - (width - 1)));
    out
}

/// Text a terminal cell can hold: ANSI escape sequences removed, tabs expanded, a carriage
/// return keeps what was written after it (a progress bar redrawn in place), other control
/// characters dropped. Workload output and trace messages go through this before drawing.
pub fn sanitize(s: &str) -> String {
    let s = match s.rfind('\r') {
        // A trailing \r (a CRLF line end) erases nothing.
        Some(i) if i + 1 < s.len() => &s[i + 1..],
        _ => s,
    };
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                // CSI `ESC [ params final` and OSC `ESC ] … BEL/ST`; other escapes are two chars.
                match chars.next() {
                    Some('[') => {
                        for c in chars.by_ref() {
                            if ('@'..='~').contains(&c) {
                                break;
                            }
                        }
                    }
                    Some(']') => {
                        while let Some(c) = chars.next() {
                            if c == '\u{7}' || (c == '\u{1b}' && chars.peek() == Some(&'\\')) {
                                if c == '\u{1b}' {
                                    chars.next();
                                }
                                break;
                            }
                        }
                    }
                    _ => {}
                }
            }
            '\t' => {
                let col = out.chars().count();
                out.extend(std::iter::repeat_n(' ', 8 - col % 8));
            }
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_text_fit() {
        assert_eq!(bytes(16), "16 B");
        assert_eq!(bytes(4096), "4.0 KiB");
        assert_eq!(bytes(16 << 30), "16.0 GiB");
        assert_eq!(ms(322.98), "323");
        assert_eq!(ms(0.5181), "0.518");
        assert_eq!(duration(1_500_000_000), "1.5 s");
        assert_eq!(duration(185_000_000_000), "3m05s");
        assert_eq!(percent(0.0123), "1.2%");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
        assert_eq!(truncate_left("dir/file.py:27", 8), "…e.py:27");
        assert_eq!(sanitize("\u{1b}[1;31mred\u{1b}[0m ok"), "red ok");
        assert_eq!(sanitize(" 10%|#  \r 50%|#####"), " 50%|#####");
        assert_eq!(sanitize("line\r"), "line");
        assert_eq!(sanitize("a\tb"), "a       b");
        assert_eq!(sanitize("\u{1b}]0;title\u{7}x\u{0}y"), "xy");
        assert_eq!(wrap("aa bb cc", 5), vec!["aa bb", "cc"]);
        assert_eq!(wrap("abcdefgh", 3), vec!["abc", "def", "gh"]);
        assert_eq!(wrap("", 3), vec![""]);
    }
}
