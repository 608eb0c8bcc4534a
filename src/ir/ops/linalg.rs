//! Linear algebra: `matmul` with optional transposes of the last two dimensions and
//! broadcast batch dimensions, its type rule and FLOPs (2 per multiply-add).

use super::rules::*;
use super::{Attr, AttrDefault, AttrKind, Attrs, OpDef, attr};
use crate::ir::types::{Shape, TensorType};

use AttrKind as K;

pub(super) const MATMUL: OpDef = OpDef::new("matmul", &["a", "b"], &["out"], infer_matmul, "a @ b over the last two dims (each optionally transposed), batch dims broadcast")
    .attrs(&[attr("transpose_a", K::Bool, Some(AttrDefault::Bool(false))), attr("transpose_b", K::Bool, Some(AttrDefault::Bool(false)))])
    .flops(flops_matmul);

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
    let MatmulAttrs { transpose_a: ta, transpose_b: tb } = MatmulAttrs::of(attrs);
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

/// matmul's attributes, decoded once for every layer that reads them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MatmulAttrs {
    /// The last two dimensions of `a` are read transposed.
    pub transpose_a: bool,
    /// Likewise for `b`.
    pub transpose_b: bool,
}

impl MatmulAttrs {
    /// The attributes of an op of the matmul row.
    pub fn of(attrs: &Attrs) -> MatmulAttrs {
        MatmulAttrs { transpose_a: attrs.bool("transpose_a"), transpose_b: attrs.bool("transpose_b") }
    }
}
