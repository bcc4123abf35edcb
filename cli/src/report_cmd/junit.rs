//! JUnit XML for CI test reporters: budgets and the baseline as test cases, so a dashboard shows
//! which limit broke. Failures here match the exit status: findings alone never fail.

use std::fmt::Write as _;

use tpuscope_analyzers::present;
use tpuscope_analyzers::report::{BudgetKey, BudgetResult, BudgetStatus, FindingKind, Report};
use tpuscope_analyzers::units::{ms, num, plural};

/// The finding kinds, in a fixed order so that the test names are stable between runs.
const FINDING_KINDS: [FindingKind; 5] = [
    FindingKind::Recompile,
    FindingKind::Sync,
    FindingKind::Cache,
    FindingKind::Hbm,
    FindingKind::Oom,
];

enum Outcome {
    Pass,
    Failure { message: String, text: String },
    Skipped { message: String },
}

struct Case {
    classname: &'static str,
    name: String,
    outcome: Outcome,
    out: String,
}

/// Text for XML 1.0: characters it cannot hold at all become U+FFFD.
fn xml_char(c: char) -> char {
    match c {
        '\t' | '\n' | '\r' => c,
        c if (c as u32) < 0x20 => '\u{FFFD}',
        '\u{FFFE}' | '\u{FFFF}' => '\u{FFFD}',
        c => c,
    }
}

fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars().map(xml_char) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\r' => out.push_str("&#13;"),
            c => out.push(c),
        }
    }
    out
}

fn attr(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars().map(xml_char) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // Attribute values normalize raw whitespace away: keep it as character references.
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c => out.push(c),
        }
    }
    out
}

/// What in the report explains a budget's value: the lines a failure message should carry.
fn budget_context(r: &Report, b: &BudgetResult) -> Vec<String> {
    let Some(key) = BudgetKey::ALL.into_iter().find(|k| k.name() == b.name) else {
        return Vec::new();
    };
    match key {
        BudgetKey::Compiles | BudgetKey::Recompiles => r
            .recompiles
            .iter()
            .filter(|f| f.finding || key == BudgetKey::Compiles)
            .map(|f| {
                let at = f
                    .source
                    .as_ref()
                    .map(|s| format!(" at {s}"))
                    .unwrap_or_default();
                format!(
                    "{} compiled {}× ({}){at}: {}\n  fix: {}",
                    f.graph, f.count, f.cause, f.details, f.suggestion
                )
            })
            .collect(),
        BudgetKey::SyncsPerStep => r
            .syncs
            .iter()
            .map(|s| {
                let line = s
                    .place()
                    .map_or_else(|| "(no stack)".to_string(), ToString::to_string);
                format!(
                    "{line}: {}× ({} ms stalled)\n  fix: {}",
                    s.count,
                    ms(s.stall_ms),
                    s.suggestion
                )
            })
            .collect(),
        BudgetKey::GraphFragmentsPerStep => vec![format!(
            "{} steps detected by {}: worst {} executable launches per steady-state step, mean {:.1}",
            r.steps.count,
            r.steps.detected_by,
            r.steps.graph_fragments_per_step,
            r.steps.mean_graph_fragments_per_step
        )],
        BudgetKey::CacheMisses => {
            let mut v: Vec<String> = r
                .cache
                .stored_but_recompiled
                .iter()
                .map(|s| {
                    format!(
                        "{} stored in run {} and compiled again in run {}",
                        s.graph, s.stored_in_run, s.recompiled_in_run
                    )
                })
                .collect();
            v.extend(
                r.cache
                    .failures
                    .iter()
                    .map(|f| format!("{}× deserialize failed: {}", f.count, f.message)),
            );
            v
        }
        BudgetKey::HbmPeakFraction => r
            .hbm
            .iter()
            .map(|d| present::device_line(r, d).text())
            .collect(),
    }
}

