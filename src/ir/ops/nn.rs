//! Neural-network ops: softmax, embedding, the norms (layer, RMS and batch norm, and
//! the batch statistics BatchNorm's running averages are made of), max
//! pooling, and the losses (cross-entropy, binary cross-entropy with logits), each with
//! its backward op.
//!
//! Their rows also say what only they know: which inputs hold indices and what bounds them
//! (embedding ids, labels: executors range-check them and `memplan run` seeds them in
//! range), and how a param they read is seeded (norm scales 1, shifts 0, embedding tables
//! small normal numbers).

use super::rules::*;
use super::{Attr, AttrDefault, AttrKind, AttrSpec, Attrs, Below, Indices, Init, OpDef, attr};
use crate::ir::types::{DType, TensorType};

use AttrKind as K;

const EPS: AttrSpec = attr("eps", K::Float, Some(AttrDefault::Float(1e-5)));
/// rms_norm's default eps (PyTorch's nn.RMSNorm uses finfo(dtype).eps when given none; a
/// front end writes it out).
const RMS_EPS: AttrSpec = attr("eps", K::Float, Some(AttrDefault::Float(1e-6)));
/// PyTorch's defaults: rows labelled -100 are ignored, no label smoothing; the loss has the
/// logits' dtype unless `f32_loss` (f16/bf16 logits read as f32, an f32 loss: CUDA
/// autocast's cross_entropy with its cast of the logits fused in).
const CROSS_ENTROPY_ATTRS: &[AttrSpec] = &[IGNORE_INDEX, LABEL_SMOOTHING, F32_LOSS];
const IGNORE_INDEX: AttrSpec = attr("ignore_index", K::Int, Some(AttrDefault::Int(-100)));
const LABEL_SMOOTHING: AttrSpec = attr("label_smoothing", K::Float, Some(AttrDefault::Float(0.0)));
const F32_LOSS: AttrSpec = attr("f32_loss", K::Bool, Some(AttrDefault::Bool(false)));
const POOL_ATTRS: &[AttrSpec] =
    &[attr("kernel", K::Ints, None), attr("stride", K::Ints, None), PADDING_0];

pub(super) const SOFTMAX: OpDef = OpDef::new("softmax", &["x"], &["y"], infer_softmax, "exp(x) / sum(exp(x)) along axis (max-subtracted)")
    .attrs(&[attr("axis", K::Int, Some(AttrDefault::Int(-1)))])
    .flops(per_output::<5>)
    .inplace(&[(0, 0)]);

pub(super) const CUMSUM: OpDef = OpDef::new("cumsum", &["x"], &["y"], infer_cumsum, "running sums of x along axis (from the end with reverse), in x's dtype")
    .attrs(&[attr("axis", K::Int, None), attr("reverse", K::Bool, Some(AttrDefault::Bool(false)))])
    .flops(per_output::<1>)
    .inplace(&[(0, 0)]);

pub(super) const SOFTMAX_BACKWARD: OpDef = OpDef::new("softmax_backward", &["dy", "y"], &["dx"], infer_softmax_backward, "y * (dy - sum(dy * y) along axis), y being softmax's output")
    .attrs(&[attr("axis", K::Int, Some(AttrDefault::Int(-1)))])
    .backward()
    .flops(per_output::<4>)
    .inplace(&[(0, 0)]);

pub(super) const EMBEDDING: OpDef = OpDef::new("embedding", &["table", "ids"], &["out"], infer_embedding, "rows of table[V,D] picked by ids: out[..., :] = table[ids[...], :]")
    .indices(&[Indices { input: 1, below: Below::Dim { input: 0, axis: 0 }, ignored: None }])
    .init(&[(0, Init::Normal(0.02))]);

pub(super) const EMBEDDING_BACKWARD: OpDef = OpDef::new("embedding_backward", &["dy", "ids"], &["dtable"], infer_embedding_backward, "dtable[vocab,D]: rows of dy summed into the rows ids name")
    .attrs(&[attr("vocab", K::Int, None)])
    .backward()
    .flops(per_input::<1>)
    .indices(&[Indices { input: 1, below: Below::Attr("vocab"), ignored: None }]);

/// embedding_bag's reduction of each bag's rows: `"sum"` or `"mean"`.
const BAG_MODE: AttrSpec = attr("mode", K::Str, Some(AttrDefault::Str("sum")));

