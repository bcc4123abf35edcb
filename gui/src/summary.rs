//! The Summary tab: the numbers and findings of `tpuscope report`, from the same report.

use eframe::egui::{self, Color32, RichText};
use tpuscope_analyzers::report::Report;

use crate::fmt;

use tpuscope_analyzers::units::plural;

const WARN: Color32 = Color32::from_rgb(230, 180, 40);
const BAD: Color32 = Color32::from_rgb(235, 80, 70);
const GOOD: Color32 = Color32::from_rgb(90, 190, 110);

/// What a click in the summary asked for.
pub enum Action {
    /// Open a recompile family (index in `report.recompiles`).
    Family(usize),
    /// Show a sync line (index in `report.syncs`) on the timeline.
    SyncLine(usize),
}

pub fn show(ui: &mut egui::Ui, r: &Report) -> Option<Action> {
    let mut action = None;
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show(ui, |ui| {
            header(ui, r);
            ui.add_space(8.0);
            // Warnings are in the banner above every tab.
            findings(ui, r);
            ui.add_space(8.0);
            action = sections(ui, r);
        });
    action
}

fn header(ui: &mut egui::Ui, r: &Report) {
    let title = match r.traces.as_slice() {
        [one] => format!("tpuscope report: {}", one.path),
        all => format!("tpuscope report: {} traces", all.len()),
    };
    ui.heading(title);
    for t in &r.traces {
        let frontend = if t.frontend.is_empty() {
            "unknown frontend"
        } else {
            t.frontend.as_str()
        };
        let state = match t.completeness.as_str() {
            "complete" => RichText::new("complete"),
            "cut" => RichText::new("CUT: truncated file, partial report").color(WARN),
            _ => {
                RichText::new("no end record: the process died or is still running, partial report")
                    .color(WARN)
            }
        };
        ui.horizontal_wrapped(|ui| {
            if r.traces.len() > 1 {
                ui.label(RichText::new(format!("run {}: {}", t.run, t.path)).strong());
            }
            ui.label(format!(
                "{frontend} · pid {} on {}",
                t.pid,
                if t.host.is_empty() { "?" } else { &t.host }
            ));
            if !t.job_id.is_empty() {
                ui.label(format!("job {} process {}", t.job_id, t.process_index));
            }
            ui.label(state);
            ui.label(format!("({} events)", t.events));
            if t.dropped_events > 0 {
                ui.colored_label(WARN, format!("{} dropped", t.dropped_events));
            }
        });
        ui.weak(format!("plugin {} (PJRT {})", t.plugin, t.pjrt_api));
        if !t.command.is_empty() {
            ui.weak(format!("$ {}", t.command));
        }
    }
    if r.traces.len() > 1 {
        ui.label(format!("assumed: {}", r.runs.note));
    }
    let c = &r.compiles;
    let syncs: u64 = r.syncs.iter().map(|s| s.count).sum();
    let ops = if c.op_compiles > 0 {
        format!(" + {}", plural(c.op_compiles, "eager op", "eager ops"))
    } else {
        String::new()
    };
    let mut line = format!(
        "{} ({:.0} ms) of {}{ops} · {}",
        plural(c.total, "compile", "compiles"),
        c.compile_ms,
        plural(c.families, "graph", "graphs"),
        plural(c.recompiles, "recompile", "recompiles"),
    );
    if c.warmup_recompiles > 0 {
        line.push_str(&format!(
            " (+{} outside the steady state)",
            c.warmup_recompiles
        ));
    }
    line.push_str(&format!(
        " · {} · {}",
        plural(syncs, "host sync", "host syncs"),
        plural(r.steps.count, "step", "steps")
    ));
    ui.label(RichText::new(line).strong().size(15.0));
    if c.failed > 0 {
        ui.colored_label(BAD, format!("{} compiles failed", c.failed));
    }
}

fn findings(ui: &mut egui::Ui, r: &Report) {
    if r.findings.is_empty() {
        if r.traces.iter().all(|t| t.completeness == tpuscope_analyzers::report::TraceCompleteness::Complete) {
            ui.label(RichText::new("No findings.").strong().color(GOOD));
        } else {
            ui.colored_label(
                WARN,
                "No findings in what the trace holds (it is partial: see the warnings).",
            );
        }
        return;
    }
    ui.label(
        RichText::new(format!("Findings ({})", r.findings.len()))
            .strong()
            .size(16.0),
    );
    for (i, f) in r.findings.iter().enumerate() {
        egui::Frame::group(ui.style()).show(ui, |ui| {
            ui.set_width(ui.available_width());
            ui.horizontal_wrapped(|ui| {
                ui.label(RichText::new(format!("{}.", i + 1)).strong());
                ui.label(RichText::new(f.kind.as_str()).color(BAD).strong());
                if let Some(s) = &f.source {
                    ui.label(RichText::new(format!("at {s}")).strong());
                }
            });
            ui.label(&f.title);
            ui.horizontal_wrapped(|ui| {
                ui.label(RichText::new("fix:").color(GOOD).strong());
                ui.label(&f.suggestion);
            });
        });
    }
}

