//! Resampling of images: `adaptive_avg_pool2d`, `upsample_nearest2d` and
//! `upsample_bilinear2d` (NCHW, PyTorch's bins, source indices and weights) and their
//! backward ops, which name the forward input's shape; and `grid_sample`, sampling at
//! positions a tensor gives (PyTorch's `F.grid_sample`), whose backward gives the image's
//! and the grid's gradients.
//! FLOPs of the adaptive pool count each bin's elements, in closed form.

use super::rules::*;
use super::{Attr, AttrDefault, AttrKind, AttrSpec, Attrs, OpDef, attr};
use crate::ir::types::TensorType;

use AttrKind as K;

/// The (height, width) of a resampled image: adaptive_avg_pool2d's and upsample_nearest2d's.
const OUTPUT_SIZE: AttrSpec = attr("output_size", K::Ints, None);
/// Their backward ops: the forward input's shape, and the forward's output size.
const RESAMPLE_BACKWARD_ATTRS: &[AttrSpec] = &[attr("shape", K::Ints, None), OUTPUT_SIZE];

pub(super) const ADAPTIVE_AVG_POOL2D: OpDef = OpDef::new("adaptive_avg_pool2d", &["x"], &["y"], infer_resample, "the mean of each of output_size bins of x[N,C,H,W] (PyTorch's adaptive bins)")
    .attrs(&[OUTPUT_SIZE])
    .flops(flops_adaptive_avg_pool2d);

pub(super) const ADAPTIVE_AVG_POOL2D_BACKWARD: OpDef = OpDef::new("adaptive_avg_pool2d_backward", &["dy"], &["dx"], infer_resample_backward, "dx of shape: each dy element spread evenly over its bin; overlapping bins add")
    .attrs(RESAMPLE_BACKWARD_ATTRS)
    .backward()
    .flops(flops_adaptive_avg_pool2d);

pub(super) const UPSAMPLE_NEAREST2D: OpDef = OpDef::new("upsample_nearest2d", &["x"], &["y"], infer_resample, "x[N,C,H,W] resized to output_size, each pixel copied from its nearest source (PyTorch's nearest)")
    .attrs(&[OUTPUT_SIZE]);

pub(super) const UPSAMPLE_NEAREST2D_BACKWARD: OpDef = OpDef::new("upsample_nearest2d_backward", &["dy"], &["dx"], infer_resample_backward, "dx of shape: each dy element added into the pixel it was copied from")
    .attrs(RESAMPLE_BACKWARD_ATTRS)
    .backward()
    .flops(per_input::<1>);

/// PyTorch's `align_corners` of bilinear resampling: the corner pixels' centres map onto
/// each other (else the images' edges do).
const ALIGN_CORNERS: AttrSpec = attr("align_corners", K::Bool, Some(AttrDefault::Bool(false)));
const BILINEAR_BACKWARD_ATTRS: &[AttrSpec] = &[attr("shape", K::Ints, None), OUTPUT_SIZE, ALIGN_CORNERS];

pub(super) const UPSAMPLE_BILINEAR2D: OpDef = OpDef::new("upsample_bilinear2d", &["x"], &["y"], infer_resample, "x[N,C,H,W] resized to output_size, each pixel a weighted sum of its four nearest sources (PyTorch's bilinear)")
    .attrs(&[OUTPUT_SIZE, ALIGN_CORNERS])
    .flops(per_output::<7>);

pub(super) const UPSAMPLE_BILINEAR2D_BACKWARD: OpDef = OpDef::new("upsample_bilinear2d_backward", &["dy"], &["dx"], infer_resample_backward, "dx of shape: each dy element added into its four sources, each times its weight")
    .attrs(BILINEAR_BACKWARD_ATTRS)
    .backward()
    .flops(per_input::<8>);

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

