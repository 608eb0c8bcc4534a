"""Linear algebra handlers: `linear` and the matrix products, as memplan's `matmul`.

`linear`'s weight is read transposed in place (`transpose_b`), never copied; its bias is an
`add` after the product. A product with a vector operand has no memplan op (`extern`).
"""

from __future__ import annotations

from ..step import ExportError
from .registry import aten, handles


@handles(aten.linear.default)
def linear(t, x, w, b=None):
    if b is None:
        return t.emit("matmul", [x, w], [("transpose_b", True)])
    mm_fake = t.out_fake()
    mm = t.emit("matmul", [x, w], [("transpose_b", True)], fake=mm_fake, final=False, role="mm")
    return t.emit("add", [mm, b])


@handles(aten.matmul.default, aten.mm.default, aten.bmm.default)
def matmul(t, a, b):
    if a.rank < 2 or b.rank < 2:
        raise ExportError(f"matmul of a vector ({a.type} @ {b.type}) is not supported")
    return t.emit("matmul", [a, b])
