//! The gradient rules: one function per forward op family, chosen by [`rule`], one
//! exhaustive match from `OpKind` to its rule. Each maps the gradient `dy` of the op's
//! output to the contribution of that op to the gradient of each input that wants one,
//! using existing ops only; docs/AUTODIFF.md has the same rules as a table.
//!
//! The rules live here rather than in the op table (src/ir/ops/table.rs) so that the IR
//! does not depend on autodiff. [`rule`] has no `_` arm on purpose: a new `OpKind` does
//! not compile until it is given a rule here, or `None`.
//!
//! Conventions: `x`, `a`, `b`, ... are the forward op's inputs, `y` its output, `dy` the
//! gradient of `y` (same type as `y`); every built value is a temporary of the input whose
//! gradient it computes (see `builder.rs`). A rule builds nothing for inputs that do not
//! want a gradient (index inputs never do: only float values get gradients). Backward,
//! optimizer and `fill` rows have no rule.

use super::builder::{Builder, GradCall, GradFn, Grads, shape_attr};
use crate::index::ValueId;
use crate::ir::graph::Graph;
use crate::ir::ops::{Attr, MatmulAttrs, OpKind};

type Rule = Result<Grads, String>;

/// The gradient rule of `kind`: maps the gradient of the output to the gradients of the
/// inputs. `None` for ops autodiff cannot differentiate through: backward and optimizer
/// ops, and `fill`, which has no inputs. Every `OpKind` is listed, in the op table's order.
pub(crate) fn rule(kind: OpKind) -> Option<GradFn> {
    match kind {
        OpKind::Add => Some(grad_add),
        OpKind::Sub => Some(grad_sub),
        OpKind::Mul => Some(grad_mul),
        OpKind::Div => Some(grad_div),
        OpKind::AddScalar => Some(grad_add_scalar),
        OpKind::MulScalar => Some(grad_mul_scalar),
        OpKind::PowScalar => Some(grad_pow_scalar),
        OpKind::Neg => Some(grad_neg),
        OpKind::Sin => Some(grad_sin),
        OpKind::Cos => Some(grad_cos),
        OpKind::Exp => Some(grad_exp),
        OpKind::Log => Some(grad_log),
        OpKind::Sqrt => Some(grad_sqrt),
        OpKind::Rsqrt => Some(grad_rsqrt),
        OpKind::Relu => Some(grad_relu),
        OpKind::ReluBackward => None,
        OpKind::Gelu => Some(grad_gelu),
        OpKind::GeluBackward => None,
        OpKind::Silu => Some(grad_silu),
        OpKind::SiluBackward => None,
        OpKind::Sigmoid => Some(grad_sigmoid),
        OpKind::SigmoidBackward => None,
        OpKind::Tanh => Some(grad_tanh),
        OpKind::TanhBackward => None,
        OpKind::Hardswish => Some(grad_hardswish),
        OpKind::HardswishBackward => None,
        OpKind::Hardsigmoid => Some(grad_hardsigmoid),
        OpKind::HardsigmoidBackward => None,
        OpKind::Softmax => Some(grad_softmax),
        OpKind::Gather => Some(grad_gather),
        OpKind::GatherBackward => None,
        OpKind::Cumsum => Some(grad_cumsum),
        OpKind::SoftmaxBackward => None,
        OpKind::CausalMask => Some(grad_causal_mask),
        OpKind::Matmul => Some(grad_matmul),
        OpKind::Attention => Some(grad_attention),
        OpKind::AttentionBackward => None,
        OpKind::MaskedAttention => Some(grad_masked_attention),
        OpKind::MaskedAttentionBackward | OpKind::AttentionBiasBackward => None,
        OpKind::DropoutAttention => Some(grad_dropout_attention),
        OpKind::DropoutAttentionBackward | OpKind::DropoutAttentionBiasBackward => None,
        OpKind::Sum => Some(grad_sum),
        OpKind::Mean => Some(grad_mean),
        OpKind::Reshape => Some(grad_reshape),
        // No gradient flows through it: its output never needs one (the expansion's analysis).
        OpKind::Detach => None,
        OpKind::Transpose => Some(grad_transpose),
        OpKind::Expand => Some(grad_expand),
        OpKind::Contiguous => Some(grad_contiguous),
        OpKind::Cast => Some(grad_cast),
        OpKind::Fill | OpKind::Random => None,
        OpKind::Embedding => Some(grad_embedding),
        OpKind::EmbeddingBackward => None,
        OpKind::EmbeddingBag => Some(grad_embedding_bag),
        OpKind::EmbeddingBagBackward => None,
        OpKind::LayerNorm => Some(grad_layer_norm),
        OpKind::LayerNormBackward => None,
        OpKind::RmsNorm => Some(grad_rms_norm),
        OpKind::RmsNormBackward => None,
        OpKind::BatchNorm => Some(grad_batch_norm),
        OpKind::BatchNormBackward => None,
        // No gradient flows through it: its outputs never need one (the expansion's analysis).
        OpKind::BatchNormStats => None,
        OpKind::Conv2d => Some(grad_conv2d),
        OpKind::Conv2dBackward => None,
        OpKind::Conv3d => Some(grad_conv3d),
        OpKind::Conv3dBackward => None,
        OpKind::MaxPool2d => Some(grad_max_pool2d),
        OpKind::MaxPool2dBackward => None,
        OpKind::CrossEntropy => Some(grad_cross_entropy),
        OpKind::CrossEntropyBackward => None,
        OpKind::LinearCrossEntropy => Some(grad_linear_cross_entropy),
        OpKind::Sgd => None,
        OpKind::SgdMomentum => None,
        OpKind::Adam => None,
        OpKind::Adamw => None,
        OpKind::Slice => Some(grad_slice),
        OpKind::Select => Some(grad_select),
        OpKind::SliceBackward => None,
        OpKind::SliceScatter => Some(grad_slice_scatter),
        OpKind::Cat => Some(grad_cat),
        OpKind::Extern => Some(grad_extern),
        OpKind::ExternView => Some(grad_extern),
        OpKind::ExternBackward => None,
        OpKind::Dropout => Some(grad_dropout),
        OpKind::DropoutBackward => None,
        OpKind::ConvTranspose2d => Some(grad_conv_transpose2d),
        OpKind::ConvTranspose2dBackward => None,
        OpKind::AdaptiveAvgPool2d => Some(grad_adaptive_avg_pool2d),
        OpKind::AdaptiveAvgPool2dBackward => None,
        OpKind::UpsampleNearest2d => Some(grad_upsample_nearest2d),
        OpKind::UpsampleNearest2dBackward => None,
        OpKind::UpsampleBilinear2d => Some(grad_upsample_bilinear2d),
        OpKind::UpsampleBilinear2dBackward => None,
        OpKind::GridSample => Some(grad_grid_sample),
        OpKind::GridSampleBackward => None,
        OpKind::BceWithLogits => Some(grad_bce_with_logits),
        OpKind::BceWithLogitsBackward => None,
        OpKind::Where => Some(grad_where),
        OpKind::MaskedFill => Some(grad_masked_fill),
        // A bool or index result: no gradient flows through a comparison or an argmax.
        OpKind::Compare | OpKind::CompareScalar | OpKind::Argmax => None,
        OpKind::Topk => Some(grad_topk),
        OpKind::Erf => Some(grad_erf),
        OpKind::ScatterAdd => Some(grad_scatter_add),
        // Made by the fusion pass after the expansion; a step that spells one out has its
        // gradient spelled out too.
        OpKind::Fused | OpKind::FusedNorm => None,
    }
}

