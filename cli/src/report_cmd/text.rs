//! The text report: what a tired engineer reads in ten seconds, most important first.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use tpuscope_analyzers::hosts;

use tpuscope_analyzers::report::{self, FamilyReport, Report, TraceInfo};

use super::fmt::{self, bytes, loc, loc_fn, ms, num, plural};

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

    fn paint(&self, code: &str, s: &str) -> String {
        if self.color && !s.is_empty() {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    fn bold(&self, s: &str) -> String {
        self.paint("1", s)
    }
    fn dim(&self, s: &str) -> String {
        self.paint("2", s)
    }
    fn red(&self, s: &str) -> String {
        self.paint("1;31", s)
    }
    fn green(&self, s: &str) -> String {
        self.paint("32", s)
    }
    fn yellow(&self, s: &str) -> String {
        self.paint("33", s)
    }
    fn cyan(&self, s: &str) -> String {
        self.paint("36", s)
    }
}

/// The terminal's width from COLUMNS (shells set it), else 100; prose wraps at it.
fn columns() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .map_or(100, |c| c.clamp(60, 200))
}

struct Out<'a> {
    s: String,
    st: &'a Style,
}

impl Out<'_> {
    fn line(&mut self, l: &str) {
        self.s.push_str(l);
        self.s.push('\n');
    }

    fn blank(&mut self) {
        self.s.push('\n');
    }

    /// A section title, with its one-line content when it has no more.
    fn section(&mut self, title: &str, rest: &str) {
        self.blank();
        let t = self.st.bold(title);
        if rest.is_empty() {
            self.line(&t);
        } else {
            self.line(&format!("{t}: {rest}"));
        }
    }

    /// `text` word-wrapped at the width, after an (already painted) label of `label_len`
    /// visible characters; continuation lines align under the text.
    fn para(&mut self, indent: usize, label: &str, label_len: usize, text: &str) {
        let pad = if label_len > 0 {
            indent + label_len + 1
        } else {
            indent
        };
        let avail = self.st.width.saturating_sub(pad).max(40);
        let mut lines = wrap(text, avail).into_iter();
        let first = lines.next().unwrap_or_default();
        let head = if label_len > 0 {
            format!("{}{label} {first}", " ".repeat(indent))
        } else {
            format!("{}{first}", " ".repeat(indent))
        };
        self.line(head.trim_end());
        for l in lines {
            self.line(&format!("{}{l}", " ".repeat(pad)));
        }
    }

    /// A table of plain cells; `right[i]` right-aligns column i. The last column is never
    /// padded, so it may hold painted text.
    fn table(&mut self, indent: usize, header: &[&str], rows: &[Vec<String>], right: &[bool]) {
        let n = header.len();
        let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        for r in rows {
            for (i, c) in r.iter().enumerate().take(n.saturating_sub(1)) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let fmt_row = |cells: &[String]| {
            let mut l = " ".repeat(indent);
            for (i, c) in cells.iter().enumerate().take(n) {
                if i + 1 == n {
                    l.push_str(c);
                    break;
                }
                let fill = " ".repeat(w[i].saturating_sub(c.chars().count()));
                if right.get(i) == Some(&true) {
                    let _ = write!(l, "{fill}{c}  ");
                } else {
                    let _ = write!(l, "{c}{fill}  ");
                }
            }
            l.trim_end().to_string()
        };
        let head: Vec<String> = header.iter().map(|h| h.to_string()).collect();
        let head = self.st.dim(&fmt_row(&head));
        self.line(&head);
        for r in rows {
            let l = fmt_row(r);
            self.line(&l);
        }
    }
}

/// Greedy word wrap by characters; a word longer than the width gets a line of its own.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    let mut cur_len = 0;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if cur_len > 0 && cur_len + 1 + len > width {
            lines.push(std::mem::take(&mut cur));
            cur_len = 0;
        }
        if cur_len > 0 {
            cur.push(' ');
            cur_len += 1;
        }
        cur.push_str(word);
        cur_len += len;
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur);
    }
    lines
}

