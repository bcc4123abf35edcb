//! The join of a parsed log to the trace's PJRT compiles, and the `dynamo` section it makes.
//!
//! Unix times map onto the trace's monotonic clock through its manifest and `Clock` records (the
//! collector's wall clock is the same `CLOCK_REALTIME` Python's `time.time()` reads). A PJRT
//! compile was caused by a frame compile when it started inside that frame compile's span.

use std::collections::{BTreeMap, BTreeSet};

use tpuscope_core::{Record, Trace};

use super::log::{CompileId, FrameCompile, ProcessLog, parse};
use super::{
    CausedCompile, DynamoReport, FrameCompileReport, GraphBreakReport, GuardFailureReport,
    LogsInfo, TorchLogs,
};
use crate::digest::Digest;
use crate::report::{Digests, Finding, Input, Report};
use crate::source::SourceLoc;

/// At most this many distinct guard texts per group.
const MAX_GUARDS: usize = 8;

/// A PJRT compile of the trace, for the join.
struct PjrtCompile {
    event: usize,
    t_ns: u64,
    dur_ns: u64,
    name: String,
    failed: bool,
    /// Its start on the wall clock, Unix µs.
    wall_us: i64,
    /// Its Python stack (file, line, function), when the collector had one.
    stack: Vec<(String, u32, String)>,
}

/// Compiles of a trace with their wall-clock start.
struct TraceCompiles {
    t0_mono: u64,
    list: Vec<PjrtCompile>,
}

/// The (mono, wall) anchors of a run: the manifest's and every `Clock` record.
fn anchors(trace: &Trace, d: &Digest) -> Vec<(u64, u64)> {
    let mut a: Vec<(u64, u64)> = trace
        .manifest
        .iter()
        .filter(|m| m.start_wall_ns > 0)
        .map(|m| (m.start_mono_ns, m.start_wall_ns))
        .collect();
    a.extend(d.others().filter_map(|(_, r)| match r {
        Record::Clock(c) => Some((c.mono_ns, c.wall_ns)),
        _ => None,
    }));
    a
}