/// grid_sample's arguments: the interpolation (`"bilinear"` or `"nearest"`), what a position
/// outside the image reads (`"zeros"`, or `"border"`: the nearest edge pixel), and
/// `align_corners` (the grid's −1 and 1 are the corner pixels' centres, else the image's
/// edges).
const GRID_SAMPLE_ATTRS: &[AttrSpec] = &[
    attr("mode", K::Str, Some(AttrDefault::Str("bilinear"))),
    attr("padding_mode", K::Str, Some(AttrDefault::Str("zeros"))),
    ALIGN_CORNERS,
];

pub(super) const GRID_SAMPLE: OpDef = OpDef::new("grid_sample", &["x", "grid"], &["y"], infer_grid_sample, "x[N,C,H,W] sampled at the positions grid[N,P,Q,2] gives ((x, y) in [-1, 1]): bilinear or nearest, zeros or border outside (PyTorch's grid_sample)")
    .attrs(GRID_SAMPLE_ATTRS)
    .flops(per_output::<8>);

pub(super) const GRID_SAMPLE_BACKWARD: OpDef = OpDef::new("grid_sample_backward", &["dy", "x", "grid"], &["dx", "dgrid"], infer_grid_sample_backward, "grid_sample's gradients: dy added into the pixels each sample read, times their weights; and the grid's, through the weights")
    .attrs(GRID_SAMPLE_ATTRS)
    .backward()
    .flops(per_input::<16>);

/// grid_sample's attributes, decoded once.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct GridSampleAttrs {
    /// Nearest pixel (rounding half to even), else bilinear.
    pub nearest: bool,
    /// Positions outside the image read the nearest edge pixel, else 0.
    pub border: bool,
    pub align_corners: bool,
}

impl GridSampleAttrs {
    /// The attributes of an op that passed its type rule.
    pub fn of(attrs: &Attrs) -> GridSampleAttrs {
        Self::checked(attrs).unwrap_or_else(|e| panic!("grid_sample attributes the type rule accepted: {e}"))
    }

    fn checked(attrs: &Attrs) -> Result<GridSampleAttrs, String> {
        let nearest = match attrs.str("mode") {
            "bilinear" => false,
            "nearest" => true,
            other => return Err(format!("mode={other:?}: expected \"bilinear\" or \"nearest\"")),
        };
        let border = match attrs.str("padding_mode") {
            "zeros" => false,
            "border" => true,
            other => return Err(format!("padding_mode={other:?}: expected \"zeros\" or \"border\"")),
        };
        Ok(GridSampleAttrs { nearest, border, align_corners: attrs.bool("align_corners") })
    }
}

/// `grid_sample(x, grid)`: `x[N,C,H,W]` and `grid[N,P,Q,2]` of one float dtype; gives
/// `y[N,C,P,Q]`.
pub(super) fn infer_grid_sample(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (x, grid) = (inputs[0], inputs[1]);
    let dtype = same_dtype(inputs)?;
    float_input(x, "x")?;
    GridSampleAttrs::checked(attrs)?;
    match (x.dims(), grid.dims()) {
        (&[n, c, _, _], &[gn, p, q, 2]) if gn == n => done(vec![TensorType::new(dtype, vec![n, c, p, q])]),
        _ => Err(format!("x must be [N,C,H,W] and grid [N,P,Q,2] (the same N), found {x} and {grid}")),
    }
}

/// `grid_sample_backward(dy, x, grid)`: `dy` of grid_sample(x, grid)'s type; gives dx and
/// dgrid of x's and grid's types.
pub(super) fn infer_grid_sample_backward(inputs: &[&TensorType], attrs: &Attrs) -> Rule {
    let (dy, x, grid) = (inputs[0], inputs[1], inputs[2]);
    let y = infer_grid_sample(&[x, grid], attrs)?.remove(0);
    if *dy != y {
        return Err(format!("dy must be grid_sample(x {x}, grid {grid})'s type {y}, found {dy}"));
    }
    done(vec![x.clone(), grid.clone()])
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
