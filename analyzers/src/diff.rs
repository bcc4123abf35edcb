//! What changed between two compiles of one graph.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use tpuscope_core::hlo::{self, HloComputationProto, HloInstructionProto, HloModuleProto};

use crate::program::{Param, Program, ProgramOrigin};
use crate::source::{SourceLoc, is_framework_file};

/// Why a graph compiled again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// A literal or a static op attribute (slice bounds, sizes, pad amounts) differs: a Python
    /// scalar baked into the graph.
    ConstantChanged,
    /// An argument's dimensions differ.
    ShapeChanged,
    /// An argument's (or an op's) element type differs.
    DtypeChanged,
    /// Ops or arguments were added or removed: another trace of the code.
    StructureChanged,
    /// The same program, compiled with different options.
    OptionsChanged,
    /// The same program and options compiled again: a cache miss.
    IdenticalProgram,
    /// The programs differ in a way tpuscope does not classify, or could not be decoded.
    Unknown,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::ConstantChanged => "constant_changed",
            Cause::ShapeChanged => "shape_changed",
            Cause::DtypeChanged => "dtype_changed",
            Cause::StructureChanged => "structure_changed",
            Cause::OptionsChanged => "options_changed",
            Cause::IdenticalProgram => "identical_program",
            Cause::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An entry parameter whose type changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ParamChange {
    pub number: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub old: String,
    pub new: String,
    /// Which dimensions changed size.
    pub dims: Vec<usize>,
    pub dtype_changed: bool,
}

/// A constant value or static attribute that changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConstantChange {
    /// `literal`, `slice bounds`, `dynamic-slice sizes`, `gather slice sizes`, `pad amounts`,
    /// `window`, `size` (an op's static output size), `dtype`.
    pub what: String,
    /// The op that holds it (opcode).
    pub op: String,
    /// Its name in the later program.
    pub instruction: String,
    pub dtype: String,
    pub old: String,
    pub new: String,
    /// The ops that consume it (opcode and frontend op name).
    pub used_by: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceLoc>,
}

/// The difference between a compile and the earlier sibling it is compared with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diff {
    pub cause: Cause,
    /// One line a human reads.
    pub summary: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<ParamChange>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constants: Vec<ConstantChange>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ops_added: BTreeMap<String, u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ops_removed: BTreeMap<String, u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params_count: Option<(usize, usize)>,
    /// For `structure_changed`: the user line most of the added or removed ops come from, when
    /// the HLO carries source metadata (JAX, TorchTPU, torch_xla with `XLA_HLO_DEBUG=1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops_source: Option<SourceLoc>,
}

impl Diff {
    fn new(cause: Cause, summary: String) -> Diff {
        Diff {
            cause,
            summary,
            params: Vec::new(),
            constants: Vec::new(),
            ops_added: BTreeMap::new(),
            ops_removed: BTreeMap::new(),
            params_count: None,
            ops_source: None,
        }
    }
}

/// At most this many changes are listed per member.
const MAX_CHANGES: usize = 24;

/// Compares program `b` with the earlier `a`.
pub fn diff_programs(a: &Program, b: &Program, options_equal: bool) -> Diff {
    if a.exact_key == b.exact_key {
        return if options_equal {
            Diff::new(
                Cause::IdenticalProgram,
                "the same program was compiled again".to_string(),
            )
        } else {
            Diff::new(
                Cause::OptionsChanged,
                "the same program was compiled with different compile options".to_string(),
            )
        };
    }
    // An input program is what the frontend traced: another structure is another trace, even
    // when the arguments changed with it. Optimized programs are fused differently for
    // different shapes, so there the arguments decide.
    let traced = a.origin == ProgramOrigin::Input && b.origin == ProgramOrigin::Input;
    if traced && a.structure_key != b.structure_key {
        return structure_diff(a, b);
    }
    let same_ranks = a.params.len() == b.params.len()
        && a.params
            .iter()
            .zip(&b.params)
            .all(|(x, y)| x.dims.len() == y.dims.len());
    if same_ranks {
        let changes = param_changes(&a.params, &b.params);
        if !changes.is_empty() {
            let cause = if changes.iter().any(|c| !c.dims.is_empty()) {
                Cause::ShapeChanged
            } else {
                Cause::DtypeChanged
            };
            let summary = changes
                .iter()
                .map(|c| format!("argument {}: {} → {}", label(c), c.old, c.new))
                .collect::<Vec<_>>()
                .join("; ");
            let mut d = Diff::new(cause, summary);
            d.params = changes;
            return d;
        }
    }
    if a.params.len() == b.params.len() && a.structure_key == b.structure_key {
        return aligned_diff(&a.module, &b.module);
    }
    structure_diff(a, b)
}

