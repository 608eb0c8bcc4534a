//! Elementwise kernels: add/sub/mul/div with numpy broadcasting, add_scalar/mul_scalar and
//! the math functions (pow_scalar, neg, exp, log, sqrt, rsqrt: through [`unary`]), the
//! activations (relu, gelu in both forms, silu, sigmoid, tanh, hardswish) with their
//! backward ops, causal_mask, fill, where and masked_fill (selection by a bool tensor,
//! broadcast). (`contiguous` and `cast` are copies; `eval` converts to the output dtype.)
//!
//! The activations follow PyTorch's CPU kernels formula for formula (aten's
//! `Activation.cpp`, `UnaryOps`), so that an imported model computes what it did there:
//! silu is `x / (1 + exp(-x))`, sigmoid_backward `dy · (1 − y) · y`, hardswish_backward
//! `dy · (x/3 + 1/2)` on [−3, 3], exact gelu `0.5·x·(1 + erf(x/√2))`.

use super::{broadcast_strides, strides, walk};
use crate::exec::Dense;

/// `f(a, b)` elementwise, with `a` and `b` broadcast to `out_shape` (numpy rules).
pub(super) fn binary(a: &Dense, b: &Dense, out_shape: &[usize], f: impl Fn(f64, f64) -> f64) -> Dense {
    let (sa, sb) = (broadcast_strides(&a.shape, out_shape), broadcast_strides(&b.shape, out_shape));
    let mut data = Vec::with_capacity(out_shape.iter().product());
    walk(out_shape, [&sa, &sb], |[i, j]| data.push(f(a.data[i], b.data[j])));
    Dense::new(out_shape.to_vec(), data)
}

/// `f(x)` elementwise.
pub(super) fn unary(x: &Dense, f: impl Fn(f64) -> f64) -> Dense {
    Dense::new(x.shape.clone(), x.data.iter().map(|&v| f(v)).collect())
}

/// `f(a, b)` elementwise on two tensors of one shape.
fn zip(a: &Dense, b: &Dense, f: impl Fn(f64, f64) -> f64) -> Dense {
    Dense::new(a.shape.clone(), a.data.iter().zip(&b.data).map(|(&x, &y)| f(x, y)).collect())
}

/// max(x, 0); NaN stays NaN.
pub(super) fn relu(x: f64) -> f64 {
    if x < 0.0 { 0.0 } else { x }
}

/// dx = dy where relu's output y > 0, else 0.
pub(super) fn relu_backward(dy: &Dense, y: &Dense) -> Dense {
    zip(dy, y, |g, y| if y > 0.0 { g } else { 0.0 })
}

/// √(2/π)
const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
const GELU_CUBIC: f64 = 0.044715;

/// GELU, tanh approximation: 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
pub(super) fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x)).tanh())
}

/// dx = dy · gelu′(x) with gelu′(x) = 0.5·(1 + t) + 0.5·x·(1 − t²)·√(2/π)·(1 + 3·0.044715·x²),
/// t = tanh(√(2/π)·(x + 0.044715·x³)).
pub(super) fn gelu_backward(dy: &Dense, x: &Dense) -> Dense {
    zip(dy, x, |g, x| {
        let t = (SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x)).tanh();
        let inner = SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_CUBIC * x * x);
        g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * inner)
    })
}

/// GELU, exact: 0.5·x·(1 + erf(x/√2)).
pub(super) fn gelu_exact(x: f64) -> f64 {
    x * 0.5 * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2))
}

/// dx = dy · (Φ(x) + x·φ(x)), the exact GELU's derivative: Φ the normal CDF
/// 0.5·(1 + erf(x/√2)), φ the normal density exp(−x²/2)/√(2π).
pub(super) fn gelu_exact_backward(dy: &Dense, x: &Dense) -> Dense {
    const INV_SQRT_2PI: f64 = 0.398_942_280_401_432_7;
    zip(dy, x, |g, x| {
        let cdf = 0.5 * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2));
        let pdf = (-0.5 * x * x).exp() * INV_SQRT_2PI;
        g * (cdf + x * pdf)
    })
}

