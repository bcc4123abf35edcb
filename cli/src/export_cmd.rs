//! `tpuscope export`: a trace in formats other tools open — Chrome trace-event JSON (Perfetto UI,
//! chrome://tracing) and flamegraph SVG of compile or sync time by Python stack.
//!
//! A plain trace is converted as it is read (memory does not grow with the trace). Chrome JSON
//! does not need its events in order, so they are written in file order as their records
//! arrive; a device's work, drawn in completion-time order per device, follows its completion
//! within a reorder window; the lane names (metadata events) come last, once every thread and
//! device is known. An executable is named by the first compile or load naming it before its
//! use (collectors write it first). A merged job file is read whole: its hosts share one
//! timeline, whose origin is the earliest host's start.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};
use tpuscope_analyzers::executable_ids::ExecutableIds;
use tpuscope_analyzers::flame::{self, FlameKind};
use tpuscope_analyzers::steps::executable_names;
use tpuscope_core::event::{Direction, ErrorInfo, Execute, ExecuteComplete, Record, StackId};
use tpuscope_core::stream::TraceFile;
use tpuscope_core::{ReadError, Streamed, Trace, TraceStream};

use crate::dump::{Warnings, trace_warnings};
use crate::output::Output;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportFormat {
    /// Chrome trace-event JSON: open it in the Perfetto UI (ui.perfetto.dev) or chrome://tracing.
    ChromeJson,
    /// Interactive SVG flamegraph of compile or sync time by Python stack (see --flame).
    FlamegraphSvg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Flame {
    /// Compile time.
    Compile,
    /// Time the host was blocked on the device (host syncs).
    Sync,
}

#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    pub trace: PathBuf,
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// Output file; gzip-compressed when its name ends in `.gz`.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// What the flamegraph weighs (flamegraph-svg only).
    #[arg(long, value_enum, default_value = "compile")]
    pub flame: Flame,
    /// Overwrite FILE if it exists.
    #[arg(long)]
    pub force: bool,
}

/// Lane ids of devices, apart from host thread ids (Linux tids stay far below on usual systems).
const DEVICE_TID_BASE: u64 = 1_000_000;
/// Lane of executes aggregated after the size cap (no per-call times survive).
const SUMMARY_TID: u64 = 2_000_000;

pub fn export(args: &ExportArgs) -> Result<i32> {
    // Opened first: a long conversion is not wasted on an output we may not write, and an
    // output that is the input is refused before anything is read.
    let out = Output::create(&args.output, args.force, &[&args.trace])?;
    let read_err = |e| read_error(&args.trace, e);
    let mut stream = TraceStream::open(&args.trace).map_err(read_err)?;
    let first = stream.next_record().map_err(read_err)?;
    // What the trace lacks (a cut, damage) is said after the output, which holds the rest.
    let mut warnings = Warnings::default();
    // A merged job file (a segment marker first): every host, on the job timeline.
    if stream.trace().is_some_and(|t| t.segment.is_some()) {
        let traces = collect_segments(stream, first).map_err(read_err)?;
        for t in &traces {
            trace_warnings(&args.trace, t, &mut warnings);
        }
        export_job(args, &traces, out)?;
        warnings.print();
        return Ok(0);
    }
    let gz = args
        .output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    // A failure before commit leaves no output (the Output removes its temporary file); its
    // write errors name it already.
    if gz {
        let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        export_stream(args, stream, first, &mut enc, &mut warnings)?;
        enc.finish()?.commit()?;
    } else {
        let mut out = out;
        export_stream(args, stream, first, &mut out, &mut warnings)?;
        out.commit()?;
    }
    warnings.print();
    Ok(0)
}

fn read_error(path: &Path, e: ReadError) -> anyhow::Error {
    crate::dump::read_error(path, e)
}

