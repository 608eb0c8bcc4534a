//! The type rules and FLOPs functions the op table's rows point to.
//!
//! Every rule checks its inputs and attribute values and returns a one-line message naming
//! the types involved; none panics, whatever the types. Sizes use checked arithmetic, and
//! every rule ends with `done`, which rejects an output whose byte size does not fit in a
//! u64.

use crate::ir::ops::{Attr, Attrs};
use crate::ir::types::{DType, Shape, TensorType};

pub(super) type Rule = Result<Vec<TensorType>, String>;

/// Numpy broadcasting of two shapes.
pub fn broadcast(a: &Shape, b: &Shape) -> Result<Shape, String> {
    let rank = a.rank().max(b.rank());
    let mut dims = vec![0; rank];
    for (i, slot) in dims.iter_mut().enumerate() {
        let da = if i < rank - a.rank() { 1 } else { a.dims()[i - (rank - a.rank())] };
        let db = if i < rank - b.rank() { 1 } else { b.dims()[i - (rank - b.rank())] };
        *slot = match (da, db) {
            _ if da == db => da,
            (1, d) | (d, 1) => d,
            _ => return Err(format!("shapes {a} and {b} do not broadcast: dimension {i} is {da} vs {db}")),
        };
    }
    Ok(Shape(dims))
}

/// The rule's outputs, once each is known to have a byte size that fits in a `u64`.
pub(super) fn done(outputs: Vec<TensorType>) -> Rule {
    match outputs.iter().find(|t| t.bytes().is_none()) {
        Some(t) => Err(format!("the output {t} would have more than 2^64 bytes")),
        None => Ok(outputs),
    }
}

pub(super) fn same_dtype(inputs: &[&TensorType]) -> Result<DType, String> {
    let dtype = inputs[0].dtype;
    match inputs.iter().find(|t| t.dtype != dtype) {
        Some(t) => Err(format!("dtypes differ: {} and {} (insert a cast)", inputs[0], t)),
        None => Ok(dtype),
    }
}

pub(super) fn same_type(a: &TensorType, a_name: &str, b: &TensorType, b_name: &str) -> Result<(), String> {
    if a == b { Ok(()) } else { Err(format!("{a_name} and {b_name} must have the same type, found {a} and {b}")) }
}

pub(super) fn float_input(t: &TensorType, what: &str) -> Result<(), String> {
    if t.dtype.is_float() { Ok(()) } else { Err(format!("{what} must be a float tensor, found {t}")) }
}

pub(super) fn index_input(t: &TensorType, what: &str) -> Result<(), String> {
    if t.dtype.is_index() { Ok(()) } else { Err(format!("{what} must be an i32 or i64 tensor, found {t}")) }
}

pub(super) fn bool_input(t: &TensorType, what: &str) -> Result<(), String> {
    if t.dtype == DType::Bool { Ok(()) } else { Err(format!("{what} must be a bool tensor, found {t}")) }
}

/// An axis attribute resolved against `t`'s rank (negative counts from the end).
pub(super) fn axis(value: i64, t: &TensorType) -> Result<usize, String> {
    let rank = t.rank() as i64;
    let resolved = if value < 0 { value + rank } else { value };
    if (0..rank).contains(&resolved) {
        Ok(resolved as usize)
    } else if rank == 0 {
        Err(format!("axis {value} is out of range: {t} is a scalar and has no axes"))
    } else {
        Err(format!("axis {value} is out of range for {t} (use {}..={})", -rank, rank - 1))
    }
}

/// A list-of-dimensions attribute (`shape=[2, 3]`): every entry must be >= 0.
pub(super) fn dims_attr(attrs: &Attrs, name: &str) -> Result<Vec<u64>, String> {
    let values = attrs.ints(name);
    values
        .iter()
        .map(|&d| {
            u64::try_from(d).map_err(|_| format!("{name}={} has a negative dimension {d}", Attr::Ints(values.to_vec())))
        })
        .collect()
}

/// A (height, width) attribute like `stride=[2, 2]`, each entry at least `min`.
pub(super) fn pair(attrs: &Attrs, name: &str, min: i64) -> Result<[u64; 2], String> {
    let values = attrs.ints(name);
    let shown = Attr::Ints(values.to_vec());
    match *values {
        [h, w] if h >= min && w >= min => Ok([h as u64, w as u64]),
        [_, _] => Err(format!("{name}={shown}: each entry must be at least {min}")),
        _ => Err(format!("{name}={shown} must have 2 entries (height, width)")),
    }
}

/// A float attribute that must satisfy `ok` (`rule` says how, for the message).
pub(super) fn float_attr(attrs: &Attrs, name: &str, ok: fn(f64) -> bool, rule: &str) -> Result<f64, String> {
    let x = attrs.float(name);
    if ok(x) { Ok(x) } else { Err(format!("{name}={x:?} must be {rule}")) }
}

pub(super) fn not_nan(attrs: &Attrs, name: &str) -> Result<f64, String> {
    float_attr(attrs, name, |x| !x.is_nan(), "a number (not NaN)")
}

pub(super) fn positive_eps(attrs: &Attrs) -> Result<f64, String> {
    float_attr(attrs, "eps", |x| x > 0.0 && x.is_finite(), "a positive finite number")
}

pub(super) fn non_negative(attrs: &Attrs, name: &str) -> Result<f64, String> {
    float_attr(attrs, name, |x| x >= 0.0 && x.is_finite(), "a finite number >= 0")
}

/// The output extent of a sliding window: `(size + 2*pad - kernel) / stride + 1`.
pub(super) fn window(size: u64, kernel: u64, stride: u64, pad: u64, dim: &str) -> Result<u64, String> {
    let padded = pad.checked_mul(2).and_then(|p| p.checked_add(size));
    let Some(padded) = padded else {
        return Err(format!("{dim} {size} with padding {pad} is too large"));
    };
    match padded.checked_sub(kernel) {
        Some(room) => Ok(room / stride + 1),
        None => Err(format!("{dim} {size} plus padding 2*{pad} is smaller than the window ({kernel})")),
    }
}

pub(super) fn numel(t: &TensorType) -> u64 {
    t.shape.numel().unwrap_or(u64::MAX)
}

