"""The random handlers: memplan's seeded `dropout`, `bernoulli` masks made with it, and
random tensors (`rand`, `randn`, their `_like`s, `normal_`, `uniform_`, `randint`,
`bernoulli` of probabilities) as memplan's `random`.

Every random site of a step reads the step's one `dropout_seed` input and has a stream
of its own, numbered in graph order (`Translator.dropout_seed`, `next_stream`), so no two
sites draw the same numbers. The numbers are memplan's, not PyTorch's generator's: the
same distributions, other values. Dropout with p = 0 or in eval mode is the identity and
emits nothing.
"""

from __future__ import annotations

import torch

from ..step import ExportError
from ..value import Value
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


def _random(t, shape, dtype, normal: bool, role="random", final=False) -> Value:
    """memplan's `random` of `dtype[shape]`: uniform in [0, 1) (the dtype's significand bits
    of memplan's hash) or standard normal, from the step's seed and a stream of its own.
    An integer dtype draws f32 first (the caller converts)."""
    float_dtype = dtype if dtype.is_floating_point else torch.float32
    if float_dtype == torch.float64:
        raise ExportError("random numbers in float64 (memplan's floats are f32, f16 and bf16)")
    attrs = [("shape", [int(d) for d in shape]), ("dtype", float_dtype), ("stream", t.next_stream())]
    if normal:
        attrs.append(("normal", True))
    return t.emit("random", [t.dropout_seed()], attrs, fake=t.fake_like(shape, float_dtype), final=final, role=role)


def _no_generator(kwargs, what):
    if kwargs.get("generator") is not None:
        raise ExportError(f"{what} with a generator is not supported (memplan draws from the step's seed)")


def _affine(t, x: Value, scale: float, shift: float) -> Value:
    """`x * scale + shift`, leaving out a factor of 1 and a shift of 0; the node's result."""
    if scale != 1.0:
        x = t.emit("mul_scalar", [x], [("value", float(scale))], fake=x.fake, final=shift == 0.0, role="scaled")
    if shift != 0.0:
        x = t.emit("add_scalar", [x], [("value", float(shift))], fake=x.fake)
    return x


@handles(aten.rand.default, aten.rand_like.default)
def rand(t, *args, **kwargs):
    """`torch.rand`, `torch.rand_like`: `random` of the node's shape and dtype, uniform in
    [0, 1). memplan's numbers (the same distribution as PyTorch's, other values)."""
    _no_generator(kwargs, "rand")
    out = t.out_fake()
    return _random(t, out.shape, out.dtype, normal=False, final=True)


@handles(aten.randn.default, aten.randn_like.default)
def randn(t, *args, **kwargs):
    """`torch.randn`, `torch.randn_like`: `random(normal=true)` of the node's shape and
    dtype: the noise of a diffusion step, a VAE's reparameterization."""
    _no_generator(kwargs, "randn")
    out = t.out_fake()
    return _random(t, out.shape, out.dtype, normal=True, final=True)


@handles(aten.normal_functional.default)
def normal_functional(t, x, mean=0.0, std=1.0, generator=None):
    """`x.normal_(mean, std)` (functionalized): standard normal numbers of x's shape and
    dtype (x's values are not read), times std, plus mean."""
    _no_generator({"generator": generator}, "normal_")
    z = _random(t, x.shape, x.fake.dtype, normal=True, final=std == 1.0 and mean == 0.0)
    return _affine(t, z, float(std), float(mean))


@handles(aten.normal.float_float)
def normal(t, mean, std, size, **kwargs):
    """`torch.normal(mean, std, size)` with numbers for mean and std."""
    _no_generator(kwargs, "normal")
    out = t.out_fake()
    z = _random(t, out.shape, out.dtype, normal=True, final=std == 1.0 and mean == 0.0)
    return _affine(t, z, float(std), float(mean))


@handles(aten.uniform.default)
def uniform(t, x, low=0.0, high=1.0, generator=None):
    """`x.uniform_(low, high)` (functionalized): uniform [0, 1) numbers of x's shape and
    dtype times (high − low), plus low, as PyTorch computes them."""
    _no_generator({"generator": generator}, "uniform_")
    u = _random(t, x.shape, x.fake.dtype, normal=False, final=high - low == 1.0 and low == 0.0)
    return _affine(t, u, float(high) - float(low), float(low))


@handles(aten.bernoulli.default)
def bernoulli_probabilities(t, probs, generator=None):
    """`torch.bernoulli(probs)`: 1 where a uniform [0, 1) number of probs' dtype is below
    the element's probability, else 0 (probability `probs` up to the dtype's resolution),
    in probs' dtype."""
    _no_generator({"generator": generator}, "bernoulli")
    dtype = probs.fake.dtype
    if not dtype.is_floating_point:
        raise ExportError(f"bernoulli of {dtype} probabilities")
    u = _random(t, probs.shape, dtype, normal=False)
    below = t.emit("compare", [u, probs], [("op", "lt")], fake=t.fake_like(probs.shape, torch.bool), final=False,
                   role="mask")
    return t.emit("cast", [below], [("to", dtype)])


# randint draws f32 uniforms of 24 bits, k / 2^24, and truncates k / 2^24 · n: exact, and
# below n (the product is at least n / 2^24 below n, more than half a float's spacing
# there, so rounding never reaches n), for n up to 2^24.
_RANDINT_RANGE = 2**24


@handles(aten.randint.low, aten.randint.default, aten.randint_like.default, aten.randint_like.low_dtype)
def randint(t, *args, **kwargs):
    """`torch.randint(low, high, size)`, `randint_like(x, [low,] high)`: ⌊u · (high − low)⌋
    + low of a 24-bit uniform u (memplan's draw; the same distribution as PyTorch's up to
    (high − low) / 2^24), in the node's dtype: a diffusion step's timesteps."""
    _no_generator(kwargs, "randint")
    target = t.node.target
    if target in (aten.randint.default, aten.randint_like.default):
        low, high = 0, args[1] if target is aten.randint_like.default else args[0]
    else:
        low, high = args[1:3] if target is aten.randint_like.low_dtype else args[0:2]
    low, high = int(low), int(high)
    n = high - low
    if not 0 < n <= _RANDINT_RANGE:
        raise ExportError(f"randint over {n} values (memplan draws from 1 to 2^24)")
    out = t.out_fake()
    u = _random(t, out.shape, torch.float32, normal=False)
    scaled = t.emit("mul_scalar", [u], [("value", float(n))], fake=u.fake, final=False, role="scaled")
    index = t.emit("cast", [scaled], [("to", torch.int64)], fake=t.fake_like(out.shape, torch.int64),
                   final=out.dtype == torch.int64 and low == 0, role="index")
    if low != 0:
        index = t.emit("add_scalar", [index], [("value", float(low))], fake=index.fake, final=out.dtype == torch.int64)
    if out.dtype == torch.int64:
        return index
    return t.emit("cast", [index], [("to", out.dtype)])
