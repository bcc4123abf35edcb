//! dynamo's structured logs (`TORCH_TRACE=<dir>`, the files tlparse reads) next to the PJRT
//! trace: graph breaks and guard failures with their file:line, and the PJRT compiles each one
//! caused.
//!
//! The format, as torch 2.9 and 2.15 write it: one entry per `trace_structured` call, a glog
//! header line `V1122 06:36:21.904000 30540 torch/_dynamo/convert_frame.py:309] {json}` (level,
//! month and day, *local* wall time, pid, the logging call site, then the metadata object), and
//! its payload, if any, on the following lines, each prefixed with a tab. The metadata carries the
//! frame compile id (`frame_id`, `frame_compile_id`, `attempt`) and one key naming the kind:
//! `dynamo_start` (the Python stack the compile started from, file names interned through `str`
//! entries), `compilation_metrics` (function, file, first line, `start_time` in Unix seconds and
//! the duration of the whole frame compile), `artifact` named `dynamo_graph_break_reason` or
//! `recompile_reasons` (text payloads), `chromium_event` (a payload with a Unix `ts` in µs), and
//! many others this module ignores.
//!
//! Clocks: the glog header is local time without a year or zone. Each log calibrates its own
//! offset from the entries that also carry a Unix time (chromium events: the header's time minus
//! the event's `ts`, rounded to 15 minutes), so the report does not depend on the time zone of the
//! machine it runs on. Frame compiles are placed by `compilation_metrics` (Unix time, exact), or
//! else by the span of their entries' times. Unix times map onto the trace's monotonic clock
//! through its manifest and `Clock` records (the collector's wall clock is the same
//! `CLOCK_REALTIME` Python's `time.time()` reads). A PJRT compile was caused by a frame compile
//! when it started inside that frame compile's span.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tpuscope_core::{Record, Trace};

use crate::report::{Finding, Input, Report};
use crate::source::SourceLoc;

// ---------------------------------------------------------------------------------------------
// Parsing

/// A frame compile id, `frame_id/frame_compile_id` (dynamo prints it as `0/1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CompileId {
    pub frame: u32,
    pub compile: u32,
}

impl std::fmt::Display for CompileId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.frame, self.compile)
    }
}

impl CompileId {
    /// `"1/0"` → 1/0.
    pub fn parse(s: &str) -> Option<CompileId> {
        let (a, b) = s.trim().split_once('/')?;
        Some(CompileId {
            frame: a.parse().ok()?,
            compile: b.parse().ok()?,
        })
    }
}

/// The glog header's time: month, day and microseconds of the day, in the writer's local zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub month: u32,
    pub day: u32,
    pub day_us: i64,
}

impl Stamp {
    /// Microseconds since the Unix epoch of this wall time read as UTC in `year`.
    fn naive_us(&self, year: i64) -> Option<i64> {
        if !(1..=12).contains(&self.month) || !(1..=31).contains(&self.day) {
            return None;
        }
        Some(days_from_civil(year, self.month, self.day) * 86_400_000_000 + self.day_us)
    }

    /// Unix µs of this local time, given the zone's offset (local − UTC) and a Unix time near it
    /// (for the year the header leaves out).
    fn unix_us(&self, offset_s: i64, near_us: i64) -> Option<i64> {
        let year = year_of_unix_us(near_us);
        (year - 1..=year + 1)
            .filter_map(|y| self.naive_us(y).map(|n| n - offset_s * 1_000_000))
            .min_by_key(|u| (u - near_us).abs())
    }
}

/// Unix times (and durations) in µs further than this from 1970 (about ±1,100 years) come from a
/// damaged or forged log, not a clock: they are ignored, which keeps every sum and product of
/// times below far from overflowing an i64.
const MAX_ABS_US: f64 = (1u64 << 55) as f64;