pub fn render(r: &Report, st: &Style) -> String {
    let mut o = Out {
        s: String::new(),
        st,
    };
    header(&mut o, r);
    warnings(&mut o, r);
    findings(&mut o, r);
    phases(&mut o, r);
    recompiles(&mut o, r);
    dynamo(&mut o, r);
    syncs(&mut o, r);
    steps(&mut o, r);
    hosts(&mut o, r);
    cache(&mut o, r);
    memory(&mut o, r);
    oom(&mut o, r);
    errors(&mut o, r);
    budgets(&mut o, r);
    baseline(&mut o, r);
    if !r.budgets.is_empty() || r.baseline.is_some() {
        verdict(&mut o, r);
    }
    o.s
}

fn completeness(o: &Out<'_>, t: &TraceInfo) -> String {
    match t.completeness.as_str() {
        "complete" => "complete".to_string(),
        "cut" => o.st.yellow("CUT: truncated file, partial report"),
        "no_end_record" => {
            o.st.yellow("no end record: the process died or is still running, partial report")
        }
        other => o.st.yellow(other),
    }
}

fn header(o: &mut Out<'_>, r: &Report) {
    let many = r.traces.len() > 1;
    let title = match r.traces.as_slice() {
        [one] => format!("tpuscope report: {}", one.path),
        all => format!("tpuscope report: {} traces", all.len()),
    };
    let title = o.st.bold(&title);
    o.line(&title);
    for t in &r.traces {
        let indent = if many {
            o.line(&format!("  run {}: {}", t.run, t.path));
            "    "
        } else {
            "  "
        };
        let frontend = if t.frontend.is_empty() {
            "unknown frontend"
        } else {
            t.frontend.as_str()
        };
        let dropped = if t.dropped_events > 0 {
            o.st.yellow(&format!(", {} dropped", t.dropped_events))
        } else {
            String::new()
        };
        let process = if t.job_id.is_empty() {
            String::new()
        } else {
            format!(", job {} process {}", t.job_id, t.process_index)
        };
        let c = completeness(o, t);
        o.line(&format!(
            "{indent}{} · pid {} on {}{process} · {c} ({} events{dropped})",
            o.st.cyan(frontend),
            t.pid,
            if t.host.is_empty() { "?" } else { &t.host },
            t.events,
        ));
        o.line(&format!(
            "{indent}plugin {} (PJRT {})",
            fmt::plugin(&t.plugin),
            t.pjrt_api
        ));
        if !t.command.is_empty() {
            let cmd = o.st.dim(&format!("{indent}$ {}", t.command));
            o.line(&cmd);
        }
    }
    if many {
        o.line(&format!("  assumed: {}", r.runs.note));
    }
    let c = &r.compiles;
    let warmup = if c.warmup_recompiles > 0 {
        format!(" (+{} outside the steady state)", c.warmup_recompiles)
    } else {
        String::new()
    };
    let failed = if c.failed > 0 {
        o.st.red(&format!(", {} failed", c.failed))
    } else {
        String::new()
    };
    let ops = if c.op_compiles > 0 {
        format!(" + {}", plural(c.op_compiles, "eager op", "eager ops"))
    } else {
        String::new()
    };
    o.line(&format!(
        "  {} ({} ms{failed}) of {}{ops} · {}{warmup} · {} · {}",
        plural(c.total, "compile", "compiles"),
        ms(c.compile_ms),
        plural(c.families, "graph", "graphs"),
        plural(c.recompiles, "recompile", "recompiles"),
        plural(fmt::sync_total(r), "host sync", "host syncs"),
        plural(r.steps.count, "step", "steps"),
    ));
}