/// Runs `grad(b, k)` for every input `k` that wants a gradient.
fn each(
    b: &mut Builder,
    call: &GradCall,
    mut grad: impl FnMut(&mut Builder, usize) -> Result<ValueId, String>,
) -> Rule {
    (0..call.inputs.len()).map(|k| if call.wants(k) { grad(b, k).map(Some) } else { Ok(None) }).collect()
}

/// The gradient of input `k` reduced to its type (see [`Builder::unbroadcast`]).
fn unbroadcast_to_input(b: &mut Builder, call: &GradCall, k: usize, g: ValueId) -> Result<ValueId, String> {
    let x = call.inputs[k];
    let ty = b.ty(x).clone();
    b.unbroadcast(x, g, &ty)
}

/// `-g`, as a temporary of `owner`.
fn negate(b: &mut Builder, owner: ValueId, g: ValueId) -> Result<ValueId, String> {
    b.op1(owner, OpKind::MulScalar, vec![g], &[("value", Attr::Float(-1.0))])
}

/// `add(a, b)`: ∂/∂a = ∂/∂b = 1, so `da = unbroadcast(dy)`, `db = unbroadcast(dy)`
/// (summed over the dimensions each operand was broadcast along).
fn grad_add(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, k| unbroadcast_to_input(b, call, k, dy))
}

/// `sub(a, b)`: `da = unbroadcast(dy)`, `db = -unbroadcast(dy)` (negated after the
/// reduction, on the smaller tensor).
fn grad_sub(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, k| {
        let g = unbroadcast_to_input(b, call, k, dy)?;
        if k == 0 { Ok(g) } else { negate(b, call.inputs[1], g) }
    })
}

/// `mul(a, b)`: ∂(ab)/∂a = b, so `da = unbroadcast(dy * b)`, `db = unbroadcast(dy * a)`.
fn grad_mul(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, k| {
        let (x, other) = (call.inputs[k], call.inputs[1 - k]);
        let g = b.op1(x, OpKind::Mul, vec![dy, other], &[])?;
        unbroadcast_to_input(b, call, k, g)
    })
}

/// `y = div(a, b)`: ∂y/∂a = 1/b and ∂y/∂b = -a/b² = -y/b, so `da = unbroadcast(dy / b)`,
/// `db = -unbroadcast(dy * y / b)` (reusing the forward output y instead of squaring b).
fn grad_div(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (num, den, y) = (call.inputs[0], call.inputs[1], call.outputs[0]);
    each(b, call, |b, k| {
        if k == 0 {
            let g = b.op1(num, OpKind::Div, vec![dy, den], &[])?;
            return unbroadcast_to_input(b, call, 0, g);
        }
        let dy_y = b.op1(den, OpKind::Mul, vec![dy, y], &[])?;
        let g = b.op1(den, OpKind::Div, vec![dy_y, den], &[])?;
        let g = unbroadcast_to_input(b, call, 1, g)?;
        negate(b, den, g)
    })
}

/// `add_scalar(x, value)`: a shift, `dx = dy` (no op).
fn grad_add_scalar(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |_, _| Ok(dy))
}

/// `mul_scalar(x, value)`: `dx = mul_scalar(dy, value)`.
fn grad_mul_scalar(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let value = call.attrs.float("value");
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::MulScalar, vec![dy], &[("value", Attr::Float(value))]))
}

/// `y = pow_scalar(x, exponent=e)`: ∂(xᵉ)/∂x = e·xᵉ⁻¹, so `dx = mul(dy, mul_scalar(pow_scalar(x,
/// exponent=e-1), value=e))`, PyTorch's `grad * (e * x.pow(e - 1))`. Two exponents are
/// special, as in PyTorch's pow_backward: e = 0 gives zeros (`fill`: 0·x⁻¹ would be NaN at
/// x = 0), and e = 1 gives dy itself (x⁰ = 1 everywhere, 0⁰ included).
fn grad_pow_scalar(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    let e = call.attrs.float("exponent");
    each(b, call, |b, _| {
        if e == 0.0 {
            let ty = b.ty(x).clone();
            let given = [("shape", shape_attr(ty.dims())?), ("dtype", Attr::DType(ty.dtype)), ("value", Attr::Float(0.0))];
            return b.op1(x, OpKind::Fill, vec![], &given);
        }
        if e == 1.0 {
            return Ok(dy);
        }
        let power = b.op1(x, OpKind::PowScalar, vec![x], &[("exponent", Attr::Float(e - 1.0))])?;
        let slope = b.op1(x, OpKind::MulScalar, vec![power], &[("value", Attr::Float(e))])?;
        b.op1(x, OpKind::Mul, vec![dy, slope], &[])
    })
}

/// `neg(x)`: `dx = neg(dy)`.
fn grad_neg(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::Neg, vec![dy], &[]))
}

/// `gather(x, index, axis)`: each picked element's gradient added back where it was
/// picked, `dx = gather_backward(dy, index, shape=x's, axis)`; index takes none.
fn grad_gather(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (x, index) = (call.inputs[0], call.inputs[1]);
    let dims: Vec<i64> = b.ty(x).dims().iter().map(|&d| d as i64).collect();
    let attrs = [("shape", Attr::Ints(dims)), ("axis", Attr::Int(call.attrs.int("axis")))];
    let dx = if call.wants(0) { Some(b.op1(x, OpKind::GatherBackward, vec![dy, index], &attrs)?) } else { None };
    Ok(vec![dx, None])
}

