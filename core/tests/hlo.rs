#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Decodes the real HLO programs under `sample_traces/hlo/` (see its README for how each was made).

use std::path::{Path, PathBuf};

use tpuscope_core::Record;
use tpuscope_core::hlo::*;

fn sample_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sample_traces/hlo")
}

/// Not a test: writes the programs of every compile in a trace to files, for `sample_traces/hlo/`.
/// `TPUSCOPE_HLO_EXTRACT=TRACE:OUTDIR cargo test -p tpuscope-core --test hlo -- --ignored extract`
#[test]
#[ignore = "tool: extracts program blobs from a trace (TPUSCOPE_HLO_EXTRACT=TRACE:OUTDIR)"]
fn extract_programs_from_trace() {
    let spec =
        std::env::var("TPUSCOPE_HLO_EXTRACT").expect("set TPUSCOPE_HLO_EXTRACT=TRACE:OUTDIR");
    let (trace, out) = spec.split_once(':').expect("TRACE:OUTDIR");
    let trace = tpuscope_core::read_trace_file(Path::new(trace)).unwrap();
    std::fs::create_dir_all(out).unwrap();
    let mut n = 0;
    for ev in &trace.events {
        let Record::Compile(c) = ev else { continue };
        n += 1;
        for (role, hash, format) in [
            ("input", c.program_hash, &c.program_format),
            ("optimized", c.optimized_hash, &c.optimized_format),
        ] {
            let Some(blob) = trace.blobs.get(&hash) else {
                continue;
            };
            let path = Path::new(out).join(format!(
                "{n:02}_{}.{role}.{format}.pb",
                c.executable_name.replace('/', "_")
            ));
            std::fs::write(&path, &blob.data).unwrap();
            println!("{} {} bytes", path.display(), blob.data.len());
        }
    }
}