/// The rest of a merged job file, whole: one trace per host with its events.
fn collect_segments(
    mut stream: TraceStream<TraceFile>,
    first: Option<Streamed>,
) -> Result<Vec<Trace>, ReadError> {
    let mut done = Vec::new();
    let mut events = Vec::new();
    let mut item = first;
    while let Some(s) = item {
        match s {
            Streamed::Event(r) => events.push(r),
            Streamed::SegmentDone(mut t) => {
                t.events = std::mem::take(&mut events);
                done.push(*t);
            }
        }
        item = stream.next_record()?;
    }
    if let Some(mut t) = stream.finish() {
        t.events = events;
        done.push(t);
    }
    Ok(done)
}

/// A plain trace, converted as it is read: Chrome events are written as their records arrive
/// (lane names and the document's tail at the end); a flamegraph sums time per stack as it
/// goes (memory: the distinct stacks). What the trace lacks goes into `warnings`.
fn export_stream(
    args: &ExportArgs,
    mut stream: TraceStream<TraceFile>,
    first: Option<Streamed>,
    w: &mut impl Write,
    warnings: &mut Warnings,
) -> Result<()> {
    let read_err = |e| read_error(&args.trace, e);
    let mut item = first;
    // Events are small pieces: gathered here before they reach the output (or the compressor).
    let mut w = std::io::BufWriter::with_capacity(1 << 16, w);
    let w = &mut w;
    match args.format {
        ExportFormat::ChromeJson => {
            let mut chrome = Chrome::new(None, 0, HashMap::new());
            w.write_all(b"{\"traceEvents\":[")?;
            let mut arr = JsonArray { w, first: true };
            while let Some(s) = item {
                if let (Streamed::Event(r), Some(t)) = (s, stream.trace()) {
                    chrome.record(t, &r, &mut |v| arr.push(&v))?;
                }
                item = stream.next_record().map_err(read_err)?;
            }
            // The stream checked a header, so there is a trace.
            let Some(trace) = stream.finish() else {
                return Err(anyhow!("{}: no trace", args.trace.display()));
            };
            trace_warnings(&args.trace, &trace, warnings);
            let (meta, other) = chrome.finish(&trace, &mut |v| arr.push(&v))?;
            for m in &meta {
                arr.push(m)?;
            }
            let w = arr.w;
            w.write_all(b"],\"displayTimeUnit\":\"ms\",\"otherData\":")?;
            serde_json::to_writer(&mut *w, &other).context("serializing the trace events")?;
            w.write_all(b"}\n")?;
        }
        ExportFormat::FlamegraphSvg => {
            let (kind, what) = match args.flame {
                Flame::Compile => (FlameKind::CompileTime, "Compile time"),
                Flame::Sync => (FlameKind::SyncStall, "Host sync stall"),
            };
            let mut sums = FlameSums::default();
            while let Some(s) = item {
                if let Streamed::Event(r) = s {
                    sums.add(kind, r);
                }
                item = stream.next_record().map_err(read_err)?;
            }
            let name = args
                .trace
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let folded = match stream.finish() {
                Some(t) => {
                    trace_warnings(&args.trace, &t, warnings);
                    flame::folded(&sums.into_trace(t), kind)
                }
                None => Vec::new(),
            };
            let svg = flame::svg(&folded, &format!("{what} by Python stack — {name}"))
                .map_err(|e| anyhow!("{}: {e}", args.trace.display()))?;
            w.write_all(svg.as_bytes())?;
        }
    }
    w.flush()?;
    Ok(())
}

/// A JSON array written element by element.
struct JsonArray<'w, W: Write> {
    w: &'w mut W,
    first: bool,
}

impl<W: Write> JsonArray<'_, W> {
    fn push(&mut self, v: &impl serde::Serialize) -> std::io::Result<()> {
        if !self.first {
            self.w.write_all(b",")?;
        }
        self.first = false;
        serde_json::to_writer(&mut *self.w, v).map_err(std::io::Error::from)
    }
}

