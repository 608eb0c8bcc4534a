"""The attention handler: `scaled_dot_product_attention` as memplan's fused `attention`.

Only the forms memplan's op has: no `attn_mask` (causal masking by `is_causal`) and no
attention dropout; others become `extern`. The output keeps PyTorch's flash layout (see
`attention` below), so merging the heads afterwards copies nothing.
"""

from __future__ import annotations

import math

import torch

from ..step import ExportError
from .registry import aten, handles


@handles(aten.scaled_dot_product_attention.default)
def attention(t, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if attn_mask is not None:
        raise ExportError("scaled_dot_product_attention with attn_mask is not supported (use is_causal)")
    if dropout_p:
        raise ExportError("scaled_dot_product_attention with dropout_p > 0 is not supported")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    # PyTorch's flash attention writes out [..., T, H, Ev] and returns a transposed view of it,
    # so the usual `y.transpose(1, 2).contiguous().view(B, T, C)` copies nothing: the same
    # here with `transpose_out` (else the copy would be kept beside out until the backward).
    out = t.out_fake()
    perm = list(range(q.rank))
    perm[-3], perm[-2] = perm[-2], perm[-3]
    rows_first = t.fake_like([out.shape[d] for d in perm], out.dtype)
    lse = t.fake_like(out.shape[:-1], torch.float32)
    attrs = [("causal", True)] if is_causal else []
    attrs += [("scale", scale), ("transpose_out", True)]
    result, _lse = t.emit_multi("attention", [q, k, v], [rows_first, lse], ["attention", "attention.lse"], attrs)
    return t.emit("transpose", [result], [("perm", perm)], fake=out)
