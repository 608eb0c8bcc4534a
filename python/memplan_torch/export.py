"""Exporting a model's training step: capture with `torch.export`, translate, write.

`export_step(model, example_inputs, ...)` captures `model(*example_inputs)` (which must
return the scalar training loss first) with `torch.export.export` in training mode,
translates its ATen graph to memplan ops (`translate.py`) and appends
`backward %loss with OPTIMIZER(...)`: memplan's autodiff then writes the gradients and the
optimizer update, so the file is the whole training step.

Capture never runs the model: `torch.export` traces it with fake tensors (shapes and
dtypes only). A model built under `virtual()` (`with torch.device("meta")`) has no weight
memory at all, which is how a 7B-parameter configuration exports on a laptop; a model
with real weights exports the same way (and `weights()` can then save them).
"""

from __future__ import annotations

import contextlib
import math

import torch

from .step import ExportError, StepWriter
from .translate import Translator

# Optimizers as `--optimizer` names them: memplan's op and PyTorch's defaults
# (torch.optim's) for the attributes memplan's op takes.
OPTIMIZERS = {
    "sgd": ("sgd", {"lr": 1e-3}),
    "momentum": ("sgd_momentum", {"lr": 1e-3, "momentum": 0.9}),
    "adam": ("adam", {"lr": 1e-3}),
    "adamw": ("adamw", {"lr": 1e-3, "weight_decay": 1e-2}),
}

# memplan's own defaults (docs/IR.md): an attribute equal to one is left out, as memplan
# prints it.
_MEMPLAN_DEFAULTS = {
    "sgd": {},
    "sgd_momentum": {"momentum": 0.9},
    "adam": {"lr": 1e-3},
    "adamw": {"lr": 1e-3, "weight_decay": 1e-2},
}

AMP = {"bf16": torch.bfloat16, "f16": torch.float16}


def virtual():
    """A context in which modules and tensors are created on PyTorch's `meta` device: they
    have shapes and dtypes but no memory, so any model size exports (no weights exist)."""
    return torch.device("meta")


def optimizer_attrs(optimizer: str, lr=None, weight_decay=None, momentum=None) -> tuple[str, list]:
    """memplan's optimizer op for `optimizer` and its attributes (PyTorch's defaults where
    not given)."""
    if optimizer not in OPTIMIZERS:
        raise ExportError(f"unknown optimizer {optimizer!r}; the optimizers are {', '.join(OPTIMIZERS)}")
    op, values = OPTIMIZERS[optimizer][0], dict(OPTIMIZERS[optimizer][1])
    for key, given in (("lr", lr), ("weight_decay", weight_decay), ("momentum", momentum)):
        if given is None:
            continue
        if key not in values:
            if key == "weight_decay" and given == 0:
                continue
            raise ExportError(f"memplan's {op} takes no {key} (--optimizer {optimizer})")
        values[key] = float(given)
    for key, value in values.items():
        if not math.isfinite(value) or value < 0:
            raise ExportError(f"{key}={value}: expected a finite number >= 0")
    defaults = _MEMPLAN_DEFAULTS[op]
    return op, [(k, v) for k, v in values.items() if defaults.get(k) != v]


def capture(model: torch.nn.Module, example_inputs: tuple, amp: str | None = None) -> torch.export.ExportedProgram:
    """The forward graph of `model(*example_inputs)` in training mode, in ATen ops."""
    if not isinstance(example_inputs, tuple):
        example_inputs = tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,)
    model.train()
    cast = contextlib.nullcontext()
    if amp is not None:
        if amp not in AMP:
            raise ExportError(f"--amp {amp}: expected one of {', '.join(AMP)}")
        cast = torch.autocast(device_type="cpu", dtype=AMP[amp])
    with cast:
        try:
            return torch.export.export(model, example_inputs, strict=False)
        except torch._dynamo.exc.Unsupported as e:  # noqa: SLF001 - the only place it is raised
            raise ExportError(f"torch.export cannot capture the model: {e}") from None


def export_step(
    model: torch.nn.Module,
    example_inputs: tuple,
    optimizer: str = "adamw",
    lr: float | None = None,
    weight_decay: float | None = None,
    momentum: float | None = None,
    amp: str | None = None,
    name: str | None = None,
) -> str:
    """The training step of `model` on `example_inputs` as memplan IR text (a `.step`)."""
    op, attrs = optimizer_attrs(optimizer, lr, weight_decay, momentum)
    program = capture(model, example_inputs, amp)
    writer = StepWriter(name or type(model).__name__.lower())
    loss = Translator(program, writer).run()
    writer.backward = (loss.name, op, attrs)
    writer.returns = [loss.name]
    return writer.text()


def step_arguments(model: torch.nn.Module, example_inputs: tuple, amp: str | None = None) -> dict[str, torch.Tensor]:
    """The step's arguments by their names in the exported step: parameters and buffers
    (the model's) and the example inputs, for `memplan run --weights`. The model must have
    real (not meta) tensors."""
    if not isinstance(example_inputs, tuple):
        example_inputs = tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,)
    program = capture(model, example_inputs, amp)
    translator = Translator(program, StepWriter("args"))
    translator.arguments()
    user_inputs = [s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    values = dict(model.state_dict(keep_vars=True))
    values.update({k: v for k, v in program.constants.items() if isinstance(v, torch.Tensor)})
    values.update(zip(user_inputs, example_inputs))
    out = {}
    for name, source in translator.arg_sources.items():
        tensor = values.get(source)
        if not isinstance(tensor, torch.Tensor):
            raise ExportError(f"no tensor for argument %{name} ({source})")
        if tensor.device.type == "meta":
            raise ExportError("the model has no weights (built on the meta device): build it with real tensors")
        out[name] = tensor.detach()
    return out