pub(super) fn dim(t: &TensorType, i: usize) -> u64 {
    t.dims().get(i).copied().unwrap_or(0)
}

// ---------------------------------------------------------------------------------------
// FLOPs. Arithmetic counts; copies, casts, gathers and views count 0.

/// `K` FLOPs per output element.
pub(super) fn per_output<const K: u64>(_: &[&TensorType], outputs: &[&TensorType], _: &Attrs) -> u64 {
    outputs.iter().map(|t| numel(t)).fold(0u64, |a, n| a.saturating_add(n.saturating_mul(K)))
}

/// `K` FLOPs per element of input 0.
pub(super) fn per_input<const K: u64>(inputs: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    inputs.first().map_or(0, |t| numel(t).saturating_mul(K))
}

pub(super) fn no_flops(_: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    0
}

// ---------------------------------------------------------------------------------------
// Rules, in table order.

pub(super) fn infer_binary(inputs: &[&TensorType], _: &Attrs) -> Rule {
    let dtype = same_dtype(inputs)?;
    if dtype == DType::Bool {
        return Err(format!("arithmetic needs numbers, found {} and {} (cast first)", inputs[0], inputs[1]));
    }
    done(vec![TensorType { dtype, shape: broadcast(&inputs[0].shape, &inputs[1].shape)? }])
}

pub(super) fn infer_scalar_op(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    float_input(inputs[0], "x")?;
    not_nan(attrs, "value")?;
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

pub(super) fn infer_softmax(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    float_input(inputs[0], "x")?;
    axis(attrs.int("axis"), inputs[0])?;
    done(vec![inputs[0].clone()])
}

pub(super) fn infer_softmax_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    float_input(inputs[0], "dy")?;
    same_type(inputs[0], "dy", inputs[1], "y")?;
    axis(attrs.int("axis"), inputs[0])?;
    done(vec![inputs[0].clone()])
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

/// Matmul: `a[..., m, k] @ b[..., k, n]` with optional transposes of the last two dims and
/// broadcasting batch dims.
pub(super) fn infer_matmul(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (a, b) = (inputs[0], inputs[1]);
    let dtype = same_dtype(inputs)?;
    if !dtype.is_float() {
        return Err(format!("needs float tensors, found {a} and {b}"));
    }
    if a.rank() < 2 || b.rank() < 2 {
        return Err(format!("needs operands of rank >= 2, found {a} and {b}"));
    }
    let last2 = |t: &TensorType, transposed: bool| {
        let d = t.dims();
        let (r, c) = (d[d.len() - 2], d[d.len() - 1]);
        if transposed { (c, r) } else { (r, c) }
    };
    let (ta, tb) = (attrs.bool("transpose_a"), attrs.bool("transpose_b"));
    let (m, k1) = last2(a, ta);
    let (k2, n) = last2(b, tb);
    if k1 != k2 {
        return Err(format!(
            "inner dimensions differ: {a}{} @ {b}{} is [{m},{k1}] @ [{k2},{n}]",
            if ta { "ᵀ" } else { "" },
            if tb { "ᵀ" } else { "" },
        ));
    }
    let batch_a = Shape(a.dims()[..a.rank() - 2].to_vec());
    let batch_b = Shape(b.dims()[..b.rank() - 2].to_vec());
    let mut dims = broadcast(&batch_a, &batch_b).map_err(|e| format!("batch dimensions: {e}"))?.0;
    dims.extend([m, n]);
    done(vec![TensorType { dtype, shape: Shape(dims) }])
}

/// 2 FLOPs (multiply, add) per output element per step of the inner dimension.
pub(super) fn flops_matmul(inputs: &[&TensorType], outputs: &[&TensorType], attrs: &Attrs) -> u64 {
    let a = inputs[0];
    let k = match attrs.get("transpose_a") {
        Some(Attr::Bool(true)) => dim(a, a.rank().wrapping_sub(2)),
        _ => dim(a, a.rank().wrapping_sub(1)),
    };
    outputs.first().map_or(0, |out| numel(out)).saturating_mul(k).saturating_mul(2)
}

/// `attention(q, k, v)`: `q [..., H, T, E]`, `k [..., Hkv, S, E]`, `v [..., Hkv, S, Ev]` of
/// one float dtype and one rank >= 3 with equal leading (batch) dimensions, H a positive
/// multiple of Hkv (grouped-query heads), `scale` positive and finite. Gives
/// `out [..., H, T, Ev]` (q's dtype; `[..., T, H, Ev]` with `transpose_out`) and
/// `lse f32[..., H, T]`. T, S, E, Ev and the batch dimensions may be 0.
pub(super) fn infer_attention(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (q, k, v) = (inputs[0], inputs[1], inputs[2]);
    let dtype = same_dtype(inputs)?;
    float_input(q, "q")?;
    let rank = q.rank();
    if rank < 3 || k.rank() != rank || v.rank() != rank {
        return Err(format!(
            "q, k and v must be [...,H,T,E], [...,Hkv,S,E] and [...,Hkv,S,Ev] of one rank >= 3, found {q}, {k} and {v}"
        ));
    }
    let batch = &q.dims()[..rank - 3];
    if k.dims()[..rank - 3] != *batch || v.dims()[..rank - 3] != *batch {
        return Err(format!("q, k and v must have the same batch dimensions, found {q}, {k} and {v}"));
    }
    let last3 = |x: &TensorType| {
        let d = &x.dims()[rank - 3..];
        (d[0], d[1], d[2])
    };
    let ((h, t, e), (hkv, s, ek), (hv, sv, ev)) = (last3(q), last3(k), last3(v));
    if ek != e {
        return Err(format!("q and k must have the same last dimension E, found q {q} and k {k}"));
    }
    if (hv, sv) != (hkv, s) {
        return Err(format!("k and v must have the same heads and length [...,Hkv,S,_], found k {k} and v {v}"));
    }
    if hkv == 0 || h == 0 || !h.is_multiple_of(hkv) {
        return Err(format!(
            "the query heads H={h} must be a positive multiple of the key/value heads Hkv={hkv} (q {q}, k {k})"
        ));
    }
    float_attr(attrs, "scale", |x| x > 0.0 && x.is_finite(), "a positive finite number")?;
    let mut out = batch.to_vec();
    out.extend(if attrs.bool("transpose_out") { [t, h, ev] } else { [h, t, ev] });
    let mut lse = batch.to_vec();
    lse.extend([h, t]);
    done(vec![TensorType::new(dtype, out), TensorType::new(DType::F32, lse)])
}

/// `attention_backward(dout, q, k, v, out, lse)`: q, k, v as for `attention`, whose outputs
/// fix the rest: `dout` and `out` have `out`'s type, `lse` has `lse`'s. Gives dq, dk, dv of
/// q's, k's and v's types.
pub(super) fn infer_attention_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (q, k, v) = (inputs[1], inputs[2], inputs[3]);
    let forward = infer_attention(&[q, k, v], attrs)?;
    let saved = [(inputs[0], "dout", &forward[0]), (inputs[4], "out", &forward[0]), (inputs[5], "lse", &forward[1])];
    for (t, name, want) in saved {
        if t != want {
            return Err(format!("{name} must be {want} for q {q}, k {k} and v {v}, found {t}"));
        }
    }
    done(vec![q.clone(), k.clone(), v.clone()])
}