/// `x` µs as an integer, if a clock could have given it.
fn plausible_us(x: f64) -> Option<i64> {
    (x.is_finite() && x.abs() <= MAX_ABS_US).then_some(x as i64)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn year_of_unix_us(us: i64) -> i64 {
    // Good to a day, which is all the year choice in `unix_us` needs (it tries ±1 year).
    let days = us.div_euclid(86_400_000_000);
    let mut y = 1970 + days.div_euclid(365);
    while days_from_civil(y, 1, 1) > days {
        y -= 1;
    }
    while days_from_civil(y + 1, 1, 1) <= days {
        y += 1;
    }
    y
}

/// One `trace_structured` entry.
#[derive(Clone, Debug)]
struct Entry {
    stamp: Stamp,
    pid: u32,
    meta: Map<String, Value>,
    payload: Option<String>,
}

/// `V1122 06:36:21.904000 30540 torch/_dynamo/x.py:309] {...}` → stamp, pid, metadata.
fn parse_header(line: &str) -> Option<(Stamp, u32, Map<String, Value>)> {
    let mut chars = line.char_indices();
    let (_, level) = chars.next()?;
    if !"VIWEC".contains(level) {
        return None;
    }
    let rest = &line[1..];
    let (date, rest) = rest.split_once(' ')?;
    let (time, rest) = rest.split_once(' ')?;
    let (pid, rest) = rest.split_once(' ')?;
    if date.len() != 4 || !date.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let month: u32 = date.get(..2)?.parse().ok()?;
    let day: u32 = date.get(2..)?.parse().ok()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut hms_parts = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (h, m, s) = (hms_parts.next()??, hms_parts.next()??, hms_parts.next()??);
    if hms_parts.next().is_some() || h > 23 || m > 59 || s > 60 {
        return None;
    }
    // Microseconds, whatever the number of digits written.
    let digits: String = frac.chars().take(6).collect();
    let us: i64 = format!("{digits:0<6}").parse().ok()?;
    let pid: u32 = pid.parse().ok()?;
    // The metadata object starts after the call site's `]` (and any ` [..]` tags).
    let json = &rest[rest.find("] {")? + 2..];
    let Ok(Value::Object(meta)) = serde_json::from_str::<Value>(json) else {
        return None;
    };
    Some((
        Stamp {
            month,
            day,
            day_us: ((h * 60 + m) * 60 + s) * 1_000_000 + us,
        },
        pid,
        meta,
    ))
}

/// The payloads this module reads: chromium events (their `ts`) and three artifacts.
fn wants_payload(meta: &Map<String, Value>) -> bool {
    meta.contains_key("chromium_event")
        || meta
            .get("artifact")
            .and_then(|a| a.get("name"))
            .and_then(Value::as_str)
            .is_some_and(|n| {
                matches!(
                    n,
                    "dynamo_graph_break_reason" | "recompile_reasons" | "torch_version"
                )
            })
}

/// Splits a log's text into entries; counts lines that belong to none (garbage, a header that
/// does not parse and its payload, a cut last line).
fn entries(text: &str) -> (Vec<Entry>, u64) {
    let mut out: Vec<Entry> = Vec::new();
    let mut payload: Vec<&str> = Vec::new();
    let mut skipped = 0u64;
    let mut open = false;
    // Whether the open entry's payload is kept: graphs and code dumps can be megabytes.
    let mut keep = false;
    let mut open_lines = 0u64;
    let finish = |out: &mut Vec<Entry>, payload: &mut Vec<&str>, open: bool| {
        if open && let Some(e) = out.last_mut() {
            e.payload = (!payload.is_empty()).then(|| payload.join("\n"));
        }
        payload.clear();
    };
    // Without a final newline the last line was being written when the file was copied or the
    // process died: it and, if it is payload, its entry are incomplete.
    if text.is_empty() {
        return (Vec::new(), 0);
    }
    let complete = text.ends_with('\n');
    let mut lines: Vec<&str> = text.split('\n').collect();
    if complete {
        lines.pop();
    }
    let last = lines.len().saturating_sub(1);
    let mut cut_entry = false;
    for (i, line) in lines.iter().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if !complete && i == last {
            skipped += 1;
            cut_entry = open && line.starts_with('\t');
            break;
        }
        if let Some(p) = line.strip_prefix('\t') {
            if open {
                open_lines += 1;
                if keep {
                    payload.push(p);
                }
            } else {
                skipped += 1;
            }
            continue;
        }
        finish(&mut out, &mut payload, open);
        open = false;
        if line.trim().is_empty() {
            continue;
        }
        match parse_header(line) {
            Some((stamp, pid, meta)) => {
                keep = wants_payload(&meta);
                open_lines = 0;
                out.push(Entry {
                    stamp,
                    pid,
                    meta,
                    payload: None,
                });
                open = true;
            }
            None => skipped += 1,
        }
    }
    if cut_entry {
        skipped += open_lines + 1;
        out.pop();
        payload.clear();
        open = false;
    }
    finish(&mut out, &mut payload, open);
    (out, skipped)
}