/// Flamegraph weights summed per (stack, name) while streaming. At the end they become one
/// record each in a trace holding the definitions, which `flame::folded` turns into exactly the
/// stacks and weights it gives for the whole trace (it sums per stack text, and a sum of sums
/// is the sum).
#[derive(Default)]
struct FlameSums {
    compiles: HashMap<(StackId, String), u64>,
    d2h_syncs: HashMap<(StackId, String), u64>,
    waits: HashMap<(StackId, String), u64>,
}

impl FlameSums {
    fn add(&mut self, kind: FlameKind, r: Record) {
        let add = |m: &mut HashMap<(StackId, String), u64>, key, ns: u64| {
            let w = m.entry(key).or_insert(0);
            *w = w.saturating_add(ns);
        };
        match (kind, r) {
            (FlameKind::CompileTime, Record::Compile(c)) => {
                let c = *c;
                add(&mut self.compiles, (c.stack, c.executable_name), c.dur_ns);
            }
            (FlameKind::SyncStall, Record::Transfer(t))
                if t.direction == Direction::D2h as i32 && t.sync =>
            {
                let t = *t;
                add(&mut self.d2h_syncs, (t.stack, t.api), t.blocked_ns);
            }
            (FlameKind::SyncStall, Record::Sync(s)) => {
                add(&mut self.waits, (s.stack, s.reason), s.dur_ns);
            }
            _ => {}
        }
    }

    fn into_trace(self, mut trace: Trace) -> Trace {
        use tpuscope_core::event::{Compile, Sync, Transfer};
        let mut events = Vec::new();
        for ((stack, executable_name), dur_ns) in self.compiles {
            events.push(Record::Compile(Box::new(Compile {
                stack,
                executable_name,
                dur_ns,
                ..Default::default()
            })));
        }
        for ((stack, api), blocked_ns) in self.d2h_syncs {
            events.push(Record::Transfer(Box::new(Transfer {
                stack,
                api,
                blocked_ns,
                direction: Direction::D2h as i32,
                sync: true,
                ..Default::default()
            })));
        }
        for ((stack, reason), dur_ns) in self.waits {
            events.push(Record::Sync(Sync {
                stack,
                reason,
                dur_ns,
                ..Default::default()
            }));
        }
        trace.events = events;
        trace
    }
}

/// Writes the document, gzipped when the output is named `*.gz`.
fn write_body(args: &ExportArgs, mut out: Output, body: String) -> Result<i32> {
    let gz = args
        .output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gz"));
    // The output's write errors name it already.
    if gz {
        let mut enc = flate2::write::GzEncoder::new(&mut out, flate2::Compression::default());
        enc.write_all(body.as_bytes())?;
        enc.finish()?;
    } else {
        out.write_all(body.as_bytes())?;
    }
    out.commit()?;
    Ok(0)
}

/// The hosts of a merged job file: Chrome JSON with one process per host, its times shifted
/// onto the job timeline (0 = the earliest host's start); a flamegraph of all hosts' stacks.
fn export_job(args: &ExportArgs, traces: &[Trace], out: Output) -> Result<i32> {
    let body = match args.format {
        ExportFormat::ChromeJson => {
            let starts: Vec<i128> = traces
                .iter()
                .map(|t| {
                    i128::from(run_start(t)) + i128::from(tpuscope_core::align::job_offset_ns(t))
                })
                .collect();
            let job0 = starts.iter().copied().min().unwrap_or(0);
            let mut events = Vec::new();
            for (i, (t, start)) in traces.iter().zip(&starts).enumerate() {
                let shift_us = (start - job0) as f64 / 1000.0;
                let mut doc = chrome_json(t);
                // Hosts may reuse pids: each host is its own process, numbered by segment.
                let pid = i as u64 + 1;
                if let Some(Value::Array(evs)) = doc.get_mut("traceEvents").map(Value::take) {
                    for mut e in evs {
                        e["pid"] = json!(pid);
                        if let Some(ts) = e.get("ts").and_then(Value::as_f64) {
                            e["ts"] = json!(ts + shift_us);
                        }
                        events.push(e);
                    }
                }
            }
            let mut s = serde_json::to_string(&json!({
                "traceEvents": events,
                "displayTimeUnit": "ms",
                "otherData": {"tpuscope_version": env!("CARGO_PKG_VERSION"), "hosts": traces.len()},
            }))
            .context("serializing the trace events")?;
            s.push('\n');
            s
        }
        ExportFormat::FlamegraphSvg => {
            let (kind, what) = match args.flame {
                Flame::Compile => (FlameKind::CompileTime, "Compile time"),
                Flame::Sync => (FlameKind::SyncStall, "Host sync stall"),
            };
            let mut by_stack: std::collections::BTreeMap<String, u64> = Default::default();
            for t in traces {
                for (k, w) in flame::folded(t, kind) {
                    *by_stack.entry(k).or_default() += w;
                }
            }
            let folded: Vec<(String, u64)> = by_stack.into_iter().collect();
            flame::svg(
                &folded,
                &format!("{what} by Python stack — {} hosts", traces.len()),
            )
            .map_err(|e| anyhow!("{}: {e}", args.trace.display()))?
        }
    };
    write_body(args, out, body)
}