fn sample(name: &str) -> Vec<u8> {
    let path = sample_dir().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn load(name: &str, format: &str) -> HloModuleProto {
    decode_program(format, &sample(name))
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .unwrap_or_else(|| panic!("{name}: not HLO"))
}

const LR_01: &str = "jax_lr_cpu_lr0.1.optimized.hlo_with_config.pb";
const LR_005: &str = "jax_lr_cpu_lr0.05.optimized.hlo_with_config.pb";
const TPU: &str = "jax_aot_tpu_v5e_2x2.optimized.hlo_with_config.pb";
const TORCH_XLA_IN: &str = "torch_xla_item_step0.input.hlo.pb";
const TORCH_XLA_OPT: &str = "torch_xla_item_step0.optimized.hlo_with_config.pb";
const MLIR: &str = "jax_lr_cpu_lr0.1.input.mlir.pb";

/// Every HLO sample with its PJRT format.
const HLO_SAMPLES: [(&str, &str); 5] = [
    (LR_01, "hlo_with_config"),
    (LR_005, "hlo_with_config"),
    (TPU, "hlo_with_config"),
    (TORCH_XLA_IN, "hlo"),
    (TORCH_XLA_OPT, "hlo_with_config"),
];

fn all_instructions(
    m: &HloModuleProto,
) -> impl Iterator<Item = (&HloComputationProto, &HloInstructionProto)> {
    m.computations
        .iter()
        .flat_map(|c| c.instructions.iter().map(move |i| (c, i)))
}

/// The first op at or downstream of `id` (within its computation) that carries a stack frame:
/// constants themselves have no metadata after optimization, their users do.
fn first_user_with_stack(comp: &HloComputationProto, id: i64) -> Option<&HloInstructionProto> {
    let mut frontier = vec![id];
    let mut seen = std::collections::HashSet::new();
    while let Some(cur) = frontier.pop() {
        for inst in comp
            .instructions
            .iter()
            .filter(|i| i.operand_ids.contains(&cur))
        {
            if inst
                .metadata
                .as_ref()
                .is_some_and(|m| m.stack_frame_id != 0)
            {
                return Some(inst);
            }
            if seen.insert(inst.id) {
                frontier.push(inst.id);
            }
        }
    }
    None
}

#[test]
fn jax_lr_recompiles_differ_only_in_the_learning_rate_constant() {
    let a = load(LR_01, "hlo_with_config");
    let b = load(LR_005, "hlo_with_config");
    assert_eq!(a.name, "jit_train_step");

    // Same entry signature: nothing about the arguments changed.
    let pa = entry_parameters(&a);
    assert_eq!(pa, entry_parameters(&b));
    let shapes: Vec<String> = pa.iter().map(|p| shape_string(&p.2)).collect();
    assert_eq!(shapes, ["f32[8]{0}", "f32[64,8]{1,0}", "f32[64]{0}"]);
    let arg_names: Vec<&str> = entry_parameter_instructions(&a)
        .iter()
        .map(|i| i.metadata.as_ref().unwrap().op_name.as_str())
        .collect();
    assert_eq!(
        arg_names,
        ["w", "x", "y"],
        "JAX keeps the Python argument names in op_name"
    );

    // Exactly one instruction differs, and it is an f32 scalar constant 0.1 -> 0.05.
    assert_eq!(a.computations.len(), b.computations.len());
    let mut diffs = Vec::new();
    for (ca, cb) in a.computations.iter().zip(&b.computations) {
        assert_eq!(ca.instructions.len(), cb.instructions.len(), "{}", ca.name);
        for (ia, ib) in ca.instructions.iter().zip(&cb.instructions) {
            if ia != ib {
                diffs.push((ca, ia, ib));
            }
        }
    }
    assert_eq!(diffs.len(), 1, "{diffs:#?}");
    let (comp, ia, ib) = diffs[0];
    assert_eq!(ia.opcode, "constant");
    assert_eq!(shape_string(ia.shape.as_ref().unwrap()), "f32[]");
    assert_eq!(ia.literal.as_ref().unwrap().f32s, [0.1f32]);
    assert_eq!(ib.literal.as_ref().unwrap().f32s, [0.05f32]);
    assert_eq!(literal_values_string(ia.literal.as_ref().unwrap()), "0.1");
    assert_eq!(literal_values_string(ib.literal.as_ref().unwrap()), "0.05");
    // ...and nothing else in the modules differs at all (stack index included) but the module
    // id, which XLA numbers per process.
    assert_ne!(a.id, b.id);
    let mut b_patched = b.clone();
    b_patched.id = a.id;
    for c in &mut b_patched.computations {
        for i in &mut c.instructions {
            if i.id == ib.id {
                i.literal = ia.literal.clone();
            }
        }
    }
    assert_eq!(a, b_patched);

    // The constant's user is `lr * g`: tests/workloads/jax_lr.py line 33 in train_step.
    let user = first_user_with_stack(comp, ia.id).expect("a user with a stack frame");
    assert_eq!(user.opcode, "multiply");
    let meta = user.metadata.as_ref().unwrap();
    assert_eq!(meta.op_name, "jit(train_step)/mul");
    let stack = resolve_stack(&a, meta.stack_frame_id);
    let (file, line, function) = &stack[0];
    assert!(file.ends_with("tests/workloads/jax_lr.py"), "{file}");
    assert_eq!((*line, function.as_str()), (33, "main.<locals>.train_step"));
    // Outer frames: the call in main's loop, then the module's main() call.
    let outer: Vec<(i32, &str)> = stack[1..]
        .iter()
        .map(|(_, l, f)| (*l, f.as_str()))
        .collect();
    assert_eq!(outer, [(36, "main"), (44, "<module>")]);
    assert_eq!(instruction_source(&a, user), Some((file.clone(), 33)));
}

#[test]
fn tpu_program_has_tiled_layouts() {
    let m = load(TPU, "hlo_with_config");
    assert_eq!(m.name, "jit_f");
    let entry = entry_computation(&m).unwrap();
    assert_eq!(entry.name, m.entry_computation_name);
    // x (1024x512) is sharded 4 ways over `data`; w is replicated.
    let params: Vec<(i64, String)> = entry_parameters(&m)
        .iter()
        .map(|(n, _, s)| (*n, shape_string(s)))
        .collect();
    assert_eq!(
        params,
        [
            (0, "f32[256,512]{1,0:T(8,128)}".to_string()),
            (1, "f32[512,256]{1,0:T(8,128)}".to_string())
        ]
    );
    assert_eq!(
        shape_string_without_layout(&entry_parameters(&m)[0].2),
        "f32[256,512]"
    );
    let tiled = all_instructions(&m)
        .filter_map(|(_, i)| i.shape.as_ref()?.layout.as_ref())
        .filter(|l| l.tiles.iter().any(|t| t.dimensions == [8, 128]))
        .count();
    assert!(tiled >= 2, "tiled shapes: {tiled}");
    // libtpu moves x to another memory space (S(1)) before the fused matmul.
    assert!(
        all_instructions(&m).any(|(_, i)| shape_string(i.shape.as_ref().unwrap()).contains("S(1)"))
    );
    // The matmul resolves to f() in the workload.
    let conv = all_instructions(&m)
        .find(|(_, i)| i.opcode == "convolution")
        .unwrap()
        .1;
    let (file, line) = instruction_source(&m, conv).unwrap();
    assert!(
        file.ends_with("tests/workloads/jax_aot_tpu.py") && line == 18,
        "{file}:{line}"
    );
    let config = {
        use prost::Message;
        HloModuleProtoWithConfig::decode(&sample(TPU)[..])
            .unwrap()
            .config
            .unwrap()
    };
    assert_eq!((config.replica_count, config.num_partitions), (1, 4));
    assert!(config.use_spmd_partitioning);
}

#[test]
fn torch_xla_input_program_carries_source_lines() {
    let input = load(TORCH_XLA_IN, "hlo");
    let optimized = load(TORCH_XLA_OPT, "hlo_with_config");
    let dims = |m: &HloModuleProto| -> Vec<String> {
        entry_parameters(m)
            .iter()
            .map(|p| shape_string_without_layout(&p.2))
            .collect()
    };
    assert_eq!(
        dims(&input),
        ["f32[32,4]", "f32[4]", "f32[4,16]", "f32[32,16]", "f32[]"]
    );
    assert_eq!(dims(&input), dims(&optimized));
    // XLA_HLO_DEBUG=1: per-op source_file/source_line; x (line 18) and y (line 19) are parameters.
    let lines: Vec<(String, i32)> = entry_parameter_instructions(&input)
        .iter()
        .filter_map(|i| instruction_source(&input, i))
        .filter(|(f, _)| f.ends_with("tests/workloads/torch_xla_item.py"))
        .collect();
    assert_eq!(lines.iter().map(|l| l.1).collect::<Vec<_>>(), [19, 18]);
    // The same location also comes out of the stack index.
    let p0 = entry_parameter_instructions(&input)[0];
    let stack = resolve_stack(&input, p0.metadata.as_ref().unwrap().stack_frame_id);
    assert_eq!((stack[0].1, stack[0].2.as_str()), (19, "main"));
    // Constants survive decoding: the mse_loss mean scale 1/(32*4).
    assert!(all_instructions(&optimized).any(|(_, i)| {
        i.literal
            .as_ref()
            .is_some_and(|l| literal_values_string(l) == "0.0078125")
    }));
}

#[test]
fn mlir_and_unknown_formats() {
    let mlir = sample(MLIR);
    assert_eq!(&mlir[..4], b"ML\xefR", "StableHLO bytecode magic");
    assert!(decode_program("mlir", &mlir).unwrap().is_none());
    assert!(decode_program("hlo", &mlir).is_err());
    assert!(decode_program("hlo_with_config", &mlir).is_err());
    assert!(matches!(
        decode_program("stablehlo", &mlir),
        Err(HloError::UnknownFormat(_))
    ));
    assert!(matches!(
        decode_program("hlo_with_config", &[]),
        Err(HloError::NoModule)
    ));
    assert!(matches!(
        decode_program("hlo", &[]),
        Err(HloError::Malformed(_))
    ));
}

/// Runs every helper over a decoded module, so that fuzzed input exercises them too.
fn touch_everything(m: &HloModuleProto) {
    let _ = entry_parameters(m);
    for (_, i) in all_instructions(m) {
        if let Some(s) = &i.shape {
            let _ = shape_string(s);
        }
        if let Some(l) = &i.literal {
            let _ = literal_values_string(l);
        }
        let _ = instruction_source(m, i);
    }
    let frames = m
        .stack_frame_index
        .as_ref()
        .map_or(0, |s| s.stack_frames.len() as i32);
    for id in -1..=frames + 1 {
        let _ = resolve_stack(m, id);
    }
}

#[test]
fn truncated_programs_fail_or_keep_every_computation() {
    for (name, format) in HLO_SAMPLES {
        let bytes = sample(name);
        let full = load(name, format);
        let mut ok = Vec::new();
        for len in 0..bytes.len() {
            if let Ok(Some(m)) = decode_program(format, &bytes[..len]) {
                // Only a cut between top-level fields that follow the computations can decode:
                // protobuf cannot tell it from a shorter message. No op is ever lost silently.
                assert_eq!(m.computations, full.computations, "{name} cut at {len}");
                touch_everything(&m);
                ok.push(len);
            }
        }
        assert!(
            ok.len() <= 8,
            "{name}: {} truncations decode: {ok:?}",
            ok.len()
        );
        if format == "hlo_with_config" {
            // The whole module is field 1; only the cut right after it (config dropped) decodes.
            assert!(ok.len() <= 1, "{name}: {ok:?}");
        }
    }
}

#[test]
fn corrupted_and_random_bytes_never_panic() {
    for (name, format) in HLO_SAMPLES {
        let bytes = sample(name);
        // Single-byte corruptions spread over the whole program (about 600 positions each, to
        // keep the debug-build test short).
        for pos in (0..bytes.len()).step_by((bytes.len() / 600).max(1)) {
            for flip in [0xff_u8, 0x01] {
                let mut b = bytes.clone();
                b[pos] ^= flip;
                if let Ok(Some(m)) = decode_program(format, &b) {
                    touch_everything(&m);
                }
            }
        }
    }
    // Random buffers (xorshift, fixed seed): nothing structured enough to pass the checks.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..3000 {
        let len = (next() % 512) as usize;
        let buf: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        for format in ["hlo", "hlo_with_config"] {
            let r = decode_program(format, &buf);
            assert!(
                r.is_err(),
                "round {round}: random bytes decoded as {format}"
            );
        }
    }
}

