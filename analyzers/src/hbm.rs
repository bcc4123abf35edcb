//! Device memory over time, compiled memory per executable, and the post-mortem of an OOM.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tpuscope_core::Trace;
use tpuscope_core::event::{Memory, MemoryOrigin, Record};

use crate::digest::Digest;
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
    /// At the last sample, the allocator's peak so far when it reports one (else the bytes in
    /// use): what this field has always held. What is in use then is [`Self::in_use_bytes`].
    pub last_bytes: i64,
    /// Bytes in use at the last sample (absent in reports written before this field: 0).
    #[serde(default)]
    pub in_use_bytes: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_fraction: Option<f64>,
    /// Least-squares slope per step of the last sample's value at the end of each step (the
    /// allocator's peak so far when it reports one, like `last_bytes`).
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

/// One memory sample of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemorySample {
    pub t_ns: u64,
    /// Bytes in use at that time.
    pub in_use: i64,
    /// The allocator's peak so far when it reports one (never below `in_use`), else `in_use`.
    pub peak: i64,
}

/// The memory samples of one device over a run, from one origin: the plugin's allocator when it
/// reported for this device, else tpuscope's count of live buffers. [`devices`] summarizes
/// these same series, so a view that plots them agrees with the report.
#[derive(Clone, Debug, PartialEq)]
pub struct MemorySeries {
    pub run: usize,
    pub device: i32,
    /// True: the plugin's allocator (`device_memory_stats`); false: live buffers.
    pub reported: bool,
    /// In trace order (time order).
    pub samples: Vec<MemorySample>,
    /// The largest positive limit reported.
    pub limit: Option<i64>,
    /// The live buffers counted at the last sample that counted them.
    pub live_buffers: Option<i64>,
}

impl MemorySeries {
    /// `device_memory_stats` or `live_buffers`: [`DeviceMemory::origin`]'s words.
    pub fn origin(&self) -> &'static str {
        if self.reported {
            "device_memory_stats"
        } else {
            "live_buffers"
        }
    }

    /// The highest bytes in use, the allocator's peaks included.
    pub fn peak(&self) -> i64 {
        self.samples.iter().map(|s| s.peak).max().unwrap_or(0)
    }
}

/// Memory samples folded into their series as they are read: what a run's memory analyses
/// need of them, about 28 bytes a sample instead of the record.
#[derive(Clone, Debug, Default)]
pub struct SeriesFold {
    /// By (device, origin): the series (of run 0) and each sample's place among the events.
    pub(crate) by_origin: BTreeMap<(i32, i32), (MemorySeries, Vec<u32>)>,
}

impl SeriesFold {
    /// One memory record, the `event`-th of its trace.
    pub fn push(&mut self, event: usize, m: &Memory) {
        let stats = MemoryOrigin::PluginStats as i32;
        let (s, events) = self
            .by_origin
            .entry((m.device, m.origin))
            .or_insert_with(|| {
                let s = MemorySeries {
                    run: 0,
                    device: m.device,
                    reported: m.origin == stats,
                    samples: Vec::new(),
                    limit: None,
                    live_buffers: None,
                };
                (s, Vec::new())
            });
        s.samples.push(MemorySample {
            t_ns: m.t_ns,
            in_use: m.bytes_in_use,
            peak: m
                .peak_bytes_in_use
                .unwrap_or(m.bytes_in_use)
                .max(m.bytes_in_use),
        });
        events.push(u32::try_from(event).unwrap_or(u32::MAX));
        if let Some(l) = m.bytes_limit.filter(|&l| l > 0) {
            s.limit = Some(s.limit.map_or(l, |x| x.max(l)));
        }
        if m.live_buffers.is_some() {
            s.live_buffers = m.live_buffers;
        }
    }

    /// The series of run `run`, one per device, by device: the allocator's numbers when the
    /// plugin reported any for that device, else the first other origin (by origin number) —
    /// the one rule every view follows (a run's is `Digest::memory`).
    pub fn series(&self, run: usize) -> Vec<MemorySeries> {
        self.chosen()
            .map(|s| MemorySeries { run, ..s.clone() })
            .collect()
    }

