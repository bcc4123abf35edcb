//! A module as text. The listing reads like XLA's HLO text (`%add.3 = f32[8]{0} add(%a, %b),
//! metadata={...}`) but is printed here from the proto fields tpuscope decodes; it is for people,
//! not for parsing back.

use std::collections::HashMap;
use std::fmt::Write as _;

use tpuscope_core::hlo::{
    self, HloComputationProto, HloInstructionProto, HloModuleProto, OpSharding, ShapeProto,
    op_sharding,
};

/// One line of a module's listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HloLine {
    /// Index into `module.computations`.
    pub computation: usize,
    /// Index into that computation's `instructions`; `None` for its header and closing brace.
    pub instruction: Option<usize>,
    pub text: String,
}

/// The module as text: for each computation (callees first, the entry last, as stored) a header
/// line, one line per instruction and a closing `}`.
pub fn module_lines(m: &HloModuleProto) -> Vec<HloLine> {
    let entry_id = hlo::entry_computation(m).map(|c| c.id);
    let comp_names: HashMap<i64, &str> = m
        .computations
        .iter()
        .map(|c| (c.id, c.name.as_str()))
        .collect();
    let mut out = Vec::with_capacity(
        m.computations
            .iter()
            .map(|c| c.instructions.len() + 2)
            .sum(),
    );
    for (ci, c) in m.computations.iter().enumerate() {
        out.push(HloLine {
            computation: ci,
            instruction: None,
            text: header(c, Some(c.id) == entry_id),
        });
        let names: HashMap<i64, &str> = c
            .instructions
            .iter()
            .map(|i| (i.id, i.name.as_str()))
            .collect();
        for (ii, inst) in c.instructions.iter().enumerate() {
            out.push(HloLine {
                computation: ci,
                instruction: Some(ii),
                text: instruction_text(inst, inst.id == c.root_id, &names, &comp_names),
            });
        }
        out.push(HloLine {
            computation: ci,
            instruction: None,
            text: "}".to_string(),
        });
    }
    out
}

/// `ENTRY %main.12 (p0.1: f32[8]{0}, ...) -> f32[8]{0} {`
fn header(c: &HloComputationProto, entry: bool) -> String {
    let mut s = String::new();
    if entry {
        s.push_str("ENTRY ");
    }
    let _ = write!(s, "%{} (", c.name);
    let mut params: Vec<&HloInstructionProto> = c
        .instructions
        .iter()
        .filter(|i| i.opcode == "parameter")
        .collect();
    params.sort_by_key(|i| i.parameter_number);
    if params.is_empty() {
        // A computation without parameter instructions (or a trimmed one): the program shape.
        if let Some(ps) = &c.program_shape {
            for (i, p) in ps.parameters.iter().enumerate() {
                if i > 0 {
                    s.push_str(", ");
                }
                let name = ps.parameter_names.get(i).map_or("", String::as_str);
                let _ = write!(s, "{name}: {}", hlo::shape_string(p));
            }
        }
    } else {
        for (i, p) in params.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "{}: {}", p.name, shape_of(p.shape.as_ref()));
        }
    }
    s.push_str(") -> ");
    let root = c.instructions.iter().find(|i| i.id == c.root_id);
    let result = root
        .and_then(|r| r.shape.as_ref())
        .or_else(|| c.program_shape.as_ref().and_then(|p| p.result.as_ref()));
    s.push_str(&shape_of(result));
    s.push_str(" {");
    s
}

fn shape_of(shape: Option<&ShapeProto>) -> String {
    shape
        .map(hlo::shape_string)
        .unwrap_or_else(|| "()".to_string())
}

fn instruction_text(
    i: &HloInstructionProto,
    root: bool,
    names: &HashMap<i64, &str>,
    comps: &HashMap<i64, &str>,
) -> String {
    let mut s = String::with_capacity(96);
    s.push_str(if root { "  ROOT %" } else { "  %" });
    let _ = write!(
        s,
        "{} = {} {}(",
        i.name,
        shape_of(i.shape.as_ref()),
        i.opcode
    );
    match i.opcode.as_str() {
        "parameter" => {
            let _ = write!(s, "{}", i.parameter_number);
        }
        "constant" => {
            if let Some(lit) = &i.literal {
                s.push_str(&hlo::literal_values_string(lit));
            }
        }
        _ => {}
    }
    for (n, id) in i.operand_ids.iter().enumerate() {
        if n > 0 {
            s.push_str(", ");
        }
        match names.get(id) {
            Some(name) => {
                let _ = write!(s, "%{name}");
            }
            None => {
                let _ = write!(s, "%<id {id}>");
            }
        }
    }
    s.push(')');
    let mut attrs = Attrs(&mut s);
    attributes(i, &mut attrs, names, comps);
    s
}