/// 1 / (1 + exp(−x)).
pub(super) fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// SiLU: x / (1 + exp(−x)) (= x·sigmoid(x)).
pub(super) fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// dx = dy · s · (1 + x·(1 − s)), s = sigmoid(x): the derivative of x·s(x), as s′ = s·(1 − s).
pub(super) fn silu_backward(dy: &Dense, x: &Dense) -> Dense {
    zip(dy, x, |g, x| {
        let s = sigmoid(x);
        g * s * (1.0 + x * (1.0 - s))
    })
}

/// dx = dy · (1 − y) · y, y being sigmoid's output.
pub(super) fn sigmoid_backward(dy: &Dense, y: &Dense) -> Dense {
    zip(dy, y, |g, y| g * (1.0 - y) * y)
}

/// dx = dy · (1 − y²), y being tanh's output.
pub(super) fn tanh_backward(dy: &Dense, y: &Dense) -> Dense {
    zip(dy, y, |g, y| g * (1.0 - y * y))
}

/// min(max(x + 3, 0), 6) / 6.
pub(super) fn hardsigmoid(x: f64) -> f64 {
    (x + 3.0).clamp(0.0, 6.0) / 6.0
}

/// dx = dy · hardsigmoid′(x) as PyTorch takes it: dy / 6 for −3 < x < 3, 0 elsewhere (the
/// kinks ±3 included).
pub(super) fn hardsigmoid_backward(dy: &Dense, x: &Dense) -> Dense {
    zip(dy, x, |g, x| if x > -3.0 && x < 3.0 { g / 6.0 } else { 0.0 })
}

/// x · min(max(x + 3, 0), 6) / 6.
pub(super) fn hardswish(x: f64) -> f64 {
    x * (x + 3.0).clamp(0.0, 6.0) / 6.0
}

/// dx = dy · hardswish′(x) as PyTorch takes it: 0 for x < −3, x/3 + 1/2 for −3 ≤ x ≤ 3, 1
/// above (the kinks at ±3 take the inner piece: 1/2 − 1 = −1/2 at −3, 3/2 at 3).
pub(super) fn hardswish_backward(dy: &Dense, x: &Dense) -> Dense {
    zip(dy, x, |g, x| {
        if x < -3.0 {
            0.0
        } else if x <= 3.0 {
            g * (x / 3.0 + 0.5)
        } else {
            g
        }
    })
}

/// x with `[..., i, j]` set to `value` where j > i (x is `[..., T, T]`).
pub(super) fn causal_mask(x: &Dense, value: f64) -> Dense {
    let mut out = x.clone();
    let t = x.shape[x.shape.len() - 1];
    for (k, v) in out.data.iter_mut().enumerate() {
        let (i, j) = ((k / t) % t, k % t);
        if j > i {
            *v = value;
        }
    }
    out
}

/// A tensor of `shape` whose element i (row-major) is `value + i·step`, computed in f64
/// (`eval` converts it to the dtype; the type rule has checked that it is representable).
pub(super) fn fill(shape: &[usize], value: f64, step: f64) -> Dense {
    let n: usize = shape.iter().product();
    Dense::new(shape.to_vec(), (0..n).map(|i| value + i as f64 * step).collect())
}

/// `a` where `cond` (0 or 1) is 1, else `b`; all three broadcast to `out_shape` (numpy
/// rules), as PyTorch's `torch.where(cond, a, b)`.
pub(super) fn where_select(cond: &Dense, a: &Dense, b: &Dense, out_shape: &[usize]) -> Dense {
    let [sc, sa, sb] = [cond, a, b].map(|t| broadcast_strides(&t.shape, out_shape));
    let mut data = Vec::with_capacity(out_shape.iter().product());
    walk(out_shape, [&sc, &sa, &sb], |[c, i, j]| data.push(if cond.data[c] != 0.0 { a.data[i] } else { b.data[j] }));
    Dense::new(out_shape.to_vec(), data)
}

