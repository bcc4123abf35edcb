//! HLO listings and side-by-side diffs of real modules, and of real modules changed one way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use tpuscope_analyzers::hlo_text::{
    DIFF_BUDGET_STEPS, HloLine, RowKind, SideBySide, SideRow, module_lines, side_by_side,
    side_by_side_within,
};
use tpuscope_core::hlo::{
    self, HloComputationProto, HloInstructionProto, HloModuleProto, LiteralProto, OpMetadata,
    PrimitiveType, ShapeProto, decode_program, hlo_instruction_proto::SliceDimensions,
};

const LR_01: &str = "jax_lr_cpu_lr0.1.optimized.hlo_with_config.pb";
const LR_005: &str = "jax_lr_cpu_lr0.05.optimized.hlo_with_config.pb";
const TORCH_INPUT: &str = "torch_xla_item_step0.input.hlo.pb";
const ALL: &[&str] = &[
    LR_01,
    LR_005,
    TORCH_INPUT,
    "torch_xla_item_step0.optimized.hlo_with_config.pb",
    "jax_aot_tpu_v5e_2x2.optimized.hlo_with_config.pb",
];

fn module(name: &str) -> HloModuleProto {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../sample_traces/hlo")
        .join(name);
    let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let format = if name.ends_with(".hlo_with_config.pb") {
        "hlo_with_config"
    } else {
        "hlo"
    };
    decode_program(format, &bytes).unwrap().unwrap()
}

fn texts(lines: &[HloLine]) -> Vec<String> {
    lines.iter().map(|l| l.text.clone()).collect()
}

/// Every row is well formed, and reading one side of the rows top to bottom gives that module's
/// listing unchanged: nothing lost, duplicated or reordered.
fn check_rows(a: &HloModuleProto, b: &HloModuleProto, rows: &[SideRow]) {
    for r in rows {
        match r.kind {
            RowKind::Same | RowKind::Changed => assert!(r.left.is_some() && r.right.is_some()),
            RowKind::OnlyLeft => assert!(r.left.is_some() && r.right.is_none()),
            RowKind::OnlyRight => assert!(r.left.is_none() && r.right.is_some()),
        }
        if r.kind != RowKind::Changed {
            assert!(r.left_spans.is_empty() && r.right_spans.is_empty(), "{r:?}");
        } else {
            assert!(
                !r.left_spans.is_empty() || !r.right_spans.is_empty(),
                "{r:?}"
            );
        }
        for (text, spans) in [(&r.left, &r.left_spans), (&r.right, &r.right_spans)] {
            for &(s, e) in spans {
                let t = text.as_deref().unwrap();
                assert!(s < e && e <= t.len(), "{r:?}");
                assert!(t.is_char_boundary(s) && t.is_char_boundary(e), "{r:?}");
            }
        }
    }
    let left: Vec<String> = rows.iter().filter_map(|r| r.left.clone()).collect();
    let right: Vec<String> = rows.iter().filter_map(|r| r.right.clone()).collect();
    assert_eq!(left, texts(&module_lines(a)));
    assert_eq!(right, texts(&module_lines(b)));
}

fn span_texts<'a>(text: &'a Option<String>, spans: &[(usize, usize)]) -> Vec<&'a str> {
    let t = text.as_deref().unwrap();
    spans.iter().map(|&(s, e)| &t[s..e]).collect()
}