pub(super) const EMBEDDING_BAG: OpDef = OpDef::new("embedding_bag", &["table", "ids", "offsets"], &["out"], infer_embedding_bag, "out[b, :] = the sum (or mean) of the rows of table[V,D] that ids[offsets[b] .. offsets[b+1]] name (PyTorch's embedding_bag): no [n, D] rows held")
    .attrs(&[BAG_MODE])
    .flops(flops_embedding_bag)
    .indices(&[
        Indices { input: 1, below: Below::Dim { input: 0, axis: 0 }, ignored: None },
        Indices { input: 2, below: Below::Offsets { input: 1 }, ignored: None },
    ])
    .init(&[(0, Init::Normal(0.02))]);

pub(super) const EMBEDDING_BAG_BACKWARD: OpDef = OpDef::new("embedding_bag_backward", &["dy", "ids", "offsets"], &["dtable"], infer_embedding_bag_backward, "dtable[vocab,D]: each bag's dy row (over its length for mean) added into the rows its ids name")
    .attrs(&[attr("vocab", K::Int, None), BAG_MODE])
    .backward()
    .flops(flops_embedding_bag_backward)
    .indices(&[
        Indices { input: 1, below: Below::Attr("vocab"), ignored: None },
        Indices { input: 2, below: Below::Offsets { input: 1 }, ignored: None },
    ]);

pub(super) const GATHER: OpDef = OpDef::new("gather", &["x", "index"], &["out"], infer_gather, "x's elements picked along axis by index: out[p] = x[p with p[axis] = index[p]] (PyTorch's gather)")
    .attrs(&[attr("axis", K::Int, None)])
    .flops(per_output::<0>)
    .indices(&[Indices { input: 1, below: Below::DimAt { input: 0, axis: "axis" }, ignored: None }]);

pub(super) const GATHER_BACKWARD: OpDef = OpDef::new("gather_backward", &["dy", "index"], &["dx"], infer_gather_backward, "dx of x's shape: zero, plus each dy[p] added at p with p[axis] = index[p]")
    .attrs(&[attr("shape", K::Ints, None), attr("axis", K::Int, None)])
    .backward()
    .flops(per_input::<1>)
    .indices(&[Indices { input: 1, below: Below::DimAt { input: usize::MAX, axis: "axis" }, ignored: None }]);

pub(super) const SCATTER_ADD: OpDef = OpDef::new("scatter_add", &["x", "index", "src"], &["y"], infer_scatter_add, "x plus each src[p] added at p with p[axis] = index[p] (PyTorch's scatter_add; index_add and index_put accumulating are written with it)")
    .attrs(&[attr("axis", K::Int, None)])
    .flops(per_input::<1>)
    .indices(&[Indices { input: 1, below: Below::DimAt { input: 0, axis: "axis" }, ignored: None }]);

pub(super) const TOPK: OpDef = OpDef::new("topk", &["x"], &["values", "indices"], infer_topk, "the k largest (smallest) elements of x along axis, in order, and their positions (PyTorch's topk)")
    .attrs(&[attr("k", K::Int, None), attr("axis", K::Int, Some(AttrDefault::Int(-1))), attr("largest", K::Bool, Some(AttrDefault::Bool(true)))])
    .flops(per_input::<1>);

pub(super) const LAYER_NORM: OpDef = OpDef::new("layer_norm", &["x", "gamma", "beta"], &["y"], infer_layer_norm, "normalise the last dim D to mean 0, variance 1; then * gamma + beta")
    .attrs(&[EPS])
    .flops(per_input::<8>)
    .init(&[(1, Init::Ones), (2, Init::Zeros)]);

pub(super) const LAYER_NORM_BACKWARD: OpDef = OpDef::new("layer_norm_backward", &["dy", "x", "gamma"], &["dx", "dgamma", "dbeta"], infer_layer_norm_backward, "layer_norm's gradients w.r.t. x, gamma and beta")
    .attrs(&[EPS])
    .backward()
    .flops(per_input::<12>)
    .inplace(&[(0, 0)]);

pub(super) const RMS_NORM: OpDef = OpDef::new("rms_norm", &["x", "gamma"], &["y"], infer_rms_norm, "x / sqrt(mean(x^2) + eps) over the last dim D; then * gamma")
    .attrs(&[RMS_EPS])
    .flops(per_input::<4>)
    .init(&[(1, Init::Ones)]);

