"""ATen graph -> memplan step: the walk over the graph, and `extern` for what has no handler.

Input: the forward graph `torch.export` captured (its training IR: high-level ATen ops such
as `linear`, `scaled_dot_product_attention`, `rms_norm`, `cross_entropy_loss`, kept whole).
Each node becomes memplan ops, written by the handler registered for its ATen overload
(`ops/`, one module per family of ops; `HANDLERS` is keyed by the overload object in the
node's `target`). Every output is written with the type PyTorch's fake tensor gives it, so
memplan's verifier re-checks every shape. The step ends with the loss and a `backward`
statement: memplan's own autodiff writes the gradients and the optimizer update
(docs/AUTODIFF.md), so the exported step is the whole training step.

Handlers write ops only through `Translator.emit` and `emit_multi`, which name each output
and give it its source location. An ATen op without a handler (or in a form its handler
cannot express, which it says by raising `ExportError` before writing anything) becomes an
`extern` op: its name, output types, aliasing (from the op's schema) and FLOPs (from
PyTorch's flop counter), so any model plans.

Names: an op's output is named after the module that computes it (its `nn_module_stack`
path): a module's result is the module path itself (`blocks.3.attn.q_proj`), other values
are `path.op` (`blocks.3.attn.transpose`), the loss is `loss`; parameters and buffers keep
their state-dict names. A view a caller takes of a module's result (the enclosing module,
or the root, viewing what a submodule returned) is named after that result,
`result.op`: the root's `logits.view(-1, V)` of `lm_head`'s logits is `lm_head.reshape`,
and memplan's autodiff names its gradient, the logits' gradient, `lm_head.reshape.grad`
(not `reshape.grad`); views of such a view are named after the same result. Each op carries the source line of the user's code that called it
(the innermost stack frame outside torch itself) and the module path, as
`loc("model.py":42, "blocks.3.attn")`.
"""

from __future__ import annotations

import operator
import os
import re
import warnings

import torch
from torch.export import ExportedProgram
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode
from torch.export.graph_signature import InputKind, OutputKind

from . import datadep
from .ops import HANDLERS
from .ops._helpers import cast_to
from .step import Block, ExportError, ExportWarning, StepWriter, type_text
from .value import Value, dense, shadow_after



# A data-dependent value where the translator needs a number (a scalar from `.item()`, a
# size from `nonzero`): see datadep.py.
_GUARD = GuardOnDataDependentSymNode


# torch's runtime checks of sizes and scalars (torch._check, the bounds of an unbacked
# size): nothing a step computes.
_CHECKS = {
    getattr(torch.ops.aten, name).default
    for name in ("_assert_scalar", "sym_constrain_range", "sym_constrain_range_for_size", "_assert_async")
    if hasattr(torch.ops.aten, name)
}
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)


def _schema_returns_tensor(target) -> bool:
    schema = getattr(target, "_schema", None)
    return schema is not None and any(str(r.type).startswith("Tensor") for r in schema.returns)


# The keys of a node's `meta["custom"]` that export.py sets (see `_watching_functions`
# there): the checkpoint call that ran the node; the custom autograd Function call whose
# forward ran it; whose (user-written) backward ran it; the gradient of output K of call N
# the backward reads (`[N, K]`, on a placeholder `empty_like(output)`); and the markers
# pairing input I of call N with the gradient its backward returns for it (`[N, I]`, on a
# `clone` of each, which the step never computes).
CHECKPOINT_KEY = "memplan_checkpoint"
SAVED_KEY = "memplan_saved"  # in a selective checkpoint: the policy saves the node's output
CUSTOM_KEY = "memplan_custom"
CUSTOM_BACKWARD_KEY = "memplan_custom_backward"
GRAD_OF_KEY = "memplan_grad_of"
GRAD_FOR_KEY = "memplan_grad_for"
GRAD_IN_KEY = "memplan_grad_in"


def _annotation(node, key):
    custom = node.meta.get("custom") if isinstance(node, torch.fx.Node) else None
    return custom.get(key) if isinstance(custom, dict) else None