fn warnings(o: &mut Out<'_>, r: &Report) {
    if r.warnings.is_empty() {
        return;
    }
    let t = o.st.yellow("Warnings");
    o.blank();
    o.line(&t);
    let bang = o.st.yellow("!");
    for w in &r.warnings {
        o.para(2, &bang, 1, w);
    }
}

fn findings(o: &mut Out<'_>, r: &Report) {
    o.blank();
    if r.findings.is_empty() {
        // A partial trace is not a clean run: say what the verdict covers.
        let t = if r.traces.iter().all(|t| t.completeness == tpuscope_analyzers::report::TraceCompleteness::Complete) {
            o.st.paint("1;32", "No findings.")
        } else {
            o.st.yellow("No findings in what the trace holds (it is partial: see the warnings).")
        };
        o.line(&t);
        return;
    }
    let t = o.st.bold(&format!("Findings ({})", r.findings.len()));
    o.line(&t);
    for (i, f) in r.findings.iter().enumerate() {
        let at = f
            .source
            .as_ref()
            .map(|s| format!(" at {}", o.st.bold(&loc(s))))
            .unwrap_or_default();
        let kind = o.st.red(f.kind.as_str());
        o.line(&format!("  {:>2}. {kind}{at}", i + 1));
        o.para(6, "", 0, &f.title);
        let label = o.st.green("fix:");
        o.para(6, &label, 4, &f.suggestion);
    }
}

/// Set-up, steady state and tail, the compile time before the steady state (always said), and
/// the eager ops compiled outside it by the line that asked.
fn phases(o: &mut Out<'_>, r: &Report) {
    let lines = report::phases_lines(r);
    if lines.is_empty() {
        o.section(
            "Phases",
            "unknown: no training loop found (no step markers and no graph launched repeatedly)",
        );
        return;
    }
    let many = r.traces.len() > 1;
    if many {
        o.section("Phases", "");
        for (run, l) in lines.iter().enumerate() {
            o.line(&format!("  run {run}: {l}"));
        }
    } else {
        o.section("Phases", &lines[0]);
    }
    if let Some(l) = report::setup_compile_line(r) {
        o.para(2, "", 0, &l);
    }
    for p in r.phases.iter().filter(|p| p.op_compiles > 0) {
        let run = if many {
            format!(" (run {})", p.run)
        } else {
            String::new()
        };
        let title = o.st.dim(&format!(
            "  eager ops in the {}{run}: {} in {} ms, by line:",
            p.phase.as_str(),
            plural(p.op_compiles, "compile", "compiles"),
            ms(p.op_sites.iter().map(|s| s.compile_ms).sum())
        ));
        o.line(&title);
        let rows: Vec<Vec<String>> = p
            .op_sites
            .iter()
            .map(|s| {
                let line = s
                    .source
                    .as_ref()
                    .map_or_else(|| "(no user frame)".to_string(), loc_fn);
                let inside = s
                    .library
                    .as_ref()
                    .map(|l| format!("in {} ", loc_fn(l)))
                    .unwrap_or_default();
                vec![
                    line,
                    s.compiles.to_string(),
                    ms(s.compile_ms),
                    format!("{inside}{}", s.ops.join(", ")),
                ]
            })
            .collect();
        o.table(
            4,
            &["line", "compiles", "ms", "ops"],
            &rows,
            &[false, true, true, false],
        );
    }
}

/// At most this many members of a family are listed; the JSON has them all.
const MAX_MEMBERS: usize = 12;