pub(super) const RMS_NORM_BACKWARD: OpDef = OpDef::new("rms_norm_backward", &["dy", "x", "gamma"], &["dx", "dgamma"], infer_rms_norm_backward, "rms_norm's gradients w.r.t. x and gamma")
    .attrs(&[RMS_EPS])
    .backward()
    .flops(per_input::<10>)
    .inplace(&[(0, 0)]);

pub(super) const BATCH_NORM: OpDef = OpDef::new("batch_norm", &["x", "gamma", "beta"], &["y"], infer_batch_norm, "normalise each channel (dim 1) with batch statistics; then * gamma + beta")
    .attrs(&[EPS])
    .flops(per_input::<8>)
    .init(&[(1, Init::Ones), (2, Init::Zeros)]);

pub(super) const BATCH_NORM_BACKWARD: OpDef = OpDef::new("batch_norm_backward", &["dy", "x", "gamma"], &["dx", "dgamma", "dbeta"], infer_batch_norm_backward, "batch_norm's gradients w.r.t. x, gamma and beta")
    .attrs(&[EPS])
    .backward()
    .flops(per_input::<12>)
    .inplace(&[(0, 0)]);

pub(super) const BATCH_NORM_STATS: OpDef = OpDef::new("batch_norm_stats", &["x"], &["mean", "var"], infer_batch_norm_stats, "each channel's (dim 1) mean and variance over the batch, in f32, with no gradient: BatchNorm's running statistics")
    .attrs(&[attr("correction", K::Int, Some(AttrDefault::Int(0)))])
    .flops(per_input::<3>)
    .stops_gradient();

pub(super) const MAX_POOL2D: OpDef = OpDef::new("max_pool2d", &["x"], &["y"], infer_max_pool2d, "maximum over kernel windows of x[N,C,H,W] (padding counts as -inf)")
    .attrs(POOL_ATTRS)
    .flops(flops_max_pool2d);

pub(super) const MAX_POOL2D_BACKWARD: OpDef = OpDef::new("max_pool2d_backward", &["dy", "x"], &["dx"], infer_max_pool2d_backward, "dy routed to each window's (first) maximum in x; overlaps add")
    .attrs(POOL_ATTRS)
    .backward()
    .flops(flops_max_pool2d_backward);

pub(super) const CROSS_ENTROPY: OpDef = OpDef::new("cross_entropy", &["logits", "labels"], &["loss"], infer_cross_entropy, "mean over rows not ignored of -log softmax(logits[n])[labels[n]]; label smoothing, f32 loss of half logits optional")
    .attrs(CROSS_ENTROPY_ATTRS)
    .flops(per_input::<4>)
    .indices(&[Indices { input: 1, below: Below::Dim { input: 0, axis: 1 }, ignored: Some("ignore_index") }]);

pub(super) const CROSS_ENTROPY_BACKWARD: OpDef = OpDef::new("cross_entropy_backward", &["dloss", "logits", "labels"], &["dlogits"], infer_cross_entropy_backward, "dloss * (softmax(logits) - smoothed onehot(labels)) / rows not ignored; 0 on ignored rows")
    .attrs(CROSS_ENTROPY_ATTRS)
    .backward()
    .flops(per_output::<4>)
    .inplace(&[(0, 1)])
    .indices(&[Indices { input: 2, below: Below::Dim { input: 1, axis: 1 }, ignored: Some("ignore_index") }]);

/// cross_entropy's attributes and the rows of logits one chunk holds.
const LINEAR_CROSS_ENTROPY_ATTRS: &[AttrSpec] = &[IGNORE_INDEX, LABEL_SMOOTHING, F32_LOSS, attr("rows", K::Int, None)];

pub(super) const LINEAR_CROSS_ENTROPY: OpDef = OpDef::new("linear_cross_entropy", &["x", "weight", "labels"], &["loss", "dx", "dweight", "workspace"], infer_linear_cross_entropy, "cross_entropy(matmul(x, weight^T) as [N,V], labels) a chunk of `rows` rows at a time, with its gradients for dloss = 1 (dx, dweight): the logits never exist whole; workspace holds one chunk's logits and dweight's partial sums, zeros afterwards")
    .attrs(LINEAR_CROSS_ENTROPY_ATTRS)
    .flops(flops_linear_cross_entropy)
    .outputs_without_gradient(&[1, 2, 3])
    .indices(&[Indices { input: 2, below: Below::Dim { input: 1, axis: 0 }, ignored: Some("ignore_index") }]);

