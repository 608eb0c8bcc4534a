"""Writing a memplan step (the `.step` text of docs/IR.md) from Python.

`StepWriter` collects arguments, ops (each output with its type, so memplan checks every
shape the exporter claims), the updates of state (buffers the forward rewrites), a
`backward` statement and the returned values, and prints
them in memplan's canonical layout: two-space indent, one argument per line with a
trailing comma, every output typed, attributes as `name=value`. Names are made unique
here: a name already taken gets `.1`, `.2`, ... appended.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import torch

# torch dtype -> memplan dtype.
DTYPES = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int32: "i32",
    torch.int64: "i64",
    torch.bool: "bool",
}

_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.]")


class ExportError(Exception):
    """A model or an op memplan cannot express; the message says which and why."""


class ExportWarning(UserWarning):
    """Something of the model the step does not reproduce exactly (the message says what,
    where, and what the step does instead)."""


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return DTYPES[dtype]
    except KeyError:
        raise ExportError(f"dtype {dtype} has no memplan equivalent (memplan has {', '.join(DTYPES.values())})") from None


def type_text(dtype: torch.dtype, shape) -> str:
    """`f32[64,256]` for a float32 tensor of shape (64, 256)."""
    from .datadep import static_size

    return f"{dtype_name(dtype)}[{','.join(str(static_size(d)) for d in shape)}]"


def float_text(x: float) -> str:
    """A float as memplan prints it: shortest round trip, `1e-8` not `1e-08`, `inf`."""
    if math.isnan(x):
        raise ExportError("NaN cannot be written in memplan's IR")
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    text = repr(float(x))
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def attr_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return float_text(value)
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(str(int(v)) for v in value) + "]"
    raise ExportError(f"cannot write attribute value {value!r}")


def clean_name(name: str) -> str:
    """`name` with characters memplan's names do not allow replaced by `_`."""
    cleaned = _NAME_CHARS.sub("_", name).strip(".")
    return cleaned or "v"


@dataclass
class Op:
    outputs: list[tuple[str, str]]  # (name, type)
    op: str
    inputs: list[str]
    attrs: list[tuple[str, object]]
    loc: tuple[str, int, str | None] | None  # (file, line, module path)
    region: str | None = None  # `checkpoint(N)` or `custom(N)`: the user's region that ran it


@dataclass
class Block:
    """The backward the user wrote for custom region N (a `torch.autograd.Function`):
    memplan's `custom_backward(N)` block (docs/IR.md)."""
    grads_of: list[tuple[str, str, str]] = field(default_factory=list)  # (name, type, region output)
    ops: list[Op] = field(default_factory=list)
    returns: list[tuple[str, str]] = field(default_factory=list)  # (value, its gradient)


