"""The dropout handlers: memplan's seeded `dropout`, and `bernoulli` masks made with it.

Every dropout site of a step reads the step's one `dropout_seed` input and has a stream
of its own, numbered in graph order (`Translator.dropout_seed`, `next_stream`), so no two
sites share a mask. Dropout with p = 0 or in eval mode is the identity and emits nothing.
"""

from __future__ import annotations

import torch

from ..step import ExportError
from ._helpers import constant
from .registry import aten, handles


@handles(aten.dropout.default)
def dropout(t, x, p, train):
    """memplan's seeded dropout: the step's `dropout_seed` input (one i64[] scalar the
    training loop feeds fresh each step) and a stream per dropout site, in order. Its
    masks are memplan's, not PyTorch's: the same in distribution, not element for element."""
    if not train or p == 0:
        return x
    return t.emit("dropout", [x, t.dropout_seed()], [("p", float(p)), ("stream", t.next_stream())])


@handles(aten.bernoulli.p)
def bernoulli(t, x, p=0.5, generator=None):
    """`torch.empty(shape).bernoulli_(p)` (functionalized), the mask of stochastic depth
    (timm's DropPath, torchvision's StochasticDepth): 1 with probability p, else 0, in x's
    shape and dtype (x's values are not read). memplan's dropout of ones keeps an element
    with probability 1 - (1 - p) = p; `> 0` of it is the mask, exactly 0 or 1. Like
    dropout's, the mask is memplan's draw, the same in distribution as PyTorch's."""
    if generator is not None:
        raise ExportError("bernoulli with a generator is not supported")
    p = float(p)
    if not 0.0 <= p <= 1.0:
        raise ExportError(f"bernoulli with p={p} (a probability from 0 to 1)")
    dtype = x.fake.dtype
    float_dtype = dtype if dtype.is_floating_point else torch.float32
    if p == 0.0:
        return constant(t, x.shape, dtype, 0.0, "bernoulli")
    ones = constant(t, x.shape, float_dtype, 1.0, "ones")
    kept = t.emit("dropout", [ones, t.dropout_seed()], [("p", 1.0 - p), ("stream", t.next_stream())],
                  fake=ones.fake, final=False, role="kept")
    mask = t.emit("compare_scalar", [kept], [("value", 0.0), ("op", "gt")], fake=t.fake_like(x.shape, torch.bool),
                  final=False, role="mask")
    return t.emit("cast", [mask], [("to", dtype)])