/// `topk(x, k, axis)`: the values are x's elements at the indices (a gather along the
/// axis), so `dx = gather_backward(dvalues, indices, shape=x's shape, axis)`: each value's
/// gradient at its position, zero elsewhere. The indices take none.
fn grad_topk(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    let rank = b.ty(x).rank() as i64;
    let axis = call.attrs.int("axis").rem_euclid(rank.max(1));
    let dims: Vec<i64> = b.ty(x).dims().iter().map(|&d| d as i64).collect();
    let attrs = [("shape", Attr::Ints(dims)), ("axis", Attr::Int(axis))];
    each(b, call, |b, _| b.op1(x, OpKind::GatherBackward, vec![dy, call.outputs[1]], &attrs))
}

/// `cumsum(x, axis, reverse)`: each x_i is in the sums from i on (from i back, with
/// reverse), so `dx = cumsum(dy, axis, !reverse)`.
fn grad_cumsum(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let attrs = vec![("axis", Attr::Int(call.attrs.int("axis"))), ("reverse", Attr::Bool(!call.attrs.bool("reverse")))];
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::Cumsum, vec![dy], &attrs))
}

/// `sin(x)`: sin′ = cos, so `dx = mul(dy, cos(x))` (reads x, as PyTorch does).
fn grad_sin(b: &mut Builder, call: &GradCall) -> Rule {
    let (dy, x) = (call.dy()?, call.inputs[0]);
    each(b, call, |b, _| {
        let c = b.op1(x, OpKind::Cos, vec![x], &[])?;
        b.op1(x, OpKind::Mul, vec![dy, c], &[])
    })
}

/// `cos(x)`: cos′ = −sin, so `dx = neg(mul(dy, sin(x)))` (reads x, as PyTorch does).
fn grad_cos(b: &mut Builder, call: &GradCall) -> Rule {
    let (dy, x) = (call.dy()?, call.inputs[0]);
    each(b, call, |b, _| {
        let s = b.op1(x, OpKind::Sin, vec![x], &[])?;
        let m = b.op1(x, OpKind::Mul, vec![dy, s], &[])?;
        b.op1(x, OpKind::Neg, vec![m], &[])
    })
}

/// `scatter_add(x, index, src, axis)`: y = x + (src added at the indexed positions), so
/// `dx = dy` and `dsrc = gather(dy, index, axis)` (each src element's gradient is the
/// gradient where it was added); the index takes none.
fn grad_scatter_add(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (index, src) = (call.inputs[1], call.inputs[2]);
    let dx = if call.wants(0) { Some(dy) } else { None };
    let attrs = [("axis", Attr::Int(call.attrs.int("axis")))];
    let dsrc = if call.wants(2) { Some(b.op1(src, OpKind::Gather, vec![dy, index], &attrs)?) } else { None };
    Ok(vec![dx, None, dsrc])
}

/// `erf(x)`: erf′ = (2/√π)·exp(−x²), so `dx = mul(dy, mul_scalar(exp(neg(x·x)), 2/√π))`
/// (reads x, as PyTorch does).
fn grad_erf(b: &mut Builder, call: &GradCall) -> Rule {
    let (dy, x) = (call.dy()?, call.inputs[0]);
    each(b, call, |b, _| {
        let square = b.op1(x, OpKind::Mul, vec![x, x], &[])?;
        let negated = b.op1(x, OpKind::Neg, vec![square], &[])?;
        let density = b.op1(x, OpKind::Exp, vec![negated], &[])?;
        let slope = b.op1(x, OpKind::MulScalar, vec![density], &[("value", Attr::Float(std::f64::consts::FRAC_2_SQRT_PI))])?;
        b.op1(x, OpKind::Mul, vec![dy, slope], &[])
    })
}

/// `y = exp(x)`: exp′ = exp, so `dx = mul(dy, y)` (reads the OUTPUT, as PyTorch does).
fn grad_exp(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::Mul, vec![dy, call.outputs[0]], &[]))
}

/// `log(x)`: log′(x) = 1/x, so `dx = div(dy, x)`.
fn grad_log(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    each(b, call, |b, _| b.op1(x, OpKind::Div, vec![dy, x], &[]))
}

/// `y = sqrt(x)`: √′(x) = 1/(2√x), so `dx = mul_scalar(div(dy, y), value=0.5)`, PyTorch's
/// `grad / (2 * result)` (halving is exact, so the two round alike).
fn grad_sqrt(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    each(b, call, |b, _| {
        let q = b.op1(x, OpKind::Div, vec![dy, call.outputs[0]], &[])?;
        b.op1(x, OpKind::MulScalar, vec![q], &[("value", Attr::Float(0.5))])
    })
}

/// `y = rsqrt(x)` = x^(−1/2): y′ = −½·x^(−3/2) = −½·y³, so `dx = mul_scalar(mul(dy,
/// pow_scalar(y, exponent=3)), value=-0.5)`, PyTorch's `-0.5 * grad * result.pow(3)`.
fn grad_rsqrt(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    each(b, call, |b, _| {
        let cube = b.op1(x, OpKind::PowScalar, vec![call.outputs[0]], &[("exponent", Attr::Float(3.0))])?;
        let g = b.op1(x, OpKind::Mul, vec![dy, cube], &[])?;
        b.op1(x, OpKind::MulScalar, vec![g], &[("value", Attr::Float(-0.5))])
    })
}

/// `y = relu(x)`: `dx = relu_backward(dy, y)`, dy where y > 0 (x > 0), else 0; it reads
/// the OUTPUT, so x need not be kept. At x = 0 this picks the subgradient 0.
fn grad_relu(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::ReluBackward, vec![dy, call.outputs[0]], &[]))
}

/// `gelu(x, approximate)`: `dx = gelu_backward(dy, x, approximate)` = dy · gelu'(x), the
/// exact derivative of the same form (tanh approximation or erf).
fn grad_gelu(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    each(b, call, |b, _| Ok(b.op_attrs(&[x], OpKind::GeluBackward, vec![dy, x], call.attrs.clone())?[0]))
}

/// `silu(x)` = x·s with s = sigmoid(x): `dx = silu_backward(dy, x)` = dy·s·(1 + x·(1 − s)).
fn grad_silu(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::SiluBackward, vec![dy, call.inputs[0]], &[]))
}

/// `y = sigmoid(x)`: σ′ = σ·(1 − σ), so `dx = sigmoid_backward(dy, y)` = dy·y·(1 − y); it
/// reads the OUTPUT, so x need not be kept.
fn grad_sigmoid(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::SigmoidBackward, vec![dy, call.outputs[0]], &[]))
}