/// The (query, key) pairs one attention call scores, with `(E, Ev)`: B·H query heads times
/// the pairs of one head, T·S, or with `causal` only the unmasked ones, Σ_i min(i + 1, S).
/// Saturating; 0 for shapes no rule accepts.
pub(super) fn attention_pairs(q: &TensorType, k: &TensorType, v: &TensorType, attrs: &Attrs) -> (u64, u64, u64) {
    let rank = q.rank();
    if rank < 3 {
        return (0, 0, 0);
    }
    let heads = q.dims()[..rank - 2].iter().fold(1u64, |a, &d| a.saturating_mul(d));
    let (t, s) = (u128::from(dim(q, rank - 2)), u128::from(dim(k, rank - 2)));
    let per_head = match attrs.get("causal") {
        // Rows i < min(T, S) see i + 1 keys; the rows after them see all S.
        Some(Attr::Bool(true)) => {
            let full = t.min(s);
            full * (full + 1) / 2 + (t - full) * s
        }
        _ => t * s,
    };
    let pairs = u64::try_from(per_head).unwrap_or(u64::MAX).saturating_mul(heads);
    (pairs, dim(q, rank - 1), dim(v, rank - 1))
}

/// The two products: scores q·kᵀ (2·E per pair) and probabilities · v (2·Ev per pair).
/// The softmax's exponentials and the online rescaling are not counted.
pub(super) fn flops_attention(inputs: &[&TensorType], _: &[&TensorType], attrs: &Attrs) -> u64 {
    let [q, k, v] = [0, 1, 2].map(|i| inputs.get(i).copied());
    let (Some(q), Some(k), Some(v)) = (q, k, v) else { return 0 };
    let (pairs, e, ev) = attention_pairs(q, k, v, attrs);
    pairs.saturating_mul(2).saturating_mul(e.saturating_add(ev))
}

/// Five products per pair: the scores again (2·E), dout·vᵀ (2·Ev), dv += p·dout (2·Ev),
/// dq += ds·k (2·E) and dk += ds·q (2·E): 2·(3E + 2Ev), 2.5 times the forward when E = Ev.
/// The row sums D = Σ dout·out and the elementwise work on p are not counted.
pub(super) fn flops_attention_backward(inputs: &[&TensorType], _: &[&TensorType], attrs: &Attrs) -> u64 {
    let [q, k, v] = [1, 2, 3].map(|i| inputs.get(i).copied());
    let (Some(q), Some(k), Some(v)) = (q, k, v) else { return 0 };
    let (pairs, e, ev) = attention_pairs(q, k, v, attrs);
    let per_pair = e.saturating_mul(3).saturating_add(ev.saturating_mul(2));
    pairs.saturating_mul(2).saturating_mul(per_pair)
}

pub(super) fn reduce(x: &TensorType, attrs: &Attrs) -> Rule {
    let axes = attrs.ints("axes");
    let shown = Attr::Ints(axes.to_vec());
    if axes.is_empty() {
        return Err(format!("axes=[] is empty: list the dimensions of {x} to reduce"));
    }
    let mut reduced = vec![false; x.rank()];
    for &a in axes {
        let i = axis(a, x)?;
        if reduced[i] {
            return Err(format!("axes={shown} names dimension {i} of {x} twice"));
        }
        reduced[i] = true;
    }
    let keepdim = attrs.bool("keepdim");
    let dims = x
        .dims()
        .iter()
        .zip(&reduced)
        .filter_map(|(&d, &r)| match (r, keepdim) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect::<Vec<_>>();
    done(vec![TensorType::new(x.dtype, dims)])
}

pub(super) fn infer_sum(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    if inputs[0].dtype == DType::Bool {
        return Err(format!("cannot sum a bool tensor {} (cast it first)", inputs[0]));
    }
    reduce(inputs[0], attrs)
}

pub(super) fn infer_mean(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    float_input(inputs[0], "x")?;
    reduce(inputs[0], attrs)
}

pub(super) fn infer_reshape(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    let out = TensorType::new(x.dtype, dims_attr(attrs, "shape")?);
    match (x.shape.numel(), out.shape.numel()) {
        (Some(a), Some(b)) if a == b => done(vec![out]),
        (Some(a), Some(b)) => Err(format!("cannot reshape {x} ({a} elements) to {} ({b} elements)", out.shape)),
        _ => Err(format!("cannot reshape {x} to {}: more than 2^64 elements", out.shape)),
    }
}

pub(super) fn infer_transpose(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    let perm = attrs.ints("perm");
    let shown = Attr::Ints(perm.to_vec());
    if perm.len() != x.rank() {
        return Err(format!("perm={shown} has {} entries but {x} has rank {}", perm.len(), x.rank()));
    }
    let mut seen = vec![false; x.rank()];
    let mut dims = Vec::with_capacity(x.rank());
    for &p in perm {
        match usize::try_from(p) {
            Ok(i) if i < x.rank() && !seen[i] => {
                seen[i] = true;
                dims.push(x.dims()[i]);
            }
            _ => return Err(format!("perm={shown} is not a permutation of 0..{} (for {x})", x.rank())),
        }
    }
    done(vec![TensorType::new(x.dtype, dims)])
}

pub(super) fn infer_expand(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    let shape = Shape(dims_attr(attrs, "shape")?);
    let Some(offset) = shape.rank().checked_sub(x.rank()) else {
        return Err(format!("cannot expand {x} to {shape}: the target has fewer dimensions"));
    };
    for (i, &d) in x.dims().iter().enumerate() {
        let target = shape.dims()[offset + i];
        if d != target && d != 1 {
            return Err(format!("cannot expand {x} to {shape}: dimension {i} is {d}, not 1 or {target}"));
        }
    }
    done(vec![TensorType { dtype: x.dtype, shape }])
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

pub(super) fn infer_embedding(inputs: &[&TensorType], _: &Attrs) -> Rule {
    let (table, ids) = (inputs[0], inputs[1]);
    float_input(table, "table")?;
    index_input(ids, "ids")?;
    let [vocab, d] = *table.dims() else {
        return Err(format!("table must be [V,D], found {table}"));
    };
    if vocab == 0 && numel(ids) > 0 {
        return Err(format!("table {table} has no rows, so every id of {ids} would be out of range"));
    }
    let mut dims = ids.dims().to_vec();
    dims.push(d);
    done(vec![TensorType::new(table.dtype, dims)])
}

pub(super) fn infer_embedding_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, ids) = (inputs[0], inputs[1]);
    float_input(dy, "dy")?;
    index_input(ids, "ids")?;
    let vocab = attrs.int("vocab");
    if vocab < 1 {
        return Err(format!("vocab={vocab} must be at least 1"));
    }
    match dy.dims().split_last() {
        Some((&d, prefix)) if prefix == ids.dims() => done(vec![TensorType::new(dy.dtype, vec![vocab as u64, d])]),
        _ => Err(format!("dy must be ids' shape plus a last dimension D, found dy {dy} and ids {ids}")),
    }
}