fn recompiles(o: &mut Out<'_>, r: &Report) {
    if r.recompiles.is_empty() {
        let each = match r.compiles.families {
            0 => "nothing compiled".to_string(),
            1 => "the graph compiled once".to_string(),
            n => format!("each of {n} graphs compiled once"),
        };
        o.section("Recompiles", &format!("no recompiles ({each})"));
        return;
    }
    let c = &r.compiles;
    let causes: Vec<String> = c.by_cause.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let mut rest = if c.recompiles == 0 {
        "none in the steady state".to_string()
    } else {
        format!(
            "{} recompiled in the steady state, {}",
            plural(c.recompile_families, "graph", "graphs"),
            plural(c.recompiles, "recompile", "recompiles")
        )
    };
    if !causes.is_empty() {
        let _ = write!(rest, " ({})", causes.join(", "));
    }
    if c.warmup_recompiles > 0 {
        let _ = write!(
            rest,
            "; {} outside the steady state (set-up, warm-up steps, tail: not findings)",
            plural(c.warmup_recompiles, "recompile", "recompiles")
        );
    }
    o.section("Recompiles", &rest);
    let many_runs = r.traces.len() > 1;
    for f in &r.recompiles {
        family(o, f, many_runs);
    }
}

fn family(o: &mut Out<'_>, f: &FamilyReport, many_runs: bool) {
    let run = if many_runs {
        format!(" (run {})", f.run)
    } else {
        String::new()
    };
    let warmup = match (&f.recompiled_with, f.finding) {
        (Some(w), _) => {
            o.st.dim(&format!(" — recompiled with {w}: part of its finding"))
        }
        (None, true) => String::new(),
        (None, false) => o.st.dim(" — outside the steady state, not a finding"),
    };
    let graph = o.st.bold(&f.graph);
    let cause = if f.finding {
        o.st.red(f.cause.as_str())
    } else {
        f.cause.as_str().to_string()
    };
    o.line(&format!(
        "  {graph}{run}: {}× {cause}, {} ms compiling{warmup}",
        f.count,
        ms(f.compile_ms)
    ));
    if let Some(s) = &f.source {
        let s = o.st.bold(&loc_fn(s));
        o.line(&format!("    at {s}"));
    }
    if !f.details.is_empty() {
        let l = o.st.dim("details:");
        o.para(4, &l, 8, &f.details);
    }
    if !f.suggestion.is_empty() {
        let l = o.st.green("fix:");
        o.para(4, &l, 4, &f.suggestion);
    }
    let mut rows = Vec::new();
    for (i, m) in f.members.iter().enumerate().take(MAX_MEMBERS) {
        let change = match (&m.diff, m.against) {
            // Compared with an earlier member than the one before it: say which.
            (Some(d), Some(j)) if j + 1 != i => format!("vs #{}: {}", j + 1, d.summary),
            (Some(d), _) => d.summary.clone(),
            (None, _) if m.parameters.is_empty() => String::new(),
            (None, _) => format!("args {}", m.parameters.join(", ")),
        };
        rows.push(vec![
            format!("#{}", i + 1),
            ms(m.t_ms),
            ms(m.compile_ms),
            m.cause
                .map_or_else(|| "first".to_string(), |c| c.to_string()),
            change,
        ]);
    }
    o.table(
        4,
        &["", "at ms", "compile ms", "cause", "change"],
        &rows,
        &[false, true, true, false, false],
    );
    if f.members.len() > MAX_MEMBERS {
        let more = o.st.dim(&format!(
            "    … {} more (see --format json)",
            f.members.len() - MAX_MEMBERS
        ));
        o.line(&more);
    }
}

