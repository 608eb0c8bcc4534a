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

The step is the user's, or an error, never a silently different one (`_regions`,
`_writes`, `_watching_functions` below): in-place writes are functionalized with
PyTorch's own machinery (a write into a slice becomes `slice_scatter`, a buffer's update
an `update` of its state argument; memplan's in-place pass finds the reuse again);
`torch.no_grad()`/`enable_grad()`/`set_grad_enabled()` and `torch.autocast(...)` blocks
inside forward are inlined with their meaning (what a grad-disabled block computes is
detached; the casts of an autocast block are inserted, on fake CUDA tensors for a CUDA
block); a custom `torch.autograd.Function` keeps its own backward (its forward's ops are
marked `custom(N)`, and its backward, traced on the values it saved, is the step's
`custom_backward(N)` block: memplan runs what the user wrote, keeping what it saved);
checkpointing is kept (reentrant as the non-reentrant
checkpoint it computes the same values and gradients as): the ops each call runs are marked
`checkpoint(N)`, and memplan's autodiff recomputes them in the backward as PyTorch does
(`user_checkpoint="drop"` leaves the marks out, so memplan decides, with `--budget`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import itertools
import logging
import math
import operator
import os
import sys
import traceback
import types
import warnings
from unittest import mock

import torch
import torch.fx.traceback as fx_traceback
from torch._subclasses.fake_tensor import FakeTensorMode

from . import datadep
from .step import ExportError, ExportWarning, StepWriter
from .translate import (CHECKPOINT_KEY, CUSTOM_BACKWARD_KEY, CUSTOM_KEY, GRAD_FOR_KEY, GRAD_IN_KEY, GRAD_OF_KEY,
                        SAVED_KEY, Translator)

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


# How `torch.utils.checkpoint` calls are exported: marked, so memplan recomputes what
# PyTorch recomputes, or left out, so memplan decides (`memplan plan --budget`).
USER_CHECKPOINT = ("keep", "drop")

# The environment variable that shows torch.export's own log and exception along with
# memplan's one-screen error (for a bug report, or to see what torch saw).
TORCH_DETAILS = "MEMPLAN_TORCH_DETAILS"



def capture(model: torch.nn.Module, example_inputs: tuple, amp: str | None = None,
            user_checkpoint: str = "keep") -> torch.export.ExportedProgram:
    """The forward graph of `model(*example_inputs)` in training mode, in ATen ops; under
    `amp`, with the casts CUDA autocast performs (see `_cuda_autocast`). A model in
    training mode is captured as it is, so a submodule the user put in eval mode (a frozen
    BatchNorm) stays so; a model in eval mode is captured in training mode throughout.
    The modules' modes are restored afterwards. With `user_checkpoint="keep"`, each node a
    `torch.utils.checkpoint` call ran has `meta["custom"][CHECKPOINT_KEY]`, the call's
    number."""
    if not isinstance(example_inputs, tuple):
        example_inputs = tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,)
    if amp is not None and amp not in AMP:
        raise ExportError(f"--amp {amp}: expected one of {', '.join(AMP)}")
    if user_checkpoint not in USER_CHECKPOINT:
        raise ExportError(f"--user-checkpoint {user_checkpoint}: expected one of {', '.join(USER_CHECKPOINT)}")
    with _training(model):
        return _capture(model, example_inputs, amp, user_checkpoint == "keep")