fn cases(r: &Report) -> Vec<Case> {
    let mut cases = Vec::new();
    for b in &r.budgets {
        let outcome = match b.status {
            BudgetStatus::Exceeded => Outcome::Failure {
                message: format!(
                    "{}: {} exceeds the budget of {}",
                    b.name,
                    b.actual.map_or_else(|| "?".to_string(), num),
                    num(b.limit)
                ),
                text: budget_context(r, b).join("\n"),
            },
            BudgetStatus::Unknown => Outcome::Skipped {
                message: format!(
                    "{}: the trace cannot tell (e.g. the plugin reports no memory limit)",
                    b.name
                ),
            },
            BudgetStatus::Ok => Outcome::Pass,
        };
        let out = match (&outcome, b.actual) {
            (Outcome::Pass, Some(a)) => {
                format!("{} = {} (budget {})", b.name, num(a), num(b.limit))
            }
            _ => String::new(),
        };
        cases.push(Case {
            classname: "tpuscope.budget",
            name: b.name.clone(),
            outcome,
            out,
        });
    }
    if let Some(b) = &r.baseline {
        let outcome = if b.ok {
            Outcome::Pass
        } else {
            Outcome::Failure {
                message: format!(
                    "{} against the baseline",
                    plural(b.regressions.len() as u64, "regression", "regressions")
                ),
                text: b.regressions.join("\n"),
            }
        };
        let out = if b.improvements.is_empty() {
            String::new()
        } else {
            format!("improvements:\n{}", b.improvements.join("\n"))
        };
        cases.push(Case {
            classname: "tpuscope.baseline",
            name: "baseline".into(),
            outcome,
            out,
        });
    }
    if cases.is_empty() {
        // Nothing was asked to gate: report the findings without failing (the exit status is 0).
        // The usual kinds always get a case (stable names); rarer ones (per-host, dynamo) only
        // when present.
        let mut kinds: Vec<FindingKind> = FINDING_KINDS.to_vec();
        let mut extra: Vec<FindingKind> = r
            .findings
            .iter()
            .map(|f| f.kind)
            .filter(|k| !FINDING_KINDS.contains(k))
            .collect();
        extra.sort_unstable();
        extra.dedup();
        kinds.extend(extra);
        for kind in kinds {
            // Each finding as the report words it: `kind at LOC`, what happened, `fix:`.
            let lines: Vec<String> = r
                .findings
                .iter()
                .enumerate()
                .filter(|(_, f)| f.kind == kind)
                .map(|(i, f)| present::finding(i + 1, f).plain_lines().join("\n  "))
                .collect();
            cases.push(Case {
                classname: "tpuscope.findings",
                name: kind.to_string(),
                outcome: Outcome::Pass,
                out: if lines.is_empty() {
                    format!("no {kind} findings")
                } else {
                    lines.join("\n")
                },
            });
        }
    }
    cases
}

pub fn render(r: &Report) -> String {
    let cases = cases(r);
    let failures = cases
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Failure { .. }))
        .count();
    let skipped = cases
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Skipped { .. }))
        .count();
    let mut o = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        o,
        "<testsuite name=\"tpuscope\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\">",
        cases.len()
    );
    o.push_str("  <properties>\n");
    for t in &r.traces {
        let _ = writeln!(
            o,
            "    <property name=\"trace\" value=\"{}\"/>",
            attr(&t.path)
        );
    }
    let _ = writeln!(
        o,
        "    <property name=\"findings\" value=\"{}\"/>",
        r.findings.len()
    );
    o.push_str("  </properties>\n");
    for c in &cases {
        let _ = write!(
            o,
            "  <testcase classname=\"{}\" name=\"{}\"",
            c.classname,
            attr(&c.name)
        );
        if matches!(c.outcome, Outcome::Pass) && c.out.is_empty() {
            o.push_str("/>\n");
            continue;
        }
        o.push_str(">\n");
        match &c.outcome {
            Outcome::Pass => {}
            Outcome::Failure { message, text: t } => {
                let _ = writeln!(
                    o,
                    "    <failure message=\"{}\" type=\"tpuscope\">{}</failure>",
                    attr(message),
                    text(t)
                );
            }
            Outcome::Skipped { message } => {
                let _ = writeln!(o, "    <skipped message=\"{}\"/>", attr(message));
            }
        }
        if !c.out.is_empty() {
            let _ = writeln!(o, "    <system-out>{}</system-out>", text(&c.out));
        }
        o.push_str("  </testcase>\n");
    }
    o.push_str("</testsuite>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_markup_quotes_and_control_characters() {
        assert_eq!(text("a<b & c>d"), "a&lt;b &amp; c&gt;d");
        assert_eq!(
            attr("say \"hi\" 'x'\n"),
            "say &quot;hi&quot; &apos;x&apos;&#10;"
        );
        assert_eq!(text("bell\u{7}"), "bell\u{FFFD}");
        assert_eq!(attr("nul\u{0}"), "nul\u{FFFD}");
    }

    #[test]
    fn rarer_finding_kinds_get_their_own_case_after_the_usual_ones() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../sample_traces/real/jax_lr.tps");
        let trace = tpuscope_core::reader::read_trace_file(&path).unwrap();
        let mut r = tpuscope_analyzers::report::analyze(&[tpuscope_analyzers::report::Input::new(
            path.display().to_string(),
            &trace,
        )]);
        use tpuscope_analyzers::report::FindingKind;
        for kind in [
            FindingKind::Host,
            FindingKind::GraphBreak,
            FindingKind::Host,
        ] {
            r.findings.push(tpuscope_analyzers::report::Finding {
                kind,
                title: format!("a {kind} finding"),
                source: None,
                suggestion: "fix it".into(),
            });
        }
        let names: Vec<String> = cases(&r).into_iter().map(|c| c.name).collect();
        assert_eq!(
            names,
            [
                "recompile",
                "sync",
                "cache",
                "hbm",
                "oom",
                "graph_break",
                "host"
            ]
        );
    }
}