#[test]
fn element_type_names() {
    let names: Vec<&str> = [1, 2, 4, 5, 11, 12, 16, 10, 15, 13, 17, 20, 0, 999, -1]
        .into_iter()
        .map(element_type_name)
        .collect();
    assert_eq!(
        names,
        [
            "pred", "s8", "s32", "s64", "f32", "f64", "bf16", "f16", "c64", "tuple", "token",
            "f8e4m3fn", "invalid", "unknown", "unknown"
        ]
    );
}

fn array(t: PrimitiveType, dims: &[i64]) -> ShapeProto {
    ShapeProto {
        element_type: t as i32,
        dimensions: dims.to_vec(),
        ..Default::default()
    }
}

#[test]
fn shape_strings() {
    let mut s = array(PrimitiveType::Bf16, &[8, 128]);
    assert_eq!(shape_string(&s), "bf16[8,128]");
    s.layout = Some(LayoutProto {
        minor_to_major: vec![1, 0],
        tiles: vec![
            TileProto {
                dimensions: vec![8, 128],
            },
            TileProto {
                dimensions: vec![2, 1],
            },
        ],
        memory_space: 1,
        ..Default::default()
    });
    assert_eq!(shape_string(&s), "bf16[8,128]{1,0:T(8,128)T(2,1)S(1)}");
    assert_eq!(shape_string_without_layout(&s), "bf16[8,128]");
    let mut d = array(PrimitiveType::S32, &[4, 16]);
    d.is_dynamic_dimension = vec![true, false];
    let t = ShapeProto {
        element_type: PrimitiveType::Tuple as i32,
        tuple_shapes: vec![
            array(PrimitiveType::F32, &[]),
            d,
            array(PrimitiveType::Token, &[]),
        ],
        ..Default::default()
    };
    assert_eq!(shape_string(&t), "(f32[], s32[<=4,16], token[])");
}