#[test]
fn listing_has_every_computation_and_instruction() {
    for name in ALL {
        let m = module(name);
        let lines = module_lines(&m);
        let total: usize = m
            .computations
            .iter()
            .map(|c| c.instructions.len() + 2)
            .sum();
        assert_eq!(lines.len(), total, "{name}");
        let entry = hlo::entry_computation(&m).unwrap();
        let entry_headers: Vec<&HloLine> = lines
            .iter()
            .filter(|l| l.text.starts_with("ENTRY "))
            .collect();
        assert_eq!(entry_headers.len(), 1, "{name}");
        assert!(
            entry_headers[0]
                .text
                .starts_with(&format!("ENTRY %{} (", entry.name)),
            "{}",
            entry_headers[0].text
        );
        assert!(entry_headers[0].text.ends_with(" {"));
        for (ci, c) in m.computations.iter().enumerate() {
            let of_comp: Vec<&HloLine> = lines.iter().filter(|l| l.computation == ci).collect();
            assert_eq!(of_comp.len(), c.instructions.len() + 2, "{name} {}", c.name);
            assert!(of_comp[0].text.contains(&format!("%{} (", c.name)));
            assert_eq!(of_comp.last().unwrap().text, "}");
            for (ii, inst) in c.instructions.iter().enumerate() {
                let line = of_comp
                    .iter()
                    .find(|l| l.instruction == Some(ii))
                    .unwrap_or_else(|| panic!("{name}: no line for {}", inst.name));
                let shape = hlo::shape_string(inst.shape.as_ref().unwrap());
                let start = format!("%{} = {shape} {}(", inst.name, inst.opcode);
                assert!(line.text.contains(&start), "{} vs {start}", line.text);
                assert_eq!(
                    line.text.trim_start().starts_with("ROOT "),
                    inst.id == c.root_id,
                    "{}",
                    line.text
                );
                if let Some(lit) = &inst.literal {
                    let value = format!("constant({})", hlo::literal_values_string(lit));
                    assert!(line.text.contains(&value), "{} vs {value}", line.text);
                }
                // Operands by name, in order.
                let operands: Vec<String> = inst
                    .operand_ids
                    .iter()
                    .map(|id| {
                        let o = c.instructions.iter().find(|i| i.id == *id).unwrap();
                        format!("%{}", o.name)
                    })
                    .collect();
                if !operands.is_empty() {
                    assert!(
                        line.text.contains(&format!("({})", operands.join(", "))),
                        "{}",
                        line.text
                    );
                }
                if let Some(meta) = &inst.metadata
                    && !meta.source_file.is_empty()
                {
                    let src = format!(
                        "source_file=\"{}\" source_line={}",
                        meta.source_file, meta.source_line
                    );
                    assert!(line.text.contains(&src), "{}", line.text);
                }
            }
        }
    }
}

#[test]
fn callees_and_attributes_are_named() {
    let m = module(LR_01);
    let lines = texts(&module_lines(&m));
    // Every fusion names the computation it calls, and that computation is listed.
    let fusions: Vec<&String> = lines.iter().filter(|l| l.contains(" fusion(")).collect();
    assert!(!fusions.is_empty());
    for f in fusions {
        let callee = f
            .split("calls=%")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap();
        assert!(
            lines.iter().any(|l| l.starts_with(&format!("%{callee} ("))),
            "{callee} not listed"
        );
    }
    let torch = texts(&module_lines(&module(TORCH_INPUT)));
    assert!(
        torch
            .iter()
            .any(|l| l.contains(" reduce(") && l.contains("to_apply=%AddComputation")),
        "{torch:#?}"
    );
    assert!(
        torch
            .iter()
            .any(|l| l.contains(" dot(") && l.contains("lhs_contracting_dims={1}"))
    );
}

fn scalar_shape() -> ShapeProto {
    ShapeProto {
        element_type: PrimitiveType::F32 as i32,
        ..Default::default()
    }
}

