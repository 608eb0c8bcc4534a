//! Shape ops: the reductions `sum` and `mean`, the views (`reshape`, `transpose`,
//! `expand`, `slice`, `select`) with the rules that derive a view's layout from its
//! input's (`View` in their rows; `ir::layout` applies them), and the copies
//! `slice_backward`, `slice_scatter` (a write into a slice, functionalized) and `cat`.
//!
//! A view's layout rule assumes attributes and types that passed the type rule (axes in
//! range, slices inside their dimension). `reshape` is a view exactly where PyTorch's
//! `view` is one ([`reshape_strides`], ATen's `computeStride`); elsewhere the verifier asks
//! for a `contiguous` first.

use super::rules::*;
use super::{Attr, AttrDefault, AttrKind, AttrSpec, Attrs, OpDef, View, attr};
use crate::ir::types::{DType, Shape, TensorType, dense_strides};

use AttrKind as K;

const SLICE_ATTRS: &[AttrSpec] = &[
    attr("axis", K::Int, None),
    attr("start", K::Int, None),
    attr("end", K::Int, None),
    attr("step", K::Int, Some(AttrDefault::Int(1))),
];
const SLICE_BACKWARD_ATTRS: &[AttrSpec] = &[
    attr("shape", K::Ints, None),
    attr("axis", K::Int, None),
    attr("start", K::Int, None),
    attr("end", K::Int, None),
    attr("step", K::Int, Some(AttrDefault::Int(1))),
];

pub(super) const SUM: OpDef = OpDef::new("sum", &["x"], &["out"], infer_sum, "sum over axes")
    .attrs(&[attr("axes", K::Ints, None), attr("keepdim", K::Bool, Some(AttrDefault::Bool(false)))])
    .flops(per_input::<1>)
    .reduction();

pub(super) const MEAN: OpDef = OpDef::new("mean", &["x"], &["out"], infer_mean, "mean over axes")
    .attrs(&[attr("axes", K::Ints, None), attr("keepdim", K::Bool, Some(AttrDefault::Bool(false)))])
    .flops(per_input::<1>)
    .reduction();

pub(super) const ARGMAX: OpDef = OpDef::new("argmax", &["x"], &["out"], infer_argmax, "the position of x's largest element along axis (the first on ties; a NaN counts as largest), as i64")
    .attrs(&[attr("axis", K::Int, None), attr("keepdim", K::Bool, Some(AttrDefault::Bool(false)))])
    .flops(per_input::<1>)
    .stops_gradient();

pub(super) const RESHAPE: OpDef = OpDef::new("reshape", &["x"], &["out"], infer_reshape, "x's elements in row-major order with a new shape (a view)")
    .attrs(&[attr("shape", K::Ints, None)])
    .view(View { input: 0, layout: reshape_view, keeps_order: true });

pub(super) const DETACH: OpDef = OpDef::new("detach", &["x"], &["out"], infer_detach, "x itself, through which no gradient flows (a view; PyTorch's `.detach()`)")
    .view(View { input: 0, layout: identity_view, keeps_order: true })
    .stops_gradient();

pub(super) const TRANSPOSE: OpDef = OpDef::new("transpose", &["x"], &["out"], infer_transpose, "x with dimensions permuted: out dim i = x dim perm[i] (a view)")
    .attrs(&[attr("perm", K::Ints, None)])
    .view(View { input: 0, layout: transpose_view, keeps_order: false });

pub(super) const EXPAND: OpDef = OpDef::new("expand", &["x"], &["out"], infer_expand, "x broadcast to shape (a view)")
    .attrs(&[attr("shape", K::Ints, None)])
    .view(View { input: 0, layout: expand_view, keeps_order: false });

pub(super) const SLICE: OpDef = OpDef::new("slice", &["x"], &["out"], infer_slice, "x[start:end:step] along axis (a view)")
    .attrs(SLICE_ATTRS)
    .view(View { input: 0, layout: slice_view, keeps_order: false });

pub(super) const SELECT: OpDef = OpDef::new("select", &["x"], &["out"], infer_select, "x[index] along axis, the axis dropped (a view)")
    .attrs(&[attr("axis", K::Int, None), attr("index", K::Int, None)])
    .view(View { input: 0, layout: select_view, keeps_order: false });

pub(super) const SLICE_BACKWARD: OpDef = OpDef::new("slice_backward", &["dy"], &["dx"], infer_slice_backward, "zeros of shape with dy at the slice: slice's gradient")
    .attrs(SLICE_BACKWARD_ATTRS)
    .backward();

pub(super) const SLICE_SCATTER: OpDef =
    OpDef::new("slice_scatter", &["x", "src"], &["out"], infer_slice_scatter, "x with src written over x[start:end:step] along axis (PyTorch's `x[..., a:b] = src`, functionalized)")
        .attrs(SLICE_ATTRS)
        .inplace(&[(0, 0)]);

pub(super) const CAT: OpDef = OpDef::new("cat", &["xs..."], &["out"], infer_cat, "the inputs concatenated along axis")
    .attrs(&[attr("axis", K::Int, None)]);

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

