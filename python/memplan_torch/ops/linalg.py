"""Linear algebra handlers: `linear` and the matrix products, as memplan's `matmul`, and
`linalg_vector_norm` (`torch.norm`, `x.norm(dim=...)`, `F.normalize`) as the reductions it is.

`linear`'s weight is read transposed in place (`transpose_b`), never copied; its bias is an
`add` after the product. A product with a vector operand has no memplan op (`extern`).
"""

from __future__ import annotations

import math

import torch

from ..step import ExportError
from ..value import Value
from ._helpers import cast_to, constant, reshaped
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


@handles(aten.linalg_vector_norm.default)
def vector_norm(t, x, ord=2, dim=None, keepdim=False, dtype=None):
    """`linalg_vector_norm` over `dim` (all dimensions when None), computed with keepdim and
    viewed to the output's shape:

    - ord 2: sqrt(Σx²); ord 1: Σ|x| (|x| = x·sign(x), the gradient sign(x)·dy); ord 0: the
      count of nonzeros (no gradient); another p > 0: (Σ|x|ᵖ)^(1/p). Where the sum (or an
      |x| under a power) is 0 the root reads 1 instead and the result is 0 by `where`, so
      the gradient there is 0, as PyTorch masks it (no inf·0 = NaN).
    - ord ±inf: the max (min) of |x|, a `topk` of one per reduced dimension of |x|
      detached (min as −max(−|x|), so a NaN wins as in PyTorch). Its gradient is PyTorch's:
      sign(x)·dy/count at every element equal to it (or NaN), count of them: the value is
      the max plus s − s_detached (0), s = Σ(|x|·mask)/count, which carries that gradient.
      Where s is not finite (an inf or NaN max) the result is s, which is then the max;
      where a tie's sum overflows f32 (count·max > 3.4e38) the max alone, with no gradient.
    Negative p (but −inf) is refused."""
    if dtype is not None:
        x = cast_to(t, x, dtype)
    if not x.fake.dtype.is_floating_point:
        raise ExportError(f"linalg_vector_norm of a {x.fake.dtype} tensor")
    p = float(ord)
    if math.isnan(p) or (p < 0 and p != -math.inf):
        raise ExportError(f"linalg_vector_norm with ord={ord!r} is not supported (ord ≥ 0 or ±inf)")
    axes = list(range(x.rank)) if dim is None or (not isinstance(dim, int) and len(dim) == 0) else \
        [d % max(x.rank, 1) for d in ([dim] if isinstance(dim, int) else dim)]
    kept = [1 if a in axes else s for a, s in enumerate(x.shape)] if x.rank else []
    dtype, out = x.fake.dtype, t.out_fake()
    fake = t.fake_like(kept, dtype)

    def total(v: Value, role: str) -> Value:
        if not x.rank:
            return v
        return t.emit("sum", [v], [("axes", axes), ("keepdim", True)], fake=fake, final=False, role=role)

    def safe_power(v: Value, exponent: float, role: str) -> Value:
        """v ** exponent, 0 where v is 0 (where the power's gradient would be inf or NaN)."""
        vfake, vbools = v.fake, t.fake_like(v.shape, torch.bool)
        zero = t.emit("compare_scalar", [v], [("value", 0.0), ("op", "eq")], fake=vbools, final=False, role=f"{role}.zero")
        safe = t.emit("where", [zero, constant(t, [], dtype, 1.0, "one"), v], fake=vfake, final=False, role=f"{role}.safe")
        powered = t.emit("pow_scalar", [safe], [("exponent", exponent)], fake=vfake, final=False, role=role)
        return t.emit("where", [zero, constant(t, [], dtype, 0.0, "zero"), powered], fake=vfake, final=False,
                      role=f"{role}.masked")

    if p == 0:
        nonzero = t.emit("compare_scalar", [x], [("value", 0.0), ("op", "ne")], fake=t.fake_like(x.shape, torch.bool),
                         final=False, role="nonzero")
        norm = total(t.emit("cast", [nonzero], [("to", dtype)], fake=x.fake, final=False, role="ones"), "count")
    elif p == 2:
        squares = t.emit("mul", [x, x], fake=x.fake, final=False, role="squares")
        norm = safe_power(total(squares, "sum_squares"), 0.5, "root")
    else:
        from .elementwise import _sign

        magnitude = t.emit("mul", [x, _sign(t, x)], fake=x.fake, final=False, role="abs")
        if p == 1:
            norm = total(magnitude, "sum_abs")
        elif math.isinf(p):
            norm = _extreme(t, x, magnitude, axes, kept, largest=p > 0)
        else:
            norm = safe_power(total(safe_power(magnitude, p, "powers"), "sum_powers"), 1.0 / p, "root")
    return reshaped(t, norm, out.shape, "norm", final=True)


def _extreme(t, x: Value, magnitude: Value, axes, kept, largest: bool) -> Value:
    """max (min) of |x| over `axes` with PyTorch's gradient (see `vector_norm`)."""
    dtype = x.fake.dtype
    fake, bools = t.fake_like(kept, dtype), t.fake_like(x.shape, torch.bool)
    held = t.emit("detach", [magnitude], fake=x.fake, final=False, role="abs_held")
    line = held if largest else t.emit("neg", [held], fake=x.fake, final=False, role="negated")
    shape = list(x.shape)
    for axis in axes:
        shape[axis] = 1
        values, _ = t.emit_multi("topk", [line], [t.fake_like(shape, dtype), t.fake_like(shape, torch.int64)],
                                 ["extreme", "extreme_index"], [("k", 1), ("axis", axis)])
        line = values
    extreme = line if largest else t.emit("neg", [line], fake=fake, final=False, role="extreme_value")
    if not axes:
        extreme = held
    hit = t.emit("compare", [held, extreme], [("op", "eq")], fake=bools, final=False, role="hit")
    nan = t.emit("compare", [held, held], [("op", "ne")], fake=bools, final=False, role="nan")
    mask = t.emit("where", [nan, constant(t, [], torch.bool, 1, "true"), hit], fake=bools, final=False, role="mask")
    weight = t.emit("cast", [mask], [("to", dtype)], fake=x.fake, final=False, role="weight")
    def sums(v: Value, role: str) -> Value:
        return t.emit("sum", [v], [("axes", axes), ("keepdim", True)], fake=fake, final=False, role=role)

    count = sums(weight, "count") if axes else weight
    picked = t.emit("mul", [magnitude, weight], fake=x.fake, final=False, role="picked")
    spread = t.emit("div", [sums(picked, "picked_sum") if axes else picked, count], fake=fake, final=False, role="spread")
    held_spread = t.emit("detach", [spread], fake=fake, final=False, role="spread_held")
    diff = t.emit("sub", [spread, held_spread], fake=fake, final=False, role="zero_with_gradient")
    fbools = t.fake_like(kept, torch.bool)
    exact = t.emit("compare_scalar", [diff], [("value", 0.0), ("op", "eq")], fake=fbools, final=False, role="finite_sum")
    plus = t.emit("add", [extreme, diff], fake=fake, final=False, role="with_gradient")
    finite = t.emit("compare_scalar", [extreme], [("value", math.inf), ("op", "lt")], fake=fbools, final=False,
                    role="finite")
    fallback = t.emit("where", [finite, extreme, spread], fake=fake, final=False, role="fallback")
    return t.emit("where", [exact, plus, fallback], fake=fake, final=False, role="extreme_norm")
