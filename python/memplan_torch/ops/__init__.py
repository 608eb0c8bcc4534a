"""The handlers: how each ATen op of an exported graph becomes memplan ops.

One module per family, named as memplan's kernel families are (src/exec/kernels/):
`elementwise`, `shape`, `linalg`, `attention`, `nn`, `conv`, `resample`, `dropout`; and
`recurrent`, whose layers (LSTM, GRU, RNN) are unrolled into ops of those families.
In-place ops never reach a handler: the capture functionalizes them first (export.py), so
a write into a slice arrives as `slice_scatter`, a buffer's update as an output of the
graph (translate.py writes it back with `update`).
Each registers its handlers with `@handles(aten.NAME.OVERLOAD, ...)` (`registry.py`), so
importing this package fills `HANDLERS`, keyed by the ATen overload objects a node's
`target` holds, and checks every registration (an overload the installed torch lacks, or
one registered twice, stops the import).

A handler is called as `handler(t, *args, **kwargs)`: `t` the `Translator` (translate.py),
the node's arguments with graph values as `Value`s. It writes memplan ops only through
`t.emit` and `t.emit_multi`, naming the op by a string literal (or a factory's parameter,
as `unary(op)`, given literals), so tests/test_ops.py can read every op a handler may write
and check it against memplan's op table. It returns the node's value(s). A form of its op
memplan cannot express it refuses by raising `ExportError` before writing anything, and
the node becomes `extern`.
"""

from . import attention, conv, dropout, elementwise, linalg, nn, recurrent, resample, shape  # noqa: F401 - each registers its handlers
from .registry import HANDLERS, RegistrationError, aten, handles

__all__ = ["HANDLERS", "RegistrationError", "aten", "handles"]