@contextlib.contextmanager
def _training(model: torch.nn.Module):
    """`model` in training mode for the duration (see `capture`), each module's mode
    restored after."""
    modes = [(module, module.training) for module in model.modules()]
    if not model.training:
        model.train()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def _capture(model: torch.nn.Module, example_inputs: tuple, amp: str | None, keep: bool) -> torch.export.ExportedProgram:
    if amp is None:
        seen: list = []
        program = _export(model, example_inputs, keep, seen)
        if not any(what == "cuda autocast" for what, _ in seen):
            return _regions(program)
        # A CUDA autocast block inside forward: its casts exist only for CUDA tensors (on a
        # machine without a GPU, torch.autocast("cuda") would even switch itself off).
        with _fake_cuda(model, example_inputs) as fake_inputs, _cuda_stubs(), _quiet_retrace():
            return _regions(_export(model, fake_inputs, keep))
    seen = []
    with _fake_cuda(model, example_inputs) as fake_inputs, _cuda_autocast(AMP[amp]), _quiet_retrace():
        program = _regions(_export(model, fake_inputs, keep, seen), retrace=True)
    for where in dict.fromkeys(where for what, where in seen if what == "custom function"):
        warnings.warn(f"{where}: a custom torch.autograd.Function under --amp: its backward is written with autocast's "
                      "casts, where PyTorch runs it without autocast (unless it is decorated with "
                      "torch.amp.custom_bwd): its ops may run in another dtype than PyTorch's", ExportWarning, stacklevel=3)
    return program


@contextlib.contextmanager
def _quiet_retrace():
    """torch's retrace (`run_decompositions`) warns about its own use of a deprecated pytree
    API: not the user's."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module="copyreg")
        yield


_SET_GRAD = torch.ops.higher_order.wrap_with_set_grad_enabled
_AUTOCAST = torch.ops.higher_order.wrap_with_autocast


def _region_nodes(program: torch.export.ExportedProgram, target):
    """The nodes calling `target` (a higher-order op torch.export leaves for a block of
    forward: `wrap_with_set_grad_enabled`, `wrap_with_autocast`), in the graph and in the
    blocks' own graphs."""
    return [n for m in program.graph_module.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes
            if n.op == "call_function" and n.target is target]


def _regions(program: torch.export.ExportedProgram, retrace: bool = False) -> torch.export.ExportedProgram:
    """`program` with its grad-mode and autocast blocks inlined, each with its meaning: the
    results of a grad-disabled block (`torch.no_grad()`, `set_grad_enabled(False)`) are
    detached, as PyTorch's carry no gradient; the retrace (`run_decompositions({})`, which
    decomposes nothing) runs each autocast block under autocast, so its casts are in the
    graph. A grad-mode block without blocks inside is inlined here, its ops keeping their
    source lines (a retrace would name its own generated code instead). `retrace`: retrace
    even without blocks (the `--amp` capture)."""
    for node in _region_nodes(program, _SET_GRAD):
        inner = getattr(node.graph.owning_module, node.args[1].target, None)
        if not isinstance(inner, torch.fx.GraphModule):
            continue
        if node.args[0] is False and any(n.op == "call_function" and n.target is _SET_GRAD and n.args[0] is True for n in inner.graph.nodes):
            raise ExportError(f"{_where(node)}: torch.enable_grad() inside torch.no_grad(): memplan cannot express "
                              "gradients that start inside a block without them (move the enable_grad block out)")
        if any(n.op == "get_attr" for n in inner.graph.nodes):
            # Blocks inside: the retrace inlines them all; detach what this one gives.
            results = [user for user in node.users if user.target is operator.getitem]
        else:
            results = _inline(node, inner)
        if node.args[0] is False:
            for result in results:
                _detach(result)
    if not (retrace or _region_nodes(program, _SET_GRAD) or _region_nodes(program, _AUTOCAST) or _writes(program)):
        program.graph_module.recompile()
        return program
    for module in program.graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            module.recompile()
    with _quiet_retrace():
        program = program.run_decompositions({})
    # Functionalization leaves the views it read the old values through (`x[:, :8]` before
    # `x[:, :8] = h`) unread: nothing of the user's step.
    program.graph_module.graph.eliminate_dead_code()
    program.graph_module.recompile()
    return program


