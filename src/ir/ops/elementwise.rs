//! Elementwise ops: arithmetic with numpy broadcasting, scalar arithmetic and math
//! functions, the activations and their backward ops, the causal mask, casts, fills,
//! `contiguous`, `where` and `masked_fill`. Each row with its type rule and FLOPs.
//!
//! Almost every op here is *pointwise* (its row lists the inputs it reads element by
//! element) and may write its output over an input (in-place): that is what executors run
//! in chunks and the in-place pass reuses. Activations' backward ops read either the
//! forward's output `y` (relu, sigmoid, tanh) or its input `x` (gelu, silu, hardswish),
//! which decides what autodiff saves.

use super::rules::*;
use super::{AttrDefault, AttrKind, AttrSpec, Attrs, OpDef, attr};
use crate::ir::types::{DType, TensorType};

use AttrKind as K;

/// gelu's form: `true`, the tanh approximation (memplan's original gelu); `false`, the
/// exact erf form (PyTorch's default).
const APPROXIMATE: AttrSpec = attr("approximate", K::Bool, Some(AttrDefault::Bool(true)));

pub(super) const ADD: OpDef = OpDef::new("add", &["a", "b"], &["out"], infer_binary, "a + b, numpy broadcasting")
    .flops(per_output::<1>)
    .inplace(&[(0, 0), (0, 1)])
    .pointwise(&[0, 1])
    .elementwise();

pub(super) const SUB: OpDef = OpDef::new("sub", &["a", "b"], &["out"], infer_binary, "a - b, numpy broadcasting")
    .flops(per_output::<1>)
    .inplace(&[(0, 0), (0, 1)])
    .pointwise(&[0, 1])
    .elementwise();

pub(super) const MUL: OpDef = OpDef::new("mul", &["a", "b"], &["out"], infer_binary, "a * b, numpy broadcasting")
    .flops(per_output::<1>)
    .inplace(&[(0, 0), (0, 1)])
    .pointwise(&[0, 1])
    .elementwise();

pub(super) const DIV: OpDef = OpDef::new("div", &["a", "b"], &["out"], infer_binary, "a / b, numpy broadcasting")
    .flops(per_output::<1>)
    .inplace(&[(0, 0), (0, 1)])
    .pointwise(&[0, 1])
    .elementwise();