fn label(c: &ParamChange) -> String {
    match &c.name {
        Some(n) => format!("#{} `{n}`", c.number),
        None => format!("#{}", c.number),
    }
}

fn param_changes(a: &[Param], b: &[Param]) -> Vec<ParamChange> {
    a.iter()
        .zip(b)
        .filter(|(pa, pb)| pa.dims != pb.dims || pa.dtype != pb.dtype)
        .map(|(pa, pb)| {
            let dims = if pa.dims.len() == pb.dims.len() {
                (0..pa.dims.len())
                    .filter(|&d| pa.dims[d] != pb.dims[d])
                    .collect()
            } else {
                // A rank change: every dimension counts as changed.
                (0..pa.dims.len().max(pb.dims.len())).collect()
            };
            ParamChange {
                number: pb.number,
                name: pb.name.clone().or_else(|| pa.name.clone()),
                old: pa.shape(),
                new: pb.shape(),
                dims,
                dtype_changed: pa.dtype != pb.dtype,
            }
        })
        .collect()
}

fn structure_diff(a: &Program, b: &Program) -> Diff {
    if let Some(d) = data_became_constant(a, b) {
        return d;
    }
    let mut added = BTreeMap::new();
    let mut removed = BTreeMap::new();
    for (op, &nb) in &b.ops {
        let na = a.ops.get(op).copied().unwrap_or(0);
        if nb > na {
            added.insert(op.clone(), nb - na);
        }
    }
    for (op, &na) in &a.ops {
        let nb = b.ops.get(op).copied().unwrap_or(0);
        if na > nb {
            removed.insert(op.clone(), na - nb);
        }
    }
    let fmt = |m: &BTreeMap<String, u32>, sign: char| {
        let mut v: Vec<(&String, &u32)> = m.iter().collect();
        v.sort_by(|x, y| y.1.cmp(x.1).then(x.0.cmp(y.0)));
        v.iter()
            .take(6)
            .map(|(op, n)| format!("{sign}{n} {op}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    if a.params.len() != b.params.len() {
        parts.push(format!("{} → {} arguments", a.params.len(), b.params.len()));
    }
    if !added.is_empty() {
        parts.push(fmt(&added, '+'));
    }
    if !removed.is_empty() {
        parts.push(fmt(&removed, '−'));
    }
    if parts.is_empty() {
        parts.push("same op counts, wired differently".to_string());
    }
    let mut d = Diff::new(
        Cause::StructureChanged,
        format!("the traced graph differs: {}", parts.join("; ")),
    );
    if a.params.len() != b.params.len() {
        d.params_count = Some((a.params.len(), b.params.len()));
    }
    d.ops_added = added;
    d.ops_removed = removed;
    d.ops_source = changed_ops_source(&a.module, &b.module);
    if let Some(src) = &d.ops_source {
        d.summary.push_str(&format!(" (at {src})"));
    }
    d
}

/// Arguments replaced by constants and nothing else changed: a scalar the frontend passed as
/// data was baked in this time (torch_xla passes Python floats as data, but bakes 0 and 1 in).
fn data_became_constant(a: &Program, b: &Program) -> Option<Diff> {
    let fewer = a
        .params
        .len()
        .checked_sub(b.params.len())
        .filter(|&k| k > 0)?;
    let mut delta: BTreeMap<&str, i64> = BTreeMap::new();
    for (op, &n) in &a.ops {
        *delta.entry(op).or_default() -= i64::from(n);
    }
    for (op, &n) in &b.ops {
        *delta.entry(op).or_default() += i64::from(n);
    }
    delta.retain(|_, d| *d != 0);
    let params = delta.remove("parameter").unwrap_or(0);
    let constants = delta.remove("constant").unwrap_or(0);
    if !delta.is_empty() || params != -(fewer as i64) || constants < 1 {
        return None;
    }
    // The constants of `b` that `a` does not have (by value).
    let literals = |p: &Program| {
        let mut m: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        for i in p.module.computations.iter().flat_map(|c| &c.instructions) {
            if i.opcode == "constant" {
                use prost::Message;
                let bytes = i
                    .literal
                    .as_ref()
                    .map(|l| l.encode_to_vec())
                    .unwrap_or_default();
                *m.entry(bytes).or_default() += 1;
            }
        }
        m
    };
    let (la, mut lb) = (literals(a), literals(b));
    for (k, n) in &la {
        if let Some(v) = lb.get_mut(k) {
            *v -= n;
        }
    }
    let mut changes = Vec::new();
    for comp in &b.module.computations {
        for inst in comp.instructions.iter().filter(|i| i.opcode == "constant") {
            use prost::Message;
            let bytes = inst
                .literal
                .as_ref()
                .map(|l| l.encode_to_vec())
                .unwrap_or_default();
            if let Some(n) = lb.get_mut(&bytes).filter(|n| **n > 0) {
                *n -= 1;
                let value = inst
                    .literal
                    .as_ref()
                    .map(hlo::literal_values_string)
                    .unwrap_or_default();
                changes.push(change(
                    &b.module,
                    comp,
                    inst,
                    "argument became literal",
                    "an argument".to_string(),
                    value,
                ));
            }
        }
    }
    let first = changes.first()?;
    let at = first
        .source
        .as_ref()
        .map(|s| format!(" at {s}"))
        .unwrap_or_default();
    let mut d = Diff::new(
        Cause::ConstantChanged,
        format!(
            "{fewer} scalar argument(s) became constant(s): {} {}{at}",
            first.dtype, first.new
        ),
    );
    d.params_count = Some((a.params.len(), b.params.len()));
    d.constants = changes;
    Some(d)
}

/// The user line that most of the ops present in one program but not the other come from.
fn changed_ops_source(a: &HloModuleProto, b: &HloModuleProto) -> Option<SourceLoc> {
    fn ops_by_line(m: &HloModuleProto) -> BTreeMap<(String, SourceLoc), i64> {
        let mut out = BTreeMap::new();
        for i in m.computations.iter().flat_map(|c| &c.instructions) {
            if matches!(
                i.opcode.as_str(),
                "parameter" | "tuple" | "get-tuple-element"
            ) {
                continue;
            }
            if let Some(src) = user_source(m, i) {
                *out.entry((i.opcode.clone(), src)).or_insert(0) += 1;
            }
        }
        out
    }
    let (oa, ob) = (ops_by_line(a), ops_by_line(b));
    let mut weight: BTreeMap<SourceLoc, i64> = BTreeMap::new();
    for key in oa.keys().chain(ob.keys()) {
        let d = (oa.get(key).copied().unwrap_or(0) - ob.get(key).copied().unwrap_or(0)).abs();
        if d > 0 {
            *weight.entry(key.1.clone()).or_insert(0) =
                d.max(weight.get(&key.1).copied().unwrap_or(0));
        }
    }
    let best = weight.values().copied().max()?;
    weight.into_iter().find(|(_, w)| *w == best).map(|(s, _)| s)
}

/// What differs between two aligned programs, by kind, in program order.
#[derive(Default)]
struct AlignedChanges {
    /// Literals and static bounds (slices, pads, windows).
    literal: Vec<ConstantChange>,
    /// Array sizes.
    sizes: Vec<ConstantChange>,
    dtypes: Vec<ConstantChange>,
    /// The first difference of any kind, for when none of the above changed.
    first_other: Option<String>,
}

/// Both modules have the same structure: walk them side by side.
fn aligned_diff(a: &HloModuleProto, b: &HloModuleProto) -> Diff {
    let mut found = AlignedChanges::default();
    for (ca, cb) in a.computations.iter().zip(&b.computations) {
        for (ia, ib) in ca.instructions.iter().zip(&cb.instructions) {
            instruction_changes(b, cb, ia, ib, &mut found);
        }
    }
    // Sizes usually follow from a changed literal or slice bound; they are the cause only when
    // nothing else changed (an `iota` or `reshape` sized by a Python int).
    let (cause, changes) = if !found.literal.is_empty() {
        (Cause::ConstantChanged, found.literal)
    } else if !found.sizes.is_empty() {
        (Cause::ConstantChanged, found.sizes)
    } else if !found.dtypes.is_empty() {
        (Cause::DtypeChanged, found.dtypes)
    } else {
        let raw = found
            .first_other
            .unwrap_or_else(|| "metadata or names only".to_string());
        return Diff::new(Cause::Unknown, format!("programs differ: {raw}"));
    };
    let mut d = Diff::new(cause, changes_summary(&changes));
    d.constants = changes;
    d
}

/// Records how instruction `ia` differs from its counterpart `ib` (in computation `cb` of `b`).
fn instruction_changes(
    b: &HloModuleProto,
    cb: &HloComputationProto,
    ia: &HloInstructionProto,
    ib: &HloInstructionProto,
    found: &mut AlignedChanges,
) {
    let push = |out: &mut Vec<ConstantChange>, what: &str, old: String, new: String| {
        if out.len() < MAX_CHANGES {
            out.push(change(b, cb, ib, what, old, new));
        }
    };
    if ia.opcode == "constant" && !same_literal(ia, ib) {
        push(
            &mut found.literal,
            "literal",
            ia.literal
                .as_ref()
                .map(hlo::literal_values_string)
                .unwrap_or_default(),
            ib.literal
                .as_ref()
                .map(hlo::literal_values_string)
                .unwrap_or_default(),
        );
    }
    if ia.slice_dimensions != ib.slice_dimensions {
        push(&mut found.literal, "slice bounds", slices(ia), slices(ib));
    }
    if ia.dynamic_slice_sizes != ib.dynamic_slice_sizes {
        push(
            &mut found.literal,
            "dynamic-slice sizes",
            ints(&ia.dynamic_slice_sizes),
            ints(&ib.dynamic_slice_sizes),
        );
    }
    if ia.gather_slice_sizes != ib.gather_slice_sizes {
        push(
            &mut found.literal,
            "gather slice sizes",
            ints(&ia.gather_slice_sizes),
            ints(&ib.gather_slice_sizes),
        );
    }
    if ia.padding_config != ib.padding_config {
        push(&mut found.literal, "pad amounts", padding(ia), padding(ib));
    }
    if ia.window != ib.window {
        push(
            &mut found.literal,
            "window",
            format!("{:?}", ia.window),
            format!("{:?}", ib.window),
        );
    }
    let (sa, sb) = (
        ia.shape.clone().unwrap_or_default(),
        ib.shape.clone().unwrap_or_default(),
    );
    if sa.dimensions != sb.dimensions && sa.tuple_shapes.is_empty() {
        push(
            &mut found.sizes,
            "size",
            hlo::shape_string_without_layout(&sa),
            hlo::shape_string_without_layout(&sb),
        );
    } else if sa.element_type != sb.element_type {
        push(
            &mut found.dtypes,
            "dtype",
            hlo::shape_string_without_layout(&sa),
            hlo::shape_string_without_layout(&sb),
        );
    }
    if found.first_other.is_none() && ia != ib {
        found.first_other = Some(raw_difference(ia, ib));
    }
}

/// The changes in a line: the same change in several places (a rate used by four updates) is
/// one item, counted.
fn changes_summary(changes: &[ConstantChange]) -> String {
    let mut items: Vec<(String, usize)> = Vec::new();
    for c in changes {
        let at = c
            .source
            .as_ref()
            .map(|s| format!(" at {s}"))
            .unwrap_or_default();
        let text = format!(
            "{} of {} {}: {} → {}{at}",
            c.what, c.op, c.dtype, c.old, c.new
        );
        match items.iter_mut().find(|(t, _)| *t == text) {
            Some((_, n)) => *n += 1,
            None => items.push((text, 1)),
        }
    }
    let summary = items
        .iter()
        .take(4)
        .map(|(t, n)| {
            if *n > 1 {
                format!("{t} (×{n})")
            } else {
                t.clone()
            }
        })
        .collect::<Vec<_>>()
        .join("; ");
    let more = if items.len() > 4 {
        format!(" (+{} more)", items.len() - 4)
    } else {
        String::new()
    };
    format!("{summary}{more}")
}

/// Literals compared by their bytes: a NaN constant is the same NaN in both programs, though
/// `NaN != NaN` as floats.
fn same_literal(a: &HloInstructionProto, b: &HloInstructionProto) -> bool {
    use prost::Message;
    match (&a.literal, &b.literal) {
        (Some(x), Some(y)) => x.encode_to_vec() == y.encode_to_vec(),
        (None, None) => true,
        _ => false,
    }
}

fn raw_difference(a: &HloInstructionProto, b: &HloInstructionProto) -> String {
    let text = |i: &HloInstructionProto| {
        let mut c = i.clone();
        c.metadata = None;
        c.name.clear();
        c.id = 0;
        c.operand_ids.clear();
        format!("{c:?}")
    };
    let (ta, tb) = (text(a), text(b));
    if ta == tb {
        return format!("{} `{}` differs only in names or ids", b.opcode, b.name);
    }
    let start = ta
        .char_indices()
        .zip(tb.chars())
        .find(|((_, x), y)| x != y)
        .map_or(0, |((i, _), _)| i);
    let from = ta[..start].rfind(", ").map_or(0, |i| i + 2);
    let clip = |s: &str| s.chars().skip(from).take(80).collect::<String>();
    format!("{} `{}`: {} vs {}", b.opcode, b.name, clip(&ta), clip(&tb))
}

fn change(
    module: &HloModuleProto,
    comp: &HloComputationProto,
    inst: &HloInstructionProto,
    what: &str,
    old: String,
    new: String,
) -> ConstantChange {
    let users = consumers(comp, inst);
    let source = user_source(module, inst)
        .or_else(|| users.iter().find_map(|u| user_source(module, u)))
        .or_else(|| {
            // A constant inside a fused computation: the fusion op in the caller has the line.
            module
                .computations
                .iter()
                .flat_map(|c| &c.instructions)
                .filter(|i| i.called_computation_ids.contains(&comp.id))
                .find_map(|i| user_source(module, i))
        });
    ConstantChange {
        what: what.to_string(),
        op: inst.opcode.clone(),
        instruction: inst.name.clone(),
        dtype: inst
            .shape
            .as_ref()
            .map(|s| hlo::element_type_name(s.element_type).to_string())
            .unwrap_or_default(),
        old,
        new,
        used_by: users
            .iter()
            .filter(|u| u.opcode != "tuple")
            .take(4)
            .map(|u| op_label(u))
            .collect(),
        source,
    }
}

/// Ops that only move or reshape a value: the constant's real consumer is behind them.
const FORWARDING: &[&str] = &[
    "broadcast",
    "reshape",
    "convert",
    "bitcast",
    "copy",
    "bitcast-convert",
];

/// The ops that consume `inst`'s value, looking through broadcasts, reshapes and converts.
fn consumers<'a>(
    comp: &'a HloComputationProto,
    inst: &HloInstructionProto,
) -> Vec<&'a HloInstructionProto> {
    let mut frontier = vec![inst.id];
    let mut out = Vec::new();
    for _ in 0..4 {
        let mut next = Vec::new();
        for id in &frontier {
            for u in comp
                .instructions
                .iter()
                .filter(|u| u.operand_ids.contains(id))
            {
                if FORWARDING.contains(&u.opcode.as_str()) {
                    next.push(u.id);
                } else if !out.iter().any(|o: &&HloInstructionProto| o.id == u.id) {
                    out.push(u);
                }
            }
        }
        if next.is_empty() {
            break;
        }
        frontier = next;
    }
    out
}