    /// [`SeriesFold::series`], as they are folded (their run is 0): what a summary reads
    /// without copying a long run's samples.
    fn chosen(&self) -> impl Iterator<Item = &MemorySeries> {
        let mut out: BTreeMap<i32, &MemorySeries> = BTreeMap::new();
        for ((device, _), (s, _)) in &self.by_origin {
            match out.get(device) {
                Some(kept) if kept.reported || !s.reported => {}
                _ => {
                    out.insert(*device, s);
                }
            }
        }
        out.into_values()
    }

    /// Each device's bytes in use at its last sample (of any origin) before the `event`-th
    /// event.
    fn in_use_before(&self, event: usize) -> BTreeMap<i32, i64> {
        let mut last: BTreeMap<i32, (u32, i64)> = BTreeMap::new();
        for ((device, _), (s, events)) in &self.by_origin {
            let n = events.partition_point(|&e| (e as usize) < event);
            let Some((&e, sample)) = n
                .checked_sub(1)
                .and_then(|i| events.get(i).zip(s.samples.get(i)))
            else {
                continue;
            };
            let kept = last.entry(*device).or_insert((e, sample.in_use));
            if e > kept.0 {
                *kept = (e, sample.in_use);
            }
        }
        last.into_iter().map(|(d, (_, v))| (d, v)).collect()
    }
}

/// The device memory of a run, per device (the allocator's numbers when there are any).
pub fn devices(d: &Digest, run: usize, steps: &Steps) -> Vec<DeviceMemory> {
    d.memory
        .chosen()
        .map(|s| summarize(s, run, steps))
        .collect()
}

fn summarize(s: &MemorySeries, run: usize, steps: &Steps) -> DeviceMemory {
    let samples = &s.samples;
    let peak = s.peak();
    // The last sample's value at each step's end, walked twice by the slope rather than held
    // (a long run has millions of steps). The samples up to each step's end: steps come in
    // time order, so the count walks on from the step before (searched afresh where a step
    // ends earlier).
    let at_step_end = || {
        let (mut upto, mut end) = (0, 0);
        steps.steps.iter().filter_map(move |st| {
            if st.end_ns < end {
                upto = samples.partition_point(|x| x.t_ns <= st.end_ns);
            }
            end = st.end_ns;
            while samples.get(upto).is_some_and(|x| x.t_ns <= end) {
                upto += 1;
            }
            upto.checked_sub(1).map(|i| samples[i].peak as f64)
        })
    };
    DeviceMemory {
        run,
        device: s.device,
        origin: s.origin().to_string(),
        samples: samples.len() as u64,
        peak_bytes: peak,
        last_bytes: samples.last().map_or(0, |x| x.peak),
        in_use_bytes: samples.last().map_or(0, |x| x.in_use),
        limit_bytes: s.limit,
        peak_fraction: s.limit.map(|l| peak as f64 / l as f64),
        growth_bytes_per_step: slope(at_step_end),
    }
}

/// Least-squares slope of equally spaced values (None for fewer than three), given twice:
/// their mean first, then the sums.
fn slope<I: Iterator<Item = f64>>(values: impl Fn() -> I) -> Option<f64> {
    let mut count = 0usize;
    // Summed as a slice of them was (`Sum`).
    let total: f64 = values().inspect(|_| count += 1).sum();
    if count < 3 {
        return None;
    }
    let n = count as f64;
    let mean_x = (n - 1.0) / 2.0;
    let mean_y = total / n;
    let (mut num, mut den) = (0.0, 0.0);
    for (i, y) in values().enumerate() {
        let dx = i as f64 - mean_x;
        num += dx * (y - mean_y);
        den += dx * dx;
    }
    Some(num / den)
}