@dataclass
class StepWriter:
    name: str
    args: list[tuple[str, str, str]] = field(default_factory=list)  # (name, type, role)
    ops: list[Op] = field(default_factory=list)
    backward: tuple[str, str, list[tuple[str, object]]] | None = None
    updates: list[tuple[str, str]] = field(default_factory=list)  # (state argument, new value)
    returns: list[str] = field(default_factory=list)
    # Custom regions' backward blocks, by region number; `block`: the one `op` writes into
    # (None: the forward).
    blocks: dict[int, Block] = field(default_factory=dict)
    block: int | None = None
    _taken: set[str] = field(default_factory=set)

    def unique(self, name: str) -> str:
        """`name` (cleaned), or with `.1`, `.2`, ... appended if it is taken; reserves it."""
        base = clean_name(name)
        candidate, k = base, 0
        while candidate in self._taken:
            k += 1
            candidate = f"{base}.{k}"
        self._taken.add(candidate)
        return candidate

    def arg(self, name: str, ty: str, role: str) -> str:
        name = self.unique(name)
        self.args.append((name, ty, role))
        return name

    def op(self, names: list[str], types: list[str], op: str, inputs: list[str], attrs=(), loc=None,
           region=None) -> list[str]:
        """Appends `names... = op(inputs..., attrs...)` (marked `region`, `checkpoint(N)`
        or `custom(N)`, when the user's region N ran it) to the forward, or to the backward
        block being written (`block`); returns the (unique) output names."""
        outs = [self.unique(n) for n in names]
        new = Op(list(zip(outs, types)), op, list(inputs), list(attrs), loc, region if self.block is None else None)
        (self.ops if self.block is None else self.blocks[self.block].ops).append(new)
        return outs

    def block_reads(self) -> set[str]:
        """Every name the backward blocks read (forward values they keep)."""
        return {name for b in self.blocks.values() for op in b.ops for name in op.inputs} | \
            {g for b in self.blocks.values() for _, g in b.returns}

    def remove(self, op: Op):
        """Removes `op` (which nothing reads) and frees its output names."""
        self.ops.remove(op)
        self._taken.difference_update(name for name, _ in op.outputs)

    def text(self) -> str:
        lines = [f"step @{clean_name(self.name)}(" if self.args else f"step @{clean_name(self.name)}() {{"]
        if self.args:
            lines += [f"  %{n}: {t} {r}," for n, t, r in self.args]
            lines.append(") {")
        lines += [self._op_line(op, "  ") for op in self.ops]
        types = {n: t for n, t, _ in self.args} | {n: t for op in self.ops for n, t in op.outputs}
        regions = sorted({int(op.region[7:-1]) for op in self.ops if op.region and op.region.startswith("custom(")})
        for n in sorted(set(regions) | set(self.blocks)):
            lines += self._block_lines(n, self.blocks.get(n, Block()), types)
        lines += [f"  update %{target} <- %{value}" for target, value in self.updates]
        if self.backward:
            loss, optimizer, attrs = self.backward
            rendered = ", ".join(f"{k}={attr_text(v)}" for k, v in attrs)
            lines.append(f"  backward %{loss} with {optimizer}({rendered})")
        if self.returns:
            lines.append("  return " + ", ".join(f"%{v}" for v in self.returns))
        lines.append("}")
        return "\n".join(lines) + "\n"

    @staticmethod
    def _op_line(op: Op, indent: str) -> str:
        outs = ", ".join(f"%{n}: {t}" for n, t in op.outputs)
        operands = [f"%{v}" for v in op.inputs] + [f"{k}={attr_text(v)}" for k, v in op.attrs]
        loc = ""
        if op.loc:
            file, line, module = op.loc
            loc = f' loc("{file}":{line}' + (f', "{module}")' if module is not None else ")")
        mark = f" {op.region}" if op.region is not None else ""
        return f"{indent}{outs} = {op.op}({', '.join(operands)}){mark}{loc}"

    @staticmethod
    def _block_lines(n: int, block: Block, types: dict[str, str]) -> list[str]:
        """`custom_backward(n)(...) -> (...) { ... }`: each forward value the block reads is
        an argument of its own name bound to it, each output gradient one bound to `grad`."""
        defined = {name for name, _, _ in block.grads_of} | {name for op in block.ops for name, _ in op.outputs}
        kept: list[str] = []
        for name in [v for op in block.ops for v in op.inputs] + [g for _, g in block.returns]:
            if name not in defined and name not in kept:
                kept.append(name)
        binds = [f"%{v}: {types[v]} = %{v}" for v in kept] + [f"%{g}: {t} = grad %{y}" for g, t, y in block.grads_of]
        grads = ", ".join(f"%{x}" for x, _ in block.returns)
        lines = [f"  custom_backward({n})({', '.join(binds)}) -> ({grads}) {{"]
        lines += [StepWriter._op_line(op, "    ") for op in block.ops]
        if block.returns:
            lines.append("    return " + ", ".join(f"%{g}" for _, g in block.returns))
        lines.append("  }")
        return lines
