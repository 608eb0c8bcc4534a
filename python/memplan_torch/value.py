"""A memplan value as the translator and its handlers hold it, and memplan's layout of it.

Every value the translator writes is a `Value`: its name in the step and PyTorch's fake
tensor for it (dtype, shape, strides). Views stay views in the step, and memplan decides
which reshapes are views by its own layout of a value, which can differ from PyTorch's
strides for it (a `clone` keeps a permuted layout, memplan's `contiguous` does not). So each
value also carries its layout as memplan sees it (`Value.shadow`), a meta tensor: asking it
(`viewable`) answers what memplan will accept. This module is the one place that layout is
computed (`shadow_after`, for each op the translator writes).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .step import type_text


@dataclass(frozen=True)
class Value:
    """A memplan value and PyTorch's fake tensor for it (dtype, shape, strides)."""

    name: str
    fake: torch.Tensor
    # The value's layout as memplan sees it, on the meta device: a dense tensor for a value
    # that owns its bytes, the same view ops applied to it for a view. memplan's views
    # follow PyTorch's own rules (its reshape is a view where `Tensor.view` is one), so
    # asking this tensor answers what memplan will accept; PyTorch's own strides for the
    # value may differ (a `clone` keeps a permuted layout, memplan's `contiguous` does not).
    shadow: torch.Tensor | None = None

    @property
    def type(self) -> str:
        return type_text(self.fake.dtype, self.fake.shape)

    @property
    def shape(self) -> list[int]:
        return [int(d) for d in self.fake.shape]

    @property
    def rank(self) -> int:
        return len(self.fake.shape)


def dense(fake: torch.Tensor) -> torch.Tensor:
    """The layout of a value that owns its bytes: dense, row-major, on the meta device."""
    return torch.empty(fake.shape, dtype=fake.dtype, device="meta")


def shadow(value: Value) -> torch.Tensor:
    """memplan's layout of `value` (see `Value.shadow`)."""
    return value.shadow if value.shadow is not None else dense(value.fake)


def shadow_after(op: str, inputs: list[Value], attrs: dict, fake) -> torch.Tensor:
    """memplan's layout of `op`'s output (see `Value.shadow`)."""
    if op == "reshape":
        return shadow(inputs[0]).view(list(fake.shape))
    if op == "transpose":
        return shadow(inputs[0]).permute(list(attrs["perm"]))
    if op == "expand":
        return shadow(inputs[0]).expand(list(fake.shape))
    if op == "slice":
        index = (slice(None),) * attrs["axis"] + (slice(attrs["start"], attrs["end"], attrs.get("step", 1)),)
        return shadow(inputs[0])[index]
    if op == "select":
        return shadow(inputs[0]).select(attrs["axis"], attrs["index"])
    if op == "detach":
        return shadow(inputs[0])
    return dense(fake)


def viewable(x: Value, shape) -> bool:
    """Whether memplan's `reshape` of `x` to `shape` is a view (else it needs a copy)."""
    try:
        shadow(x).view(list(shape))
        return True
    except RuntimeError:
        return False
