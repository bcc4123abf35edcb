//! Recompile causes from real HLO modules, and from those modules changed one way at a time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use tpuscope_analyzers::diff::{Cause, diff_programs};
use tpuscope_analyzers::program::{Program, ProgramOrigin, decode_compile};
use tpuscope_core::hlo::{self, HloModuleProto};

fn sample(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../sample_traces/hlo")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn optimized(name: &str) -> Program {
    decode_compile(None, Some(("hlo_with_config", &sample(name)))).unwrap()
}

fn input(name: &str) -> Program {
    decode_compile(Some(("hlo", &sample(name))), None).unwrap()
}

fn rebuilt(m: HloModuleProto, origin: ProgramOrigin) -> Program {
    Program::from_module(m, origin)
}

fn lr_line() -> u32 {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/workloads/jax_lr.py"),
    )
    .unwrap();
    text.lines()
        .position(|l| l.contains("return w - lr * g"))
        .unwrap() as u32
        + 1
}

#[test]
fn jax_learning_rate_is_a_changed_constant_at_its_line() {
    let a = optimized("jax_lr_cpu_lr0.1.optimized.hlo_with_config.pb");
    let b = optimized("jax_lr_cpu_lr0.05.optimized.hlo_with_config.pb");
    assert_eq!(a.origin, ProgramOrigin::Optimized);
    assert_eq!(a.structure_key, b.structure_key);
    assert_ne!(a.exact_key, b.exact_key);
    let d = diff_programs(&a, &b, true);
    assert_eq!(d.cause, Cause::ConstantChanged, "{d:#?}");
    assert_eq!(d.constants.len(), 1, "{d:#?}");
    let c = &d.constants[0];
    assert_eq!((c.what.as_str(), c.dtype.as_str()), ("literal", "f32"));
    assert_eq!((c.old.as_str(), c.new.as_str()), ("0.1", "0.05"));
    // The constant feeds a broadcast; the op that uses the value is the multiply.
    assert!(
        c.used_by.iter().any(|u| u.starts_with("multiply")),
        "{:?}",
        c.used_by
    );
    let src = c.source.as_ref().unwrap();
    assert!(src.file.ends_with("tests/workloads/jax_lr.py"), "{src:?}");
    assert_eq!(src.line, lr_line());
    // The call site every op passes through is the user's call of the jitted step.
    let site = a.call_site.as_ref().unwrap();
    assert!(
        site.file.ends_with("jax_lr.py") && site.line != lr_line(),
        "{site:?}"
    );
}

#[test]
fn the_same_program_is_identical_or_options_changed() {
    let a = optimized("jax_lr_cpu_lr0.1.optimized.hlo_with_config.pb");
    let mut m = a.module.clone();
    // Names and ids are not part of a program's identity.
    m.name = "renamed".into();
    for c in &mut m.computations {
        for i in &mut c.instructions {
            i.name.push_str(".x");
        }
    }
    let b = rebuilt(m, ProgramOrigin::Optimized);
    assert_eq!(a.exact_key, b.exact_key);
    assert_eq!(diff_programs(&a, &b, true).cause, Cause::IdenticalProgram);
    assert_eq!(diff_programs(&a, &b, false).cause, Cause::OptionsChanged);
}

fn with_param_dims(p: &Program, number: i64, dims: &[i64], element_type: Option<i32>) -> Program {
    let mut m = p.module.clone();
    let entry_id = hlo::entry_computation(&m).unwrap().id;
    for c in m.computations.iter_mut().filter(|c| c.id == entry_id) {
        for i in c
            .instructions
            .iter_mut()
            .filter(|i| i.opcode == "parameter" && i.parameter_number == number)
        {
            let s = i.shape.as_mut().unwrap();
            s.dimensions = dims.to_vec();
            if let Some(t) = element_type {
                s.element_type = t;
            }
        }
    }
    rebuilt(m, p.origin)
}

#[test]
fn a_parameter_dim_change_is_shape_changed_even_when_fusion_differs() {
    let a = optimized("jax_lr_cpu_lr0.1.optimized.hlo_with_config.pb");
    // x: f32[64,8] → f32[96,8].
    let mut b = with_param_dims(&a, 1, &[96, 8], None);
    // And a different fusion structure, as XLA produces for another shape.
    let mut m = b.module.clone();
    let extra = m.computations[0].instructions[0].clone();
    m.computations[0].instructions.push(extra);
    b = rebuilt(m, ProgramOrigin::Optimized);
    assert_ne!(a.structure_key, b.structure_key);
    let d = diff_programs(&a, &b, true);
    assert_eq!(d.cause, Cause::ShapeChanged, "{d:#?}");
    assert_eq!(d.params.len(), 1);
    assert_eq!(d.params[0].number, 1);
    assert_eq!(d.params[0].dims, vec![0]);
    assert_eq!(
        (d.params[0].old.as_str(), d.params[0].new.as_str()),
        ("f32[64,8]", "f32[96,8]")
    );
}

#[test]
fn a_parameter_type_change_is_dtype_changed() {
    let a = optimized("jax_lr_cpu_lr0.1.optimized.hlo_with_config.pb");
    let bf16 = 16; // PrimitiveType BF16
    let b = with_param_dims(&a, 1, &[64, 8], Some(bf16));
    let d = diff_programs(&a, &b, true);
    assert_eq!(d.cause, Cause::DtypeChanged, "{d:#?}");
    assert!(d.params[0].dtype_changed);
    assert!(d.params[0].dims.is_empty());
}