pub(super) const ADD_SCALAR: OpDef = OpDef::new("add_scalar", &["x"], &["out"], infer_scalar_op, "x + value")
    .attrs(&[attr("value", K::Float, None)])
    .flops(per_output::<1>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const MUL_SCALAR: OpDef = OpDef::new("mul_scalar", &["x"], &["out"], infer_scalar_op, "x * value")
    .attrs(&[attr("value", K::Float, None)])
    .flops(per_output::<1>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const POW_SCALAR: OpDef = OpDef::new("pow_scalar", &["x"], &["y"], infer_pow_scalar, "x ** exponent")
    .attrs(&[attr("exponent", K::Float, None)])
    .flops(per_output::<1>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const NEG: OpDef = OpDef::new("neg", &["x"], &["y"], infer_unary_numeric, "-x")
    .flops(per_output::<1>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const EXP: OpDef = OpDef::new("exp", &["x"], &["y"], infer_unary_float, "e ** x")
    .flops(per_output::<1>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const SIN: OpDef = OpDef::new("sin", &["x"], &["y"], infer_unary_float, "the sine of x (radians)")
    .flops(per_output::<1>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const ERF: OpDef = OpDef::new("erf", &["x"], &["y"], infer_unary_float, "the error function of x, 2/√π ∫₀ˣ exp(−t²) dt")
    .flops(per_output::<1>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const COS: OpDef = OpDef::new("cos", &["x"], &["y"], infer_unary_float, "the cosine of x (radians)")
    .flops(per_output::<1>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const LOG: OpDef = OpDef::new("log", &["x"], &["y"], infer_unary_float, "the natural logarithm of x")
    .flops(per_output::<1>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const SQRT: OpDef = OpDef::new("sqrt", &["x"], &["y"], infer_unary_float, "the square root of x")
    .flops(per_output::<1>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const RSQRT: OpDef = OpDef::new("rsqrt", &["x"], &["y"], infer_unary_float, "1 / sqrt(x)")
    .flops(per_output::<2>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const RELU: OpDef = OpDef::new("relu", &["x"], &["out"], infer_unary_float, "max(x, 0)")
    .flops(per_output::<1>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const RELU_BACKWARD: OpDef = OpDef::new("relu_backward", &["dy", "y"], &["dx"], infer_unary_backward_y, "dy where relu's output y > 0, else 0")
    .backward()
    .flops(per_output::<1>)
    .inplace(&[(0, 0), (0, 1)])
    .pointwise(&[0, 1])
    .elementwise();

pub(super) const GELU: OpDef = OpDef::new("gelu", &["x"], &["out"], infer_unary_float, "GELU: the tanh approximation, or exact (erf) with approximate=false")
    .attrs(&[APPROXIMATE])
    .flops(per_output::<8>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const GELU_BACKWARD: OpDef = OpDef::new("gelu_backward", &["dy", "x"], &["dx"], infer_unary_backward_x, "dy * gelu'(x), x being gelu's input")
    .attrs(&[APPROXIMATE])
    .backward()
    .flops(per_output::<12>)
    .inplace(&[(0, 0), (0, 1)])
    .pointwise(&[0, 1])
    .elementwise();

pub(super) const SILU: OpDef = OpDef::new("silu", &["x"], &["out"], infer_unary_float, "SiLU (swish): x * sigmoid(x)")
    .flops(per_output::<5>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const SILU_BACKWARD: OpDef = OpDef::new("silu_backward", &["dy", "x"], &["dx"], infer_unary_backward_x, "dy * s * (1 + x * (1 - s)), s = sigmoid(x), x being silu's input")
    .backward()
    .flops(per_output::<9>)
    .inplace(&[(0, 0), (0, 1)])
    .pointwise(&[0, 1])
    .elementwise();

pub(super) const SIGMOID: OpDef = OpDef::new("sigmoid", &["x"], &["y"], infer_unary_float, "1 / (1 + exp(-x))")
    .flops(per_output::<4>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const SIGMOID_BACKWARD: OpDef = OpDef::new("sigmoid_backward", &["dy", "y"], &["dx"], infer_unary_backward_y, "dy * y * (1 - y), y being sigmoid's output")
    .backward()
    .flops(per_output::<3>)
    .inplace(&[(0, 0), (0, 1)])
    .pointwise(&[0, 1])
    .elementwise();

pub(super) const TANH: OpDef = OpDef::new("tanh", &["x"], &["y"], infer_unary_float, "the hyperbolic tangent of x")
    .flops(per_output::<1>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const TANH_BACKWARD: OpDef = OpDef::new("tanh_backward", &["dy", "y"], &["dx"], infer_unary_backward_y, "dy * (1 - y * y), y being tanh's output")
    .backward()
    .flops(per_output::<3>)
    .inplace(&[(0, 0), (0, 1)])
    .pointwise(&[0, 1])
    .elementwise();

pub(super) const HARDSWISH: OpDef = OpDef::new("hardswish", &["x"], &["out"], infer_unary_float, "x * min(max(x + 3, 0), 6) / 6")
    .flops(per_output::<5>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const HARDSWISH_BACKWARD: OpDef = OpDef::new("hardswish_backward", &["dy", "x"], &["dx"], infer_unary_backward_x, "dy * hardswish'(x): 0 below -3, (2x + 3) / 6 up to 3, 1 above")
    .backward()
    .flops(per_output::<4>)
    .inplace(&[(0, 0), (0, 1)])
    .pointwise(&[0, 1])
    .elementwise();

pub(super) const HARDSIGMOID: OpDef = OpDef::new("hardsigmoid", &["x"], &["out"], infer_unary_float, "min(max(x + 3, 0), 6) / 6")
    .flops(per_output::<4>)
    .inplace(&[(0, 0)])
    .pointwise(&[0])
    .elementwise();

pub(super) const HARDSIGMOID_BACKWARD: OpDef = OpDef::new("hardsigmoid_backward", &["dy", "x"], &["dx"], infer_unary_backward_x, "dy * hardsigmoid'(x): dy / 6 strictly between -3 and 3, else 0")
    .backward()
    .flops(per_output::<3>)
    .inplace(&[(0, 0), (0, 1)])
    .pointwise(&[0, 1])
    .elementwise();

pub(super) const CAUSAL_MASK: OpDef = OpDef::new("causal_mask", &["x"], &["out"], infer_causal_mask, "x with entries [..., i, j] for j > i set to value")
    .attrs(&[attr("value", K::Float, Some(AttrDefault::Float(f64::NEG_INFINITY)))])
    .flops(per_output::<1>)
    .inplace(&[(0, 0)]);

pub(super) const CONTIGUOUS: OpDef = OpDef::new("contiguous", &["x"], &["out"], infer_contiguous, "a dense row-major copy of x")
    .pointwise(&[0])
    .elementwise();

pub(super) const CAST: OpDef = OpDef::new("cast", &["x"], &["out"], infer_cast, "x converted to dtype `to`")
    .attrs(&[attr("to", K::DType, None)])
    .pointwise(&[0])
    .elementwise();

pub(super) const FILL: OpDef = OpDef::new("fill", &[], &["out"], infer_fill, "a new tensor whose element i (row-major) is value + i·step: a constant, or arange")
    .attrs(&[attr("shape", K::Ints, None), attr("dtype", K::DType, None), attr("value", K::Float, Some(AttrDefault::Float(0.0))), attr("step", K::Float, Some(AttrDefault::Float(0.0)))]);

pub(super) const WHERE: OpDef = OpDef::new("where", &["cond", "a", "b"], &["out"], infer_where, "a where cond else b, numpy broadcasting of all three")
    .flops(per_output::<1>)
    .inplace(&[(0, 1), (0, 2)])
    .pointwise(&[0, 1, 2])
    .elementwise();

pub(super) const COMPARE: OpDef = OpDef::new("compare", &["a", "b"], &["out"], infer_compare, "a op b (op: lt, le, gt, ge, eq or ne) as a bool tensor, numpy broadcasting; a and b of one dtype")
    .attrs(&[attr("op", K::Str, None)])
    .flops(per_output::<1>)
    // A bool result: no gradient flows through a comparison.
    .stops_gradient()
    .elementwise();

pub(super) const COMPARE_SCALAR: OpDef = OpDef::new("compare_scalar", &["x"], &["out"], infer_compare_scalar, "x op value (op: lt, le, gt, ge, eq or ne) as a bool tensor of x's shape")
    .attrs(&[attr("value", K::Float, None), attr("op", K::Str, None)])
    .flops(per_output::<1>)
    .stops_gradient()
    .elementwise();

pub(super) const MASKED_FILL: OpDef = OpDef::new("masked_fill", &["x", "mask"], &["out"], infer_masked_fill, "x with value where mask (broadcast to x's shape) is true")
    .attrs(&[attr("value", K::Float, None)])
    .flops(per_output::<1>)
    .inplace(&[(0, 0)])
    .pointwise(&[0, 1])
    .elementwise();

/// The relation `compare` and `compare_scalar` test, their `op` attribute (`op="lt"`),
/// decoded once for every layer that reads it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Comparison {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl Comparison {
    /// Every relation and its IR spelling, in the order of its code (`code`).
    pub const ALL: [(Comparison, &'static str); 6] = [
        (Comparison::Lt, "lt"),
        (Comparison::Le, "le"),
        (Comparison::Gt, "gt"),
        (Comparison::Ge, "ge"),
        (Comparison::Eq, "eq"),
        (Comparison::Ne, "ne"),
    ];

    pub fn parse(text: &str) -> Option<Comparison> {
        Comparison::ALL.iter().find(|(_, name)| *name == text).map(|&(c, _)| c)
    }

    /// The relation of an op of the compare rows (their type rule checked it).
    pub fn of(attrs: &Attrs) -> Comparison {
        Comparison::parse(attrs.str("op")).expect("the type rule accepts only the six relations")
    }

    /// 0 for lt through 5 for ne: how the CUDA kernels are told.
    pub fn code(self) -> i32 {
        Comparison::ALL.iter().position(|&(c, _)| c == self).expect("every relation is listed") as i32
    }

    /// Whether `a op b` holds, as IEEE and PyTorch compare: NaN is unequal to everything,
    /// so only `ne` holds with a NaN.
    pub fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Comparison::Lt => a < b,
            Comparison::Le => a <= b,
            Comparison::Gt => a > b,
            Comparison::Ge => a >= b,
            Comparison::Eq => a == b,
            Comparison::Ne => a != b,
        }
    }
}

fn relation(attrs: &Attrs) -> Result<Comparison, String> {
    let text = attrs.str("op");
    Comparison::parse(text).ok_or_else(|| format!("op={text:?} is not a comparison (lt, le, gt, ge, eq or ne)"))
}

pub(super) fn infer_compare(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    same_dtype(inputs)?;
    relation(attrs)?;
    done(vec![TensorType { dtype: DType::Bool, shape: broadcast(&inputs[0].shape, &inputs[1].shape)? }])
}

pub(super) fn infer_compare_scalar(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    not_nan(attrs, "value")?;
    relation(attrs)?;
    done(vec![TensorType { dtype: DType::Bool, shape: inputs[0].shape.clone() }])
}

pub(super) fn infer_binary(inputs: &[&TensorType], _: &Attrs) -> Rule {
    let dtype = same_dtype(inputs)?;
    if dtype == DType::Bool {
        return Err(format!("arithmetic needs numbers, found {} and {} (cast first)", inputs[0], inputs[1]));
    }
    done(vec![TensorType { dtype, shape: broadcast(&inputs[0].shape, &inputs[1].shape)? }])
}

/// `add_scalar`, `mul_scalar`: x float, or integer with an integral `value` (positions,
/// counters: `arange + past_length`); the result in x's dtype.
pub(super) fn infer_scalar_op(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    let value = not_nan(attrs, "value")?;
    match x.dtype {
        DType::Bool => Err(format!("arithmetic needs numbers, found {x} (cast first)")),
        d if !d.is_float() && (value.fract() != 0.0 || !value.is_finite()) => {
            Err(format!("an integer x ({x}) takes an integral value, found {value} (cast x to a float first)"))
        }
        _ => done(vec![x.clone()]),
    }
}

/// `neg`: x float or integer (not bool); y has x's type.
pub(super) fn infer_unary_numeric(inputs: &[&TensorType], _: &Attrs) -> Rule {
    if inputs[0].dtype == DType::Bool {
        return Err(format!("x must be a number, found {} (cast first)", inputs[0]));
    }
    done(vec![inputs[0].clone()])
}

pub(super) fn infer_unary_float(inputs: &[&TensorType], _: &Attrs) -> Rule {
    float_input(inputs[0], "x")?;
    done(vec![inputs[0].clone()])
}

/// `(dy, saved) -> dx` where all three have one float type.
pub(super) fn unary_backward(inputs: &[&TensorType], saved: &str) -> Rule {
    float_input(inputs[0], "dy")?;
    same_type(inputs[0], "dy", inputs[1], saved)?;
    done(vec![inputs[0].clone()])
}

/// `x ** exponent`: `x` float, the exponent a finite number.
pub(super) fn infer_pow_scalar(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    float_input(inputs[0], "x")?;
    float_attr(attrs, "exponent", f64::is_finite, "a finite number")?;
    done(vec![inputs[0].clone()])
}

/// The backward of an activation that reads its forward OUTPUT `y` (relu, sigmoid, tanh).
pub(super) fn infer_unary_backward_y(inputs: &[&TensorType], _: &Attrs) -> Rule {
    unary_backward(inputs, "y")
}

/// The backward of an activation that reads its forward INPUT `x` (gelu, silu, hardswish).
pub(super) fn infer_unary_backward_x(inputs: &[&TensorType], _: &Attrs) -> Rule {
    unary_backward(inputs, "x")
}

pub(super) fn infer_causal_mask(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    float_input(x, "x")?;
    not_nan(attrs, "value")?;
    match *x.dims() {
        [.., rows, cols] if rows == cols => done(vec![x.clone()]),
        _ => Err(format!("x must end in a square [..,T,T], found {x}")),
    }
}

pub(super) fn infer_contiguous(inputs: &[&TensorType], _: &Attrs) -> Rule {
    done(vec![inputs[0].clone()])
}

pub(super) fn infer_cast(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    done(vec![TensorType { dtype: attrs.dtype("to"), shape: inputs[0].shape.clone() }])
}

/// `fill(shape, dtype, value, step)`: element i is `value + i·step`; the first and the last
/// element must be representable in `dtype` (the others lie between them), and `step` must
/// keep integer dtypes integral (bool: no step at all).
pub(super) fn infer_fill(_: &[&TensorType], attrs: &Attrs) -> Rule {
    let dims = dims_attr(attrs, "shape")?;
    let dtype = attrs.dtype("dtype");
    let value = not_nan(attrs, "value")?;
    let step = not_nan(attrs, "step")?;
    if !step.is_finite() {
        return Err(format!("step={step:?}: expected a finite number"));
    }
    let fits = |value: f64| match dtype {
        DType::F32 | DType::F16 | DType::Bf16 => true,
        DType::Bool => value == 0.0 || value == 1.0,
        DType::I32 => value.fract() == 0.0 && value >= i32::MIN as f64 && value <= i32::MAX as f64,
        // 2^63 is exactly representable; every f64 below it fits in an i64.
        DType::I64 => value.fract() == 0.0 && value >= -(2f64.powi(63)) && value < 2f64.powi(63),
    };
    if !fits(value) {
        return Err(format!("value={value:?} is not representable as {dtype}"));
    }
    let numel = dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).unwrap_or(u64::MAX);
    if step != 0.0 {
        if dtype == DType::Bool || (!dtype.is_float() && step.fract() != 0.0) {
            return Err(format!("step={step:?} does not keep the elements {dtype}"));
        }
        let last = value + numel.saturating_sub(1) as f64 * step;
        if !fits(last) || (dtype.is_float() && !last.is_finite()) {
            return Err(format!("the last element, {last:?}, is not representable as {dtype}"));
        }
    }
    done(vec![TensorType::new(dtype, dims)])
}

/// `where(cond, a, b)`: cond bool, a and b one float dtype, the three shapes broadcast
/// together (numpy rules); out has a's dtype and the broadcast shape.
pub(super) fn infer_where(inputs: &[&TensorType], _: &Attrs) -> Rule {
    let (cond, a, b) = (inputs[0], inputs[1], inputs[2]);
    bool_input(cond, "cond")?;
    let dtype = same_dtype(&inputs[1..])?;
    let shape = broadcast(&broadcast(&cond.shape, &a.shape)?, &b.shape)?;
    done(vec![TensorType { dtype, shape }])
}

/// `masked_fill(x, mask, value)`: x float, mask bool and broadcastable to x's shape (the
/// output keeps x's shape), value a number (±inf allowed).
pub(super) fn infer_masked_fill(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (x, mask) = (inputs[0], inputs[1]);
    bool_input(mask, "mask")?;
    let value = not_nan(attrs, "value")?;
    let representable = match x.dtype {
        DType::Bool => value == 0.0 || value == 1.0,
        d if !d.is_float() => value.fract() == 0.0 && value.is_finite(),
        _ => true,
    };
    if !representable {
        return Err(format!("value {value} is not a value of x's dtype {} (cast x first)", x.dtype));
    }
    match broadcast(&mask.shape, &x.shape) {
        Ok(shape) if shape == x.shape => done(vec![x.clone()]),
        _ => Err(format!("mask {mask} must broadcast to x's shape {}", x.shape)),
    }
}