/// Shared by the norms: `x` float with channel count `channels` (`None` if `x` has no such
/// dimension; `layout` says which), each param exactly `x.dtype[channels]`, eps positive.
/// Returns the param type.
pub(super) fn norm_params(
    x: &TensorType,
    channels: Option<u64>,
    layout: &str,
    params: &[(&TensorType, &str)],
    attrs: &Attrs,
) -> Result<TensorType, String> {
    float_input(x, "x")?;
    positive_eps(attrs)?;
    let Some(c) = channels else {
        return Err(format!("x must be {layout}, found {x}"));
    };
    let want = TensorType::new(x.dtype, vec![c]);
    for &(t, name) in params {
        if *t != want {
            return Err(format!("{name} must be {want} for x {x}, found {t}"));
        }
    }
    Ok(want)
}

pub(super) fn infer_layer_norm(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    let d = x.dims().last().copied();
    norm_params(x, d, "[...,D]", &[(inputs[1], "gamma"), (inputs[2], "beta")], attrs)?;
    done(vec![x.clone()])
}

pub(super) fn infer_layer_norm_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, x) = (inputs[0], inputs[1]);
    same_type(dy, "dy", x, "x")?;
    let d = x.dims().last().copied();
    let p = norm_params(x, d, "[...,D]", &[(inputs[2], "gamma")], attrs)?;
    done(vec![x.clone(), p.clone(), p])
}

pub(super) fn infer_rms_norm(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    let d = x.dims().last().copied();
    norm_params(x, d, "[...,D]", &[(inputs[1], "gamma")], attrs)?;
    done(vec![x.clone()])
}

pub(super) fn infer_rms_norm_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, x) = (inputs[0], inputs[1]);
    same_type(dy, "dy", x, "x")?;
    let d = x.dims().last().copied();
    let p = norm_params(x, d, "[...,D]", &[(inputs[2], "gamma")], attrs)?;
    done(vec![x.clone(), p])
}

pub(super) fn batch_channels(x: &TensorType) -> Option<u64> {
    if x.rank() >= 2 { Some(x.dims()[1]) } else { None }
}

pub(super) fn infer_batch_norm(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    norm_params(x, batch_channels(x), "[N,C,...]", &[(inputs[1], "gamma"), (inputs[2], "beta")], attrs)?;
    done(vec![x.clone()])
}

pub(super) fn infer_batch_norm_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, x) = (inputs[0], inputs[1]);
    same_type(dy, "dy", x, "x")?;
    let p = norm_params(x, batch_channels(x), "[N,C,...]", &[(inputs[2], "gamma")], attrs)?;
    done(vec![x.clone(), p.clone(), p])
}

/// conv2d's and conv_transpose2d's shared attributes, checked: `stride` and `dilation`
/// entries ≥ 1, `padding` entries ≥ 0, `groups` ≥ 1.
struct Conv {
    stride: [u64; 2],
    padding: [u64; 2],
    dilation: [u64; 2],
    groups: u64,
}

fn conv_attrs(attrs: &Attrs) -> Result<Conv, String> {
    let groups = attrs.int("groups");
    if groups < 1 {
        return Err(format!("groups={groups} must be at least 1"));
    }
    Ok(Conv {
        stride: pair(attrs, "stride", 1)?,
        padding: pair(attrs, "padding", 0)?,
        dilation: pair(attrs, "dilation", 1)?,
        groups: groups as u64,
    })
}

/// `groups` must divide a channel count: `what` names it (and the tensor it comes from).
fn divides(groups: u64, channels: u64, what: &str) -> Result<u64, String> {
    if channels.is_multiple_of(groups) {
        Ok(channels / groups)
    } else {
        Err(format!("groups={groups} must divide {what}"))
    }
}

/// The extent of a kernel of `taps` taps spaced `dilation` apart: dilation·(taps − 1) + 1
/// (0 for an empty kernel).
fn dilated(taps: u64, dilation: u64, dim: &str) -> Result<u64, String> {
    if taps == 0 {
        return Ok(0);
    }
    let extent = dilation.checked_mul(taps - 1).and_then(|e| e.checked_add(1));
    extent.ok_or_else(|| format!("{dim}: {taps} taps with dilation {dilation} span more than 2^64"))
}