pub(super) const BCE_WITH_LOGITS: OpDef = OpDef::new("bce_with_logits", &["logits", "targets"], &["loss"], infer_bce_with_logits, "mean of max(x, 0) - x * t + log(1 + exp(-|x|)): binary cross-entropy of logits x, targets t")
    .flops(per_input::<8>)
    .inputs_without_gradient(&[1]);

pub(super) const BCE_WITH_LOGITS_BACKWARD: OpDef = OpDef::new("bce_with_logits_backward", &["dloss", "logits", "targets"], &["dlogits"], infer_bce_with_logits_backward, "dloss * (sigmoid(logits) - targets) / numel(logits)")
    .backward()
    .flops(per_output::<6>)
    .inplace(&[(0, 1), (0, 2)]);

pub(super) fn infer_softmax(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    float_input(inputs[0], "x")?;
    axis(attrs.int("axis"), inputs[0])?;
    done(vec![inputs[0].clone()])
}

/// `cumsum(x, axis, reverse)`: x numeric (not bool: PyTorch sums bools as i64, a cast
/// first), a valid axis; y has x's type.
pub(super) fn infer_cumsum(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    if x.dtype == DType::Bool {
        return Err(format!("cumsum needs numbers, found {x} (cast to i64 first, as PyTorch sums bools)"));
    }
    axis(attrs.int("axis"), x)?;
    done(vec![x.clone()])
}

pub(super) fn infer_softmax_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    float_input(inputs[0], "dy")?;
    same_type(inputs[0], "dy", inputs[1], "y")?;
    axis(attrs.int("axis"), inputs[0])?;
    done(vec![inputs[0].clone()])
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

/// embedding_bag's ids `[n]` and offsets `[B]`, both integer vectors, and its mode.
fn bag_inputs(ids: &TensorType, offsets: &TensorType, attrs: &Attrs) -> Result<u64, String> {
    index_input(ids, "ids")?;
    index_input(offsets, "offsets")?;
    if ids.rank() != 1 || offsets.rank() != 1 {
        return Err(format!("ids must be [n] and offsets [B] (each bag's first id), found {ids} and {offsets}"));
    }
    match attrs.str("mode") {
        "sum" | "mean" => Ok(offsets.dims()[0]),
        other => Err(format!("mode={other:?}: expected \"sum\" or \"mean\"")),
    }
}

/// `embedding_bag(table, ids, offsets)`: table `[V,D]` float, ids `[n]` and offsets `[B]`
/// integers; gives `out[B,D]`. Bag b holds ids offsets[b] .. offsets[b+1] (the last to n);
/// offsets must start at 0 and not decrease (an executor refuses others).
pub(super) fn infer_embedding_bag(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (table, ids, offsets) = (inputs[0], inputs[1], inputs[2]);
    float_input(table, "table")?;
    let bags = bag_inputs(ids, offsets, attrs)?;
    let [vocab, d] = *table.dims() else {
        return Err(format!("table must be [V,D], found {table}"));
    };
    if vocab == 0 && numel(ids) > 0 {
        return Err(format!("table {table} has no rows, so every id of {ids} would be out of range"));
    }
    done(vec![TensorType::new(table.dtype, vec![bags, d])])
}

/// `embedding_bag_backward(dy, ids, offsets)`: dy `[B,D]` float for offsets `[B]`; gives
/// `dtable[vocab, D]`.
pub(super) fn infer_embedding_bag_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, ids, offsets) = (inputs[0], inputs[1], inputs[2]);
    float_input(dy, "dy")?;
    let bags = bag_inputs(ids, offsets, attrs)?;
    let vocab = attrs.int("vocab");
    if vocab < 1 {
        return Err(format!("vocab={vocab} must be at least 1"));
    }
    let &[b, d] = dy.dims() else {
        return Err(format!("dy must be [B,D], found {dy}"));
    };
    if b != bags {
        return Err(format!("dy {dy} must have a row per bag of offsets {offsets}"));
    }
    done(vec![TensorType::new(dy.dtype, vec![vocab as u64, d])])
}

/// An add per id per column (and a divide per output element for mean, not counted).
pub(super) fn flops_embedding_bag(inputs: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    let [table, ids] = [0, 1].map(|i| inputs.get(i).copied());
    let (Some(table), Some(ids)) = (table, ids) else { return 0 };
    numel(ids).saturating_mul(dim(table, 1))
}

