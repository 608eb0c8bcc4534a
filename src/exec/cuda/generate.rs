//! The kernels generated for a step's fused ops: one CUDA kernel per distinct fused body,
//! its inner ops written out as straight-line code over the element functions of
//! `kernels/element.cuh`, with constant op codes, scalars and dtypes, so the compiler keeps
//! one case of each function and every inner value in a register.
//!
//! Per element, a generated kernel loads each input (views broadcast to the output's shape,
//! their dtypes in their descriptors), computes the inner ops in order, rounds each value to
//! its dtype as storing it would (`round_to`, the CPU reference's `data::stored`), and stores
//! the last: the unfused ops' arithmetic exactly, without their intermediate tensors. Every
//! input is read before the output is written, so a fused op may run in place over an input.
//!
//! A body that ends with a reduction (`sum`, `mean`) gets the partial-sums kernel of
//! `reduce_partial` (common.cuh's `reduce_partial_over`) with the body before the reduction
//! computing each element it sums; `reduce_finish` of the program adds the groups' partial
//! sums where there are several.
//!
//! A kernel's text is all that tells two apart (the body and the number of inputs), so the
//! repeated layers of a model share one kernel. [`Generated`] collects them while a step is
//! lowered; `Program::generated` keeps them, and each backend compiles
//! [`Generated::source`] once for the step (NVRTC on the device, the host compiler in the
//! tests' emulator) next to the fixed program.

use indexmap::IndexSet;

use crate::exec::cuda::source::{SHARED, generated_program};
use crate::exec::cuda::view::{GENERATED, Kernel};
use crate::ir::ops::Operand;
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
    /// over `inputs` inputs; made on first use, shared by later identical bodies.
    pub fn fused(&mut self, text: &str, steps: &[ElementStep], inputs: usize) -> Kernel {
        self.intern(kernel_text(text, steps, inputs))
    }

    /// The partial-sums kernel of a body whose `steps` (all but its closing reduction)
    /// compute the values, `summed` the one its reduction reads, over `inputs` inputs: its
    /// parameters are the inputs, then `reduce_partial`'s after its `x`. `in_float`: the
    /// summed value is a float (summed in float, as `reduce_partial` sums a float tensor).
    pub fn fused_reduction(&mut self, text: &str, steps: &[ElementStep], summed: Operand, inputs: usize, in_float: bool) -> Kernel {
        self.intern(reduction_text(text, steps, summed, inputs, in_float))
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

/// A kernel's parameters and body (what follows its name), with the fused body's IR text
/// as a comment above.
fn kernel_text(text: &str, steps: &[ElementStep], inputs: usize) -> String {
    let mut out = format!("(Tensor out{}) {{\n", input_params(inputs));
    out.push_str(&comment(text));
    out.push_str("    GRID_STRIDE(i, out.numel) {\n");
    out.push_str(&element_code(steps, inputs));
    if let Some(last) = steps.len().checked_sub(1) {
        out.push_str(&format!("        store_d(out, i, t{last});\n"));
    }
    out.push_str("    }\n}");
    out
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
    out.push_str(&element_code(steps, inputs));
    out.push_str(&format!("        return {};\n    }});\n}}", operand_expr(Some(&summed))));
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
/// loop's body.
fn element_code(steps: &[ElementStep], inputs: usize) -> String {
    let indent = "        ";
    let mut out = String::new();
    for k in 0..inputs {
        out.push_str(&format!("{indent}const double x{k}_i = load_d(x{k}, i);\n"));
    }
    for (j, step) in steps.iter().enumerate() {
        let operand = |k: usize| operand_expr(step.operands.get(k));
        out.push_str(&format!(
            "{indent}const double t{j} = round_to({}, element_op({}, {}, {}, {}, {}));\n",
            dtype_macro(step.dtype),
            op_name(step.op),
            operand(0),
            operand(1),
            operand(2),
            literal(step.scalar)
        ));
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
        assert_eq!(generated.fused(text, &add_of_cast(), 2), Kernel::Generated(0));
        let masked = [ElementStep {
            op: OP_MASKED_FILL,
            scalar: f64::NEG_INFINITY,
            dtype: DType::Bf16,
            operands: vec![Operand::Input(0), Operand::Input(1)],
        }];
        assert_eq!(generated.fused("t0: bf16 = masked_fill(x0, x1, value=-inf)", &masked, 2), Kernel::Generated(1));
        assert_eq!(generated.fused(text, &add_of_cast(), 2), Kernel::Generated(0));
        assert_eq!(generated.names(), ["fused_0", "fused_1"]);
        let source = generated.source().unwrap();
        // Every kernel is defined once, with the parameters its launches pass.
        assert_eq!(signature_in(&source, "fused_0"), Some(vec![Param::Tensor; 3]));
        assert_eq!(source.matches("extern \"C\" __global__ void fused_").count(), 2);
        // The body is straight-line code with constant codes; -inf is spelled exactly.
        assert!(source.contains("const double t1 = round_to(DT_F32, element_op(OP_ADD, t0, x1_i, 0.0, 0.0));"));
        assert!(source.contains("round_to(DT_BF16, element_op(OP_MASKED_FILL, x0_i, x1_i, 0.0, -(double)f_inf()))"));
        assert!(source.contains("    // t1: f32 = add(t0, x1)\n"));
        assert_eq!(Generated::default().source(), None);
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