/// `argmax(x, axis, keepdim)`: x numeric (PyTorch has no argmax of bools), the axis not
/// empty; the output is i64, x's shape without the axis (size 1 with keepdim).
pub(super) fn infer_argmax(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let x = inputs[0];
    if x.dtype == DType::Bool {
        return Err(format!("argmax needs numbers, found {x} (cast to i64 first)"));
    }
    let at = axis(attrs.int("axis"), x)?;
    if x.dims()[at] == 0 {
        return Err(format!("argmax along an empty axis of {x}"));
    }
    let mut dims = x.dims().to_vec();
    if attrs.bool("keepdim") {
        dims[at] = 1;
    } else {
        dims.remove(at);
    }
    done(vec![TensorType::new(DType::I64, dims)])
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

/// `detach(x)`: any tensor; the output is `x` itself.
fn infer_detach(inputs: &[&TensorType], _: &Attrs) -> Rule {
    done(vec![inputs[0].clone()])
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

/// `slice_scatter(x, src, axis, start, end, step)`: `src` must be exactly the slice of `x`
/// (its dtype and shape); the output has `x`'s type.
fn infer_slice_scatter(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (x, src) = (inputs[0], inputs[1]);
    let expected = sliced(x, attrs)?;
    if *src != expected {
        return Err(format!("src is {src}, but this slice of {x} is {expected}"));
    }
    done(vec![x.clone()])
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

// ---------------------------------------------------------------------------------------
// View layouts: each view op's output indexes its input's bytes (see `View`).

/// An axis attribute resolved against a rank (the type rule has checked its range).
fn resolved(attrs: &Attrs, name: &str, rank: usize) -> usize {
    let a = attrs.int(name);
    (if a < 0 { a + rank as i64 } else { a }) as usize
}

/// `reshape` keeps the elements in row-major order under a new shape, which needs no copy
/// exactly when PyTorch's `view` needs none ([`reshape_strides`]).
fn reshape_view(_: &Attrs, offset: u64, shape: &[u64], strides: &[u64], out_shape: &[u64]) -> Option<(u64, Vec<u64>)> {
    Some((offset, reshape_strides(shape, strides, out_shape)?))
}

/// `detach` reads its input's elements where they are.
fn identity_view(_: &Attrs, offset: u64, _: &[u64], strides: &[u64], _: &[u64]) -> Option<(u64, Vec<u64>)> {
    Some((offset, strides.to_vec()))
}

/// `transpose` permutes the strides as the shape.
fn transpose_view(attrs: &Attrs, offset: u64, _: &[u64], strides: &[u64], _: &[u64]) -> Option<(u64, Vec<u64>)> {
    Some((offset, attrs.ints("perm").iter().map(|&p| strides[p as usize]).collect()))
}

/// `expand` gives broadcast dimensions stride 0.
fn expand_view(_: &Attrs, offset: u64, shape: &[u64], strides: &[u64], out_shape: &[u64]) -> Option<(u64, Vec<u64>)> {
    let added = out_shape.len() - shape.len();
    let strides = (0..out_shape.len())
        .map(|i| match i.checked_sub(added) {
            Some(j) if shape[j] == out_shape[i] => strides[j],
            _ => 0,
        })
        .collect();
    Some((offset, strides))
}

/// `slice` moves the offset to the first element taken and multiplies the axis's stride by
/// the step.
fn slice_view(attrs: &Attrs, offset: u64, shape: &[u64], strides: &[u64], _: &[u64]) -> Option<(u64, Vec<u64>)> {
    let a = resolved(attrs, "axis", shape.len());
    let mut strides = strides.to_vec();
    let offset = offset + attrs.int("start") as u64 * strides[a];
    strides[a] *= attrs.int("step") as u64;
    Some((offset, strides))
}

/// `select` moves the offset to the index taken and drops the axis.
fn select_view(attrs: &Attrs, offset: u64, shape: &[u64], strides: &[u64], _: &[u64]) -> Option<(u64, Vec<u64>)> {
    let a = resolved(attrs, "axis", shape.len());
    let mut strides = strides.to_vec();
    let offset = offset + attrs.int("index") as u64 * strides[a];
    strides.remove(a);
    Some((offset, strides))
}

/// The strides under which `shape`'s elements, laid out by `strides`, read in row-major
/// order as `new_shape` (ATen's `computeStride`); `None` if no strides do. Both shapes
/// have the same element count.
pub fn reshape_strides(shape: &[u64], strides: &[u64], new_shape: &[u64]) -> Option<Vec<u64>> {
    if shape.is_empty() || shape.contains(&0) || shape == new_shape {
        // A scalar or an empty tensor has no layout to keep; the same shape keeps its own.
        return Some(if shape == new_shape { strides.to_vec() } else { dense_strides(new_shape) });
    }
    let mut new_strides = vec![0; new_shape.len()];
    // Walk both shapes from the last dimension, one chunk of the old shape at a time: a
    // chunk is a run of dimensions that are contiguous with each other in memory.
    let mut view_d = new_shape.len() as isize - 1;
    let mut chunk_base_stride = *strides.last().expect("shape is not empty");
    let (mut tensor_numel, mut view_numel) = (1u64, 1u64);
    for tensor_d in (0..shape.len()).rev() {
        tensor_numel *= shape[tensor_d];
        let chunk_ends = tensor_d == 0
            || (shape[tensor_d - 1] != 1 && strides[tensor_d - 1] != tensor_numel * chunk_base_stride);
        if chunk_ends {
            while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1) {
                new_strides[view_d as usize] = view_numel * chunk_base_stride;
                view_numel *= new_shape[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base_stride = strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(new_strides)
}