/// An add per id per column.
pub(super) fn flops_embedding_bag_backward(inputs: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    let [dy, ids] = [0, 1].map(|i| inputs.get(i).copied());
    let (Some(dy), Some(ids)) = (dy, ids) else { return 0 };
    numel(ids).saturating_mul(dim(dy, 1))
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

/// `gather(x, index, axis)`: index integer, of x's rank, each of its dimensions at most
/// x's except along `axis` (PyTorch's rule); out has index's shape and x's dtype.
pub(super) fn infer_gather(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (x, index) = (inputs[0], inputs[1]);
    index_input(index, "index")?;
    let a = axis(attrs.int("axis"), x)?;
    if index.rank() != x.rank() || index.dims().iter().zip(x.dims()).enumerate().any(|(d, (&i, &n))| d != a && i > n) {
        return Err(format!("index {index} must have x's rank and no dimension larger than x's {x} but along axis {a}"));
    }
    done(vec![TensorType::new(x.dtype, index.dims().to_vec())])
}

/// `scatter_add(x, index, src, axis)`: x float, src of x's dtype and index's shape, index
/// fitting x as in `gather`; y has x's type.
pub(super) fn infer_scatter_add(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (x, index, src) = (inputs[0], inputs[1], inputs[2]);
    float_input(x, "x")?;
    if src.dtype != x.dtype || src.dims() != index.dims() {
        return Err(format!("src must have x's dtype and index's shape, found x {x}, index {index} and src {src}"));
    }
    infer_gather(&[x, index], attrs)?;
    done(vec![x.clone()])
}

/// `topk(x, k, axis, largest)`: x numeric (not bool), 0 ≤ k ≤ its length along the axis;
/// values of x's dtype and i64 indices, both x's shape with k along the axis.
pub(super) fn infer_topk(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    if x.dtype == DType::Bool {
        return Err(format!("topk needs numbers, found {x}"));
    }
    let a = axis(attrs.int("axis"), x)?;
    let k = attrs.int("k");
    if k < 0 || k as u64 > x.dims()[a] {
        return Err(format!("k = {k} must be in 0..={} (the length of {x} along axis {a})", x.dims()[a]));
    }
    let mut dims = x.dims().to_vec();
    dims[a] = k as u64;
    done(vec![TensorType::new(x.dtype, dims.clone()), TensorType::new(DType::I64, dims)])
}

/// `gather_backward(dy, index, shape, axis)`: dy float of index's shape; dx float of
/// `shape` (x's), which index fits as in `gather`.
pub(super) fn infer_gather_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, index) = (inputs[0], inputs[1]);
    float_input(dy, "dy")?;
    if dy.dims() != index.dims() {
        return Err(format!("dy must have index's shape, found dy {dy} and index {index}"));
    }
    let shape: Vec<u64> = attrs.ints("shape").iter().map(|&d| u64::try_from(d).map_err(|_| format!("dimension {d} < 0"))).collect::<Result<_, _>>()?;
    let x = TensorType::new(dy.dtype, shape);
    infer_gather(&[&x, index], attrs)?;
    done(vec![x])
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
    let in_x_dtype = as_x_dtype(x, &inputs[1..]);
    norm_params(x, batch_channels(x), "[N,C,...]", &[(&in_x_dtype[0], "gamma"), (&in_x_dtype[1], "beta")], attrs)?;
    if inputs[1].dtype != inputs[2].dtype {
        return Err(format!("gamma {} and beta {} must have one dtype", inputs[1], inputs[2]));
    }
    done(vec![x.clone()])
}

/// batch_norm's params as the type rule checks them: a BatchNorm keeps its gamma and beta
/// in f32 when x is f16 or bf16 (PyTorch's autocast runs it so, its kernels reading f32
/// params), so f32 params of a half x are checked as if in x's dtype.
fn as_x_dtype(x: &TensorType, params: &[&TensorType]) -> Vec<TensorType> {
    let half = matches!(x.dtype, DType::F16 | DType::Bf16);
    params
        .iter()
        .map(|&p| if half && p.dtype == DType::F32 { TensorType { dtype: x.dtype, shape: p.shape.clone() } } else { p.clone() })
        .collect()
}

