"""Resampling handlers: `adaptive_avg_pool2d` (and 1-d), nearest and bilinear upsampling,
and `grid_sample` (2-d: bilinear or nearest, zeros or border padding).

Global average pooling (output 1x1) is a `mean`, whose gradient is a broadcast view, not a
buffer. Nearest upsampling is written by its output size; scale factors that are not
whole numbers become `extern` (memplan matches PyTorch for sizes and integer factors).
"""

from __future__ import annotations

import torch

from ..step import ExportError
from ._helpers import reshaped
from .registry import aten, handles


@handles(aten.adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(t, x, output_size):
    size = [int(d) for d in output_size]
    if size == [1, 1]:
        # Global pooling is a mean: its gradient is a broadcast view, no buffer.
        return t.emit("mean", [x], [("axes", [x.rank - 2, x.rank - 1]), ("keepdim", True)])
    if x.rank != 4:
        raise ExportError(f"adaptive_avg_pool2d of a rank-{x.rank} tensor (memplan's takes [N,C,H,W])")
    return t.emit("adaptive_avg_pool2d", [x], [("output_size", size)])


@handles(aten.upsample_nearest2d.vec, aten.upsample_nearest2d.default)
def upsample_nearest2d(t, x, output_size=None, scale_factors=None):
    out = t.out_fake()
    if scale_factors is not None and any(float(f) != int(f) for f in scale_factors):
        raise ExportError(f"nearest upsampling by scale factors {list(scale_factors)} (memplan matches PyTorch for sizes and integer factors)")
    return t.emit("upsample_nearest2d", [x], [("output_size", [int(d) for d in out.shape[2:]])])


@handles(aten.upsample_bilinear2d.vec)
def upsample_bilinear2d(t, x, output_size, align_corners, scale_factors=None):
    """Bilinear resizing: memplan's `upsample_bilinear2d` to the output's size. Without
    `align_corners` PyTorch maps output pixels through 1/scale when given a scale factor
    and through size/out otherwise; memplan through size/out: the same where the two are
    equal in float32 (a factor of 2, 4, 8 on sizes it divides), else refused."""
    out = [int(d) for d in t.out_fake().shape[2:]]
    if scale_factors is not None and not align_corners:
        for factor, size, o in zip(scale_factors, x.shape[2:], out):
            inverse = torch.tensor(1.0 / float(factor), dtype=torch.float32)
            if factor and float(factor) > 0 and inverse != torch.tensor(size / o, dtype=torch.float32):
                raise ExportError(f"bilinear upsampling by scale factors {list(scale_factors)} that are not the sizes' ratio")
    attrs = [("output_size", out)] + ([("align_corners", True)] if align_corners else [])
    return t.emit("upsample_bilinear2d", [x], attrs)


@handles(aten.upsample_bilinear2d.default)
def upsample_bilinear2d_sizes(t, x, output_size, align_corners, scales_h=None, scales_w=None):
    factors = None if scales_h is None and scales_w is None else [scales_h or 0.0, scales_w or 0.0]
    return upsample_bilinear2d(t, x, output_size, align_corners, factors)


@handles(aten.adaptive_avg_pool1d.default)
def adaptive_avg_pool1d(t, x, output_size):
    """`adaptive_avg_pool1d` of [N,C,L] (or [C,L]) as `adaptive_avg_pool2d` of the height-1
    image [N,C,1,L] (a view), to [1, size], viewed back."""
    size = int(output_size[0])
    if x.rank not in (2, 3):
        raise ExportError(f"adaptive_avg_pool1d of a rank-{x.rank} tensor")
    if size == 1:
        return t.emit("mean", [x], [("axes", [x.rank - 1]), ("keepdim", True)])
    image = reshaped(t, x, [1] * (3 - x.rank) + x.shape[:-1] + [1, x.shape[-1]], "image")
    out = list(image.shape[:2]) + [1, size]
    pooled = t.emit("adaptive_avg_pool2d", [image], [("output_size", [1, size])], fake=t.fake_like(out, x.fake.dtype),
                    final=False, role="pooled")
    return reshaped(t, pooled, t.out_fake().shape, "adaptive_avg_pool1d", final=True)


_GRID_MODES = {0: "bilinear", 1: "nearest"}
_GRID_PADDINGS = {0: "zeros", 1: "border"}


@handles(aten.grid_sampler_2d.default)
def grid_sampler_2d(t, x, grid, interpolation_mode, padding_mode, align_corners):
    """`F.grid_sample` of images as memplan's `grid_sample` (bilinear or nearest; zeros or
    border padding); bicubic interpolation and reflection padding are refused (extern).
    PyTorch promotes nothing here: x and grid share a dtype."""
    mode, padding = _GRID_MODES.get(int(interpolation_mode)), _GRID_PADDINGS.get(int(padding_mode))
    if mode is None:
        raise ExportError("grid_sample with mode='bicubic' is not supported (bilinear or nearest)")
    if padding is None:
        raise ExportError("grid_sample with padding_mode='reflection' is not supported (zeros or border)")
    attrs = []
    if mode != "bilinear":
        attrs.append(("mode", mode))
    if padding != "zeros":
        attrs.append(("padding_mode", padding))
    if align_corners:
        attrs.append(("align_corners", True))
    return t.emit("grid_sample", [x, grid], attrs)