/// Device completions a device's lane may receive out of time order before the earliest is
/// drawn (the lane is drawn in completion-time order, as if sorted).
const REORDER: usize = 4096;
/// Launches remembered for their device completions; the oldest is forgotten past this.
const EXECUTES_KEPT: usize = 1 << 20;

/// A device completion waiting on its lane: (completion time, file order, launch time,
/// executable id, seq, error).
type Completion = (u64, u64, u64, u64, u64, Option<String>);

/// A complete ("X") event, typed for the kinds a long trace is made of (launches and device
/// work): serialized straight from the struct, without building a JSON value per event.
#[derive(serde::Serialize)]
struct Complete<A> {
    name: String,
    cat: &'static str,
    ph: &'static str,
    pid: u32,
    tid: u64,
    ts: f64,
    dur: f64,
    args: A,
}

#[derive(serde::Serialize)]
struct ExecuteArgs {
    seq: u64,
    num_devices: u32,
    num_args: u32,
    arg_signature: String,
    completion_tracked: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(serde::Serialize)]
struct DeviceArgs {
    seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// One Chrome event.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Ev {
    Value(Value),
    Execute(Complete<ExecuteArgs>),
    Device(Complete<DeviceArgs>),
}

impl From<Value> for Ev {
    fn from(v: Value) -> Ev {
        Ev::Value(v)
    }
}

/// A completion read before its launch: (file order, completion time, device, error).
type Early = (u64, u64, u32, Option<String>);

/// Chrome trace events of one trace's records, made one record at a time: memory holds the
/// executable names, recent launches (for their device completions) and the lanes seen, not
/// the events.
struct Chrome {
    /// Time 0 of the document: the manifest's start, else the first timed record's.
    base: Option<u64>,
    pid: u32,
    names: HashMap<u64, String>,
    /// Launches by seq, for their device completions, and the order they came in.
    executes: HashMap<u64, (u64, u64)>,
    launch_order: VecDeque<u64>,
    /// Completions read before their launch (the device may finish before the launch call
    /// returns), by seq.
    early: HashMap<u64, Vec<Early>>,
    /// Per device, completions not drawn yet, in (completion time, file order) order.
    lanes: BTreeMap<u32, VecDeque<Completion>>,
    busy_until: BTreeMap<u32, u64>,
    threads: BTreeSet<u32>,
    devices: BTreeSet<u32>,
    summaries: bool,
    /// Records seen: the file order of completions.
    seen: u64,
    ids: ExecutableIds,
}

impl Chrome {
    fn new(base: Option<u64>, pid: u32, names: HashMap<u64, String>) -> Chrome {
        Chrome {
            base,
            pid,
            names,
            executes: HashMap::new(),
            launch_order: VecDeque::new(),
            early: HashMap::new(),
            lanes: BTreeMap::new(),
            busy_until: BTreeMap::new(),
            threads: BTreeSet::new(),
            devices: BTreeSet::new(),
            summaries: false,
            seen: 0,
            ids: ExecutableIds::default(),
        }
    }