fn sections(ui: &mut egui::Ui, r: &Report) -> Option<Action> {
    let mut action = None;
    let c = &r.compiles;
    egui::CollapsingHeader::new(RichText::new("Recompiles").strong())
        .default_open(true)
        .show(ui, |ui| {
            if r.recompiles.is_empty() {
                ui.label(match c.families {
                    0 => "no recompiles (nothing compiled)".to_string(),
                    1 => "no recompiles (the graph compiled once)".to_string(),
                    n => format!("no recompiles (each of {n} graphs compiled once)"),
                });
            } else {
                let causes: Vec<String> =
                    c.by_cause.iter().map(|(k, v)| format!("{k} {v}")).collect();
                ui.label(format!(
                    "{} in the steady state, {} ({})",
                    plural(
                        c.recompile_families,
                        "graph recompiled",
                        "graphs recompiled"
                    ),
                    plural(c.recompiles, "recompile", "recompiles"),
                    causes.join(", ")
                ));
                egui::Grid::new("summary_recompiles")
                    .striped(true)
                    .show(ui, |ui| {
                        for h in ["graph", "count", "cause", "compile ms", "source", ""] {
                            ui.weak(h);
                        }
                        ui.end_row();
                        for (i, f) in r.recompiles.iter().enumerate() {
                            ui.label(&f.graph);
                            ui.label(format!("{}×", f.count));
                            ui.label(f.cause.as_str());
                            ui.label(format!("{:.1}", f.compile_ms));
                            ui.label(f.source.as_ref().map(|s| s.to_string()).unwrap_or_default());
                            if ui.small_button("open").clicked() {
                                action = Some(Action::Family(i));
                            }
                            ui.end_row();
                        }
                    });
            }
        });
    let syncs: u64 = r.syncs.iter().map(|s| s.count).sum();
    let stall: f64 = r.syncs.iter().map(|s| s.stall_ms).sum();
    egui::CollapsingHeader::new(RichText::new("Host syncs").strong())
        .default_open(true)
        .show(ui, |ui| {
            ui.label(format!(
                "{} from {}, {stall:.3} ms stalled",
                plural(syncs, "sync", "syncs"),
                plural(r.syncs.len() as u64, "line", "lines")
            ));
            if r.runtime_waits > 0 {
                ui.weak(format!(
                    "{} waits of the runtime's own threads (not a user line)",
                    r.runtime_waits
                ));
            }
            egui::Grid::new("summary_syncs")
                .striped(true)
                .show(ui, |ui| {
                    for h in ["line", "count", "stall ms", "per step", ""] {
                        ui.weak(h);
                    }
                    ui.end_row();
                    for (i, s) in r.syncs.iter().enumerate().take(20) {
                        ui.label(s.label());
                        ui.label(s.count.to_string());
                        ui.label(format!("{:.3}", s.stall_ms));
                        ui.label(s.per_step.map(|p| format!("{p:.2}")).unwrap_or_default());
                        if ui.small_button("timeline").clicked() {
                            action = Some(Action::SyncLine(i));
                        }
                        ui.end_row();
                    }
                });
        });
    if let Some(h) = &r.hosts {
        hosts(ui, h);
    }
    if let Some(d) = &r.dynamo {
        dynamo(ui, d);
    }
    let s = &r.steps;
    egui::CollapsingHeader::new(RichText::new("Phases and steps").strong())
        .default_open(true)
        .show(ui, |ui| {
            let phases = tpuscope_analyzers::report::phases_lines(r);
            if phases.is_empty() {
                ui.label("phases unknown: no training loop found");
            }
            for l in phases {
                ui.label(l);
            }
            if let Some(l) = tpuscope_analyzers::report::setup_compile_line(r) {
                ui.label(l);
            }
            ui.label(format!("{}, detected by {}", plural(s.count, "step", "steps"), s.detected_by));
            if s.count > 1 {
                ui.label(format!(
                    "steady state: up to {} graph fragments per step (mean {:.1}), up to {} host syncs per step (mean {:.2}), {} compiles in all",
                    s.graph_fragments_per_step,
                    s.mean_graph_fragments_per_step,
                    s.syncs_per_step,
                    s.mean_syncs_per_step,
                    s.compiles_after_first_step
                ));
            }
        });
    let k = &r.cache;
    egui::CollapsingHeader::new(RichText::new("Cache").strong())
        .default_open(true)
        .show(ui, |ui| {
            ui.label(format!(
                "in memory: {} executables run, {} reuses",
                k.executables_run, k.in_memory_reuse
            ));
            ui.label(format!(
                "persistent: {} hits, {} stores, {} deserialize failures",
                k.persistent_hits, k.persistent_stores, k.deserialize_failures
            ));
            ui.label(format!(
                "compiles of an already-compiled program (misses that should have been hits): {}",
                k.recompiled_same_program
            ));
        });
    egui::CollapsingHeader::new(RichText::new("Device memory").strong())
        .default_open(true)
        .show(ui, |ui| {
            if r.hbm.is_empty() {
                ui.label("no memory samples");
            }
            for d in &r.hbm {
                let limit = match (d.limit_bytes, d.peak_fraction) {
                    (Some(l), Some(f)) => {
                        format!("limit {} ({:.1}% at peak)", fmt::bytes(l as f64), f * 100.0)
                    }
                    _ => "limit not reported".to_string(),
                };
                let growth = d
                    .growth_bytes_per_step
                    .map(|g| format!(", {}/step", fmt::bytes(g)))
                    .unwrap_or_default();
                ui.label(format!(
                    "device {} (run {}): peak {}, {limit}{growth} — {}",
                    d.device,
                    d.run,
                    fmt::bytes(d.peak_bytes as f64),
                    if d.origin == "live_buffers" {
                        "counted by tpuscope from live buffers"
                    } else {
                        "reported by the plugin"
                    }
                ));
            }
            if !r.compiled_memory.is_empty() {
                let mut largest: Vec<String> = Vec::new();
                let mut seen = std::collections::HashSet::new();
                // One entry per graph: its recompiles have the same footprint.
                for e in r
                    .compiled_memory
                    .iter()
                    .filter(|e| seen.insert(e.graph.as_str()))
                    .take(5)
                {
                    largest.push(format!("{} {}", e.graph, fmt::bytes(e.peak_bytes as f64)));
                }
                ui.weak(format!("largest compiled: {}", largest.join(" · ")));
            }
            if let Some(o) = &r.oom {
                ui.colored_label(
                    BAD,
                    format!(
                        "out of memory at {:.1} ms in {}: {}",
                        o.t_ms, o.api, o.message
                    ),
                );
            }
        });
    egui::CollapsingHeader::new(RichText::new("Errors").strong())
        .default_open(!r.errors.is_empty())
        .show(ui, |ui| {
            if r.errors.is_empty() {
                ui.label("none");
            }
            for e in &r.errors {
                ui.colored_label(BAD, format!("{}× {}: {}", e.count, e.api, e.message));
            }
        });
    action
}

