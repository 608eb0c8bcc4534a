"""memplan_torch: export a PyTorch model's whole training step to memplan's IR.

    import memplan_torch
    text = memplan_torch.export_step(model, (x, y), optimizer="adamw", lr=3e-4)

`model(*example_inputs)` must return the scalar training loss (first, if it returns more).
The step is captured with fake tensors (nothing runs); build big models under
`memplan_torch.virtual()` so that no weight memory exists at all. The command line is
`python -m memplan_torch export FILE.py:FUNC -o OUT.step` (see `--help`).
"""

import warnings

# torch warns on import when NumPy is missing ("Failed to initialize NumPy"); memplan_torch
# never uses NumPy, so the warning is noise on every command.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

from .checkpointing import apply_checkpointing  # noqa: E402
from .export import capture, export_step, optimizer_attrs, step_arguments, virtual  # noqa: E402
from .step import ExportError  # noqa: E402

__all__ = ["ExportError", "apply_checkpointing", "capture", "export_step", "optimizer_attrs", "step_arguments", "virtual"]
