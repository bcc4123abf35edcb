//! Reading TORCH_TRACE files into records: frame compiles, graph breaks and guard failures per
//! process.
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
//! else by the span of their entries' times.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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

/// One call in the Python stack of a `dynamo_start` entry: a stack entry, not a trace-file frame.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DynamoStackEntry {
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
    pub stack: Vec<DynamoStackEntry>,
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

    /// The user's line the compiled function was called from: the innermost stack entry below
    /// it that is not torch's own (an `nn.Module` is called through torch's wrappers).
    pub fn called_at(&self) -> Option<&DynamoStackEntry> {
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

/// What the first pass over the entries collects for the later ones.
#[derive(Default)]
struct Collected {
    /// Per pid: interned file names.
    strings: BTreeMap<u32, BTreeMap<u64, String>>,
    /// Per pid: (header stamp, Unix µs) pairs for the clock.
    calib: BTreeMap<u32, Vec<(Stamp, i64)>>,
    /// Every entry's pid, compile id, stamp and exact Unix µs (when it has one).
    stamped: Vec<(u32, Option<CompileId>, Stamp, Option<i64>)>,
    /// Events read once the clock and every file name are known.
    pending: Vec<(u32, Stamp, PendingEvent)>,
}

/// Parses log files (any number, any pids). Never fails: what cannot be read is counted.
pub fn parse<'a>(texts: impl IntoIterator<Item = &'a str>) -> Parsed {
    let mut parsed = Parsed::default();
    let mut seen = Collected::default();
    for text in texts {
        let (es, skipped) = entries(text);
        parsed.skipped_lines += skipped;
        for e in &es {
            read_entry(&mut parsed.processes, &mut seen, e);
        }
    }
    for (pid, p) in parsed.processes.iter_mut() {
        p.utc_offset_s = seen.calib.get(pid).and_then(|c| utc_offset(c));
    }
    set_spans(&mut parsed.processes, &seen);
    let known = known_paths(&parsed.processes, &seen.strings);
    let Collected {
        strings,
        calib,
        pending,
        ..
    } = seen;
    for (pid, stamp, ev) in pending {
        let Some(p) = parsed.processes.get_mut(&pid) else {
            continue;
        };
        let unix_us = p.utc_offset_s.and_then(|off| {
            let near = calib.get(&pid).and_then(|c| c.first()).map(|c| c.1)?;
            stamp.unix_us(off, near)
        });
        match ev {
            PendingEvent::Start(id, entries) => set_stack(p, id, &entries, strings.get(&pid)),
            PendingEvent::Break(id, payload) => add_graph_break(p, id, &payload, unix_us),
            PendingEvent::Guards(id, payload) => {
                add_guard_failure(p, id, &payload, unix_us, known.get(&pid));
            }
        }
    }
    parsed
}

/// Reads one entry into its process, or into `seen` what needs a later pass.
fn read_entry(processes: &mut BTreeMap<u32, ProcessLog>, seen: &mut Collected, e: &Entry) {
    let p = processes.entry(e.pid).or_insert_with(|| ProcessLog {
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
        seen.strings
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
            seen.calib.entry(e.pid).or_default().push((e.stamp, ts));
        }
    } else if let Some(start) = e.meta.get("dynamo_start") {
        let stack = start
            .get("stack")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        seen.pending
            .push((e.pid, e.stamp, PendingEvent::Start(id, stack)));
    } else if let Some(m) = e.meta.get("compilation_metrics") {
        read_compilation_metrics(p, id, m);
    } else if let Some(a) = e.meta.get("artifact") {
        read_artifact(p, &mut seen.pending, e, id, a);
    }
    seen.stamped.push((e.pid, id, e.stamp, exact_us));
}

/// A `compilation_metrics` entry: what its frame compile was, how long it took, how it failed.
fn read_compilation_metrics(p: &mut ProcessLog, id: Option<CompileId>, m: &Value) {
    let id = m
        .get("compile_id")
        .and_then(Value::as_str)
        .and_then(CompileId::parse)
        .or(id);
    let Some(id) = id else { return };
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

/// An `artifact` entry: a graph break or recompile reasons (read later), or torch's version.
fn read_artifact(
    p: &mut ProcessLog,
    pending: &mut Vec<(u32, Stamp, PendingEvent)>,
    e: &Entry,
    id: Option<CompileId>,
    a: &Value,
) {
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

/// The span of every compile id, from its entries' times.
fn set_spans(processes: &mut BTreeMap<u32, ProcessLog>, seen: &Collected) {
    for (pid, id, stamp, exact) in &seen.stamped {
        let Some(p) = processes.get_mut(pid) else {
            continue;
        };
        let Some(id) = id else { continue };
        let reference = seen.calib.get(pid).and_then(|c| c.first()).map(|c| c.1);
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
}

/// Per pid, the full paths this log knows, to resolve the guards' shortened ones.
fn known_paths(
    processes: &BTreeMap<u32, ProcessLog>,
    strings: &BTreeMap<u32, BTreeMap<u64, String>>,
) -> BTreeMap<u32, BTreeSet<String>> {
    let mut known: BTreeMap<u32, BTreeSet<String>> = BTreeMap::new();
    for (pid, s) in strings {
        known.entry(*pid).or_default().extend(s.values().cloned());
    }
    for p in processes.values() {
        let k = known.entry(p.pid).or_default();
        k.extend(p.frames.values().map(|f| f.file.clone()));
    }
    known
}

/// A `dynamo_start` entry's stack, file names resolved through the interned `names`.
fn set_stack(
    p: &mut ProcessLog,
    id: Option<CompileId>,
    entries: &[Value],
    names: Option<&BTreeMap<u64, String>>,
) {
    let stack = entries
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
            Some(DynamoStackEntry {
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

fn add_graph_break(p: &mut ProcessLog, id: Option<CompileId>, payload: &str, unix_us: Option<i64>) {
    let (at, reason, hint) = parse_graph_break(payload);
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

/// Recompile reasons: the failed guards, their shortened paths resolved against `paths`.
fn add_guard_failure(
    p: &mut ProcessLog,
    id: Option<CompileId>,
    payload: &str,
    unix_us: Option<i64>,
    paths: Option<&BTreeSet<String>>,
) {
    let guards = recompile_reason_texts(payload)
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
