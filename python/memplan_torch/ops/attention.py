"""The attention handler: `scaled_dot_product_attention` as memplan's fused `attention`,
or `masked_attention` with an `attn_mask` (a float mask is the bias added to the scores; a
bool one becomes `where(mask, 0, -inf)` first, as PyTorch's SDPA converts it), grouped
query heads (`enable_gqa`) as they are. With `dropout_p > 0` (training) it is
`dropout_attention`, which draws its mask from the step's dropout seed and a stream of its
own, as `dropout` does, and saves no mask (its bias is 0, of shape [], without a mask).
The output keeps PyTorch's flash layout (see `attention` below), so merging the
heads afterwards copies nothing.
"""

from __future__ import annotations

import math

import torch

from ..step import ExportError
from ._helpers import cast_to, constant
from .registry import aten, handles


def _bias(t, mask, dtype):
    """The float bias `masked_attention` adds to the scores: a bool mask (True: attend) as
    `where(mask, 0, -inf)`, as PyTorch's SDPA converts it; a float mask in q's dtype."""
    if mask.fake.dtype == torch.bool:
        zero = constant(t, [], dtype, 0.0, "mask.zero")
        ninf = constant(t, [], dtype, float("-inf"), "mask.ninf")
        return t.emit("where", [mask, zero, ninf], fake=t.fake_like(mask.shape, dtype), final=False, role="mask")
    return cast_to(t, mask, dtype)


@handles(aten.scaled_dot_product_attention.default)
def attention(t, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
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
    if dropout_p:
        p = float(dropout_p)
        if not 0.0 < p < 1.0:
            raise ExportError(f"scaled_dot_product_attention with dropout_p={p} (memplan's takes 0 <= p < 1)")
        bias = constant(t, [], q.fake.dtype, 0.0, "mask.zero") if attn_mask is None else _bias(t, attn_mask, q.fake.dtype)
        attrs += [("p", p), ("stream", t.next_stream())]
        result, _lse = t.emit_multi("dropout_attention", [q, k, v, bias, t.dropout_seed()], [rows_first, lse],
                                    ["attention", "attention.lse"], attrs)
    elif attn_mask is None:
        result, _lse = t.emit_multi("attention", [q, k, v], [rows_first, lse], ["attention", "attention.lse"], attrs)
    else:
        bias = _bias(t, attn_mask, q.fake.dtype)
        result, _lse = t.emit_multi("masked_attention", [q, k, v, bias], [rows_first, lse],
                                    ["attention", "attention.lse"], attrs)
    return t.emit("transpose", [result], [("perm", perm)], fake=out)
