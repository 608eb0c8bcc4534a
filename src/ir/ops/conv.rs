//! Convolutions: `conv2d`, `conv3d` and `conv_transpose2d` (strided, padded, dilated,
//! grouped; NCHW and NCDHW, PyTorch's output sizes) and their backward ops, which give both
//! the input's and the weight's gradient. FLOPs: a multiply-add per element of one side per
//! weight tap.

use super::rules::*;
use super::{Attr, AttrDefault, AttrKind, AttrSpec, Attrs, OpDef, attr};
use crate::ir::types::TensorType;

use AttrKind as K;

/// PyTorch's conv2d arguments: stride, padding, dilation (the spacing of the kernel's taps)
/// and groups (channels split into that many independent convolutions).
const CONV_ATTRS: &[AttrSpec] = &[
    STRIDE_1,
    PADDING_0,
    attr("dilation", K::Ints, Some(AttrDefault::Ints(&[1, 1]))),
    attr("groups", K::Int, Some(AttrDefault::Int(1))),
];
/// PyTorch's conv_transpose2d arguments (output_padding: rows and columns added at the end
/// of the output, to pick one of the sizes a strided conv2d maps to the same input size).
const CONV_TRANSPOSE_ATTRS: &[AttrSpec] = &[
    STRIDE_1,
    PADDING_0,
    attr("output_padding", K::Ints, Some(AttrDefault::Ints(&[0, 0]))),
    attr("dilation", K::Ints, Some(AttrDefault::Ints(&[1, 1]))),
    attr("groups", K::Int, Some(AttrDefault::Int(1))),
];

pub(super) const CONV2D: OpDef = OpDef::new("conv2d", &["x", "w"], &["y"], infer_conv2d, "2-d cross-correlation of x[N,C,H,W] with w[K,C/groups,R,S]: zero padding, dilated taps, channel groups")
    .attrs(CONV_ATTRS)
    .flops(flops_conv2d);

pub(super) const CONV2D_BACKWARD: OpDef = OpDef::new("conv2d_backward", &["dy", "x", "w"], &["dx", "dw"], infer_conv2d_backward, "conv2d's gradients w.r.t. x and w")
    .attrs(CONV_ATTRS)
    .backward()
    .flops(flops_conv2d_backward);

/// PyTorch's conv3d arguments, conv2d's with a third (depth) entry first.
const CONV3D_ATTRS: &[AttrSpec] = &[
    attr("stride", K::Ints, Some(AttrDefault::Ints(&[1, 1, 1]))),
    attr("padding", K::Ints, Some(AttrDefault::Ints(&[0, 0, 0]))),
    attr("dilation", K::Ints, Some(AttrDefault::Ints(&[1, 1, 1]))),
    attr("groups", K::Int, Some(AttrDefault::Int(1))),
];

pub(super) const CONV3D: OpDef = OpDef::new("conv3d", &["x", "w"], &["y"], infer_conv3d, "3-d cross-correlation of x[N,C,D,H,W] with w[K,C/groups,T,R,S]: zero padding, dilated taps, channel groups")
    .attrs(CONV3D_ATTRS)
    .flops(flops_conv3d);

pub(super) const CONV3D_BACKWARD: OpDef = OpDef::new("conv3d_backward", &["dy", "x", "w"], &["dx", "dw"], infer_conv3d_backward, "conv3d's gradients w.r.t. x and w")
    .attrs(CONV3D_ATTRS)
    .backward()
    .flops(flops_conv3d_backward);

pub(super) const CONV_TRANSPOSE2D: OpDef = OpDef::new("conv_transpose2d", &["x", "w"], &["y"], infer_conv_transpose2d, "the transpose of conv2d: x[N,C,H,W] spread through w[C,K/groups,R,S] into y[N,K,P,Q]")
    .attrs(CONV_TRANSPOSE_ATTRS)
    .flops(flops_conv_transpose2d);

pub(super) const CONV_TRANSPOSE2D_BACKWARD: OpDef = OpDef::new("conv_transpose2d_backward", &["dy", "x", "w"], &["dx", "dw"], infer_conv_transpose2d_backward, "conv_transpose2d's gradients w.r.t. x (a conv2d of dy with w) and w")
    .attrs(CONV_TRANSPOSE_ATTRS)
    .backward()
    .flops(flops_conv_transpose2d_backward);

/// conv2d's and conv_transpose2d's attributes (and their backward ops'), decoded once for
/// every layer that reads them: the type rule (which checks them), the CPU kernels and the
/// CUDA lowering.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ConvAttrs {
    pub stride: [u64; 2],
    pub padding: [u64; 2],
    /// The spacing of the kernel's taps.
    pub dilation: [u64; 2],
    /// Channels split into this many independent convolutions.
    pub groups: u64,
    /// conv_transpose2d's rows and columns added at the end of the output (0 for conv2d).
    pub output_padding: [u64; 2],
}

impl ConvAttrs {
    /// The attributes of an op that passed its type rule (a call on others is a memplan
    /// bug, as for [`Attrs`]' getters).
    pub fn of(attrs: &Attrs) -> ConvAttrs {
        let decoded = Self::checked(attrs).and_then(|conv| {
            let output_padding = if attrs.get("output_padding").is_some() { pair(attrs, "output_padding", 0)? } else { [0, 0] };
            Ok(ConvAttrs { output_padding, ..conv })
        });
        decoded.unwrap_or_else(|e| panic!("convolution attributes the type rule accepted: {e}"))
    }