/// `y = tanh(x)`: tanh′ = 1 − tanh², so `dx = tanh_backward(dy, y)` = dy·(1 − y²), from the
/// OUTPUT.
fn grad_tanh(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::TanhBackward, vec![dy, call.outputs[0]], &[]))
}

/// `hardswish(x)`: `dx = hardswish_backward(dy, x)`, PyTorch's derivative: 0 for x < −3,
/// (2x + 3)/6 for −3 ≤ x ≤ 3, 1 above (one-sided at the kinks ±3, as PyTorch picks).
fn grad_hardswish(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::HardswishBackward, vec![dy, call.inputs[0]], &[]))
}

/// `hardsigmoid(x)`: `dx = hardsigmoid_backward(dy, x)`, PyTorch's derivative: 1/6 strictly
/// between −3 and 3, 0 elsewhere (the kinks ±3 included, as PyTorch picks).
fn grad_hardsigmoid(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::HardsigmoidBackward, vec![dy, call.inputs[0]], &[]))
}

/// `y = softmax(x, axis)`: `dx = softmax_backward(dy, y, axis)` = y · (dy - Σ_axis dy·y),
/// the Jacobian-vector product of softmax, from its output.
fn grad_softmax(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let attrs = call.attrs.clone();
    each(b, call, |b, _| {
        Ok(b.op_attrs(&[call.inputs[0]], OpKind::SoftmaxBackward, vec![dy, call.outputs[0]], attrs.clone())?[0])
    })
}

/// `causal_mask(x, value)`: masked entries are constants, the rest pass x through, so
/// `dx = causal_mask(dy, value=0)` (dy with the masked entries zeroed).
fn grad_causal_mask(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::CausalMask, vec![dy], &[("value", Attr::Float(0.0))]))
}

/// `y = matmul(a, b, transpose_a=ta, transpose_b=tb)`, i.e. y = op(a) @ op(b):
///
/// | ta, tb | da | db |
/// |---|---|---|
/// | F, F | dy @ bᵀ | aᵀ @ dy |
/// | F, T | dy @ b | dyᵀ @ a |
/// | T, F | b @ dyᵀ | a @ dy |
/// | T, T | bᵀ @ dyᵀ | dyᵀ @ aᵀ |
///
/// each one matmul with transpose flags (no transposed copies), then summed over the batch
/// dimensions the operand was broadcast along (`unbroadcast`). Soundness: for
/// y = A B, dA = dy Bᵀ and dB = Aᵀ dy; with A = aᵀ, da = (dA)ᵀ, and so on. A 2-D `b` times
/// a batched `a` (not transposed) gets db from the flattened rows instead: Σ over batches
/// of aᵀ dy is Σ over every row (batch and T) of aᵀ dy, one 2-D product.
fn grad_matmul(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (a, m) = (call.inputs[0], call.inputs[1]);
    let MatmulAttrs { transpose_a: ta, transpose_b: tb } = MatmulAttrs::of(&call.attrs);
    each(b, call, |b, k| {
        // The 2-D weight of a batched product (`a[..., T, K]` times `m`, a linear layer):
        // the batch dimensions flatten into the rows of `a` and `dy` (views where their
        // layouts allow), so one 2-D product writes dm, the sum over every row. Per-batch
        // products summed afterwards would first hold a [batch, K, N] temporary: for
        // GPT-2's output head, batch times the size of the weight.
        if k == 1 && !ta && b.ty(m).rank() == 2 && b.ty(a).rank() > 2 {
            let (a_rows, dy_rows) = (flatten_rows(b, m, a)?, flatten_rows(b, m, dy)?);
            let (l, r) = if tb { (dy_rows, a_rows) } else { (a_rows, dy_rows) };
            let flags = [("transpose_a", Attr::Bool(true)), ("transpose_b", Attr::Bool(false))];
            return b.op1(m, OpKind::Matmul, vec![l, r], &flags);
        }
        // (left, right, transpose_left, transpose_right) of the matmul giving the gradient.
        let (l, r, tl, tr) = match (k, ta, tb) {
            (0, false, false) => (dy, m, false, true),
            (0, false, true) => (dy, m, false, false),
            (0, true, false) => (m, dy, false, true),
            (0, true, true) => (m, dy, true, true),
            (_, false, false) => (a, dy, true, false),
            (_, false, true) => (dy, a, true, false),
            (_, true, false) => (a, dy, false, false),
            (_, true, true) => (dy, a, true, true),
        };
        let owner = call.inputs[k];
        let flags = [("transpose_a", Attr::Bool(tl)), ("transpose_b", Attr::Bool(tr))];
        let g = b.op1(owner, OpKind::Matmul, vec![l, r], &flags)?;
        unbroadcast_to_input(b, call, k, g)
    })
}

/// `v[..., C]` as the 2-D `[rows, C]` its leading dimensions flatten into (a temporary of
/// `owner`): a view where `v`'s layout allows one, else through `contiguous`.
fn flatten_rows(b: &mut Builder, owner: ValueId, v: ValueId) -> Result<ValueId, String> {
    let dims = b.ty(v).dims();
    let (&columns, leading) = dims.split_last().ok_or("a matmul operand has rank 2 or more")?;
    let rows = leading.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).ok_or("the rows overflow u64")?;
    let shape = [rows, columns];
    let v = b.reshapable(owner, v, &shape)?;
    b.op1(owner, OpKind::Reshape, vec![v], &[("shape", shape_attr(&shape)?)])
}

/// `masked_attention(q, k, v, mask)`: as `attention`, with `masked_attention_backward`
/// reading the mask; the mask's own gradient (the scores' gradient summed over its
/// broadcast dimensions: a learned position bias's) is `attention_bias_backward`, emitted
/// only when the mask wants one, since it is as large as the mask.
fn grad_masked_attention(b: &mut Builder, call: &GradCall) -> Rule {
    let dout = call.dy()?;
    if call.dy.get(1).is_some_and(Option::is_some) {
        return Err("masked_attention was given a gradient of its lse, which has none".into());
    }
    let (q, k, v, mask) = (call.inputs[0], call.inputs[1], call.inputs[2], call.inputs[3]);
    let (out, lse) = (call.outputs[0], call.outputs[1]);
    let inputs = vec![dout, q, k, v, mask, out, lse];
    let mut grads: Vec<Option<ValueId>> = if (0..3).any(|k| call.wants(k)) {
        let outputs = b.op_attrs(&[q, k, v], OpKind::MaskedAttentionBackward, inputs.clone(), call.attrs.clone())?;
        outputs.into_iter().enumerate().map(|(k, g)| call.wants(k).then_some(g)).collect()
    } else {
        vec![None; 3]
    };
    let dmask = if call.wants(3) {
        Some(b.op_attrs(&[mask], OpKind::AttentionBiasBackward, inputs, call.attrs.clone())?[0])
    } else {
        None
    };
    grads.push(dmask);
    Ok(grads)
}

