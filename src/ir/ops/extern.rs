//! Ops of another framework, which memplan plans and checks but cannot run: `extern` (a
//! computation, its output type and FLOPs written out), `extern_view` (an output that
//! aliases its input) and `extern_backward`. Their type rule takes the output type as
//! written: memplan cannot infer another framework's op.

use super::rules::*;
use super::{Attr, AttrDefault, AttrKind, AttrSpec, Attrs, OpDef, View, attr};
use crate::ir::types::{TensorType, dense_strides};

use AttrKind as K;

const EXTERN_ATTRS: &[AttrSpec] = &[
    attr("target", K::Str, None),
    attr("shape", K::Ints, None),
    attr("dtype", K::DType, None),
    attr("flops", K::Int, Some(AttrDefault::Int(0))),
];

/// `extern`'s, and `bound`: for an output whose size depends on the data (PyTorch's
/// `nonzero`, `x[mask]`), the symbols of its shape and their upper bounds the shape was
/// written with (`"u0 <= 64"`): the plan holds the most memory the op can take, and the
/// report lists it. Empty for a static shape.
const EXTERN_BOUNDED_ATTRS: &[AttrSpec] = &[
    attr("target", K::Str, None),
    attr("shape", K::Ints, None),
    attr("dtype", K::DType, None),
    attr("flops", K::Int, Some(AttrDefault::Int(0))),
    attr("bound", K::Str, Some(AttrDefault::Str(""))),
];

pub(super) const EXTERN: OpDef = OpDef::new("extern", &["xs..."], &["out"], infer_extern, "another framework's op (target), its output of type dtype[shape] (a data-dependent size at its upper bound, bound naming it): planned, not run")
    .attrs(EXTERN_BOUNDED_ATTRS)
    .flops(attr_flops);

pub(super) const EXTERN_VIEW: OpDef = OpDef::new("extern_view", &["x"], &["out"], infer_extern, "another framework's op whose output aliases x (a view): planned, not run")
    .attrs(&[attr("target", K::Str, None), attr("shape", K::Ints, None), attr("dtype", K::DType, None)])
    .view(View { input: 0, layout: extern_view, keeps_order: false });

pub(super) const EXTERN_BACKWARD: OpDef = OpDef::new("extern_backward", &["dy", "xs..."], &["dx"], infer_extern, "the gradient of an extern op for one input: reads dy and the op's inputs; planned, not run")
    .attrs(EXTERN_ATTRS)
    .backward()
    .flops(attr_flops);

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

/// Another framework's view: memplan cannot know how it indexes x, so it is taken as dense
/// at x's offset (the layout only matters to executors, which refuse extern ops).
fn extern_view(_: &Attrs, offset: u64, _: &[u64], _: &[u64], out_shape: &[u64]) -> Option<(u64, Vec<u64>)> {
    Some((offset, dense_strides(out_shape)))
}
