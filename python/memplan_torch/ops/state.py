"""The handler of in-place updates of buffers, which the step does not model.

torch.export keeps a buffer's in-place update in the graph (BatchNorm's
`num_batches_tracked += 1`). memplan's `batch_norm` keeps no running statistics either,
so the update is dropped. An in-place add to anything but a buffer is left to `extern`.
"""

from __future__ import annotations

from ..step import ExportError
from .registry import aten, handles


@handles(aten.add_.Tensor)
def buffer_update(t, buffer, *_args, **_kwargs):
    """An in-place update of a buffer (BatchNorm's `num_batches_tracked += 1`): the step
    does not model it, as memplan's `batch_norm` keeps no running statistics either."""
    if t.roles.get(buffer.name) != "state":
        raise ExportError(f"in-place {t.node.target} on a value that is not a buffer ({buffer.name})")
    return buffer
