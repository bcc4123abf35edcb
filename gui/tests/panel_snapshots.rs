#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Snapshots of the text the Summary and Syncs tabs show for real traces: every label of the
//! window's accessibility tree, in tree order, as egui_kittest sees it. A change of wording in
//! these panels (or a fact they stop or start saying) shows up as a snapshot diff.

use std::path::Path;

use eframe::egui::accesskit::Role;
use egui_kittest::Harness;
use egui_kittest::kittest::NodeT;
use tpuscope_analyzers::torch_trace::TorchLogs;
use tpuscope_gui::{App, Source, Tab};

/// The window's labels and values, one per line, indented by depth in the tree.
fn panel_text(app: App) -> String {
    // Tall enough that the scroll areas hold every row of these traces on screen.
    let mut h = Harness::builder()
        .with_size((1400.0, 4000.0))
        .allow_missing_glyphs()
        .build_ui_state(|ui, app: &mut App| app.ui(ui), app);
    h.run();
    let mut out = String::new();
    collect(&h.root(), 0, &mut out);
    out
}

fn collect<'t, N: NodeT<'t> + 't>(node: &N, depth: usize, out: &mut String) {
    let a = node.accesskit_node();
    // A label's text runs repeat it, broken where the layout wraps it: font metrics, not wording.
    if a.role() == Role::TextRun {
        return;
    }
    let text: Vec<String> = [a.label(), a.value()]
        .into_iter()
        .flatten()
        .map(|s| s.to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let mut depth = depth;
    if !text.is_empty() {
        out.push_str(&format!(
            "{}{:?}: {}\n",
            "  ".repeat(depth),
            a.role(),
            text.join(" = ")
        ));
        depth += 1;
    }
    for child in node.children() {
        collect(&child, depth, out);
    }
}

/// A sample trace, opened by a path relative to the crate (the label the window shows).
fn source(rel: &str) -> Source {
    let p = Path::new("../sample_traces").join(rel);
    Source::open(&p, false)
}

#[test]
fn summary_and_syncs_of_real_traces() {
    for (rel, tab) in [
        ("real/jax_lr.tps", Tab::Summary),
        ("real/jax_lr.tps", Tab::Syncs),
        ("real/torch_xla_item.tps", Tab::Summary),
        ("real/torch_xla_item.tps", Tab::Syncs),
        ("real/jax_shapes.tps", Tab::Summary),
    ] {
        let text = panel_text(App::new(vec![source(rel)], tab, false));
        let name = format!(
            "{}__{}",
            tab.name(),
            rel.trim_end_matches(".tps").replace(['/', '.', '-'], "_")
        );
        insta::assert_snapshot!(name, text);
    }
}

/// The Summary tab with dynamo's logs joined, as `tpuscope view` reads them next to the trace.
#[test]
fn summary_with_dynamo_logs() {
    let rel = "torch_trace/graph_break_and_guard.tps";
    let dir = Path::new("../sample_traces/torch_trace/graph_break_and_guard.torch_trace");
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    files.sort();
    let s = source(rel);
    let logs = TorchLogs {
        trace_path: s.label.clone(),
        dir: dir.display().to_string(),
        files,
        note: None,
    };
    let app = App::with_torch_logs(vec![s], Tab::Summary, false, vec![logs]);
    insta::assert_snapshot!(
        "summary__torch_trace_graph_break_and_guard",
        panel_text(app)
    );
}
