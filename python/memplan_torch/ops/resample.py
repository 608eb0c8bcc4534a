"""Resampling handlers: `adaptive_avg_pool2d` and nearest upsampling.

Global average pooling (output 1x1) is a `mean`, whose gradient is a broadcast view, not a
buffer. Nearest upsampling is written by its output size; scale factors that are not
whole numbers become `extern` (memplan matches PyTorch for sizes and integer factors).
"""

from __future__ import annotations

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


@handles(aten.adaptive_avg_pool1d.default)
def adaptive_avg_pool1d(t, x, output_size):
    """`adaptive_avg_pool1d` of [N,C,L] (or [C,L]) as `adaptive_avg_pool2d` of the height-1
    image [N,C,1,L] (a view), to [1, size], viewed back."""
    size = int(output_size[0])
    if x.rank not in (2, 3):
        raise ExportError(f"adaptive_avg_pool1d of a rank-{x.rank} tensor")
    if size == 1:
        return t.emit("mean", [x], [("axes", [x.rank - 1]), ("keepdim", True)])
    image = reshaped(t, x, [1] * (4 - x.rank) + x.shape[:-1] + [1, x.shape[-1]], "image")
    out = list(image.shape[:2]) + [1, size]
    pooled = t.emit("adaptive_avg_pool2d", [image], [("output_size", [1, size])], fake=t.fake_like(out, x.fake.dtype),
                    final=False, role="pooled")
    return reshaped(t, pooled, t.out_fake().shape, "adaptive_avg_pool1d", final=True)
