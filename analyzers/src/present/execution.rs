//! How the loop ran: host syncs by line, steps, the hosts of a job, PJRT errors.

use super::{Align, Block, Line, Section, SectionId, Span, Table, Target, Tone};
use crate::hosts;
use crate::report::Report;
use crate::units::{bytes, ms, plural};

/// Host syncs by the user's line (the runtime's own waits counted apart), with their stall.
pub fn syncs(r: &Report) -> Section {
    let waits = if r.runtime_waits > 0 {
        format!(
            "; {} by the runtime's own threads (no Python stack)",
            plural(r.runtime_waits, "wait", "waits")
        )
    } else {
        String::new()
    };
    if r.syncs.is_empty() {
        return Section::new(
            SectionId::Syncs,
            "Host syncs",
            Line::plain(format!("no host syncs in the loop{waits}")),
        );
    }
    let mut s = Section::new(
        SectionId::Syncs,
        "Host syncs",
        Line::plain(format!(
            "{} from {}, {} ms stalled{waits}",
            plural(r.sync_total(), "sync", "syncs"),
            plural(r.syncs.len() as u64, "line", "lines"),
            ms(r.sync_stall_ms())
        )),
    );
    let mut t = Table::new(&[
        ("line", Align::Left),
        ("count", Align::Right),
        ("bytes", Align::Right),
        ("stall ms", Align::Right),
        ("per step", Align::Right),
        ("read", Align::Left),
    ]);
    for (i, x) in r.syncs.iter().enumerate() {
        t.row(
            vec![
                Line::plain(x.label()),
                Line::plain(x.count.to_string()),
                Line::plain(bytes(i64::try_from(x.bytes).unwrap_or(i64::MAX))),
                Line::plain(ms(x.stall_ms)),
                Line::plain(
                    x.per_step
                        .map_or_else(|| "-".to_string(), |p| format!("{p:.2}")),
                ),
                Line::plain(x.what.join(", ")),
            ],
            Some(Target::SyncLine(i)),
        );
    }
    s.table(1, t);
    s
}

/// How many steps, how they were found, the worst of the steady state and its slowest step.
pub fn steps(r: &Report) -> Section {
    let st = &r.steps;
    if st.count == 0 {
        return Section::new(
            SectionId::Steps,
            "Steps",
            Line::plain("none detected (no step markers and no repeating executable)"),
        );
    }
    let mut s = Section::new(
        SectionId::Steps,
        "Steps",
        Line::plain(format!("{}, detected by {}", st.count, st.detected_by)),
    );
    if st.count < 2 {
        s.line(1, Line::plain("only one step: no steady state to compare"));
        return s;
    }
    s.blocks.push(Block::Labeled {
        depth: 1,
        label: Span::plain("steady state:"),
        lines: vec![
            Line::plain(format!(
                "up to {} per step (mean {:.1})",
                plural(
                    st.graph_fragments_per_step,
                    "graph fragment",
                    "graph fragments"
                ),
                st.mean_graph_fragments_per_step,
            )),
            Line::plain(format!(
                "up to {} per step (mean {:.2}), {} in all",
                plural(st.syncs_per_step, "host sync", "host syncs"),
                st.mean_syncs_per_step,
                plural(st.compiles_after_first_step, "compile", "compiles"),
            )),
        ],
    });
    // Warm-up steps carry the loop's own compiles: not a fair comparison.
    let slowest = st
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
        s.line(
            1,
            Line::plain(format!(
                "slowest in the steady state: step {}{run}, {} ms ({}, {}, {}, {} ms stalled)",
                p.number,
                ms(p.dur_ms),
                plural(u64::from(p.executes), "execute", "executes"),
                plural(u64::from(p.syncs), "sync", "syncs"),
                plural(u64::from(p.compiles), "compile", "compiles"),
                ms(p.stall_ms)
            )),
        );
    }
    s
}

/// The per-host table of a multi-host job, its stragglers and the hosts that recompile alone.
pub fn hosts(r: &Report) -> Option<Section> {
    let h = r.hosts.as_ref()?;
    let mut s = Section::new(
        SectionId::Hosts,
        "Hosts",
        Line::plain(plural(h.hosts.len() as u64, "host", "hosts")),
    );
    let columns: Vec<(&str, Align)> = hosts::TABLE_COLUMNS
        .iter()
        .zip(hosts::TABLE_NUMERIC)
        .map(|(c, numeric)| (*c, if numeric { Align::Right } else { Align::Left }))
        .chain([("clock vs first", Align::Left)])
        .collect();
    let mut t = Table::new(&columns);
    // Offsets are ~1.7e18 ns (wall − uptime): what matters is how far each host's clock is
    // from the first one's.
    let base = h.hosts.first().map_or(0, |x| x.clock_offset_ns);
    for x in &h.hosts {
        let mut cells: Vec<Line> = x.cells().into_iter().map(Line::plain).collect();
        cells.push(Line::plain(format!(
            "{:+.3} ms ({})",
            (x.clock_offset_ns - base) as f64 / 1e6,
            x.alignment
        )));
        t.row(cells, None);
    }
    s.table(1, t);
    for x in &h.stragglers {
        s.line(
            1,
            Line::plain(format!(
                "straggler: {} (process {}): {}",
                x.host, x.process_index, x.details
            )),
        );
    }
    for a in &h.recompiles_alone {
        s.line(
            1,
            Line::plain(format!(
                "recompiles alone: {} (process {}) compiles {} {}×, the others at most {}×",
                a.host, a.process_index, a.graph, a.compiles, a.others_max
            )),
        );
    }
    Some(s)
}

/// PJRT errors by API and message.
pub fn errors(r: &Report) -> Section {
    if r.errors.is_empty() {
        return Section::new(SectionId::Errors, "Errors", Line::plain("none"));
    }
    let mut s = Section::new(
        SectionId::Errors,
        "Errors",
        Line::plain(plural(r.error_total(), "error", "errors")),
    );
    for e in &r.errors {
        s.para(
            1,
            Some(Span::new("✗", Tone::Bad)),
            Line::plain(format!("{}× {}: {}", e.count, e.api, e.message)),
        );
    }
    s
}