def _writes(program: torch.export.ExportedProgram) -> bool:
    """Whether the graph writes in place: an op whose schema mutates an argument (`relu_`,
    `add_`, `copy_` into a slice, `index_put_`, an `out=` variant), or a training BatchNorm
    that updates its running statistics. The retrace (`run_decompositions({})`)
    functionalizes them: each write becomes a value (`relu`, `slice_scatter`, ...), and a
    buffer's new value an output of the graph."""
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
            if schema is not None and schema.is_mutable:
                return True
            if node.target is torch.ops.aten.batch_norm.default and node.args[5] and node.args[3] is not None:
                return True
    return False


def _inline(node, inner: torch.fx.GraphModule) -> list:
    """Replaces the block `node` calls (`inner`, with no blocks of its own) by copies of its
    ops, their metadata (source lines, modules) kept; returns the nodes of its tensor
    results."""
    graph = node.graph
    placeholders = [n for n in inner.graph.nodes if n.op == "placeholder"]
    env = dict(zip(placeholders, node.args[2:]))
    outputs = ()
    with graph.inserting_before(node):
        for op in inner.graph.nodes:
            if op.op == "output":
                outputs = op.args[0]
            elif op.op != "placeholder":
                env[op] = graph.node_copy(op, lambda a: env[a])
    results = []
    for user in list(node.users):
        value = outputs[user.args[1]]
        value = env[value] if isinstance(value, torch.fx.Node) else value
        user.replace_all_uses_with(value)
        graph.erase_node(user)
        if isinstance(value, torch.fx.Node) and isinstance(value.meta.get("val"), torch.Tensor):
            results.append(value)
    graph.erase_node(node)
    return results


def _detach(result) -> None:
    """Every use of `result` reads `aten.detach(result)` instead."""
    if not isinstance(result.meta.get("val"), torch.Tensor):
        return
    graph = result.graph
    with graph.inserting_after(result):
        detached = graph.call_function(torch.ops.aten.detach.default, (result,))
    detached.meta = dict(result.meta)
    result.replace_all_uses_with(detached, delete_user_cb=lambda use: use is not detached)


def _where(node) -> str:
    """`file:line` of the user's code that made `node`, or its name."""
    from .translate import source_loc

    loc = source_loc(node)
    return f"{loc[0]}:{loc[1]}" if loc else node.name




def export_step(
    model: torch.nn.Module,
    example_inputs: tuple,
    optimizer: str = "adamw",
    lr: float | None = None,
    weight_decay: float | None = None,
    momentum: float | None = None,
    amp: str | None = None,
    name: str | None = None,
    user_checkpoint: str = "keep",
) -> str:
    """The training step of `model` on `example_inputs` as memplan IR text (a `.step`)."""
    op, attrs = optimizer_attrs(optimizer, lr, weight_decay, momentum)
    program = capture(model, example_inputs, amp, user_checkpoint)
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


def _export(model, example_inputs, keep: bool, seen: list | None = None) -> torch.export.ExportedProgram:
    """`torch.export` of `model`, refusing what it would silently change (see
    `_watching_functions`); `seen` collects what was watched. `keep`: mark what each
    non-reentrant checkpoint call runs (node metadata survives only under
    `preserve_node_meta`)."""
    seen = [] if seen is None else seen
    markers: list = []
    with _watching_functions(seen, keep, markers), _returning_markers(model, markers), \
            fx_traceback.preserve_node_meta(), _quiet_torch_logs(), warnings.catch_warnings():
        # Reentrant checkpointing of inputs that need no gradient warns; memplan's own
        # warning below names the user's line instead.
        warnings.filterwarnings("ignore", message="None of the inputs have requires_grad")
        try:
            program = torch.export.export(model, example_inputs, strict=False)
        except ExportError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever torch.export raises is the user's model's: said at their line
            if os.environ.get(TORCH_DETAILS):
                raise datadep.export_failure(e) from e
            raise datadep.export_failure(e) from None
    for what, where in seen:
        if what in ("cuda autocast", "custom function"):
            continue
        if what == "checkpoint":
            if not keep:
                warnings.warn(f"{where}: torch.utils.checkpoint dropped (--user-checkpoint drop): memplan plans the "
                              "step without its recomputation; `memplan plan --budget` chooses what to recompute",
                              ExportWarning, stacklevel=2)
        elif what == "reentrant checkpoint without gradients":
            warnings.warn(f"{where}: torch.utils.checkpoint(..., use_reentrant=True) of inputs that need no gradient: "
                          "PyTorch computes no gradient through it, so the parameters it uses are not trained by it "
                          "(use_reentrant=False trains them)", ExportWarning, stacklevel=2)
        elif what.startswith("custom function in checkpoint"):
            raise ExportError(f"{where}: the custom torch.autograd.Function {what.split(': ')[1]} runs inside "
                              "torch.utils.checkpoint: memplan cannot yet recompute a Function with its own backward; "
                              "export with --user-checkpoint drop (memplan then chooses what to recompute)")
    return program