pub(super) fn infer_batch_norm_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, x) = (inputs[0], inputs[1]);
    same_type(dy, "dy", x, "x")?;
    let in_x_dtype = as_x_dtype(x, &inputs[2..]);
    norm_params(x, batch_channels(x), "[N,C,...]", &[(&in_x_dtype[0], "gamma")], attrs)?;
    // dgamma and dbeta have gamma's type (f32 for a half x's f32 params).
    done(vec![x.clone(), inputs[2].clone(), inputs[2].clone()])
}

/// `batch_norm_stats(x, correction)`: a float `x [N,C,...]` with more than `correction`
/// elements per channel (the variance divides by their number minus `correction`); `mean`
/// and `var` are `f32[C]`.
fn infer_batch_norm_stats(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    float_input(x, "x")?;
    let Some(c) = batch_channels(x) else { return Err(format!("x must be [N,C,...], found {x}")) };
    let correction = attrs.int("correction");
    let per_channel = x.dims().iter().enumerate().filter(|&(i, _)| i != 1).try_fold(1u64, |n, (_, &d)| n.checked_mul(d));
    match (u64::try_from(correction), per_channel) {
        (Err(_), _) => Err(format!("correction={correction} must be >= 0")),
        (Ok(k), Some(m)) if m > k => done(vec![TensorType::new(DType::F32, vec![c]); 2]),
        _ => Err(format!("x {x} has too few elements per channel for correction={correction} (PyTorch: expected more than 1 value per channel when training)")),
    }
}

pub(super) fn infer_max_pool2d(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    float_input(x, "x")?;
    let &[n, c, h, w] = x.dims() else {
        return Err(format!("x must be [N,C,H,W], found {x}"));
    };
    let PoolAttrs { kernel, stride, padding } = PoolAttrs::checked(attrs)?;
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

/// The most bytes of logits one chunk of `linear_cross_entropy` holds when memplan chooses
/// its rows ([`linear_cross_entropy_rows`]).
pub const LINEAR_CROSS_ENTROPY_CHUNK_BYTES: u64 = 32 << 20;

/// The rows per chunk memplan gives `linear_cross_entropy` for `n` rows of `classes` logits
/// of `dtype`: as many as [`LINEAR_CROSS_ENTROPY_CHUNK_BYTES`] hold (a multiple of 8 when
/// more than 8, for the matrix products' tiles), at least one, at most `n` (one chunk).
pub fn linear_cross_entropy_rows(n: u64, classes: u64, dtype: DType) -> u64 {
    let row_bytes = classes.saturating_mul(dtype.size()).max(1);
    let fit = (LINEAR_CROSS_ENTROPY_CHUNK_BYTES / row_bytes).max(1);
    let fit = if fit > 8 { fit / 8 * 8 } else { fit };
    fit.min(n).max(1)
}

/// `linear_cross_entropy(x, weight, labels)`: x `[..., H]` float, weight `[V, H]` of x's
/// dtype, labels `[N]` with N the product of x's leading dims; cross_entropy's attributes
/// as for logits `[N, V]` of x's dtype; `rows` at least 1. Outputs: the loss (as
/// cross_entropy's), dx and dweight (the inputs' types), the workspace
/// ([`LinearCrossEntropyWorkspace`]).
pub(super) fn infer_linear_cross_entropy(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (x, weight, labels) = (inputs[0], inputs[1], inputs[2]);
    float_input(x, "x")?;
    let Some((&hidden, leading)) = x.dims().split_last() else {
        return Err(format!("x must be [..., H], found {x}"));
    };
    let &[classes, weight_hidden] = weight.dims() else {
        return Err(format!("weight must be [V,H], found {weight}"));
    };
    if weight.dtype != x.dtype || weight_hidden != hidden {
        return Err(format!("weight must be {}[V,{hidden}] for x {x}, found {weight}", x.dtype));
    }
    let n = leading.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).ok_or_else(|| format!("x {x} has too many rows"))?;
    let logits = TensorType::new(x.dtype, vec![n, classes]);
    let loss = check_cross_entropy(&logits, labels, attrs)?;
    let rows = attrs.int("rows");
    if rows < 1 {
        return Err(format!("rows must be at least 1, found {rows}"));
    }
    let layout = LinearCrossEntropyWorkspace::new(rows as u64, n, classes, hidden, x.dtype)
        .ok_or_else(|| format!("the workspace of {rows} rows of {classes} logits is too large"))?;
    done(vec![loss, x.clone(), weight.clone(), TensorType::new(DType::F32, vec![layout.bytes / 4])])
}

