//! Words for one record: a line for tooltips, fields and a stack for the details panel.

use tpuscope_analyzers::source::{is_framework_file, stack_lines};
use tpuscope_core::Trace;
use tpuscope_core::event::{Direction, Record};

use crate::fmt;

/// One line: `compile jit_train_step 80.0 ms`.
pub fn line(trace: &Trace, event: usize, names: &dyn Fn(u64) -> String) -> String {
    let Some(r) = trace.events.get(event) else {
        return String::new();
    };
    let d = |ns: u64| fmt::dur(ns as f64);
    match r {
        Record::Compile(c) => {
            let failed = if c.error.is_some() { " FAILED" } else { "" };
            format!("compile {}{failed} · {}", c.executable_name, d(c.dur_ns))
        }
        Record::Load(l) => format!("load {} · {}", l.executable_name, d(l.dur_ns)),
        Record::Execute(x) => format!(
            "execute {} · {} dispatch",
            names(x.executable_id),
            d(x.dur_ns)
        ),
        Record::ExecuteComplete(c) => {
            format!("device {} finished execute #{}", c.device_index, c.seq)
        }
        Record::ExecuteSummary(s) => format!(
            "{} executes of {} (summarized) · {} total",
            s.count,
            names(s.executable_id),
            d(s.total_dur_ns)
        ),
        Record::Transfer(x) => {
            let dir = if x.direction == Direction::D2h as i32 {
                "device→host"
            } else {
                "host→device"
            };
            let sync = if x.sync { " (host sync)" } else { "" };
            format!(
                "{dir} {}[{}] {}{sync} · {}",
                x.dtype,
                x.dims
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                fmt::bytes(x.bytes as f64),
                d(x.dur_ns)
            )
        }
        Record::Sync(s) => format!("sync {} · {}", s.reason, d(s.dur_ns)),
        Record::CacheStore(c) => format!(
            "cache store {} {} · {}",
            c.executable_name,
            fmt::bytes(c.bytes as f64),
            d(c.dur_ns)
        ),
        Record::CacheLoad(c) => format!(
            "cache load {} {} · {}",
            c.executable_name,
            if c.ok { "ok" } else { "FAILED" },
            d(c.dur_ns)
        ),
        Record::Error(e) => format!(
            "error in {}: {}",
            e.api,
            e.message.lines().next().unwrap_or("")
        ),
        Record::Note(n) => format!("note {}: {}", n.topic, n.message),
        Record::Client(c) => format!("client {} {}", c.platform_name, c.platform_version),
        Record::Memory(m) => format!(
            "memory device {}: {} in use",
            m.device,
            fmt::bytes(m.bytes_in_use as f64)
        ),
        Record::Step(s) => format!("step {} ({})", s.number, s.marker),
        other => other.kind().name().to_string(),
    }
}

/// The details of a record: (field, value) pairs and its Python stack (innermost first, with
/// whether each frame is the user's).
pub struct Details {
    pub title: String,
    pub fields: Vec<(String, String)>,
    pub stack: Vec<(String, bool)>,
}

pub fn details(trace: &Trace, event: usize, t0: u64, names: &dyn Fn(u64) -> String) -> Details {
    let mut fields: Vec<(String, String)> = Vec::new();
    let mut f = |k: &str, v: String| fields.push((k.to_string(), v));
    let Some(r) = trace.events.get(event) else {
        return Details {
            title: String::new(),
            fields: Vec::new(),
            stack: Vec::new(),
        };
    };
    let d = |ns: u64| fmt::dur(ns as f64);
    if let Some(t) = r.t_ns() {
        f("at", d(t.saturating_sub(t0)));
    }
    let mut stack = 0;
    let err = |e: &Option<tpuscope_core::event::ErrorInfo>| {
        e.as_ref()
            .map(|e| format!("code {}: {}", e.code, e.message))
    };
    match r {
        Record::Compile(c) => {
            f("duration", d(c.dur_ns));
            f("executable", c.executable_name.clone());
            f("api", c.api.clone());
            f(
                "program",
                format!(
                    "{} {} ({:016x})",
                    c.program_format,
                    fmt::bytes(c.program_size as f64),
                    c.program_hash
                ),
            );
            f("thread", c.thread.to_string());
            if let Some(m) = &c.memory {
                f("peak memory", fmt::bytes(m.peak_memory as f64));
                f("temp", fmt::bytes(m.temp_size as f64));
            }
            if let Some(e) = err(&c.error) {
                f("error", e);
            }
            stack = c.stack;
        }
        Record::Load(l) => {
            f("duration", d(l.dur_ns));
            f("executable", l.executable_name.clone());
            stack = l.stack;
        }
        Record::Execute(x) => {
            f("dispatch", d(x.dur_ns));
            f("executable", names(x.executable_id));
            f("devices", x.num_devices.to_string());
            f("arguments", trace.string(x.arg_signature).to_string());
            f("seq", x.seq.to_string());
            f("thread", x.thread.to_string());
            if let Some(e) = err(&x.error) {
                f("error", e);
            }
        }
        Record::ExecuteComplete(c) => {
            f("device", c.device_index.to_string());
            f("seq", c.seq.to_string());
            if let Some(e) = err(&c.error) {
                f("error", e);
            }
        }
        Record::ExecuteSummary(s) => {
            f("executable", names(s.executable_id));
            f("count", s.count.to_string());
            f("until", d(s.t_end_ns.saturating_sub(t0)));
            f("total dispatch", d(s.total_dur_ns));
            f("errors", s.errors.to_string());
        }
        Record::Transfer(x) => {
            f("duration", d(x.dur_ns));
            f("api", x.api.clone());
            f("bytes", fmt::bytes(x.bytes as f64));
            f(
                "shape",
                format!(
                    "{}[{}]",
                    x.dtype,
                    x.dims
                        .iter()
                        .map(i64::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            );
            f("device", x.device.to_string());
            f("host sync", x.sync.to_string());
            if x.blocked_ns > 0 {
                f("blocked", d(x.blocked_ns));
            }
            if let Some(e) = err(&x.error) {
                f("error", e);
            }
            stack = x.stack;
        }
        Record::Sync(s) => {
            f("duration", d(s.dur_ns));
            f("reason", s.reason.clone());
            f("thread", s.thread.to_string());
            stack = s.stack;
        }
        Record::CacheStore(c) => {
            f("duration", d(c.dur_ns));
            f("executable", c.executable_name.clone());
            f("bytes", fmt::bytes(c.bytes as f64));
            if let Some(e) = err(&c.error) {
                f("error", e);
            }
        }
        Record::CacheLoad(c) => {
            f("duration", d(c.dur_ns));
            f("executable", c.executable_name.clone());
            f("ok", c.ok.to_string());
            if let Some(e) = err(&c.error) {
                f("error", e);
            }
            stack = c.stack;
        }
        Record::Error(e) => {
            f("api", e.api.clone());
            f("code", e.code.to_string());
            f("message", e.message.clone());
            stack = e.stack;
        }
        Record::Note(n) => {
            f("topic", n.topic.clone());
            f("message", n.message.clone());
        }
        _ => {}
    }
    let stack = stack_lines(trace, stack)
        .into_iter()
        .map(|l| {
            let file = l.split(':').next().unwrap_or("");
            let user = !is_framework_file(file);
            (l, user)
        })
        .collect();
    Details {
        title: line(trace, event, names),
        fields,
        stack,
    }
}
