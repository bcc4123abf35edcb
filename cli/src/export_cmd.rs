//! `tpuscope export`: a trace in formats other tools open — Chrome trace-event JSON (Perfetto UI,
//! chrome://tracing) and flamegraph SVG of compile or sync time by Python stack.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};
use tpuscope_analyzers::flame::{self, FlameKind};
use tpuscope_analyzers::steps::executable_names;
use tpuscope_core::event::{Direction, ErrorInfo, Record, StackId};
use tpuscope_core::{ReadError, Trace};

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
    // A merged job file: every host, on the job timeline.
    let traces = read_traces(&args.trace)?;
    let trace = match traces.as_slice() {
        [one] => one,
        _ => return export_job(args, &traces, out),
    };
    let body = match args.format {
        ExportFormat::ChromeJson => {
            let mut s = serde_json::to_string(&chrome_json(trace))
                .context("serializing the trace events")?;
            s.push('\n');
            s
        }
        ExportFormat::FlamegraphSvg => {
            let (kind, what) = match args.flame {
                Flame::Compile => (FlameKind::CompileTime, "Compile time"),
                Flame::Sync => (FlameKind::SyncStall, "Host sync stall"),
            };
            let name = args
                .trace
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            flame::svg(
                &flame::folded(trace, kind),
                &format!("{what} by Python stack — {name}"),
            )
            .map_err(|e| anyhow!("{}: {e}", args.trace.display()))?
        }
    };
    write_body(args, out, body)
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
                    let base = t
                        .manifest
                        .as_ref()
                        .map(|m| m.start_mono_ns)
                        .filter(|t| *t > 0)
                        .or_else(|| t.events.iter().filter_map(Record::t_ns).min())
                        .unwrap_or(0);
                    i128::from(base) + i128::from(tpuscope_core::align::job_offset_ns(t))
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

fn read_traces(path: &Path) -> Result<Vec<Trace>> {
    tpuscope_core::read_traces_file(path).map_err(|e| match e {
        // Its message already names the path and the OS error.
        ReadError::Io { .. } => anyhow!("{e}"),
        other => anyhow!("{}: {other}", path.display()),
    })
}