fn syncs(o: &mut Out<'_>, r: &Report) {
    let waits = if r.runtime_waits > 0 {
        format!(
            "; {} by the runtime's own threads (no Python stack)",
            plural(r.runtime_waits, "wait", "waits")
        )
    } else {
        String::new()
    };
    if r.syncs.is_empty() {
        o.section("Host syncs", &format!("no host syncs in the loop{waits}"));
        return;
    }
    let stall: f64 = r.syncs.iter().map(|s| s.stall_ms).sum();
    o.section(
        "Host syncs",
        &format!(
            "{} from {}, {} ms stalled{waits}",
            plural(fmt::sync_total(r), "sync", "syncs"),
            plural(r.syncs.len() as u64, "line", "lines"),
            ms(stall)
        ),
    );
    let rows: Vec<Vec<String>> = r
        .syncs
        .iter()
        .map(|s| {
            let line = match (&s.source, &s.innermost) {
                (Some(src), _) if s.library.is_some() => format!(
                    "{} → {}",
                    loc_fn(src),
                    s.library.as_ref().map(loc_fn).unwrap_or_default()
                ),
                (Some(src), _) => loc_fn(src),
                (None, Some(inner)) => format!("(no user frame) {}", loc_fn(inner)),
                (None, None) => "(no stack)".to_string(),
            };
            vec![
                line,
                s.count.to_string(),
                bytes(i64::try_from(s.bytes).unwrap_or(i64::MAX)),
                ms(s.stall_ms),
                s.per_step
                    .map_or_else(|| "-".to_string(), |p| format!("{p:.2}")),
                s.what.join(", "),
            ]
        })
        .collect();
    o.table(
        2,
        &["line", "count", "bytes", "stall ms", "per step", "read"],
        &rows,
        &[false, true, true, true, true, false],
    );
}

fn steps(o: &mut Out<'_>, r: &Report) {
    let s = &r.steps;
    if s.count == 0 {
        o.section(
            "Steps",
            "none detected (no step markers and no repeating executable)",
        );
        return;
    }
    o.section(
        "Steps",
        &format!("{}, detected by {}", s.count, s.detected_by),
    );
    if s.count < 2 {
        o.line("  only one step: no steady state to compare");
        return;
    }
    o.line(&format!(
        "  steady state: up to {} per step (mean {:.1})",
        plural(
            s.graph_fragments_per_step,
            "graph fragment",
            "graph fragments"
        ),
        s.mean_graph_fragments_per_step,
    ));
    o.line(&format!(
        "                up to {} per step (mean {:.2}), {} in all",
        plural(s.syncs_per_step, "host sync", "host syncs"),
        s.mean_syncs_per_step,
        plural(s.compiles_after_first_step, "compile", "compiles"),
    ));
    // Warm-up steps carry the loop's own compiles: not a fair comparison.
    let slowest = s
        .per_step
        .iter()
        .filter(|p| p.steady)
        .max_by(|a, b| a.dur_ms.total_cmp(&b.dur_ms));
    if let Some(p) = slowest {
        let run = if r.traces.len() > 1 {
            format!(" of run {}", p.run)
        } else {
            String::new()
        };
        o.line(&format!(
            "  slowest in the steady state: step {}{run}, {} ms ({}, {}, {}, {} ms stalled)",
            p.number,
            ms(p.dur_ms),
            plural(u64::from(p.executes), "execute", "executes"),
            plural(u64::from(p.syncs), "sync", "syncs"),
            plural(u64::from(p.compiles), "compile", "compiles"),
            ms(p.stall_ms)
        ));
    }
}

/// The per-host table of a multi-host job.
fn hosts(o: &mut Out<'_>, r: &Report) {
    let Some(h) = &r.hosts else { return };
    o.section("Hosts", &plural(h.hosts.len() as u64, "host", "hosts"));
    // Offsets are ~1.7e18 ns (wall − uptime): what matters is how far each host's clock is
    // from the first one's.
    let base = h.hosts.first().map_or(0, |x| x.clock_offset_ns);
    let rows: Vec<Vec<String>> = h
        .hosts
        .iter()
        .map(|x| {
            let mut cells = x.cells().to_vec();
            cells.push(format!(
                "{:+.3} ms ({})",
                (x.clock_offset_ns - base) as f64 / 1e6,
                x.alignment
            ));
            cells
        })
        .collect();
    let columns: Vec<&str> = hosts::TABLE_COLUMNS
        .iter()
        .copied()
        .chain(["clock vs first"])
        .collect();
    let numeric: Vec<bool> = hosts::TABLE_NUMERIC
        .iter()
        .copied()
        .chain([false])
        .collect();
    o.table(2, &columns, &rows, &numeric);
    for s in &h.stragglers {
        o.line(&format!(
            "  straggler: {} (process {}): {}",
            s.host, s.process_index, s.details
        ));
    }
    for a in &h.recompiles_alone {
        o.line(&format!(
            "  recompiles alone: {} (process {}) compiles {} {}×, the others at most {}×",
            a.host, a.process_index, a.graph, a.compiles, a.others_max
        ));
    }
}

