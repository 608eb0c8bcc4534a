"""Shape handlers: views, slicing and splitting, concatenation, copies and identities,
the reductions `sum` and `mean`, and indexing: `index`, `gather`, the scatters
(`scatter_add`, `index_add`, `index_put` accumulating or overwriting, `index_fill`) and
`histc` (a `scatter_add` of ones at computed bins).

Views stay views: `view`, `reshape`, `flatten`, `unsqueeze`, `squeeze`, `transpose`,
`permute`, `t`, `expand`, `slice`, `select`, `narrow`, `split`, `chunk` and `unbind` become
memplan's `reshape`, `transpose`, `expand`, `slice` and `select`, which share their input's
bytes exactly as PyTorch's storage does (memplan's `reshape` is a view where PyTorch's
`view` is one). A `reshape` PyTorch must copy is a `contiguous` copy first, as in PyTorch;
whether memplan can view is asked of its own layout of the value (`value.shadow`).
Identity ops (`alias`, `contiguous` and `clone` of dense data) emit nothing; `detach` is
memplan's `detach`, a view through which no gradient flows (as in PyTorch).
"""

from __future__ import annotations

import math

import torch

from ..value import Value, shadow, viewable
from ..step import ExportError
from ._helpers import cast_to, promoted, reshaped
from .registry import aten, handles


def _dims(value: Value, dims) -> list[int]:
    return [d % value.rank if value.rank else 0 for d in ([dims] if isinstance(dims, int) else dims)]


def _reshape(t, x: Value, final=True) -> Value:
    """`x` under the node's output shape: a view where memplan's layout of `x` allows one (as
    PyTorch's `view` would), else a `contiguous` copy first (as PyTorch's `reshape` makes)."""
    out = t.out_fake()
    if list(out.shape) == x.shape:
        return x
    if not viewable(x, out.shape):
        x = t.emit("contiguous", [x], fake=x.fake, final=False)
    return t.emit("reshape", [x], [("shape", [int(d) for d in out.shape])], final=final)


@handles(aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.flatten.using_ints,
         aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default)
def view(t, x, *_shape):
    return _reshape(t, x)


@handles(aten.transpose.int)
def transpose(t, x, d0, d1):
    perm = list(range(x.rank))
    d0, d1 = d0 % x.rank, d1 % x.rank
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return t.emit("transpose", [x], [("perm", perm)])


@handles(aten.permute.default)
def permute(t, x, dims):
    return t.emit("transpose", [x], [("perm", _dims(x, dims))])


@handles(aten.t.default)
def t_(t, x):
    if x.rank < 2:
        return x
    return t.emit("transpose", [x], [("perm", [1, 0])])


@handles(aten.expand.default)
def expand(t, x, sizes, implicit=False):
    out = t.out_fake()
    if list(out.shape) == x.shape:
        return x
    return t.emit("expand", [x], [("shape", [int(d) for d in out.shape])])


@handles(aten.contiguous.default)
def contiguous(t, x, memory_format=None):
    return x if shadow(x).is_contiguous() else t.emit("contiguous", [x])


@handles(aten.clone.default)
def clone(t, x, memory_format=None):
    """A copy in PyTorch; in a functional graph nothing writes either copy afterwards, so a
    dense value is its own clone (as torch.compile treats it) and only a strided one needs
    `contiguous`."""
    return contiguous(t, x)


@handles(aten.alias.default)
def alias(t, x, *_):
    return x


@handles(aten.detach.default)
def detach(t, x):
    # A detach of a detach (the user's `.detach()` of a `no_grad` block's result) is that.
    if t.writes(x) == "detach":
        return x
    return t.emit("detach", [x])


def _bounds(size: int, start, end) -> tuple[int, int]:
    """PyTorch's slice bounds: negative counts from the end, then clamped to 0..size."""
    start = 0 if start is None else start
    end = size if end is None else end
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    start = min(max(start, 0), size)
    return start, min(max(end, start), size)


def _slice_of(t, x, axis: int, start: int, end: int, step: int = 1, final=True, fake=None) -> Value:
    if start == 0 and end == x.shape[axis] and step == 1:
        return x
    if fake is None:
        fake = shadow(x)[(slice(None),) * axis + (slice(start, end, step),)]
    attrs = [("axis", axis), ("start", start), ("end", end)] + ([("step", step)] if step != 1 else [])
    return t.emit("slice", [x], attrs, fake=torch.empty(fake.shape, dtype=x.fake.dtype, device="meta"), final=final)


@handles(aten.slice.Tensor)
def slice_(t, x, dim=0, start=None, end=None, step=1):
    axis = dim % x.rank
    start, end = _bounds(x.shape[axis], start, end)
    return _slice_of(t, x, axis, start, end, step)


@handles(aten.slice_scatter.default)
def slice_scatter(t, x, src, dim=0, start=None, end=None, step=1):
    """`x` with `src` written over `x[start:end:step]` along `dim`: a write into a slice
    (`out[:, :d] = h`), functionalized."""
    axis = dim % x.rank
    start, end = _bounds(x.shape[axis], start, end)
    return _scatter(t, x, src, axis, start, end, step)


