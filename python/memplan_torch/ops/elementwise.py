"""Elementwise handlers: arithmetic, math functions and activations, comparisons, `where`
and `masked_fill`, dtype casts, the fills (`full`, `zeros`, `ones`, `empty`, their `_like`
and `new_` forms, `arange`), and rounding (`trunc`, `floor`, `ceil`, division with a
`rounding_mode`, `remainder`, `fmod`: see the rounding section).

Arithmetic with a Python number is memplan's `add_scalar` or `mul_scalar` (`a - s` adds
-s, `a / s` multiplies by 1/s). Mixed dtypes are cast to the output's first, as PyTorch
promotes them (`promoted`).
"""

from __future__ import annotations

import math

import torch

from ..step import ExportError
from ..value import Value
from ._helpers import cast_to, constant, promoted
from .registry import aten, handles


def _scalar_or_tensor(t, a, b, tensor_op: str, scalar_fn):
    if isinstance(a, Value) and isinstance(b, Value):
        return t.emit(tensor_op, promoted(t, a, b))
    if isinstance(a, Value) and not t.out_fake().dtype.is_floating_point:
        # memplan's scalar ops are float; an integer counter (`num_batches_tracked + 1`)
        # adds a scalar of its dtype.
        return t.emit(tensor_op, promoted(t, a, constant(t, [], t.out_fake().dtype, b, "scalar")))
    if isinstance(a, Value):
        # An integer tensor with a float number is a float result (`arange(n) / n`), as
        # PyTorch promotes: the cast first.
        return scalar_fn(cast_to(t, a, t.out_fake().dtype), float(b))
    raise ExportError(f"{tensor_op} with a Python number first ({a!r}) is not supported")


@handles(aten.add.Tensor)
def add(t, a, b, alpha=1):
    if alpha != 1:
        b = t.emit("mul_scalar", [b], [("value", float(alpha))], fake=b.fake, final=False)
    return _scalar_or_tensor(t, a, b, "add", lambda x, s: t.emit("add_scalar", [x], [("value", s)]))


@handles(aten.sub.Tensor)
def sub(t, a, b, alpha=1):
    if isinstance(b, Value):
        if alpha != 1:
            b = t.emit("mul_scalar", [b], [("value", float(alpha))], fake=b.fake, final=False)
        return t.emit("sub", promoted(t, a, b))
    return t.emit("add_scalar", [cast_to(t, a, t.out_fake().dtype)], [("value", -float(b) * alpha)])


@handles(aten.rsub.Scalar, aten.rsub.Tensor)
def rsub(t, a, b, alpha=1):
    """`b - alpha * a` (`1 - x` in Python): `add_scalar(-alpha * a, b)` for a number `b`."""
    if isinstance(b, Value):
        return sub(t, b, a, alpha)
    if not t.out_fake().dtype.is_floating_point:
        raise ExportError("rsub of an integer tensor is not supported")
    scaled = t.emit("mul_scalar", [a], [("value", -float(alpha))], final=False)
    return t.emit("add_scalar", [scaled], [("value", float(b))])


@handles(aten.mul.Tensor)
def mul(t, a, b):
    if not isinstance(a, Value):
        a, b = b, a
    return _scalar_or_tensor(t, a, b, "mul", lambda x, s: t.emit("mul_scalar", [x], [("value", s)]))


@handles(aten.div.Tensor, aten.div.Tensor_mode)
def div(t, a, b, rounding_mode=None):
    if rounding_mode is not None:
        return rounded_division(t, a, b, rounding_mode)
    return _scalar_or_tensor(t, a, b, "div", lambda x, s: t.emit("mul_scalar", [x], [("value", 1.0 / s)]))


def unary(op: str):
    """The handler of an ATen op that is memplan's `op` of its one input."""

    def handler(t, x):
        return t.emit(op, [x])

    handler.__qualname__ = f"unary({op!r})"
    return handler


handles(aten.relu.default)(unary("relu"))
handles(aten.silu.default)(unary("silu"))
handles(aten.sigmoid.default)(unary("sigmoid"))
handles(aten.tanh.default)(unary("tanh"))
handles(aten.hardswish.default)(unary("hardswish"))
handles(aten.hardsigmoid.default)(unary("hardsigmoid"))
handles(aten.exp.default)(unary("exp"))
handles(aten.log.default)(unary("log"))
handles(aten.neg.default)(unary("neg"))
handles(aten.sin.default)(unary("sin"))
handles(aten.cos.default)(unary("cos"))
handles(aten.erf.default)(unary("erf"))
handles(aten.sqrt.default)(unary("sqrt"))
handles(aten.rsqrt.default)(unary("rsqrt"))


@handles(aten.gelu.default)
def gelu(t, x, approximate="none"):
    return t.emit("gelu", [x], [] if approximate == "tanh" else [("approximate", False)])