fn cache(o: &mut Out<'_>, r: &Report) {
    let c = &r.cache;
    o.section("Cache", "");
    o.line(&format!(
        "  in memory: {} run, {}",
        plural(c.executables_run, "executable", "executables"),
        plural(c.in_memory_reuse, "reuse", "reuses")
    ));
    let failures = if c.deserialize_failures > 0 {
        o.st.red(&plural(
            c.deserialize_failures,
            "deserialize failure",
            "deserialize failures",
        ))
    } else {
        "0 deserialize failures".to_string()
    };
    o.line(&format!(
        "  persistent: {}, {}, {failures}",
        plural(c.persistent_hits, "hit", "hits"),
        plural(c.persistent_stores, "store", "stores")
    ));
    for f in &c.failures {
        let x = o.st.red("✗");
        o.para(4, &x, 1, &format!("{}× {}", f.count, f.message));
    }
    let again = format!(
        "  compiles of an already-compiled program (misses that should have been hits): {}",
        c.recompiled_same_program
    );
    let again = if c.recompiled_same_program > 0 {
        o.st.yellow(&again)
    } else {
        again
    };
    o.line(&again);
    for s in &c.stored_but_recompiled {
        o.line(&format!(
            "    {}: stored in run {}, compiled again in run {} (written, never read back)",
            s.graph, s.stored_in_run, s.recompiled_in_run
        ));
    }
}

fn memory(o: &mut Out<'_>, r: &Report) {
    o.section("Device memory", "");
    let many_runs = r.traces.len() > 1;
    if r.hbm.is_empty() {
        o.line("  not reported by this plugin (no memory samples)");
    }
    for d in &r.hbm {
        let run = if many_runs {
            format!(" (run {})", d.run)
        } else {
            String::new()
        };
        let mut l = format!("  device {}{run}: peak {}", d.device, bytes(d.peak_bytes));
        match (d.limit_bytes, d.peak_fraction) {
            (Some(limit), Some(f)) => {
                let share = format!("{} of {}", fmt::percent(f), bytes(limit));
                let share = if f >= 0.9 { o.st.red(&share) } else { share };
                let _ = write!(l, " ({share})");
            }
            (Some(limit), None) => {
                let _ = write!(l, " of {}", bytes(limit));
            }
            _ => l.push_str(", limit not reported"),
        }
        if let Some(g) = d.growth_bytes_per_step {
            // Sub-byte slopes are fitting noise.
            let g = g.round() as i64;
            let sign = if g > 0 { "+" } else { "" };
            let _ = write!(l, ", {sign}{}/step", bytes(g));
        }
        o.line(&l);
        if d.origin == "live_buffers" {
            let note = o.st.dim(
                "    counted by tpuscope from live buffers: this plugin reports no memory stats",
            );
            o.line(&note);
        }
    }
    // One entry per graph (its largest compile): recompiles repeat the same executable.
    let mut seen = BTreeSet::new();
    let top: Vec<String> = r
        .compiled_memory
        .iter()
        .filter(|e| seen.insert(e.graph.as_str()))
        .take(5)
        .map(|e| {
            let temp = if e.temp_bytes > 0 {
                format!(" (temp {})", bytes(e.temp_bytes))
            } else {
                String::new()
            };
            format!("{} {}{temp}", e.graph, bytes(e.peak_bytes))
        })
        .collect();
    if top.is_empty() {
        o.line("  compiled memory: not reported by this plugin");
    } else {
        let l = o.st.dim("largest compiled:");
        o.para(2, &l, 17, &top.join(" · "));
    }
}