fn shape(dims: &[i64]) -> ShapeProto {
    ShapeProto {
        element_type: PrimitiveType::F32 as i32,
        dimensions: dims.to_vec(),
        layout: Some(hlo::LayoutProto {
            minor_to_major: (0..dims.len() as i64).rev().collect(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn slices_constants_and_metadata_read_like_hlo_text() {
    let param = HloInstructionProto {
        name: "p0.1".into(),
        opcode: "parameter".into(),
        shape: Some(shape(&[8, 16])),
        id: 1,
        ..Default::default()
    };
    let slice = HloInstructionProto {
        name: "slice.2".into(),
        opcode: "slice".into(),
        shape: Some(shape(&[1, 16])),
        id: 2,
        operand_ids: vec![1],
        slice_dimensions: vec![
            SliceDimensions {
                start: 0,
                limit: 1,
                stride: 1,
            },
            SliceDimensions {
                start: 0,
                limit: 16,
                stride: 2,
            },
        ],
        metadata: Some(OpMetadata {
            op_name: "jit(f)/slice".into(),
            source_file: "/src/train.py".into(),
            source_line: 33,
            ..Default::default()
        }),
        ..Default::default()
    };
    let constant = HloInstructionProto {
        name: "constant.3".into(),
        opcode: "constant".into(),
        shape: Some(scalar_shape()),
        id: 3,
        literal: Some(LiteralProto {
            shape: Some(scalar_shape()),
            f32s: vec![0.25],
            ..Default::default()
        }),
        ..Default::default()
    };
    let m = HloModuleProto {
        name: "m".into(),
        entry_computation_name: "main.4".into(),
        entry_computation_id: 7,
        computations: vec![HloComputationProto {
            name: "main.4".into(),
            id: 7,
            root_id: 2,
            instructions: vec![param, constant, slice],
            ..Default::default()
        }],
        ..Default::default()
    };
    let lines = texts(&module_lines(&m));
    assert_eq!(
        lines,
        [
            "ENTRY %main.4 (p0.1: f32[8,16]{1,0}) -> f32[1,16]{1,0} {",
            "  %p0.1 = f32[8,16]{1,0} parameter(0)",
            "  %constant.3 = f32[] constant(0.25)",
            "  ROOT %slice.2 = f32[1,16]{1,0} slice(%p0.1), slice={[0:1], [0:16:2]}, \
             metadata={op_name=\"jit(f)/slice\" source_file=\"/src/train.py\" source_line=33}",
            "}",
        ]
    );
}

#[test]
fn learning_rate_recompile_changes_exactly_the_constant() {
    let a = module(LR_01);
    let b = module(LR_005);
    let rows = side_by_side(&a, &b);
    check_rows(&a, &b, &rows);
    assert!(
        rows.iter()
            .all(|r| matches!(r.kind, RowKind::Same | RowKind::Changed)),
        "same structure: nothing one-sided"
    );
    // Which constants differ, from the protos themselves.
    let mut differing = Vec::new();
    for (ca, cb) in a.computations.iter().zip(&b.computations) {
        for (ia, ib) in ca.instructions.iter().zip(&cb.instructions) {
            if ia.opcode == "constant" && ia.literal != ib.literal {
                differing.push((
                    hlo::literal_values_string(ia.literal.as_ref().unwrap()),
                    hlo::literal_values_string(ib.literal.as_ref().unwrap()),
                ));
            }
        }
    }
    assert!(!differing.is_empty());
    let changed: Vec<&SideRow> = rows.iter().filter(|r| r.kind == RowKind::Changed).collect();
    assert_eq!(changed.len(), differing.len(), "{changed:#?}");
    for (r, (old, new)) in changed.iter().zip(&differing) {
        assert!(r.left.as_deref().unwrap().contains(" constant("), "{r:?}");
        assert_eq!(span_texts(&r.left, &r.left_spans), [old.as_str()], "{r:?}");
        assert_eq!(
            span_texts(&r.right, &r.right_spans),
            [new.as_str()],
            "{r:?}"
        );
    }
    assert_eq!(differing[0], ("0.1".to_string(), "0.05".to_string()));
}

/// A copy of a module with every instruction renumbered (names and ids), as a later process
/// would number them.
fn renumbered(m: &HloModuleProto, by: i64) -> HloModuleProto {
    let mut m = m.clone();
    for c in &mut m.computations {
        for i in &mut c.instructions {
            i.id += by;
            for o in &mut i.operand_ids {
                *o += by;
            }
            if let Some((base, n)) = i.name.rsplit_once('.')
                && let Ok(n) = n.parse::<i64>()
            {
                i.name = format!("{base}.{}", n + by);
            }
        }
        c.root_id += by;
    }
    m
}

#[test]
fn renumbered_instructions_are_the_same() {
    let a = module(TORCH_INPUT);
    let b = renumbered(&a, 100);
    assert_ne!(texts(&module_lines(&a)), texts(&module_lines(&b)));
    let rows = side_by_side(&a, &b);
    check_rows(&a, &b, &rows);
    assert!(rows.iter().all(|r| r.kind == RowKind::Same));
}

#[test]
fn an_added_instruction_is_one_right_only_row() {
    let a = module(TORCH_INPUT);
    let mut b = a.clone();
    let entry_id = b.entry_computation_id;
    let entry = b
        .computations
        .iter_mut()
        .find(|c| c.id == entry_id)
        .unwrap();
    let max_id = entry.instructions.iter().map(|i| i.id).max().unwrap();
    let at = entry.instructions.len() / 2;
    let operand = entry.instructions[at - 1].clone();
    entry.instructions.insert(
        at,
        HloInstructionProto {
            name: format!("negate.{}", max_id + 1),
            opcode: "negate".into(),
            shape: operand.shape.clone(),
            id: max_id + 1,
            operand_ids: vec![operand.id],
            ..Default::default()
        },
    );
    let rows = side_by_side(&a, &b);
    check_rows(&a, &b, &rows);
    let others: Vec<&SideRow> = rows.iter().filter(|r| r.kind != RowKind::Same).collect();
    assert_eq!(others.len(), 1, "{others:#?}");
    assert_eq!(others[0].kind, RowKind::OnlyRight);
    let text = others[0].right.as_deref().unwrap();
    assert!(
        text.contains(&format!("%negate.{} = ", max_id + 1)) && text.contains(&operand.name),
        "{text}"
    );
    // And the other way round.
    let back = side_by_side(&b, &a);
    check_rows(&b, &a, &back);
    let others: Vec<&SideRow> = back.iter().filter(|r| r.kind != RowKind::Same).collect();
    assert_eq!(others.len(), 1);
    assert_eq!(others[0].kind, RowKind::OnlyLeft);
}

#[test]
fn a_changed_parameter_dimension_marks_the_dimension() {
    let a = module(TORCH_INPUT);
    let mut b = a.clone();
    let entry_id = b.entry_computation_id;
    let entry = b
        .computations
        .iter_mut()
        .find(|c| c.id == entry_id)
        .unwrap();
    let p = entry
        .instructions
        .iter_mut()
        .find(|i| i.opcode == "parameter" && i.parameter_number == 0)
        .unwrap();
    let dims = &mut p.shape.as_mut().unwrap().dimensions;
    let old = dims[0];
    dims[0] = old * 2 + 1;
    let p_name = p.name.clone();
    let rows = side_by_side(&a, &b);
    check_rows(&a, &b, &rows);
    let changed: Vec<&SideRow> = rows.iter().filter(|r| r.kind == RowKind::Changed).collect();
    // The header (parameter list) and the parameter itself.
    assert_eq!(changed.len(), 2, "{changed:#?}");
    assert!(changed[0].left.as_deref().unwrap().starts_with("ENTRY "));
    assert!(
        changed[1]
            .left
            .as_deref()
            .unwrap()
            .contains(&format!("%{p_name} = "))
    );
    for r in changed {
        assert_eq!(span_texts(&r.left, &r.left_spans), [old.to_string()]);
        assert_eq!(
            span_texts(&r.right, &r.right_spans),
            [(old * 2 + 1).to_string()]
        );
    }
    assert_eq!(rows.iter().filter(|r| r.kind != RowKind::Same).count(), 2);
}

/// A module of `n` instructions: a chain of adds of constants, with metadata, like a large
/// unrolled step.
fn big_module(n: usize, constant_of: impl Fn(usize) -> f32) -> HloModuleProto {
    let mut instructions = vec![HloInstructionProto {
        name: "p0.0".into(),
        opcode: "parameter".into(),
        shape: Some(shape(&[128, 256])),
        id: 0,
        ..Default::default()
    }];
    let mut last = 0;
    let mut id = 1;
    while instructions.len() + 2 <= n {
        let c = HloInstructionProto {
            name: format!("constant.{id}"),
            opcode: "constant".into(),
            shape: Some(scalar_shape()),
            id,
            literal: Some(LiteralProto {
                shape: Some(scalar_shape()),
                f32s: vec![constant_of(instructions.len())],
                ..Default::default()
            }),
            ..Default::default()
        };
        let add = HloInstructionProto {
            name: format!("add.{}", id + 1),
            opcode: "add".into(),
            shape: Some(shape(&[128, 256])),
            id: id + 1,
            operand_ids: vec![last, id],
            metadata: Some(OpMetadata {
                op_name: format!("jit(step)/layer_{}/add", id / 2),
                source_file: "/src/model.py".into(),
                source_line: 100 + (id % 50) as i32,
                ..Default::default()
            }),
            ..Default::default()
        };
        instructions.push(c);
        instructions.push(add);
        last = id + 1;
        id += 2;
    }
    HloModuleProto {
        name: "big".into(),
        entry_computation_name: "main.0".into(),
        entry_computation_id: 1,
        computations: vec![HloComputationProto {
            name: "main.0".into(),
            id: 1,
            root_id: last,
            instructions,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// `big_module(n)` with nothing in common with `big_module`'s others: other constants, other
/// numbering, multiplies instead of adds.
fn unrelated_module(n: usize) -> HloModuleProto {
    let mut d = renumbered(&big_module(n, |i| i as f32 + 0.5), 1_000_000);
    for i in &mut d.computations[0].instructions {
        if i.opcode == "add" {
            i.opcode = "multiply".into();
        }
        i.name = i.name.replace("add", "multiply");
    }
    d
}

/// Lines of the longer listing.
fn lines_of(a: &HloModuleProto, b: &HloModuleProto) -> u64 {
    module_lines(a).len().max(module_lines(b).len()) as u64
}

#[test]
fn ten_thousand_instructions_diff_quickly() {
    let a = big_module(10_000, |i| i as f32);
    // Every 100th constant differs: same structure, instruction by instruction.
    let b = big_module(
        10_000,
        |i| if i % 100 == 1 { -(i as f32) } else { i as f32 },
    );
    let s = side_by_side_within(&a, &b, DIFF_BUDGET_STEPS);
    // Work, not time: a few steps a line, where a quadratic blow-up takes millions.
    eprintln!("10k instructions, same structure: {} steps", s.steps);
    assert!(!s.budget_exhausted);
    assert!(s.steps <= 4 * lines_of(&a, &b), "{}", s.steps);
    let rows = s.rows;
    check_rows(&a, &b, &rows);
    let expected = (0..a.computations[0].instructions.len())
        .filter(|i| i % 100 == 1 && *i > 0)
        .count();
    assert_eq!(
        rows.iter().filter(|r| r.kind == RowKind::Changed).count(),
        expected
    );

    // An instruction removed from the middle: the line diff path.
    let mut c = b.clone();
    c.computations[0].instructions.remove(5_001);
    let s = side_by_side_within(&a, &c, DIFF_BUDGET_STEPS);
    eprintln!("10k instructions, one removed: {} steps", s.steps);
    assert!(!s.budget_exhausted);
    // 100 changed lines and one removed among 10,000: about 11 steps a line.
    assert!(s.steps <= 20 * lines_of(&a, &c), "{}", s.steps);
    let rows = s.rows;
    check_rows(&a, &c, &rows);
    assert_eq!(
        rows.iter().filter(|r| r.kind == RowKind::OnlyLeft).count(),
        1
    );

    // Nothing in common: a_diff_past_its_budget_says_so_and_is_the_same_every_time.
}

/// The budget is a count of steps, not a clock: two large listings with nothing in common run
/// past it, say so, and align the same way every time (and on every machine).
#[test]
fn a_diff_past_its_budget_says_so_and_is_the_same_every_time() {
    // Nothing in common: the diff gives up at its budget rather than going quadratic.
    let a = big_module(10_000, |i| i as f32);
    let d = unrelated_module(10_000);
    let first: SideBySide = side_by_side_within(&a, &d, DIFF_BUDGET_STEPS);
    eprintln!("10k instructions, all different: {} steps", first.steps);
    assert!(first.budget_exhausted);
    // The last round of the search may overshoot by at most one pass over the diagonals.
    assert!(
        first.steps < DIFF_BUDGET_STEPS + 4 * lines_of(&a, &d),
        "{}",
        first.steps
    );
    assert_eq!(first, side_by_side_within(&a, &d, DIFF_BUDGET_STEPS));
    check_rows(&a, &d, &first.rows);
    // What the diff did not get to is shown as replaced: past the ends that match (the
    // parameter line, the closing brace), every row is one-sided.
    let paired = first
        .rows
        .iter()
        .filter(|r| matches!(r.kind, RowKind::Same | RowKind::Changed))
        .count();
    assert!(paired <= 4, "{paired} rows paired");

    // Smaller listings of the same kind fit in the budget: the diff finishes and pairs the
    // lines of the same instruction as changed.
    let a = big_module(1_000, |i| i as f32);
    let d = unrelated_module(1_000);
    let whole = side_by_side_within(&a, &d, DIFF_BUDGET_STEPS);
    assert!(!whole.budget_exhausted, "{} steps", whole.steps);
    assert_eq!(side_by_side(&a, &d), whole.rows);
    assert!(whole.rows.iter().any(|r| r.kind == RowKind::Changed));
    check_rows(&a, &d, &whole.rows);
    // The same pair with a budget too small for it stops short the same way every time.
    let cut = side_by_side_within(&a, &d, whole.steps / 2);
    assert!(cut.budget_exhausted);
    assert_eq!(cut, side_by_side_within(&a, &d, whole.steps / 2));
    assert!(cut.rows.len() > whole.rows.len());
    check_rows(&a, &d, &cut.rows);
}