/// `dropout_attention(q, k, v, bias, seed)`: as `masked_attention`, its backward ops
/// reading the seed too and drawing the forward's mask again from it and the forward's
/// attributes (so no mask is saved). The seed takes no gradient (its row's
/// `inputs_without_gradient`).
fn grad_dropout_attention(b: &mut Builder, call: &GradCall) -> Rule {
    let dout = call.dy()?;
    if call.dy.get(1).is_some_and(Option::is_some) {
        return Err("dropout_attention was given a gradient of its lse, which has none".into());
    }
    let (q, k, v, bias, seed) = (call.inputs[0], call.inputs[1], call.inputs[2], call.inputs[3], call.inputs[4]);
    let (out, lse) = (call.outputs[0], call.outputs[1]);
    let inputs = vec![dout, q, k, v, bias, seed, out, lse];
    let mut grads: Vec<Option<ValueId>> = if (0..3).any(|k| call.wants(k)) {
        let outputs = b.op_attrs(&[q, k, v], OpKind::DropoutAttentionBackward, inputs.clone(), call.attrs.clone())?;
        outputs.into_iter().enumerate().map(|(k, g)| call.wants(k).then_some(g)).collect()
    } else {
        vec![None; 3]
    };
    let dbias = if call.wants(3) {
        Some(b.op_attrs(&[bias], OpKind::DropoutAttentionBiasBackward, inputs, call.attrs.clone())?[0])
    } else {
        None
    };
    grads.push(dbias);
    grads.push(None);
    Ok(grads)
}

/// `out, lse = attention(q, k, v, causal, scale)`: `dq, dk, dv = attention_backward(dout,
/// q, k, v, out, lse, causal, scale)`, FlashAttention-2's exact gradients, which recompute
/// the probabilities p = exp(scale·q·k − lse) from the saved lse (so `out` and `lse` are
/// activations, and no T×S value exists). dk and dv sum over the query heads that share a
/// key/value head. `lse` takes no gradient (its row's `outputs_without_gradient`); the expansion
/// refuses a loss that depends on it, and this rule refuses to be called with one. Outputs
/// no input wants stay unused temporaries, as for the norms. Under `transpose_out`, `dout`
/// has `out`'s layout, rows before heads, which the backward op takes with the attribute.
fn grad_attention(b: &mut Builder, call: &GradCall) -> Rule {
    let dout = call.dy()?;
    if call.dy.get(1).is_some_and(Option::is_some) {
        return Err("attention was given a gradient of its lse, which has none".into());
    }
    let (q, k, v) = (call.inputs[0], call.inputs[1], call.inputs[2]);
    let (out, lse) = (call.outputs[0], call.outputs[1]);
    let inputs = vec![dout, q, k, v, out, lse];
    let outputs = b.op_attrs(&[q, k, v], OpKind::AttentionBackward, inputs, call.attrs.clone())?;
    Ok(outputs.into_iter().enumerate().map(|(k, g)| call.wants(k).then_some(g)).collect())
}

/// `sum` and `mean` over `axes`: every reduced element of x contributed with weight 1
/// (sum) or 1/count (mean), so dx is dy (scaled by 1/count for mean, on the small tensor)
/// reshaped to the keepdim shape (when keepdim=false; through `contiguous` if dy's layout
/// cannot be viewed so) and expanded back to x's shape (a view).
fn grad_reduce(b: &mut Builder, call: &GradCall, mean: bool) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    each(b, call, |b, _| {
        let x_ty = b.ty(x).clone();
        let rank = x_ty.rank();
        let axes: Vec<usize> = call
            .attrs
            .ints("axes")
            .iter()
            .map(|&a| if a < 0 { (a + rank as i64) as usize } else { a as usize })
            .collect();
        let kept: Vec<u64> = (0..rank).map(|i| if axes.contains(&i) { 1 } else { x_ty.dims()[i] }).collect();
        let mut g = dy;
        if mean {
            let count = axes.iter().map(|&i| x_ty.dims()[i]).product::<u64>().max(1);
            g = b.op1(x, OpKind::MulScalar, vec![g], &[("value", Attr::Float(1.0 / count as f64))])?;
        }
        if b.ty(g).dims() != kept.as_slice() {
            g = b.reshapable(x, g, &kept)?;
            g = b.op1(x, OpKind::Reshape, vec![g], &[("shape", shape_attr(&kept)?)])?;
        }
        if b.ty(g).shape != x_ty.shape {
            g = b.op1(x, OpKind::Expand, vec![g], &[("shape", shape_attr(x_ty.dims())?)])?;
        }
        Ok(g)
    })
}

/// `sum(x, axes, keepdim)`: see [`grad_reduce`].
fn grad_sum(b: &mut Builder, call: &GradCall) -> Rule {
    grad_reduce(b, call, false)
}

/// `mean(x, axes, keepdim)`: see [`grad_reduce`].
fn grad_mean(b: &mut Builder, call: &GradCall) -> Rule {
    grad_reduce(b, call, true)
}

/// `reshape(x, shape)`: the same elements in the same order, so `dx = reshape(dy, x's
/// shape)`, through `contiguous` when dy's layout cannot be viewed under x's shape.
fn grad_reshape(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    each(b, call, |b, _| {
        let dims = b.ty(x).dims().to_vec();
        let g = b.reshapable(x, dy, &dims)?;
        let shape = shape_attr(&dims)?;
        b.op1(x, OpKind::Reshape, vec![g], &[("shape", shape)])
    })
}

/// `transpose(x, perm)`: y dim i is x dim perm[i], so `dx = transpose(dy, inverse perm)`
/// (a view).
fn grad_transpose(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let perm = call.attrs.ints("perm");
    let mut inverse = vec![0i64; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p as usize] = i as i64;
    }
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::Transpose, vec![dy], &[("perm", Attr::Ints(inverse.clone()))]))
}