@contextlib.contextmanager
def _quiet_torch_logs():
    """torch.export logs what it failed on as it raises (symbolic-shape warnings, and the
    graph so far printed on stderr): the error memplan gives names the user's line
    instead. So torch's log records up to ERROR are held back for the duration, and what
    it prints on stderr is shown only if the export succeeds (the previous settings
    restored). With `MEMPLAN_TORCH_DETAILS=1` in the environment nothing is held back, and
    torch's exception follows memplan's error."""
    if os.environ.get(TORCH_DETAILS):
        yield
        return
    previous = logging.root.manager.disable
    logging.disable(logging.ERROR)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stderr(printed):
            yield
    finally:
        logging.disable(previous)
    sys.stderr.write(printed.getvalue())


# Autograd Functions and checkpointing, which torch.export inlines: the forward of a custom
# `torch.autograd.Function` is traced and its backward dropped (memplan would write the
# derivative of the forward instead), reentrant checkpointing (`CheckpointFunction`)
# would come out as blocks without gradients (it is traced as the non-reentrant one
# instead), and non-reentrant checkpointing as the plain forward. So every
# `Function.apply` and every checkpoint is watched while torch.export traces: a custom
# Function's forward ops are annotated with its call's number, and its backward is traced
# right after it (on the tensors autograd saved, and a placeholder per output gradient),
# annotated too; a checkpoint's ops are annotated with its call's number.


@contextlib.contextmanager
def _returning_markers(model, markers: list):
    """`model.forward` returning, after what it returns, the `markers` the traced forward
    collected (a custom Function's returned gradients, which nothing in the forward reads):
    as outputs, they survive torch.export's dead-code elimination. The translator reads the
    loss (the first output) and the markers; the model is restored on exit."""
    original = model.forward

    @functools.wraps(original)
    def forward(*args, **kwargs):
        markers.clear()
        out = original(*args, **kwargs)
        return (out, *markers) if markers else out

    with mock.patch.object(model, "forward", forward):
        yield

def _user_frame() -> str:
    """`file:line` of the innermost frame of the running stack that is the user's."""
    for frame in reversed(traceback.extract_stack()):
        if datadep.is_users_file(frame.filename):
            return f"{os.path.basename(frame.filename)}:{frame.lineno}"
    return "the model"


