//! The flamegraph view: folded stacks (from the analyzers) drawn as an icicle chart, the outermost
//! frame on top; click a frame to zoom into it.

use std::collections::BTreeMap;

use eframe::egui::{self, Align2, Color32, FontId, Rect, Sense, pos2, vec2};
use tpuscope_analyzers::flame::{FlameKind, folded_of};
use tpuscope_analyzers::source::is_framework_file;

use crate::data::Run;

use crate::fmt;

/// Folded stacks: (`outer;…;inner`, weight).
pub type Folded = Vec<(String, u64)>;

/// Folded stacks of all traces, equal stacks summed: (compile time, sync stall), in µs.
pub fn folded_all(runs: &[(usize, &Run)]) -> (Folded, Folded) {
    let merge = |kind: FlameKind| {
        let mut m: BTreeMap<String, u64> = BTreeMap::new();
        for &(_, r) in runs {
            for (s, w) in folded_of(&r.trace, &r.digest, kind) {
                *m.entry(s).or_default() += w;
            }
        }
        m.into_iter().collect::<Vec<_>>()
    };
    (merge(FlameKind::CompileTime), merge(FlameKind::SyncStall))
}

/// A frame of the merged call tree.
#[derive(Clone, Debug)]
pub struct Node {
    pub name: String,
    /// µs, this frame and everything it called.
    pub value: u64,
    pub children: Vec<usize>,
    pub parent: Option<usize>,
    pub depth: usize,
}

/// The folded stacks as a tree; node 0 is the root ("all").
#[derive(Clone, Debug)]
pub struct Tree {
    pub nodes: Vec<Node>,
    pub max_depth: usize,
}

impl Tree {
    pub fn build(folded: &[(String, u64)], root: &str) -> Tree {
        let mut nodes = vec![Node {
            name: root.to_string(),
            value: 0,
            children: Vec::new(),
            parent: None,
            depth: 0,
        }];
        let mut max_depth = 0;
        for (stack, w) in folded {
            nodes[0].value += w;
            let mut at = 0;
            for (d, frame) in stack.split(';').enumerate() {
                let found = nodes[at]
                    .children
                    .iter()
                    .copied()
                    .find(|&c| nodes[c].name == frame);
                let child = match found {
                    Some(c) => c,
                    None => {
                        nodes.push(Node {
                            name: frame.to_string(),
                            value: 0,
                            children: Vec::new(),
                            parent: Some(at),
                            depth: d + 1,
                        });
                        let c = nodes.len() - 1;
                        nodes[at].children.push(c);
                        c
                    }
                };
                nodes[child].value += w;
                max_depth = max_depth.max(d + 1);
                at = child;
            }
        }
        // Widest first reads best.
        let values: Vec<u64> = nodes.iter().map(|n| n.value).collect();
        for n in &mut nodes {
            n.children.sort_by_key(|&c| std::cmp::Reverse(values[c]));
        }
        Tree { nodes, max_depth }
    }
}

/// State of the flamegraph tab.
#[derive(Clone, Debug)]
pub struct FlameState {
    pub kind: FlameKind,
    /// Node the chart is zoomed into (0: all).
    pub zoom: usize,
    pub status: String,
    /// Where "Export SVG" writes (`flame.svg` in the working directory).
    pub export_to: std::path::PathBuf,
    /// Built from the current analysis (rebuilt when the kind or the analysis changes).
    pub tree: Option<(FlameKind, u64, Tree)>,
}

impl Default for FlameState {
    fn default() -> Self {
        FlameState {
            kind: FlameKind::CompileTime,
            zoom: 0,
            status: String::new(),
            export_to: std::path::PathBuf::from("flame.svg"),
            tree: None,
        }
    }
}

const ROW: f32 = 18.0;

fn colour(name: &str, user: bool) -> Color32 {
    // Stable per name, warm for the user's frames, cool for frameworks'.
    let h = name.bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    });
    let v = (h % 60) as u8;
    if user {
        Color32::from_rgb(220, 120 + v, 40 + v / 2)
    } else {
        Color32::from_rgb(90 + v / 2, 140 + v, 190)
    }
}

