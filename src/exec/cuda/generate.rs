//! The kernels generated for a step's fused ops: one CUDA kernel per distinct fused body,
//! its inner ops written out as straight-line code over the element functions of
//! `kernels/element.cuh`, with constant op codes, scalars and dtypes, so the compiler keeps
//! one case of each function and every inner value in a register.
//!
//! Per element, a generated kernel loads each input (views broadcast to the output's shape),
//! computes the inner ops in order, rounds each value to its dtype as storing it would
//! (`round_to`, the CPU reference's `data::stored`), and stores the last: the unfused ops'
//! arithmetic exactly, without their intermediate tensors. Every input is read before the
//! output is written, so a fused op may run in place over an input.
//!
//! The dtypes of the inputs and the output are constants of the kernel, so a dense output
//! is written [`lanes`] elements per thread at a time: each input that is a dense run
//! repeated with a period that is a multiple of the lanes (the output's shape itself, or a
//! bias broadcast over leading dimensions) and aligned is read as whole 16-byte vectors (8 or
//! 4 for short ones), a broadcast scalar once, any other view element by element; the
//! output stored as vectors. What the lanes leave at the end (and a whole output that is not
//! dense or aligned) takes the per-element loop. Both paths compute the same values.
//!
//! A body that ends with a reduction (`sum`, `mean`) gets the partial-sums kernel of
//! `reduce_partial` (common.cuh's `reduce_partial_over`) with the body before the reduction
//! computing each element it sums; `reduce_finish` of the program adds the groups' partial
//! sums where there are several.
//!
//! A `fused_norm` gets a kernel a block per row ([`Generated::fused_norm`]): each thread
//! computes and stores the body's value at its elements of the row, element by element, then
//! `norm.cuh`'s row function (the one the unfused norm kernels call) normalises the stored
//! row, each thread reading back only what it stored.
//!
//! A kernel's text is all that tells two apart (the body and the number of inputs), so the
//! repeated layers of a model share one kernel. [`Generated`] collects them while a step is
//! lowered; `Program::generated` keeps them, and each backend compiles
//! [`Generated::source`] once for the step (NVRTC on the device, the host compiler in the
//! tests' emulator) next to the fixed program.

use indexmap::IndexSet;

use crate::exec::cuda::source::{SHARED, generated_program};
use crate::exec::cuda::view::{GENERATED, Kernel};
use crate::ir::ops::{Norm, Operand};
use crate::ir::types::DType;

/// One inner op of a fused body as its kernel computes it: `element_op(op, a, b, c,
/// scalar)` over its operands (up to three; missing ones are 0), rounded to `dtype`.
#[derive(Clone, PartialEq, Debug)]
pub struct ElementStep {
    /// An op code of `element_op` (`OP_*`).
    pub op: i32,
    pub scalar: f64,
    pub dtype: DType,
    pub operands: Vec<Operand>,
}

/// The kernels generated for one step, in the order lowering first asked for them: kernel
/// `n` is `fused_{n}`.
#[derive(Clone, PartialEq, Debug, Default)]
pub struct Generated {
    /// Each kernel's text after its name: its parameters and body.
    kernels: IndexSet<String>,
}

impl Generated {
    /// The kernel computing `steps` (a fused body, `text` its IR spelling, for a comment)
    /// over inputs of dtypes `inputs` into an output of dtype `out`; made on first use,
    /// shared by later identical bodies. Launch it over `out.numel.div_ceil(lanes)` threads
    /// ([`lanes`]).
    pub fn fused(&mut self, text: &str, steps: &[ElementStep], inputs: &[DType], out: DType) -> Kernel {
        self.intern(kernel_text(text, steps, inputs, out))
    }

    /// The partial-sums kernel of a body whose `steps` (all but its closing reduction)
    /// compute the values, `summed` the one its reduction reads, over `inputs` inputs: its
    /// parameters are the inputs, then `reduce_partial`'s after its `x`. `in_float`: the
    /// summed value is a float (summed in float, as `reduce_partial` sums a float tensor).
    pub fn fused_reduction(&mut self, text: &str, steps: &[ElementStep], summed: Operand, inputs: usize, in_float: bool) -> Kernel {
        self.intern(reduction_text(text, steps, summed, inputs, in_float))
    }

    /// The kernel of a `fused_norm` whose body is `steps` (`text` its IR spelling) over
    /// `inputs` inputs, normalised by `norm`: its parameters are `out`, `y`, the body's
    /// inputs, the norm's parameters (gamma, and beta for a layer norm), then `rows`, `d`
    /// and `eps`. Launch it a block per row.
    pub fn fused_norm(&mut self, text: &str, steps: &[ElementStep], inputs: usize, norm: Norm) -> Kernel {
        self.intern(norm_text(text, steps, inputs, norm))
    }

