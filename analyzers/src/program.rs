//! A compiled program, decoded once and reduced to the keys families are built from.

use std::collections::{BTreeMap, HashMap};

use prost::Message;
use tpuscope_core::hlo::{self, HloInstructionProto, HloModuleProto, ShapeProto};
use xxhash_rust::xxh3::Xxh3;

use crate::source::{FrameClass, SourceLoc, frame_class, is_framework_file};

/// Which of the compile's programs was decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgramOrigin {
    /// The program the frontend handed to PJRT (torch_xla's HLO).
    Input,
    /// The compiler's optimized HLO (JAX and TorchTPU hand over StableHLO bytecode, which
    /// tpuscope does not decode).
    Optimized,
}

/// An entry-computation parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    pub number: i64,
    /// The frontend's name for it (a Python argument name), when the module kept one.
    pub name: Option<String>,
    pub dtype: String,
    pub dims: Vec<i64>,
}

impl Param {
    pub fn shape(&self) -> String {
        format!(
            "{}[{}]",
            self.dtype,
            self.dims
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        )
    }

    /// `#2 (x)` or `#2`.
    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => format!("#{} `{n}`", self.number),
            None => format!("#{}", self.number),
        }
    }
}

/// A decoded program and its family keys.
#[derive(Clone, Debug)]
pub struct Program {
    pub module: HloModuleProto,
    pub origin: ProgramOrigin,
    /// Hash of the structure with constant values, dimension sizes and element types left out,
    /// and instruction names, ids and metadata ignored: equal for the recompiles of one graph.
    pub structure_key: u64,
    /// Hash of everything but names, ids and metadata: equal for the same program.
    pub exact_key: u64,
    /// How many instructions of each opcode, over all computations.
    pub ops: BTreeMap<String, u32>,
    pub params: Vec<Param>,
    /// Where the user's code called into the traced function, from the ops' recorded Python
    /// stacks: the innermost user frame every op's stack passes through. The fallback when the
    /// compile itself carries no Python stack (TorchTPU compiles on a worker thread).
    pub call_site: Option<SourceLoc>,
    /// The one user-or-library frame every op's recorded stack ends in, when they all end in the
    /// same one. When that is the frame that called the jitted function, the traced body ran
    /// only frontend code (a function JAX jitted itself, such as `jax.nn.relu`): an eager op for
    /// the user, however it was called.
    pub body_frame: Option<SourceLoc>,
}

impl Program {
    pub fn from_module(module: HloModuleProto, origin: ProgramOrigin) -> Program {
        let (structure_key, exact_key) = keys(&module);
        let mut ops = BTreeMap::new();
        for c in &module.computations {
            for i in &c.instructions {
                *ops.entry(i.opcode.clone()).or_insert(0) += 1;
            }
        }
        let params = hlo::entry_parameter_instructions(&module)
            .into_iter()
            .map(|i| param_of(&module, i))
            .collect();
        let (call_site, body_frame) = call_site(&module);
        Program {
            module,
            origin,
            structure_key,
            exact_key,
            ops,
            params,
            call_site,
            body_frame,
        }
    }

    /// Share of instructions two programs have in common, by opcode (1.0 = same op counts).
    pub fn similarity(&self, other: &Program) -> f64 {
        let total_a: u32 = self.ops.values().sum();
        let total_b: u32 = other.ops.values().sum();
        let common: u32 = self
            .ops
            .iter()
            .map(|(op, n)| (*n).min(other.ops.get(op).copied().unwrap_or(0)))
            .sum();
        let denom = total_a.max(total_b);
        if denom == 0 {
            1.0
        } else {
            f64::from(common) / f64::from(denom)
        }
    }
}

/// At most this many ops' stacks are intersected: enough to agree on a call site.
const CALL_SITE_SAMPLE: usize = 256;

/// The call site (see [`Program::call_site`]), and the one user-or-library frame every op's
/// stack ends in, if they all end in the same one (see [`Program::body_frame`]).
fn call_site(module: &HloModuleProto) -> (Option<SourceLoc>, Option<SourceLoc>) {
    type Frames = Vec<(String, i32, String)>;
    let mut common: Option<Frames> = None;
    // None: no op seen yet; Some(None): ops end in different frames.
    let mut innermost: Option<Option<(String, i32, String)>> = None;
    let mut seen = std::collections::HashSet::new();
    let ids = module
        .computations
        .iter()
        .flat_map(|c| &c.instructions)
        .filter_map(|i| i.metadata.as_ref().map(|m| m.stack_frame_id))
        .filter(|&id| id > 0 && seen.insert(id))
        .take(CALL_SITE_SAMPLE);
    for id in ids {
        // Innermost first.
        let all = hlo::resolve_stack(module, id);
        let inner = all
            .iter()
            .find(|(f, line, _)| {
                *line > 0 && matches!(frame_class(f), FrameClass::User | FrameClass::Library)
            })
            .cloned();
        innermost = Some(match innermost {
            None => inner,
            Some(prev) if prev == inner => prev,
            Some(_) => None,
        });
        // Outermost first, user frames only.
        let mut frames: Frames = all
            .into_iter()
            .filter(|(f, line, _)| !is_framework_file(f) && *line > 0)
            .collect();
        frames.reverse();
        common = Some(match common {
            None => frames,
            Some(prev) => prev
                .into_iter()
                .zip(frames)
                .take_while(|(a, b)| a == b)
                .map(|(a, _)| a)
                .collect(),
        });
    }
    let loc = |(file, line, function): (String, i32, String)| {
        Some(SourceLoc {
            file,
            line: u32::try_from(line).ok()?,
            function,
        })
    };
    let site = common.and_then(|mut c| c.pop()).and_then(loc);
    let body = innermost.flatten().and_then(loc);
    (site, body)
}