def region_of(node) -> str | None:
    """`checkpoint(N)` when the user's `torch.utils.checkpoint` call N ran `node`
    (`checkpoint_saved(N)` where its selective policy saves the node's output),
    `custom(N)` when the forward of custom autograd Function call N did (export.py marks
    them), `None` outside both."""
    custom = _annotation(node, CUSTOM_KEY)
    if isinstance(custom, int):
        return f"custom({custom})"
    region = _annotation(node, CHECKPOINT_KEY)
    if not isinstance(region, int):
        return None
    return f"checkpoint_saved({region})" if _annotation(node, SAVED_KEY) is True else f"checkpoint({region})"


def source_loc(node) -> tuple[str, int, str | None] | None:
    """The innermost frame of `node`'s stack trace outside torch (file name, line), and the
    path of the module computing it (`None` where torch.export recorded none)."""
    # Outside torch itself: torchvision, timm, transformers code is the user's (a prefix
    # test without the separator took site-packages/torchvision for torch), and generated
    # code (`<eval_with_key>`) is nobody's (`datadep.is_users_file`).
    frame = datadep.node_frame(node)
    if frame is None:
        return None
    file, line = frame
    module = module_path(node) if node.meta.get("nn_module_stack") else None
    return os.path.basename(file), line, module


def module_path(node) -> str:
    """The path of the innermost nn.Module computing `node` ('' for the root)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return re.sub(r"^L\['self'\]\.?", "", str(path))


class Translator:
    """Translates one exported program into a `StepWriter` (see the module docs)."""

    def __init__(self, program: ExportedProgram, writer: StepWriter, amp: bool = False):
        self.program = program
        self.w = writer
        # Captured under CUDA autocast (`export.capture`): ops torch.export keeps whole
        # whose autocast policy lives in their decomposition get it here (cross_entropy).
        self.amp = amp
        self._dropout_seed: Value | None = None
        self._streams = 0
        self.env: dict[torch.fx.Node, object] = {}
        self.node: torch.fx.Node | None = None
        self.roles: dict[str, str] = {}  # memplan argument name -> role
        self._grad_for: dict[tuple[int, int], Value] = {}  # (call, input) -> the input
        self.arg_sources: dict[str, str] = {}  # memplan argument name -> state-dict or input name
        self.hinted: set[str] = set()  # ops whose extern hint (_EXTERN_HINTS) was given
        # A module's result, or a caller's view of one -> (the result's name, its module path).
        self.viewed_result: dict[str, tuple[str, str]] = {}
        # Casts already written, by (input, attributes, region, block): autocast casts a
        # value once for each op that reads it (Llama's q, k and v projections each cast
        # the same normed input), but values never change, so one cast serves them all.
        self.casts: dict[tuple, Value] = {}

    # -- the walk ------------------------------------------------------------------------

    def run(self) -> Value:
        graph = self.program.graph
        self._plan_names(graph)
        self.arguments()
        loss = None
        for node in graph.nodes:
            self.node = node
            if node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                loss = self._outputs(node)
        if not isinstance(loss, Value):
            raise ExportError("the model must return its loss (a scalar tensor) first")
        if loss.rank != 0 or not loss.fake.dtype.is_floating_point:
            raise ExportError(f"the model returned {loss.type}, not a float scalar loss")
        self._drop_unread(loss)
        return loss

    def _drop_unread(self, loss: Value) -> None:
        """Removes views and fills nothing reads: a functionalized write still reads the old
        value through its view (`copy(x[:, :8], h)`), where the step needs only `h`; the
        tensor `bernoulli_` overwrites (`new_empty(shape)`) is never read."""
        read = {loss.name} | {value for _, value in self.w.updates} | self.w.block_reads()
        for op in reversed(list(self.w.ops)):
            if op.op in _UNREAD_DROPPED and not any(name in read for name, _ in op.outputs):
                self.w.remove(op)
            else:
                read.update(op.inputs)

    def _outputs(self, node):
        """The loss (the first output of the user's forward) and the `update` of each buffer
        the forward rewrote (a functionalized graph returns their new values first)."""
        specs = self.program.graph_signature.output_specs
        loss = None
        state_of = {source: name for name, source in self.arg_sources.items() if self.roles[name] == "state"}
        for spec, out in zip(specs, node.args[0]):
            if spec.kind == OutputKind.USER_OUTPUT:
                if loss is None:
                    loss = self.env.get(out)
            elif spec.kind == OutputKind.BUFFER_MUTATION:
                self._update(state_of[spec.target], self.env[out])
            elif spec.kind == OutputKind.USER_INPUT_MUTATION:
                warnings.warn(f"{self._where(out)}: forward writes into its input {spec.target} in place; the step does not "
                              "write inputs back (the batch is fed anew each step)", ExportWarning, stacklevel=2)
            elif spec.kind == OutputKind.PARAMETER_MUTATION:
                raise ExportError(f"{self._where(out)}: forward writes into the parameter {spec.target} in place: memplan's "
                                  "params change only by the optimizer (write into a buffer, or outside forward)")
            else:
                raise ExportError(f"output {spec.arg.name} of kind {spec.kind.name} is not supported")
        return loss

    def _update(self, target: str, value) -> None:
        """`update %target <- %value`, `value` in the target's dtype and shape (PyTorch's
        in-place write keeps the buffer's)."""
        if not isinstance(value, Value):
            raise ExportError(f"the new value of buffer {self.arg_sources[target]} is not a tensor")
        ty = next(t for name, t, _ in self.w.args if name == target)
        if value.name == target:
            return
        if value.type != ty:
            raise ExportError(f"buffer {self.arg_sources[target]} is {ty} but its new value is {value.type}")
        self.w.updates.append((target, value.name))

    def _where(self, node) -> str:
        loc = source_loc(node) if isinstance(node, torch.fx.Node) else None
        return f"{loc[0]}:{loc[1]}" if loc else "the model"

    def _plan_names(self, graph):
        """Which nodes are a module's result (named after the module itself), and the loss
        (named `loss`)."""
        self.result_of_module: set[torch.fx.Node] = set()
        outputs = [n for n in graph.nodes if n.op == "output"]
        specs = list(zip(self.program.graph_signature.output_specs, outputs[0].args[0] if outputs else []))
        user = [out for spec, out in specs if spec.kind == OutputKind.USER_OUTPUT]
        self.loss_node = user[0] if user else None
        # A buffer's new value (a BatchNorm's counter) leaves the graph, but is not what
        # its module computes.
        written_back = {out for spec, out in specs if spec.kind != OutputKind.USER_OUTPUT}
        for node in graph.nodes:
            if node.op != "call_function" or node in written_back:
                continue
            path = module_path(node)
            if not path:
                continue
            for user in node.users:
                user_path = module_path(user) if user.op == "call_function" else ""
                if user.op == "output" or not (user_path == path or user_path.startswith(path + ".")):
                    # A multi-output op's first output (a functional BatchNorm's) names it.
                    escaping = node.args[0] if node.target is operator.getitem and node.args[1] == 0 else node
                    self.result_of_module.add(escaping)
                    break

    def arguments(self):
        """The step's arguments: parameters, buffers and constants (by their state-dict
        names), and the user's inputs (by the forward's parameter names). A parameter with
        `requires_grad=False` (frozen) is `state`: read, kept, never trained."""
        graph = self.program.graph
        sig = self.program.graph_signature
        kinds = {spec.arg.name: spec for spec in sig.input_specs}
        # Tied weights (GPT-2's token embedding and output head) are one tensor under several
        # state-dict names; torch.export lists each name as an input and reads one of them.
        # The step has one param, named as PyTorch's `named_parameters()` names it (the first
        # name in the state dict), and no argument for the unread names.
        tensors = self.program.state_dict
        first_name, names = {}, {}
        for name, tensor in tensors.items():
            first_name.setdefault(id(tensor), name)
            names[id(tensor)] = names.get(id(tensor), 0) + 1
        for node in graph.nodes:
            if node.op != "placeholder":
                continue
            spec = kinds[node.name]
            fake = node.meta["val"]
            if not isinstance(fake, torch.Tensor):
                raise ExportError(f"input {node.name} is not a tensor ({type(fake).__name__})")
            tied = spec.target in tensors and names[id(tensors[spec.target])] > 1
            if tied and not node.users:
                continue
            frozen = spec.kind == InputKind.PARAMETER and not tensors[spec.target].requires_grad
            if spec.kind == InputKind.PARAMETER and frozen:
                # requires_grad=False: read every step, never trained (no gradient, no
                # optimizer state, no update), as PyTorch treats it: memplan's `state`.
                role, source = "state", first_name[id(tensors[spec.target])] if tied else spec.target
            elif spec.kind == InputKind.PARAMETER:
                role, source = "param", first_name[id(tensors[spec.target])] if tied else spec.target
                if not fake.dtype.is_floating_point:
                    raise ExportError(f"parameter {spec.target} is {fake.dtype}: memplan trains float params only")
            elif spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                role, source = "state", spec.target
            elif spec.kind == InputKind.USER_INPUT:
                role, source = "input", node.name
            else:
                raise ExportError(f"input {node.name} of kind {spec.kind} is not supported")
            name = self.w.arg(source, type_text(fake.dtype, fake.shape), role)
            self.env[node] = Value(name, fake)
            self.roles[name] = role
            self.arg_sources[name] = source

    def _call(self, node):
        if not self._custom_function_part(node):
            self._call_plain(node)

    def _call_plain(self, node):
        target = node.target
        if target is operator.getitem:
            self.env[node] = self.env[node.args[0]][node.args[1]]
            return
        if not node.users and not any(isinstance(a, torch.fx.Node) for a in _flatten(list(node.args) + list(node.kwargs.values()))):
            # A tensor made of nothing and read by nothing (the `empty([0])` placeholders
            # non-reentrant checkpointing leaves in the graph): no step of the user's.
            return
        try:
            self._translate(node)
            sizes = datadep.bounded()
            if sizes:
                datadep.warn_bounded(self.program, node, sizes, source_loc)
        except _GUARD as e:
            raise datadep.translation_failure(self.program, node, e, source_loc) from None
        except datadep.UnboundedSize as e:
            raise datadep.translation_failure(self.program, node, e, source_loc) from None

    def _custom_function_part(self, node) -> bool:
        """Writes what `node` is of a custom autograd Function's backward (export.py's
        annotations): an op of the backward into the call's block, the gradient of an
        output as the block's argument, a returned gradient as its result. False for any
        other node."""
        grad_of, backward = _annotation(node, GRAD_OF_KEY), _annotation(node, CUSTOM_BACKWARD_KEY)
        grad_for, grad_in = _annotation(node, GRAD_FOR_KEY), _annotation(node, GRAD_IN_KEY)
        if grad_of is not None:
            call, _ = grad_of
            output = self.env[node.args[0]]
            op = self.written_by(output.name)
            if op is None or op.region != f"custom({call})":
                raise ExportError(f"{self._where(node)}: a custom autograd Function returns a tensor its forward did not "
                                  "compute (one of its inputs): memplan cannot tell its gradient from the input's "
                                  "(return a computed tensor, e.g. `x.clone()`)")
            name = self.w.unique(f"{output.name}.grad_out")
            self.w.blocks.setdefault(call, Block()).grads_of.append((name, output.type, output.name))
            self.env[node] = Value(name, output.fake)
            return True
        if grad_for is not None:
            self._grad_for[tuple(grad_for)] = self.env[node.args[0]]
            return True
        if grad_in is not None:
            x, g = self._grad_for[tuple(grad_in)], self.env[node.args[0]]
            if not isinstance(g, Value) or not isinstance(x, Value):
                raise ExportError(f"{self._where(node)}: a custom autograd Function's backward returns a gradient memplan "
                                  "cannot write")
            if tuple(g.shape) != tuple(x.shape):
                raise ExportError(f"{self._where(node)}: a custom autograd Function's backward returns a gradient of "
                                  f"shape {tuple(g.shape)} for an input of shape {tuple(x.shape)}: memplan writes "
                                  "gradients of their input's shape (reduce it in the backward)")
            self.w.blocks.setdefault(grad_in[0], Block())
            if g.fake.dtype != x.fake.dtype:
                # Autograd casts what a backward returns to its input's dtype.
                self.w.block = grad_in[0]
                try:
                    g = cast_to(self, g, x.fake.dtype)
                finally:
                    self.w.block = None
            self.w.blocks[grad_in[0]].returns.append((x.name, g.name))
            return True
        if backward is not None:
            self.w.blocks.setdefault(backward, Block())
            self.w.block = backward
            try:
                self._call_plain(node)
            finally:
                self.w.block = None
            return True
        return False

    def _translate(self, node):
        target = node.target
        if target in _CHECKS or (isinstance(node.meta.get("val"), _SYMBOLIC) and not _schema_returns_tensor(target)):
            # Arithmetic on sizes and scalars (`sym_size`, `u0 >= 0`) and torch's runtime
            # checks of them (`_assert_scalar`, `torch._check`): no op of memplan's; the
            # value is kept for an op that reads it (a data-dependent one is an error there).
            self.env[node] = node.meta.get("val")
            return
        args = [self._resolve(a) for a in node.args]
        kwargs = {k: self._resolve(v) for k, v in node.kwargs.items()}
        handler = HANDLERS.get(target)
        if handler is not None:
            emitted = len(self.w.ops)
            try:
                self.env[node] = handler(self, *args, **kwargs)
                return
            except ExportError as refused:
                # A form of the op memplan has no op for (a pow of a base that may be
                # negative, say): written as `extern` below, unless the handler had begun
                # writing ops; the warning says why, at the user's line.
                if len(self.w.ops) != emitted:
                    raise
                loc = source_loc(node)
                where = f"{os.path.basename(loc[0])}:{loc[1]}: " if loc else ""
                warnings.warn(f"{where}{target} is written as extern: {refused}", ExportWarning, stacklevel=2)
        else:
            decomposed = self._decomposed(node, args, kwargs)
            if decomposed is not None:
                self.env[node] = decomposed
                return
        self.env[node] = self._extern(node, args, kwargs)

    def _decomposed(self, node, args, kwargs):
        """An op with no handler that PyTorch itself defines through other ops: its
        CompositeImplicitAutograd kernel (`einsum`, `meshgrid`, ...), else its entry in
        PyTorch's decomposition table (`torch._decomp`: `affine_grid_generator`, ...): those
        ops, as PyTorch writes them (traced with `make_fx` on the node's fake tensors), each
        translated as any node is, carrying the node's source line and module. None where
        the op has neither or its trace cannot be translated (then it is `extern`)."""
        target = node.target
        if not isinstance(target, torch._ops.OpOverload):
            return None
        if torch._C._dispatch_has_kernel_for_dispatch_key(target.name(), "CompositeImplicitAutograd"):
            kernel = target
        else:
            from torch._decomp import decomposition_table

            kernel = decomposition_table.get(target)
            if kernel is None:
                return None
        from torch.fx.experimental.proxy_tensor import make_fx
        from torch.utils import _pytree as pytree

        leaves, spec = pytree.tree_flatten((list(args), dict(kwargs)))
        at = [i for i, leaf in enumerate(leaves) if isinstance(leaf, Value)]
        fakes = [leaves[i].fake for i in at]
        mode = getattr(fakes[0], "fake_mode", None) if fakes else None
        if mode is None or any(isinstance(d, torch.SymInt) for f in fakes for d in f.shape):
            return None

        def run(*tensors):
            filled = list(leaves)
            for i, tensor in zip(at, tensors):
                filled[i] = tensor
            a, k = pytree.tree_unflatten(filled, spec)
            return kernel(*a, **k)

        try:
            with mode:
                traced = make_fx(run)(*fakes)
        except Exception:  # noqa: BLE001 - a decomposition that cannot be traced: extern
            return None
        placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
        for placeholder, i in zip(placeholders, at):
            self.env[placeholder] = leaves[i]
        start, outer = len(self.w.ops), self.node

        def undo():
            if self.w.block is None:
                for op in self.w.ops[start:]:
                    self.w.remove(op)

        # All or nothing: a decomposition with an `extern` op inside is undone (the node is
        # one `extern` instead, and its parts' warnings are dropped).
        with warnings.catch_warnings(record=True) as parts_warned:
            warnings.simplefilter("always")
            try:
                result = None
                for sub in traced.graph.nodes:
                    if sub.op == "call_function":
                        sub.meta.update({k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")})
                        self.node = sub
                        self._translate(sub)
                    elif sub.op == "output":
                        result = self._resolve(sub.args[0])
            except ExportError:
                undo()
                return None
            finally:
                self.node = outer
        if self.w.block is None and any(op.op.startswith("extern") for op in self.w.ops[start:]):
            undo()
            return None
        for warned in parts_warned:
            warnings.warn_explicit(warned.message, warned.category, warned.filename, warned.lineno)
        return result

    def _extern(self, node, args, kwargs):
        """`node` as `extern` ops, one per tensor output (see `extern` in docs/IR.md):
        the op's name, its outputs' types, the FLOPs PyTorch's flop counter gives, and
        `extern_view` where the op's schema says an output aliases an input."""
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            raise ExportError(f"{node.name}: {node.target} is not an ATen op, so memplan cannot even write it as extern")
        target = f"{schema.name}.{schema.overload_name or 'default'}"
        hint = _EXTERN_HINTS.get(schema.name)
        if hint is not None and schema.name not in self.hinted:
            self.hinted.add(schema.name)
            loc = source_loc(node)
            where = f"{os.path.basename(loc[0])}:{loc[1]}: " if loc else ""
            warnings.warn(f"{where}{target} is written as extern: {hint}", ExportWarning, stacklevel=2)
        inputs = [a for a in _flatten(list(args) + list(kwargs.values())) if isinstance(a, Value)]
        val = node.meta.get("val")
        outputs = list(val) if isinstance(val, (list, tuple)) else [val]
        flops = _flops(node)
        results = []
        for i, fake in enumerate(outputs):
            if not isinstance(fake, torch.Tensor):
                results.append(fake)
                continue
            attrs = [("target", target), ("shape", [datadep.static_size(d) for d in fake.shape]), ("dtype", fake.dtype)]
            bound = datadep.bound_text(fake.shape)
            aliased = _aliased_input(schema, i, args)
            final = i == 0
            if aliased is not None and isinstance(aliased, Value):
                results.append(self.emit("extern_view", [aliased], attrs, fake=fake, final=final, role=schema.name.split("::")[-1]))
            else:
                attrs.append(("flops", flops if i == 0 else 0))
                if bound:
                    attrs.append(("bound", bound))
                results.append(self.emit("extern", inputs, attrs, fake=fake, final=final, role=schema.name.split("::")[-1]))
        return tuple(results) if isinstance(val, (list, tuple)) else results[0]

    def _resolve(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self._resolve(x) for x in a)
        return a

    # -- emitting ------------------------------------------------------------------------

    def out_fake(self, index: int | None = None) -> torch.Tensor:
        val = self.node.meta["val"]
        return val[index] if index is not None else val

    def name_for(self, role: str, final: bool) -> str:
        """The name of an output: the module path for a module's result, else path.role."""
        path = module_path(self.node)
        if final and self.node is self.loss_node:
            return "loss"
        if final and self.node in self.result_of_module:
            return path
        return f"{path}.{role}" if path else role

    def dropout_seed(self) -> Value:
        """The step's `dropout_seed` input (an i64[] scalar), added at the first dropout."""
        if self._dropout_seed is None:
            name = self.w.arg("dropout_seed", "i64[]", "input")
            self._dropout_seed = Value(name, self.fake_like([], torch.int64))
            self.roles[name] = "input"
        return self._dropout_seed

    def next_stream(self) -> int:
        """A stream no other dropout site of the step has (0, 1, 2, ... in order)."""
        self._streams += 1
        return self._streams - 1

    def emit(self, op: str, inputs: list[Value], attrs=(), fake=None, final=True, role=None) -> Value:
        """One memplan op with one output whose fake tensor is `fake` (the node's own by
        default); `final`: it is the node's result (not a helper value)."""
        fake = self.out_fake() if fake is None else fake
        cast = (inputs[0].name, tuple(attrs), region_of(self.node), self.w.block) if op == "cast" and len(inputs) == 1 else None
        if cast in self.casts:
            return self.casts[cast]
        result = final and self.node in self.result_of_module
        name = self.name_for(role or op, final)
        viewed = self.viewed_result.get(inputs[0].name) if op in _VIEWS and inputs and not result else None
        path = module_path(self.node)
        if viewed is not None and name != "loss" and viewed[1] != path and (not path or viewed[1].startswith(path + ".")):
            # A caller's view of a submodule's result: named after the result.
            name = f"{viewed[0]}.{role or op}"
        else:
            viewed = None
        [name] = self.w.op([name], [type_text(fake.dtype, fake.shape)], op,
                           [v.name for v in inputs], attrs, source_loc(self.node), region_of(self.node))
        if result:
            self.viewed_result[name] = (name, path)
        elif viewed is not None:
            self.viewed_result[name] = viewed
        value = Value(name, fake, shadow_after(op, inputs, dict(attrs), fake))
        if cast is not None:
            self.casts[cast] = value
        return value

    def constant_values(self, value: Value) -> torch.Tensor | None:
        """The values of `value` where they are known before the step runs: a constant
        tensor of the program (a `torch.tensor(...)` in the model's code, lifted by
        torch.export), or a `fill` (`torch.full`, a scalar `torch.tensor`, `arange`); else None."""
        op = self.written_by(value.name)
        if op is not None and op.op == "fill":
            attrs = dict(op.attrs)
            count = value.fake.numel()
            steps = torch.arange(count, dtype=torch.float64) * attrs.get("step", 0.0) + attrs.get("value", 0.0)
            return steps.reshape(value.shape).to(value.fake.dtype)
        source = self.arg_sources.get(value.name)
        tensor = self.program.constants.get(source) if source is not None else None
        return tensor if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta" else None

    def writes(self, value: Value) -> str | None:
        """The memplan op that wrote `value`, `None` for an argument."""
        op = self.written_by(value.name)
        return op.op if op else None

    def written_by(self, name: str):
        """The op (`step.Op`) that wrote the value `name`, `None` for an argument."""
        return next((op for op in reversed(self.w.ops) if any(out[0] == name for out in op.outputs)), None)

    def emit_multi(self, op: str, inputs: list[Value], fakes: list[torch.Tensor], roles: list[str], attrs=()) -> list[Value]:
        """One op with several outputs, helper values of the node (named path.role)."""
        names = [self.name_for(r, False) for r in roles]
        types = [type_text(f.dtype, f.shape) for f in fakes]
        outs = self.w.op(names, types, op, [v.name for v in inputs], attrs, source_loc(self.node), region_of(self.node))
        return [Value(n, f, dense(f)) for n, f in zip(outs, fakes)]

    def fake_like(self, shape, dtype) -> torch.Tensor:
        with torch._subclasses.fake_tensor.FakeTensorMode():
            return torch.empty(shape, dtype=dtype)


# memplan's views (free) and fills (a value made of nothing): one nothing reads is no part
# of the step.
_UNREAD_DROPPED = {"reshape", "transpose", "expand", "slice", "select", "fill"}

# memplan's views: their output shares its input's bytes (`value.shadow_after`).
_VIEWS = {"reshape", "transpose", "expand", "slice", "select", "detach"}


# -- helpers of the extern fallback -------------------------------------------------------


def _flatten(items):
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from _flatten(item)
        else:
            yield item


# What to do about an op that becomes `extern`, where the library that wrote it offers a
# form memplan can express (said once per export).
_EXTERN_HINTS = {
    "transformers::grouped_mm_fallback": (
        "transformers' grouped_mm experts sort the tokens into groups of data-dependent sizes; build "
        "the model with experts_implementation='batched_mm' (the same values, with ops memplan has)"),
}


def _flops(node) -> int:
    """The FLOPs of `node`: what PyTorch's flop counter counts when the op runs (on the
    node's fake tensors, so a composite op such as `conv3d` is counted through the ops it
    decomposes into), and at least one per output element (the counter counts matmuls and
    convolutions only; an op it does not know still does work for each element it makes)."""
    from torch.utils.flop_counter import FlopCounterMode

    fake = lambda a: a.meta.get("val") if isinstance(a, torch.fx.Node) else a  # noqa: E731
    args = [fake(a) if not isinstance(a, (list, tuple)) else type(a)(fake(x) for x in a) for a in node.args]
    kwargs = {k: fake(v) for k, v in node.kwargs.items()}
    outputs = [v for v in _flatten([node.meta.get("val")]) if isinstance(v, torch.Tensor)]
    tensors = [v for v in _flatten(args + list(kwargs.values())) if isinstance(v, torch.Tensor)]
    if any(isinstance(d, torch.SymInt) for v in outputs + tensors for d in v.shape):
        # A size known only when the step runs: running the op again would make a new
        # symbol of it (and the bound its translation plans with is datadep's to give).
        return 0
    floor = sum(int(v.numel()) for v in outputs)
    mode = getattr(tensors[0], "fake_mode", None) if tensors else None
    if mode is None:
        return floor
    try:
        with mode, FlopCounterMode(display=False) as counter:
            node.target(*args, **kwargs)
        return max(int(counter.get_total_flops()), floor)
    except Exception:  # noqa: BLE001 - an op that cannot run on fake tensors: its elements
        return floor


def _aliased_input(schema, output: int, args):
    """The input that output `output` of `schema` aliases (`Tensor(a)` on both), if any
    (`args`: the node's arguments as translated, so a tensor is a `Value`)."""
    alias = schema.returns[output].alias_info if output < len(schema.returns) else None
    if alias is None or alias.is_write:
        return None
    for argument, value in zip(schema.arguments, args):
        if argument.alias_info is not None and argument.alias_info.before_set & alias.before_set:
            return value
    return None