/// The trace as a Chrome trace-event document: one process (the traced pid), a lane per host
/// thread and per device, complete events for timed calls, instants for steps and errors, and
/// HBM counters. Times are microseconds from the run's start.
pub fn chrome_json(trace: &Trace) -> Value {
    let base = trace
        .manifest
        .as_ref()
        .map(|m| m.start_mono_ns)
        .filter(|t| *t > 0)
        .or_else(|| trace.events.iter().filter_map(Record::t_ns).min())
        .unwrap_or(0);
    // Events before the manifest's instant (none expected) are put at 0 rather than negative.
    let us = |t_ns: u64| t_ns.saturating_sub(base) as f64 / 1000.0;
    let dur = |ns: u64| ns as f64 / 1000.0;
    let pid = trace.manifest.as_ref().map_or(0, |m| m.pid);
    let names = executable_names(trace);
    let exe_name = |id: u64| {
        names
            .get(&id)
            .filter(|n| !n.is_empty())
            .cloned()
            .unwrap_or_else(|| format!("executable {id:x}"))
    };

    let mut ev: Vec<Value> = Vec::new();
    let mut threads: BTreeSet<u32> = BTreeSet::new();
    let mut devices: BTreeSet<u32> = BTreeSet::new();
    let mut summaries = false;
    let x =
        |ev: &mut Vec<Value>, cat: &str, name: String, tid: u64, t: u64, d: u64, args: Value| {
            ev.push(json!({
                "name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
                "ts": us(t), "dur": dur(d), "args": args,
            }));
        };
    // Executes by seq, for their device completions (a completion can be written before its
    // execute: the device may finish before the launch call returns).
    let executes: HashMap<u64, (u64, u64)> = trace
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Execute(e) => Some((e.seq, (e.t_ns, e.executable_id))),
            _ => None,
        })
        .collect();
    // (device, completion time, execute start, executable id, seq, error)
    let mut completions: Vec<(u32, u64, u64, u64, u64, Option<String>)> = Vec::new();

    for r in &trace.events {
        match r {
            Record::Client(c) => {
                threads.insert(c.thread);
                let args = json!({"platform": c.platform_name, "version": c.platform_version,
                    "devices": c.devices.len()});
                x(
                    &mut ev,
                    "client",
                    "client create".into(),
                    c.thread.into(),
                    c.t_ns,
                    c.dur_ns,
                    args,
                );
            }
            Record::Compile(c) => {
                threads.insert(c.thread);
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
                x(
                    &mut ev,
                    "compile",
                    name,
                    c.thread.into(),
                    c.t_ns,
                    c.dur_ns,
                    args,
                );
            }
            Record::Load(l) => {
                threads.insert(l.thread);
                let mut args = json!({"executable_id": format!("{:x}", l.executable_id)});
                add_common(&mut args, trace, l.stack, l.error.as_ref());
                let name = format!("load {}", exe_name(l.executable_id));
                x(
                    &mut ev,
                    "load",
                    name,
                    l.thread.into(),
                    l.t_ns,
                    l.dur_ns,
                    args,
                );
            }
            Record::Execute(e) => {
                threads.insert(e.thread);
                let mut args = json!({
                    "seq": e.seq,
                    "num_devices": e.num_devices,
                    "num_args": e.num_args,
                    "arg_signature": trace.string(e.arg_signature),
                    "completion_tracked": e.completion_tracked,
                });
                add_common(&mut args, trace, 0, e.error.as_ref());
                let name = exe_name(e.executable_id);
                x(
                    &mut ev,
                    "execute",
                    name,
                    e.thread.into(),
                    e.t_ns,
                    e.dur_ns,
                    args,
                );
            }
            Record::ExecuteComplete(c) => {
                devices.insert(c.device_index);
                if let Some(&(start, id)) = executes.get(&c.seq) {
                    let err = c.error.as_ref().map(|e| e.message.clone());
                    completions.push((c.device_index, c.t_ns, start, id, c.seq, err));
                }
            }
            Record::ExecuteSummary(s) => {
                summaries = true;
                let args = json!({"count": s.count, "total_dispatch_us": dur(s.total_dur_ns),
                    "errors": s.errors});
                let name = format!("{} ×{}", exe_name(s.executable_id), s.count);
                let d = s.t_end_ns.saturating_sub(s.t_start_ns);
                x(&mut ev, "execute", name, SUMMARY_TID, s.t_start_ns, d, args);
            }
            Record::Transfer(t) => {
                threads.insert(t.thread);
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
                x(
                    &mut ev,
                    "transfer",
                    format!("{dir} {shape}"),
                    t.thread.into(),
                    t.t_ns,
                    t.dur_ns,
                    args,
                );
            }
            Record::Sync(s) => {
                threads.insert(s.thread);
                let mut args = json!({"buffer_id": format!("{:x}", s.buffer_id)});
                add_common(&mut args, trace, s.stack, None);
                x(
                    &mut ev,
                    "sync",
                    format!("sync {}", s.reason),
                    s.thread.into(),
                    s.t_ns,
                    s.dur_ns,
                    args,
                );
            }
            Record::CacheStore(c) => {
                threads.insert(c.thread);
                let mut args =
                    json!({"bytes": c.bytes, "executable_id": format!("{:x}", c.executable_id)});
                add_common(&mut args, trace, 0, c.error.as_ref());
                let name = format!("cache store {}", exe_name(c.executable_id));
                x(
                    &mut ev,
                    "cache",
                    name,
                    c.thread.into(),
                    c.t_ns,
                    c.dur_ns,
                    args,
                );
            }
            Record::CacheLoad(c) => {
                threads.insert(c.thread);
                let mut args = json!({"bytes": c.bytes, "ok": c.ok});
                add_common(&mut args, trace, c.stack, c.error.as_ref());
                let name = if c.executable_name.is_empty() {
                    "cache load".to_string()
                } else {
                    format!("cache load {}", c.executable_name)
                };
                x(
                    &mut ev,
                    "cache",
                    name,
                    c.thread.into(),
                    c.t_ns,
                    c.dur_ns,
                    args,
                );
            }
            Record::Memory(m) => ev.push(json!({
                "name": format!("HBM device {}", m.device), "cat": "memory", "ph": "C",
                "pid": pid, "ts": us(m.t_ns), "args": {"bytes_in_use": m.bytes_in_use},
            })),
            Record::Step(s) => {
                threads.insert(s.thread);
                ev.push(json!({
                    "name": format!("step {} ({})", s.number, s.marker), "cat": "step", "ph": "i",
                    "s": "p", "pid": pid, "tid": s.thread, "ts": us(s.t_ns),
                }));
            }
            Record::Error(e) => {
                threads.insert(e.thread);
                let mut args = json!({"api": e.api, "code": e.code, "message": e.message});
                add_common(&mut args, trace, e.stack, None);
                ev.push(json!({
                    "name": format!("error {}", e.api), "cat": "error", "ph": "i", "s": "t",
                    "pid": pid, "tid": e.thread, "ts": us(e.t_ns), "args": args,
                }));
            }
            Record::Dropped(d) => ev.push(json!({
                "name": format!("{} events dropped", d.count), "cat": "dropped", "ph": "i",
                "s": "p", "pid": pid, "tid": 0, "ts": us(d.t_ns), "args": {"total": d.total},
            })),
            _ => {}
        }
    }

    // Device time is not recorded, only completion: a device's work is drawn from its execute's
    // launch, or from the device's previous completion when that is later (it was busy until then).
    completions.sort_by_key(|c| (c.0, c.1));
    let mut busy_until: BTreeMap<u32, u64> = BTreeMap::new();
    for (device, end, start, id, seq, err) in completions {
        let from = start
            .max(busy_until.get(&device).copied().unwrap_or(0))
            .min(end);
        busy_until.insert(device, end);
        let mut args = json!({"seq": seq});
        if let Some(m) = err {
            args["error"] = Value::String(m);
        }
        let tid = DEVICE_TID_BASE + u64::from(device);
        x(&mut ev, "device", exe_name(id), tid, from, end - from, args);
    }

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
    for t in threads {
        meta.extend(lane(t.into(), format!("thread {t}")));
    }
    for d in devices {
        meta.extend(lane(DEVICE_TID_BASE + u64::from(d), format!("device {d}")));
    }
    if summaries {
        meta.extend(lane(SUMMARY_TID, "executes (aggregated)".into()));
    }
    meta.extend(ev);

    let mut other = json!({"tpuscope_version": env!("CARGO_PKG_VERSION")});
    if let Some(m) = &trace.manifest {
        other["host"] = Value::String(m.host.clone());
        other["command"] = Value::String(m.command_line.join(" "));
        other["start_wall_ns"] = json!(m.start_wall_ns);
    }
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
