//! The Markdown report, for a CI step summary ($GITHUB_STEP_SUMMARY): a status line first, then
//! findings and tables.

use std::fmt::Write as _;
use tpuscope_analyzers::hosts;

use tpuscope_analyzers::report::{Report, failed};

use super::fmt::{self, bytes, loc, ms, num, plural};

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

fn row(out: &mut String, cells: &[String]) {
    let _ = writeln!(out, "| {} |", cells.join(" | "));
}

fn table_head(out: &mut String, head: &[&str], right: &[bool]) {
    let _ = writeln!(out, "| {} |", head.join(" | "));
    let seps: Vec<&str> = head
        .iter()
        .enumerate()
        .map(|(i, _)| {
            if right.get(i) == Some(&true) {
                "---:"
            } else {
                "---"
            }
        })
        .collect();
    let _ = writeln!(out, "|{}|", seps.join("|"));
}

pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let title = match r.traces.as_slice() {
        [one] => code(
            std::path::Path::new(&one.path)
                .file_name()
                .map_or(one.path.as_str(), |n| n.to_str().unwrap_or(&one.path)),
            Ctx::Prose,
        ),
        all => format!("{} traces", all.len()),
    };
    let _ = writeln!(o, "## tpuscope report: {title}\n");
    status(&mut o, r);
    traces(&mut o, r);
    if !r.warnings.is_empty() {
        o.push('\n');
        for w in &r.warnings {
            let _ = writeln!(o, "> ⚠️ {}", md(w, Ctx::Prose));
        }
    }
    findings(&mut o, r);
    recompiles(&mut o, r);
    dynamo(&mut o, r);
    syncs(&mut o, r);
    hosts(&mut o, r);
    summary(&mut o, r);
    budgets(&mut o, r);
    baseline(&mut o, r);
    o
}

fn status(o: &mut String, r: &Report) {
    let n = r.findings.len() as u64;
    let findings = if n == 0 {
        "no findings".to_string()
    } else {
        plural(n, "finding", "findings")
    };
    let line = if r.budgets.is_empty() && r.baseline.is_none() {
        if n == 0 {
            "✅ **No findings.**".to_string()
        } else {
            format!("⚠️ **{findings}** (no budgets checked)")
        }
    } else if failed(r) {
        format!(
            "❌ **{}** · {findings}",
            md(&fmt::failure_summary(r), Ctx::Prose)
        )
    } else {
        let mut parts = Vec::new();
        if !r.budgets.is_empty() {
            parts.push(format!(
                "{} within limits",
                plural(r.budgets.len() as u64, "budget", "budgets")
            ));
        }
        if r.baseline.is_some() {
            parts.push("no regressions against the baseline".to_string());
        }
        format!("✅ **passed**: {} · {findings}", parts.join(", "))
    };
    let _ = writeln!(o, "{line}\n");
    let c = &r.compiles;
    let _ = writeln!(
        o,
        "{} ({} ms) · {} · {} · {}",
        plural(c.total, "compile", "compiles"),
        ms(c.compile_ms),
        plural(c.recompiles, "recompile", "recompiles"),
        plural(fmt::sync_total(r), "host sync", "host syncs"),
        plural(r.steps.count, "step", "steps"),
    );
}

fn traces(o: &mut String, r: &Report) {
    o.push('\n');
    for t in &r.traces {
        let state = match t.completeness.as_str() {
            "complete" => String::new(),
            "cut" => " · ⚠️ **cut** (partial)".to_string(),
            other => format!(" · ⚠️ **{}** (partial)", md(other, Ctx::Prose)),
        };
        let frontend = if t.frontend.is_empty() {
            "unknown frontend"
        } else {
            &t.frontend
        };
        let _ = writeln!(
            o,
            "- {}: {} · pid {} on {} · plugin {}{state}",
            code(&t.path, Ctx::Prose),
            md(frontend, Ctx::Prose),
            t.pid,
            md(&t.host, Ctx::Prose),
            code(fmt::plugin(&t.plugin), Ctx::Prose),
        );
    }
    if r.traces.len() > 1 {
        let _ = writeln!(o, "- assumed: {}", md(&r.runs.note, Ctx::Prose));
    }
}

fn findings(o: &mut String, r: &Report) {
    let _ = writeln!(o, "\n### Findings\n");
    if r.findings.is_empty() {
        let _ = writeln!(o, "No findings.");
        return;
    }
    for (i, f) in r.findings.iter().enumerate() {
        let at = f
            .source
            .as_ref()
            .map(|s| format!(" at {}", code(&loc(s), Ctx::Prose)))
            .unwrap_or_default();
        let _ = writeln!(
            o,
            "{}. **{}**{at}: {}  \n   fix: {}",
            i + 1,
            md(f.kind.as_str(), Ctx::Prose),
            md(&f.title, Ctx::Prose),
            md(&f.suggestion, Ctx::Prose)
        );
    }
}

