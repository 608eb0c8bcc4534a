"""The dropout handler: memplan's seeded `dropout`.

Every dropout site of a step reads the step's one `dropout_seed` input and has a stream
of its own, numbered in graph order (`Translator.dropout_seed`, `next_stream`), so no two
sites share a mask. Dropout with p = 0 or in eval mode is the identity and emits nothing.
"""

from __future__ import annotations

from .registry import aten, handles


@handles(aten.dropout.default)
def dropout(t, x, p, train):
    """memplan's seeded dropout: the step's `dropout_seed` input (one i64[] scalar the
    training loop feeds fresh each step) and a stream per dropout site, in order. Its
    masks are memplan's, not PyTorch's: the same in distribution, not element for element."""
    if not train or p == 0:
        return x
    return t.emit("dropout", [x, t.dropout_seed()], [("p", float(p)), ("stream", t.next_stream())])