    /// The kernel of `text` (parameters and body), added if new.
    fn intern(&mut self, text: String) -> Kernel {
        let (index, _) = self.kernels.insert_full(text);
        Kernel::Generated(u32::try_from(index).expect("fewer kernels than ops, and ops are u32 ids"))
    }

    /// How many kernels there are.
    pub fn len(&self) -> usize {
        self.kernels.len()
    }

    /// Whether the step needs no generated kernel.
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty()
    }

    /// The kernels' names, `fused_0` first.
    pub fn names(&self) -> Vec<String> {
        (0..self.kernels.len()).map(|n| Kernel::Generated(n as u32).to_string()).collect()
    }

    /// Each kernel's whole definition, in order.
    pub fn definitions(&self) -> Vec<String> {
        let head = "extern \"C\" __global__ void";
        self.kernels.iter().enumerate().map(|(n, text)| format!("{head} {GENERATED}_{n}{text}")).collect()
    }

    /// The program to compile for the step (`source::generated_program`); `None` when there
    /// is no kernel.
    pub fn source(&self) -> Option<String> {
        (!self.is_empty()).then(|| generated_program(&self.definitions()))
    }
}

/// How many consecutive elements a thread of the kernel of a fused op over tensors of
/// `dtypes` (inputs and output) computes at a time: 16 bytes of the narrowest, at least 4
/// and at most 8 (8 lanes of f32 are two 16-byte vectors; 8 bools one 8-byte word).
pub fn lanes(dtypes: &[DType]) -> u32 {
    if dtypes.iter().any(|d| d.size() <= 2) { 8 } else { 4 }
}

/// A kernel's parameters and body (what follows its name), with the fused body's IR text
/// as a comment above: the lanes' loop over the output's vectors, then the per-element loop
/// over the rest.
fn kernel_text(text: &str, steps: &[ElementStep], inputs: &[DType], out: DType) -> String {
    let mut all = inputs.to_vec();
    all.push(out);
    let v = lanes(&all);
    let ins = 0..inputs.len();
    let mut text_out = format!("(Tensor out{}) {{\n", input_params(inputs.len()));
    text_out.push_str(&comment(text));
    let Some(last) = steps.len().checked_sub(1) else {
        text_out.push('}');
        return text_out;
    };
    let bytes = |d: DType| d.size();
    text_out.push_str("    const i64 n = out.numel;\n    i64 done = 0;\n");
    text_out.push_str(&format!("    if (out.dense && out.ptr % VECTOR_ALIGN({}) == 0) {{\n", bytes(out) * u64::from(v)));
    for k in ins.clone() {
        text_out.push_str(&format!(
            "        const i64 p{k} = period_of(x{k});\n        const bool v{k} = lanes_vectorize(x{k}, p{k}, {v}, {});\n",
            bytes(inputs[k])
        ));
    }
    text_out.push_str(&format!("        GRID_STRIDE(lane0, n / {v}) {{\n            const i64 i0 = lane0 * {v};\n"));
    for k in ins.clone() {
        text_out.push_str(&format!(
            "            double x{k}_v[{v}];\n            load_lanes<{}, {v}>(x{k}, i0, p{k}, v{k}, x{k}_v);\n",
            dtype_macro(inputs[k])
        ));
    }
    text_out.push_str(&format!("            double r[{v}];\n#pragma unroll\n            for (int j = 0; j < {v}; ++j) {{\n"));
    for k in ins.clone() {
        text_out.push_str(&format!("                const double x{k}_i = x{k}_v[j];\n"));
    }
    text_out.push_str(&step_code(steps, "                ", true));
    text_out.push_str(&format!("                r[j] = t{last};\n            }}\n"));
    text_out.push_str(&format!("            store_lanes<{}, {v}>(out, i0, r);\n        }}\n", dtype_macro(out)));
    text_out.push_str(&format!("        done = n / {v} * {v};\n    }}\n"));
    text_out.push_str("    GRID_STRIDE(k, n - done) {\n        const i64 i = done + k;\n");
    text_out.push_str(&element_code(steps, inputs.len(), true, "        "));
    text_out.push_str(&format!("        store_d(out, i, t{last});\n    }}\n}}"));
    text_out
}