@contextlib.contextmanager
def _watching_functions(seen: list, keep: bool = True, markers: list | None = None):
    """Records in `seen` (what, where) each checkpoint (`checkpoint`; also `reentrant
    checkpoint without gradients`), each `torch.autocast("cuda")`
    block entered (`cuda autocast`) and each custom Function inside a kept checkpoint
    while torch.export traces. A custom autograd Function's call is traced with its own
    backward (`_custom_function`; its markers appended to `markers`); torch's own Functions
    are not (their backward is the forward's derivative); reentrant checkpointing's is run
    as the non-reentrant checkpoint. With `keep`, what each checkpoint call runs is
    annotated with the call's number (`CHECKPOINT_KEY`)."""
    markers = [] if markers is None else markers
    # A classmethod in Python in some torch releases, a C class method in others: either is
    # bound to the class applied through its descriptor.
    apply = inspect.getattr_static(torch.autograd.Function, "apply")
    autocast_init = torch.amp.autocast_mode.autocast.__init__
    # Non-reentrant checkpointing runs this generator (named `..._impl` in newer torch,
    # whose `checkpoint` calls it directly).
    generator_name = next(name for name in ("_checkpoint_without_reentrant_generator_impl",
                                            "_checkpoint_without_reentrant_generator") if hasattr(torch.utils.checkpoint, name))
    generator = getattr(torch.utils.checkpoint, generator_name)

    calls = itertools.count()
    depth = {"checkpoint": 0, "custom": 0}

    def watched_apply(cls, *args, **kwargs):
        if cls is torch.utils.checkpoint.CheckpointFunction:
            return reentrant_checkpoint(*args)
        run = apply.__get__(None, cls)
        if cls.__module__.startswith("torch.") or depth["custom"]:
            # torch's own, or one inside a custom Function's forward (whose backward is the
            # outer Function's): its forward is part of the step.
            return run(*args, **kwargs)
        if keep and depth["checkpoint"]:
            # Refused after the capture (`_export`).
            seen.append((f"custom function in checkpoint: {cls.__qualname__}", _user_frame()))
            return run(*args, **kwargs)
        seen.append(("custom function", _user_frame()))
        depth["custom"] += 1
        try:
            return _custom_function(cls, run, next(calls), args, kwargs, markers)
        finally:
            depth["custom"] -= 1

    def reentrant_checkpoint(function, preserve_rng_state, *inputs):
        # PyTorch's reentrant checkpoint runs `function` without gradients and again with
        # them in the backward: the values and gradients of the non-reentrant one, which
        # torch.export can trace (and `checkpoint(N)` then marks). Unless no input needs a
        # gradient: then PyTorch's output needs none either, and the params inside get no
        # gradient (PyTorch warns): a no_grad block, whose results are detached.
        if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad for x in inputs):
            return torch.utils.checkpoint.checkpoint(function, *inputs, use_reentrant=False,
                                                     preserve_rng_state=preserve_rng_state)
        seen.append(("reentrant checkpoint without gradients", _user_frame()))
        with torch.no_grad():
            return function(*inputs)

    regions = itertools.count()
    newest_meta: list = [None]
    create_node = torch.fx.proxy.TracerBase.create_node

    def watched_create_node(self, *args, **kwargs):
        node = create_node(self, *args, **kwargs)
        newest_meta[0] = node.meta.get("custom")
        return node

    def watched_generator(*args, **kwargs):
        where = _user_frame()
        seen.append(("checkpoint", where))
        if not keep:
            # Dropped: the function runs as plain forward code (no saved-tensor hooks: a
            # custom Function inside then traces its backward as anywhere else).
            yield
            return
        bound = inspect.signature(generator).bind(*args, **kwargs)
        context_fn = bound.arguments.get("context_fn", torch.utils.checkpoint.noop_context_fn)
        # The generator is suspended while the checkpointed function runs: every op traced
        # then is the call's.
        depth["checkpoint"] += 1
        try:
            with fx_traceback.annotate({CHECKPOINT_KEY: next(regions)}):
                if context_fn is not torch.utils.checkpoint.noop_context_fn:
                    bound.arguments["context_fn"] = _recording_policy(context_fn, where, newest_meta)
                yield from generator(*bound.args, **bound.kwargs)
        finally:
            depth["checkpoint"] -= 1

    def watched_autocast(self, device_type, *args, **kwargs):
        if device_type == "cuda" and kwargs.get("enabled", args[1] if len(args) > 1 else True):
            seen.append(("cuda autocast", _user_frame()))
            # Without a GPU it switches itself off, saying so: the capture is redone on fake
            # CUDA tensors (`capture`), so that is not the user's concern.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*CUDA is not available.*")
                return autocast_init(self, device_type, *args, **kwargs)
        return autocast_init(self, device_type, *args, **kwargs)

    with mock.patch.object(torch.autograd.Function, "apply", classmethod(watched_apply)), \
            mock.patch.object(torch.fx.proxy.TracerBase, "create_node", watched_create_node), \
            mock.patch.object(torch.utils.checkpoint, generator_name, watched_generator), \
            mock.patch.object(torch.amp.autocast_mode.autocast, "__init__", watched_autocast):
        yield seen