#[test]
fn literal_strings() {
    let lit = |t: PrimitiveType, dims: &[i64]| LiteralProto {
        shape: Some(array(t, dims)),
        ..Default::default()
    };
    let mut f = lit(PrimitiveType::F32, &[100]);
    f.f32s = (0..100).map(|v| v as f32 * 0.5).collect();
    assert_eq!(
        literal_values_string(&f),
        "{0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, ... (100 values)}"
    );
    let mut bf = lit(PrimitiveType::Bf16, &[2]);
    bf.bf16s = [1.0f32, -2.5]
        .iter()
        .flat_map(|v| ((v.to_bits() >> 16) as u16).to_le_bytes())
        .collect();
    assert_eq!(literal_values_string(&bf), "{1, -2.5}");
    let mut h = lit(PrimitiveType::F16, &[]);
    h.f16s = 0x3c00u16.to_le_bytes().to_vec(); // 1.0
    assert_eq!(literal_values_string(&h), "1");
    let mut p = lit(PrimitiveType::Pred, &[2]);
    p.preds = vec![true, false];
    assert_eq!(literal_values_string(&p), "{true, false}");
    let mut s8 = lit(PrimitiveType::S8, &[2]);
    s8.s8s = vec![0xff, 7];
    assert_eq!(literal_values_string(&s8), "{-1, 7}");
    let mut c = lit(PrimitiveType::C64, &[1]);
    c.c64s = vec![1.0, -1.0];
    assert_eq!(literal_values_string(&c), "{(1, -1)}");
    let mut i = lit(PrimitiveType::S32, &[]);
    i.s32s = vec![42];
    let tuple = LiteralProto {
        shape: Some(ShapeProto {
            element_type: PrimitiveType::Tuple as i32,
            ..Default::default()
        }),
        tuple_literals: vec![i, p],
        ..Default::default()
    };
    assert_eq!(literal_values_string(&tuple), "(42, {true, false})");
    let mut f8 = lit(PrimitiveType::F8e4m3fn, &[2]);
    f8.f8e4m3fns = vec![0x38, 0x40];
    assert_eq!(literal_values_string(&f8), "{0x38, 0x40}");
    // Odd byte count for a 2-byte type: the partial value is dropped, not read past the end.
    let mut odd = lit(PrimitiveType::Bf16, &[1]);
    odd.bf16s = vec![0x80, 0x3f, 0x00];
    assert_eq!(literal_values_string(&odd), "{1}");
}

