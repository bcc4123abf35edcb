//! The Prometheus text exposition format, version 0.0.4: `# HELP`, `# TYPE`, then one line per
//! sample. Written by hand rather than with an instrumentation crate: every value here is a
//! snapshot recomputed from a trace (no live counters to register), and the label sets come and
//! go with what the analysis finds.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The `Content-Type` of this format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// Label names and values of one sample, in the order written.
pub type Labels = Vec<(&'static str, String)>;

/// One metric: its help, type and samples (one per label set).
#[derive(Clone, Debug)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    /// Label set → value. Adding to an existing label set sums (two families of one name).
    pub samples: BTreeMap<Labels, f64>,
}

impl Family {
    pub fn new(name: &'static str, kind: Kind, help: &'static str) -> Family {
        debug_assert!(valid_name(name), "{name}");
        Family {
            name,
            help,
            kind,
            samples: BTreeMap::new(),
        }
    }

    /// Adds `value` to the sample with `labels` (creating it).
    pub fn add(&mut self, labels: Labels, value: f64) {
        debug_assert!(labels.iter().all(|(k, _)| valid_label_name(k)));
        *self.samples.entry(labels).or_insert(0.0) += value;
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(name: &str) -> bool {
    valid_name(name) && !name.contains(':') && !name.starts_with("__")
}

/// A label value: backslash, double quote and newline escaped.
fn escape_label_value(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Help text: backslash and newline escaped (quotes are not special there).
fn escape_help(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn write_value(v: f64, out: &mut String) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        // Rust prints integral floats without a fraction ("3") and others exactly enough to
        // read back ("0.1"), never in an exponent form the parsers would refuse.
        let _ = write!(out, "{v}");
    }
}

/// The whole exposition.
pub fn encode(families: &[Family]) -> String {
    let mut out = String::new();
    for f in families {
        out.push_str("# HELP ");
        out.push_str(f.name);
        out.push(' ');
        escape_help(f.help, &mut out);
        out.push('\n');
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind.as_str());
        for (labels, value) in &f.samples {
            out.push_str(f.name);
            if !labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(k);
                    out.push_str("=\"");
                    escape_label_value(v, &mut out);
                    out.push('"');
                }
                out.push('}');
            }
            out.push(' ');
            write_value(*value, &mut out);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_type_and_samples_in_order() {
        let mut c = Family::new("x_total", Kind::Counter, "Things.");
        c.add(vec![("host", "b".into())], 2.0);
        c.add(vec![("host", "a".into())], 1.0);
        c.add(vec![("host", "a".into())], 1.5);
        let g = Family::new("y_bytes", Kind::Gauge, "Nothing yet.");
        let text = encode(&[c, g]);
        assert_eq!(
            text,
            "# HELP x_total Things.\n# TYPE x_total counter\nx_total{host=\"a\"} 2.5\nx_total{host=\"b\"} 2\n\
             # HELP y_bytes Nothing yet.\n# TYPE y_bytes gauge\n"
        );
    }

    #[test]
    fn label_values_and_help_are_escaped() {
        let mut f = Family::new("z", Kind::Gauge, "a \\ b\nc \"q\"");
        f.add(
            vec![
                ("path", "C:\\dir\\\"x\"\nnext".into()),
                ("e", String::new()),
            ],
            1.0,
        );
        let text = encode(&[f]);
        assert_eq!(
            text,
            "# HELP z a \\\\ b\\nc \"q\"\n# TYPE z gauge\nz{path=\"C:\\\\dir\\\\\\\"x\\\"\\nnext\",e=\"\"} 1\n"
        );
        // Every sample stays on one line whatever the values hold.
        assert_eq!(text.lines().count(), 3);
    }

    #[test]
    fn values_are_written_as_the_format_spells_them() {
        let mut s = String::new();
        for v in [
            0.0,
            3.0,
            0.25,
            -2.5,
            1e21,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            write_value(v, &mut s);
            s.push(' ');
        }
        assert_eq!(s, "0 3 0.25 -2.5 1000000000000000000000 NaN +Inf -Inf ");
    }

    #[test]
    fn unlabelled_sample_has_no_braces() {
        let mut f = Family::new("up", Kind::Gauge, "h");
        f.add(Vec::new(), 1.0);
        assert!(encode(&[f]).ends_with("\nup 1\n"));
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_name("tpuscope_compiles_total"));
        assert!(valid_name("a:b"));
        assert!(!valid_name("1abc"));
        assert!(!valid_name("a-b"));
        assert!(!valid_name(""));
        assert!(valid_label_name("process_index"));
        assert!(!valid_label_name("__name__"));
        assert!(!valid_label_name("a:b"));
    }
}
