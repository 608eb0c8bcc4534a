"""Convolution handlers: `conv2d` and `conv_transpose2d`.

Attributes are written as memplan prints them, defaults left out. A bias is a separate
`add` of the bias viewed as [C, 1, 1], as memplan's convolutions take none.
"""

from __future__ import annotations

from ..step import ExportError
from ..value import Value
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