/// A frame in a `dynamo_start` stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackFrame {
    pub file: String,
    pub line: u32,
    pub function: String,
}

/// What the log says about one frame compile.
#[derive(Clone, Debug, Default)]
pub struct FrameCompile {
    pub id: Option<CompileId>,
    pub function: String,
    pub file: String,
    pub first_line: u32,
    /// `compilation_metrics.start_time` (Unix s) and `entire_frame_compile_time_s`.
    pub start_s: Option<f64>,
    pub duration_s: Option<f64>,
    /// Earliest and latest Unix µs of the entries of this compile (chromium `ts` where there is
    /// one, else the header's time): the span when the metrics are missing.
    pub first_us: Option<i64>,
    pub last_us: Option<i64>,
    /// The Python stack from `dynamo_start`, outermost first.
    pub stack: Vec<StackFrame>,
    pub fail_type: Option<String>,
    pub fail_reason: Option<String>,
    pub restart_reasons: Vec<String>,
}

impl FrameCompile {
    /// Start and end, Unix µs.
    pub fn span_us(&self) -> Option<(i64, i64)> {
        let metrics = self.start_s.zip(self.duration_s).and_then(|(s, d)| {
            let a = plausible_us(s * 1e6)?;
            Some((a, a + plausible_us(d * 1e6)?.max(0)))
        });
        metrics.or_else(|| Some((self.first_us?, self.last_us?)))
    }

    /// The compiled function, its file and first line: from the metrics, else the top of the
    /// `dynamo_start` stack.
    pub fn code(&self) -> (String, String, u32) {
        let top = self.stack.last();
        let function = if self.function.is_empty() {
            top.map(|t| t.function.clone()).unwrap_or_default()
        } else {
            self.function.clone()
        };
        let (file, line) = if self.file.is_empty() {
            top.map_or((String::new(), 0), |t| (t.file.clone(), t.line))
        } else {
            (self.file.clone(), self.first_line)
        };
        (function, file, line)
    }

    /// The user's line the compiled function was called from: the innermost frame below it
    /// that is not torch's own (an `nn.Module` is called through torch's wrappers).
    pub fn called_at(&self) -> Option<&StackFrame> {
        let below = self.stack.len().checked_sub(1)?;
        self.stack
            .get(..below)?
            .iter()
            .rev()
            .find(|f| !crate::source::is_framework_file(&f.file))
    }
}

/// A `dynamo_graph_break_reason`.
#[derive(Clone, Debug, PartialEq)]
pub struct GraphBreak {
    pub id: Option<CompileId>,
    pub file: String,
    pub line: u32,
    pub reason: String,
    pub hint: String,
    pub unix_us: Option<i64>,
}

/// One failed guard of a `recompile_reasons` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct FailedGuard {
    /// The cached compile whose guard failed.
    pub against: Option<CompileId>,
    pub guard: String,
    /// Where the guarded value is used, when torch says (torch shortens the path: resolved
    /// against the log's full paths when one matches).
    pub file: String,
    pub line: u32,
}

/// A `recompile_reasons` entry: the compile it started and the guards that failed (the most
/// recent cached compile first).
#[derive(Clone, Debug, PartialEq)]
pub struct GuardFailure {
    pub id: Option<CompileId>,
    pub guards: Vec<FailedGuard>,
    pub unix_us: Option<i64>,
}

/// What one process logged.
#[derive(Clone, Debug, Default)]
pub struct ProcessLog {
    pub pid: u32,
    pub rank: Option<u32>,
    pub torch_version: String,
    /// Local − UTC offset of the headers, seconds, when calibrated from the log itself.
    pub utc_offset_s: Option<i64>,
    pub entries: u64,
    pub frames: BTreeMap<CompileId, FrameCompile>,
    pub graph_breaks: Vec<GraphBreak>,
    pub guard_failures: Vec<GuardFailure>,
}

