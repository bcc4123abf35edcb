//! Device memory over time, compiled memory per executable, and the post-mortem of an OOM.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tpuscope_core::Trace;
use tpuscope_core::event::{MemoryOrigin, Record};

use crate::steps::Steps;

/// Memory of one device over a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeviceMemory {
    pub run: usize,
    pub device: i32,
    /// `device_memory_stats` (the plugin's allocator) or `live_buffers` (tpuscope's own count of
    /// live PJRT buffers, when the plugin does not report).
    pub origin: String,
    pub samples: u64,
    pub peak_bytes: i64,
    pub last_bytes: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_fraction: Option<f64>,
    /// Bytes in use at the end of each step, least-squares slope per step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub growth_bytes_per_step: Option<f64>,
}

/// Compiled memory of one executable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutableMemory {
    pub run: usize,
    pub graph: String,
    pub argument_bytes: i64,
    pub output_bytes: i64,
    pub temp_bytes: i64,
    pub generated_code_bytes: i64,
    pub peak_bytes: i64,
}

/// The device memory of a run, per device (the allocator's numbers when there are any).
pub fn devices(trace: &Trace, run: usize, steps: &Steps) -> Vec<DeviceMemory> {
    // (device, origin) → (t, bytes in use, limit).
    type Series = BTreeMap<(i32, i32), Vec<(u64, i64, Option<i64>)>>;
    let mut series: Series = BTreeMap::new();
    for r in &trace.events {
        if let Record::Memory(m) = r {
            series.entry((m.device, m.origin)).or_default().push((
                m.t_ns,
                m.peak_bytes_in_use
                    .unwrap_or(m.bytes_in_use)
                    .max(m.bytes_in_use),
                m.bytes_limit,
            ));
        }
    }
    let stats = MemoryOrigin::PluginStats as i32;
    let devices: Vec<i32> = {
        let mut d: Vec<i32> = series.keys().map(|k| k.0).collect();
        d.dedup();
        d
    };
    let mut out = Vec::new();
    for device in devices {
        // Prefer the allocator's view over tpuscope's live-buffer count.
        let origin = if series.contains_key(&(device, stats)) {
            stats
        } else {
            series.keys().find(|k| k.0 == device).map_or(stats, |k| k.1)
        };
        let Some(samples) = series.get(&(device, origin)) else {
            continue;
        };
        let peak = samples.iter().map(|s| s.1).max().unwrap_or(0);
        let limit = samples.iter().filter_map(|s| s.2).filter(|&l| l > 0).max();
        let last = samples.last().map_or(0, |s| s.1);
        let at_step_end: Vec<f64> = steps
            .steps
            .iter()
            .filter_map(|st| {
                let i = samples.partition_point(|s| s.0 <= st.end_ns);
                i.checked_sub(1).map(|i| samples[i].1 as f64)
            })
            .collect();
        out.push(DeviceMemory {
            run,
            device,
            origin: if origin == stats {
                "device_memory_stats".to_string()
            } else {
                "live_buffers".to_string()
            },
            samples: samples.len() as u64,
            peak_bytes: peak,
            last_bytes: last,
            limit_bytes: limit,
            peak_fraction: limit.map(|l| peak as f64 / l as f64),
            growth_bytes_per_step: slope(&at_step_end),
        });
    }
    out
}

/// Least-squares slope of equally spaced values (None for fewer than three).
fn slope(v: &[f64]) -> Option<f64> {
    if v.len() < 3 {
        return None;
    }
    let n = v.len() as f64;
    let mean_x = (n - 1.0) / 2.0;
    let mean_y = v.iter().sum::<f64>() / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (i, y) in v.iter().enumerate() {
        let dx = i as f64 - mean_x;
        num += dx * (y - mean_y);
        den += dx * dx;
    }
    Some(num / den)
}

/// Compiled memory of each successful compile, largest peak first.
pub fn executables(trace: &Trace, run: usize) -> Vec<ExecutableMemory> {
    let mut out: Vec<ExecutableMemory> = trace
        .events
        .iter()
        .filter_map(|r| match r {
            Record::Compile(c) => {
                let m = c.memory.as_ref()?;
                Some(ExecutableMemory {
                    run,
                    graph: c.executable_name.clone(),
                    argument_bytes: m.argument_size,
                    output_bytes: m.output_size,
                    temp_bytes: m.temp_size,
                    generated_code_bytes: m.generated_code_size,
                    peak_bytes: m.peak_memory,
                })
            }
            _ => None,
        })
        .collect();
    out.sort_by(|a, b| b.peak_bytes.cmp(&a.peak_bytes).then(a.graph.cmp(&b.graph)));
    out
}

/// What led up to an out-of-memory error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OomReport {
    pub run: usize,
    pub t_ms: f64,
    pub api: String,
    pub message: String,
    /// The last compiles and executes before it, oldest first.
    pub last_events: Vec<String>,
    pub largest_executables: Vec<ExecutableMemory>,
    /// Bytes in use per device at the last sample before the error.
    pub memory_at_error: BTreeMap<i32, i64>,
}

/// True for the messages plugins give when device memory runs out.
pub fn is_oom(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("out of memory")
        || m.contains("resource_exhausted")
        || m.contains("resource exhausted")
        || m.contains("exceeded hbm capacity")
        || m.contains("allocation failure")
}

/// The post-mortem of the first out-of-memory error of a run.
pub fn oom(trace: &Trace, run: usize) -> Option<OomReport> {
    let start = trace.manifest.as_ref().map_or(0, |m| m.start_mono_ns);
    let (idx, t, api, message) = trace.events.iter().enumerate().find_map(|(i, r)| {
        // Borrowed until a message matches: this runs over every event.
        let (t, api, msg) = match r {
            Record::Error(e) => (e.t_ns, e.api.as_str(), e.message.as_str()),
            Record::Compile(c) => (c.t_ns, "compile", c.error.as_ref()?.message.as_str()),
            Record::Execute(e) => (e.t_ns, "execute", e.error.as_ref()?.message.as_str()),
            Record::Transfer(x) => (x.t_ns, x.api.as_str(), x.error.as_ref()?.message.as_str()),
            _ => return None,
        };
        is_oom(msg).then(|| (i, t, api.to_string(), msg.to_string()))
    })?;
    let names = crate::steps::executable_names(trace);
    let mut last_events: Vec<String> = trace.events[..idx]
        .iter()
        .rev()
        .filter_map(|r| match r {
            Record::Compile(c) => Some(format!(
                "{:.3} ms compile {}",
                c.t_ns.saturating_sub(start) as f64 / 1e6,
                c.executable_name
            )),
            Record::Execute(e) => Some(format!(
                "{:.3} ms execute {}",
                e.t_ns.saturating_sub(start) as f64 / 1e6,
                names
                    .get(&e.executable_id)
                    .cloned()
                    .unwrap_or_else(|| format!("{:x}", e.executable_id))
            )),
            _ => None,
        })
        .take(8)
        .collect();
    last_events.reverse();
    let mut memory_at_error = BTreeMap::new();
    for r in &trace.events[..idx] {
        if let Record::Memory(m) = r {
            memory_at_error.insert(m.device, m.bytes_in_use);
        }
    }
    Some(OomReport {
        run,
        t_ms: t.saturating_sub(start) as f64 / 1e6,
        api,
        message,
        last_events,
        largest_executables: executables(trace, run).into_iter().take(5).collect(),
        memory_at_error,
    })
}