fn trace_compiles(trace: &Trace, d: &Digest) -> TraceCompiles {
    let anchors = anchors(trace, d);
    let wall_us = |mono: u64| -> i64 {
        let nearest = anchors
            .iter()
            .min_by_key(|(m, _)| m.abs_diff(mono))
            .copied()
            .unwrap_or((0, 0));
        let wall = i128::from(mono) - i128::from(nearest.0) + i128::from(nearest.1);
        (wall / 1000) as i64
    };
    let list = d
        .others()
        .filter_map(|(i, r)| match r {
            Record::Compile(c) => Some(PjrtCompile {
                event: i,
                t_ns: c.t_ns,
                dur_ns: c.dur_ns,
                name: c.executable_name.clone(),
                failed: c.error.is_some(),
                wall_us: wall_us(c.t_ns),
                stack: trace
                    .stacks
                    .get(&c.stack)
                    .map(|s| {
                        s.frames
                            .iter()
                            .map(|f| {
                                (
                                    trace.string(f.file).to_string(),
                                    f.line,
                                    trace.string(f.function).to_string(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            }),
            _ => None,
        })
        .collect();
    TraceCompiles {
        t0_mono: trace.manifest.as_ref().map_or(0, |m| m.start_mono_ns),
        list,
    }
}

/// Slack around a frame compile's span: the metrics' times are exact, the header's are ms.
const SLACK_US: i64 = 2_000;
/// torch_xla's `openxla` backend compiles when the compiled graph first runs, just after the
/// frame compile: compiles this long after it (and before the next frame compile) count when
/// they are recognisably its own.
const TAIL_US: i64 = 5_000_000;

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn loc(file: &str, line: u32, function: &str) -> Option<SourceLoc> {
    (!file.is_empty() && line > 0).then(|| SourceLoc {
        file: file.to_string(),
        line,
        function: function.to_string(),
    })
}

/// TorchTPU names programs `tt_jit_<file>_L<line>C<col>_<function>_<op>`: the part after the
/// location, when the name has one.
fn torch_tpu_function_part(name: &str) -> Option<&str> {
    let mut from = 0;
    while let Some(i) = name.get(from..)?.find("_L").map(|i| i + from) {
        let rest = name.get(i + 2..)?;
        let line_digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if line_digits > 0 && rest.as_bytes().get(line_digits) == Some(&b'C') {
            let after = rest.get(line_digits + 1..)?;
            let col_digits = after.bytes().take_while(u8::is_ascii_digit).count();
            if col_digits > 0 && after.as_bytes().get(col_digits) == Some(&b'_') {
                return after.get(col_digits + 1..);
            }
        }
        from = i + 2;
    }
    None
}

/// Whether a PJRT compile is recognisably the program of a frame compile (by TorchTPU's name,
/// or by the compiled function's frame in its Python stack); `None` when neither tells.
fn is_program_of(c: &PjrtCompile, function: &str, file: &str, first_line: u32) -> Option<bool> {
    if let Some(part) = torch_tpu_function_part(&c.name) {
        // Eager ops TorchTPU compiles on its own thread meanwhile are named after their caller.
        return Some(
            !function.is_empty()
                && (part == function
                    || part
                        .strip_prefix(function)
                        .is_some_and(|r| r.starts_with('_'))),
        );
    }
    if !c.stack.is_empty() && !file.is_empty() {
        return Some(
            c.stack
                .iter()
                .any(|(f, l, func)| f == file && (*l == first_line || func == function)),
        );
    }
    None
}

/// Attributes one process's frame compiles to the trace's compiles: the compiles that start in
/// a frame compile's span (or just after it, before the next one) and are not recognisably
/// another program.
fn caused(p: &ProcessLog, tc: &TraceCompiles, wall0_us: i64) -> CausedBy {
    let starts: Vec<i64> = p
        .frames
        .values()
        .filter_map(|f| f.span_us().map(|s| s.0))
        .collect();
    let mut out = BTreeMap::new();
    for (id, f) in &p.frames {
        let (function, file, first_line) = f.code();
        let span = f.span_us();
        let compiles = span
            .map(|(a, b)| {
                let next = starts.iter().copied().filter(|s| *s > a).min();
                let tail_end = next.map_or(b + TAIL_US, |n| n.min(b + TAIL_US));
                tc.list
                    .iter()
                    .filter(|c| {
                        let in_span = c.wall_us >= a - SLACK_US && c.wall_us <= b + SLACK_US;
                        let in_tail = c.wall_us > b + SLACK_US && c.wall_us < tail_end;
                        match is_program_of(c, &function, &file, first_line) {
                            Some(own) => own && (in_span || in_tail),
                            None => in_span,
                        }
                    })
                    .map(|c| CausedCompile {
                        event: c.event,
                        graph: c.name.clone(),
                        t_ms: ms(c.t_ns.saturating_sub(tc.t0_mono)),
                        compile_ms: ms(c.dur_ns),
                        compile_id: id.to_string(),
                        failed: c.failed,
                    })
                    .collect()
            })
            .unwrap_or_default();
        let t_ms = span.map(|(a, _)| (a - wall0_us) as f64 / 1e3);
        out.insert(*id, (compiles, t_ms));
    }
    out
}

/// `torch_dynamo_resume_in_step_at_32` resumes after a break at line 32 of `step`'s file.
fn resumes_break_at(f: &FrameCompile, file: &str, line: u32) -> bool {
    f.file == file
        && f.function
            .strip_prefix("torch_dynamo_resume_in_")
            .and_then(|r| r.rsplit_once("_at_"))
            .is_some_and(|(_, l)| l.parse() == Ok(line))
}

/// What to do about a failed guard, by its kind.
fn guard_fix(guard: &str) -> String {
    let g = guard.to_ascii_lowercase();
    if g.contains("size mismatch") || g.contains("stride mismatch") || g.contains("tensor_match") {
        "an input's shape changed: pad inputs to a few fixed sizes (or mark the dimension dynamic \
         with `torch._dynamo.mark_dynamic` where the backend supports it)"
            .into()
    } else if g.contains("id_match") || g.contains("___check_obj_id") {
        "a different Python object each call (a new module, function or closure): create it once, \
         outside the loop"
            .into()
    } else if g.contains("grad_mode") || g.contains("requires_grad") {
        "grad mode or `requires_grad` differs between calls: keep it the same around the compiled \
         function, or compile each mode once on purpose"
            .into()
    } else if (guard.starts_with("G[") || guard.starts_with("L[")) && guard.contains(" == ") {
        "a Python number read by the compiled code changed, and dynamo bakes each value into the \
         graph: pass it as a tensor (e.g. `torch.tensor(value, device=device)`) or keep it constant"
            .into()
    } else {
        "make the guarded value the same on every call (`TORCH_LOGS=recompiles` prints each \
         failure)"
            .into()
    }
}

/// Per frame compile: the PJRT compiles it caused, and its start (ms after the trace's start).
type CausedBy = BTreeMap<CompileId, (Vec<CausedCompile>, Option<f64>)>;

/// Adds the `dynamo` section and its findings. `logs` holds what the CLI found per trace; a
/// trace without an entry has no dynamo section. Does nothing when `logs` is empty.
pub fn attach(report: &mut Report, inputs: &[Input<'_>], logs: &[TorchLogs]) {
    if !logs.is_empty() {
        attach_digested(report, inputs, &Digests::of(inputs), logs);
    }
}

/// [`attach`] with the inputs' digests made already.
pub(crate) fn attach_digested(
    report: &mut Report,
    inputs: &[Input<'_>],
    digests: &Digests<'_>,
    logs: &[TorchLogs],
) {
    if logs.is_empty() {
        return;
    }
    let mut dynamo = DynamoReport::default();
    for l in logs {
        let Some(run) = report.traces.iter().position(|t| t.path == l.trace_path) else {
            continue;
        };
        let Some(i) = inputs.iter().position(|i| i.path == l.trace_path) else {
            continue;
        };
        add_trace_logs(&mut dynamo, run, inputs[i].trace, digests.get(i), l);
    }

    let mut findings: Vec<Finding> = Vec::new();
    for g in &dynamo.graph_breaks {
        findings.push(graph_break_finding(g));
    }
    for g in &dynamo.guard_failures {
        if let Some(f) = guard_failure_finding(report, g) {
            findings.push(f);
        }
    }
    report.findings.extend(findings);
    report.dynamo = Some(dynamo);
}

/// Adds to `dynamo` what the logs of one trace (run `run`) say about its process.
fn add_trace_logs(dynamo: &mut DynamoReport, run: usize, trace: &Trace, d: &Digest, l: &TorchLogs) {
    let pid = trace.manifest.as_ref().map_or(0, |m| m.pid);
    let parsed = parse(l.files.iter().map(|(_, t)| t.as_str()));
    let mut info = LogsInfo {
        run,
        dir: l.dir.clone(),
        files: l.files.len(),
        skipped_lines: parsed.skipped_lines,
        other_pids: parsed
            .processes
            .keys()
            .copied()
            .filter(|p| *p != pid)
            .collect(),
        note: l.note.clone().unwrap_or_default(),
        ..LogsInfo::default()
    };
    let Some(p) = parsed.processes.get(&pid) else {
        if info.note.is_empty() {
            info.note = if parsed.processes.is_empty() {
                "no dynamo entries (nothing was torch.compiled?)".into()
            } else {
                format!("no entries of this trace's process (pid {pid})")
            };
        }
        dynamo.logs.push(info);
        return;
    };
    info.entries = p.entries;
    info.rank = p.rank;
    info.torch_version = p.torch_version.clone();
    info.utc_offset_min = p.utc_offset_s.map(|s| s / 60);
    dynamo.logs.push(info);

    let tc = trace_compiles(trace, d);
    let wall0_us = trace
        .manifest
        .as_ref()
        .map_or(0, |m| (m.start_wall_ns / 1000) as i64);
    let by_frame = caused(p, &tc, wall0_us);
    dynamo
        .frame_compiles
        .extend(frame_compile_reports(run, p, &by_frame));
    dynamo
        .graph_breaks
        .extend(graph_break_reports(run, p, &by_frame));
    dynamo
        .guard_failures
        .extend(guard_failure_reports(run, p, &by_frame));
}

/// One row per frame compile of the process, with why it compiled and what it caused.
fn frame_compile_reports(
    run: usize,
    p: &ProcessLog,
    by_frame: &CausedBy,
) -> Vec<FrameCompileReport> {
    let recompiled: BTreeSet<CompileId> = p.guard_failures.iter().filter_map(|g| g.id).collect();
    let mut out = Vec::new();
    for (id, f) in &p.frames {
        let (compiles, t_ms) = by_frame.get(id).cloned().unwrap_or_default();
        let why = if recompiled.contains(id) {
            "guard_failure"
        } else if id.compile > 0 {
            // A recompile whose reasons the log does not have (cut, or another cause).
            "recompile"
        } else if f.function.starts_with("torch_dynamo_resume_in_") {
            "graph_break_resume"
        } else {
            "first"
        };
        let failed = match (&f.fail_type, &f.fail_reason) {
            (Some(t), Some(r)) => format!("{t}: {r}"),
            (Some(t), None) => t.clone(),
            (None, Some(r)) => r.clone(),
            (None, None) => String::new(),
        };
        let (function, file, first_line) = f.code();
        out.push(FrameCompileReport {
            run,
            compile_id: id.to_string(),
            source: loc(&file, first_line, &function),
            function,
            called_at: f
                .called_at()
                .and_then(|c| loc(&c.file, c.line, &c.function)),
            why: why.into(),
            t_ms,
            dur_ms: f.duration_s.map(|d| d * 1e3),
            failed,
            compiles,
        });
    }
    out
}

/// The process's graph breaks, grouped by line and reason.
fn graph_break_reports(run: usize, p: &ProcessLog, by_frame: &CausedBy) -> Vec<GraphBreakReport> {
    let mut breaks: BTreeMap<(String, u32, String), GraphBreakReport> = BTreeMap::new();
    for gb in &p.graph_breaks {
        let g = breaks
            .entry((gb.file.clone(), gb.line, gb.reason.clone()))
            .or_insert_with(|| GraphBreakReport {
                run,
                source: loc(&gb.file, gb.line, ""),
                reason: gb.reason.clone(),
                hint: gb.hint.clone(),
                count: 0,
                compile_ids: Vec::new(),
                compiles: Vec::new(),
            });
        g.count += 1;
        let Some(id) = gb.id else { continue };
        g.compile_ids.push(id.to_string());
        let mut ids = vec![id];
        // The resume function's first compile after this break is the break's, too; its
        // later compiles are recompiles with reasons of their own.
        ids.extend(
            p.frames
                .iter()
                .filter(|(rid, f)| rid.compile == 0 && resumes_break_at(f, &gb.file, gb.line))
                .map(|(rid, _)| *rid),
        );
        for i in ids {
            for c in by_frame.get(&i).map(|v| v.0.as_slice()).unwrap_or_default() {
                if !g.compiles.iter().any(|x| x.event == c.event) {
                    g.compiles.push(c.clone());
                }
            }
        }
    }
    breaks.into_values().collect()
}

/// The process's guard failures, grouped by the failed guard's line (the newest cached
/// compile's).
fn guard_failure_reports(
    run: usize,
    p: &ProcessLog,
    by_frame: &CausedBy,
) -> Vec<GuardFailureReport> {
    let mut guards: BTreeMap<(String, u32, String), GuardFailureReport> = BTreeMap::new();
    for gf in &p.guard_failures {
        let frame = gf.id.and_then(|id| p.frames.get(&id));
        let function = frame.map(|f| f.function.clone()).unwrap_or_default();
        let newest = gf.guards.first();
        let mut source = newest.and_then(|g| loc(&g.file, g.line, ""));
        if source.is_none() {
            // No guard source (e.g. a tensor's size): where the function is called from.
            source = frame
                .and_then(|f| f.called_at())
                .and_then(|c| loc(&c.file, c.line, &c.function));
        }
        let key = source
            .as_ref()
            .map_or((String::new(), 0), |s| (s.file.clone(), s.line));
        let g = guards
            .entry((key.0, key.1, function.clone()))
            .or_insert_with(|| GuardFailureReport {
                run,
                source,
                function,
                guards: Vec::new(),
                count: 0,
                compile_ids: Vec::new(),
                compiles: Vec::new(),
            });
        g.count += 1;
        if let Some(n) = newest
            && !g.guards.contains(&n.guard)
            && g.guards.len() < MAX_GUARDS
        {
            g.guards.push(n.guard.clone());
        }
        if let Some(id) = gf.id {
            g.compile_ids.push(id.to_string());
            g.compiles
                .extend(by_frame.get(&id).map(|v| v.0.clone()).unwrap_or_default());
        }
    }
    guards.into_values().collect()
}

/// Distinct graph names of compiles, in order, with their counts: `a 2×, b`.
fn graphs(compiles: &[CausedCompile]) -> String {
    let mut seen: Vec<(&str, usize)> = Vec::new();
    for c in compiles {
        match seen.iter_mut().find(|(g, _)| *g == c.graph) {
            Some((_, n)) => *n += 1,
            None => seen.push((&c.graph, 1)),
        }
    }
    seen.iter()
        .map(|(g, n)| {
            if *n > 1 {
                format!("{g} {n}×")
            } else {
                (*g).to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn at(source: Option<&SourceLoc>) -> String {
    source.map_or_else(|| "an unknown line".into(), |s| s.to_string())
}

fn graph_break_finding(g: &GraphBreakReport) -> Finding {
    let times = if g.count > 1 {
        format!(" ({}×)", g.count)
    } else {
        String::new()
    };
    let compiled = if g.compiles.is_empty() {
        String::new()
    } else {
        format!(
            " → {} compile{} instead of one graph: {}",
            g.compiles.len(),
            if g.compiles.len() == 1 { "" } else { "s" },
            graphs(&g.compiles)
        )
    };
    let fix = if g.hint.is_empty() {
        "move the call dynamo cannot trace out of the compiled function (or make it traceable): \
         each break splits the graph and launches one more program per call"
            .to_string()
    } else {
        format!(
            "{} (each break splits the graph: one more program per call)",
            g.hint.trim_end_matches('.')
        )
    };
    Finding {
        kind: crate::report::FindingKind::GraphBreak,
        title: format!(
            "graph break at {}: {}{times}{compiled}",
            at(g.source.as_ref()),
            g.reason
        ),
        source: g.source.clone(),
        suggestion: fix,
    }
}

/// A finding of its own, unless the compiles it caused are a recompile family the report
/// already has as a finding: then that finding gets dynamo's account instead (one problem, one
/// finding).
fn guard_failure_finding(report: &mut Report, g: &GuardFailureReport) -> Option<Finding> {
    let guard = g.guards.first().map(String::as_str).unwrap_or("?");
    let what = format!("guard `{guard}` failed at {}", at(g.source.as_ref()));
    let names: BTreeSet<&str> = g.compiles.iter().map(|c| c.graph.as_str()).collect();
    let explained: Vec<usize> = report
        .findings
        .iter()
        .enumerate()
        .filter(|(_, f)| {
            f.kind == crate::report::FindingKind::Recompile
                && names
                    .iter()
                    .any(|n| f.title.starts_with(&format!("{n} compiled ")))
        })
        .map(|(i, _)| i)
        .collect();
    if !names.is_empty() && !explained.is_empty() {
        for i in explained {
            if let Some(f) = report.findings.get_mut(i) {
                f.title.push_str(&format!(
                    "; dynamo: {what}, {} recompile{}",
                    g.count,
                    if g.count == 1 { "" } else { "s" }
                ));
            }
        }
        return None;
    }
    let recompiled = if g.compiles.is_empty() {
        format!(
            "{} recompiled {}× (no PJRT compile: programs reused or loaded)",
            if g.function.is_empty() {
                "?"
            } else {
                &g.function
            },
            g.count
        )
    } else {
        format!("recompiled {}", graphs(&g.compiles))
    };
    Some(Finding {
        kind: crate::report::FindingKind::GuardFailure,
        title: format!("{what} → {recompiled}"),
        source: g.source.clone(),
        suggestion: guard_fix(guard),
    })
}