/// Compiled memory of each successful compile (and of each executable compiled before an
/// attach), largest peak first.
pub fn executables(d: &Digest, run: usize) -> Vec<ExecutableMemory> {
    let mut out: Vec<ExecutableMemory> = d
        .others()
        .filter_map(|(_, r)| {
            let (name, memory) = match r {
                Record::Compile(c) => (&c.executable_name, c.memory.as_ref()?),
                Record::ExecutableSeen(x) => (&x.executable_name, x.memory.as_ref()?),
                _ => return None,
            };
            Some((name, memory))
        })
        .map(|(name, m)| ExecutableMemory {
            run,
            graph: name.clone(),
            argument_bytes: m.argument_size,
            output_bytes: m.output_size,
            temp_bytes: m.temp_size,
            generated_code_bytes: m.generated_code_size,
            peak_bytes: m.peak_memory,
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
pub fn oom(trace: &Trace, d: &Digest, run: usize) -> Option<OomReport> {
    let start = trace.manifest.as_ref().map_or(0, |m| m.start_mono_ns);
    // Failed calls and errors are among the records the digest keeps whole.
    let (idx, t, api, message) = d.others().find_map(|(i, r)| {
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
    let names = crate::steps::executable_names_of(d);
    // The last eight compiles and executes before it, by their place in the file.
    let compiles = d.others().rev().filter_map(|(i, r)| match r {
        Record::Compile(c) if i < idx => Some((i, c.t_ns, c.executable_name.clone())),
        _ => None,
    });
    let executes = d.launches_rev().filter_map(|e| {
        let i = e.event as usize;
        (i < idx).then(|| {
            let name = names
                .get(&e.executable_id)
                .cloned()
                .unwrap_or_else(|| format!("{:x}", e.executable_id));
            (i, e.t_ns, name)
        })
    });
    let mut last: Vec<(usize, String)> = compiles
        .take(8)
        .map(|(i, t, name)| (i, ("compile", t, name)))
        .chain(
            executes
                .take(8)
                .map(|(i, t, name)| (i, ("execute", t, name))),
        )
        .map(|(i, (what, t, name))| {
            let at = t.saturating_sub(start) as f64 / 1e6;
            (i, format!("{at:.3} ms {what} {name}"))
        })
        .collect();
    last.sort_by_key(|&(i, _)| std::cmp::Reverse(i));
    let mut last_events: Vec<String> = last.into_iter().take(8).map(|(_, s)| s).collect();
    last_events.reverse();
    let memory_at_error = d.memory.in_use_before(idx);
    Some(OomReport {
        run,
        t_ms: t.saturating_sub(start) as f64 / 1e6,
        api,
        message,
        last_events,
        largest_executables: executables(d, run).into_iter().take(5).collect(),
        memory_at_error,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use tpuscope_core::event::{Manifest, Memory};
    use tpuscope_core::{TraceWriter, read_trace};

    use super::*;

    fn sample(device: i32, origin: MemoryOrigin, t: u64, in_use: i64, peak: Option<i64>) -> Record {
        Record::Memory(Box::new(Memory {
            t_ns: t,
            device,
            origin: origin as i32,
            bytes_in_use: in_use,
            peak_bytes_in_use: peak,
            bytes_limit: Some(1000),
            ..Default::default()
        }))
    }

    #[test]
    fn series_prefer_the_allocator_and_the_summary_keeps_in_use_apart_from_the_peak() {
        let mut w = TraceWriter::new(Vec::new(), &Manifest::default()).unwrap();
        for r in [
            sample(0, MemoryOrigin::LiveBuffers, 1, 50, None),
            sample(0, MemoryOrigin::PluginStats, 2, 100, Some(400)),
            sample(1, MemoryOrigin::LiveBuffers, 3, 70, None),
            sample(0, MemoryOrigin::LiveBuffers, 4, 60, None),
            sample(0, MemoryOrigin::PluginStats, 5, 120, Some(400)),
        ] {
            w.write(&r).unwrap();
        }
        let trace = read_trace(&w.into_inner()).unwrap();
        let dg = Digest::of(&trace);
        let s = dg.memory.series(0);
        assert_eq!(s.len(), 2);
        assert!(s[0].reported && !s[1].reported);
        let in_use: Vec<i64> = s[0].samples.iter().map(|x| x.in_use).collect();
        assert_eq!(in_use, [100, 120]);
        assert_eq!(s[0].peak(), 400);
        let d = devices(&dg, 0, &crate::steps::steps(&trace, &dg, &[]));
        assert_eq!(d[0].origin, "device_memory_stats");
        assert_eq!(
            (d[0].peak_bytes, d[0].last_bytes, d[0].in_use_bytes),
            (400, 400, 120)
        );
        assert_eq!(d[0].peak_fraction, Some(0.4));
        assert_eq!(
            (d[1].origin.as_str(), d[1].in_use_bytes),
            ("live_buffers", 70)
        );
    }
}
