"""The handler registry: which function translates which ATen overload.

A handler registers itself with `@handles(aten.NAME.OVERLOAD, ...)` in its family's module
(`ops/shape.py`, `ops/nn.py`, ...). `HANDLERS` is keyed by the overload objects themselves,
the ones `torch.export` puts in a node's `target`, and the translator looks a node's
handler up by that object: no key is a string that could match no op.

Registrations are checked when their module is imported, so a wrong one stops the package
from importing at all instead of quietly turning its op into `extern`: an overload that
the installed torch does not have (misspelt, or not in this torch), anything that is not
one overload (`aten.linear` is an op, `aten.linear.default` one overload of it), and an
overload registered twice raise `RegistrationError`, naming the overload and the handler.

That is why `aten` here is not `torch.ops.aten` itself: `torch.ops.aten.lineer` raises
AttributeError while the decorator's arguments are evaluated, before `handles` is called,
in a message that names no handler. Here `aten.NAME.OVERLOAD` is `torch.ops.aten`'s own
overload object where it exists, and otherwise a `MissingOverload` that `handles`
rejects. Use this `aten` in registrations only; anywhere else use `torch.ops.aten`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch._ops import OpOverload

HANDLERS: dict[OpOverload, Callable] = {}


class RegistrationError(Exception):
    """A handler registered for what is not an ATen overload of the installed torch, or
    for an overload that has a handler already."""


@dataclass(frozen=True)
class MissingOverload:
    """`aten.NAME.OVERLOAD` where the installed torch has no such overload."""

    name: str
    reason: str  # torch's own words


class _Op:
    """`aten.NAME`: its attributes are NAME's overloads."""

    def __init__(self, name: str):
        self.name = name

    def __getattr__(self, overload: str):
        if overload.startswith("__"):
            raise AttributeError(overload)
        try:
            return getattr(getattr(torch.ops.aten, self.name), overload)
        except AttributeError as error:
            return MissingOverload(f"aten.{self.name}.{overload}", str(error))

    def __repr__(self) -> str:
        return f"aten.{self.name}"


class _Aten:
    """`aten`: its attributes are ATen's ops."""

    def __getattr__(self, name: str) -> _Op:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Op(name)


aten = _Aten()


def handles(*overloads):
    """A decorator: the function is the handler of each of `overloads` (`aten.NAME.OVERLOAD`).
    Checks them all before registering any, so a rejected registration changes nothing."""

    def register(handler):
        who = f"handler {handler.__module__}.{handler.__qualname__}"
        if not overloads:
            raise RegistrationError(f"{who} registers no overload")
        for i, overload in enumerate(overloads):
            if isinstance(overload, MissingOverload):
                raise RegistrationError(
                    f"{who} registers {overload.name}, which torch {torch.__version__} does not have ({overload.reason})")
            if not isinstance(overload, OpOverload):
                raise RegistrationError(
                    f"{who} registers {overload!r}, which is not one ATen overload (write aten.NAME.OVERLOAD, e.g. aten.relu.default)")
            if overload in HANDLERS:
                owner = HANDLERS[overload]
                raise RegistrationError(
                    f"{who} registers {overload}, which handler {owner.__module__}.{owner.__qualname__} handles already")
            if overload in overloads[:i]:
                raise RegistrationError(f"{who} registers {overload} twice")
        for overload in overloads:
            HANDLERS[overload] = handler
        return handler

    return register