fn oom(o: &mut Out<'_>, r: &Report) {
    let Some(x) = &r.oom else { return };
    o.blank();
    let t = o.st.red("Out of device memory");
    o.line(&t);
    let run = if r.traces.len() > 1 {
        format!(" of run {}", x.run)
    } else {
        String::new()
    };
    o.para(
        2,
        "",
        0,
        &format!(
            "at {} ms{run} in {}: {}",
            ms(x.t_ms),
            x.api,
            fmt::first_line(&x.message)
        ),
    );
    if !x.memory_at_error.is_empty() {
        let m: Vec<String> = x
            .memory_at_error
            .iter()
            .map(|(d, b)| format!("device {d} {}", bytes(*b)))
            .collect();
        o.line(&format!("  in use before it: {}", m.join(", ")));
    }
    if !x.largest_executables.is_empty() {
        o.line("  largest executables:");
        for e in &x.largest_executables {
            o.line(&format!(
                "    {}: peak {}, temp {}, arguments {}, outputs {}",
                e.graph,
                bytes(e.peak_bytes),
                bytes(e.temp_bytes),
                bytes(e.argument_bytes),
                bytes(e.output_bytes)
            ));
        }
    }
    if !x.last_events.is_empty() {
        o.line("  last events before it:");
        for e in &x.last_events {
            o.line(&format!("    {e}"));
        }
    }
}

fn errors(o: &mut Out<'_>, r: &Report) {
    if r.errors.is_empty() {
        o.section("Errors", "none");
        return;
    }
    let n: u64 = r.errors.iter().map(|e| e.count).sum();
    o.section("Errors", &plural(n, "error", "errors"));
    for e in &r.errors {
        let x = o.st.red("✗");
        o.para(2, &x, 1, &format!("{}× {}: {}", e.count, e.api, e.message));
    }
}

fn budgets(o: &mut Out<'_>, r: &Report) {
    if r.budgets.is_empty() {
        return;
    }
    o.section("Budgets", "");
    // Status is the last column: the only one painted, so widths stay right.
    let rows: Vec<Vec<String>> = r
        .budgets
        .iter()
        .map(|b| {
            vec![
                b.name.clone(),
                num(b.limit),
                b.actual.map_or_else(|| "?".to_string(), num),
                match b.status.as_str() {
                    "ok" => o.st.green("ok"),
                    "exceeded" => o.st.red("EXCEEDED"),
                    "unknown" => o.st.yellow("unknown (the trace cannot tell: passes)"),
                    other => other.to_string(),
                },
            ]
        })
        .collect();
    o.table(
        2,
        &["budget", "limit", "actual", "status"],
        &rows,
        &[false, true, true, false],
    );
}

fn baseline(o: &mut Out<'_>, r: &Report) {
    let Some(b) = &r.baseline else { return };
    let head = if b.regressions.is_empty() {
        o.st.green("no regressions")
    } else {
        o.st.red(&plural(
            b.regressions.len() as u64,
            "regression",
            "regressions",
        ))
    };
    o.section("Baseline", &head);
    for x in &b.regressions {
        let m = o.st.red("✗");
        o.para(2, &m, 1, x);
    }
    for x in &b.improvements {
        let m = o.st.green("✓");
        o.para(2, &m, 1, x);
    }
}

/// The verdict of budgets and baseline, last, where a CI log's reader looks.
fn verdict(o: &mut Out<'_>, r: &Report) {
    let s = fmt::failure_summary(r);
    let s = if tpuscope_analyzers::report::failed(r) {
        o.st.red(&s)
    } else {
        o.st.paint("1;32", &s)
    };
    o.blank();
    o.line(&s);
}

