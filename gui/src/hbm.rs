//! The HBM tab: bytes in use per device over time, the limit when the plugin reports one, and
//! compile and step markers.

use eframe::egui::{self, Color32, RichText};
use egui_plot::{HLine, HoverPosition, Legend, Line, LineStyle, Plot, Points, VLine};

use tpuscope_analyzers::present;
use tpuscope_analyzers::units::bytes;

use crate::analysis::Analysis;
use crate::fmt;

/// Series colours, in device order.
const PALETTE: [Color32; 6] = [
    Color32::from_rgb(60, 180, 120),
    Color32::from_rgb(70, 150, 230),
    Color32::from_rgb(200, 90, 200),
    Color32::from_rgb(230, 200, 60),
    Color32::from_rgb(120, 220, 220),
    Color32::from_rgb(240, 120, 120),
];

/// Markers of one kind drawn at most: past that the plot is a comb, not information, and
/// none are drawn.
const MAX_MARKERS: usize = 150;

pub fn tab_ui(ui: &mut egui::Ui, a: &Analysis, labels: &[String]) {
    // Peak, limit, growth and origin per device, as `tpuscope report` says them.
    crate::summary::section_ui(ui, 0, &present::memory(&a.report));
    if a.memory.is_empty() {
        ui.add_space(8.0);
        compiled_ui(ui, a);
        return;
    }
    let multi = a.memory.iter().any(|s| s.source != a.memory[0].source);
    ui.weak(format!(
        "orange: compiles · grey: steps (drawn up to {MAX_MARKERS} of each) · dashed red: the device's memory limit"
    ));
    let series_name = |i: usize| {
        let s = &a.memory[i];
        let base = format!("device {}", s.device);
        if multi {
            format!(
                "{base} · {}",
                labels.get(s.source).map_or("", String::as_str)
            )
        } else {
            base
        }
    };
    Plot::new("hbm_plot")
        .legend(Legend::default())
        .x_axis_label("ms since start")
        .y_axis_formatter(|m, _| fmt::bytes_fine(m.value))
        .include_y(0.0)
        .label_formatter(|h| {
            Some(match h {
                HoverPosition::NearDataPoint {
                    plot_name,
                    position: p,
                    ..
                } => format!("{plot_name}\n{:.1} ms\n{}", p.x, fmt::bytes(p.y)),
                HoverPosition::Elsewhere { position: p } => {
                    format!("{:.1} ms\n{}", p.x, fmt::bytes(p.y))
                }
            })
        })
        .show(ui, |p| {
            for (i, s) in a.memory.iter().enumerate() {
                // Bytes in use hold until the next sample: a staircase, with the samples marked.
                let mut stairs: Vec<[f64; 2]> = Vec::with_capacity(s.points.len() * 2);
                for w in s.points.windows(2) {
                    stairs.push(w[0]);
                    stairs.push([w[1][0], w[0][1]]);
                }
                stairs.extend(s.points.last());
                let name = series_name(i);
                let c = PALETTE[i % PALETTE.len()];
                // Two points at one x are a step, not a band of values.
                p.line(
                    Line::new(name.clone(), stairs)
                        .width(2.0)
                        .color(c)
                        .allow_band(false),
                );
                if s.points.len() <= 200 {
                    p.points(Points::new(name, s.points.clone()).radius(3.0).color(c));
                }
            }
            // One line per distinct limit (devices of one kind share it).
            let mut limits: Vec<i64> = a.memory.iter().filter_map(|s| s.limit).collect();
            limits.sort_unstable();
            limits.dedup();
            for l in limits {
                p.hline(
                    HLine::new(format!("limit {}", bytes(l)), l as f64)
                        .color(Color32::from_rgb(230, 60, 60))
                        .style(LineStyle::dashed_loose()),
                );
            }
            let sources: Vec<usize> = {
                let mut v: Vec<usize> = a.memory.iter().map(|s| s.source).collect();
                v.dedup();
                v
            };
            for src in sources {
                markers(
                    p,
                    a.compile_ms.get(src),
                    "compiles",
                    Color32::from_rgb(232, 145, 40),
                );
                markers(p, a.step_ms.get(src), "steps", Color32::from_gray(90));
            }
        });
}

/// What each compiled executable needs on the device (`GetCompiledMemoryStats`).
fn compiled_ui(ui: &mut egui::Ui, a: &Analysis) {
    let list = &a.report.compiled_memory;
    if list.is_empty() {
        return;
    }
    ui.label(RichText::new("Compiled memory per executable (largest first)").strong());
    let top = list.iter().map(|e| e.peak_bytes).max().unwrap_or(0).max(1);
    egui::Grid::new("compiled_memory")
        .striped(true)
        .show(ui, |ui| {
            for h in [
                "executable",
                "peak",
                "",
                "arguments",
                "outputs",
                "temp",
                "code",
            ] {
                ui.weak(h);
            }
            ui.end_row();
            for e in list {
                ui.label(&e.graph);
                ui.label(bytes(e.peak_bytes));
                let (r, _) = ui.allocate_exact_size(egui::vec2(160.0, 10.0), egui::Sense::hover());
                ui.painter()
                    .rect_filled(r, 2.0, ui.visuals().faint_bg_color);
                let mut fill = r;
                fill.set_width((r.width() * e.peak_bytes as f32 / top as f32).max(1.0));
                ui.painter()
                    .rect_filled(fill, 2.0, Color32::from_rgb(60, 180, 120));
                ui.label(bytes(e.argument_bytes));
                ui.label(bytes(e.output_bytes));
                ui.label(bytes(e.temp_bytes));
                ui.label(bytes(e.generated_code_bytes));
                ui.end_row();
            }
        });
}

fn markers(p: &mut egui_plot::PlotUi<'_>, times: Option<&Vec<f64>>, name: &str, c: Color32) {
    let Some(times) = times.filter(|t| t.len() <= MAX_MARKERS) else {
        return;
    };
    for &t in times {
        p.vline(VLine::new(name, t).color(c.gamma_multiply(0.6)).width(1.0));
    }
}