    fn exe_name(&self, id: u64) -> String {
        self.names
            .get(&id)
            .filter(|n| !n.is_empty())
            .cloned()
            .unwrap_or_else(|| format!("executable {id:x}"))
    }

    /// Microseconds from the start; events before it (none expected) are put at 0.
    fn us(&self, t_ns: u64) -> f64 {
        t_ns.saturating_sub(self.base.unwrap_or(0)) as f64 / 1000.0
    }

    fn x(&self, cat: &str, name: String, tid: u64, t: u64, d: u64, args: Value) -> Value {
        json!({
            "name": name, "cat": cat, "ph": "X", "pid": self.pid, "tid": tid,
            "ts": self.us(t), "dur": dur(d), "args": args,
        })
    }

    /// The events of `r` (definitions so far in `trace`) passed to `emit`.
    fn record(
        &mut self,
        trace: &Trace,
        r: &Record,
        emit: &mut impl FnMut(Ev) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        self.seen += 1;
        // An address a plugin reused is another executable, as in the report.
        let unique = self.ids.apply(r);
        let r = unique.as_ref().unwrap_or(r);
        if self.base.is_none() {
            let m = trace.manifest.as_ref();
            self.pid = m.map_or(0, |m| m.pid);
            self.base = m
                .map(|m| m.start_mono_ns)
                .filter(|t| *t > 0)
                .or_else(|| r.t_ns());
        }
        // Names as `steps::executable_names` gives them: the first record naming an id.
        match r {
            Record::Compile(c) => {
                self.names
                    .entry(c.executable_id)
                    .or_insert_with(|| c.executable_name.clone());
            }
            Record::Load(l) => {
                self.names
                    .entry(l.executable_id)
                    .or_insert_with(|| l.executable_name.clone());
            }
            Record::CacheLoad(l) if l.executable_id != 0 => {
                self.names
                    .entry(l.executable_id)
                    .or_insert_with(|| l.executable_name.clone());
            }
            _ => {}
        }
        match r {
            Record::Execute(e) => self.execute(trace, e, emit),
            Record::ExecuteComplete(c) => self.execute_complete(c, emit),
            _ => match self.span(trace, r).or_else(|| self.instant(trace, r)) {
                Some(ev) => emit(ev.into()),
                None => Ok(()),
            },
        }
    }

    /// A launch, and the completions of it that came before it.
    fn execute(
        &mut self,
        trace: &Trace,
        e: &Execute,
        emit: &mut impl FnMut(Ev) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let pid = self.pid;
        self.threads.insert(e.thread);
        self.launched(e.seq, e.t_ns, e.executable_id);
        let args = ExecuteArgs {
            seq: e.seq,
            num_devices: e.num_devices,
            num_args: e.num_args,
            arg_signature: trace.string(e.arg_signature).to_string(),
            completion_tracked: e.completion_tracked,
            // As `add_common` says it (launches carry no stack).
            error: e
                .error
                .as_ref()
                .map(|e| format!("code {}: {}", e.code, e.message)),
        };
        emit(Ev::Execute(Complete {
            name: self.exe_name(e.executable_id),
            cat: "execute",
            ph: "X",
            pid,
            tid: e.thread.into(),
            ts: self.us(e.t_ns),
            dur: dur(e.dur_ns),
            args,
        }))?;
        // Completions that came before this launch.
        for (order, end, device, err) in self.early.remove(&e.seq).unwrap_or_default() {
            let c = (end, order, e.t_ns, e.executable_id, e.seq, err);
            self.completed(device, c, emit)?;
        }
        Ok(())
    }