fn recompiles(o: &mut String, r: &Report) {
    let _ = writeln!(o, "\n### Recompiles\n");
    if r.recompiles.is_empty() {
        let _ = writeln!(o, "No recompiles.");
        return;
    }
    table_head(
        o,
        &[
            "graph",
            "compiles",
            "cause",
            "source",
            "compile ms",
            "details",
        ],
        &[false, true, false, false, true, false],
    );
    for f in &r.recompiles {
        let cause = match f.not_a_finding() {
            None => code(f.cause.as_str(), Ctx::Cell),
            Some(why) => format!(
                "{} ({})",
                code(f.cause.as_str(), Ctx::Cell),
                md(&why, Ctx::Cell)
            ),
        };
        row(
            o,
            &[
                code(&f.graph, Ctx::Cell),
                f.count.to_string(),
                cause,
                f.source
                    .as_ref()
                    .map_or_else(String::new, |s| code(&loc(s), Ctx::Cell)),
                ms(f.compile_ms),
                md(&f.details, Ctx::Cell),
            ],
        );
    }
}

fn syncs(o: &mut String, r: &Report) {
    let _ = writeln!(o, "\n### Host syncs\n");
    if r.syncs.is_empty() {
        let _ = writeln!(o, "No host syncs in the loop.");
        return;
    }
    table_head(
        o,
        &["line", "count", "bytes", "stall ms", "per step", "read"],
        &[false, true, true, true, true, false],
    );
    for s in &r.syncs {
        let line = match (&s.source, &s.innermost) {
            (Some(src), _) => code(&loc(src), Ctx::Cell),
            (None, Some(inner)) => format!("(no user frame) {}", code(&loc(inner), Ctx::Cell)),
            (None, None) => "(no stack)".to_string(),
        };
        let what: Vec<String> = s.what.iter().map(|w| code(w, Ctx::Cell)).collect();
        row(
            o,
            &[
                line,
                s.count.to_string(),
                bytes(i64::try_from(s.bytes).unwrap_or(i64::MAX)),
                ms(s.stall_ms),
                s.per_step
                    .map_or_else(|| "-".to_string(), |p| format!("{p:.2}")),
                what.join(", "),
            ],
        );
    }
}

/// The per-host table of a multi-host job.
fn hosts(o: &mut String, r: &Report) {
    let Some(h) = &r.hosts else { return };
    let _ = writeln!(o, "\n### Hosts\n");
    table_head(o, &hosts::TABLE_COLUMNS, &hosts::TABLE_NUMERIC);
    for x in &h.hosts {
        let mut cells = x.cells();
        cells[1] = code(&x.host, Ctx::Cell);
        row(o, &cells);
    }
    if !h.stragglers.is_empty() || !h.recompiles_alone.is_empty() {
        o.push('\n');
    }
    for s in &h.stragglers {
        let _ = writeln!(
            o,
            "- Straggler: {} (process {}): {}",
            code(&s.host, Ctx::Prose),
            s.process_index,
            md(&s.details, Ctx::Prose)
        );
    }
    for a in &h.recompiles_alone {
        let _ = writeln!(
            o,
            "- Recompiles alone: {} (process {}) compiles {} {}×, the others at most {}×",
            code(&a.host, Ctx::Prose),
            a.process_index,
            code(&a.graph, Ctx::Prose),
            a.compiles,
            a.others_max
        );
    }
}