/// The `(height, width)` extents of `w[_,_,R,S]`'s kernel under `conv`'s dilation.
fn extents(conv: &Conv, r: u64, s: u64) -> Result<[u64; 2], String> {
    Ok([dilated(r, conv.dilation[0], "height")?, dilated(s, conv.dilation[1], "width")?])
}

/// `conv2d(x, w)`: `x[N,C,H,W]` and `w[K,C/groups,R,S]` of one float dtype, `groups`
/// dividing C and K; gives `y[N,K,P,Q]` with P = (H + 2·padding − dilation·(R − 1) − 1) /
/// stride + 1 (integer division, at least 0 before it), likewise Q. PyTorch's sizes.
pub(super) fn infer_conv2d(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (x, w) = (inputs[0], inputs[1]);
    let dtype = same_dtype(inputs)?;
    float_input(x, "x")?;
    let (&[n, c, h, wd], &[k, wc, r, s]) = (x.dims(), w.dims()) else {
        return Err(format!("x must be [N,C,H,W] and w [K,C/groups,R,S], found {x} and {w}"));
    };
    let conv = conv_attrs(attrs)?;
    let g = conv.groups;
    let per_group = divides(g, c, &format!("the input channels: x {x} has C={c}"))?;
    divides(g, k, &format!("the output channels: w {w} has K={k}"))?;
    if wc != per_group {
        return Err(if g == 1 {
            format!("channels differ: x {x} has C={c} but w {w} has C={wc}")
        } else {
            format!("channels differ: x {x} has C={c}, so with groups={g} w needs C/groups={per_group}, but w {w} has {wc}")
        });
    }
    let extent = extents(&conv, r, s)?;
    let dilation = if conv.dilation == [1, 1] { String::new() } else { format!(", dilation={}", shown(attrs, "dilation")) };
    let in_context = |e: String| format!("{e} (x {x}, w {w}{dilation})");
    let p = window(h, extent[0], conv.stride[0], conv.padding[0], "height").map_err(in_context)?;
    let q = window(wd, extent[1], conv.stride[1], conv.padding[1], "width").map_err(in_context)?;
    done(vec![TensorType::new(dtype, vec![n, k, p, q])])
}

pub(super) fn infer_conv2d_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, x, w) = (inputs[0], inputs[1], inputs[2]);
    let y = infer_conv2d(&[x, w], attrs)?.remove(0);
    if *dy != y {
        return Err(format!("dy must be conv2d(x {x}, w {w})'s type {y}, found {dy}"));
    }
    done(vec![x.clone(), w.clone()])
}

/// An Ints attribute as the IR writes it.
fn shown(attrs: &Attrs, name: &str) -> Attr {
    Attr::Ints(attrs.ints(name).to_vec())
}

/// The output extent of a transposed convolution: (size − 1)·stride − 2·pad + extent +
/// out_pad, PyTorch's (size − 1)·stride − 2·pad + dilation·(kernel − 1) + out_pad + 1. It
/// must not be negative (padding may cut everything away, not more).
fn transposed_window(size: u64, extent: u64, stride: u64, pad: u64, out_pad: u64, dim: &str) -> Result<u64, String> {
    let [size, extent, stride, pad, out_pad] = [size, extent, stride, pad, out_pad].map(i128::from);
    let total = (size - 1)
        .checked_mul(stride)
        .and_then(|t| t.checked_sub(2 * pad))
        .and_then(|t| t.checked_add(extent + out_pad));
    let too_large = || format!("the output {dim} from input {size} with stride {stride} is too large");
    let total = total.ok_or_else(too_large)?;
    if total < 0 {
        return Err(format!(
            "the output {dim} ({size}-1)*{stride} - 2*{pad} + {extent} + {out_pad} = {total} is negative: \
             (input {dim} - 1)*stride - 2*padding + kernel extent + output_padding"
        ));
    }
    u64::try_from(total).map_err(|_| too_large())
}

/// `conv_transpose2d(x, w)`: `x[N,C,H,W]` and `w[C,K/groups,R,S]` of one float dtype,
/// `groups` dividing C; gives `y[N,K,P,Q]` with P = (H − 1)·stride − 2·padding +
/// dilation·(R − 1) + output_padding + 1 (at least 0), likewise Q; each `output_padding`
/// entry below the `stride` or the `dilation` entry of its dimension (PyTorch's rule).
pub(super) fn infer_conv_transpose2d(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (x, w) = (inputs[0], inputs[1]);
    let dtype = same_dtype(inputs)?;
    float_input(x, "x")?;
    let (&[n, c, h, wd], &[wc, k_per_group, r, s]) = (x.dims(), w.dims()) else {
        return Err(format!("x must be [N,C,H,W] and w [C,K/groups,R,S], found {x} and {w}"));
    };
    let conv = conv_attrs(attrs)?;
    let g = conv.groups;
    if wc != c {
        return Err(format!("channels differ: x {x} has C={c} but w {w} has C={wc} (w is [C,K/groups,R,S])"));
    }
    divides(g, c, &format!("the input channels: x {x} has C={c}"))?;
    let k = k_per_group.checked_mul(g).ok_or_else(|| format!("groups={g} times w {w}'s K/groups is too large"))?;
    let out_pad = pair(attrs, "output_padding", 0)?;
    if (0..2).any(|i| out_pad[i] >= conv.stride[i] && out_pad[i] >= conv.dilation[i]) {
        return Err(format!(
            "output_padding={} must be smaller than the stride ({}) or the dilation ({}) in each dimension",
            shown(attrs, "output_padding"),
            shown(attrs, "stride"),
            shown(attrs, "dilation")
        ));
    }
    let extent = extents(&conv, r, s)?;
    let in_context = |e: String| format!("{e} (x {x}, w {w})");
    let p = transposed_window(h, extent[0], conv.stride[0], conv.padding[0], out_pad[0], "height").map_err(in_context)?;
    let q = transposed_window(wd, extent[1], conv.stride[1], conv.padding[1], out_pad[1], "width").map_err(in_context)?;
    done(vec![TensorType::new(dtype, vec![n, k, p, q])])
}