/// Parsed log files, by pid.
#[derive(Clone, Debug, Default)]
pub struct Parsed {
    pub processes: BTreeMap<u32, ProcessLog>,
    /// Lines that belong to no entry.
    pub skipped_lines: u64,
}

fn as_u32(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
}

fn compile_id_of(meta: &Map<String, Value>) -> Option<CompileId> {
    Some(CompileId {
        frame: as_u32(meta.get("frame_id"))?,
        compile: as_u32(meta.get("frame_compile_id"))?,
    })
}

fn string_field(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

/// `  File "/x/y.py", line 33, in f` → ("/x/y.py", 33).
fn file_line(line: &str) -> Option<(String, u32)> {
    let rest = line.trim_start().strip_prefix("File \"")?;
    let (file, rest) = rest.split_once("\", line ")?;
    let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((file.to_string(), n.parse().ok()?))
}

/// `/x/y.py:33` → ("/x/y.py", 33).
fn path_colon_line(s: &str) -> Option<(String, u32)> {
    let (file, line) = s.trim().rsplit_once(':')?;
    Some((file.to_string(), line.trim().parse().ok()?))
}

/// The graph break's user line, reason and hint from its payload (several torch versions).
fn parse_graph_break(payload: &str) -> (Option<(String, u32)>, String, String) {
    let lines: Vec<&str> = payload.lines().collect();
    let mut at = lines
        .iter()
        .find_map(|l| l.trim().strip_prefix("Graph break in user code at "))
        .and_then(path_colon_line);
    if at.is_none() {
        // `Graph break: skip: from user code at:` or a `User code traceback:`: the innermost
        // frame of the first traceback.
        let start = lines
            .iter()
            .position(|l| l.contains("from user code at") || l.contains("User code traceback"));
        if let Some(s) = start {
            at = lines
                .iter()
                .skip(s + 1)
                .take_while(|l| !l.trim().is_empty() && !l.starts_with("Traceback"))
                .filter_map(|l| file_line(l))
                .last();
        }
    }
    let mut reason = String::new();
    if let Some(i) = lines
        .iter()
        .position(|l| l.trim_start().starts_with("Graph Break Reason:"))
    {
        let first = lines
            .get(i)
            .and_then(|l| l.split_once("Graph Break Reason:"))
            .map(|(_, r)| r.trim())
            .unwrap_or("");
        // torch ≥ 2.10 puts a generic "Encountered graph break when attempting to trace ...:"
        // first; the specific reason is the next non-empty line.
        reason = if first.is_empty() || first.ends_with(':') {
            lines
                .iter()
                .skip(i + 1)
                .map(|l| l.trim())
                .find(|l| !l.is_empty())
                .unwrap_or(first)
                .to_string()
        } else {
            first.to_string()
        };
    } else if let Some(l) = lines.iter().find(|l| l.contains("Graph break: skip:")) {
        reason = l.trim().to_string();
    }
    let hint = lines
        .iter()
        .find_map(|l| l.trim().strip_prefix("Hint:"))
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    (at, reason, hint)
}

/// The reasons of a `recompile_reasons` payload: a JSON list of strings, one JSON string, or
/// (torch 2.15 with one reason) the bare text.
fn recompile_reason_texts(payload: &str) -> Vec<String> {
    match serde_json::from_str::<Value>(payload) {
        Ok(Value::Array(a)) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        Ok(Value::String(s)) => vec![s],
        _ => vec![payload.to_string()],
    }
}

/// `1/0: G['scale'] == 0.5      # return x * scale  # mp/y.py:33 in f` (+ `User stack trace:`).
fn parse_reason(text: &str) -> FailedGuard {
    let mut lines = text.lines();
    let first = lines.next().unwrap_or("");
    let (against, rest) = match first.split_once(": ") {
        Some((id, rest)) if CompileId::parse(id).is_some() => (CompileId::parse(id), rest),
        _ => (None, first),
    };
    let mut parts = rest.split("  # ");
    let guard = parts.next().unwrap_or("").trim().to_string();
    let mut file = String::new();
    let mut line = 0;
    // The last comment is `path:line in function` when torch knew the guard's source.
    if let Some(last) = parts.last()
        && let Some((loc, _func)) = last.rsplit_once(" in ")
        && let Some((f, l)) = path_colon_line(loc)
    {
        file = f;
        line = l;
    }
    // A full path in the user stack beats the shortened one in the comment.
    if let Some((f, l)) = lines
        .skip_while(|l| !l.starts_with("User stack trace"))
        .filter_map(file_line)
        .last()
    {
        file = f;
        line = l;
    }
    FailedGuard {
        against,
        guard,
        file,
        line,
    }
}

/// Parses log files (any number, any pids). Never fails: what cannot be read is counted.
pub fn parse<'a>(texts: impl IntoIterator<Item = &'a str>) -> Parsed {
    let mut parsed = Parsed::default();
    // Per pid: interned file names, and (header stamp, Unix µs) pairs for the clock.
    let mut strings: BTreeMap<u32, BTreeMap<u64, String>> = BTreeMap::new();
    let mut calib: BTreeMap<u32, Vec<(Stamp, i64)>> = BTreeMap::new();
    let mut stamped: Vec<(u32, Option<CompileId>, Stamp, Option<i64>)> = Vec::new();
    let mut pending: Vec<(u32, Stamp, PendingEvent)> = Vec::new();
    for text in texts {
        let (es, skipped) = entries(text);
        parsed.skipped_lines += skipped;
        for e in es {
            let p = parsed.processes.entry(e.pid).or_insert_with(|| ProcessLog {
                pid: e.pid,
                ..ProcessLog::default()
            });
            p.entries += 1;
            if let Some(r) = as_u32(e.meta.get("rank")) {
                p.rank = Some(r);
            }
            let id = compile_id_of(&e.meta);
            let mut exact_us = None;
            if let Some(Value::Array(s)) = e.meta.get("str")
                && let (Some(name), Some(idx)) = (
                    s.first().and_then(Value::as_str),
                    s.get(1).and_then(Value::as_u64),
                )
            {
                strings
                    .entry(e.pid)
                    .or_default()
                    .insert(idx, name.to_string());
            } else if e.meta.contains_key("chromium_event") {
                let ts = e
                    .payload
                    .as_deref()
                    .and_then(|p| serde_json::from_str::<Value>(p).ok())
                    .and_then(|v| v.get("ts").and_then(Value::as_f64))
                    .and_then(plausible_us);
                if let Some(ts) = ts {
                    exact_us = Some(ts);
                    calib.entry(e.pid).or_default().push((e.stamp, ts));
                }
            } else if let Some(start) = e.meta.get("dynamo_start") {
                let frames = start
                    .get("stack")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                pending.push((e.pid, e.stamp, PendingEvent::Start(id, frames)));
            } else if let Some(m) = e.meta.get("compilation_metrics") {
                let id = m
                    .get("compile_id")
                    .and_then(Value::as_str)
                    .and_then(CompileId::parse)
                    .or(id);
                if let Some(id) = id {
                    let f = p.frames.entry(id).or_default();
                    f.id = Some(id);
                    f.function = string_field(m, "co_name").unwrap_or_default();
                    f.file = string_field(m, "co_filename").unwrap_or_default();
                    f.first_line = as_u32(m.get("co_firstlineno")).unwrap_or(0);
                    f.start_s = m.get("start_time").and_then(Value::as_f64);
                    f.duration_s = m.get("entire_frame_compile_time_s").and_then(Value::as_f64);
                    f.fail_type = string_field(m, "fail_type");
                    f.fail_reason = string_field(m, "fail_reason");
                    f.restart_reasons = m
                        .get("restart_reasons")
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default();
                }
            } else if let Some(a) = e.meta.get("artifact") {
                let payload = e.payload.clone().unwrap_or_default();
                match a.get("name").and_then(Value::as_str) {
                    Some("dynamo_graph_break_reason") => {
                        pending.push((e.pid, e.stamp, PendingEvent::Break(id, payload)));
                    }
                    Some("recompile_reasons") => {
                        pending.push((e.pid, e.stamp, PendingEvent::Guards(id, payload)));
                    }
                    Some("torch_version") => {
                        if let Some(v) = serde_json::from_str::<Value>(&payload)
                            .ok()
                            .and_then(|v| string_field(&v, "pytorch_version"))
                        {
                            p.torch_version = v;
                        }
                    }
                    _ => {}
                }
            }
            stamped.push((e.pid, id, e.stamp, exact_us));
        }
    }
    for (pid, p) in parsed.processes.iter_mut() {
        p.utc_offset_s = calib.get(pid).and_then(|c| utc_offset(c));
    }
    // Span of every compile id, from its entries' times.
    for (pid, id, stamp, exact) in &stamped {
        let Some(p) = parsed.processes.get_mut(pid) else {
            continue;
        };
        let Some(id) = id else { continue };
        let reference = calib.get(pid).and_then(|c| c.first()).map(|c| c.1);
        let us = exact.or_else(|| {
            let off = p.utc_offset_s?;
            stamp.unix_us(off, reference?)
        });
        let Some(us) = us else { continue };
        let f = p.frames.entry(*id).or_default();
        f.id = Some(*id);
        f.first_us = Some(f.first_us.map_or(us, |a| a.min(us)));
        f.last_us = Some(f.last_us.map_or(us, |a| a.max(us)));
    }
    // Full paths this log knows, to resolve the guards' shortened ones.
    let mut known: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for (pid, s) in &strings {
        known.entry(*pid).or_default().extend(s.values().cloned());
    }
    for p in parsed.processes.values() {
        let k = known.entry(p.pid).or_default();
        k.extend(p.frames.values().map(|f| f.file.clone()));
    }
    for (pid, stamp, ev) in pending {
        let Some(p) = parsed.processes.get_mut(&pid) else {
            continue;
        };
        let unix_us = p.utc_offset_s.and_then(|off| {
            let near = calib.get(&pid).and_then(|c| c.first()).map(|c| c.1)?;
            stamp.unix_us(off, near)
        });
        match ev {
            PendingEvent::Start(id, frames) => {
                let names = strings.get(&pid);
                let stack = frames
                    .iter()
                    .filter_map(|f| {
                        let file = match f.get("filename") {
                            Some(Value::String(s)) => s.clone(),
                            Some(v) => names
                                .and_then(|n| n.get(&v.as_u64()?))
                                .cloned()
                                .unwrap_or_default(),
                            None => String::new(),
                        };
                        Some(StackFrame {
                            file,
                            line: as_u32(f.get("line"))?,
                            function: string_field(f, "name").unwrap_or_default(),
                        })
                    })
                    .collect();
                if let Some(id) = id {
                    let f = p.frames.entry(id).or_default();
                    f.id = Some(id);
                    f.stack = stack;
                }
            }
            PendingEvent::Break(id, payload) => {
                let (at, reason, hint) = parse_graph_break(&payload);
                let (file, line) = at.unwrap_or_default();
                let gb = GraphBreak {
                    id,
                    file,
                    line,
                    reason,
                    hint,
                    unix_us,
                };
                // torch may log the same break from two places of one compile.
                if !p
                    .graph_breaks
                    .iter()
                    .any(|g| g.id == gb.id && g.file == gb.file && g.line == gb.line)
                {
                    p.graph_breaks.push(gb);
                }
            }
            PendingEvent::Guards(id, payload) => {
                let paths = known.get(&pid);
                let guards = recompile_reason_texts(&payload)
                    .iter()
                    .map(|t| {
                        let mut g = parse_reason(t);
                        g.file = resolve_path(&g.file, paths);
                        g
                    })
                    .collect();
                p.guard_failures.push(GuardFailure {
                    id,
                    guards,
                    unix_us,
                });
            }
        }
    }
    parsed
}