/// Appends `, key=value` pairs.
struct Attrs<'a>(&'a mut String);

impl Attrs<'_> {
    fn add(&mut self, key: &str, value: impl std::fmt::Display) {
        let _ = write!(self.0, ", {key}={value}");
    }

    fn add_list(&mut self, key: &str, values: &[i64]) {
        self.add(key, braces(values));
    }
}

/// `{1,0}`
fn braces<T: std::fmt::Display>(values: &[T]) -> String {
    let mut s = String::from("{");
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{v}");
    }
    s.push('}');
    s
}

fn quoted(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 2);
    s.push('"');
    for ch in text.chars() {
        match ch {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            c if c.is_control() => {
                let _ = write!(s, "\\u{{{:x}}}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// The instruction's attributes (`, key=value` each), always in this order.
fn attributes(
    i: &HloInstructionProto,
    a: &mut Attrs<'_>,
    names: &HashMap<i64, &str>,
    comps: &HashMap<i64, &str>,
) {
    let op = i.opcode.as_str();
    slicing_attributes(i, a);
    convolution_attributes(i, a);
    dimension_number_attributes(i, a);
    if !i.comparison_direction.is_empty() {
        a.add("direction", &i.comparison_direction);
    }
    if !i.comparison_type.is_empty() {
        a.add("type", &i.comparison_type);
    }
    if op == "fusion" && !i.fusion_kind.is_empty() {
        a.add("kind", &i.fusion_kind);
    }
    called_computations(i, a, comps);
    if !i.custom_call_target.is_empty() {
        a.add("custom_call_target", quoted(&i.custom_call_target));
    }
    if i.custom_call_has_side_effect {
        a.add("custom_call_has_side_effect", true);
    }
    collective_attributes(i, a);
    op_attributes(i, a);
    annotation_attributes(i, a, names);
}

/// Tuple index, dimensions, slices and padding.
fn slicing_attributes(i: &HloInstructionProto, a: &mut Attrs<'_>) {
    let op = i.opcode.as_str();
    if op == "get-tuple-element" {
        a.add("index", i.tuple_index);
    }
    if op == "iota" {
        if let Some(d) = i.dimensions.first() {
            a.add("iota_dimension", d);
        }
    } else if !i.dimensions.is_empty() {
        a.add_list("dimensions", &i.dimensions);
    }
    if !i.slice_dimensions.is_empty() {
        let parts: Vec<String> = i
            .slice_dimensions
            .iter()
            .map(|d| {
                if d.stride == 1 {
                    format!("[{}:{}]", d.start, d.limit)
                } else {
                    format!("[{}:{}:{}]", d.start, d.limit, d.stride)
                }
            })
            .collect();
        a.add("slice", format!("{{{}}}", parts.join(", ")));
    }
    if !i.dynamic_slice_sizes.is_empty() {
        a.add_list("dynamic_slice_sizes", &i.dynamic_slice_sizes);
    }
    if let Some(p) = &i.padding_config {
        let dims: Vec<String> = p
            .dimensions
            .iter()
            .map(|d| {
                if d.interior_padding == 0 {
                    format!("{}_{}", d.edge_padding_low, d.edge_padding_high)
                } else {
                    format!(
                        "{}_{}_{}",
                        d.edge_padding_low, d.edge_padding_high, d.interior_padding
                    )
                }
            })
            .collect();
        a.add("padding", dims.join("x"));
    }
}

/// Window and convolution fields.
fn convolution_attributes(i: &HloInstructionProto, a: &mut Attrs<'_>) {
    if let Some(w) = &i.window
        && !w.dimensions.is_empty()
    {
        a.add("window", window_text(w));
    }
    if let Some(c) = &i.convolution_dimension_numbers {
        a.add("dim_labels", dim_labels(c));
    }
    if i.feature_group_count > 1 {
        a.add("feature_group_count", i.feature_group_count);
    }
    if i.batch_group_count > 1 {
        a.add("batch_group_count", i.batch_group_count);
    }
}

/// Dot, gather and scatter dimension numbers, and their index flags.
fn dimension_number_attributes(i: &HloInstructionProto, a: &mut Attrs<'_>) {
    if let Some(d) = &i.dot_dimension_numbers {
        if !d.lhs_batch_dimensions.is_empty() {
            a.add_list("lhs_batch_dims", &d.lhs_batch_dimensions);
        }
        a.add_list("lhs_contracting_dims", &d.lhs_contracting_dimensions);
        if !d.rhs_batch_dimensions.is_empty() {
            a.add_list("rhs_batch_dims", &d.rhs_batch_dimensions);
        }
        a.add_list("rhs_contracting_dims", &d.rhs_contracting_dimensions);
    }
    if let Some(g) = &i.gather_dimension_numbers {
        a.add_list("offset_dims", &g.offset_dims);
        a.add_list("collapsed_slice_dims", &g.collapsed_slice_dims);
        a.add_list("start_index_map", &g.start_index_map);
        if !g.operand_batching_dims.is_empty() {
            a.add_list("operand_batching_dims", &g.operand_batching_dims);
            a.add_list(
                "start_indices_batching_dims",
                &g.start_indices_batching_dims,
            );
        }
        a.add("index_vector_dim", g.index_vector_dim);
    }
    if !i.gather_slice_sizes.is_empty() {
        a.add_list("slice_sizes", &i.gather_slice_sizes);
    }
    if let Some(sd) = &i.scatter_dimension_numbers {
        a.add_list("update_window_dims", &sd.update_window_dims);
        a.add_list("inserted_window_dims", &sd.inserted_window_dims);
        a.add_list(
            "scatter_dims_to_operand_dims",
            &sd.scatter_dims_to_operand_dims,
        );
        if !sd.input_batching_dims.is_empty() {
            a.add_list("input_batching_dims", &sd.input_batching_dims);
            a.add_list(
                "scatter_indices_batching_dims",
                &sd.scatter_indices_batching_dims,
            );
        }
        a.add("index_vector_dim", sd.index_vector_dim);
    }
    if i.indices_are_sorted {
        a.add("indices_are_sorted", true);
    }
    if i.unique_indices {
        a.add("unique_indices", true);
    }
}

/// Channels, replica groups and source-target pairs of collectives.
fn collective_attributes(i: &HloInstructionProto, a: &mut Attrs<'_>) {
    if i.channel_id != 0 {
        a.add("channel_id", i.channel_id);
    }
    if !i.replica_groups.is_empty() {
        let groups: Vec<String> = i
            .replica_groups
            .iter()
            .map(|g| braces(&g.replica_ids))
            .collect();
        a.add("replica_groups", format!("{{{}}}", groups.join(",")));
    }
    if i.use_global_device_ids {
        a.add("use_global_device_ids", true);
    }
    if i.constrain_layout {
        a.add("constrain_layout", true);
    }
    if !i.source_target_pairs.is_empty() {
        let pairs: Vec<String> = i
            .source_target_pairs
            .iter()
            .map(|p| format!("{{{},{}}}", p.source, p.target))
            .collect();
        a.add("source_target_pairs", format!("{{{}}}", pairs.join(",")));
    }
}

/// Fields that belong to one opcode (or a few).
fn op_attributes(i: &HloInstructionProto, a: &mut Attrs<'_>) {
    let op = i.opcode.as_str();
    if op == "reduce-precision" {
        a.add("exponent_bits", i.exponent_bits);
        a.add("mantissa_bits", i.mantissa_bits);
    }
    if op.starts_with("batch-norm") {
        a.add("epsilon", i.epsilon);
        a.add("feature_index", i.feature_index);
    }
    if !i.fft_length.is_empty() {
        a.add_list("fft_length", &i.fft_length);
    }
    if i.is_stable {
        a.add("is_stable", true);
    }
    if op == "topk" {
        a.add("k", i.k);
        a.add("largest", i.largest);
    }
}

/// Sharding, control predecessors, frontend attributes, backend config and metadata.
fn annotation_attributes(i: &HloInstructionProto, a: &mut Attrs<'_>, names: &HashMap<i64, &str>) {
    if let Some(sh) = &i.sharding {
        a.add("sharding", sharding_text(sh));
    }
    if !i.control_predecessor_ids.is_empty() {
        let preds: Vec<String> = i
            .control_predecessor_ids
            .iter()
            .map(|id| match names.get(id) {
                Some(n) => format!("%{n}"),
                None => format!("%<id {id}>"),
            })
            .collect();
        a.add("control-predecessors", format!("{{{}}}", preds.join(", ")));
    }
    if let Some(fa) = &i.frontend_attributes
        && !fa.map.is_empty()
    {
        let mut kv: Vec<(&String, &String)> = fa.map.iter().collect();
        kv.sort();
        let parts: Vec<String> = kv
            .into_iter()
            .map(|(k, v)| format!("{k}={}", quoted(v)))
            .collect();
        a.add("frontend_attributes", format!("{{{}}}", parts.join(",")));
    }
    if !i.backend_config.is_empty() {
        match std::str::from_utf8(&i.backend_config) {
            Ok(text) => a.add("backend_config", quoted(text)),
            Err(_) => a.add(
                "backend_config",
                format!("<{} bytes>", i.backend_config.len()),
            ),
        }
    }
    if let Some(m) = &i.metadata {
        let mut parts = Vec::new();
        if !m.op_type.is_empty() {
            parts.push(format!("op_type={}", quoted(&m.op_type)));
        }
        if !m.op_name.is_empty() {
            parts.push(format!("op_name={}", quoted(&m.op_name)));
        }
        if !m.source_file.is_empty() {
            parts.push(format!("source_file={}", quoted(&m.source_file)));
            parts.push(format!("source_line={}", m.source_line));
        }
        if !m.deduplicated_name.is_empty() {
            parts.push(format!(
                "deduplicated_name={}",
                quoted(&m.deduplicated_name)
            ));
        }
        if !parts.is_empty() {
            a.add("metadata", format!("{{{}}}", parts.join(" ")));
        }
    }
}

fn called_computations(i: &HloInstructionProto, a: &mut Attrs<'_>, comps: &HashMap<i64, &str>) {
    let called: Vec<String> = i
        .called_computation_ids
        .iter()
        .map(|id| match comps.get(id) {
            Some(n) => format!("%{n}"),
            None => format!("%<computation {id}>"),
        })
        .collect();
    match (i.opcode.as_str(), called.as_slice()) {
        (_, []) => {}
        // XLA stores a while's body first, then its condition.
        ("while", [body, condition]) => {
            a.add("condition", condition);
            a.add("body", body);
        }
        ("select-and-scatter", [select, scatter]) => {
            a.add("select", select);
            a.add("scatter", scatter);
        }
        ("conditional", _) => a.add("branch_computations", format!("{{{}}}", called.join(", "))),
        ("fusion" | "call" | "async-start" | "custom-call", [one]) => a.add("calls", one),
        (_, [one]) => a.add("to_apply", one),
        _ => a.add("calls", format!("{{{}}}", called.join(", "))),
    }
}

/// `size=3x3 stride=2x2 pad=0_1x0_1`, leaving out fields at their defaults.
fn window_text(w: &hlo::Window) -> String {
    let dims = &w.dimensions;
    let join = |f: &dyn Fn(&hlo::WindowDimension) -> String| {
        dims.iter().map(f).collect::<Vec<_>>().join("x")
    };
    let mut parts = vec![format!("size={}", join(&|d| d.size.to_string()))];
    if dims.iter().any(|d| d.stride != 1) {
        parts.push(format!("stride={}", join(&|d| d.stride.to_string())));
    }
    if dims
        .iter()
        .any(|d| d.padding_low != 0 || d.padding_high != 0)
    {
        parts.push(format!(
            "pad={}",
            join(&|d| format!("{}_{}", d.padding_low, d.padding_high))
        ));
    }
    if dims.iter().any(|d| d.base_dilation > 1) {
        parts.push(format!(
            "lhs_dilate={}",
            join(&|d| d.base_dilation.max(1).to_string())
        ));
    }
    if dims.iter().any(|d| d.window_dilation > 1) {
        parts.push(format!(
            "rhs_dilate={}",
            join(&|d| d.window_dilation.max(1).to_string())
        ));
    }
    if dims.iter().any(|d| d.window_reversal) {
        parts.push(format!(
            "rhs_reversal={}",
            join(&|d| u8::from(d.window_reversal).to_string())
        ));
    }
    format!("{{{}}}", parts.join(" "))
}

/// Convolution dimension labels, e.g. `b01f_01io->b01f`: each position of the input, kernel
/// and output says which role that dimension plays (batch, feature, input/output feature,
/// spatial index).
fn dim_labels(c: &hlo::ConvolutionDimensionNumbers) -> String {
    fn labels(rank: usize, roles: &[(i64, char)], spatial: &[i64]) -> String {
        let mut out = vec!['?'; rank];
        for &(dim, ch) in roles {
            if let Some(slot) = usize::try_from(dim).ok().and_then(|d| out.get_mut(d)) {
                *slot = ch;
            }
        }
        for (n, &dim) in spatial.iter().enumerate() {
            let ch = char::from_digit(u32::try_from(n % 10).unwrap_or(0), 10).unwrap_or('?');
            if let Some(slot) = usize::try_from(dim).ok().and_then(|d| out.get_mut(d)) {
                *slot = ch;
            }
        }
        out.into_iter().collect()
    }
    let lhs = labels(
        c.input_spatial_dimensions.len() + 2,
        &[
            (c.input_batch_dimension, 'b'),
            (c.input_feature_dimension, 'f'),
        ],
        &c.input_spatial_dimensions,
    );
    let rhs = labels(
        c.kernel_spatial_dimensions.len() + 2,
        &[
            (c.kernel_input_feature_dimension, 'i'),
            (c.kernel_output_feature_dimension, 'o'),
        ],
        &c.kernel_spatial_dimensions,
    );
    let out = labels(
        c.output_spatial_dimensions.len() + 2,
        &[
            (c.output_batch_dimension, 'b'),
            (c.output_feature_dimension, 'f'),
        ],
        &c.output_spatial_dimensions,
    );
    format!("{lhs}_{rhs}->{out}")
}

fn sharding_text(s: &OpSharding) -> String {
    use op_sharding::Type;
    match Type::try_from(s.r#type) {
        Ok(Type::Replicated) => "{replicated}".to_string(),
        Ok(Type::Manual) => "{manual}".to_string(),
        Ok(Type::Unknown) => "{unknown}".to_string(),
        Ok(Type::Unreduced) => "{unreduced}".to_string(),
        Ok(Type::Maximal) => format!(
            "{{maximal device={}}}",
            s.tile_assignment_devices.first().copied().unwrap_or(0)
        ),
        Ok(Type::Tuple) => {
            let inner: Vec<String> = s
                .tuple_shardings
                .iter()
                .map(|t| {
                    let text = sharding_text(t);
                    text[1..text.len() - 1].to_string()
                })
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
        Ok(Type::Other) | Err(_) => {
            let mut out = format!(
                "{{devices=[{}]",
                s.tile_assignment_dimensions
                    .iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            );
            if s.iota_reshape_dims.is_empty() {
                let devices: Vec<String> = s
                    .tile_assignment_devices
                    .iter()
                    .map(i64::to_string)
                    .collect();
                out.push_str(&devices.join(","));
            } else {
                let _ = write!(
                    out,
                    "<=[{}]",
                    s.iota_reshape_dims
                        .iter()
                        .map(i64::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                );
                if !s.iota_transpose_perm.is_empty() {
                    let _ = write!(
                        out,
                        "T({})",
                        s.iota_transpose_perm
                            .iter()
                            .map(i32::to_string)
                            .collect::<Vec<_>>()
                            .join(",")
                    );
                }
            }
            if s.replicate_on_last_tile_dim {
                out.push_str(" last_tile_dim_replicate");
            }
            if !s.last_tile_dims.is_empty() {
                let dims: Vec<String> = s
                    .last_tile_dims
                    .iter()
                    .map(|t| {
                        Type::try_from(*t)
                            .map(|t| t.as_str_name().to_ascii_lowercase())
                            .unwrap_or_else(|_| t.to_string())
                    })
                    .collect();
                let _ = write!(out, " last_tile_dims={{{}}}", dims.join(", "));
            }
            out.push('}');
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn convolution_labels_name_each_dimension() {
        let c = hlo::ConvolutionDimensionNumbers {
            input_batch_dimension: 0,
            input_feature_dimension: 3,
            input_spatial_dimensions: vec![1, 2],
            kernel_input_feature_dimension: 2,
            kernel_output_feature_dimension: 3,
            kernel_spatial_dimensions: vec![0, 1],
            output_batch_dimension: 0,
            output_feature_dimension: 3,
            output_spatial_dimensions: vec![1, 2],
        };
        assert_eq!(dim_labels(&c), "b01f_01io->b01f");
    }
}