/// `multiply (jit(train_step)/mul)`, or the frontend's op type when it set one.
fn op_label(i: &HloInstructionProto) -> String {
    match i.metadata.as_ref() {
        Some(m) if !m.op_name.is_empty() => format!("{} ({})", i.opcode, m.op_name),
        Some(m) if !m.op_type.is_empty() => format!("{} ({})", i.opcode, m.op_type),
        _ => i.opcode.clone(),
    }
}

/// The innermost frame of an op's recorded Python stack that is the user's code.
pub fn user_source(module: &HloModuleProto, inst: &HloInstructionProto) -> Option<SourceLoc> {
    let meta = inst.metadata.as_ref()?;
    let frames = hlo::resolve_stack(module, meta.stack_frame_id);
    if let Some((file, line, function)) = frames
        .into_iter()
        .find(|(f, line, _)| !is_framework_file(f) && *line > 0)
    {
        return Some(SourceLoc {
            file,
            line: u32::try_from(line).unwrap_or(0),
            function,
        });
    }
    (!meta.source_file.is_empty() && !is_framework_file(&meta.source_file) && meta.source_line > 0)
        .then(|| SourceLoc {
            file: meta.source_file.clone(),
            line: u32::try_from(meta.source_line).unwrap_or(0),
            function: String::new(),
        })
}

fn slices(i: &HloInstructionProto) -> String {
    let parts: Vec<String> = i
        .slice_dimensions
        .iter()
        .map(|s| {
            if s.stride == 1 {
                format!("{}:{}", s.start, s.limit)
            } else {
                format!("{}:{}:{}", s.start, s.limit, s.stride)
            }
        })
        .collect();
    format!("[{}]", parts.join(", "))
}

fn ints(v: &[i64]) -> String {
    format!(
        "[{}]",
        v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
    )
}

fn padding(i: &HloInstructionProto) -> String {
    let parts: Vec<String> = i
        .padding_config
        .as_ref()
        .map(|p| {
            p.dimensions
                .iter()
                .map(|d| {
                    format!(
                        "{}_{}_{}",
                        d.edge_padding_low, d.edge_padding_high, d.interior_padding
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    parts.join("x")
}