pub(super) fn infer_conv_transpose2d_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, x, w) = (inputs[0], inputs[1], inputs[2]);
    let y = infer_conv_transpose2d(&[x, w], attrs)?.remove(0);
    if *dy != y {
        return Err(format!("dy must be conv_transpose2d(x {x}, w {w})'s type {y}, found {dy}"));
    }
    done(vec![x.clone(), w.clone()])
}

/// 2·(elements of `side`)·(taps of `w`): a multiply-add for every element of one side of a
/// convolution (conv2d's y, conv_transpose2d's x) with every tap of the weight that meets it,
/// `w[_, C', R, S]`'s C'·R·S. For conv2d that is 2·N·K·P·Q·(C/groups)·R·S.
pub(super) fn conv_flops(side: Option<&&TensorType>, w: Option<&&TensorType>) -> u64 {
    let taps = w.map_or(0, |w| dim(w, 1).saturating_mul(dim(w, 2)).saturating_mul(dim(w, 3)));
    side.map_or(0, |t| numel(t)).saturating_mul(taps).saturating_mul(2)
}

pub(super) fn flops_conv2d(inputs: &[&TensorType], outputs: &[&TensorType], _: &Attrs) -> u64 {
    conv_flops(outputs.first(), inputs.get(1))
}

/// dx and dw each cost as much as the forward.
pub(super) fn flops_conv2d_backward(inputs: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    conv_flops(inputs.first(), inputs.get(2)).saturating_mul(2)
}

/// Every element of x meets every tap of its group's K/groups output channels:
/// 2·N·C·H·W·(K/groups)·R·S, as much as the conv2d it is the transpose of.
pub(super) fn flops_conv_transpose2d(inputs: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    conv_flops(inputs.first(), inputs.get(1))
}

/// dx and dw each cost as much as the forward.
pub(super) fn flops_conv_transpose2d_backward(inputs: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    conv_flops(inputs.get(1), inputs.get(2)).saturating_mul(2)
}

pub(super) fn infer_max_pool2d(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    float_input(x, "x")?;
    let &[n, c, h, w] = x.dims() else {
        return Err(format!("x must be [N,C,H,W], found {x}"));
    };
    let kernel = pair(attrs, "kernel", 1)?;
    let stride = pair(attrs, "stride", 1)?;
    let padding = pair(attrs, "padding", 0)?;
    if padding[0] > kernel[0] / 2 || padding[1] > kernel[1] / 2 {
        return Err(format!(
            "padding={} must be at most half of kernel={}",
            Attr::Ints(attrs.ints("padding").to_vec()),
            Attr::Ints(attrs.ints("kernel").to_vec())
        ));
    }
    let in_context = |e: String| format!("{e} (x {x})");
    let p = window(h, kernel[0], stride[0], padding[0], "height").map_err(in_context)?;
    let q = window(w, kernel[1], stride[1], padding[1], "width").map_err(in_context)?;
    done(vec![TensorType::new(x.dtype, vec![n, c, p, q])])
}

pub(super) fn infer_max_pool2d_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, x) = (inputs[0], inputs[1]);
    let y = infer_max_pool2d(&[x], attrs)?.remove(0);
    if *dy != y {
        return Err(format!("dy must be max_pool2d(x {x})'s type {y}, found {dy}"));
    }
    done(vec![x.clone()])
}

pub(super) fn window_size(attrs: &Attrs) -> u64 {
    match attrs.get("kernel") {
        Some(Attr::Ints(k)) => k.iter().fold(1u64, |a, &d| a.saturating_mul(u64::try_from(d).unwrap_or(0))),
        _ => 0,
    }
}

/// One comparison per window element per output element.
pub(super) fn flops_max_pool2d(_: &[&TensorType], outputs: &[&TensorType], attrs: &Attrs) -> u64 {
    outputs.first().map_or(0, |y| numel(y)).saturating_mul(window_size(attrs))
}

/// The forward's comparisons again, to find each window's maximum (dy has y's shape).
pub(super) fn flops_max_pool2d_backward(inputs: &[&TensorType], _: &[&TensorType], attrs: &Attrs) -> u64 {
    inputs.first().map_or(0, |dy| numel(dy)).saturating_mul(window_size(attrs))
}

/// Shared by cross_entropy and its backward: logits `[N,C]` float with `C >= 1`, labels `[N]` i32/i64,
/// label_smoothing in [0, 1] (any ignore_index is allowed, as in PyTorch); `f32_loss` only
/// for f16/bf16 logits (f32 logits have an f32 loss already: one spelling per step). Returns
/// the loss type: a scalar of the logits' dtype, or f32 under `f32_loss`.
pub(super) fn check_cross_entropy(logits: &TensorType, labels: &TensorType, attrs: &Attrs) -> Result<TensorType, String> {
    float_input(logits, "logits")?;
    index_input(labels, "labels")?;
    float_attr(attrs, "label_smoothing", |e| (0.0..=1.0).contains(&e), "in [0, 1]")?;
    let &[n, classes] = logits.dims() else {
        return Err(format!("logits must be [N,C], found {logits}"));
    };
    if classes == 0 {
        return Err(format!("logits {logits} have no classes: C must be at least 1 (every label would be out of range)"));
    }
    if labels.dims() != [n] {
        return Err(format!("labels must be [{n}] for logits {logits}, found {labels}"));
    }
    if !attrs.bool("f32_loss") {
        return Ok(TensorType::new(logits.dtype, vec![]));
    }
    if !matches!(logits.dtype, DType::F16 | DType::Bf16) {
        return Err(format!("f32_loss=true takes f16 or bf16 logits, found {logits} (its loss is f32 already)"));
    }
    Ok(TensorType::new(DType::F32, vec![]))
}

pub(super) fn infer_cross_entropy(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    done(vec![check_cross_entropy(inputs[0], inputs[1], attrs)?])
}

