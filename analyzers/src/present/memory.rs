//! Where programs and bytes live: the compile caches, device memory, an out-of-memory error.

use std::collections::BTreeSet;

use super::{Line, Section, SectionId, Span, Tone, run_suffix};
use crate::hbm::{DeviceMemory, ExecutableMemory};
use crate::report::Report;
use crate::units::{bytes, first_line, ms, percent, plural};

/// How many graphs the "largest compiled" line names.
const LARGEST: usize = 5;

/// In-memory reuse, the persistent cache and compiles that should have been cache hits.
pub fn cache(r: &Report) -> Section {
    let c = &r.cache;
    let mut s = Section::new(SectionId::Cache, "Cache", Line::default());
    s.line(
        1,
        Line::plain(format!(
            "in memory: {} run, {}",
            plural(c.executables_run, "executable", "executables"),
            plural(c.in_memory_reuse, "reuse", "reuses")
        )),
    );
    let failures = if c.deserialize_failures > 0 {
        Span::new(
            plural(
                c.deserialize_failures,
                "deserialize failure",
                "deserialize failures",
            ),
            Tone::Bad,
        )
    } else {
        Span::plain("0 deserialize failures")
    };
    let mut persistent = Line::plain(format!(
        "persistent: {}, {}, ",
        plural(c.persistent_hits, "hit", "hits"),
        plural(c.persistent_stores, "store", "stores")
    ));
    persistent.0.push(failures);
    s.line(1, persistent);
    for f in &c.failures {
        s.para(
            2,
            Some(Span::new("✗", Tone::Bad)),
            Line::plain(format!("{}× {}", f.count, f.message)),
        );
    }
    s.line(
        1,
        Line::new(
            format!(
                "compiles of an already-compiled program (misses that should have been hits): {}",
                c.recompiled_same_program
            ),
            if c.recompiled_same_program > 0 {
                Tone::Warn
            } else {
                Tone::Plain
            },
        ),
    );
    for x in &c.stored_but_recompiled {
        s.line(
            2,
            Line::plain(format!(
                "{}: stored in run {}, compiled again in run {} (written, never read back)",
                x.graph, x.stored_in_run, x.recompiled_in_run
            )),
        );
    }
    s
}

/// The largest compiled programs, one per graph (its largest compile: recompiles repeat the
/// same executable), largest first.
pub fn largest_compiled(r: &Report, n: usize) -> Vec<&ExecutableMemory> {
    let mut seen = BTreeSet::new();
    r.compiled_memory
        .iter()
        .filter(|e| seen.insert(e.graph.as_str()))
        .take(n)
        .collect()
}

/// Peak device memory per device (share of the limit, growth per step) and the largest
/// compiled programs.
pub fn memory(r: &Report) -> Section {
    let mut s = Section::new(SectionId::Memory, "Device memory", Line::default());
    if r.hbm.is_empty() {
        s.line(
            1,
            Line::plain("not reported by this plugin (no memory samples)"),
        );
    }
    for d in &r.hbm {
        s.line(1, device_line(r, d));
        if d.origin == "live_buffers" {
            s.line(
                2,
                Line::new(
                    "counted by tpuscope from live buffers: this plugin reports no memory stats",
                    Tone::Dim,
                ),
            );
        }
    }
    let top: Vec<String> = largest_compiled(r, LARGEST)
        .into_iter()
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
        s.line(
            1,
            Line::plain("compiled memory: not reported by this plugin"),
        );
    } else {
        s.para(
            1,
            Some(Span::new("largest compiled:", Tone::Dim)),
            Line::plain(top.join(" · ")),
        );
    }
    s
}

/// The out-of-memory error: when and where, what was in use, the largest executables and the
/// events before it. None without one.
pub fn oom(r: &Report) -> Option<Section> {
    let x = r.oom.as_ref()?;
    let mut s = Section::new(SectionId::Oom, "Out of device memory", Line::default());
    s.title.tone = Tone::Bad;
    let run = if r.traces.len() > 1 {
        format!(" of run {}", x.run)
    } else {
        String::new()
    };
    s.para(
        1,
        None,
        Line::plain(format!(
            "at {} ms{run} in {}: {}",
            ms(x.t_ms),
            x.api,
            first_line(&x.message)
        )),
    );
    if !x.memory_at_error.is_empty() {
        let m: Vec<String> = x
            .memory_at_error
            .iter()
            .map(|(d, b)| format!("device {d} {}", bytes(*b)))
            .collect();
        s.line(
            1,
            Line::plain(format!("in use before it: {}", m.join(", "))),
        );
    }
    if !x.largest_executables.is_empty() {
        s.line(1, Line::plain("largest executables:"));
        for e in &x.largest_executables {
            s.line(
                2,
                Line::plain(format!(
                    "{}: peak {}, temp {}, arguments {}, outputs {}",
                    e.graph,
                    bytes(e.peak_bytes),
                    bytes(e.temp_bytes),
                    bytes(e.argument_bytes),
                    bytes(e.output_bytes)
                )),
            );
        }
    }
    if !x.last_events.is_empty() {
        s.line(1, Line::plain("last events before it:"));
        for e in &x.last_events {
            s.line(2, Line::plain(e.as_str()));
        }
    }
    Some(s)
}

/// `device 0: peak 12.0 GiB (75% of 16.0 GiB), +1.0 MiB/step`: a device's peak, its share of
/// the limit (a problem from 90%) and its growth per step.
pub fn device_line(r: &Report, d: &DeviceMemory) -> Line {
    let mut l = Line::plain(format!(
        "device {}{}: peak {}",
        d.device,
        run_suffix(r, d.run),
        bytes(d.peak_bytes)
    ));
    match (d.limit_bytes, d.peak_fraction) {
        (Some(limit), Some(f)) => {
            let tone = if d.peak_near_limit() {
                Tone::Bad
            } else {
                Tone::Plain
            };
            l = l
                .then(" (")
                .and(format!("{} of {}", percent(f), bytes(limit)), tone)
                .then(")");
        }
        (Some(limit), None) => l = l.then(format!(" of {}", bytes(limit))),
        _ => l = l.then(", limit not reported"),
    }
    if let Some(g) = d.growth_bytes_per_step {
        // Sub-byte slopes are fitting noise.
        let g = g.round() as i64;
        let sign = if g > 0 { "+" } else { "" };
        l = l.then(format!(", {sign}{}/step", bytes(g)));
    }
    l
}