/// `expand(x, shape)`: a broadcast, so `dx = unbroadcast(dy)`.
fn grad_expand(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, k| unbroadcast_to_input(b, call, k, dy))
}

/// `contiguous(x)`: a copy, `dx = dy` (no op).
fn grad_contiguous(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |_, _| Ok(dy))
}

/// `cast(x, to)` between float dtypes: the identity up to rounding, so `dx = cast(dy,
/// to=x's dtype)` (dy itself when the dtypes are equal). Casts to or from integer and bool
/// dtypes cut the gradient path (those values never get gradients), so the rule is never
/// asked for them.
fn grad_cast(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    each(b, call, |b, _| {
        let dtype = b.ty(x).dtype;
        if b.ty(dy).dtype == dtype { Ok(dy) } else { b.op1(x, OpKind::Cast, vec![dy], &[("to", Attr::DType(dtype))]) }
    })
}

/// `embedding(table, ids)`: row ids[i] of the table is copied to out[i], so
/// `dtable = embedding_backward(dy, ids, vocab=V)` adds each dy row into the row it came
/// from. ids get no gradient.
fn grad_embedding(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (table, ids) = (call.inputs[0], call.inputs[1]);
    each(b, call, |b, k| {
        if k != 0 {
            return Err("the ids of embedding have no gradient".into());
        }
        let vocab = i64::try_from(b.ty(table).dims()[0]).map_err(|_| "the vocabulary is too large".to_string())?;
        b.op1(table, OpKind::EmbeddingBackward, vec![dy, ids], &[("vocab", Attr::Int(vocab))])
    })
}

/// `embedding_bag(table, ids, offsets, mode)`: `dtable = embedding_bag_backward(dy, ids,
/// offsets, vocab, mode)`, each bag's dy row (over the bag's length for mean) added into
/// the rows its ids name. ids and offsets have none.
fn grad_embedding_bag(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (table, ids, offsets) = (call.inputs[0], call.inputs[1], call.inputs[2]);
    each(b, call, |b, k| {
        if k != 0 {
            return Err("the ids and offsets of embedding_bag have no gradient".into());
        }
        let vocab = i64::try_from(b.ty(table).dims()[0]).map_err(|_| "the vocabulary is too large".to_string())?;
        let mode = call.attrs.get("mode").cloned().unwrap_or(Attr::Str("sum".into()));
        b.op1(table, OpKind::EmbeddingBagBackward, vec![dy, ids, offsets], &[("vocab", Attr::Int(vocab)), ("mode", mode)])
    })
}

/// The norms: one `*_backward(dy, x, gamma, eps)` op gives (dx, dgamma, dbeta) at once,
/// the exact gradients of normalisation with batch (or per-row) statistics; outputs no
/// input wants stay unused temporaries.
fn grad_norm(b: &mut Builder, call: &GradCall, backward: OpKind) -> Rule {
    let dy = call.dy()?;
    let (x, gamma) = (call.inputs[0], call.inputs[1]);
    let outputs = b.op_attrs(&call.inputs, backward, vec![dy, x, gamma], call.attrs.clone())?;
    Ok(outputs.into_iter().enumerate().map(|(k, g)| call.wants(k).then_some(g)).collect())
}

/// `layer_norm(x, gamma, beta)`: `dx, dgamma, dbeta = layer_norm_backward(dy, x, gamma)`.
fn grad_layer_norm(b: &mut Builder, call: &GradCall) -> Rule {
    grad_norm(b, call, OpKind::LayerNormBackward)
}

/// `rms_norm(x, gamma)`: `dx, dgamma = rms_norm_backward(dy, x, gamma, eps)`, recomputing
/// the row statistics from x; an output no input wants stays an unused temporary.
fn grad_rms_norm(b: &mut Builder, call: &GradCall) -> Rule {
    grad_norm(b, call, OpKind::RmsNormBackward)
}

/// `batch_norm(x, gamma, beta)` (training mode): `dx, dgamma, dbeta =
/// batch_norm_backward(dy, x, gamma)`, which includes the paths through the batch mean
/// and variance.
fn grad_batch_norm(b: &mut Builder, call: &GradCall) -> Rule {
    grad_norm(b, call, OpKind::BatchNormBackward)
}

/// The convolutions (and grid_sample, whose second input is the grid): one
/// `*_backward(dy, x, w, <the forward's attributes>)` op gives (dx, dw) at once; an output
/// no input wants stays an unused temporary.
fn grad_conv(b: &mut Builder, call: &GradCall, backward: OpKind) -> Rule {
    let dy = call.dy()?;
    let (x, w) = (call.inputs[0], call.inputs[1]);
    let outputs = b.op_attrs(&[x, w], backward, vec![dy, x, w], call.attrs.clone())?;
    Ok(outputs.into_iter().enumerate().map(|(k, g)| call.wants(k).then_some(g)).collect())
}

/// `conv2d(x, w, stride, padding, dilation, groups)`: `dx, dw = conv2d_backward(dy, x, w,
/// ...)` with the same attributes (the transposed convolution of dy with w, and the
/// correlation of x with dy, group by group).
fn grad_conv2d(b: &mut Builder, call: &GradCall) -> Rule {
    grad_conv(b, call, OpKind::Conv2dBackward)
}

/// `conv3d(x, w, ...)`: `dx, dw = conv3d_backward(dy, x, w, ...)`, as conv2d's.
fn grad_conv3d(b: &mut Builder, call: &GradCall) -> Rule {
    grad_conv(b, call, OpKind::Conv3dBackward)
}

/// `grid_sample(x, grid, ...)`: `dx, dgrid = grid_sample_backward(dy, x, grid, ...)` with the
/// same attributes: dy spread back into the pixels each sample read, and the grid's
/// gradient through the bilinear weights (0 under nearest sampling, as PyTorch's).
fn grad_grid_sample(b: &mut Builder, call: &GradCall) -> Rule {
    grad_conv(b, call, OpKind::GridSampleBackward)
}

/// `conv_transpose2d(x, w, ...)`: `dx, dw = conv_transpose2d_backward(dy, x, w, ...)` with
/// the same attributes. y is linear in x with the adjoint of conv2d's map, so dx is
/// conv2d(dy, w) (the transpose of the transpose, on x's positions); dw collects x times
/// dy over every pair the forward multiplied.
fn grad_conv_transpose2d(b: &mut Builder, call: &GradCall) -> Rule {
    grad_conv(b, call, OpKind::ConvTranspose2dBackward)
}