@handles(aten.pow.Tensor_Scalar)
def pow_scalar(t, x, exponent):
    if isinstance(exponent, Value):
        raise ExportError("pow with a tensor exponent is not supported")
    return t.emit("pow_scalar", [x], [("exponent", float(exponent))])


@handles(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar)
def where(t, cond, a, b):
    dtype = t.out_fake().dtype
    a = a if isinstance(a, Value) else constant(t, [], dtype, a, "scalar")
    b = b if isinstance(b, Value) else constant(t, [], dtype, b, "scalar")
    return t.emit("where", [cond, *promoted(t, a, b)])


def comparison(relation: str):
    """The handler of PyTorch's `relation` (`lt`, `le`, `gt`, `ge`, `eq`, `ne`): memplan's
    `compare` of two tensors, or `compare_scalar` with a number, on the dtype PyTorch
    compares in (`torch.result_type`: an integer tensor against a float number compares as
    floats), the number rounded to that dtype as PyTorch rounds it."""

    def handler(t, a, b):
        if not isinstance(a, Value):
            raise ExportError(f"{relation} with a Python number first ({a!r}) is not supported")
        if isinstance(b, Value):
            dtype = torch.result_type(a.fake, b.fake)
            return t.emit("compare", [cast_to(t, a, dtype), cast_to(t, b, dtype)], [("op", relation)])
        dtype = torch.result_type(a.fake, b)
        value = float(torch.tensor(b, dtype=dtype).item()) if isinstance(b, (int, float, bool)) else None
        if value is None or value != value:
            raise ExportError(f"{relation} with {b!r} is not supported (a number, not NaN)")
        return t.emit("compare_scalar", [cast_to(t, a, dtype)], [("value", value), ("op", relation)])

    return handler


for _relation in ("lt", "le", "gt", "ge", "eq", "ne"):
    handles(getattr(aten, _relation).Tensor, getattr(aten, _relation).Scalar)(comparison(_relation))


@handles(aten.masked_fill.Scalar)
def masked_fill(t, x, mask, value):
    if isinstance(value, Value):
        raise ExportError("masked_fill with a tensor value is not supported (give a number)")
    return t.emit("masked_fill", [x, mask], [("value", float(value))])


@handles(aten.index_put.default)
def index_put(t, x, indices, values, accumulate=False):
    """`x[mask] = values` with a bool mask over x's leading dimensions, functionalized:
    `where(mask, values, x)` (values broadcast over the masked elements, as PyTorch
    requires of them). `x[i, j] += values` with integer indices (`accumulate=True`):
    `scatter_add` (shape.py's `index_put_accumulate`). `x[i, j] = values` with integer
    indices (an overwrite): shape.py's `index_put_overwrite` (the last write of a
    repeated row wins)."""
    integer = [v for v in indices if v is not None and v.fake.dtype != torch.bool]
    if integer:
        from .shape import index_put_accumulate, index_put_overwrite

        return (index_put_accumulate if accumulate else index_put_overwrite)(t, x, indices, values)
    if accumulate or len(indices) != 1 or not isinstance(indices[0], Value) or indices[0].fake.dtype != torch.bool:
        raise ExportError("index_put with integer indices and no accumulate has no memplan op")
    mask, part = indices[0], x.shape[indices[0].rank:]
    if mask.shape != x.shape[:mask.rank] or not isinstance(values, Value) or not _broadcasts(values.shape, part):
        raise ExportError("index_put: values must broadcast over the masked elements")
    if mask.rank < x.rank:
        column = mask.shape + [1] * (x.rank - mask.rank)
        mask = t.emit("reshape", [mask], [("shape", column)], fake=t.fake_like(column, torch.bool), final=False)
    return t.emit("where", [mask, cast_to(t, values, x.fake.dtype), x])


def _broadcasts(shape, to) -> bool:
    try:
        return list(torch.broadcast_shapes(tuple(shape), tuple(to))) == list(to)
    except RuntimeError:
        return False


@handles(aten.to.dtype, aten._to_copy.default, aten.to.dtype_layout)
def to_dtype(t, x, dtype=None, *rest, **kwargs):
    """`.to(dtype)` (and `.to(dtype=..., layout=..., device=...)`): a cast where the dtype
    changes, else `x` itself (the device and a strided layout are the step's anyway)."""
    dtype = kwargs.get("dtype", dtype)
    if dtype is None or dtype == x.fake.dtype:
        return x
    return t.emit("cast", [x], [("to", dtype)])


@handles(aten.to.device)
def to_device(t, x, device, dtype, *rest, **kwargs):
    """`.to(device, dtype)`: the device is the step's; a cast where the dtype changes."""
    return to_dtype(t, x, dtype)


@handles(aten.type_as.default)
def type_as(t, x, other):
    return to_dtype(t, x, other.fake.dtype)