def _recording_policy(context_fn, where: str, last: list):
    """`context_fn` (a selective checkpoint's, `create_selective_checkpoint_contexts`) with
    its policy's forward decisions recorded: each node traced in the checkpoint gets
    `SAVED_KEY: True` when the policy saves the output of the last ATen op it runs as
    (`MUST_SAVE`, `PREFER_SAVE`: PyTorch keeps it and does not recompute it), `False`
    when it recomputes it. torch asks the policy right after creating the node (the op
    then runs below autograd, where the policy's dispatch mode sees it): `last[0]` is the
    newest node's `meta["custom"]` (`_watching_functions` keeps it)."""
    save = {torch.utils.checkpoint.CheckpointPolicy.MUST_SAVE, torch.utils.checkpoint.CheckpointPolicy.PREFER_SAVE}

    def recording():
        forward, recompute = context_fn()
        policy = getattr(forward, "policy_fn", None)
        if policy is None:
            raise ExportError(f"{where}: torch.utils.checkpoint with a context_fn that is not "
                              "create_selective_checkpoint_contexts(...): memplan cannot tell what it saves; export with "
                              "--user-checkpoint drop and let `memplan plan --budget` choose")

        def decide(ctx, op, *args, **kwargs):
            decision = policy(ctx, op, *args, **kwargs)
            if not ctx.is_recompute and last[0] is not None and CHECKPOINT_KEY in last[0]:
                last[0][SAVED_KEY] = decision in save or decision is True
            return decision

        forward.policy_fn = decide
        return forward, recompute

    return recording


def _custom_function(cls, run, call: int, args, kwargs, markers: list):
    """Applies the custom autograd Function `cls` (`run`), its forward's ops annotated
    `CUSTOM_KEY: call`, then traces its backward as autograd would call it: on the context
    autograd keeps (what `save_for_backward` saved, the attributes set on `ctx`,
    `needs_input_grad`), with one placeholder per output gradient (`empty_like`, annotated
    `GRAD_OF_KEY: [call, k]`), its ops annotated `CUSTOM_BACKWARD_KEY: call`. Each gradient
    it returns for an input that requires one is paired with the input by two markers
    (`GRAD_FOR_KEY`, `GRAD_IN_KEY`) appended to `markers`. Returns what `run` returns."""
    with fx_traceback.annotate({CUSTOM_KEY: call}):
        out = run(*args, **kwargs)
    outputs = list(out) if isinstance(out, (tuple, list)) else [out]
    ctx = next((t.grad_fn for t in outputs if isinstance(t, torch.Tensor) and t.grad_fn is not None), None)
    if ctx is None:
        # No gradient flows through it (no input needs one, or gradients are off): its
        # forward, and a block that returns nothing.
        return out
    grads_out = []
    for k, t in enumerate(outputs):
        if not isinstance(t, torch.Tensor):
            grads_out.append(None)
        elif not t.requires_grad:
            # `ctx.mark_non_differentiable`: autograd passes zeros.
            with fx_traceback.annotate({CUSTOM_BACKWARD_KEY: call}):
                grads_out.append(torch.zeros_like(t))
        else:
            with fx_traceback.annotate({GRAD_OF_KEY: [call, k]}):
                grads_out.append(torch.empty_like(t))
    with fx_traceback.annotate({CUSTOM_BACKWARD_KEY: call}):
        grads_in = _named_forward(cls.backward)(ctx, *grads_out)
    grads_in = grads_in if isinstance(grads_in, tuple) else (grads_in,)
    for i, (x, g) in enumerate(zip(args, grads_in)):
        if isinstance(x, torch.Tensor) and x.requires_grad and isinstance(g, torch.Tensor):
            with fx_traceback.annotate({GRAD_FOR_KEY: [call, i]}):
                markers.append(torch.ops.aten.clone(x))
            with fx_traceback.annotate({GRAD_IN_KEY: [call, i]}):
                markers.append(torch.ops.aten.clone(g))
    return out