/// Draws the chart in the space left; returns the node clicked, if any.
pub fn chart_ui(ui: &mut egui::Ui, tree: &Tree, zoom: usize) -> Option<usize> {
    let avail = ui.available_size();
    let height = (tree.max_depth as f32 + 1.0) * ROW;
    let (rect, response) =
        ui.allocate_exact_size(vec2(avail.x, height.max(avail.y)), Sense::click());
    let painter = ui.painter_at(rect);
    let z = tree.nodes.get(zoom)?;
    if z.value == 0 {
        painter.text(
            rect.center(),
            Align2::CENTER_CENTER,
            "no time recorded for this kind",
            FontId::proportional(14.0),
            ui.visuals().weak_text_color(),
        );
        return None;
    }
    let font = FontId::proportional(12.0);
    let text_colour = Color32::from_gray(20);
    let hover = response.hover_pos();
    let mut hovered: Option<usize> = None;
    // Ancestors of the zoomed node, full width, above it.
    let mut chain = Vec::new();
    let mut p = z.parent;
    while let Some(a) = p {
        chain.push(a);
        p = tree.nodes[a].parent;
    }
    chain.reverse();
    let mut stack: Vec<(usize, f32, f32)> = Vec::new();
    for (row, &a) in chain.iter().enumerate() {
        let r = Rect::from_min_size(
            pos2(rect.left(), rect.top() + row as f32 * ROW),
            vec2(rect.width(), ROW - 1.0),
        );
        painter.rect_filled(r, 0.0, Color32::from_gray(200));
        painter.text(
            r.left_center() + vec2(4.0, 0.0),
            Align2::LEFT_CENTER,
            &tree.nodes[a].name,
            font.clone(),
            text_colour,
        );
        if hover.is_some_and(|h| r.contains(h)) {
            hovered = Some(a);
        }
    }
    let top = rect.top() + chain.len() as f32 * ROW;
    stack.push((zoom, rect.left(), rect.width()));
    let base_depth = z.depth;
    while let Some((n, x, w)) = stack.pop() {
        let node = &tree.nodes[n];
        let y = top + (node.depth - base_depth) as f32 * ROW;
        let r = Rect::from_min_size(pos2(x, y), vec2((w - 1.0).max(1.0), ROW - 1.0));
        let file = node.name.split(':').next().unwrap_or("");
        let user = n != 0 && !is_framework_file(file) && !node.name.starts_with('(');
        painter.rect_filled(r, 1.0, colour(&node.name, user));
        if w > 30.0 {
            let label = fit(&node.name, w - 8.0, 6.5);
            painter.with_clip_rect(r).text(
                r.left_center() + vec2(4.0, 0.0),
                Align2::LEFT_CENTER,
                label,
                font.clone(),
                text_colour,
            );
        }
        if hover.is_some_and(|h| r.contains(h)) {
            hovered = Some(n);
        }
        let mut cx = x;
        for &c in &node.children {
            let cw = w * tree.nodes[c].value as f32 / node.value.max(1) as f32;
            // Narrower than a pixel: not drawn, nor are its callees.
            if cw >= 1.0 {
                stack.push((c, cx, cw));
            }
            cx += cw;
        }
    }
    if let Some(h) = hovered {
        let n = &tree.nodes[h];
        let share = 100.0 * n.value as f64 / tree.nodes[0].value.max(1) as f64;
        response.clone().on_hover_ui_at_pointer(|ui| {
            ui.label(&n.name);
            ui.label(format!(
                "{} ({share:.1}% of all)",
                fmt::dur(n.value as f64 * 1e3)
            ));
        });
    }
    if response.clicked() { hovered } else { None }
}

/// `text` cut with an ellipsis to about `width` pixels at `char_w` per character.
fn fit(text: &str, width: f32, char_w: f32) -> String {
    let max = (width / char_w).max(1.0) as usize;
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
        s.push('…');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_sums_stacks() {
        let f = vec![
            ("main;train;step".to_string(), 30),
            ("main;train;eval".to_string(), 10),
            ("main;load".to_string(), 5),
        ];
        let t = Tree::build(&f, "all");
        assert_eq!(t.nodes[0].value, 45);
        let main = t.nodes[0].children[0];
        assert_eq!(t.nodes[main].name, "main");
        assert_eq!(t.nodes[main].value, 45);
        let train = t.nodes[main].children[0];
        assert_eq!(t.nodes[train].value, 40);
        assert_eq!(t.max_depth, 3);
    }
}
