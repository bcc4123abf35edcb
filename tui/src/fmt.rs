//! What only a terminal needs: text cut to a cell, made safe for it, and the uptime clock. Sizes,
//! times, shares and wrapping are `tpuscope_analyzers::units`, as in every view.

/// The uptime clock in the header: `42.0 s`, `3m05s`, `2h03m` (a fixed, short width that
/// ticks, unlike a duration in a sentence).
pub fn uptime(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    if s < 60 {
        format!("{:.1} s", ns as f64 / 1e9)
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    }
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
    fn text_fits_a_cell() {
        assert_eq!(uptime(1_500_000_000), "1.5 s");
        assert_eq!(uptime(185_000_000_000), "3m05s");
        assert_eq!(truncate("abcdef", 4), "abc…");
        assert_eq!(truncate("abc", 4), "abc");
        assert_eq!(truncate_left("dir/file.py:27", 8), "…e.py:27");
        assert_eq!(sanitize("\u{1b}[1;31mred\u{1b}[0m ok"), "red ok");
        assert_eq!(sanitize(" 10%|#  \r 50%|#####"), " 50%|#####");
        assert_eq!(sanitize("line\r"), "line");
        assert_eq!(sanitize("a\tb"), "a       b");
        assert_eq!(sanitize("\u{1b}]0;title\u{7}x\u{0}y"), "xy");
    }
}