#[test]
fn a_traced_graph_with_other_ops_is_structure_changed() {
    let a = input("torch_xla_item_step0.input.hlo.pb");
    assert_eq!(a.origin, ProgramOrigin::Input);
    let mut m = a.module.clone();
    // Turn every add into a subtract: same size, other ops.
    let mut changed = 0;
    for c in &mut m.computations {
        for i in c.instructions.iter_mut().filter(|i| i.opcode == "add") {
            i.opcode = "subtract".into();
            changed += 1;
        }
    }
    assert!(changed > 0);
    let b = rebuilt(m, ProgramOrigin::Input);
    let d = diff_programs(&a, &b, true);
    assert_eq!(d.cause, Cause::StructureChanged, "{d:#?}");
    assert_eq!(d.ops_added.get("subtract").copied(), Some(changed));
    assert_eq!(d.ops_removed.get("add").copied(), Some(changed));
    assert!(
        d.summary.contains("+") && d.summary.contains("add"),
        "{}",
        d.summary
    );
}

#[test]
fn changed_slice_bounds_are_constant_changed() {
    let a = input("torch_xla_item_step0.input.hlo.pb");
    let mut m = a.module.clone();
    // Give the module a slice whose start moves, as `x[step]` with a Python int does.
    let comp = m.computations.last_mut().unwrap();
    let operand = comp
        .instructions
        .iter()
        .find(|i| i.opcode == "parameter")
        .unwrap()
        .clone();
    let mut slice = operand.clone();
    slice.opcode = "slice".into();
    slice.id = 999_999;
    slice.name = "slice.999".into();
    slice.operand_ids = vec![operand.id];
    slice.slice_dimensions = operand
        .shape
        .as_ref()
        .unwrap()
        .dimensions
        .iter()
        .map(
            |&d| tpuscope_core::hlo::hlo_instruction_proto::SliceDimensions {
                start: 0,
                limit: d.min(1),
                stride: 1,
            },
        )
        .collect();
    comp.instructions.push(slice);
    let a2 = rebuilt(m.clone(), ProgramOrigin::Input);
    let comp = m.computations.last_mut().unwrap();
    let s = comp.instructions.last_mut().unwrap();
    for d in &mut s.slice_dimensions {
        d.start += 1;
        d.limit += 1;
    }
    let b = rebuilt(m, ProgramOrigin::Input);
    let d = diff_programs(&a2, &b, true);
    assert_eq!(d.cause, Cause::ConstantChanged, "{d:#?}");
    assert_eq!(d.constants[0].what, "slice bounds");
    assert_eq!(d.constants[0].op, "slice");
    assert!(
        d.constants[0].old.starts_with("[0:"),
        "{}",
        d.constants[0].old
    );
    assert!(
        d.constants[0].new.starts_with("[1:"),
        "{}",
        d.constants[0].new
    );
}

#[test]
fn similarity_is_one_for_the_same_ops_and_falls_with_differences() {
    let a = optimized("jax_lr_cpu_lr0.1.optimized.hlo_with_config.pb");
    let b = optimized("jax_lr_cpu_lr0.05.optimized.hlo_with_config.pb");
    assert!((a.similarity(&b) - 1.0).abs() < 1e-9);
    let t = input("torch_xla_item_step0.input.hlo.pb");
    assert!(a.similarity(&t) < 0.9);
}

/// A loop whose last batch of an epoch is short and whose learning rate is a baked-in constant
/// that decays: each new rate compiles the full and the short batch's program. Each is told
/// against the earlier member with its own parameter shapes, so the family's cause is the
/// constant (10 of its 11 recompiles), not shapes that merely alternate.
#[test]
fn alternating_shapes_with_a_changing_constant_are_told_as_the_constant() {
    use std::sync::Arc;
    use tpuscope_analyzers::families::{CompileView, families};
    use tpuscope_analyzers::phases::Origin;
    let rates = [
        optimized("jax_lr_cpu_lr0.1.optimized.hlo_with_config.pb"),
        optimized("jax_lr_cpu_lr0.05.optimized.hlo_with_config.pb"),
    ];
    // x: f32[64,8] and the short f32[32,8] of each rate; a third rate made by reusing the first
    // is a cache miss of the first (the same program).
    let programs: Vec<Program> = [0, 1, 0]
        .iter()
        .flat_map(|&r| {
            [
                rates[r].clone(),
                with_param_dims(&rates[r], 1, &[32, 8], None),
            ]
        })
        .collect();
    let view = |i: usize, p: &Program| CompileView {
        run: 0,
        event: i,
        t_ns: i as u64,
        at_ns: i as u64,
        dur_ns: 1,
        name: "jit_train_step".into(),
        program_hash: p.exact_key,
        program_format: "hlo_with_config".into(),
        options_hash: 0,
        executable_id: i as u64,
        stack: 0,
        source: None,
        failed: false,
        program: Some(Arc::new(p.clone())),
        same_program_key: p.exact_key,
        origin: Origin::Graph,
        library: None,
        before_attach: false,
    };
    let compiles: Vec<CompileView> = programs
        .iter()
        .enumerate()
        .map(|(i, p)| view(i, p))
        .collect();
    let fams = families(&compiles);
    assert_eq!(fams.len(), 1, "one graph");
    let f = &fams[0];
    let told: Vec<(Option<usize>, Option<Cause>)> = f
        .members
        .iter()
        .map(|m| (m.against, m.diff.as_ref().map(|d| d.cause)))
        .collect();
    assert_eq!(
        told,
        vec![
            (None, None),
            (Some(0), Some(Cause::ShapeChanged)),
            (Some(0), Some(Cause::ConstantChanged)),
            (Some(1), Some(Cause::ConstantChanged)),
            (Some(0), Some(Cause::IdenticalProgram)),
            (Some(1), Some(Cause::IdenticalProgram)),
        ]
    );
    assert_eq!(f.cause(), Some(Cause::ConstantChanged));
}