def _named_forward(function):
    """`function` (a Function's backward; the one `once_differentiable` wraps) with its
    frames named `forward`: torch.export keeps only frames of functions named `forward` in
    a node's stack trace, so the backward's ops then carry the user's lines."""
    function = getattr(function, "__wrapped__", function)
    code = getattr(function, "__code__", None)
    if code is None:
        return function
    renamed = types.FunctionType(code.replace(co_name="forward"), function.__globals__, "forward",
                                 function.__defaults__, function.__closure__)
    renamed.__kwdefaults__ = function.__kwdefaults__
    return renamed


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

    def empty(t):
        with mode:
            return torch.empty(t.shape, dtype=t.dtype, device="cuda")

    with swapped_tensors(model, example_inputs, empty) as fake_inputs:
        yield fake_inputs


@contextlib.contextmanager
def swapped_tensors(model: torch.nn.Module, inputs: tuple, make):
    """`model`'s parameters and buffers replaced by `make(tensor)` (a Parameter again where
    the original is one, with its requires_grad; a tensor shared by two modules, such as a
    tied weight, replaced by one) for the duration; yields the inputs replaced the same way.
    The model is restored on exit: nothing the user gave is changed."""
    made: dict[int, torch.Tensor] = {}

    def swap(t):
        if id(t) not in made:
            new = make(t)
            made[id(t)] = torch.nn.Parameter(new, requires_grad=t.requires_grad) if isinstance(t, torch.nn.Parameter) else new
        return made[id(t)]

    saved = []
    try:
        for module in model.modules():
            for table in (module._parameters, module._buffers):  # noqa: SLF001 - swapped and restored
                for key, tensor in list(table.items()):
                    if tensor is not None:
                        saved.append((table, key, tensor))
                        table[key] = swap(tensor)
        yield tuple(swap(x) if isinstance(x, torch.Tensor) else x for x in inputs)
    finally:
        for table, key, tensor in saved:
            table[key] = tensor


@contextlib.contextmanager
def _cuda_stubs():
    """The few CUDA calls autocast makes that would touch a driver, stubbed (a fake CUDA
    capture runs on any machine)."""
    stubs = [
        mock.patch("torch.cuda.is_available", return_value=True),
        mock.patch("torch.cuda.is_bf16_supported", return_value=True),
        mock.patch("torch.cuda.get_rng_state", return_value=torch.empty(0, dtype=torch.uint8)),
        mock.patch("torch.cuda.set_rng_state"),
    ]
    with contextlib.ExitStack() as stack:
        for stub in stubs:
            stack.enter_context(stub)
        yield


@contextlib.contextmanager
def _cuda_autocast(dtype: torch.dtype):
    """CUDA autocast to `dtype` switched on for the dispatcher, on any machine."""
    was = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
    with _cuda_stubs():
        torch.set_autocast_enabled("cuda", True)
        torch.set_autocast_dtype("cuda", dtype)
        try:
            yield
        finally:
            torch.set_autocast_enabled("cuda", was[0])
            torch.set_autocast_dtype("cuda", was[1])
