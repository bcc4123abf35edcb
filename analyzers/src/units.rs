//! How sizes, durations and shares read in every front end (report, TUI): one wording.

/// `512 B`, `4.0 KiB`, `1.5 MiB`, `16.0 GiB`.
pub fn bytes(n: i64) -> String {
    let a = n.unsigned_abs() as f64;
    let sign = if n < 0 { "-" } else { "" };
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if a < 1024.0 {
        return format!("{n} B");
    }
    let mut v = a / 1024.0;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if v < 1024.0 {
            break;
        }
        v /= 1024.0;
        unit = u;
    }
    format!("{sign}{v:.1} {unit}")
}

/// Milliseconds with the precision that matters at that size: `323`, `34.0`, `0.518`.
pub fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// A duration given in milliseconds, in the unit a person reads it in: `850 ms`, `2.31 s`,
/// `4 min 12 s`.
pub fn duration(ms_: f64) -> String {
    if ms_ < 1000.0 {
        format!("{} ms", ms(ms_))
    } else if ms_ < 60_000.0 {
        format!("{:.2} s", ms_ / 1e3)
    } else {
        let s = (ms_ / 1e3).round() as u64;
        format!("{} min {} s", s / 60, s % 60)
    }
}

/// A fraction as a percentage: `50%`, `1.2%`, `<0.1%`.
pub fn percent(f: f64) -> String {
    let p = f * 100.0;
    if p > 0.0 && p < 0.1 {
        "<0.1%".to_string()
    } else if p >= 10.0 {
        format!("{p:.0}%")
    } else {
        format!("{p:.1}%")
    }
}

/// `1 compile`, `3 compiles`.
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A number as a person writes it: integers as integers, fractions with four significant
/// digits (`2`, `0.85`, `0.0001221`).
pub fn num(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{v:.0}");
    }
    let mag = v.abs().log10().floor() as i32;
    let decimals = (3 - mag).clamp(0, 12) as usize;
    let s = format!("{v:.decimals$}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// The first line of a message, for one-line contexts.
pub fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_times_and_shares_read_naturally() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(4096), "4.0 KiB");
        assert_eq!(bytes(-3 << 20), "-3.0 MiB");
        assert_eq!(ms(323.4), "323");
        assert_eq!(ms(34.04), "34.0");
        assert_eq!(ms(0.5184), "0.518");
        assert_eq!(duration(850.0), "850 ms");
        assert_eq!(duration(2314.0), "2.31 s");
        assert_eq!(duration(252_400.0), "4 min 12 s");
        assert_eq!(percent(0.5), "50%");
        assert_eq!(percent(0.012), "1.2%");
        assert_eq!(percent(0.0001), "<0.1%");
        assert_eq!(num(2.0), "2");
        assert_eq!(num(0.85), "0.85");
        assert_eq!(num(0.000_122_070_3), "0.0001221");
        assert_eq!(num(12.5), "12.5");
    }
}