enum PendingEvent {
    Start(Option<CompileId>, Vec<Value>),
    Break(Option<CompileId>, String),
    Guards(Option<CompileId>, String),
}

/// torch shortens paths relative to its install (`ork/main/x.py` for `/work/main/x.py`, one
/// character lost to the common root): the full path of the log that ends with it.
fn resolve_path(short: &str, known: Option<&BTreeSet<String>>) -> String {
    if short.is_empty() || short.starts_with('/') {
        return short.to_string();
    }
    known
        .into_iter()
        .flatten()
        .filter(|k| k.ends_with(short))
        .min_by_key(|k| k.len())
        .cloned()
        .unwrap_or_else(|| short.to_string())
}

/// The zone offset (local − UTC, s) most of the calibration pairs agree on.
fn utc_offset(pairs: &[(Stamp, i64)]) -> Option<i64> {
    let mut votes: BTreeMap<i64, usize> = BTreeMap::new();
    for (stamp, unix) in pairs {
        let year = year_of_unix_us(*unix);
        let best = (year - 1..=year + 1)
            .filter_map(|y| stamp.naive_us(y).map(|n| n - unix))
            .min_by_key(|d| d.abs());
        if let Some(d) = best {
            // Zones are whole quarter hours; anything else is the header's truncation.
            let q = (d as f64 / 900e6).round() as i64 * 900;
            if q.abs() <= 14 * 3600 {
                *votes.entry(q).or_default() += 1;
            }
        }
    }
    votes
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(offset, _)| offset)
}

