//! How the GUI's plots and timeline read numbers: durations at nanosecond scale, axis ticks.
//! Facts of the report use `tpuscope_analyzers::units`, as `tpuscope report` does.

use tpuscope_analyzers::units;

/// `812 ns`, `45.2 µs`, `3.40 ms`, `2.51 s`.
pub fn dur(ns: f64) -> String {
    let a = ns.abs();
    if a < 1e3 {
        format!("{ns:.0} ns")
    } else if a < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if a < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// [`units::bytes`] of a plotted (fractional) value: the report's wording of a size.
pub fn bytes(b: f64) -> String {
    units::bytes(b.round() as i64)
}

/// Like [`bytes`] with two decimals: axis ticks a tenth of a unit apart stay distinct.
pub fn bytes_fine(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v.abs() >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// A time axis label for `t` ns when ticks are `step` ns apart: as few digits as tell ticks apart.
pub fn tick(t: f64, step: f64) -> String {
    let (div, unit) = if step >= 1e8 {
        (1e9, "s")
    } else if step >= 1e5 {
        (1e6, "ms")
    } else if step >= 1e2 {
        (1e3, "µs")
    } else {
        (1.0, "ns")
    };
    let digits = {
        let r = step / div;
        if r >= 1.0 {
            0
        } else if r >= 0.1 {
            1
        } else {
            2
        }
    };
    format!("{:.*} {unit}", digits, t / div)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(dur(812.0), "812 ns");
        assert_eq!(dur(45_200.0), "45.2 µs");
        assert_eq!(dur(3_400_000.0), "3.40 ms");
        assert_eq!(dur(2_510_000_000.0), "2.51 s");
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(4096.0), "4.0 KiB");
        assert_eq!(tick(2_500_000.0, 500_000.0), "2.5 ms");
        assert_eq!(tick(3_000_000_000.0, 1e9), "3 s");
    }
}
