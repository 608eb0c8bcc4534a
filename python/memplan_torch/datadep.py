"""Data-dependent Python: one screen of error at the user's line, or a bounded size.

A training step memplan plans has its ops and shapes fixed before it runs. Python that
decides on a tensor's values (`if h.sum() > 0:`, `.item()`, `.tolist()`, `x[x > 0]`,
`nonzero`) does not fit, and torch.export says so with a page of its internals, or accepts
it with an *unbacked* symbol (`u0`: a size or scalar known only when the step runs) that
the translator then cannot write. This module turns both into a clear `ExportError`: the
user's `file:line` and its source text, what the construct is, and what to do instead.

A size torch.export accepts as unbacked (a boolean mask's rows, `nonzero`'s count) with a
finite upper bound is planned with that bound (`static_size`), with a warning naming the
bound and the op that made the size: memplan plans the most memory it can take.
"""

from __future__ import annotations

import linecache
import os
import re
import traceback
import warnings

import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from .step import ExportError, ExportWarning

# A frame of a node's stack trace as torch.export records it.
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ')
_MEMPLAN_DIR = os.path.dirname(os.path.abspath(__file__))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def is_users_file(filename: str) -> bool:
    """Whether a frame in `filename` is the user's: not torch's, not memplan's, not
    generated code (`<eval_with_key>`). torchvision, timm and transformers code counts as
    the user's."""
    path = os.path.abspath(filename)
    return not (filename.startswith("<") or path.startswith(_TORCH_DIR + os.sep) or path.startswith(_MEMPLAN_DIR + os.sep))

# What the ops that read data into Python or make data-dependent sizes are, in the user's
# words, and what to write instead.
_ITEM = ("`.item()` (or `.tolist()`, `float(t)`, `int(t)`), which reads a tensor's value into Python",
         "keep the value a tensor (`t` rather than `t.item()`), or compute it outside forward and pass it in")
_SIZE_HINT = ("give it a static shape: torch.where(mask, x, 0) or masked_fill instead of x[mask], or state a bound "
              "with torch._check(n <= N)")
_ORIGINS = {
    "_local_scalar_dense": _ITEM,
    "item": _ITEM,
    "index": ("indexing with a boolean mask (`x[mask]`), whose size depends on a tensor's values", _SIZE_HINT),
    "nonzero": ("`nonzero` (or `x[mask]` with a boolean mask), whose size depends on a tensor's values", _SIZE_HINT),
    "masked_select": ("`masked_select` (or `x[mask]`), whose size depends on a tensor's values", _SIZE_HINT),
    "unique": ("`unique`, whose size depends on a tensor's values", _SIZE_HINT),
}
_BRANCH_HINT = ("compute both sides and choose with torch.where(cond, a, b), state what you know with "
                "torch._check(...), or move the decision out of forward")


def _chain(exc: BaseException):
    """`exc` and the exceptions it was raised from or during, outermost first."""
    seen = []
    while exc is not None and all(exc is not s for s in seen):
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _is_data_dependent(exc: BaseException) -> bool:
    return any(isinstance(e, GuardOnDataDependentSymNode) or "data-dependent" in str(e) or "data dependent" in str(e) for e in _chain(exc))


def _user_frame(exc: BaseException) -> tuple[str, int, str] | None:
    """The innermost frame outside torch and memplan in `exc`'s tracebacks (its own and
    those it was raised from): file name, line, the line's source text."""
    for e in _chain(exc):
        for frame in reversed(traceback.extract_tb(e.__traceback__)):
            if not is_users_file(frame.filename):
                continue
            text = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
            return os.path.basename(frame.filename), frame.lineno, text
    return None


def export_failure(exc: Exception) -> ExportError:
    """The error for an exception torch.export raised while tracing the user's forward."""
    where = _user_frame(exc)
    at = f"{where[0]}:{where[1]}: " if where else ""
    code = f"`{where[2]}` " if where and where[2] else ""
    if _is_data_dependent(exc):
        return ExportError(f"{at}{code}depends on a tensor's values (data-dependent Python), which a planned "
                           f"training step cannot: its ops and shapes are fixed before it runs\n"
                           f"  hint: {_BRANCH_HINT}")
    first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
    return ExportError(f"{at}torch.export cannot capture the model: {first}\n"
                       "  hint: MEMPLAN_TORCH_DETAILS=1 shows torch's own report; torch.export.draft_export(model, "
                       "inputs) lists every problem it meets")