    /// A device's completion: drawn now when its launch is known, else kept for the launch.
    fn execute_complete(
        &mut self,
        c: &ExecuteComplete,
        emit: &mut impl FnMut(Ev) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        self.devices.insert(c.device_index);
        let err = c.error.as_ref().map(|e| e.message.clone());
        match self.executes.get(&c.seq) {
            Some(&(start, id)) => {
                let done = (c.t_ns, self.seen, start, id, c.seq, err);
                self.completed(c.device_index, done, emit)?;
            }
            None => {
                let early = (self.seen, c.t_ns, c.device_index, err);
                self.early.entry(c.seq).or_default().push(early);
            }
        }
        Ok(())
    }

    /// The complete ("X") event of a record that spans time on a thread, if `r` is one.
    fn span(&mut self, trace: &Trace, r: &Record) -> Option<Value> {
        Some(match r {
            Record::Client(c) => {
                self.threads.insert(c.thread);
                let args = json!({"platform": c.platform_name, "version": c.platform_version,
                    "devices": c.devices.len()});
                self.x(
                    "client",
                    "client create".into(),
                    c.thread.into(),
                    c.t_ns,
                    c.dur_ns,
                    args,
                )
            }
            Record::Compile(c) => {
                self.threads.insert(c.thread);
                let mut args = json!({
                    "api": c.api,
                    "program_format": c.program_format,
                    "program_hash": format!("{:016x}", c.program_hash),
                    "program_bytes": c.program_size,
                    "executable_id": format!("{:x}", c.executable_id),
                });
                add_common(&mut args, trace, c.stack, c.error.as_ref());
                let name = if c.executable_name.is_empty() {
                    "(unnamed executable)".to_string()
                } else {
                    c.executable_name.clone()
                };
                self.x("compile", name, c.thread.into(), c.t_ns, c.dur_ns, args)
            }
            Record::Load(l) => {
                self.threads.insert(l.thread);
                let mut args = json!({"executable_id": format!("{:x}", l.executable_id)});
                add_common(&mut args, trace, l.stack, l.error.as_ref());
                let name = format!("load {}", self.exe_name(l.executable_id));
                self.x("load", name, l.thread.into(), l.t_ns, l.dur_ns, args)
            }
            Record::ExecuteSummary(s) => {
                self.summaries = true;
                let args = json!({"count": s.count, "total_dispatch_us": dur(s.total_dur_ns),
                    "errors": s.errors});
                let name = format!("{} ×{}", self.exe_name(s.executable_id), s.count);
                let d = s.t_end_ns.saturating_sub(s.t_start_ns);
                self.x("execute", name, SUMMARY_TID, s.t_start_ns, d, args)
            }
            Record::Transfer(t) => {
                self.threads.insert(t.thread);
                let dir = match Direction::try_from(t.direction) {
                    Ok(Direction::H2d) => "h2d",
                    Ok(Direction::D2h) => "d2h",
                    _ => "transfer",
                };
                let dims: Vec<String> = t.dims.iter().map(i64::to_string).collect();
                let shape = format!("{}[{}]", t.dtype, dims.join(","));
                let mut args = json!({
                    "api": t.api, "bytes": t.bytes, "shape": shape, "device": t.device,
                    "sync": t.sync, "blocked_us": dur(t.blocked_ns),
                });
                add_common(&mut args, trace, t.stack, t.error.as_ref());
                let name = format!("{dir} {shape}");
                self.x("transfer", name, t.thread.into(), t.t_ns, t.dur_ns, args)
            }
            Record::Sync(s) => {
                self.threads.insert(s.thread);
                let mut args = json!({"buffer_id": format!("{:x}", s.buffer_id)});
                add_common(&mut args, trace, s.stack, None);
                let name = format!("sync {}", s.reason);
                self.x("sync", name, s.thread.into(), s.t_ns, s.dur_ns, args)
            }
            Record::CacheStore(c) => {
                self.threads.insert(c.thread);
                let mut args =
                    json!({"bytes": c.bytes, "executable_id": format!("{:x}", c.executable_id)});
                add_common(&mut args, trace, 0, c.error.as_ref());
                let name = format!("cache store {}", self.exe_name(c.executable_id));
                self.x("cache", name, c.thread.into(), c.t_ns, c.dur_ns, args)
            }
            Record::CacheLoad(c) => {
                self.threads.insert(c.thread);
                let mut args = json!({"bytes": c.bytes, "ok": c.ok});
                add_common(&mut args, trace, c.stack, c.error.as_ref());
                let name = if c.executable_name.is_empty() {
                    "cache load".to_string()
                } else {
                    format!("cache load {}", c.executable_name)
                };
                self.x("cache", name, c.thread.into(), c.t_ns, c.dur_ns, args)
            }
            _ => return None,
        })
    }