fn summary(o: &mut String, r: &Report) {
    let _ = writeln!(o, "\n### Steps, cache, memory, errors\n");
    let s = &r.steps;
    if s.count == 0 {
        let _ = writeln!(o, "- Steps: none detected");
    } else {
        let _ = writeln!(
            o,
            "- Steps: {} ({}); worst in the steady state: {}, {} per step",
            s.count,
            md(&s.detected_by, Ctx::Prose),
            plural(
                s.graph_fragments_per_step,
                "graph fragment",
                "graph fragments"
            ),
            plural(s.syncs_per_step, "host sync", "host syncs")
        );
    }
    let phases = tpuscope_analyzers::report::phases_lines(r);
    if phases.is_empty() {
        let _ = writeln!(o, "- Phases: unknown (no training loop found)");
    }
    for (run, l) in phases.iter().enumerate() {
        let which = if phases.len() > 1 {
            format!(" (run {run})")
        } else {
            String::new()
        };
        let _ = writeln!(o, "- Phases{which}: {}", md(l, Ctx::Prose));
    }
    if let Some(l) = tpuscope_analyzers::report::setup_compile_line(r) {
        let _ = writeln!(o, "- Compile time: {}", md(&l, Ctx::Prose));
    }
    let c = &r.cache;
    let _ = writeln!(
        o,
        "- Cache: {} persistent hits, {} stores, {} deserialize failures; {} compiles of an already-compiled program",
        c.persistent_hits, c.persistent_stores, c.deserialize_failures, c.recompiled_same_program
    );
    for f in &c.failures {
        let _ = writeln!(o, "  - {}× {}", f.count, md(&f.message, Ctx::Prose));
    }
    if r.hbm.is_empty() {
        let _ = writeln!(o, "- Device memory: not reported by this plugin");
    }
    for d in &r.hbm {
        let limit = match (d.limit_bytes, d.peak_fraction) {
            (Some(l), Some(f)) => format!(" ({} of {})", fmt::percent(f), bytes(l)),
            _ => ", limit not reported".to_string(),
        };
        let _ = writeln!(
            o,
            "- Device {} memory: peak {}{limit}",
            d.device,
            bytes(d.peak_bytes)
        );
    }
    if let Some(x) = &r.oom {
        let _ = writeln!(
            o,
            "- ❌ Out of device memory at {} ms in {}: {}",
            ms(x.t_ms),
            md(&x.api, Ctx::Prose),
            md(fmt::first_line(&x.message), Ctx::Prose)
        );
    }
    if r.errors.is_empty() {
        let _ = writeln!(o, "- Errors: none");
    } else {
        let _ = writeln!(o, "- Errors:");
        for e in &r.errors {
            let _ = writeln!(
                o,
                "  - {}× {}: {}",
                e.count,
                md(&e.api, Ctx::Prose),
                md(&e.message, Ctx::Prose)
            );
        }
    }
}

fn budgets(o: &mut String, r: &Report) {
    if r.budgets.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n### Budgets\n");
    table_head(
        o,
        &["budget", "limit", "actual", "status"],
        &[false, true, true, false],
    );
    for b in &r.budgets {
        row(
            o,
            &[
                code(&b.name, Ctx::Cell),
                num(b.limit),
                b.actual.map_or_else(|| "?".to_string(), num),
                match b.status.as_str() {
                    "ok" => "✅ ok".to_string(),
                    "exceeded" => "❌ exceeded".to_string(),
                    "unknown" => "❔ unknown".to_string(),
                    other => md(other, Ctx::Cell),
                },
            ],
        );
    }
}

fn baseline(o: &mut String, r: &Report) {
    let Some(b) = &r.baseline else { return };
    let _ = writeln!(o, "\n### Baseline\n");
    if b.regressions.is_empty() && b.improvements.is_empty() {
        let _ = writeln!(o, "No change against the baseline.");
    }
    for x in &b.regressions {
        let _ = writeln!(o, "- ❌ {}", md(x, Ctx::Prose));
    }
    for x in &b.improvements {
        let _ = writeln!(o, "- ✅ {}", md(x, Ctx::Prose));
    }
}

/// dynamo's graph breaks and guard failures (TORCH_TRACE), with the PJRT compiles they caused.
fn dynamo(o: &mut String, r: &Report) {
    let Some(d) = &r.dynamo else { return };
    let _ = writeln!(o, "\n### Dynamo (TORCH_TRACE)\n");
    for l in d.logs.iter().filter(|l| !l.note.is_empty()) {
        let _ = writeln!(
            o,
            "> {}: {}\n",
            code(&l.dir, Ctx::Prose),
            md(&l.note, Ctx::Prose)
        );
    }
    if d.graph_breaks.is_empty() && d.guard_failures.is_empty() {
        let _ = writeln!(
            o,
            "No graph breaks or guard failures ({}).",
            plural(
                d.frame_compiles.len() as u64,
                "frame compile",
                "frame compiles"
            )
        );
        return;
    }
    table_head(
        o,
        &["event", "line", "count", "reason", "PJRT compiles caused"],
        &[false, false, true, false, false],
    );
    let compiles = |c: &[tpuscope_analyzers::torch_trace::CausedCompile]| {
        c.iter()
            .map(|c| format!("{} {}", c.compile_id, code(&c.graph, Ctx::Cell)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let at = |s: Option<&tpuscope_analyzers::SourceLoc>| {
        s.map_or_else(String::new, |s| code(&loc(s), Ctx::Cell))
    };
    for g in &d.graph_breaks {
        row(
            o,
            &[
                "graph break".into(),
                at(g.source.as_ref()),
                g.count.to_string(),
                md(&g.reason, Ctx::Cell),
                compiles(&g.compiles),
            ],
        );
    }
    for g in &d.guard_failures {
        let guards: Vec<String> = g.guards.iter().map(|x| code(x, Ctx::Cell)).collect();
        row(
            o,
            &[
                "guard failure".into(),
                at(g.source.as_ref()),
                g.count.to_string(),
                guards.join(", "),
                compiles(&g.compiles),
            ],
        );
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
