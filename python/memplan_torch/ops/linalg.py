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


@handles(aten.addmm.default, aten.baddbmm.default)
def addmm(t, bias, a, b, beta=1, alpha=1):
    """`beta·bias + alpha·(a @ b)` (GPT-2's Conv1D is `addmm`): the product, then the bias
    added, each scaled where its factor is not 1."""
    if a.rank < 2 or b.rank < 2:
        raise ExportError(f"addmm of a vector ({a.type} @ {b.type}) is not supported")
    product = t.emit("matmul", [a, b], fake=t.out_fake(), final=False, role="mm")
    if alpha != 1:
        product = t.emit("mul_scalar", [product], [("value", float(alpha))], final=False, role="mm.scaled")
    if beta == 0:
        return product
    if beta != 1:
        bias = t.emit("mul_scalar", [bias], [("value", float(beta))], fake=bias.fake, final=False, role="bias.scaled")
    return t.emit("add", [product, bias])