    /// The shared attributes, checked: `stride` and `dilation` entries ≥ 1, `padding`
    /// entries ≥ 0, `groups` ≥ 1 (`output_padding` is left 0: conv_transpose2d's rule
    /// checks it against the shapes).
    fn checked(attrs: &Attrs) -> Result<ConvAttrs, String> {
        let groups = attrs.int("groups");
        if groups < 1 {
            return Err(format!("groups={groups} must be at least 1"));
        }
        Ok(ConvAttrs {
            stride: pair(attrs, "stride", 1)?,
            padding: pair(attrs, "padding", 0)?,
            dilation: pair(attrs, "dilation", 1)?,
            groups: groups as u64,
            output_padding: [0, 0],
        })
    }
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
fn extents(conv: &ConvAttrs, r: u64, s: u64) -> Result<[u64; 2], String> {
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
    let conv = ConvAttrs::checked(attrs)?;
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

/// conv3d's attributes (and its backward op's), decoded once: (depth, height, width)
/// entries.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Conv3dAttrs {
    pub stride: [u64; 3],
    pub padding: [u64; 3],
    /// The spacing of the kernel's taps.
    pub dilation: [u64; 3],
    /// Channels split into this many independent convolutions.
    pub groups: u64,
}

impl Conv3dAttrs {
    /// The attributes of an op that passed its type rule.
    pub fn of(attrs: &Attrs) -> Conv3dAttrs {
        Self::checked(attrs).unwrap_or_else(|e| panic!("conv3d attributes the type rule accepted: {e}"))
    }

    /// `stride` and `dilation` entries ≥ 1, `padding` entries ≥ 0, three of each; `groups` ≥ 1.
    fn checked(attrs: &Attrs) -> Result<Conv3dAttrs, String> {
        let groups = attrs.int("groups");
        if groups < 1 {
            return Err(format!("groups={groups} must be at least 1"));
        }
        let triple = |name: &str, min: i64| -> Result<[u64; 3], String> {
            match *attrs.ints(name) {
                [d, h, w] if d >= min && h >= min && w >= min => Ok([d as u64, h as u64, w as u64]),
                [_, _, _] => Err(format!("{name}={}: each entry must be at least {min}", shown(attrs, name))),
                _ => Err(format!("{name}={} must have 3 entries (depth, height, width)", shown(attrs, name))),
            }
        };
        Ok(Conv3dAttrs {
            stride: triple("stride", 1)?,
            padding: triple("padding", 0)?,
            dilation: triple("dilation", 1)?,
            groups: groups as u64,
        })
    }
}

/// `conv3d(x, w)`: `x[N,C,D,H,W]` and `w[K,C/groups,T,R,S]` of one float dtype, `groups`
/// dividing C and K; gives `y[N,K,O,P,Q]`, each output extent as conv2d's (PyTorch's sizes).
pub(super) fn infer_conv3d(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (x, w) = (inputs[0], inputs[1]);
    let dtype = same_dtype(inputs)?;
    float_input(x, "x")?;
    let (&[n, c, d, h, wd], &[k, wc, t, r, s]) = (x.dims(), w.dims()) else {
        return Err(format!("x must be [N,C,D,H,W] and w [K,C/groups,T,R,S], found {x} and {w}"));
    };
    let conv = Conv3dAttrs::checked(attrs)?;
    let g = conv.groups;
    let per_group = divides(g, c, &format!("the input channels: x {x} has C={c}"))?;
    divides(g, k, &format!("the output channels: w {w} has K={k}"))?;
    if wc != per_group {
        return Err(format!("channels differ: x {x} has C={c}, so with groups={g} w needs C/groups={per_group}, but w {w} has {wc}"));
    }
    let in_context = |e: String| format!("{e} (x {x}, w {w})");
    let mut out = vec![n, k];
    for (i, (size, taps, dim)) in [(d, t, "depth"), (h, r, "height"), (wd, s, "width")].into_iter().enumerate() {
        let extent = dilated(taps, conv.dilation[i], dim)?;
        out.push(window(size, extent, conv.stride[i], conv.padding[i], dim).map_err(in_context)?);
    }
    done(vec![TensorType::new(dtype, out)])
}

pub(super) fn infer_conv3d_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, x, w) = (inputs[0], inputs[1], inputs[2]);
    let y = infer_conv3d(&[x, w], attrs)?.remove(0);
    if *dy != y {
        return Err(format!("dy must be conv3d(x {x}, w {w})'s type {y}, found {dy}"));
    }
    done(vec![x.clone(), w.clone()])
}

/// 2·N·K·O·P·Q·(C/groups)·T·R·S: a multiply-add per element of y per tap of w.
pub(super) fn flops_conv3d(inputs: &[&TensorType], outputs: &[&TensorType], _: &Attrs) -> u64 {
    let taps = inputs.get(1).map_or(0, |w| w.dims().iter().skip(1).fold(1u64, |n, &d| n.saturating_mul(d)));
    outputs.first().map_or(0, |y| numel(y)).saturating_mul(taps).saturating_mul(2)
}

/// dx and dw each cost as much as the forward.
pub(super) fn flops_conv3d_backward(inputs: &[&TensorType], _: &[&TensorType], _: &Attrs) -> u64 {
    let taps = inputs.get(2).map_or(0, |w| w.dims().iter().skip(1).fold(1u64, |n, &d| n.saturating_mul(d)));
    inputs.first().map_or(0, |dy| numel(dy)).saturating_mul(taps).saturating_mul(4)
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
    let conv = ConvAttrs::checked(attrs)?;
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