/// `max_pool2d(x, kernel, stride, padding)`: each window's output is its (first) maximum,
/// so `dx = max_pool2d_backward(dy, x, ...)` routes dy to that element (overlapping
/// windows add). Exact away from ties.
fn grad_max_pool2d(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    each(b, call, |b, _| Ok(b.op_attrs(&[x], OpKind::MaxPool2dBackward, vec![dy, x], call.attrs.clone())?[0]))
}

/// `loss = cross_entropy(logits, labels, ignore_index, label_smoothing)`: `dlogits =
/// cross_entropy_backward(dloss, logits, labels, ignore_index, label_smoothing)` = dloss ·
/// (softmax(logits) − (1 − ε)·onehot(labels) − ε/C) / (rows not ignored), 0 on ignored rows.
/// Labels get no gradient. Under `f32_loss` (half logits, an f32 loss) dloss is f32 and
/// dlogits has the logits' type: the gradient the unfused cast's rule (a cast back) gives.
fn grad_cross_entropy(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (logits, labels) = (call.inputs[0], call.inputs[1]);
    each(b, call, |b, k| {
        if k != 0 {
            return Err("the labels of cross_entropy have no gradient".into());
        }
        let attrs = call.attrs.clone();
        Ok(b.op_attrs(&[logits], OpKind::CrossEntropyBackward, vec![dy, logits, labels], attrs)?[0])
    })
}

/// `loss, dx, dweight, chunk = linear_cross_entropy(x, weight, labels)`: dx and dweight are
/// the gradients for dloss = 1, computed with the loss chunk by chunk. When dloss is the
/// seed (a fill of 1: the loss is what `backward` differentiates) they are the
/// contributions as they are; else each is scaled by dloss (cast to its dtype). Labels get
/// no gradient.
fn grad_linear_cross_entropy(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let unit = is_one(b.graph(), dy);
    each(b, call, |b, k| {
        let g = match k {
            0 => call.outputs[1],
            1 => call.outputs[2],
            _ => return Err("the labels of linear_cross_entropy have no gradient".into()),
        };
        if unit {
            return Ok(g);
        }
        let owner = call.inputs[k];
        let dtype = b.ty(g).dtype;
        let scale = if b.ty(dy).dtype == dtype { dy } else { b.op1(owner, OpKind::Cast, vec![dy], &[("to", Attr::DType(dtype))])? };
        b.op1(owner, OpKind::Mul, vec![g, scale], &[])
    })
}

/// Whether `v` is a scalar `fill` of 1 (the seed of a loss).
fn is_one(graph: &Graph, v: ValueId) -> bool {
    let Some(op) = graph.def_op(v) else { return false };
    let op = &graph.ops[op];
    op.kind == OpKind::Fill && graph.values[v].ty.rank() == 0 && op.attrs.float("value") == 1.0
}

/// `slice(x, axis, start, end, step)`: each element taken is one element of y and the rest
/// of x reaches nothing, so `dx = slice_backward(dy, shape=x's shape, axis, start, end,
/// step)`: dy at the slice, zeros elsewhere.
fn grad_slice(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    let [axis, start, end, step] = ["axis", "start", "end", "step"].map(|name| call.attrs.int(name));
    each(b, call, |b, _| slice_backward(b, x, dy, axis, start, end, step))
}

/// `select(x, axis, index)`: the slice `index..index+1` with the axis dropped, so dy gets
/// the axis back (a reshape: a view) and goes through slice's gradient.
fn grad_select(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    let (axis, index) = (call.attrs.int("axis"), call.attrs.int("index"));
    each(b, call, |b, _| {
        let rank = b.ty(x).rank();
        let axis = if axis < 0 { axis + rank as i64 } else { axis };
        let mut kept = b.ty(dy).dims().to_vec();
        kept.insert(axis as usize, 1);
        let g = b.reshapable(x, dy, &kept)?;
        let g = b.op1(x, OpKind::Reshape, vec![g], &[("shape", shape_attr(&kept)?)])?;
        slice_backward(b, x, g, axis, index, index + 1, 1)
    })
}

/// `out = slice_scatter(x, src, axis, start, end, step)`: the slice of out is src and the
/// rest is x, so `dsrc = slice(dy, ...)` (a view of dy, no copy) and `dx = slice_scatter(dy,
/// zeros, ...)`: dy with the slice zeroed, the zeros one `fill` scalar expanded (a view).
fn grad_slice_scatter(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (x, src) = (call.inputs[0], call.inputs[1]);
    let slice_attrs = ["axis", "start", "end", "step"].map(|name| (name, Attr::Int(call.attrs.int(name))));
    each(b, call, |b, k| {
        if k == 1 {
            return b.op1(src, OpKind::Slice, vec![dy], &slice_attrs);
        }
        let ty = b.ty(src).clone();
        let zero = b.op1(x, OpKind::Fill, vec![], &[("shape", Attr::Ints(vec![])), ("dtype", Attr::DType(ty.dtype))])?;
        let zeros = b.op1(x, OpKind::Expand, vec![zero], &[("shape", shape_attr(ty.dims())?)])?;
        b.op1(x, OpKind::SliceScatter, vec![dy, zeros], &slice_attrs)
    })
}

/// `slice_backward(dy, shape=x's shape, ...)`, a temporary of `x`.
fn slice_backward(b: &mut Builder, x: ValueId, dy: ValueId, axis: i64, start: i64, end: i64, step: i64) -> Result<ValueId, String> {
    let attrs = [
        ("shape", shape_attr(b.ty(x).dims())?),
        ("axis", Attr::Int(axis)),
        ("start", Attr::Int(start)),
        ("end", Attr::Int(end)),
        ("step", Attr::Int(step)),
    ];
    b.op1(x, OpKind::SliceBackward, vec![dy], &attrs)
}

/// `cat(xs..., axis)`: input k is the part of y from its offset along the axis, so
/// `dx_k = slice(dy, axis, offset_k, offset_k + n_k)`: a view of dy, no copy.
fn grad_cat(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let rank = b.ty(dy).rank() as i64;
    let axis = call.attrs.int("axis");
    let axis = if axis < 0 { axis + rank } else { axis };
    let mut offsets = Vec::with_capacity(call.inputs.len());
    let mut at = 0i64;
    for &x in &call.inputs {
        let n = b.ty(x).dims()[axis as usize] as i64;
        offsets.push((at, at + n));
        at += n;
    }
    each(b, call, |b, k| {
        let (start, end) = offsets[k];
        let attrs = [("axis", Attr::Int(axis)), ("start", Attr::Int(start)), ("end", Attr::Int(end))];
        b.op1(call.inputs[k], OpKind::Slice, vec![dy], &attrs)
    })
}