pub(super) fn infer_cross_entropy_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dloss, logits) = (inputs[0], inputs[1]);
    let want = check_cross_entropy(logits, inputs[2], attrs)?;
    if *dloss != want {
        return Err(format!("dloss must be {want} for logits {logits}, found {dloss}"));
    }
    done(vec![logits.clone()])
}

/// Optimizer tensors (every input but adam's `t`): one float type, named by the row.
pub(super) fn optimizer_tensors(inputs: &[&TensorType], names: &[&str]) -> Result<(), String> {
    float_input(inputs[0], names[0])?;
    for (t, name) in inputs.iter().zip(names).skip(1) {
        same_type(inputs[0], names[0], t, name)?;
    }
    Ok(())
}

pub(super) fn infer_sgd(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    optimizer_tensors(inputs, &["p", "g"])?;
    non_negative(attrs, "lr")?;
    done(vec![inputs[0].clone()])
}

pub(super) fn infer_sgd_momentum(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    optimizer_tensors(inputs, &["p", "g", "buf"])?;
    non_negative(attrs, "lr")?;
    non_negative(attrs, "momentum")?;
    done(vec![inputs[0].clone(), inputs[0].clone()])
}

pub(super) fn infer_adam(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    optimizer_tensors(&inputs[..4], &["p", "g", "m", "v"])?;
    let t = inputs[4];
    if !(t.dtype.is_float() && t.rank() == 0) {
        return Err(format!("t (the step count) must be a float scalar like f32[], found {t}"));
    }
    non_negative(attrs, "lr")?;
    for beta in ["beta1", "beta2"] {
        float_attr(attrs, beta, |b| (0.0..1.0).contains(&b), "in [0, 1)")?;
    }
    positive_eps(attrs)?;
    if attrs.get("weight_decay").is_some() {
        non_negative(attrs, "weight_decay")?;
    }
    done(vec![inputs[0].clone(), inputs[0].clone(), inputs[0].clone()])
}

/// The output type of `slice(x, axis, start, end, step)`: `x` with the axis cut to
/// `start..end` every `step`-th element.
fn sliced(x: &TensorType, attrs: &Attrs) -> Result<TensorType, String> {
    let a = axis(attrs.int("axis"), x)?;
    let (start, end, step) = (attrs.int("start"), attrs.int("end"), attrs.int("step"));
    let dim = x.dims()[a];
    if step < 1 {
        return Err(format!("step={step}: a slice steps forward by 1 or more"));
    }
    match (u64::try_from(start), u64::try_from(end)) {
        (Ok(s), Ok(e)) if s <= e && e <= dim => {
            let mut dims = x.dims().to_vec();
            dims[a] = (e - s).div_ceil(step as u64);
            Ok(TensorType::new(x.dtype, dims))
        }
        _ => Err(format!("start={start}, end={end} is not a range inside dimension {a} of {x} (0 <= start <= end <= {dim})")),
    }
}

pub(super) fn infer_slice(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    done(vec![sliced(inputs[0], attrs)?])
}

pub(super) fn infer_select(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    let a = axis(attrs.int("axis"), x)?;
    let index = attrs.int("index");
    let dim = x.dims()[a];
    if !u64::try_from(index).is_ok_and(|i| i < dim) {
        return Err(format!("index={index} is outside dimension {a} of {x} (0..{dim})"));
    }
    let mut dims = x.dims().to_vec();
    dims.remove(a);
    done(vec![TensorType::new(x.dtype, dims)])
}

/// `slice_backward(dy, shape, axis, start, end, step)`: `dy` must be exactly the slice of a
/// `dy.dtype[shape]` tensor; the output is that tensor.
pub(super) fn infer_slice_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let dy = inputs[0];
    let full = TensorType::new(dy.dtype, dims_attr(attrs, "shape")?);
    let expected = sliced(&full, attrs)?;
    if *dy != expected {
        return Err(format!("dy is {dy}, but this slice of {full} is {expected}"));
    }
    done(vec![full])
}

/// `cat(xs..., axis)`: one or more tensors of one dtype and rank, equal but along `axis`.
pub(super) fn infer_cat(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let Some(&first) = inputs.first() else { return Err("cat needs at least one input".to_string()) };
    let dtype = same_dtype(inputs)?;
    let a = axis(attrs.int("axis"), first)?;
    let mut dims = first.dims().to_vec();
    for x in &inputs[1..] {
        let same_elsewhere = x.rank() == first.rank() && (0..x.rank()).all(|i| i == a || x.dims()[i] == first.dims()[i]);
        if !same_elsewhere {
            return Err(format!("cannot concatenate {first} and {x} along axis {a}: the other dimensions differ"));
        }
        dims[a] = dims[a].checked_add(x.dims()[a]).ok_or_else(|| format!("the concatenation along axis {a} has more than 2^64 elements"))?;
    }
    done(vec![TensorType::new(dtype, dims)])
}

/// `extern`, `extern_view`, `extern_backward`: the output is `dtype[shape]` as written
/// (memplan cannot infer another framework's op); `target` names the op, `flops` (where the
/// row has it) is at least 0.
pub(super) fn infer_extern(_: &[&TensorType], attrs: &Attrs) -> Rule {
    if attrs.str("target").is_empty() {
        return Err("target=\"\" names no op".to_string());
    }
    if let Some(Attr::Int(flops)) = attrs.get("flops")
        && *flops < 0
    {
        return Err(format!("flops={flops}: a count of operations is at least 0"));
    }
    done(vec![TensorType::new(attrs.dtype("dtype"), dims_attr(attrs, "shape")?)])
}

/// The `flops` attribute of an extern op.
pub(super) fn attr_flops(_: &[&TensorType], _: &[&TensorType], attrs: &Attrs) -> u64 {
    attrs.int("flops").max(0) as u64
}

/// `dropout(x, seed)` and `dropout_backward(dy, seed)`: input 0 (named `what`) a float
/// tensor, `seed` an `i64[]` scalar, `p` a probability in [0, 1) (NaN is not), `stream` at
/// least 0. The output has input 0's type.
fn dropout_rule(inputs: &[&TensorType], attrs: &Attrs, what: &str) -> Rule {
    let (x, seed) = (inputs[0], inputs[1]);
    float_input(x, what)?;
    if *seed != TensorType::new(DType::I64, vec![]) {
        return Err(format!("seed must be an i64[] scalar, found {seed}"));
    }
    float_attr(attrs, "p", |p| (0.0..1.0).contains(&p), "a probability in [0, 1)")?;
    let stream = attrs.int("stream");
    if stream < 0 {
        return Err(format!("stream={stream} must be at least 0"));
    }
    done(vec![x.clone()])
}