/// `x` with `value` where `mask` (0 or 1, broadcast to x's shape) is 1: PyTorch's
/// `x.masked_fill(mask, value)`.
pub(super) fn masked_fill(x: &Dense, mask: &Dense, value: f64) -> Dense {
    let (sx, sm) = (strides(&x.shape), broadcast_strides(&mask.shape, &x.shape));
    let mut data = Vec::with_capacity(x.data.len());
    walk(&x.shape, [&sx, &sm], |[i, m]| data.push(if mask.data[m] != 0.0 { value } else { x.data[i] }));
    Dense::new(x.shape.clone(), data)
}

#[cfg(test)]
mod tests {
    use super::super::test_util::*;
    use super::*;
    use crate::exec::kernels::eval;
    use crate::ir::ops::{Attr, OpKind};
    use crate::ir::types::{DType, TensorType};

    #[test]
    fn add_broadcasts() {
        // [2,1,3] + [3]
        let a = t(&[2, 1, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let b = t(&[3], &[10.0, 20.0, 30.0]);
        let out = run(OpKind::Add, &[], &[a, b]).remove(0);
        assert_eq!(out.shape, [2, 1, 3]);
        assert_eq!(out.data, [11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
        // [2,1] + [1,3] -> [2,3] (both sides broadcast)
        let out = run(OpKind::Add, &[], &[t(&[2, 1], &[1.0, 2.0]), t(&[1, 3], &[10.0, 20.0, 30.0])]).remove(0);
        assert_eq!(out.shape, [2, 3]);
        assert_eq!(out.data, [11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);
        // scalar + tensor
        let out = run(OpKind::Add, &[], &[t(&[], &[1.5]), t(&[2], &[1.0, 2.0])]).remove(0);
        assert_eq!(out.data, [2.5, 3.5]);
    }

    #[test]
    fn sub_mul_div() {
        let a = t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]);
        let b = t(&[2, 1], &[2.0, 4.0]);
        assert_eq!(run(OpKind::Sub, &[], &[a.clone(), b.clone()])[0].data, [-1.0, 0.0, -1.0, 0.0]);
        assert_eq!(run(OpKind::Mul, &[], &[a.clone(), b.clone()])[0].data, [2.0, 4.0, 12.0, 16.0]);
        assert_eq!(run(OpKind::Div, &[], &[a, b])[0].data, [0.5, 1.0, 0.75, 1.0]);
        // Integer add keeps exact integers.
        let i64s = TensorType::new(DType::I64, vec![2]);
        let out = eval(OpKind::Add, &Default::default(), &[t(&[2], &[3.0, -4.0]), t(&[], &[5.0])], &[i64s]).unwrap();
        assert_eq!(out[0].data, [8.0, 1.0]);
    }

    #[test]
    fn scalar_ops() {
        let x = t(&[3], &[1.0, -2.0, 0.5]);
        let v = |x| [("value", Attr::Float(x))];
        assert_eq!(run(OpKind::AddScalar, &v(1.0), std::slice::from_ref(&x))[0].data, [2.0, -1.0, 1.5]);
        assert_eq!(run(OpKind::MulScalar, &v(-2.0), &[x])[0].data, [-2.0, 4.0, -1.0]);
    }

    #[test]
    fn relu_and_backward() {
        let x = t(&[4], &[-1.0, 0.0, 2.0, -0.5]);
        let y = run(OpKind::Relu, &[], &[x]).remove(0);
        assert_eq!(y.data, [0.0, 0.0, 2.0, 0.0]);
        let dy = t(&[4], &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(run(OpKind::ReluBackward, &[], &[dy, y])[0].data, [0.0, 0.0, 3.0, 0.0]);
        assert!(relu(f64::NAN).is_nan());
    }

    #[test]
    fn gelu_values() {
        let y = run(OpKind::Gelu, &[], &[t(&[4], &[0.0, 1.0, -1.0, 10.0])]).remove(0);
        // Reference values of the tanh approximation.
        assert_close(&y, &[0.0, 0.841_191_990_607_477_2, -0.158_808_009_392_522_8, 10.0], 1e-12);
        // gelu'(0) = 0.5.
        let dx = run(OpKind::GeluBackward, &[], &[t(&[1], &[2.0]), t(&[1], &[0.0])]).remove(0);
        assert_close(&dx, &[1.0], 1e-15);
    }

    #[test]
    fn gelu_exact_values() {
        let exact = [("approximate", Attr::Bool(false))];
        let y = run(OpKind::Gelu, &exact, &[t(&[4], &[0.0, 1.0, -1.0, 10.0])]).remove(0);
        // x·Φ(x): Φ(1) = 0.5·(1 + erf(1/√2)) = 0.841344746068543, Φ(10) = 1 in f64.
        assert_close(&y, &[0.0, 0.841_344_746_068_542_9, -0.158_655_253_931_457_07, 10.0], 1e-15);
        // gelu′ = Φ(x) + x·φ(x): 1/2 at 0, Φ(1) + φ(1) and Φ(−1) − φ(−1) at ±1.
        let dx = run(OpKind::GeluBackward, &exact, &[t(&[3], &[2.0, 1.0, 1.0]), t(&[3], &[0.0, 1.0, -1.0])]).remove(0);
        assert_close(&dx, &[1.0, 1.083_315_470_587_686_4, -0.083_315_470_587_686_29], 1e-15);
        // The default is still the tanh approximation, which differs from the exact form.
        let tanh_form = run(OpKind::Gelu, &[], &[t(&[1], &[1.0])]).remove(0);
        assert!((tanh_form.data[0] - y.data[1]).abs() > 1e-4);
    }

    #[test]
    fn silu_sigmoid_tanh_values() {
        let x = t(&[3], &[0.0, 1.0, -1.0]);
        let y = run(OpKind::Silu, &[], std::slice::from_ref(&x)).remove(0);
        assert_close(&y, &[0.0, 0.731_058_578_630_004_9, -0.268_941_421_369_995_1], 1e-15);
        // silu′(x) = s·(1 + x·(1 − s)): 1/2 at 0.
        let dx = run(OpKind::SiluBackward, &[], &[t(&[3], &[1.0; 3]), x.clone()]).remove(0);
        assert_close(&dx, &[0.5, 0.927_670_511_871_486_9, 0.072_329_488_128_513_25], 1e-15);
        let y = run(OpKind::Sigmoid, &[], std::slice::from_ref(&x)).remove(0);
        assert_close(&y, &[0.5, 0.731_058_578_630_004_9, 0.268_941_421_369_995_1], 1e-15);
        // dx = dy·(1 − y)·y from the output: 2·0.5·0.5.
        let dx = run(OpKind::SigmoidBackward, &[], &[t(&[2], &[2.0, 1.0]), t(&[2], &[0.5, 1.0])]).remove(0);
        assert_eq!(dx.data, [0.5, 0.0]);
        let y = run(OpKind::Tanh, &[], &[t(&[3], &[0.0, 1.0, -20.0])]).remove(0);
        assert_close(&y, &[0.0, 1f64.tanh(), -1.0], 1e-15);
        // dx = dy·(1 − y²): 3·0.75.
        let dx = run(OpKind::TanhBackward, &[], &[t(&[2], &[3.0, 1.0]), t(&[2], &[0.5, -1.0])]).remove(0);
        assert_eq!(dx.data, [2.25, 0.0]);
    }

    #[test]
    fn comparisons_hold_as_ieee_and_pytorch_say() {
        let attrs = |op: &str, value: Option<f64>| {
            let mut given = vec![("op", Attr::Str(op.to_string()))];
            given.extend(value.map(|v| ("value", Attr::Float(v))));
            let kind = if value.is_some() { OpKind::CompareScalar } else { OpKind::Compare };
            crate::autodiff::Builder::attrs(kind, &given).unwrap()
        };
        let x = t(&[4], &[-1.0, 0.0, 2.5, f64::NAN]);
        let bools = |n: u64| vec![TensorType::new(DType::Bool, vec![n])];
        let scalar = |op| eval(OpKind::CompareScalar, &attrs(op, Some(0.0)), std::slice::from_ref(&x), &bools(4)).unwrap()[0].data.clone();
        assert_eq!(scalar("lt"), [1.0, 0.0, 0.0, 0.0]);
        assert_eq!(scalar("le"), [1.0, 1.0, 0.0, 0.0]);
        assert_eq!(scalar("gt"), [0.0, 0.0, 1.0, 0.0]);
        assert_eq!(scalar("ge"), [0.0, 1.0, 1.0, 0.0]);
        assert_eq!(scalar("eq"), [0.0, 1.0, 0.0, 0.0]);
        // NaN is unequal to everything.
        assert_eq!(scalar("ne"), [1.0, 0.0, 1.0, 1.0]);
        // Broadcast integers: positions [[0], [1], [2]] >= ids [2, 3] (exact in f64).
        let (positions, ids) = (t(&[3, 1], &[0.0, 1.0, 2.0]), t(&[2], &[2.0, 3.0]));
        let out = TensorType::new(DType::Bool, vec![3, 2]);
        let got = eval(OpKind::Compare, &attrs("ge", None), &[positions, ids], &[out]).unwrap().remove(0);
        assert_eq!(got.data, [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    }

    #[test]
    fn hardsigmoid_and_its_boundaries() {
        let x = t(&[8], &[-4.0, -3.0, -1.5, 0.0, 1.5, 3.0, 3.5, f64::NAN]);
        let y = run(OpKind::Hardsigmoid, &[], std::slice::from_ref(&x)).remove(0);
        assert_eq!(y.data[..7], [0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0]);
        assert!(y.data[7].is_nan());
        // PyTorch's derivative: dy/6 strictly inside (−3, 3), 0 at the kinks and outside
        // (and for NaN).
        let dy = t(&[8], &[6.0; 8]);
        let dx = run(OpKind::HardsigmoidBackward, &[], &[dy, x]).remove(0);
        assert_eq!(dx.data, [0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn hardswish_and_its_boundaries() {
        let x = t(&[8], &[-4.0, -3.0, -1.5, 0.0, 1.0, 3.0, 3.5, f64::NAN]);
        let y = run(OpKind::Hardswish, &[], std::slice::from_ref(&x)).remove(0);
        assert_eq!(y.data[..7], [0.0, 0.0, -0.375, 0.0, 4.0 / 6.0, 3.0, 3.5]);
        assert!(y.data[7].is_nan());
        // PyTorch's derivative: 0 below −3; x/3 + 1/2 on [−3, 3], both ends included
        // (−1/2 at −3, 3/2 at 3); 1 above; NaN falls through to dy.
        let dy = t(&[8], &[2.0; 8]);
        let dx = run(OpKind::HardswishBackward, &[], &[dy, x]).remove(0);
        assert_eq!(dx.data, [0.0, -1.0, 0.0, 1.0, 2.0 * (1.0 / 3.0 + 0.5), 3.0, 2.0, 2.0]);
        let just_above = run(OpKind::HardswishBackward, &[], &[t(&[1], &[1.0]), t(&[1], &[3.0 + 1e-12])]).remove(0);
        assert_eq!(just_above.data, [1.0]);
        let just_below = run(OpKind::HardswishBackward, &[], &[t(&[1], &[1.0]), t(&[1], &[-3.0 - 1e-12])]).remove(0);
        assert_eq!(just_below.data, [0.0]);
    }

    #[test]
    fn math_functions_and_their_edges() {
        let unary = |kind: OpKind, given: &[(&str, Attr)], values: &[f64]| {
            run(kind, given, &[t(&[values.len()], values)]).remove(0).data
        };
        let neg = unary(OpKind::Neg, &[], &[1.0, -2.0, 0.0]);
        assert_eq!(neg, [-1.0, 2.0, 0.0]);
        assert!(neg[2].is_sign_negative());
        let exp = unary(OpKind::Exp, &[], &[0.0, 1.0, f64::NEG_INFINITY]);
        assert_close(&t(&[3], &exp), &[1.0, std::f64::consts::E, 0.0], 1e-15);
        let log = unary(OpKind::Log, &[], &[1.0, std::f64::consts::E, 0.0, -1.0]);
        assert_close(&t(&[2], &log[..2]), &[0.0, 1.0], 1e-15);
        assert_eq!(log[2], f64::NEG_INFINITY);
        assert!(log[3].is_nan());
        let sqrt = unary(OpKind::Sqrt, &[], &[4.0, 0.0, 2.0, -1.0]);
        assert_eq!(sqrt[..3], [2.0, 0.0, std::f64::consts::SQRT_2]);
        assert!(sqrt[3].is_nan());
        let rsqrt = unary(OpKind::Rsqrt, &[], &[4.0, 0.25, 0.0, -1.0]);
        assert_eq!(rsqrt[..3], [0.5, 2.0, f64::INFINITY]);
        assert!(rsqrt[3].is_nan());
        let pow = |e: f64, values: &[f64]| unary(OpKind::PowScalar, &[("exponent", Attr::Float(e))], values);
        assert_eq!(pow(2.0, &[2.0, -3.0, 0.0]), [4.0, 9.0, 0.0]);
        assert_eq!(pow(3.0, &[-2.0]), [-8.0]);
        assert_close(&t(&[1], &pow(0.5, &[4.0])), &[2.0], 1e-15);
        assert_eq!(pow(-1.0, &[0.0, 4.0]), [f64::INFINITY, 0.25]);
        assert_eq!(pow(0.0, &[0.0, -7.0]), [1.0, 1.0]);
        assert!(pow(0.5, &[-4.0])[0].is_nan());
    }

    #[test]
    fn causal_mask_values() {
        let x = t(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let out = run(OpKind::CausalMask, &[], std::slice::from_ref(&x)).remove(0);
        let inf = f64::NEG_INFINITY;
        assert_eq!(out.data, [1.0, inf, 3.0, 4.0, 5.0, inf, 7.0, 8.0]);
        let out = run(OpKind::CausalMask, &[("value", Attr::Float(0.0))], &[t(&[3, 3], &[1.0; 9])]).remove(0);
        assert_eq!(out.data, [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0]);
    }

    /// torch.where(cond[2,1], a[3], b[]) broadcasts to [2,3]; the mask's rows pick a or b.
    #[test]
    fn where_broadcasts_all_three() {
        let cond = t(&[2, 1], &[1.0, 0.0]);
        let out = run(OpKind::Where, &[], &[cond, t(&[3], &[1.0, 2.0, 3.0]), t(&[], &[-1.0])]).remove(0);
        assert_eq!(out.shape, [2, 3]);
        assert_eq!(out.data, [1.0, 2.0, 3.0, -1.0, -1.0, -1.0]);
        let cond = t(&[3], &[0.0, 1.0, 1.0]);
        let out = run(OpKind::Where, &[], &[cond, t(&[2, 1], &[5.0, 6.0]), t(&[2, 3], &[0.0; 6])]).remove(0);
        assert_eq!(out.data, [0.0, 5.0, 5.0, 0.0, 6.0, 6.0]);
    }

    /// BERT's attention mask: a [T] padding mask over [B, T, T] scores, filled with −inf.
    #[test]
    fn masked_fill_broadcasts_the_mask() {
        let x = t(&[2, 2, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let inf = f64::NEG_INFINITY;
        let out = run(OpKind::MaskedFill, &[("value", Attr::Float(inf))], &[x.clone(), t(&[2], &[0.0, 1.0])]);
        assert_eq!(out[0].data, [1.0, inf, 3.0, inf, 5.0, inf, 7.0, inf]);
        let out = run(OpKind::MaskedFill, &[("value", Attr::Float(0.5))], &[x.clone(), t(&[2, 1, 1], &[1.0, 0.0])]);
        assert_eq!(out[0].data, [0.5, 0.5, 0.5, 0.5, 5.0, 6.0, 7.0, 8.0]);
        let out = run(OpKind::MaskedFill, &[("value", Attr::Float(9.0))], &[x.clone(), t(&[], &[0.0])]);
        assert_eq!(out[0].data, x.data);
    }

    #[test]
    fn fill_contiguous_cast() {
        let f = |dtype, value| {
            let attrs = attrs(
                OpKind::Fill,
                &[("shape", ints(&[2, 2])), ("dtype", Attr::DType(dtype)), ("value", Attr::Float(value))],
            );
            eval(OpKind::Fill, &attrs, &[], &[TensorType::new(dtype, vec![2, 2])]).unwrap().remove(0)
        };
        assert_eq!(f(DType::F32, 1.5).data, [1.5; 4]);
        // With a step: arange, row-major, in f64 (the executors round the stores).
        let arange = |dtype, value, step| {
            let given = [("shape", ints(&[2, 2])), ("dtype", Attr::DType(dtype)), ("value", Attr::Float(value)), ("step", Attr::Float(step))];
            eval(OpKind::Fill, &attrs(OpKind::Fill, &given), &[], &[TensorType::new(dtype, vec![2, 2])]).unwrap().remove(0)
        };
        assert_eq!(arange(DType::I64, 5.0, -3.0).data, [5.0, 2.0, -1.0, -4.0]);
        assert_eq!(arange(DType::Bf16, 0.0, 0.1).data, [0.0, 0.1, 0.2, 3.0 * 0.1]);
        assert_eq!(f(DType::I32, -7.0).data, [-7.0; 4]);
        assert_eq!(f(DType::Bool, 1.0).data, [1.0; 4]);
        assert_eq!(f(DType::F32, 1.5).shape, [2, 2]);
        let scalar = attrs(
            OpKind::Fill,
            &[("shape", ints(&[])), ("dtype", Attr::DType(DType::F32)), ("value", Attr::Float(1.0))],
        );
        let one = eval(OpKind::Fill, &scalar, &[], &[TensorType::new(DType::F32, vec![])]).unwrap();
        assert_eq!(one[0], Dense::new(vec![], vec![1.0]));

        let x = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        assert_eq!(run(OpKind::Contiguous, &[], std::slice::from_ref(&x))[0], x);

        let cast = |x: Dense, to: DType| {
            let attrs = attrs(OpKind::Cast, &[("to", Attr::DType(to))]);
            let dims: Vec<u64> = x.shape.iter().map(|&d| d as u64).collect();
            eval(OpKind::Cast, &attrs, &[x], &[TensorType::new(to, dims)]).unwrap().remove(0).data
        };
        assert_eq!(cast(t(&[3], &[1.9, -1.9, 0.0]), DType::I32), [1.0, -1.0, 0.0]);
        assert_eq!(cast(t(&[3], &[2.0, 0.0, -3.0]), DType::Bool), [1.0, 0.0, 1.0]);
        assert_eq!(cast(t(&[2], &[1.0, 0.0]), DType::F32), [1.0, 0.0]);
        assert_eq!(cast(t(&[1], &[0.1]), DType::Bf16), [0.1]);
    }
}