@handles(aten.select_scatter.default)
def select_scatter(t, x, src, dim, index):
    """`x` with `src` written over `x[index]` along `dim` (`h[:, 0] += 1`, functionalized):
    a `slice_scatter` of the one-element slice, `src` given the axis back (a view)."""
    axis = dim % x.rank
    index = index + x.shape[axis] if index < 0 else index
    shape = src.shape[:axis] + [1] + src.shape[axis:]
    src = src if viewable(src, shape) else t.emit("contiguous", [src], fake=src.fake, final=False)
    src = t.emit("reshape", [src], [("shape", shape)], fake=t.fake_like(shape, src.fake.dtype), final=False)
    return _scatter(t, x, src, axis, index, index + 1, 1)


def _scatter(t, x, src, axis: int, start: int, end: int, step: int) -> Value:
    # PyTorch casts src to x's dtype and broadcasts it to the slice's shape.
    src = cast_to(t, src, x.fake.dtype)
    part = list(shadow(x)[(slice(None),) * axis + (slice(start, end, step),)].shape)
    if src.shape != part:
        src = t.emit("expand", [src], [("shape", part)], fake=t.fake_like(part, src.fake.dtype), final=False)
    if start == 0 and end == x.shape[axis] and step == 1:
        return src
    attrs = [("axis", axis), ("start", start), ("end", end)] + ([("step", step)] if step != 1 else [])
    if _is_view_at(t, src.name, x.name, dict(attrs)):
        # Writing a slice's own values back (functionalization's copy of `h[:, 0] += 1`
        # into the view it already wrote through): x itself.
        return x
    return t.emit("slice_scatter", [x, src], attrs)


def _is_view_at(t, name: str, base: str, attrs: dict) -> bool:
    """Whether the value `name` is `base`'s slice `attrs` (a `slice` with those bounds, or a
    `select` of a one-element slice with its axis given back by a `reshape`)."""
    op = t.written_by(name)
    if op is not None and op.op == "reshape":
        op = t.written_by(op.inputs[0])
        step_one = attrs.get("step", 1) == 1 and attrs["end"] == attrs["start"] + 1
        return (op is not None and op.op == "select" and op.inputs == [base] and step_one
                and dict(op.attrs) == {"axis": attrs["axis"], "index": attrs["start"]})
    return op is not None and op.op == "slice" and op.inputs == [base] and dict(op.attrs) == attrs


@handles(aten.copy.default)
def copy(t, x, src, non_blocking=False):
    """`x.copy_(src)` functionalized: `src` in `x`'s dtype, broadcast to `x`'s shape (no
    copy: in a functional graph nothing writes either afterwards)."""
    src = cast_to(t, src, x.fake.dtype)
    if src.shape != x.shape:
        src = t.emit("expand", [src], [("shape", x.shape)], fake=t.fake_like(x.shape, src.fake.dtype), final=False)
    return src


@handles(aten.narrow.default)
def narrow(t, x, dim, start, length):
    axis = dim % x.rank
    start = start + x.shape[axis] if start < 0 else start
    return _slice_of(t, x, axis, start, start + length)


@handles(aten.select.int)
def select(t, x, dim, index):
    axis = dim % x.rank
    index = index + x.shape[axis] if index < 0 else index
    return t.emit("select", [x], [("axis", axis), ("index", index)])


def _pieces(t, x, axis: int, sizes) -> tuple:
    out, start = [], 0
    for size in sizes:
        out.append(_slice_of(t, x, axis, start, start + size, final=False))
        start += size
    return tuple(out)


@handles(aten.split.Tensor, aten.split_with_sizes.default)
def split(t, x, split_size, dim=0):
    axis = dim % x.rank
    n = x.shape[axis]
    sizes = [min(split_size, n - s) for s in range(0, n, split_size)] if isinstance(split_size, int) else list(split_size)
    return _pieces(t, x, axis, sizes)


