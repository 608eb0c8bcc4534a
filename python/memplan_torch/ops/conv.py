"""Convolution handlers: `conv2d`, `conv1d` and `conv_transpose2d`.

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
