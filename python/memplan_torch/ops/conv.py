"""Convolution handlers: `conv2d`, `conv1d`, `conv3d` and `conv_transpose2d`, and `im2col`/`col2im`
(`F.unfold`/`F.fold`) as the window slices they copy and add.

Attributes are written as memplan prints them, defaults left out. A bias is a separate
`add` of the bias viewed as [C, 1, 1], as memplan's convolutions take none.
"""

from __future__ import annotations

from ..step import ExportError
from ..value import Value
from ._helpers import reshaped
from .registry import aten, handles


def _bias_per_channel(t, y: Value, bias: Value | None, spatial: int) -> Value:
    if bias is None:
        return y
    shaped_fake = t.fake_like([bias.shape[0]] + [1] * spatial, bias.fake.dtype)
    shaped = t.emit("reshape", [bias], [("shape", [bias.shape[0]] + [1] * spatial)], fake=shaped_fake, final=False,
                    role="bias")
    return t.emit("add", [y, shaped])


def _conv_attrs(stride, padding, dilation, groups, output_padding=None) -> list:
    """conv attributes as memplan writes them: the defaults left out."""
    if isinstance(padding, str):
        raise ExportError(f"convolution with padding={padding!r} is not supported (give the numbers)")
    pair = lambda v: list(v) * (2 // len(v)) if len(v) else [0, 0]  # noqa: E731 - [k] means [k, k]
    attrs = [("stride", pair(stride)), ("padding", pair(padding))]
    if output_padding is not None and pair(output_padding) != [0, 0]:
        attrs.append(("output_padding", pair(output_padding)))
    if pair(dilation) != [1, 1]:
        attrs.append(("dilation", pair(dilation)))
    if groups != 1:
        attrs.append(("groups", int(groups)))
    return attrs


@handles(aten.conv2d.default)
def conv2d(t, x, w, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    y = t.emit("conv2d", [x, w], _conv_attrs(stride, padding, dilation, groups), final=bias is None, role="conv")
    return _bias_per_channel(t, y, bias, 2)


@handles(aten.conv_transpose2d.input)
def conv_transpose2d(t, x, w, bias=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0), groups=1,
                     dilation=(1, 1)):
    attrs = _conv_attrs(stride, padding, dilation, groups, output_padding)
    y = t.emit("conv_transpose2d", [x, w], attrs, final=bias is None, role="conv_transpose")
    return _bias_per_channel(t, y, bias, 2)


@handles(aten.conv3d.default, aten.conv3d.padding)
def conv3d(t, x, w, bias=None, stride=(1, 1, 1), padding=(0, 0, 0), dilation=(1, 1, 1), groups=1):
    """memplan's `conv3d` (x [N,C,D,H,W]; an unbatched [C,D,H,W] input is refused), the bias
    an `add` of it viewed as [K,1,1,1]. padding='same' (odd dilated windows: equal padding
    on both sides) and 'valid' are written as numbers."""
    if x.rank != 5:
        raise ExportError(f"conv3d of a rank-{x.rank} input (memplan's takes [N,C,D,H,W])")
    triple = lambda v: [int(e) for e in v] * (3 // len(v)) if isinstance(v, (list, tuple)) else [int(v)] * 3  # noqa: E731
    stride, dilation = triple(stride), triple(dilation)
    if padding == "valid":
        padding = [0, 0, 0]
    elif padding == "same":
        extents = [d * (k - 1) for d, k in zip(dilation, w.shape[2:])]
        if any(e % 2 for e in extents):
            raise ExportError("conv3d with padding='same' pads one side more (an even window): not supported")
        padding = [e // 2 for e in extents]
    elif isinstance(padding, str):
        raise ExportError(f"conv3d with padding={padding!r} is not supported")
    else:
        padding = triple(padding)
    attrs = [("stride", stride), ("padding", padding)]
    if dilation != [1, 1, 1]:
        attrs.append(("dilation", dilation))
    if groups != 1:
        attrs.append(("groups", int(groups)))
    y = t.emit("conv3d", [x, w], attrs, final=bias is None, role="conv")
    return _bias_per_channel(t, y, bias, 3)


@handles(aten.conv1d.default, aten.conv1d.padding)
def conv1d(t, x, w, bias=None, stride=(1,), padding=(0,), dilation=(1,), groups=1):
    """`conv1d` as the `conv2d` it is of a height-1 image: x [N,C,L] viewed as [N,C,1,L],
    the weight [O,C/g,K] as [O,C/g,1,K] (views: the gradients flow back through them),
    the result viewed back as [N,O,L']. The same sums in the same order as PyTorch's."""
    if x.rank != 3:
        raise ExportError(f"conv1d of a rank-{x.rank} input (memplan's takes [N,C,L])")
    one = lambda v: int(v[0]) if isinstance(v, (list, tuple)) else int(v)  # noqa: E731
    k, s, d = w.shape[2], one(stride), one(dilation)
    if padding == "valid":
        p = 0
    elif padding == "same":
        if d * (k - 1) % 2:
            raise ExportError("conv1d with padding='same' pads one side more (an even window): not supported")
        p = d * (k - 1) // 2
    elif isinstance(padding, str):
        raise ExportError(f"conv1d with padding={padding!r} is not supported")
    else:
        p = one(padding)
    n, o, length = x.shape[0], w.shape[0], int(t.out_fake().shape[2])
    image = reshaped(t, x, [n, x.shape[1], 1, x.shape[2]], "image")
    kernel = reshaped(t, w, [o, w.shape[1], 1, k], "kernel")
    flat = t.fake_like([n, o, 1, length], x.fake.dtype)
    y = t.emit("conv2d", [image, kernel], _conv_attrs([1, s], [0, p], [1, d], groups), fake=flat, final=False, role="conv")
    y = reshaped(t, y, [n, o, length], "conv1d", final=bias is None)
    return _bias_per_channel(t, y, bias, 1)


def _windows(x_shape, kernel, dilation, padding, stride, grid=None):
    """(kh, kw), (dh, dw), (ph, pw), (sh, sw) and the grid of window positions (oh, ow)."""
    pair = lambda v: [int(v[0]), int(v[-1])]  # noqa: E731
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = pair(kernel), pair(dilation), pair(padding), pair(stride)
    h, w = x_shape
    if grid is None:
        grid = [(h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1]
    return (kh, kw), (dh, dw), (ph, pw), (sh, sw), grid


def _window(t, x: Value, i: int, j: int, dilation, stride, grid) -> Value:
    """x[..., i·dh :: sh][..., j·dw :: sw], oh × ow positions: the pixels kernel tap (i, j)
    reads at each window (a strided view)."""
    from .shape import _slice_of

    (dh, dw), (sh, sw), (oh, ow) = dilation, stride, grid
    rows = _slice_of(t, x, 2, i * dh, i * dh + sh * (oh - 1) + 1, sh, final=False)
    return _slice_of(t, rows, 3, j * dw, j * dw + sw * (ow - 1) + 1, sw, final=False)


@handles(aten.im2col.default)
def im2col(t, x, kernel_size, dilation, padding, stride):
    """`F.unfold` (im2col): [N, C, H, W] to [N, C·kh·kw, L], each kernel tap's pixels at every
    window a strided slice of x (zero-padded first: `pad`, as PyTorch pads), viewed as
    [N, C, 1, oh, ow] and concatenated along that axis in im2col's order (c, i, j): copies
    of x's values, exactly, into one buffer of the output's size (PyTorch's own im2col
    copies likewise). Its gradient is the slices' and the cat's: each tap's gradient summed
    into x (col2im's sums)."""
    if x.rank not in (3, 4):
        raise ExportError(f"im2col of a rank-{x.rank} tensor")
    batched = x.rank == 4
    if not batched:
        x = reshaped(t, x, [1] + x.shape, "batched")
    n, c = x.shape[:2]
    (kh, kw), dilation, (ph, pw), stride, grid = _windows(x.shape[2:], kernel_size, dilation, padding, stride)
    if ph or pw:
        from .shape import pad

        x = pad(t, x, [pw, pw, ph, ph])
    taps = [reshaped(t, _window(t, x, i, j, dilation, stride, grid), [n, c, 1] + grid, f"tap{i}_{j}")
            for i in range(kh) for j in range(kw)]
    fake = t.fake_like([n, c, kh * kw] + grid, x.fake.dtype)
    if len(taps) == 1:
        columns = t.emit("contiguous", taps, fake=fake, final=False, role="columns")
    else:
        columns = t.emit("cat", taps, [("axis", 2)], fake=fake, final=False, role="columns")
    return reshaped(t, columns, t.out_fake().shape, "im2col", final=True)


@handles(aten.col2im.default)
def col2im(t, cols, output_size, kernel_size, dilation, padding, stride):
    """`F.fold` (col2im): [N, C·kh·kw, L] summed into [N, C, H, W]: zeros of the padded image,
    then for each kernel tap (i, j) in order its [N, C, oh, ow] columns added into the
    strided slice of the image it came from (`slice`, `add`, `slice_scatter`), then the
    padding cut off (a view). Each output pixel's sum is 0 + its taps in PyTorch's order
    (c, i, j), so the same roundings."""
    if cols.rank not in (2, 3):
        raise ExportError(f"col2im of a rank-{cols.rank} tensor")
    batched = cols.rank == 3
    if not batched:
        cols = reshaped(t, cols, [1] + cols.shape, "batched")
    h, w = [int(s) for s in output_size]
    (kh, kw), dilation, (ph, pw), stride, grid = _windows([h, w], kernel_size, dilation, padding, stride)
    n, c = cols.shape[0], cols.shape[1] // (kh * kw)
    dtype = cols.fake.dtype
    taps = reshaped(t, cols, [n, c, kh * kw] + grid, "taps")
    image_shape = [n, c, h + 2 * ph, w + 2 * pw]
    image = t.emit("fill", [], [("shape", image_shape), ("dtype", dtype), ("value", 0.0)],
                   fake=t.fake_like(image_shape, dtype), final=False, role="image")
    from .shape import _slice_of

    (dh, dw), (sh, sw), (oh, ow) = dilation, stride, grid
    for i in range(kh):
        for j in range(kw):
            tap = t.emit("select", [taps], [("axis", 2), ("index", i * kw + j)], fake=t.fake_like([n, c] + grid, dtype),
                         final=False, role=f"tap{i}_{j}")
            band = _slice_of(t, image, 2, i * dh, i * dh + sh * (oh - 1) + 1, sh, final=False)
            part = _slice_of(t, band, 3, j * dw, j * dw + sw * (ow - 1) + 1, sw, final=False)
            added = t.emit("add", [part, tap], fake=t.fake_like(part.shape, dtype), final=False, role=f"sum{i}_{j}")
            band = _scattered(t, band, added, 3, j * dw, sw, f"band{i}_{j}")
            image = _scattered(t, image, band, 2, i * dh, sh, f"image{i}_{j}")
    cropped = _slice_of(t, image, 2, ph, ph + h, final=False)
    cropped = _slice_of(t, cropped, 3, pw, pw + w, final=False)
    return reshaped(t, cropped, t.out_fake().shape, "col2im", final=True)


def _scattered(t, x: Value, part: Value, axis: int, start: int, step: int, role: str) -> Value:
    """x with `part` written over x[start :: step] along `axis` (`part` itself where that
    is all of x)."""
    end = start + step * (part.shape[axis] - 1) + 1
    if part.shape == x.shape:
        return part
    attrs = [("axis", axis), ("start", start), ("end", end)] + ([("step", step)] if step != 1 else [])
    return t.emit("slice_scatter", [x, part], attrs, fake=t.fake_like(x.shape, x.fake.dtype), final=False, role=role)