fn param_of(module: &HloModuleProto, inst: &HloInstructionProto) -> Param {
    let shape = inst.shape.clone().unwrap_or_default();
    let from_meta = inst
        .metadata
        .as_ref()
        .map(|m| m.op_name.as_str())
        .filter(|n| is_argument_name(n));
    let from_program_shape = module
        .host_program_shape
        .as_ref()
        .and_then(|p| {
            p.parameter_names
                .get(usize::try_from(inst.parameter_number).ok()?)
        })
        .map(String::as_str)
        .filter(|n| is_argument_name(n));
    Param {
        number: inst.parameter_number,
        name: from_meta.or(from_program_shape).map(str::to_string),
        dtype: hlo::element_type_name(shape.element_type).to_string(),
        dims: shape.dimensions.clone(),
    }
}

/// Frontends put either a Python argument path (`params['w']`, `x`) or generated names
/// (`Arg_0.1`, `p0.3`, `xla__device_data`) in a parameter's name slots; only the former helps a user.
fn is_argument_name(name: &str) -> bool {
    if name.is_empty() || name.len() > 80 {
        return false;
    }
    let generated = name.starts_with("Arg_")
        || name.starts_with("xla__")
        || name.starts_with("parameter")
        || name.starts_with("param")
        || name.contains('/')
        || (name.starts_with('p') && name[1..].chars().all(|c| c.is_ascii_digit() || c == '.'));
    !generated
}

/// `(structure_key, exact_key)` of a module.
fn keys(module: &HloModuleProto) -> (u64, u64) {
    let comp_index: HashMap<i64, usize> = module
        .computations
        .iter()
        .enumerate()
        .map(|(i, c)| (c.id, i))
        .collect();
    let mut structure = Xxh3::new();
    let mut exact = Xxh3::new();
    let mut buf = Vec::new();
    let entry = hlo::entry_computation(module).map(|c| c.id);
    for comp in &module.computations {
        let inst_index: HashMap<i64, usize> = comp
            .instructions
            .iter()
            .enumerate()
            .map(|(i, inst)| (inst.id, i))
            .collect();
        let head = [
            0xC0u8,
            u8::from(Some(comp.id) == entry),
            u8::from(comp.is_fusion_computation),
        ];
        structure.update(&head);
        exact.update(&head);
        let root = inst_index.get(&comp.root_id).copied().unwrap_or(usize::MAX);
        structure.update(&root.to_le_bytes());
        exact.update(&root.to_le_bytes());
        for inst in &comp.instructions {
            let mut c = inst.clone();
            c.name.clear();
            c.id = 0;
            c.metadata = None;
            c.frontend_attributes = None;
            c.operand_ids = inst
                .operand_ids
                .iter()
                .map(|id| inst_index.get(id).map_or(-1, |&i| i as i64))
                .collect();
            c.control_predecessor_ids = inst
                .control_predecessor_ids
                .iter()
                .map(|id| inst_index.get(id).map_or(-1, |&i| i as i64))
                .collect();
            c.called_computation_ids = inst
                .called_computation_ids
                .iter()
                .map(|id| comp_index.get(id).map_or(-1, |&i| i as i64))
                .collect();
            buf.clear();
            c.encode(&mut buf).ok();
            exact.update(&(buf.len() as u64).to_le_bytes());
            exact.update(&buf);

            // The structure leaves out what a recompile of the same graph may change.
            c.literal = None;
            c.slice_dimensions.clear();
            c.dynamic_slice_sizes.clear();
            c.gather_slice_sizes.clear();
            c.padding_config = None;
            c.window = None;
            c.fft_length.clear();
            c.operand_shapes_with_layout.clear();
            c.backend_config.clear();
            c.shape = c.shape.as_ref().map(abstract_shape);
            buf.clear();
            c.encode(&mut buf).ok();
            structure.update(&(buf.len() as u64).to_le_bytes());
            structure.update(&buf);
        }
    }
    (structure.digest(), exact.digest())
}

/// A shape with only its nesting and rank kept.
fn abstract_shape(shape: &ShapeProto) -> ShapeProto {
    ShapeProto {
        element_type: i32::from(shape.element_type == 13),
        dimensions: vec![0; shape.dimensions.len()],
        tuple_shapes: shape.tuple_shapes.iter().map(abstract_shape).collect(),
        ..ShapeProto::default()
    }
}

/// Decodes a compile's program, preferring the input program: the optimized one is fused
/// differently for different shapes. `None` when neither blob is stored or decodable.
pub fn decode_compile(
    input: Option<(&str, &[u8])>,
    optimized: Option<(&str, &[u8])>,
) -> Option<Program> {
    if let Some((format, bytes)) = input
        && let Ok(Some(m)) = hlo::decode_program(format, bytes)
    {
        return Some(Program::from_module(m, ProgramOrigin::Input));
    }
    let (format, bytes) = optimized?;
    let m = hlo::decode_program(format, bytes).ok()??;
    Some(Program::from_module(m, ProgramOrigin::Optimized))
}