#[test]
fn resolve_stack_survives_bad_indexes() {
    use tpuscope_core::hlo::stack_frame_index_proto::{FileLocation, StackFrame};
    let module = HloModuleProto {
        stack_frame_index: Some(StackFrameIndexProto {
            file_names: vec!["a.py".into()],
            function_names: vec!["f".into(), "g".into()],
            file_locations: vec![
                FileLocation {
                    file_name_id: 1,
                    function_name_id: 1,
                    line: 10,
                    column: 0,
                },
                FileLocation {
                    file_name_id: 1,
                    function_name_id: 2,
                    line: 20,
                    column: 0,
                },
                FileLocation {
                    file_name_id: 7,
                    function_name_id: 0,
                    line: 30,
                    column: 0,
                },
            ],
            stack_frames: vec![
                StackFrame {
                    file_location_id: 2,
                    parent_frame_id: 0,
                }, // 1: g (outermost)
                StackFrame {
                    file_location_id: 1,
                    parent_frame_id: 1,
                }, // 2: f <- g
                StackFrame {
                    file_location_id: 3,
                    parent_frame_id: 3,
                }, // 3: bad ids, self-cycle
                StackFrame {
                    file_location_id: 99,
                    parent_frame_id: 5,
                }, // 4: bad location
                StackFrame {
                    file_location_id: 99,
                    parent_frame_id: 4,
                }, // 5: cycle of bad frames
            ],
        }),
        ..Default::default()
    };
    let s = |file: &str, line, f: &str| (file.to_string(), line, f.to_string());
    assert_eq!(
        resolve_stack(&module, 2),
        [s("a.py", 10, "f"), s("a.py", 20, "g")]
    );
    assert_eq!(resolve_stack(&module, 1), [s("a.py", 20, "g")]);
    assert!(resolve_stack(&module, 0).is_empty());
    assert!(resolve_stack(&module, 6).is_empty());
    assert!(resolve_stack(&module, -3).is_empty());
    assert_eq!(
        resolve_stack(&module, 3).len(),
        5,
        "a cycle stops after one lap of the table"
    );
    assert!(resolve_stack(&module, 4).is_empty());
    assert!(resolve_stack(&HloModuleProto::default(), 1).is_empty());
}