/// Where `linear_cross_entropy`'s workspace output (`f32[bytes / 4]`) keeps what it uses, in
/// bytes from its start, each part 256-byte aligned: one chunk's logits (`[rows, V]` of x's
/// dtype; their gradient overwrites them); with more than one chunk, a chunk's share of
/// dweight (`partial`, `[V, H]` of x's dtype) and, for f16/bf16 x, dweight's running sum
/// over the chunks in f32 (`sums`, `[V, H]`; for f32 x the sum is dweight itself). One
/// chunk writes dweight directly.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LinearCrossEntropyWorkspace {
    pub logits: u64,
    pub partial: Option<u64>,
    pub sums: Option<u64>,
    pub bytes: u64,
}

impl LinearCrossEntropyWorkspace {
    /// The layout for `n` rows in chunks of `rows` (at least 1); `None` when it overflows.
    pub fn new(rows: u64, n: u64, classes: u64, hidden: u64, dtype: DType) -> Option<LinearCrossEntropyWorkspace> {
        let align = |b: u64| b.checked_next_multiple_of(256);
        let rows = rows.min(n);
        let logits_end = rows.checked_mul(classes)?.checked_mul(dtype.size())?;
        let weight_elems = classes.checked_mul(hidden)?;
        let (mut partial, mut sums, mut end) = (None, None, logits_end);
        if n.div_ceil(rows.max(1)) > 1 {
            let at = align(end)?;
            partial = Some(at);
            end = at.checked_add(weight_elems.checked_mul(dtype.size())?)?;
            if dtype != DType::F32 {
                let at = align(end)?;
                sums = Some(at);
                end = at.checked_add(weight_elems.checked_mul(4)?)?;
            }
        }
        Some(LinearCrossEntropyWorkspace { logits: 0, partial, sums, bytes: align(end.max(4))? })
    }
}

/// The unfused ops' FLOPs: the logits (2NHV), their cross-entropy and its backward (4NV
/// each), dx and dweight (2NHV each).
pub(super) fn flops_linear_cross_entropy(inputs: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    let (x, weight) = (inputs[0], inputs[1]);
    let (hidden, classes) = (dim(weight, 1), dim(weight, 0));
    let n = numel(x) / hidden.max(1);
    let products = n.saturating_mul(hidden).saturating_mul(classes).saturating_mul(6);
    products.saturating_add(n.saturating_mul(classes).saturating_mul(8))
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

/// max_pool2d's attributes (and its backward op's), decoded once for every layer that reads
/// them: the type rule (which checks them), the CPU kernels and the CUDA lowering.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PoolAttrs {
    /// The window's (height, width).
    pub kernel: [u64; 2],
    pub stride: [u64; 2],
    pub padding: [u64; 2],
}

impl PoolAttrs {
    /// The attributes of an op that passed its type rule (a call on others is a memplan
    /// bug, as for [`Attrs`]' getters).
    pub fn of(attrs: &Attrs) -> PoolAttrs {
        Self::checked(attrs).unwrap_or_else(|e| panic!("pooling attributes the type rule accepted: {e}"))
    }

    /// `kernel` and `stride` entries ≥ 1, `padding` entries ≥ 0.
    fn checked(attrs: &Attrs) -> Result<PoolAttrs, String> {
        Ok(PoolAttrs { kernel: pair(attrs, "kernel", 1)?, stride: pair(attrs, "stride", 1)?, padding: pair(attrs, "padding", 0)? })
    }
}

/// cross_entropy's attributes (and its backward op's; PyTorch's `F.cross_entropy`
/// arguments of the same names), decoded once for every layer that reads them.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct CrossEntropyAttrs {
    /// Rows whose label equals it count for nothing, and not in the mean's divisor.
    pub ignore_index: i64,
    /// ε: the target is (1 − ε)·onehot(label) + ε/C.
    pub label_smoothing: f64,
    /// f16/bf16 logits read as f32, an f32 loss.
    pub f32_loss: bool,
}

impl CrossEntropyAttrs {
    /// The attributes of an op that passed its type rule.
    pub fn of(attrs: &Attrs) -> CrossEntropyAttrs {
        CrossEntropyAttrs {
            ignore_index: attrs.int("ignore_index"),
            label_smoothing: attrs.float("label_smoothing"),
            f32_loss: attrs.bool("f32_loss"),
        }
    }
}