def _symbols(exc: BaseException) -> set[str]:
    return set(re.findall(r"\b(?:u|zuf|zf|f)\d+\b", " ".join(str(e) for e in _chain(exc))))


def origin_of(program, symbols: set[str]):
    """The node that made one of the unbacked `symbols` (its `unbacked_bindings`), or None."""
    for node in program.graph.nodes:
        bindings = node.meta.get("unbacked_bindings") or {}
        if any(str(symbol) in symbols for symbol in bindings):
            return node
    return None


def _what(node) -> tuple[str, str]:
    name = getattr(getattr(node.target, "_schema", None), "name", str(node.target)).split("::")[-1]
    return _ORIGINS.get(name, (f"`{name}`, whose result depends on a tensor's values", _SIZE_HINT))


def translation_failure(program, node, exc: BaseException, loc_of) -> ExportError:
    """The error for a data-dependent value the translator met at `node` (`loc_of(node)`
    gives a node's (file, line, module) or None)."""
    origin = origin_of(program, _symbols(exc))
    here = loc_of(node)
    at = f"{here[0]}:{here[1]}: " if here else ""
    code = code_of(node)
    code = f"`{code}` " if code else ""
    if origin is None:
        return ExportError(f"{at}{code}uses a value that depends on a tensor's data, which a planned training step "
                           f"cannot: its ops and shapes are fixed before it runs\n  hint: {_BRANCH_HINT}")
    what, hint = _what(origin)
    there = loc_of(origin)
    made = f" (at {there[0]}:{there[1]}: `{code_of(origin)}`)" if there and there[:2] != (here or (None, None))[:2] else ""
    return ExportError(f"{at}{code}uses {what}{made}: memplan's training steps have static shapes and "
                       f"scalars\n  hint: {hint}")


def node_frame(node) -> tuple[str, int] | None:
    """The innermost frame of `node`'s stack trace that is the user's: (path, line)."""
    frames = [(file, int(line)) for file, line in _FRAME.findall(node.meta.get("stack_trace") or "") if is_users_file(file)]
    return frames[-1] if frames else None


def code_of(node) -> str:
    """The source text of `node`'s user's frame, if its file can be read."""
    frame = node_frame(node)
    return linecache.getline(*frame).strip() if frame else ""


# The unbacked sizes planned with their upper bounds since `bounded()` was last read:
# symbol -> bound.
_BOUNDED: dict[str, int] = {}


def static_size(dim) -> int:
    """`dim` as an int: itself, or an unbacked size's finite upper bound (recorded for
    `bounded()`); an unbounded one raises `UnboundedSize`."""
    if not isinstance(dim, torch.SymInt):
        return int(dim)
    node = dim.node
    expr = node.expr
    if getattr(expr, "is_number", False):
        return int(expr)
    try:
        upper = node.shape_env.bound_sympy(expr).upper
    except Exception:  # noqa: BLE001 - no bound known: the same as an unbounded one
        upper = None
    if upper is None or not getattr(upper, "is_finite", False):
        raise UnboundedSize(str(expr))
    _BOUNDED[str(expr)] = int(upper)
    return int(upper)


def bound_text(shape) -> str:
    """`u0 <= 64` for a shape with unbacked sizes (each with its upper bound), `""` for a
    static one: what memplan's `extern` states in its `bound` attribute."""
    parts = []
    for dim in shape:
        if isinstance(dim, torch.SymInt) and not getattr(dim.node.expr, "is_number", False):
            parts.append(f"{dim.node.expr} <= {static_size(dim)}")
    return ", ".join(dict.fromkeys(parts))


def bounded() -> dict[str, int]:
    """The sizes `static_size` bounded since the last call (symbol -> bound), cleared."""
    out = dict(_BOUNDED)
    _BOUNDED.clear()
    return out


def warn_bounded(program, node, sizes: dict[str, int], loc_of) -> None:
    """Warns that `node`'s sizes `sizes` are planned with their upper bounds, naming the
    op that made each (its line and source text)."""
    for symbol, bound in sizes.items():
        origin = origin_of(program, {symbol}) or node
        there = loc_of(origin)
        at = f"{there[0]}:{there[1]}: " if there else ""
        code = f"`{code_of(origin)}` " if code_of(origin) else ""
        warnings.warn(f"{at}{code}has a size that depends on a tensor's values ({symbol}): planned with its upper "
                      f"bound {bound}, the most memory the step can take; `memplan run` cannot run it",
                      ExportWarning, stacklevel=2)


class UnboundedSize(Exception):
    """A data-dependent size without a finite upper bound (the message names its symbol)."""