// ---------------------------------------------------------------------------------------------
// The report section

/// Logs the CLI found for one trace.
#[derive(Clone, Debug, Default)]
pub struct TorchLogs {
    /// The trace's path, as in [`Input::path`].
    pub trace_path: String,
    /// The directory (or file) read.
    pub dir: String,
    /// File names and their text.
    pub files: Vec<(String, String)>,
    /// Why there is nothing to read (directory gone), for the report.
    pub note: Option<String>,
}

/// The `dynamo` section of the report.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct DynamoReport {
    pub logs: Vec<LogsInfo>,
    /// Every frame compile, in time order.
    pub frame_compiles: Vec<FrameCompileReport>,
    /// Grouped by line and reason.
    pub graph_breaks: Vec<GraphBreakReport>,
    /// Grouped by the guard's line (or the compiled function's, when torch does not say).
    pub guard_failures: Vec<GuardFailureReport>,
}

impl DynamoReport {
    /// `1 graph break, 2 guard failures, 4 frame compiles (TORCH_TRACE)`.
    pub fn headline(&self) -> String {
        use crate::units::plural;
        format!(
            "{}, {}, {} (TORCH_TRACE)",
            plural(
                self.graph_breaks.len() as u64,
                "graph break",
                "graph breaks"
            ),
            plural(
                self.guard_failures.iter().map(|g| g.count).sum(),
                "guard failure",
                "guard failures"
            ),
            plural(
                self.frame_compiles.len() as u64,
                "frame compile",
                "frame compiles"
            ),
        )
    }
}