    /// The counter or instant event of a record that marks a moment, if `r` is one.
    fn instant(&mut self, trace: &Trace, r: &Record) -> Option<Value> {
        let pid = self.pid;
        Some(match r {
            Record::Memory(m) => json!({
                "name": format!("HBM device {}", m.device), "cat": "memory", "ph": "C",
                "pid": pid, "ts": self.us(m.t_ns), "args": {"bytes_in_use": m.bytes_in_use},
            }),
            Record::Step(s) => {
                self.threads.insert(s.thread);
                json!({
                    "name": format!("step {} ({})", s.number, s.marker), "cat": "step", "ph": "i",
                    "s": "p", "pid": pid, "tid": s.thread, "ts": self.us(s.t_ns),
                })
            }
            Record::Error(e) => {
                self.threads.insert(e.thread);
                let mut args = json!({"api": e.api, "code": e.code, "message": e.message});
                add_common(&mut args, trace, e.stack, None);
                json!({
                    "name": format!("error {}", e.api), "cat": "error", "ph": "i", "s": "t",
                    "pid": pid, "tid": e.thread, "ts": self.us(e.t_ns), "args": args,
                })
            }
            Record::Dropped(d) => json!({
                "name": format!("{} events dropped", d.count), "cat": "dropped", "ph": "i",
                "s": "p", "pid": pid, "tid": 0, "ts": self.us(d.t_ns), "args": {"total": d.total},
            }),
            _ => return None,
        })
    }

    fn launched(&mut self, seq: u64, t_ns: u64, id: u64) {
        // As a map over the whole trace: a repeated seq keeps its last launch.
        self.executes.insert(seq, (t_ns, id));
        self.launch_order.push_back(seq);
        if self.launch_order.len() > EXECUTES_KEPT
            && let Some(old) = self.launch_order.pop_front()
        {
            self.executes.remove(&old);
        }
    }

    /// Device time is not recorded, only completion: a device's work is drawn from its
    /// execute's launch, or from the device's previous completion when that is later (it was
    /// busy until then), in completion-time order per device.
    fn completed(
        &mut self,
        device: u32,
        c: Completion,
        emit: &mut impl FnMut(Ev) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        let lane = self.lanes.entry(device).or_default();
        // Completions come nearly in time order: the place is found from the back in a step
        // or two.
        let key = (c.0, c.1);
        let at = lane
            .iter()
            .rposition(|d| (d.0, d.1) <= key)
            .map_or(0, |i| i + 1);
        lane.insert(at, c);
        if lane.len() > REORDER
            && let Some(c) = lane.pop_front()
        {
            emit(self.device_event(device, c))?;
        }
        Ok(())
    }

    fn device_event(&mut self, device: u32, c: Completion) -> Ev {
        let (end, _, start, id, seq, error) = c;
        let from = start
            .max(self.busy_until.get(&device).copied().unwrap_or(0))
            .min(end);
        self.busy_until.insert(device, end);
        Ev::Device(Complete {
            name: self.exe_name(id),
            cat: "device",
            ph: "X",
            pid: self.pid,
            tid: DEVICE_TID_BASE + u64::from(device),
            ts: self.us(from),
            dur: dur(end - from),
            args: DeviceArgs { seq, error },
        })
    }