/// `extern(xs...)` (or `extern_view(x)`): another framework's op, whose gradient memplan
/// cannot write, modelled for memory: for each input that wants a gradient, one
/// `extern_backward(dy, xs...)` reading the output's gradient and every input (what a
/// backward kernel may need; more than most read, so the plan errs on the large side),
/// writing a gradient of that input's type, costing the forward's FLOPs.
fn grad_extern(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let target = call.attrs.str("target").to_string();
    let flops = call.attrs.get("flops").cloned().unwrap_or(Attr::Int(0));
    each(b, call, |b, k| {
        let x = call.inputs[k];
        let attrs = [
            ("target", Attr::Str(format!("{target}:backward:{k}"))),
            ("shape", shape_attr(b.ty(x).dims())?),
            ("dtype", Attr::DType(b.ty(x).dtype)),
            ("flops", flops.clone()),
        ];
        let inputs = std::iter::once(dy).chain(call.inputs.iter().copied()).collect();
        b.op1(x, OpKind::ExternBackward, inputs, &attrs)
    })
}

/// `y = dropout(x, seed, p, stream)`: for a fixed seed, y_i = m_i · x_i / (1 − p) with a
/// mask m_i ∈ {0, 1} that depends on (seed, stream, i) only, so y is linear in x and
/// `dx = dropout_backward(dy, seed, p, stream)` = m_i · dy_i / (1 − p), the same mask
/// regenerated from the same seed value and attributes (no mask is saved). The seed is an
/// integer: no gradient.
fn grad_dropout(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (x, seed) = (call.inputs[0], call.inputs[1]);
    each(b, call, |b, k| {
        if k != 0 {
            return Err("the seed of dropout has no gradient".into());
        }
        Ok(b.op_attrs(&[x], OpKind::DropoutBackward, vec![dy, seed], call.attrs.clone())?[0])
    })
}

/// The forward's input shape and output size, as the resampling backward ops take them.
fn resample_attrs(b: &Builder, call: &GradCall) -> Result<[(&'static str, Attr); 2], String> {
    let shape = shape_attr(b.ty(call.inputs[0]).dims())?;
    Ok([("shape", shape), ("output_size", Attr::Ints(call.attrs.ints("output_size").to_vec()))])
}

/// `adaptive_avg_pool2d(x, output_size)`: output pixel (i, j) is the mean of its bin, so
/// each x pixel gets dy(i, j) / (bin area) from every bin holding it: `dx =
/// adaptive_avg_pool2d_backward(dy, shape=x's shape, output_size)` (bins overlap when
/// the output size does not divide the input's; their shares add). Linear, so exact.
fn grad_adaptive_avg_pool2d(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| {
        let attrs = resample_attrs(b, call)?;
        b.op1(call.inputs[0], OpKind::AdaptiveAvgPool2dBackward, vec![dy], &attrs)
    })
}

/// `upsample_nearest2d(x, output_size)`: each output pixel is a copy of one x pixel, so
/// `dx = upsample_nearest2d_backward(dy, shape=x's shape, output_size)` adds up the dy of
/// every copy (0 for a pixel nothing copied, when downsampling).
fn grad_upsample_nearest2d(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| {
        let attrs = resample_attrs(b, call)?;
        b.op1(call.inputs[0], OpKind::UpsampleNearest2dBackward, vec![dy], &attrs)
    })
}

/// `upsample_bilinear2d(x, output_size, align_corners)`: linear in x, each output pixel a
/// weighted sum of four x pixels, so `dx = upsample_bilinear2d_backward(dy, shape=x's
/// shape, output_size, align_corners)` adds each dy element into those pixels times their
/// weights.
fn grad_upsample_bilinear2d(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| {
        let [shape, size] = resample_attrs(b, call)?;
        let attrs = [shape, size, ("align_corners", Attr::Bool(call.attrs.bool("align_corners")))];
        b.op1(call.inputs[0], OpKind::UpsampleBilinear2dBackward, vec![dy], &attrs)
    })
}

/// `loss = bce_with_logits(x, t)` = mean(max(x, 0) − x·t + log(1 + e^−|x|)): per element
/// the derivative in x is σ(x) − t (on both sides of 0), so `dlogits =
/// bce_with_logits_backward(dloss, x, t)` = dloss·(σ(x) − t)/numel. The targets take no
/// gradient (its row's `inputs_without_gradient`): the expansion refuses a loss that depends on a
/// param through them, and this rule refuses to be asked for one.
fn grad_bce_with_logits(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (logits, targets) = (call.inputs[0], call.inputs[1]);
    each(b, call, |b, k| {
        if k != 0 {
            return Err("the targets of bce_with_logits have no gradient".into());
        }
        b.op1(logits, OpKind::BceWithLogitsBackward, vec![dy, logits, targets], &[])
    })
}

/// `out = where(cond, a, b)`: out takes a's element where cond holds and b's elsewhere, so
/// `da = unbroadcast(where(cond, dy, 0))` and `db = unbroadcast(masked_fill(dy, cond,
/// value=0))` (the same as `where(cond, 0, dy)`, without a zero tensor), each summed over
/// the dimensions its operand was broadcast along. The zero is one `fill` scalar, which
/// `where` broadcasts. cond is bool: no gradient.
fn grad_where(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let cond = call.inputs[0];
    each(b, call, |b, k| {
        let x = call.inputs[k];
        let g = match k {
            1 => {
                let dtype = Attr::DType(b.ty(dy).dtype);
                let zero = b.op1(x, OpKind::Fill, vec![], &[("shape", Attr::Ints(vec![])), ("dtype", dtype)])?;
                b.op1(x, OpKind::Where, vec![cond, dy, zero], &[])?
            }
            2 => b.op1(x, OpKind::MaskedFill, vec![dy, cond], &[("value", Attr::Float(0.0))])?,
            _ => return Err("the cond of where has no gradient".into()),
        };
        unbroadcast_to_input(b, call, k, g)
    })
}

/// `masked_fill(x, mask, value)`: filled elements are constants and the rest pass x
/// through, so `dx = masked_fill(dy, mask, value=0)` (out has x's shape: nothing to
/// reduce). The mask is bool: no gradient.
fn grad_masked_fill(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (x, mask) = (call.inputs[0], call.inputs[1]);
    each(b, call, |b, _| b.op1(x, OpKind::MaskedFill, vec![dy, mask], &[("value", Attr::Float(0.0))]))
}