/// Where the logs of one run came from and how much of them was read.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LogsInfo {
    pub run: usize,
    pub dir: String,
    pub files: usize,
    /// Entries of this trace's process.
    pub entries: u64,
    pub skipped_lines: u64,
    /// Processes in the logs other than the trace's (another run, a worker): not reported.
    pub other_pids: Vec<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub torch_version: String,
    /// Local − UTC offset of the log's headers, minutes (calibrated from the log).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utc_offset_min: Option<i64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// A PJRT compile that started inside a frame compile.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CausedCompile {
    /// Index of the compile record in the trace (as a family member's `event`).
    pub event: usize,
    /// The executable's name, which is the graph family's name.
    pub graph: String,
    pub t_ms: f64,
    pub compile_ms: f64,
    /// The frame compile it happened in.
    pub compile_id: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct FrameCompileReport {
    pub run: usize,
    pub compile_id: String,
    /// The compiled function, at its first line.
    pub function: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLoc>,
    /// The line that called it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub called_at: Option<SourceLoc>,
    /// `first`, `graph_break_resume`, `guard_failure` or `recompile` (no reasons logged).
    pub why: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub t_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dur_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failed: String,
    pub compiles: Vec<CausedCompile>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GraphBreakReport {
    pub run: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLoc>,
    pub reason: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hint: String,
    /// Frame compiles that broke here.
    pub count: u64,
    pub compile_ids: Vec<String>,
    /// The compiles of the graph before the break and of the resume function after it.
    pub compiles: Vec<CausedCompile>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GuardFailureReport {
    pub run: usize,
    /// Where the guarded value is used (torch's guard source), else the compiled function.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLoc>,
    /// The recompiled function.
    pub function: String,
    /// The failed guards, first seen first (at most 8 distinct).
    pub guards: Vec<String>,
    /// Recompiles this caused.
    pub count: u64,
    pub compile_ids: Vec<String>,
    pub compiles: Vec<CausedCompile>,
}

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
    frames: Vec<(String, u32, String)>,
}

/// Compiles of a trace with their wall-clock start.
struct TraceCompiles {
    t0_mono: u64,
    list: Vec<PjrtCompile>,
}

/// The (mono, wall) anchors of a trace: the manifest's and every `Clock` record.
fn anchors(trace: &Trace) -> Vec<(u64, u64)> {
    let mut a: Vec<(u64, u64)> = trace
        .manifest
        .iter()
        .filter(|m| m.start_wall_ns > 0)
        .map(|m| (m.start_mono_ns, m.start_wall_ns))
        .collect();
    a.extend(trace.events.iter().filter_map(|r| match r {
        Record::Clock(c) => Some((c.mono_ns, c.wall_ns)),
        _ => None,
    }));
    a
}

fn trace_compiles(trace: &Trace) -> TraceCompiles {
    let anchors = anchors(trace);
    let wall_us = |mono: u64| -> i64 {
        let nearest = anchors
            .iter()
            .min_by_key(|(m, _)| m.abs_diff(mono))
            .copied()
            .unwrap_or((0, 0));
        let wall = i128::from(mono) - i128::from(nearest.0) + i128::from(nearest.1);
        (wall / 1000) as i64
    };
    let list = trace
        .events
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Record::Compile(c) => Some(PjrtCompile {
                event: i,
                t_ns: c.t_ns,
                dur_ns: c.dur_ns,
                name: c.executable_name.clone(),
                failed: c.error.is_some(),
                wall_us: wall_us(c.t_ns),
                frames: trace
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
    if !c.frames.is_empty() && !file.is_empty() {
        return Some(
            c.frames
                .iter()
                .any(|(f, l, func)| f == file && (*l == first_line || func == function)),
        );
    }
    None
}

/// Attributes one process's frame compiles to the trace's compiles: the compiles that start in
/// a frame compile's span (or just after it, before the next one) and are not recognisably
/// another program.
fn caused(
    p: &ProcessLog,
    tc: &TraceCompiles,
    wall0_us: i64,
) -> BTreeMap<CompileId, (Vec<CausedCompile>, Option<f64>)> {
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

/// Adds the `dynamo` section and its findings. `logs` holds what the CLI found per trace; a
/// trace without an entry has no dynamo section. Does nothing when `logs` is empty.
pub fn attach(report: &mut Report, inputs: &[Input<'_>], logs: &[TorchLogs]) {
    if logs.is_empty() {
        return;
    }
    let mut dynamo = DynamoReport::default();
    let mut findings: Vec<Finding> = Vec::new();
    for l in logs {
        let Some(run) = report.traces.iter().position(|t| t.path == l.trace_path) else {
            continue;
        };
        let Some(input) = inputs.iter().find(|i| i.path == l.trace_path) else {
            continue;
        };
        let trace = input.trace;
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
            continue;
        };
        info.entries = p.entries;
        info.rank = p.rank;
        info.torch_version = p.torch_version.clone();
        info.utc_offset_min = p.utc_offset_s.map(|s| s / 60);
        dynamo.logs.push(info);

        let tc = trace_compiles(trace);
        let wall0_us = trace
            .manifest
            .as_ref()
            .map_or(0, |m| (m.start_wall_ns / 1000) as i64);
        let by_frame = caused(p, &tc, wall0_us);
        let recompiled: BTreeSet<CompileId> =
            p.guard_failures.iter().filter_map(|g| g.id).collect();
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
            dynamo.frame_compiles.push(FrameCompileReport {
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

        // Graph breaks, grouped by line and reason.
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

        // Guard failures, grouped by the failed guard's line (the newest cached compile's).
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
        dynamo.graph_breaks.extend(breaks.into_values());
        dynamo.guard_failures.extend(guards.into_values());
    }

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
        kind: "graph_break".into(),
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
            f.kind == "recompile"
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
        kind: "guard_failure".into(),
        title: format!("{what} → {recompiled}"),
        source: g.source.clone(),
        suggestion: guard_fix(guard),
    })
}