    /// The device work still waiting, then the lane names and the document's `otherData`.
    fn finish(
        mut self,
        trace: &Trace,
        emit: &mut impl FnMut(Ev) -> std::io::Result<()>,
    ) -> std::io::Result<(Vec<Value>, Value)> {
        for device in self.lanes.keys().copied().collect::<Vec<_>>() {
            while let Some(c) = self.lanes.get_mut(&device).and_then(VecDeque::pop_front) {
                let ev = self.device_event(device, c);
                emit(ev)?;
            }
        }
        let pid = trace.manifest.as_ref().map_or(self.pid, |m| m.pid);
        let mut meta = Vec::new();
        if let Some(m) = &trace.manifest {
            let name = format!("{} (pid {} on {})", m.command_line.join(" "), m.pid, m.host);
            meta.push(
                json!({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                "args": {"name": name}}),
            );
        }
        let lane = |tid: u64, name: String| {
            [
                json!({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}),
                json!({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                    "args": {"sort_index": tid}}),
            ]
        };
        for t in &self.threads {
            meta.extend(lane((*t).into(), format!("thread {t}")));
        }
        for d in &self.devices {
            meta.extend(lane(DEVICE_TID_BASE + u64::from(*d), format!("device {d}")));
        }
        if self.summaries {
            meta.extend(lane(SUMMARY_TID, "executes (aggregated)".into()));
        }
        let mut other = json!({"tpuscope_version": env!("CARGO_PKG_VERSION")});
        if let Some(m) = &trace.manifest {
            other["host"] = Value::String(m.host.clone());
            other["command"] = Value::String(m.command_line.join(" "));
            other["start_wall_ns"] = json!(m.start_wall_ns);
        }
        Ok((meta, other))
    }
}

fn dur(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// When the run started on its monotonic clock: the manifest's, else the first timed record's.
fn run_start(trace: &Trace) -> u64 {
    trace
        .manifest
        .as_ref()
        .map(|m| m.start_mono_ns)
        .filter(|t| *t > 0)
        .or_else(|| trace.events.iter().filter_map(Record::t_ns).min())
        .unwrap_or(0)
}

/// The trace as a Chrome trace-event document: one process (the traced pid), a lane per host
/// thread and per device, complete events for timed calls, instants for steps and errors, and
/// HBM counters. Times are microseconds from the run's start. (A plain trace is exported by
/// [`export_stream`], which writes the same events as they are read.)
fn chrome_json(trace: &Trace) -> Value {
    let base = run_start(trace);
    let pid = trace.manifest.as_ref().map_or(0, |m| m.pid);
    let mut chrome = Chrome::new(Some(base), pid, executable_names(trace));
    let mut ev = Vec::new();
    let mut push = |v: Ev| {
        ev.push(serde_json::to_value(v).map_err(std::io::Error::from)?);
        Ok(())
    };
    // Pushing into a Vec cannot fail.
    let _ = trace
        .events
        .iter()
        .try_for_each(|r| chrome.record(trace, r, &mut push));
    let (mut meta, other) = chrome
        .finish(trace, &mut push)
        .unwrap_or_else(|_| (Vec::new(), Value::Null));
    meta.extend(ev);
    json!({"traceEvents": meta, "displayTimeUnit": "ms", "otherData": other})
}

/// The innermost Python frame of the user's code (else the innermost frame) and the PJRT
/// error, when there are.
fn add_common(args: &mut Value, trace: &Trace, stack: StackId, error: Option<&ErrorInfo>) {
    let frames = trace
        .stacks
        .get(&stack)
        .map(|s| s.frames.as_slice())
        .unwrap_or_default();
    let library = |file: &str| {
        file.starts_with('<')
            || ["/site-packages/", "/dist-packages/", "/lib/python3"]
                .iter()
                .any(|m| file.contains(m))
    };
    let frame = frames
        .iter()
        .find(|f| !library(trace.string(f.file)))
        .or(frames.first());
    if let Some(f) = frame {
        args["python"] = Value::String(format!(
            "{}:{} {}",
            trace.string(f.file),
            f.line,
            trace.string(f.function)
        ));
    }
    if let Some(e) = error {
        args["error"] = Value::String(format!("code {}: {}", e.code, e.message));
    }
}