/// A reduction kernel's parameters and body: `reduce_partial_over` summing `summed` (after
/// `steps`) at each index it asks for.
fn reduction_text(text: &str, steps: &[ElementStep], summed: Operand, inputs: usize, in_float: bool) -> String {
    let mut out = format!(
        "(Tensor out{}, i64 outs, i64 reduced, i64 chunk, double divisor, u64 partials) {{\n",
        input_params(inputs)
    );
    out.push_str(&comment(text));
    out.push_str(&format!("    reduce_partial_over(out, outs, reduced, chunk, divisor, partials, {in_float}, [&](i64 i) {{\n"));
    out.push_str(&element_code(steps, inputs, false, "        "));
    out.push_str(&format!("        return {};\n    }});\n}}", operand_expr(Some(&summed))));
    out
}

/// A fused_norm kernel's parameters and body: for each of its rows (blocks stride over
/// them), every thread computes and stores the body's value at the row's elements it takes,
/// then `norm.cuh`'s row function normalises the stored row into `y` (each thread reading
/// back only what it stored, in the same order).
fn norm_text(text: &str, steps: &[ElementStep], inputs: usize, norm: Norm) -> String {
    let (params, row) = match norm {
        Norm::Layer => (", Tensor gamma, Tensor beta", "layer_norm_row(y, out, gamma, beta, row, d, eps)"),
        Norm::Rms => (", Tensor gamma", "rms_norm_row(y, out, gamma, row, d, eps)"),
    };
    let mut out = format!("(Tensor out, Tensor y{}{params}, i64 rows, i64 d, double eps) {{\n", input_params(inputs));
    out.push_str(&comment(text));
    let Some(last) = steps.len().checked_sub(1) else {
        out.push('}');
        return out;
    };
    out.push_str("    for (i64 row = blockIdx.x; row < rows; row += gridDim.x) {\n");
    out.push_str("        for (i64 c = threadIdx.x; c < d; c += blockDim.x) {\n            const i64 i = row * d + c;\n");
    out.push_str(&element_code(steps, inputs, true, "            "));
    out.push_str(&format!("            store_d(out, i, t{last});\n        }}\n        {row};\n    }}\n}}"));
    out
}

/// `, Tensor x0, Tensor x1, ...`.
fn input_params(inputs: usize) -> String {
    (0..inputs).map(|k| format!(", Tensor x{k}")).collect()
}

/// The fused body's IR text as comment lines, one per inner op.
fn comment(text: &str) -> String {
    text.split("; ").map(|line| format!("    // {line}\n")).collect()
}

/// Element `i` of every input (`xk_i`), then every value of `steps` (`tj`), as lines of a
/// loop's body indented by `indent` ([`step_code`]: the last `stored`, or summed).
fn element_code(steps: &[ElementStep], inputs: usize, stored: bool, indent: &str) -> String {
    let mut out = String::new();
    for k in 0..inputs {
        out.push_str(&format!("{indent}const double x{k}_i = load_d(x{k}, i);\n"));
    }
    out.push_str(&step_code(steps, indent, stored));
    out
}

/// Every value of `steps` (`tj`) from the inputs' elements (`xk_i`), one line each, rounded
/// to its dtype; the last is left unrounded where it is `stored` (storing it rounds it to the
/// output's dtype, the last step's, just as `round_to` would).
fn step_code(steps: &[ElementStep], indent: &str, stored: bool) -> String {
    let mut out = String::new();
    for (j, step) in steps.iter().enumerate() {
        let operand = |k: usize| operand_expr(step.operands.get(k));
        let value = format!(
            "element_op({}, {}, {}, {}, {})",
            op_name(step.op),
            operand(0),
            operand(1),
            operand(2),
            literal(step.scalar)
        );
        if stored && j + 1 == steps.len() {
            out.push_str(&format!("{indent}const double t{j} = {value};\n"));
        } else {
            out.push_str(&format!("{indent}const double t{j} = round_to({}, {value});\n", dtype_macro(step.dtype)));
        }
    }
    out
}

/// An operand's value in a kernel: input `k`'s element (`xk_i`), inner value `tj`, or 0 for
/// none.
fn operand_expr(operand: Option<&Operand>) -> String {
    match operand {
        Some(Operand::Input(k)) => format!("x{k}_i"),
        Some(Operand::Inner(j)) => format!("t{j}"),
        None => "0.0".to_string(),
    }
}

/// The program's name for an op code (`OP_ADD`, ...: source.rs SHARED), or the number for
/// the codes that have none (`compare_scalar`'s, a relation added to `OP_COMPARE_SCALAR`).
fn op_name(code: i32) -> String {
    let named = SHARED.iter().find(|(name, value)| name.starts_with("OP_") && *value == i64::from(code));
    named.map_or_else(|| code.to_string(), |(name, _)| name.to_string())
}

