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
use crate::ir::ops::{Attr, OpKind};

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
        OpKind::Relu => Some(grad_relu),
        OpKind::ReluBackward => None,
        OpKind::Gelu => Some(grad_gelu),
        OpKind::GeluBackward => None,
        OpKind::Softmax => Some(grad_softmax),
        OpKind::SoftmaxBackward => None,
        OpKind::CausalMask => Some(grad_causal_mask),
        OpKind::Matmul => Some(grad_matmul),
        OpKind::Attention => Some(grad_attention),
        OpKind::AttentionBackward => None,
        OpKind::Sum => Some(grad_sum),
        OpKind::Mean => Some(grad_mean),
        OpKind::Reshape => Some(grad_reshape),
        OpKind::Transpose => Some(grad_transpose),
        OpKind::Expand => Some(grad_expand),
        OpKind::Contiguous => Some(grad_contiguous),
        OpKind::Cast => Some(grad_cast),
        OpKind::Fill => None,
        OpKind::Embedding => Some(grad_embedding),
        OpKind::EmbeddingBackward => None,
        OpKind::LayerNorm => Some(grad_layer_norm),
        OpKind::LayerNormBackward => None,
        OpKind::BatchNorm => Some(grad_batch_norm),
        OpKind::BatchNormBackward => None,
        OpKind::Conv2d => Some(grad_conv2d),
        OpKind::Conv2dBackward => None,
        OpKind::MaxPool2d => Some(grad_max_pool2d),
        OpKind::MaxPool2dBackward => None,
        OpKind::CrossEntropy => Some(grad_cross_entropy),
        OpKind::CrossEntropyBackward => None,
        OpKind::Sgd => None,
        OpKind::SgdMomentum => None,
        OpKind::Adam => None,
        OpKind::Adamw => None,
    }
}

/// The outputs of `kind` (by position) that no gradient flows into: `attention`'s `lse`,
/// saved for its backward op. A loss that depends on a param through one of them is an
/// error of the expansion ([`AutodiffError::NoGradientThrough`](super::AutodiffError)),
/// never a silently incomplete gradient. Every other output of a differentiable op takes a
/// gradient, so the catch-all is the rule, not an omission.
pub(crate) fn outputs_without_gradient(kind: OpKind) -> &'static [usize] {
    match kind {
        OpKind::Attention => &[1],
        _ => &[],
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

/// `y = relu(x)`: `dx = relu_backward(dy, y)`, dy where y > 0 (x > 0), else 0; it reads
/// the OUTPUT, so x need not be kept. At x = 0 this picks the subgradient 0.
fn grad_relu(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::ReluBackward, vec![dy, call.outputs[0]], &[]))
}

/// `gelu(x)`: `dx = gelu_backward(dy, x)` = dy · gelu'(x) (the tanh approximation's
/// exact derivative).
fn grad_gelu(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    each(b, call, |b, _| b.op1(call.inputs[0], OpKind::GeluBackward, vec![dy, call.inputs[0]], &[]))
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
/// y = A B, dA = dy Bᵀ and dB = Aᵀ dy; with A = aᵀ, da = (dA)ᵀ, and so on.
fn grad_matmul(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (a, m) = (call.inputs[0], call.inputs[1]);
    let (ta, tb) = (call.attrs.bool("transpose_a"), call.attrs.bool("transpose_b"));
    each(b, call, |b, k| {
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

/// `out, lse = attention(q, k, v, causal, scale)`: `dq, dk, dv = attention_backward(dout,
/// q, k, v, out, lse, causal, scale)`, FlashAttention-2's exact gradients, which recompute
/// the probabilities p = exp(scale·q·k − lse) from the saved lse (so `out` and `lse` are
/// activations, and no T×S value exists). dk and dv sum over the query heads that share a
/// key/value head. `lse` takes no gradient (see [`outputs_without_gradient`]); the expansion
/// refuses a loss that depends on it, and this rule refuses to be called with one. Outputs
/// no input wants stay unused temporaries, as for the norms.
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
/// reshaped to the keepdim shape (when keepdim=false; through `contiguous` if dy is a
/// non-contiguous view) and expanded back to x's shape (a view).
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
            g = b.contiguous(x, g)?;
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
/// shape)`, through `contiguous` when dy is a transposed or broadcast view.
fn grad_reshape(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    each(b, call, |b, _| {
        let g = b.contiguous(x, dy)?;
        let shape = shape_attr(b.ty(x).dims())?;
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

/// `batch_norm(x, gamma, beta)` (training mode): `dx, dgamma, dbeta =
/// batch_norm_backward(dy, x, gamma)`, which includes the paths through the batch mean
/// and variance.
fn grad_batch_norm(b: &mut Builder, call: &GradCall) -> Rule {
    grad_norm(b, call, OpKind::BatchNormBackward)
}

/// `conv2d(x, w, stride, padding)`: `dx, dw = conv2d_backward(dy, x, w, stride,
/// padding)` (the transposed convolution and the correlation of x with dy), one op for
/// both.
fn grad_conv2d(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (x, w) = (call.inputs[0], call.inputs[1]);
    let outputs = b.op_attrs(&[x, w], OpKind::Conv2dBackward, vec![dy, x, w], call.attrs.clone())?;
    Ok(outputs.into_iter().enumerate().map(|(k, g)| call.wants(k).then_some(g)).collect())
}

/// `max_pool2d(x, kernel, stride, padding)`: each window's output is its (first) maximum,
/// so `dx = max_pool2d_backward(dy, x, ...)` routes dy to that element (overlapping
/// windows add). Exact away from ties.
fn grad_max_pool2d(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let x = call.inputs[0];
    each(b, call, |b, _| Ok(b.op_attrs(&[x], OpKind::MaxPool2dBackward, vec![dy, x], call.attrs.clone())?[0]))
}

/// `loss = cross_entropy(logits, labels)`: `dlogits = cross_entropy_backward(dloss,
/// logits, labels)` = dloss · (softmax(logits) - onehot(labels)) / N. Labels get no
/// gradient.
fn grad_cross_entropy(b: &mut Builder, call: &GradCall) -> Rule {
    let dy = call.dy()?;
    let (logits, labels) = (call.inputs[0], call.inputs[1]);
    each(b, call, |b, k| {
        if k != 0 {
            return Err("the labels of cross_entropy have no gradient".into());
        }
        b.op1(logits, OpKind::CrossEntropyBackward, vec![dy, logits, labels], &[])
    })
}