/// `0/0 name (12.3 ms), 1/0 other (4.5 ms)`: the PJRT compiles dynamo caused.
fn caused(c: &[tpuscope_analyzers::torch_trace::CausedCompile]) -> String {
    if c.is_empty() {
        return "no PJRT compile (programs reused or loaded)".into();
    }
    c.iter()
        .map(|c| format!("{} {} ({} ms)", c.compile_id, c.graph, ms(c.compile_ms)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// dynamo's account from TORCH_TRACE logs: graph breaks and guard failures at their lines, with
/// the PJRT compiles each caused.
fn dynamo(o: &mut Out<'_>, r: &Report) {
    let Some(d) = &r.dynamo else { return };
    if d.frame_compiles.is_empty() && d.logs.iter().all(|l| l.entries == 0) {
        // No logs (or none of these processes): one line, not a section.
        let notes: Vec<&str> = d.logs.iter().map(|l| l.note.as_str()).collect();
        o.section("Dynamo", &o.st.dim(&notes.join("; ")));
        return;
    }
    let many_runs = r.traces.len() > 1;
    let run = |n: usize| {
        if many_runs {
            format!(" (run {n})")
        } else {
            String::new()
        }
    };
    o.section("Dynamo", &d.headline());
    for l in &d.logs {
        let mut what = format!(
            "{}{}: {}, {}",
            l.dir,
            run(l.run),
            plural(l.files as u64, "file", "files"),
            plural(l.entries, "entry", "entries")
        );
        if l.skipped_lines > 0 {
            let _ = write!(what, ", {} unreadable lines skipped", l.skipped_lines);
        }
        if !l.torch_version.is_empty() {
            let _ = write!(what, ", torch {}", l.torch_version);
        }
        if !l.note.is_empty() {
            let _ = write!(what, " — {}", o.st.yellow(&l.note));
        }
        let label = o.st.dim("logs:");
        o.para(2, &label, 5, &what);
    }
    for g in &d.graph_breaks {
        let at = g.source.as_ref().map_or_else(|| "?".into(), loc);
        let head = format!("graph break at {}{}", o.st.bold(&at), run(g.run));
        o.line(&format!("  {head}: {}×, {}", g.count, g.reason));
        if !g.hint.is_empty() {
            let label = o.st.green("hint:");
            o.para(4, &label, 5, &g.hint);
        }
        o.para(4, "caused:", 7, &caused(&g.compiles));
    }
    for g in &d.guard_failures {
        let at = g.source.as_ref().map_or_else(|| "?".into(), loc);
        let head = format!("guard failed at {}{}", o.st.bold(&at), run(g.run));
        o.line(&format!(
            "  {head}: {} of {}",
            plural(g.count, "recompile", "recompiles"),
            g.function
        ));
        o.para(4, "guards:", 7, &g.guards.join("; "));
        o.para(4, "caused:", 7, &caused(&g.compiles));
    }
    if d.frame_compiles.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = d
        .frame_compiles
        .iter()
        .map(|f| {
            vec![
                f.compile_id.clone(),
                f.t_ms.map_or_else(|| "?".into(), |t| format!("{t:.0}")),
                f.dur_ms.map_or_else(|| "?".into(), ms),
                f.why.clone(),
                f.source.as_ref().map_or_else(|| f.function.clone(), loc_fn),
                if f.failed.is_empty() {
                    f.compiles.len().to_string()
                } else {
                    o.st.red(&format!("{} (failed: {})", f.compiles.len(), f.failed))
                },
            ]
        })
        .collect();
    o.table(
        2,
        &["frame", "at ms", "ms", "why", "function", "PJRT compiles"],
        &rows,
        &[false, true, true, false, false, false],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_words_and_width() {
        assert_eq!(wrap("aa bb cc dd ee", 5), vec!["aa bb", "cc dd", "ee"]);
        assert_eq!(wrap("", 10), vec![String::new()]);
        assert_eq!(
            wrap("x averyveryverylongword y", 6),
            vec!["x", "averyveryverylongword", "y"]
        );
    }

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
        assert_eq!(plain.red("x"), "x");
        assert_eq!(color.red("x"), "\x1b[1;31mx\x1b[0m");
    }
}