@handles(aten.chunk.default)
def chunk(t, x, chunks, dim=0):
    axis = dim % x.rank
    size = -(-x.shape[axis] // chunks)
    return split(t, x, size, axis)


@handles(aten.unbind.int)
def unbind(t, x, dim=0):
    axis = dim % x.rank
    return tuple(t.emit("select", [x], [("axis", axis), ("index", i)], fake=t.fake_like(
        x.shape[:axis] + x.shape[axis + 1:], x.fake.dtype), final=False) for i in range(x.shape[axis]))


@handles(aten.cat.default)
def cat(t, tensors, dim=0):
    tensors = [v for v in tensors if v.fake.numel() > 0 or len(tensors) == 1]
    axis = dim % tensors[0].rank
    return t.emit("cat", promoted(t, *tensors), [("axis", axis)])


@handles(aten.stack.default)
def stack(t, tensors, dim=0):
    rank = tensors[0].rank + 1
    axis = dim % rank
    expanded = []
    for v in tensors:
        shape = v.shape[:axis] + [1] + v.shape[axis:]
        fake = t.fake_like(shape, v.fake.dtype)
        x = v if viewable(v, shape) else t.emit("contiguous", [v], fake=v.fake, final=False)
        expanded.append(t.emit("reshape", [x], [("shape", shape)], fake=fake, final=False))
    return t.emit("cat", expanded, [("axis", axis)])


def reduce(op: str):
    """The handler of an ATen reduction that is memplan's `op` (`sum`, `mean`) over `axes`."""

    def handler(t, x, dims=None, keepdim=False, dtype=None):
        x = cast_to(t, x, dtype)
        axes = list(range(x.rank)) if dims is None or dims == [] else _dims(x, dims)
        attrs = [("axes", axes)] + ([("keepdim", True)] if keepdim else [])
        return t.emit(op, [x], attrs)

    handler.__qualname__ = f"reduce({op!r})"
    return handler


handles(aten.mean.dim, aten.mean.default)(reduce("mean"))


@handles(aten.argmax.default)
def argmax(t, x, dim=None, keepdim=False):
    """`x.argmax(dim)`: memplan's `argmax` (i64). Without `dim` (over all elements) it is the
    argmax of x flattened."""
    if dim is None:
        flat = reshaped(t, x, [x.fake.numel()], "flat")
        return reshaped(t, t.emit("argmax", [flat], [("axis", 0)], fake=t.fake_like([], torch.int64), final=False),
                        t.out_fake().shape, "argmax", final=True)
    attrs = [("axis", dim % max(x.rank, 1))] + ([("keepdim", True)] if keepdim else [])
    return t.emit("argmax", [cast_to(t, x, torch.int64) if x.fake.dtype == torch.bool else x], attrs)
handles(aten.sum.dim_IntList, aten.sum.default)(reduce("sum"))


@handles(aten.constant_pad_nd.default)
def constant_pad_nd(t, x, pad_widths, value=0.0):
    """`constant_pad_nd(x, pad, value)` (its third argument is the value): `pad`'s."""
    return pad(t, x, pad_widths, "constant", value)


@handles(aten.linspace.default)
def linspace(t, start, end, steps, dtype=None, layout=None, device=None, pin_memory=None):
    """`torch.linspace` of a float dtype, as aten's CPU kernel computes it in that dtype:
    step = (end − start) / (steps − 1), the first steps/2 elements start + step·i, the rest
    end − step·(steps − 1 − i). Each half is a `fill` counting 0, 1, ... (exact) times the
    step plus its end (`mul_scalar`, `add_scalar`: one rounding each, as the f32 operations),
    the halves joined (`cat`)."""
    out = t.out_fake()
    if not out.dtype.is_floating_point or out.dtype == torch.float64:
        raise ExportError(f"linspace of {out.dtype} (memplan's is f32, f16 or bf16)")
    steps = int(steps)
    if steps <= 1:
        return t.emit("fill", [], [("shape", [steps]), ("dtype", out.dtype), ("value", float(start))])
    typed = lambda v: torch.tensor(float(v), dtype=out.dtype)  # noqa: E731
    step = (typed(end) - typed(start)) / torch.tensor(steps - 1, dtype=out.dtype)
    halfway = steps // 2

    def half(count, first_index, scale, shift, role):
        fake = t.fake_like([count], out.dtype)
        counting = t.emit("fill", [], [("shape", [count]), ("dtype", out.dtype), ("value", float(first_index)),
                                       ("step", 1.0 if first_index == 0 else -1.0)], fake=fake, final=False, role=role)
        scaled = t.emit("mul_scalar", [counting], [("value", scale)], fake=fake, final=False, role=role)
        return t.emit("add_scalar", [scaled], [("value", shift)], fake=fake, final=False, role=role)

    low = half(halfway, 0, float(step), float(typed(start)), "low")
    high = half(steps - halfway, steps - 1 - halfway, -float(step), float(typed(end)), "high")
    return t.emit("cat", [low, high], [("axis", 0)])


@handles(aten.pad.default)
def pad(t, x, pad, mode="constant", value=None):
    """`F.pad` with a constant: a `fill` of the padded shape with the value and `x` written
    into it (`slice_scatter`, which memplan's in-place pass writes into the fill's buffer),
    one padded dimension after another from the last; negative padding crops (a slice).
    PyTorch's own decomposition (`constant_pad_nd`: new_full, then a copy into a slice)."""
    from ..step import ExportError

    if mode != "constant":
        raise ExportError(f"pad with mode={mode!r} is not supported (constant only)")
    value = 0.0 if value is None else float(value)
    out = x
    for k in range(len(pad) // 2):
        axis = x.rank - 1 - k
        left, right = int(pad[2 * k]), int(pad[2 * k + 1])
        if left < 0 or right < 0:
            size = out.shape[axis]
            start, end = max(-left, 0), size - max(-right, 0)
            out = _slice_of(t, out, axis, start, end, final=False,
                            fake=t.fake_like(out.shape[:axis] + [end - start] + out.shape[axis + 1:], x.fake.dtype))
            left, right = max(left, 0), max(right, 0)
        if left == 0 and right == 0:
            continue
        shape = out.shape[:axis] + [out.shape[axis] + left + right] + out.shape[axis + 1:]
        fake = t.fake_like(shape, x.fake.dtype)
        base = t.emit("fill", [], [("shape", shape), ("dtype", x.fake.dtype), ("value", value)], fake=fake, final=False,
                      role="pad.fill")
        attrs = [("axis", axis), ("start", left), ("end", left + out.shape[axis])]
        out = t.emit("slice_scatter", [base, out], attrs, fake=fake, final=False)
    return out


@handles(aten.numpy_T.default)
def numpy_t(t, x):
    """`x.T`: every dimension reversed (a view)."""
    if x.rank < 2:
        return x
    return t.emit("transpose", [x], [("perm", list(reversed(range(x.rank))))])


@handles(aten.fill.Tensor)
def fill_tensor(t, x, value):
    """`x.fill_(value)` with a 0-d tensor, functionalized: `value` broadcast to x's shape
    in x's dtype, as a tensor of its own (`contiguous` copies the broadcast)."""
    value = cast_to(t, value, x.fake.dtype)
    if value.shape != x.shape:
        value = t.emit("expand", [value], [("shape", x.shape)], fake=t.fake_like(x.shape, x.fake.dtype), final=False)
    return t.emit("contiguous", [value], fake=t.fake_like(x.shape, x.fake.dtype))


@handles(aten.gather.default)
def gather(t, x, dim, index, sparse_grad=False):
    """`torch.gather(x, dim, index)`: memplan's `gather` along `dim`."""
    return t.emit("gather", [x, index], [("axis", dim % x.rank)])


@handles(aten.repeat.default)
def repeat(t, x, repeats):
    """`x.repeat(r0, r1, ...)`: x viewed with a size-1 axis before each of its dimensions,
    expanded to [r0, s0, r1, s1, ...] (a view), copied (`contiguous`) and viewed as
    [r0·s0, r1·s1, ...]: PyTorch's own decomposition, one buffer of the output's size."""
    repeats = [int(r) for r in repeats]
    sizes = [1] * (len(repeats) - x.rank) + x.shape
    if all(r == 1 for r in repeats):
        return reshaped(t, x, sizes, "repeat", final=True)
    interleaved = [d for s in sizes for d in (1, s)]
    spread = reshaped(t, x, interleaved, "axes")
    target = [d for r, s in zip(repeats, sizes) for d in (r, s)]
    wide = t.emit("expand", [spread], [("shape", target)], fake=t.fake_like(target, x.fake.dtype), final=False,
                  role="expanded")
    dense = t.emit("contiguous", [wide], fake=wide.fake, final=False, role="copies")
    return reshaped(t, dense, [r * s for r, s in zip(repeats, sizes)], "repeat", final=True)


@handles(aten.roll.default)
def roll(t, x, shifts, dims=()):
    """`torch.roll`: along each dimension, the last `shift` elements moved to the front, a
    `cat` of two slices; with no dimensions, of the flattened tensor, viewed back."""
    shifts, dims = [int(s) for s in shifts], [d % x.rank for d in dims]
    if not dims:
        flat = reshaped(t, x, [x.fake.numel()], "flat")
        return reshaped(t, _rolled(t, flat, shifts[0], 0, final=False), x.shape, "roll", final=True)
    out = x
    for k, (shift, axis) in enumerate(zip(shifts, dims)):
        out = _rolled(t, out, shift, axis, final=k == len(dims) - 1)
    return out


def _rolled(t, x, shift: int, axis: int, final: bool) -> Value:
    size = x.shape[axis]
    shift = shift % size if size else 0
    if shift == 0:
        return reshaped(t, x, x.shape, "roll", final=True) if final else x
    tail = _slice_of(t, x, axis, size - shift, size, final=False)
    head = _slice_of(t, x, axis, 0, size - shift, final=False)
    return t.emit("cat", [tail, head], [("axis", axis)], fake=None if final else x.fake, final=final, role="rolled")


@handles(aten.broadcast_tensors.default)
def broadcast_tensors(t, tensors):
    """Each tensor expanded to the shape they broadcast to (views)."""
    shape = [int(d) for d in torch.broadcast_shapes(*(v.fake.shape for v in tensors))]
    return tuple(v if v.shape == shape else t.emit("expand", [v], [("shape", shape)],
                 fake=t.fake_like(shape, v.fake.dtype), final=False, role=f"broadcast{i}") for i, v in enumerate(tensors))


def _flat_rows(t, x, indices):
    """The integer index tensors of `x[i, j, ...]` (adjacent, from dimension `first` to
    `last`) as one row number into those dimensions flattened, `i·size_j + j` (broadcast),
    negative indices counted from the end as PyTorch counts them. Refuses what is not that
    form before writing anything."""
    at = [k for k, v in enumerate(indices) if v is not None]
    if at != list(range(at[0], at[-1] + 1)):
        raise ExportError("indexing with tensors at dimensions that are not adjacent is not supported")
    if any(not isinstance(indices[k], Value) or indices[k].fake.dtype == torch.bool or indices[k].fake.dtype.is_floating_point
           for k in at):
        raise ExportError("indexing with a bool mask or float tensor is not supported (integer indices only)")
    if any(isinstance(d, torch.SymInt) for v in [t.out_fake()] + [indices[k].fake for k in at] for d in v.shape):
        raise ExportError("indexing with indices whose count is known only when the step runs (from nonzero)")
    rows = None
    for k in at:
        size = x.shape[k]
        i = cast_to(t, indices[k], torch.int64)
        bools = t.fake_like(i.shape, torch.bool)
        negative = t.emit("compare_scalar", [i], [("value", 0.0), ("op", "lt")], fake=bools, final=False, role="negative")
        wrapped = t.emit("add_scalar", [i], [("value", float(size))], fake=i.fake, final=False, role="from_end")
        i = t.emit("where", [negative, wrapped, i], fake=i.fake, final=False, role="index")
        if rows is not None:
            scaled = t.emit("mul_scalar", [rows], [("value", float(size))], fake=rows.fake, final=False, role="row_scaled")
            shape = [int(d) for d in torch.broadcast_shapes(scaled.fake.shape, i.fake.shape)]
            i = t.emit("add", [scaled, i], fake=t.fake_like(shape, torch.int64), final=False, role="row")
        rows = i
    return rows, at[0], at[-1] + 1


def _spread_rows(t, rows: Value, lead: int, width: int) -> Value:
    """The row numbers as the [lead, n, width] index of a gather or scatter along the middle
    axis of x viewed as [before, rows, after] (a view of the n numbers)."""
    n = rows.fake.numel()
    line = reshaped(t, rows, [1, n, 1], "row_line")
    return t.emit("expand", [line], [("shape", [lead, n, width])], fake=t.fake_like([lead, n, width], torch.int64),
                  final=False, role="row_index")


def _product(sizes) -> int:
    total = 1
    for d in sizes:
        total *= int(d)
    return total


@handles(aten.index.Tensor)
def index(t, x, indices):
    """`x[i, j]` with integer index tensors over adjacent dimensions (advanced indexing): the
    indices as one row number into those dimensions flattened (`_flat_rows`); then, when
    they start at dimension 0, an `embedding` of x viewed as [rows, rest]; else a `gather`
    along the middle axis of x viewed as [before, rows, after]. Their backward ops sum
    repeated rows, as PyTorch's index backward (`index_put` accumulating) does."""
    if all(v is None for v in indices):
        return x
    rows, first, last = _flat_rows(t, x, indices)
    count, width, lead = _product(x.shape[first:last]), _product(x.shape[last:]), _product(x.shape[:first])
    if first == 0:
        table = reshaped(t, x, [count, width], "table")
        picked = t.emit("embedding", [table, rows], fake=t.fake_like(rows.shape + [width], x.fake.dtype), final=False,
                        role="rows")
        return reshaped(t, picked, t.out_fake().shape, "index", final=True)
    n = rows.fake.numel()
    middle = reshaped(t, x, [lead, count, width], "table")
    picked = t.emit("gather", [middle, _spread_rows(t, rows, lead, width)], [("axis", 1)],
                    fake=t.fake_like([lead, n, width], x.fake.dtype), final=False, role="rows")
    return reshaped(t, picked, t.out_fake().shape, "index", final=True)


def index_put_accumulate(t, x, indices, values):
    """`x[i, j] += values` (`index_put(..., accumulate=True)`) with integer indices: the
    rows as `index` numbers them, and a `scatter_add` along the middle axis of x viewed as
    [before, rows, after], the values broadcast to what `x[i, j]` would be (repeated rows
    add up, as in PyTorch)."""
    rows, first, last = _flat_rows(t, x, indices)
    count, width, lead = _product(x.shape[first:last]), _product(x.shape[last:]), _product(x.shape[:first])
    n = rows.fake.numel()
    picked_shape = x.shape[:first] + rows.shape + x.shape[last:]
    values = cast_to(t, values, x.fake.dtype)
    if values.shape != picked_shape:
        values = t.emit("expand", [values], [("shape", picked_shape)], fake=t.fake_like(picked_shape, x.fake.dtype),
                        final=False, role="values")
    source = reshaped(t, values, [lead, n, width], "source")
    middle = reshaped(t, x, [lead, count, width], "table")
    added = t.emit("scatter_add", [middle, _spread_rows(t, rows, lead, width), source], [("axis", 1)], fake=middle.fake,
                   final=False, role="added")
    return reshaped(t, added, x.shape, "index_put", final=True)


@handles(aten.index_add.default)
def index_add(t, x, dim, positions, source, alpha=1):
    """`x.index_add(dim, index, source)`: `scatter_add` along dim with the index viewed
    along it and expanded to the source's shape (a view); `alpha` scales the source."""
    axis = dim % max(x.rank, 1)
    source = cast_to(t, source, x.fake.dtype)
    if alpha != 1:
        source = t.emit("mul_scalar", [source], [("value", float(alpha))], fake=source.fake, final=False, role="scaled")
    along = [1] * source.rank
    along[axis] = positions.fake.numel()
    line = reshaped(t, cast_to(t, positions, torch.int64), along, "index_line")
    spread = t.emit("expand", [line], [("shape", source.shape)], fake=t.fake_like(source.shape, torch.int64),
                    final=False, role="index")
    return t.emit("scatter_add", [x, spread, source], [("axis", axis)])


@handles(aten.scatter_add.default)
def scatter_add(t, x, dim, positions, src):
    """`x.scatter_add(dim, index, src)`: memplan's `scatter_add` (src cut to index's shape,
    the part PyTorch reads: a view)."""
    axis = dim % max(x.rank, 1)
    src = cast_to(t, src, x.fake.dtype)
    for d, size in enumerate(positions.shape):
        if src.shape[d] != size:
            src = _slice_of(t, src, d, 0, size, final=False)
    return t.emit("scatter_add", [x, positions, src], [("axis", axis)])


@handles(aten.topk.default)
def topk(t, x, k, dim=-1, largest=True, sorted=True):
    """`torch.topk`: memplan's `topk` (values and i64 indices, sorted; unsorted lets any order
    be PyTorch's, sorted among them)."""
    axis = dim % max(x.rank, 1)
    attrs = [("k", int(k))] + ([("axis", axis)] if axis != x.rank - 1 else []) + ([] if largest else [("largest", False)])
    return tuple(t.emit_multi("topk", [x], [t.out_fake(0), t.out_fake(1)], ["values", "indices"], attrs))


@handles(aten.repeat_interleave.self_int)
def repeat_interleave(t, x, repeats, dim=None, output_size=None):
    """`x.repeat_interleave(r, dim)` with a number r: each element r times in a row, x viewed
    with a size-1 axis after `dim`, expanded to r there (a view), copied and viewed back;
    without `dim`, of x flattened."""
    if dim is None:
        x, dim = reshaped(t, x, [x.fake.numel()], "flat"), 0
    axis, r = dim % x.rank, int(repeats)
    spread_shape = x.shape[:axis + 1] + [1] + x.shape[axis + 1:]
    spread = reshaped(t, x, spread_shape, "axis")
    wide_shape = x.shape[:axis + 1] + [r] + x.shape[axis + 1:]
    wide = t.emit("expand", [spread], [("shape", wide_shape)], fake=t.fake_like(wide_shape, x.fake.dtype), final=False,
                  role="expanded")
    dense = t.emit("contiguous", [wide], fake=wide.fake, final=False, role="copies")
    return reshaped(t, dense, t.out_fake().shape, "repeat_interleave", final=True)


@handles(aten.pixel_shuffle.default)
def pixel_shuffle(t, x, r):
    """`pixel_shuffle`: [..., C·r², H, W] viewed as [..., C, r, r, H, W], permuted to
    [..., C, H, r, W, r], copied and viewed as [..., C, H·r, W·r] (PyTorch's own)."""
    *lead, channels, h, w = x.shape
    c = channels // (r * r)
    k = len(lead)
    split = reshaped(t, x, lead + [c, r, r, h, w], "split")
    perm = list(range(k)) + [k, k + 3, k + 1, k + 4, k + 2]
    moved = t.emit("transpose", [split], [("perm", perm)], fake=t.fake_like(lead + [c, h, r, w, r], x.fake.dtype),
                   final=False, role="moved")
    return reshaped(t, moved, lead + [c, h * r, w * r], "pixel_shuffle", final=True)


@handles(aten.pixel_unshuffle.default)
def pixel_unshuffle(t, x, r):
    """`pixel_unshuffle`, pixel_shuffle's inverse: [..., C, H·r, W·r] viewed as
    [..., C, H, r, W, r], permuted to [..., C, r, r, H, W], copied, viewed as [..., C·r², H, W]."""
    *lead, c, hr, wr = x.shape
    h, w = hr // r, wr // r
    k = len(lead)
    split = reshaped(t, x, lead + [c, h, r, w, r], "split")
    perm = list(range(k)) + [k, k + 2, k + 4, k + 1, k + 3]
    moved = t.emit("transpose", [split], [("perm", perm)], fake=t.fake_like(lead + [c, r, r, h, w], x.fake.dtype),
                   final=False, role="moved")
    return reshaped(t, moved, lead + [c * r * r, h, w], "pixel_unshuffle", final=True)


@handles(aten.index_select.default)
def index_select(t, x, dim, positions):
    """`x.index_select(dim, index)`: `x[..., index]` at dim (the `index` handler)."""
    return index(t, x, [None] * (dim % x.rank) + [positions])


@handles(aten.sort.default)
def sort(t, x, dim=-1, descending=False):
    """`torch.sort`: memplan's `topk` of every element along `dim` (largest first when
    descending): PyTorch's order, a NaN counting as largest, equal values in the order of
    their positions (its stable order)."""
    axis = dim % max(x.rank, 1)
    attrs = [("k", x.shape[axis] if x.rank else 1)] + ([("axis", axis)] if axis != x.rank - 1 else [])
    attrs += [] if descending else [("largest", False)]
    return tuple(t.emit_multi("topk", [x], [t.out_fake(0), t.out_fake(1)], ["values", "indices"], attrs))


@handles(aten.sort.stable)
def sort_stable(t, x, stable=None, dim=-1, descending=False):
    return sort(t, x, dim, descending)


def index_put_overwrite(t, x, indices, values):
    """`x[i, j] = values` (`index_put`, accumulate=False) with integer indices, exactly with
    PyTorch's values and gradients. With the rows as `index` numbers them, x viewed as
    [before, rows, after]: the written rows set to −0.0 (`where`; x's gradient there is 0,
    as PyTorch's), then a `scatter_add` of the values into them: −0.0 + v is v for every v
    (−0.0, ±inf and NaN included). A row written more than once (PyTorch leaves which value
    wins undefined; its deterministic kernels and its CPU loop keep the last) keeps the
    last: the rows are sorted (`topk` of all of them, smallest first, equal ones in index
    order), the last of each run of equal rows marks its value the winner (a `scatter_add`
    of the marks back to index order), and every other value adds −(v̄ − v) = −0.0, with
    v̄ v detached, which gives it the gradient PyTorch gives every value (that of the
    element it targets) without changing the sum; a losing ±inf or NaN adds −0.0 itself
    (no gradient). Costs beyond the output: the sort of the n row numbers, and the
    values' [n, ...] helpers. Bool x is done in f32 and compared back; integer x is refused."""
    dtype = x.fake.dtype
    if not (dtype.is_floating_point or dtype == torch.bool):
        raise ExportError(f"index_put of a {dtype} tensor with integer indices and no accumulate is not supported "
                          "(memplan's scatter_add adds floats)")
    if not isinstance(values, (Value, int, float, bool)):
        raise ExportError("index_put: values must be a tensor or a number")
    work = torch.float32 if dtype == torch.bool else dtype
    rows, first, last = _flat_rows(t, x, indices)
    if rows.fake.numel() == 0:
        return x
    if not isinstance(values, Value):
        from ._helpers import constant

        values = constant(t, [], work, float(torch.tensor(values, dtype=dtype).item()), "value")
    count, width, lead = _product(x.shape[first:last]), _product(x.shape[last:]), _product(x.shape[:first])
    n = rows.fake.numel()
    picked_shape = x.shape[:first] + rows.shape + x.shape[last:]
    values = cast_to(t, values, work)
    if values.shape != picked_shape:
        values = t.emit("expand", [values], [("shape", picked_shape)], fake=t.fake_like(picked_shape, work),
                        final=False, role="values")
    source = reshaped(t, values, [lead, n, width], "source")
    middle = reshaped(t, cast_to(t, x, work), [lead, count, width], "table")
    flat = reshaped(t, rows, [n], "row_list")
    from ._helpers import constant

    line = lambda v, shape, role: reshaped(t, v, shape, role)  # noqa: E731
    # −0.0 (a `fill` computes value + i·step, which makes −0.0 a +0.0: the negation of 0).
    negative_zero = t.emit("neg", [constant(t, [], work, 0.0, "zero")], fake=t.fake_like([], work), final=False,
                           role="negative_zero")
    ones = constant(t, [n], torch.float32, 1.0, "ones")
    hits = t.emit("scatter_add", [constant(t, [count], torch.float32, 0.0, "no_hits"), flat, ones], [("axis", 0)],
                  fake=t.fake_like([count], torch.float32), final=False, role="hits")
    written = t.emit("compare_scalar", [hits], [("value", 0.0), ("op", "gt")], fake=t.fake_like([count], torch.bool),
                     final=False, role="written")
    cleared = t.emit("where", [line(written, [1, count, 1], "written_rows"), negative_zero,
                               middle], fake=middle.fake, final=False, role="cleared")
    # The last write of each row wins.
    ranked, order = t.emit_multi("topk", [flat], [flat.fake, flat.fake], ["sorted_rows", "sort_order"],
                                 [("k", n), ("largest", False)])
    true = constant(t, [1], torch.bool, 1, "true")
    if n > 1:
        bools = t.fake_like([n - 1], torch.bool)
        ends = t.emit("compare", [_slice_of(t, ranked, 0, 0, n - 1, final=False), _slice_of(t, ranked, 0, 1, n, final=False)],
                      [("op", "ne")], fake=bools, final=False, role="run_ends")
        ends = t.emit("cat", [ends, true], [("axis", 0)], fake=t.fake_like([n], torch.bool), final=False, role="run_ends")
    else:
        ends = true
    marks = t.emit("cast", [ends], [("to", torch.float32)], fake=t.fake_like([n], torch.float32), final=False, role="marks")
    wins = t.emit("scatter_add", [constant(t, [n], torch.float32, 0.0, "no_wins"), order, marks], [("axis", 0)],
                  fake=t.fake_like([n], torch.float32), final=False, role="wins")
    winner = t.emit("compare_scalar", [wins], [("value", 0.0), ("op", "gt")], fake=t.fake_like([n], torch.bool),
                    final=False, role="winner")
    held = t.emit("detach", [source], fake=source.fake, final=False, role="held")
    ghost = t.emit("sub", [held, source], fake=source.fake, final=False, role="ghost")
    ghost = t.emit("neg", [ghost], fake=source.fake, final=False, role="negative_ghost")
    sbools = t.fake_like(source.shape, torch.bool)
    above = t.emit("compare_scalar", [held], [("value", -math.inf), ("op", "gt")], fake=sbools, final=False, role="above")
    below = t.emit("compare_scalar", [held], [("value", math.inf), ("op", "lt")], fake=sbools, final=False, role="below")
    finite = t.emit("where", [above, below, constant(t, [], torch.bool, 0, "false")], fake=sbools, final=False, role="finite")
    loser = t.emit("where", [finite, ghost, negative_zero], fake=source.fake, final=False,
                   role="loser")
    src = t.emit("where", [line(winner, [1, n, 1], "winner_rows"), source, loser], fake=source.fake, final=False,
                 role="written_values")
    put = t.emit("scatter_add", [cleared, _spread_rows(t, rows, lead, width), src], [("axis", 1)], fake=middle.fake,
                 final=False, role="put")
    if dtype == torch.bool:
        put = t.emit("compare_scalar", [put], [("value", 0.0), ("op", "ne")], fake=t.fake_like(put.shape, torch.bool),
                     final=False, role="put_bool")
    return reshaped(t, put, x.shape, "index_put", final=True)


@handles(aten.histc.default)
def histc(t, x, bins=100, min=0, max=0):
    """`torch.histc` of an f32 tensor with a given range (min < max), as PyTorch's CPU kernel
    bins: an element e with min ≤ e ≤ max (not NaN) falls in bin trunc((e − min)·bins /
    (max − min)), the same f32 operations (`add_scalar`, `mul_scalar`, a `div` by the
    constant max − min, a `cast` to i64, which truncates), bin `bins` moved to the last;
    the counts are a `scatter_add` of 1 (0 for an element outside) into `bins` zeros. It
    has no gradient (as in PyTorch). A range from the data (min = max) is refused, as are
    other dtypes."""
    if x.fake.dtype != torch.float32:
        raise ExportError(f"histc of a {x.fake.dtype} tensor is not supported (f32 only)")
    low, high = torch.tensor(float(min), dtype=torch.float32), torch.tensor(float(max), dtype=torch.float32)
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        raise ExportError("histc with min ≥ max (a range taken from the data) is not supported")
    n, f32, bins = x.fake.numel(), torch.float32, int(bins)
    flat = reshaped(t, t.emit("detach", [x], fake=x.fake, final=False, role="detached"), [n], "flat")
    bools = t.fake_like([n], torch.bool)
    above = t.emit("compare_scalar", [flat], [("value", float(low)), ("op", "ge")], fake=bools, final=False, role="above")
    below = t.emit("compare_scalar", [flat], [("value", float(high)), ("op", "le")], fake=bools, final=False, role="below")
    from ._helpers import constant

    inside = t.emit("where", [above, below, constant(t, [], torch.bool, 0, "false")], fake=bools, final=False, role="inside")
    line = t.fake_like([n], f32)
    shifted = t.emit("add_scalar", [flat], [("value", -float(low))], fake=line, final=False, role="shifted")
    scaled = t.emit("mul_scalar", [shifted], [("value", float(bins))], fake=line, final=False, role="scaled")
    width = constant(t, [], f32, float(high - low), "range")  # max − min in f32, as PyTorch subtracts
    place = t.emit("div", [scaled, width], fake=line, final=False, role="place")
    place = t.emit("where", [inside, place, constant(t, [], f32, 0.0, "zero")], fake=line, final=False, role="place_inside")
    index = t.emit("cast", [place], [("to", torch.int64)], fake=t.fake_like([n], torch.int64), final=False, role="bin")
    last = t.emit("compare_scalar", [index], [("value", float(bins)), ("op", "eq")], fake=bools, final=False, role="at_max")
    index = t.emit("where", [last, constant(t, [], torch.int64, bins - 1, "last_bin"), index], fake=index.fake, final=False,
                   role="bin_index")
    counts = t.emit("cast", [inside], [("to", f32)], fake=line, final=False, role="counted")
    return t.emit("scatter_add", [constant(t, [bins], f32, 0.0, "empty_bins"), index, counts], [("axis", 0)])


@handles(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(t, x, dim, positions, value):
    """`x.index_fill(dim, index, value)` (`x[:, idx] = 2.0`, as newer torch functionalizes
    it): `index_put_overwrite` of the value at those positions along `dim`."""
    return index_put_overwrite(t, x, [None] * (dim % max(x.rank, 1)) + [positions], value)