/// The program's name for a dtype code (`DT_F32`, ...: source.rs SHARED).
fn dtype_macro(dtype: DType) -> String {
    format!("DT_{}", dtype.to_string().to_uppercase())
}

/// `x` as a C++ double expression of exactly its value: the shortest decimal that reads
/// back as `x` (Rust's `{:?}` prints it; C++ rounds decimal literals correctly), or
/// common.cuh's `f_inf()`/`f_nan()` for the values no literal spells.
fn literal(x: f64) -> String {
    if x.is_nan() {
        "(double)f_nan()".to_string()
    } else if x.is_infinite() {
        format!("{}(double)f_inf()", if x < 0.0 { "-" } else { "" })
    } else {
        format!("{x:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::cuda::source::{OP_ADD, OP_COMPARE_SCALAR, OP_COPY, OP_MASKED_FILL, OP_MUL, Param, signature_in};

    fn add_of_cast() -> Vec<ElementStep> {
        vec![
            ElementStep { op: OP_COPY, scalar: 0.0, dtype: DType::F32, operands: vec![Operand::Input(0)] },
            ElementStep { op: OP_ADD, scalar: 0.0, dtype: DType::F32, operands: vec![Operand::Inner(0), Operand::Input(1)] },
        ]
    }

    #[test]
    fn identical_bodies_share_one_kernel() {
        let mut generated = Generated::default();
        let text = "t0: f32 = cast(x0, to=f32); t1: f32 = add(t0, x1)";
        assert_eq!(generated.fused(text, &add_of_cast(), &[DType::Bf16, DType::F32], DType::F32), Kernel::Generated(0));
        let masked = [ElementStep {
            op: OP_MASKED_FILL,
            scalar: f64::NEG_INFINITY,
            dtype: DType::Bf16,
            operands: vec![Operand::Input(0), Operand::Input(1)],
        }];
        assert_eq!(generated.fused("t0: bf16 = masked_fill(x0, x1, value=-inf)", &masked, &[DType::Bf16, DType::Bool], DType::Bf16), Kernel::Generated(1));
        assert_eq!(generated.fused(text, &add_of_cast(), &[DType::Bf16, DType::F32], DType::F32), Kernel::Generated(0));
        assert_eq!(generated.names(), ["fused_0", "fused_1"]);
        let source = generated.source().unwrap();
        // Every kernel is defined once, with the parameters its launches pass.
        assert_eq!(signature_in(&source, "fused_0"), Some(vec![Param::Tensor; 3]));
        assert_eq!(source.matches("extern \"C\" __global__ void fused_").count(), 2);
        // The body is straight-line code with constant codes; -inf is spelled exactly.
        assert!(source.contains("const double t1 = element_op(OP_ADD, t0, x1_i, 0.0, 0.0);"));
        assert!(source.contains("const double t0 = element_op(OP_MASKED_FILL, x0_i, x1_i, 0.0, -(double)f_inf());"));
        assert!(source.contains("    // t1: f32 = add(t0, x1)\n"));
        assert_eq!(Generated::default().source(), None);
    }

    /// A fused_norm's kernel: the body's value stored, then the norm's row function over
    /// what was stored; one kernel per body and norm, its parameters those lowering passes.
    #[test]
    fn a_fused_norm_normalises_the_value_it_stored() {
        let mut generated = Generated::default();
        let text = "t0: f32 = cast(x0, to=f32); t1: f32 = add(t0, x1)";
        let layer = generated.fused_norm(text, &add_of_cast(), 2, Norm::Layer);
        let rms = generated.fused_norm(text, &add_of_cast(), 2, Norm::Rms);
        assert_ne!(layer, rms);
        assert_eq!(generated.fused_norm(text, &add_of_cast(), 2, Norm::Layer), layer);
        let source = generated.source().unwrap();
        let tensors = |n: usize| vec![Param::Tensor; n];
        let scalars = [Param::I64, Param::I64, Param::F64];
        assert_eq!(signature_in(&source, "fused_0"), Some([tensors(6), scalars.to_vec()].concat()));
        assert_eq!(signature_in(&source, "fused_1"), Some([tensors(5), scalars.to_vec()].concat()));
        let store = source.find("store_d(out, i, t1);").unwrap();
        let norm = source.find("layer_norm_row(y, out, gamma, beta, row, d, eps);").unwrap();
        assert!(store < norm);
        assert!(source.contains("rms_norm_row(y, out, gamma, row, d, eps);"));
        // The norms' row functions come with the program.
        assert!(source.contains("__device__ __forceinline__ void layer_norm_row("));
    }

    /// The dtypes are constants of a kernel: the same body over other dtypes is another
    /// kernel; a thread takes 16 bytes of the narrowest tensor, 4 to 8 lanes.
    #[test]
    fn dtypes_pick_the_kernel_and_its_lanes() {
        let mut generated = Generated::default();
        let text = "t0: f32 = cast(x0, to=f32); t1: f32 = add(t0, x1)";
        let f32s = generated.fused(text, &add_of_cast(), &[DType::F32, DType::F32], DType::F32);
        let mixed = generated.fused(text, &add_of_cast(), &[DType::Bf16, DType::F32], DType::F32);
        assert_ne!(f32s, mixed);
        let source = generated.source().unwrap();
        assert!(source.contains("load_lanes<DT_F32, 4>(x0, i0, p0, v0, x0_v);"));
        assert!(source.contains("store_lanes<DT_F32, 4>(out, i0, r);"));
        assert!(source.contains("load_lanes<DT_BF16, 8>(x0, i0, p0, v0, x0_v);"));
        assert!(source.contains("const bool v1 = lanes_vectorize(x1, p1, 8, 4);"));
        assert!(source.contains("if (out.dense && out.ptr % VECTOR_ALIGN(32) == 0) {"));
        // The per-element loop after the lanes computes the same lines.
        assert_eq!(source.matches("const double t1 = element_op(OP_ADD, t0, x1_i, 0.0, 0.0);").count(), 4);
        assert_eq!(source.matches("const double t0 = round_to(DT_F32, element_op(OP_COPY, x0_i, 0.0, 0.0, 0.0));").count(), 4);
        assert_eq!(lanes(&[DType::F32, DType::I64]), 4);
        assert_eq!(lanes(&[DType::F32, DType::Bool]), 8);
        assert_eq!(lanes(&[DType::F16]), 8);
    }

    /// A body ending with a reduction: `reduce_partial`'s parameters after the inputs, and
    /// the value it sums returned per index, summed in float or in double.
    #[test]
    fn a_closing_reduction_sums_what_the_body_computes() {
        let mut generated = Generated::default();
        let square = [ElementStep { op: OP_MUL, scalar: 0.0, dtype: DType::F32, operands: vec![Operand::Input(0), Operand::Input(0)] }];
        let text = "t0: f32 = mul(x0, x0); t1: f32 = mean(t0, axes=[0, 1])";
        assert_eq!(generated.fused_reduction(text, &square, Operand::Inner(0), 1, true), Kernel::Generated(0));
        // The same body summing in double is another kernel.
        assert_eq!(generated.fused_reduction(text, &square, Operand::Inner(0), 1, false), Kernel::Generated(1));
        let source = generated.source().unwrap();
        let params = [Param::Tensor, Param::Tensor, Param::I64, Param::I64, Param::I64, Param::F64, Param::Ptr];
        assert_eq!(signature_in(&source, "fused_0"), Some(params.to_vec()));
        assert!(source.contains("reduce_partial_over(out, outs, reduced, chunk, divisor, partials, true, [&](i64 i) {"));
        assert!(source.contains("        return t0;\n    });\n}"));
        // The value summed is rounded as the unfused op stored it.
        assert!(source.contains("const double t0 = round_to(DT_F32, element_op(OP_MUL, x0_i, x0_i, 0.0, 0.0));"));
        assert!(source.contains("partials, false, [&]"));
    }

    #[test]
    fn op_codes_are_written_by_name() {
        assert_eq!(op_name(OP_ADD), "OP_ADD");
        assert_eq!(op_name(OP_COPY), "OP_COPY");
        assert_eq!(op_name(OP_COMPARE_SCALAR), "OP_COMPARE_SCALAR");
        assert_eq!(op_name(OP_COMPARE_SCALAR + 2), (OP_COMPARE_SCALAR + 2).to_string());
        // No two op names share a code, so the name is the code.
        let codes: Vec<i64> = SHARED.iter().filter(|(n, _)| n.starts_with("OP_")).map(|&(_, v)| v).collect();
        let distinct: std::collections::HashSet<i64> = codes.iter().copied().collect();
        assert_eq!(codes.len(), distinct.len());
    }

    #[test]
    fn literals_read_back_exactly() {
        for x in [0.0, -0.0, 1.0, 1e-5, 0.044715, 1.0 / 3.0, f64::MAX, f64::MIN_POSITIVE, 5e-324, -2.5e300] {
            let text = literal(x);
            assert_eq!(text.parse::<f64>().unwrap().to_bits(), x.to_bits(), "{text}");
        }
        assert_eq!(literal(f64::INFINITY), "(double)f_inf()");
        assert_eq!(literal(f64::NAN), "(double)f_nan()");
    }
}