pub(super) fn infer_dropout(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    dropout_rule(inputs, attrs, "x")
}

pub(super) fn infer_dropout_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    dropout_rule(inputs, attrs, "dy")
}

/// The output of resampling `x [N,C,H,W]` to `output_size = [OH, OW]`
/// (adaptive_avg_pool2d, upsample_nearest2d): `[N,C,OH,OW]` of x's float dtype. As in
/// PyTorch, C, H, W, OH and OW are at least 1 (every bin and every source holds a pixel);
/// N may be 0.
fn resampled(x: &TensorType, attrs: &Attrs) -> Result<TensorType, String> {
    float_input(x, "x")?;
    let &[n, c, h, w] = x.dims() else {
        return Err(format!("x must be [N,C,H,W], found {x}"));
    };
    if c == 0 || h == 0 || w == 0 {
        return Err(format!("x must have C, H and W of at least 1 (N may be 0), found {x}"));
    }
    let [oh, ow] = pair(attrs, "output_size", 1)?;
    Ok(TensorType::new(x.dtype, vec![n, c, oh, ow]))
}

pub(super) fn infer_resample(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    done(vec![resampled(inputs[0], attrs)?])
}

/// `*_backward(dy, shape, output_size)`: `dy` must be exactly the forward's output for an
/// `x` of type `dy.dtype[shape]`; the output is that `x`'s type.
pub(super) fn infer_resample_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let dy = inputs[0];
    let x = TensorType::new(dy.dtype, dims_attr(attrs, "shape")?);
    let y = resampled(&x, attrs).map_err(|e| format!("shape={}: {e}", Attr::Ints(attrs.ints("shape").to_vec())))?;
    if *dy != y {
        return Err(format!("dy must be the forward's output {y} for x {x}, found {dy}"));
    }
    done(vec![x])
}

/// Σ over the `out` adaptive bins of `size` elements of their lengths: bin i spans
/// ⌊i·size/out⌋..⌈(i+1)·size/out⌉, and the lengths add up to size + out − gcd(size, out)
/// (Σ ⌈k·s/o⌉ − ⌊(k−1)·s/o⌋ over k = 1..=o telescopes to s, plus 1 for each k with o ∤ k·s:
/// o − gcd(s, o) of them). Symmetric in size and out; no loop, so huge sizes cost nothing.
pub(super) fn bin_lengths(size: u64, out: u64) -> u64 {
    let (mut gcd, mut b) = (size, out);
    while b != 0 {
        (gcd, b) = (b, gcd % b);
    }
    // gcd <= min(size, out) unless one of them is 0 (no bins, or no elements in any).
    if size.min(out) == 0 { 0 } else { size.max(out).saturating_add(size.min(out) - gcd) }
}

/// adaptive_avg_pool2d and its backward: one operation per element of each bin (the
/// additions and the division; the backward's division and additions likewise), from the
/// `[N,C,H,W]` and `[N,C,OH,OW]` sides (the forward's input and output, the backward's
/// input and output: the count is symmetric in H and OH).
pub(super) fn flops_adaptive_avg_pool2d(inputs: &[&TensorType], outputs: &[&TensorType], _: &Attrs) -> u64 {
    let (Some(a), Some(b)) = (inputs.first(), outputs.first()) else { return 0 };
    let planes = dim(a, 0).saturating_mul(dim(a, 1));
    let (rows, cols) = (bin_lengths(dim(a, 2), dim(b, 2)), bin_lengths(dim(a, 3), dim(b, 3)));
    planes.saturating_mul(rows).saturating_mul(cols)
}

/// `bce_with_logits(logits, targets)`: float logits of any shape, targets of exactly their
/// type; the loss is a scalar of the logits' dtype (as cross_entropy's).
pub(super) fn infer_bce_with_logits(inputs: &[&TensorType], _: &Attrs) -> Rule {
    let (logits, targets) = (inputs[0], inputs[1]);
    float_input(logits, "logits")?;
    same_type(logits, "logits", targets, "targets")?;
    done(vec![TensorType::new(logits.dtype, vec![])])
}

pub(super) fn infer_bce_with_logits_backward(inputs: &[&TensorType], _: &Attrs) -> Rule {
    let (dloss, logits, targets) = (inputs[0], inputs[1], inputs[2]);
    float_input(logits, "logits")?;
    same_type(logits, "logits", targets, "targets")?;
    let want = TensorType::new(logits.dtype, vec![]);
    if *dloss != want {
        return Err(format!("dloss must be {want} for logits {logits}, found {dloss}"));
    }
    done(vec![logits.clone()])
}

/// `where(cond, a, b)`: cond bool, a and b one float dtype, the three shapes broadcast
/// together (numpy rules); out has a's dtype and the broadcast shape.
pub(super) fn infer_where(inputs: &[&TensorType], _: &Attrs) -> Rule {
    let (cond, a, b) = (inputs[0], inputs[1], inputs[2]);
    bool_input(cond, "cond")?;
    let dtype = same_dtype(&inputs[1..])?;
    float_input(a, "a")?;
    let shape = broadcast(&broadcast(&cond.shape, &a.shape)?, &b.shape)?;
    done(vec![TensorType { dtype, shape }])
}

/// `masked_fill(x, mask, value)`: x float, mask bool and broadcastable to x's shape (the
/// output keeps x's shape), value a number (±inf allowed).
pub(super) fn infer_masked_fill(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (x, mask) = (inputs[0], inputs[1]);
    float_input(x, "x")?;
    bool_input(mask, "mask")?;
    not_nan(attrs, "value")?;
    match broadcast(&mask.shape, &x.shape) {
        Ok(shape) if shape == x.shape => done(vec![x.clone()]),
        _ => Err(format!("mask {mask} must broadcast to x's shape {}", x.shape)),
    }
}