@handles(aten.full.default)
def full(t, size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    fake = t.out_fake()
    return t.emit("fill", [], [("shape", [int(d) for d in size]), ("dtype", fake.dtype), ("value", float(fill_value))])


def _fill(t, value, role):
    fake = t.out_fake()
    return t.emit("fill", [], [("shape", [int(d) for d in fake.shape]), ("dtype", fake.dtype), ("value", float(value))], role=role)


@handles(aten.zeros.default, aten.empty.memory_format, aten.zeros_like.default, aten.empty_like.default,
         aten.new_zeros.default, aten.new_empty.default)
def zeros(t, *_args, **_kwargs):
    """A new tensor of zeros, or an uninitialized one (`empty`: zeros are one of its values)."""
    return _fill(t, 0.0, "zeros")


@handles(aten.ones.default, aten.ones_like.default, aten.new_ones.default)
def ones(t, *_args, **_kwargs):
    return _fill(t, 1.0, "ones")


@handles(aten.full_like.default)
def full_like(t, x, fill_value, **_kwargs):
    return _fill(t, fill_value, "full")


@handles(aten.new_full.default)
def new_full(t, x, size, fill_value, **_kwargs):
    return _fill(t, fill_value, "full")


@handles(aten.scalar_tensor.default)
def scalar_tensor(t, value, **_kwargs):
    return _fill(t, value, "scalar")


@handles(aten.arange.default, aten.arange.start, aten.arange.start_step)
def arange(t, *numbers, **_options):
    """`torch.arange(end)`, `(start, end)` or `(start, end, step)` as a `fill` with a step."""
    start, step = (0, 1) if len(numbers) == 1 else (numbers[0], numbers[2] if len(numbers) > 2 else 1)
    fake = t.out_fake()
    attrs = [("shape", [int(d) for d in fake.shape]), ("dtype", fake.dtype)]
    attrs += [("value", float(start))] if start != 0 else []
    return t.emit("fill", [], attrs + [("step", float(step))], role="arange")


@handles(aten.fill.Scalar)
def fill_scalar(t, x, value):
    """`x.fill_(value)` with a number, functionalized: a `fill` of x's shape and dtype."""
    return _fill(t, value, "fill")


# Logical ops on bool tensors (masks: Mistral's sliding window `&` of the causal mask,
# DeBERTa's `~`), written exactly with memplan's selection and comparison: `a & b` is
# where(a, b, false), `a | b` where(a, true, b), `a ^ b` compare(a, b, ne), `~a`
# compare_scalar(a, 0, eq). Integer bitwise ops are refused (extern).

def _dunder(name: str):
    """`aten.__and__.Tensor` and its kin (the registry's `aten` refuses dunder names, which
    Python's own protocols would otherwise answer)."""
    return getattr(getattr(torch.ops.aten, name), "Tensor")


def _bools(t, *values):
    if not all(isinstance(v, Value) and v.fake.dtype == torch.bool for v in values):
        raise ExportError("bitwise ops on integers are not supported (bool masks only)")


@handles(aten.bitwise_and.Tensor, aten.logical_and.default, _dunder("__and__"))
def logical_and(t, a, b):
    _bools(t, a, b)
    return t.emit("where", [a, b, constant(t, [], torch.bool, 0, "false")])


@handles(aten.bitwise_or.Tensor, aten.logical_or.default, _dunder("__or__"))
def logical_or(t, a, b):
    _bools(t, a, b)
    return t.emit("where", [a, constant(t, [], torch.bool, 1, "true"), b])


@handles(aten.bitwise_xor.Tensor, aten.logical_xor.default, _dunder("__xor__"))
def logical_xor(t, a, b):
    _bools(t, a, b)
    return t.emit("compare", [a, b], [("op", "ne")])


@handles(aten.bitwise_not.default, aten.logical_not.default)
def logical_not(t, a):
    _bools(t, a)
    return t.emit("compare_scalar", [a], [("value", 0.0), ("op", "eq")])


# abs, minimum and maximum of integer tensors (T5's relative position buckets), exactly:
# abs is where(x < 0, -x, x), minimum where(a < b, a, b). A float abs is x · sign(x) with
# sign(0) = 0, the sign made of comparisons (no gradient of its own), so the gradient is
# PyTorch's sign(x)·dy, 0 at 0; float minimum and maximum split a tie's gradient in halves
# as PyTorch does (`_select`).


@handles(aten.abs.default)
def abs_(t, x):
    if x.fake.dtype.is_floating_point:
        return t.emit("mul", [x, _sign(t, x)])
    negative = t.emit("compare_scalar", [x], [("value", 0.0), ("op", "lt")], fake=t.fake_like(x.shape, torch.bool),
                      final=False, role="negative")
    flipped = t.emit("neg", [x], final=False, role="neg")
    return t.emit("where", [negative, flipped, x])


def _select(relation):
    """minimum (`lt`) or maximum (`gt`). Of integers: where(a rel b, a, b). Of floats:
    where(a rel b, a, where(b rel a, b, a/2 + b/2)): at a tie the halves add up to the tied
    value exactly (halving is exact but for the smallest subnormals) and give each side half
    the gradient, as PyTorch's backward does; a NaN on either side makes both comparisons
    false, so the halves' sum, NaN, as PyTorch's result."""

    def handler(t, a, b):
        if not (isinstance(a, Value) and isinstance(b, Value)):
            raise ExportError("minimum/maximum of a tensor and a number is not supported (use clamp)")
        dtype = t.out_fake().dtype
        a, b = cast_to(t, a, dtype), cast_to(t, b, dtype)
        shape = list(t.out_fake().shape)
        bools = t.fake_like(shape, torch.bool)
        keep = t.emit("compare", [a, b], [("op", relation)], fake=bools, final=False, role="keep")
        if not dtype.is_floating_point:
            return t.emit("where", [keep, a, b])
        other = t.emit("compare", [b, a], [("op", relation)], fake=bools, final=False, role="other")
        half_a = t.emit("mul_scalar", [a], [("value", 0.5)], fake=a.fake, final=False, role="half_a")
        half_b = t.emit("mul_scalar", [b], [("value", 0.5)], fake=b.fake, final=False, role="half_b")
        tie = t.emit("add", [half_a, half_b], fake=t.out_fake(), final=False, role="tie")
        rest = t.emit("where", [other, b, tie], fake=t.out_fake(), final=False, role="rest")
        return t.emit("where", [keep, a, rest])

    return handler


handles(aten.minimum.default, aten.min.other)(_select("lt"))
handles(aten.maximum.default, aten.max.other)(_select("gt"))


@handles(aten.softplus.default)
def softplus(t, x, beta=1, threshold=20):
    """`F.softplus`: `log(1 + exp(β·x)) / β`, and `x` itself where `β·x > threshold`, as
    PyTorch computes it. The exponential reads `β·x` with those elements zeroed (`where`),
    so no exp overflows to inf there and their gradient is x's alone, as in PyTorch.
    PyTorch's `log1p` keeps more bits of `exp(β·x)` far below 0 than `log(1 + ·)`: there
    the two differ by at most one f32 rounding of `1 + exp(β·x)` (< 6e-8 absolute)."""
    beta, threshold = float(beta), float(threshold)
    fake, big = x.fake, t.fake_like(x.shape, torch.bool)
    scaled = x if beta == 1 else t.emit("mul_scalar", [x], [("value", beta)], fake=fake, final=False, role="scaled")
    linear = t.emit("compare_scalar", [scaled], [("value", threshold), ("op", "gt")], fake=big, final=False, role="linear")
    safe = t.emit("where", [linear, constant(t, [], x.fake.dtype, 0.0, "zero"), scaled], fake=fake, final=False, role="safe")
    grown = t.emit("exp", [safe], fake=fake, final=False, role="exp")
    shifted = t.emit("add_scalar", [grown], [("value", 1.0)], fake=fake, final=False, role="one_plus")
    soft = t.emit("log", [shifted], fake=fake, final=False, role="log")
    if beta != 1:
        soft = t.emit("mul_scalar", [soft], [("value", 1.0 / beta)], fake=fake, final=False, role="unscaled")
    return t.emit("where", [linear, x, soft])


@handles(aten.pow.Tensor_Tensor)
def pow_tensor(t, base, exponent):
    """`base ** exponent` of two tensors as `exp(exponent · log(base))`, which is PyTorch's
    power only for a positive base: so only where the base is a constant of the model whose
    values are all positive (BLOOM's ALiBi slopes); any other base is refused."""
    values = t.constant_values(base)
    if values is None or not bool((values > 0).all()):
        raise ExportError("pow of a tensor base and a tensor exponent is supported for a positive constant base only")
    dtype = t.out_fake().dtype
    base, exponent = cast_to(t, base, dtype), cast_to(t, exponent, dtype)
    logs = t.emit("log", [base], fake=base.fake, final=False, role="log_base")
    product = t.emit("mul", [exponent, logs], fake=t.out_fake(), final=False, role="exponent_log")
    return t.emit("exp", [product])


def _sign(t, x: Value) -> Value:
    """sign(x) as a value with no gradient: where(x == 0, 0, where(x < 0, −1, 1)) (a NaN gets
    1, so x · sign(x) keeps it NaN)."""
    bools, dtype = t.fake_like(x.shape, torch.bool), x.fake.dtype
    negative = t.emit("compare_scalar", [x], [("value", 0.0), ("op", "lt")], fake=bools, final=False, role="negative")
    zero = t.emit("compare_scalar", [x], [("value", 0.0), ("op", "eq")], fake=bools, final=False, role="zero")
    unit = t.emit("where", [negative, constant(t, [], dtype, -1.0, "minus_one"), constant(t, [], dtype, 1.0, "one")],
                  fake=x.fake, final=False, role="unit")
    return t.emit("where", [zero, constant(t, [], dtype, 0.0, "zero_value"), unit], fake=x.fake, final=False, role="sign")


def _clamped(t, x: Value, low, high, inclusive: bool) -> Value:
    """x with values below `low` set to it and above `high` to it (numbers or tensors, either
    may be None). `inclusive`: the gradient passes where low ≤ x ≤ high (clamp's); else
    only where low < x < high (hardtanh's, relu6's)."""
    dtype = t.out_fake().dtype
    x = cast_to(t, x, dtype)
    y = x
    for bound, below, name in ((low, "lt" if inclusive else "le", "low"), (high, "gt" if inclusive else "ge", "high")):
        if bound is None:
            continue
        if isinstance(bound, Value):
            shape = [int(d) for d in torch.broadcast_shapes(x.fake.shape, bound.fake.shape)]
            bound = cast_to(t, bound, dtype)
            past = t.emit("compare", [x, bound], [("op", below)], fake=t.fake_like(shape, torch.bool), final=False,
                          role=f"past_{name}")
        else:
            value = float(torch.tensor(bound, dtype=dtype).item())
            past = t.emit("compare_scalar", [x], [("value", value), ("op", below)], fake=t.fake_like(x.shape, torch.bool),
                          final=False, role=f"past_{name}")
            bound = constant(t, [], dtype, value, name)
        last = name == "high" or high is None
        shape = [int(d) for d in torch.broadcast_shapes(past.fake.shape, bound.fake.shape, y.fake.shape)]
        y = t.emit("where", [past, bound, y], fake=None if last else t.fake_like(shape, dtype), final=last,
                   role=f"clamped_{name}")
    return y


@handles(aten.clamp.default, aten.clamp.Tensor)
def clamp(t, x, min=None, max=None):
    """`clamp(x, min, max)`: `where(x < min, min, ...)`, `where(x > max, max, ...)` (PyTorch's
    values, NaN kept, and its gradient: through where min ≤ x ≤ max, to a tensor bound
    where it is taken)."""
    if min is None and max is None:
        raise ExportError("clamp without bounds")
    return _clamped(t, x, min, max, inclusive=True)


@handles(aten.clamp_min.default, aten.clamp_min.Tensor)
def clamp_min(t, x, min):
    return _clamped(t, x, min, None, inclusive=True)


@handles(aten.clamp_max.default, aten.clamp_max.Tensor)
def clamp_max(t, x, max):
    return _clamped(t, x, None, max, inclusive=True)


@handles(aten.hardtanh.default)
def hardtanh(t, x, min_val=-1, max_val=1):
    """`hardtanh` (and `relu6`, PyTorch's hardtanh(0, 6)): clamp's values, the gradient only
    strictly between the bounds, as PyTorch's hardtanh_backward."""
    return _clamped(t, x, min_val, max_val, inclusive=False)


@handles(aten.relu6.default)
def relu6(t, x):
    return _clamped(t, x, 0.0, 6.0, inclusive=False)


@handles(aten.leaky_relu.default)
def leaky_relu(t, x, negative_slope=0.01):
    """`where(x > 0, x, slope·x)`: PyTorch's values and its gradient (slope at 0)."""
    positive = t.emit("compare_scalar", [x], [("value", 0.0), ("op", "gt")], fake=t.fake_like(x.shape, torch.bool),
                      final=False, role="positive")
    scaled = t.emit("mul_scalar", [x], [("value", float(negative_slope))], fake=x.fake, final=False, role="scaled")
    return t.emit("where", [positive, x, scaled])


@handles(aten.elu.default)
def elu(t, x, alpha=1, scale=1, input_scale=1):
    """`elu` (and `selu`, `celu` as PyTorch writes them with it): `scale·x` where x > 0, else
    `scale·alpha·(exp(input_scale·x) − 1)`, the exponential reading zeros where x > 0 (no
    overflow, no NaN gradient). PyTorch's `expm1` keeps more bits near 0 than `exp − 1`:
    they differ by at most one f32 rounding of the exponential (< 6e-8 absolute)."""
    fake = x.fake
    positive = t.emit("compare_scalar", [x], [("value", 0.0), ("op", "gt")], fake=t.fake_like(x.shape, torch.bool),
                      final=False, role="positive")
    safe = t.emit("where", [positive, constant(t, [], x.fake.dtype, 0.0, "zero"), x], fake=fake, final=False, role="safe")
    if float(input_scale) != 1:
        safe = t.emit("mul_scalar", [safe], [("value", float(input_scale))], fake=fake, final=False, role="input_scaled")
    grown = t.emit("exp", [safe], fake=fake, final=False, role="exp")
    shifted = t.emit("add_scalar", [grown], [("value", -1.0)], fake=fake, final=False, role="expm1")
    negative = t.emit("mul_scalar", [shifted], [("value", float(scale) * float(alpha))], fake=fake, final=False,
                      role="negative_part")
    linear = x if float(scale) == 1 else t.emit("mul_scalar", [x], [("value", float(scale))], fake=fake, final=False,
                                                 role="positive_part")
    return t.emit("where", [positive, linear, negative])


# PyTorch's selu constants (aten's SELU_ALPHA, SELU_SCALE): selu is its elu with them.
_SELU_ALPHA, _SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


@handles(aten.selu.default)
def selu(t, x):
    return elu(t, x, _SELU_ALPHA, _SELU_SCALE)


@handles(aten.celu.default)
def celu(t, x, alpha=1.0):
    """`celu(x, α)`: PyTorch's elu(x, α, 1, 1/α)."""
    return elu(t, x, alpha, 1.0, 1.0 / float(alpha))


@handles(aten.pow.Scalar)
def pow_number(t, base, exponent):
    """`base ** x` for a positive number `base` (RoPE's 10000 ** (−2i/d)): exp(x · ln base).
    Any other base is refused (its powers are not an exponential)."""
    if isinstance(base, Value) or not float(base) > 0:
        raise ExportError(f"pow of the number {base!r} by a tensor is supported for a positive number only")
    dtype = t.out_fake().dtype
    x = cast_to(t, exponent, dtype)
    scaled = t.emit("mul_scalar", [x], [("value", math.log(float(base)))], fake=t.out_fake(), final=False, role="exponent_log")
    return t.emit("exp", [scaled])


@handles(aten.reciprocal.default)
def reciprocal(t, x):
    """`1 / x`: a `div` of a constant 1 by x (the same division; an integer x is cast to
    the float result first, as PyTorch promotes it)."""
    dtype = t.out_fake().dtype
    return t.emit("div", [constant(t, [], dtype, 1.0, "one"), cast_to(t, x, dtype)])


# Rounding: `trunc`, `floor`, `ceil`, division with `rounding_mode` ('trunc', 'floor',
# and `//`: floor_divide), `remainder` (Python's %) and `fmod` (C's). memplan has no
# rounding op; a float is rounded toward zero exactly by a `cast` to i64 and back (memplan's
# cast truncates), where that is exact: |x| below 2^(mantissa bits), beyond which every
# float is an integer already (kept as it is, with ±inf and NaN); below 1 the result is
# x·0, a zero with x's sign (PyTorch's trunc(-0.5) is -0.0). PyTorch gives these ops no
# gradient (zeros): the rounded value is computed from x `detach`ed. Integer division is
# memplan's `div` (it truncates, as C and PyTorch's 'trunc' mode); floor and the
# remainders are exact corrections of it by comparisons. A float floor division, remainder
# or fmod is PyTorch's only through an exact fmod (it computes the quotient from
# a − fmod(a, b)): exact here for a divisor that is a number and a power of two (the
# quotient a·2⁻ᵏ is exact, so is trunc(q)·b); any other float divisor is refused (extern:
# memplan would need a floor or fmod op).

_WHOLE_FROM = {torch.float32: 2.0**23, torch.float16: 2.0**10, torch.bfloat16: 2.0**7}


def _detached(t, x: Value) -> Value:
    return x if t.writes(x) == "detach" else t.emit("detach", [x], fake=x.fake, final=False, role="detached")


def _within(t, x: Value, bound: float, role: str) -> Value:
    """-bound < x < bound (false for NaN), a bool tensor."""
    bools = t.fake_like(x.shape, torch.bool)
    above = t.emit("compare_scalar", [x], [("value", -bound), ("op", "gt")], fake=bools, final=False, role=f"{role}.above")
    below = t.emit("compare_scalar", [x], [("value", bound), ("op", "lt")], fake=bools, final=False, role=f"{role}.below")
    return t.emit("where", [above, below, constant(t, [], torch.bool, 0, "false")], fake=bools, final=False, role=role)


def _trunc(t, x: Value, final=False) -> Value:
    """x (float) rounded toward zero, exactly as C's trunc, with no gradient (see above)."""
    dtype = x.fake.dtype
    x = _detached(t, x)
    fractional = _within(t, x, _WHOLE_FROM[dtype], "fractional")
    below_one = _within(t, x, 1.0, "below_one")
    whole = t.emit("cast", [x], [("to", torch.int64)], fake=t.fake_like(x.shape, torch.int64), final=False, role="whole")
    back = t.emit("cast", [whole], [("to", dtype)], fake=x.fake, final=False, role="whole_float")
    kept = t.emit("where", [fractional, back, x], fake=x.fake, final=False, role="truncated")
    zero = t.emit("mul_scalar", [x], [("value", 0.0)], fake=x.fake, final=False, role="signed_zero")
    return t.emit("where", [below_one, zero, kept], fake=None if final else x.fake, final=final,
                  role="trunc" if not final else None)


def _float_rounding(t, x: Value, what: str) -> None:
    if x.fake.dtype not in _WHOLE_FROM:
        raise ExportError(f"{what} of a {x.fake.dtype} tensor is not supported")


@handles(aten.trunc.default, aten.floor.default, aten.ceil.default)
def round_to_integer(t, x):
    """`trunc`, `floor`, `ceil`: trunc as above; floor is trunc(x) − 1 where x < trunc(x),
    ceil trunc(x) + 1 where x > trunc(x) (−0.0, ±inf and NaN kept). An integer tensor is
    itself."""
    if not x.fake.dtype.is_floating_point:
        return x
    _float_rounding(t, x, str(t.node.target))
    name = t.node.target._schema.name.split("::")[-1]
    if name == "trunc":
        return _trunc(t, x, final=True)
    cut = _trunc(t, x)
    x = _detached(t, x)
    past = t.emit("compare", [x, cut], [("op", "lt" if name == "floor" else "gt")], fake=t.fake_like(x.shape, torch.bool),
                  final=False, role="past")
    moved = t.emit("add_scalar", [cut], [("value", -1.0 if name == "floor" else 1.0)], fake=x.fake, final=False,
                   role="moved")
    return t.emit("where", [past, moved, cut])


def _operands(t, a, b, what: str):
    """a and b in the output's dtype (b a tensor, or a number kept as the number), and
    whether b is that number. Refuses a number first, bool, and half floats."""
    dtype = t.out_fake().dtype
    if not isinstance(a, Value):
        raise ExportError(f"{what} with a Python number first ({a!r}) is not supported")
    if dtype == torch.bool or (dtype.is_floating_point and dtype != torch.float32):
        raise ExportError(f"{what} in {dtype} is not supported (f32 and integers only)")
    a = cast_to(t, a, dtype)
    if isinstance(b, Value):
        return a, cast_to(t, b, dtype), None
    number = float(torch.tensor(b, dtype=dtype).item())
    return a, constant(t, [], dtype, number, "divisor"), number


def _power_of_two(number) -> bool:
    if number is None or number == 0 or not math.isfinite(number):
        return False
    return math.frexp(abs(number))[0] == 0.5


def _sign_differs(t, r: Value, b: Value, number) -> Value:
    """r ≠ 0 and r's sign is not b's (the correction of a truncated quotient to floor)."""
    bools = t.fake_like(r.shape, torch.bool)
    if number is not None:
        return t.emit("compare_scalar", [r], [("value", 0.0), ("op", "lt" if number > 0 else "gt")], fake=bools,
                      final=False, role="sign_differs")
    shape = [int(d) for d in torch.broadcast_shapes(r.fake.shape, b.fake.shape)]
    nonzero = t.emit("compare_scalar", [r], [("value", 0.0), ("op", "ne")], fake=bools, final=False, role="nonzero")
    r_negative = t.emit("compare_scalar", [r], [("value", 0.0), ("op", "lt")], fake=bools, final=False, role="r_negative")
    b_negative = t.emit("compare_scalar", [b], [("value", 0.0), ("op", "lt")], fake=t.fake_like(b.shape, torch.bool),
                        final=False, role="b_negative")
    differ = t.emit("compare", [r_negative, b_negative], [("op", "ne")], fake=t.fake_like(shape, torch.bool), final=False,
                    role="signs")
    return t.emit("where", [nonzero, differ, constant(t, [], torch.bool, 0, "false")], fake=t.fake_like(shape, torch.bool),
                  final=False, role="sign_differs")


def _integer_parts(t, a: Value, b: Value):
    """The truncated quotient and C's remainder a − q·b of integer tensors."""
    out = t.out_fake()
    q = t.emit("div", [a, b], fake=out, final=False, role="quotient")
    product = t.emit("mul", [q, b], fake=out, final=False, role="product")
    return q, t.emit("sub", [a, product], fake=out, final=False, role="remainder")


def _float_fmod(t, a: Value, number: float, final=False) -> tuple[Value, Value]:
    """fmod(a, number) for a power of two `number`, exactly C's (the sign of a, ±0 at a
    multiple; NaN for ±inf), its gradient 1 to a as PyTorch's; and trunc(a / number)."""
    out = t.out_fake()
    held = _detached(t, a)
    q = t.emit("mul_scalar", [held], [("value", 1.0 / number)], fake=out, final=False, role="quotient")
    cut = _trunc(t, q)
    product = t.emit("mul_scalar", [cut], [("value", number)], fake=out, final=False, role="product")
    bools = t.fake_like(out.shape, torch.bool)
    # a − trunc(q)·b is exact; its zero takes a's sign: −(t·b − a) for a negative a, and a
    # itself where a is ±0.
    negative = t.emit("compare_scalar", [held], [("value", 0.0), ("op", "lt")], fake=bools, final=False, role="negative")
    zero = t.emit("compare_scalar", [held], [("value", 0.0), ("op", "eq")], fake=bools, final=False, role="zero")
    up = t.emit("sub", [a, product], fake=out, final=False, role="rest")
    down = t.emit("sub", [product, a], fake=out, final=False, role="rest_below")
    down = t.emit("neg", [down], fake=out, final=False, role="rest_negative")
    signed = t.emit("where", [negative, down, up], fake=out, final=False, role="signed_rest")
    return t.emit("where", [zero, a, signed], fake=None if final else out, final=final, role=None if final else "fmod"), cut


def _refuse_float(what: str, number) -> None:
    if not _power_of_two(number):
        raise ExportError(f"{what} of floats is supported for a divisor that is a power-of-two number only "
                          "(memplan has no floor or fmod op to compute PyTorch's exactly)")


def rounded_division(t, a, b, mode: str) -> Value:
    """`div(a, b, rounding_mode=...)` (see the rounding section above). 'trunc' of floats is
    trunc(a / b), PyTorch's own; 'floor' of floats follows PyTorch's algorithm
    (div_floor_floating: (a − fmod(a, b)) / b, less 1 where the remainder's sign is not
    b's, 0 signed as a / b)."""
    if mode not in ("trunc", "floor"):
        raise ExportError(f"div with rounding_mode={mode!r}")
    what = f"div with rounding_mode={mode!r}"
    dtype = t.out_fake().dtype
    if dtype.is_floating_point and mode == "floor":
        _refuse_float(what, None if isinstance(b, Value) else float(b))
    a, b, number = _operands(t, a, b, what)
    out = t.out_fake()
    if not dtype.is_floating_point:
        if mode == "trunc":
            return t.emit("div", [a, b])
        q, r = _integer_parts(t, a, b)
        lower = t.emit("add_scalar", [q], [("value", -1.0)], fake=out, final=False, role="lower")
        return t.emit("where", [_sign_differs(t, r, b, number), lower, q])
    if mode == "trunc":
        q = t.emit("div", [_detached(t, a), _detached(t, b) if number is None else b], fake=out, final=False,
                   role="quotient")
        return _trunc(t, q, final=True)
    held = _detached(t, a)
    mod, cut = _float_fmod(t, held, number)
    whole = t.emit("sub", [held, mod], fake=out, final=False, role="multiple")
    d = t.emit("mul_scalar", [whole], [("value", 1.0 / number)], fake=out, final=False, role="whole_quotient")
    lower = t.emit("add_scalar", [d], [("value", -1.0)], fake=out, final=False, role="lower")
    d = t.emit("where", [_sign_differs(t, mod, b, number), lower, d], fake=out, final=False, role="floor")
    zero = t.emit("compare_scalar", [d], [("value", 0.0), ("op", "eq")], fake=t.fake_like(out.shape, torch.bool),
                  final=False, role="is_zero")
    return t.emit("where", [zero, cut, d])


@handles(aten.floor_divide.default, aten.floor_divide.Scalar)
def floor_divide(t, a, b):
    """`a // b`: div with rounding_mode='floor'."""
    return rounded_division(t, a, b, "floor")


@handles(aten.remainder.Tensor, aten.remainder.Scalar, aten.fmod.Tensor, aten.fmod.Scalar)
def remainder(t, a, b):
    """`remainder` (Python's %, the sign of b) and `fmod` (C's, the sign of a): of integers
    a − trunc(a / b)·b, plus b where the remainder's sign is not b's (remainder); of floats
    (a power-of-two number b) the exact fmod above, plus b likewise (PyTorch's kernel).
    The gradient to a is 1, as PyTorch's."""
    name = t.node.target._schema.name.split("::")[-1]
    what = f"{name} of a tensor by {'a tensor' if isinstance(b, Value) else b!r}"
    dtype = t.out_fake().dtype
    if dtype.is_floating_point:
        _refuse_float(name, None if isinstance(b, Value) else float(b))
    a, b, number = _operands(t, a, b, what)
    out = t.out_fake()
    if dtype.is_floating_point:
        mod, _ = _float_fmod(t, a, number, final=name == "fmod")
    else:
        _, mod = _integer_parts(t, a, b)
    if name == "fmod":
        return mod
    shifted = t.emit("add", [mod, b], fake=out, final=False, role="shifted")
    return t.emit("where", [_sign_differs(t, mod, b, number), shifted, mod])