/// The per-host table of a multi-host job, with its stragglers and lone recompiles.
fn hosts(ui: &mut egui::Ui, h: &tpuscope_analyzers::hosts::HostsReport) {
    egui::CollapsingHeader::new(RichText::new("Hosts").strong())
        .default_open(true)
        .show(ui, |ui| {
            ui.label(format!(
                "{} of one job, on the job timeline (clocks aligned)",
                plural(h.hosts.len() as u64, "host", "hosts")
            ));
            egui::Grid::new("summary_hosts")
                .striped(true)
                .show(ui, |ui| {
                    for c in tpuscope_analyzers::hosts::TABLE_COLUMNS {
                        ui.weak(c);
                    }
                    ui.end_row();
                    for x in &h.hosts {
                        for cell in x.cells() {
                            ui.label(cell);
                        }
                        ui.end_row();
                    }
                });
            for s in &h.stragglers {
                ui.colored_label(
                    WARN,
                    format!(
                        "straggler: {} (process {}): {}",
                        s.host, s.process_index, s.details
                    ),
                );
            }
            for a in &h.recompiles_alone {
                ui.colored_label(
                    WARN,
                    format!(
                        "recompiles alone: {} (process {}) compiles {} {}×, the others at most {}×",
                        a.host, a.process_index, a.graph, a.compiles, a.others_max
                    ),
                );
            }
        });
}

/// dynamo's account (TORCH_TRACE): graph breaks and guard failures at their lines, with the PJRT
/// compiles each caused.
fn dynamo(ui: &mut egui::Ui, d: &tpuscope_analyzers::torch_trace::DynamoReport) {
    use tpuscope_analyzers::torch_trace::CausedCompile;
    let at = |s: &Option<tpuscope_analyzers::source::SourceLoc>| {
        s.as_ref()
            .map_or_else(|| "?".to_string(), |s| format!("{}:{}", s.file, s.line))
    };
    let caused = |c: &[CausedCompile]| {
        if c.is_empty() {
            return "no PJRT compile".to_string();
        }
        let names: Vec<String> = c
            .iter()
            .map(|c| format!("{} {}", c.compile_id, c.graph))
            .collect();
        format!("PJRT compiles: {}", names.join(", "))
    };
    egui::CollapsingHeader::new(RichText::new("Dynamo (torch.compile)").strong())
        .default_open(true)
        .show(ui, |ui| {
            ui.label(d.headline());
            for l in d.logs.iter().filter(|l| !l.note.is_empty()) {
                ui.colored_label(WARN, format!("{}: {}", l.dir, l.note));
            }
            for g in &d.graph_breaks {
                ui.colored_label(
                    WARN,
                    format!(
                        "graph break at {}: {}×, {}",
                        at(&g.source),
                        g.count,
                        g.reason
                    ),
                );
                ui.label(format!("    {}", caused(&g.compiles)));
            }
            for g in &d.guard_failures {
                ui.colored_label(
                    WARN,
                    format!(
                        "guard failed at {} ({}): {} recompiles, {}",
                        at(&g.source),
                        g.function,
                        g.count,
                        g.guards.join("; ")
                    ),
                );
                ui.label(format!("    {}", caused(&g.compiles)));
            }
        });
}
