"""Exporting a model's training step: capture with `torch.export`, translate, write.

`export_step(model, example_inputs, ...)` captures `model(*example_inputs)` (which must
return the scalar training loss first) with `torch.export.export` in training mode,
translates its ATen graph to memplan ops (`translate.py`) and appends
`backward %loss with OPTIMIZER(...)`: memplan's autodiff then writes the gradients and the
optimizer update, so the file is the whole training step.

Capture never runs the model: `torch.export` traces it with fake tensors (shapes and
dtypes only). A model built under `virtual()` (`with torch.device("meta")`) has no weight
memory at all, which is how a 7B-parameter configuration exports on a laptop; a model
with real weights exports the same way (and `step_arguments()` can then save them).
Under `amp`, the capture is PyTorch's CUDA autocast on fake CUDA tensors (see
`_cuda_autocast` below): the casts it inserts are in the graph.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from unittest import mock

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

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
    """The forward graph of `model(*example_inputs)` in training mode, in ATen ops; under
    `amp`, with the casts CUDA autocast performs (see `_cuda_autocast`)."""
    if not isinstance(example_inputs, tuple):
        example_inputs = tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,)
    if amp is not None and amp not in AMP:
        raise ExportError(f"--amp {amp}: expected one of {', '.join(AMP)}")
    model.train()
    if amp is None:
        return _export(model, example_inputs)
    with _fake_cuda(model, example_inputs) as fake_inputs, _cuda_autocast(AMP[amp]), warnings.catch_warnings():
        # torch's retrace warns about its own use of a deprecated pytree API: not the user's.
        warnings.filterwarnings("ignore", category=FutureWarning, module="copyreg")
        return _export(model, fake_inputs).run_decompositions({})




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
    loss = Translator(program, writer, amp=amp is not None).run()
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


def _export(model, example_inputs) -> torch.export.ExportedProgram:
    try:
        return torch.export.export(model, example_inputs, strict=False)
    except torch._dynamo.exc.Unsupported as e:  # noqa: SLF001 - the only place it is raised
        raise ExportError(f"torch.export cannot capture the model: {e}") from None


# Autocast under `--amp`. PyTorch decides per op which dtype it runs in (matmuls and
# convolutions in bf16/f16, softmax, norms and losses in f32, the rest in their inputs'
# dtype), and the lists differ between devices: a model trained with autocast on a GPU
# follows CUDA's. So the step is captured as PyTorch would run it on a GPU, on a machine
# that may have none: the model's parameters, buffers and inputs are swapped for fake CUDA
# tensors (shapes and dtypes only: FakeTensorMode allocates nothing and needs no driver),
# the graph is captured without autocast (every op keeps its source line and module), then
# retraced below the autocast dispatch key with CUDA autocast switched on
# (`run_decompositions({})` decomposes nothing; it only retraces): the casts PyTorch
# inserts appear as `_to_copy` ops in the graph. `torch.autocast` itself refuses to start
# without a GPU, so the state is set with the functions it calls, and the few calls that
# would touch a driver are stubbed for the duration.


@contextlib.contextmanager
def _fake_cuda(model: torch.nn.Module, example_inputs: tuple):
    """`model`'s parameters and buffers replaced by fake CUDA tensors of the same shapes
    and dtypes (tied weights stay tied) for the duration; yields the inputs as fake CUDA
    tensors. The model is restored on exit: nothing the user gave is changed."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    fakes: dict[int, torch.Tensor] = {}

    def fake(t):
        if id(t) not in fakes:
            with mode:
                empty = torch.empty(t.shape, dtype=t.dtype, device="cuda")
            fakes[id(t)] = torch.nn.Parameter(empty, requires_grad=t.requires_grad) if isinstance(t, torch.nn.Parameter) else empty
        return fakes[id(t)]

    saved = []
    try:
        for module in model.modules():
            for table in (module._parameters, module._buffers):  # noqa: SLF001 - swapped and restored
                for key, tensor in list(table.items()):
                    if tensor is not None:
                        saved.append((table, key, tensor))
                        table[key] = fake(tensor)
        yield tuple(fake(x) if isinstance(x, torch.Tensor) else x for x in example_inputs)
    finally:
        for table, key, tensor in saved:
            table[key] = tensor


@contextlib.contextmanager
def _cuda_autocast(dtype: torch.dtype):
    """CUDA autocast to `dtype` switched on for the dispatcher, on any machine."""
    stubs = [
        mock.patch("torch.cuda.is_available", return_value=True),
        mock.patch("torch.cuda.is_bf16_supported", return_value=True),
        mock.patch("torch.cuda.get_rng_state", return_value=torch.empty(0, dtype=torch.uint8)),
        mock.patch("torch.cuda.set_rng_state"),
    ]
    was = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
    with contextlib.ExitStack() as stack:
        for stub in stubs:
            stack.enter_context(stub)
        torch.set_autocast_enabled("cuda", True)
        torch.set_autocast_dtype("cuda", dtype)
        try:
            yield
        finally:
            torch.set_autocast_enabled("cuda", was[0])
            torch.set_autocast_dtype("cuda", was[1])
