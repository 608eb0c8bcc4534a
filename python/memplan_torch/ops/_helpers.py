"""What handlers of several families share: dtype promotion and casts, and constants.

memplan's ops take one dtype where PyTorch promotes mixed ones, so a handler casts its
inputs to the dtype PyTorch gives the node's output (`promoted`), or to the dtype an op's
`dtype=` argument asks for (`cast_to`). A constant a handler needs (a missing LayerNorm
weight, the scalar branch of a `where`) is a `fill`, a helper value of the node.
"""

from __future__ import annotations

from ..value import Value


def cast_to(t, x: Value, dtype) -> Value:
    """`x` in `dtype` (itself if it has it): the cast an op's `dtype=` argument asks for."""
    if dtype is None or dtype == x.fake.dtype:
        return x
    return t.emit("cast", [x], [("to", dtype)], fake=t.fake_like(x.shape, dtype), final=False)


def promoted(t, *values: Value) -> list[Value]:
    """`values` cast to the dtype of the node's output: PyTorch promotes mixed dtypes (an f32
    residual plus a bf16 branch under autocast is f32), memplan's ops take one dtype."""
    dtype = t.out_fake().dtype
    return [cast_to(t, v, dtype) for v in values]


def constant(t, shape, dtype, value, role) -> Value:
    """A `fill` of `shape` with `value`, a helper value of the node named `path.role`."""
    fake = t.fake_like(shape, dtype)
    attrs = [("shape", list(shape)), ("dtype", dtype), ("value", float(value))]
    return t.emit("fill", [], attrs, fake=fake, final=False, role=role)


def reshaped(t, x: Value, shape, role: str, final=False) -> Value:
    """`x` viewed as `shape` (a helper value named `path.role`): a `reshape`, after a
    `contiguous` copy where memplan's layout of `x` cannot view it (as PyTorch's `reshape`)."""
    from ..value import viewable

    shape = [int(d) for d in shape]
    if shape == x.shape:
        return x
    if not viewable(x, shape):
        x = t.emit("contiguous", [x], fake=x.fake, final=False, role=f"{role}.dense")
    fake = None if final else t.fake_like(shape, x.fake.dtype)
    return t.emit("reshape", [x], [("shape", shape)], fake=fake, final=final, role=role)
