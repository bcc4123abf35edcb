//! The HLO decoder and what the analyzers do with a decoded program: `core::hlo::decode_program`
//! and its helpers, `analyzers::program` (family keys, call site), `diff::diff_programs` and
//! `hlo_text` (listing, side by side) against a real program from `sample_traces/hlo/`.
//!
//! Input: `[format, reference, blob…]`. `format & 3` picks `hlo`, `hlo_with_config`, `mlir` or a
//! name no reader knows; `reference` picks the real program to diff against and whether the
//! compile options count as equal.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use prost::Message;
use tpuscope_analyzers::diff::diff_programs;
use tpuscope_analyzers::hlo_text::{RowKind, SideRow, module_lines, side_by_side};
use tpuscope_analyzers::program::{Program, ProgramOrigin, decode_compile};
use tpuscope_core::hlo::{self, HloModuleProto};

const REFERENCES: &[(&str, &[u8])] = &[
    (
        "hlo_with_config",
        include_bytes!("../../sample_traces/hlo/jax_lr_cpu_lr0.05.optimized.hlo_with_config.pb"),
    ),
    (
        "hlo",
        include_bytes!("../../sample_traces/hlo/torch_xla_item_step0.input.hlo.pb"),
    ),
    (
        "hlo_with_config",
        include_bytes!("../../sample_traces/hlo/jax_aot_tpu_v5e_2x2.optimized.hlo_with_config.pb"),
    ),
];

fn references() -> &'static [Program] {
    static R: OnceLock<Vec<Program>> = OnceLock::new();
    R.get_or_init(|| {
        REFERENCES
            .iter()
            .map(|(f, b)| match hlo::decode_program(f, b) {
                Ok(Some(m)) => Program::from_module(m, ProgramOrigin::Optimized),
                other => panic!("reference program does not decode: {other:?}"),
            })
            .collect()
    })
}

/// The rows' texts on one side are that module's listing, in order, with nothing lost or added;
/// highlighted spans are inside their line, on character boundaries.
fn check_rows(rows: &[SideRow], left: &HloModuleProto, right: &HloModuleProto) {
    let texts = |m: &HloModuleProto| -> Vec<String> {
        module_lines(m).into_iter().map(|l| l.text).collect()
    };
    let l: Vec<String> = rows.iter().filter_map(|r| r.left.clone()).collect();
    let r: Vec<String> = rows.iter().filter_map(|r| r.right.clone()).collect();
    assert_eq!(
        l,
        texts(left),
        "side by side: left column is not the left listing"
    );
    assert_eq!(
        r,
        texts(right),
        "side by side: right column is not the right listing"
    );
    for row in rows {
        for (text, spans) in [(&row.left, &row.left_spans), (&row.right, &row.right_spans)] {
            for &(s, e) in spans {
                let t = text.as_deref().unwrap_or("");
                assert!(
                    s <= e && t.get(s..e).is_some(),
                    "span {s}..{e} not inside {t:?}"
                );
            }
        }
        match row.kind {
            RowKind::OnlyLeft => assert!(row.left.is_some() && row.right.is_none()),
            RowKind::OnlyRight => assert!(row.left.is_none() && row.right.is_some()),
            RowKind::Same | RowKind::Changed => assert!(row.left.is_some() && row.right.is_some()),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let [selector, reference, blob @ ..] = data else {
        return;
    };
    let format = match selector & 3 {
        0 => "hlo",
        1 => "hlo_with_config",
        2 => "mlir",
        _ => "stablehlo",
    };
    let decoded = hlo::decode_program(format, blob);
    let module = match decoded {
        Ok(Some(m)) => m,
        Ok(None) => {
            assert_eq!(format, "mlir", "no module and no error for {format}");
            return;
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            assert!(decode_compile(Some((format, blob)), None).is_none());
            return;
        }
    };
    // Deterministic, and what was decoded encodes and decodes (and validates) to the same
    // module. (Compared as values: a proto map is a HashMap, so its encoded order varies; NaN
    // literals are never equal to themselves, so modules holding one are compared by size.)
    let encoded = module.encode_to_vec();
    let comparable = !format!("{module:?}").contains("NaN");
    let again = match hlo::decode_program(format, blob) {
        Ok(Some(m)) => m,
        other => panic!("second decode: {other:?}"),
    };
    assert!(!comparable || again == module, "second decode differs");
    let round = match hlo::decode_program("hlo", &encoded) {
        Ok(Some(m)) => m,
        other => panic!("re-encoded module does not decode: {other:?}"),
    };
    assert_eq!(
        round.encode_to_vec().len(),
        encoded.len(),
        "round trip size"
    );
    assert!(!comparable || round == module, "encode/decode round trip");

    // The core helpers the analyzers call.
    assert!(
        hlo::entry_computation(&module).is_some(),
        "validated without an entry"
    );
    let params = hlo::entry_parameters(&module);
    assert_eq!(
        params.len(),
        hlo::entry_parameter_instructions(&module).len()
    );
    for c in &module.computations {
        for i in &c.instructions {
            if let Some(s) = &i.shape {
                let _ = hlo::shape_string(s);
                let _ = hlo::shape_string_without_layout(s);
            }
            if let Some(l) = &i.literal {
                let _ = hlo::literal_values_string(l);
            }
            let _ = hlo::instruction_source(&module, i);
            if let Some(m) = &i.metadata {
                let frames = hlo::resolve_stack(&module, m.stack_frame_id);
                let table = module
                    .stack_frame_index
                    .as_ref()
                    .map_or(0, |t| t.stack_frames.len());
                assert!(frames.len() <= table, "a stack longer than its frame table");
            }
        }
    }

    // The analyzers: keys are a function of the program, and the decoder the report uses agrees.
    let p = Program::from_module(module.clone(), ProgramOrigin::Input);
    let p2 = Program::from_module(round, ProgramOrigin::Input);
    assert_eq!(p.structure_key, p2.structure_key, "structure key");
    assert_eq!(p.exact_key, p2.exact_key, "exact key");
    assert_eq!(p.params, p2.params, "params");
    let via_report = decode_compile(Some((format, blob)), None)
        .unwrap_or_else(|| panic!("decode_program decoded it, decode_compile did not"));
    assert_eq!(via_report.exact_key, p.exact_key);
    let total: u32 = p.ops.values().sum();
    let instructions: usize = module
        .computations
        .iter()
        .map(|c| c.instructions.len())
        .sum();
    assert_eq!(total as usize, instructions, "op counts");
    assert!(
        (p.similarity(&p2) - 1.0).abs() < 1e-9,
        "a program is not similar to itself"
    );

    let same = diff_programs(&p, &p2, true);
    assert_eq!(same.cause, tpuscope_analyzers::Cause::IdenticalProgram);

    let refs = references();
    let r = &refs[*reference as usize % refs.len()];
    let options_equal = reference & 0x80 == 0;
    for d in [
        diff_programs(r, &p, options_equal),
        diff_programs(&p, r, options_equal),
    ] {
        assert!(!d.summary.is_empty(), "a diff without a summary");
        let _ = serde_json::to_string(&d).unwrap_or_else(|e| panic!("diff to JSON: {e}"));
    }

    let rows = side_by_side(&module, &module);
    assert!(
        rows.iter().all(|r| r.kind == RowKind::Same),
        "a module differs from itself"
    );
    check_rows(&rows, &module, &module);
    check_rows(&side_by_side(&r.module, &module), &r.module, &module);
    check_rows(&side_by_side(&module, &r.module), &module, &r.module);
});
