"""ATen graph -> memplan step: one handler per ATen op.

Input: the forward graph `torch.export` captured (its training IR: high-level ATen ops such
as `linear`, `scaled_dot_product_attention`, `rms_norm`, `cross_entropy_loss`, kept whole).
Each node becomes memplan ops; every output is written with the type PyTorch's fake tensor
gives it, so memplan's verifier re-checks every shape. The step ends with the loss and a
`backward` statement: memplan's own autodiff writes the gradients and the optimizer
update (docs/AUTODIFF.md), so the exported step is the whole training step.

Views stay views: `view`, `reshape`, `flatten`, `unsqueeze`, `squeeze`, `transpose`,
`permute`, `t`, `expand`, `slice`, `select`, `narrow`, `split`, `chunk` and `unbind` become
memplan's `reshape`, `transpose`, `expand`, `slice` and `select`, which share their input's
bytes exactly as PyTorch's storage does (memplan's `reshape` is a view where PyTorch's
`view` is one). A `reshape` PyTorch must copy is a `contiguous` copy first, as in PyTorch.
Identity ops (`alias`, `detach`, `contiguous` and `clone` of dense data, `dropout` with p=0
or in eval mode) emit nothing.

An ATen op without a handler (or in a form its handler cannot express, which it says by
raising `ExportError` before writing anything) becomes an `extern` op: its name, output
types, aliasing (from the op's schema) and FLOPs (from PyTorch's flop counter), so any
model plans. Mixed dtypes are promoted as PyTorch does, with `cast`s. An f32 loss of
f16/bf16 logits (CUDA autocast's cross_entropy, or the model's own cast that nothing else
reads) is one `cross_entropy(..., f32_loss=true)`: no f32 copy of the logits.

Names: an op's output is named after the module that computes it (its `nn_module_stack`
path): a module's result is the module path itself (`blocks.3.attn.q_proj`), other values
are `path.op` (`blocks.3.attn.transpose`), the loss is `loss`; parameters and buffers keep
their state-dict names. Each op carries the source line of the user's code that called it
(the innermost stack frame outside torch itself) and the module path, as
`loc("model.py":42, "blocks.3.attn")`.
"""

from __future__ import annotations

import math
import operator
import os
import re
from dataclasses import dataclass

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from .step import ExportError, StepWriter, type_text

_TORCH_DIR = os.path.dirname(torch.__file__)
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ')


@dataclass(frozen=True)
class Value:
    """A memplan value and PyTorch's fake tensor for it (dtype, shape, strides)."""

    name: str
    fake: torch.Tensor
    # The value's layout as memplan sees it, on the meta device: a dense tensor for a value
    # that owns its bytes, the same view ops applied to it for a view. memplan's views
    # follow PyTorch's own rules (its reshape is a view where `Tensor.view` is one), so
    # asking this tensor answers what memplan will accept; PyTorch's own strides for the
    # value may differ (a `clone` keeps a permuted layout, memplan's `contiguous` does not).
    shadow: torch.Tensor | None = None

    @property
    def type(self) -> str:
        return type_text(self.fake.dtype, self.fake.shape)

    @property
    def shape(self) -> list[int]:
        return [int(d) for d in self.fake.shape]

    @property
    def rank(self) -> int:
        return len(self.fake.shape)


def source_loc(node) -> tuple[str, int, str | None] | None:
    """The innermost frame of `node`'s stack trace outside torch (file name, line), and the
    path of the module computing it (`None` where torch.export recorded none)."""
    trace = node.meta.get("stack_trace") or ""
    frames = [(f, int(line)) for f, line in _FRAME.findall(trace)]
    user = [(f, line) for f, line in frames if not os.path.abspath(f).startswith(_TORCH_DIR)]
    if not user:
        return None
    file, line = user[-1]
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
        self.arg_sources: dict[str, str] = {}  # memplan argument name -> state-dict or input name

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
                outs = node.args[0]
                loss = self.env.get(outs[0]) if len(outs) >= 1 else None
        if not isinstance(loss, Value):
            raise ExportError("the model must return its loss (a scalar tensor) first")
        if loss.rank != 0 or not loss.fake.dtype.is_floating_point:
            raise ExportError(f"the model returned {loss.type}, not a float scalar loss")
        return loss

    def _plan_names(self, graph):
        """Which nodes are a module's result (named after the module itself), and the loss
        (named `loss`)."""
        self.result_of_module: set[torch.fx.Node] = set()
        outputs = [n for n in graph.nodes if n.op == "output"]
        self.loss_node = outputs[0].args[0][0] if outputs and outputs[0].args[0] else None
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            path = module_path(node)
            if not path:
                continue
            for user in node.users:
                user_path = module_path(user) if user.op == "call_function" else ""
                if user.op == "output" or not (user_path == path or user_path.startswith(path + ".")):
                    self.result_of_module.add(node)
                    break

    def arguments(self):
        """The step's arguments: parameters, buffers and constants (by their state-dict
        names), and the user's inputs (by the forward's parameter names)."""
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
            if spec.kind == InputKind.PARAMETER:
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
        target = node.target
        if target is operator.getitem:
            self.env[node] = self.env[node.args[0]][node.args[1]]
            return
        args = [self._resolve(a) for a in node.args]
        kwargs = {k: self._resolve(v) for k, v in node.kwargs.items()}
        handler = HANDLERS.get(str(target))
        if handler is not None:
            emitted = len(self.w.ops)
            try:
                self.env[node] = handler(self, *args, **kwargs)
                return
            except ExportError:
                # A form of the op memplan has no op for (conv2d with groups, say): written
                # as `extern` below, unless the handler had begun writing ops.
                if len(self.w.ops) != emitted:
                    raise
        self.env[node] = self._extern(node, args, kwargs)

    def _extern(self, node, args, kwargs):
        """`node` as `extern` ops, one per tensor output (see `extern` in docs/IR.md):
        the op's name, its outputs' types, the FLOPs PyTorch's flop counter gives, and
        `extern_view` where the op's schema says an output aliases an input."""
        schema = getattr(node.target, "_schema", None)
        if schema is None:
            raise ExportError(f"{node.name}: {node.target} is not an ATen op, so memplan cannot even write it as extern")
        target = f"{schema.name}.{schema.overload_name or 'default'}"
        inputs = [a for a in _flatten(list(args) + list(kwargs.values())) if isinstance(a, Value)]
        val = node.meta.get("val")
        outputs = list(val) if isinstance(val, (list, tuple)) else [val]
        flops = _flops(node)
        results = []
        for i, fake in enumerate(outputs):
            if not isinstance(fake, torch.Tensor):
                results.append(fake)
                continue
            attrs = [("target", target), ("shape", [int(d) for d in fake.shape]), ("dtype", fake.dtype)]
            aliased = _aliased_input(schema, i, node.args)
            final = i == 0
            if aliased is not None and isinstance(aliased, Value):
                results.append(self.emit("extern_view", [aliased], attrs, fake=fake, final=final, role=schema.name.split("::")[-1]))
            else:
                attrs.append(("flops", flops if i == 0 else 0))
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
        [name] = self.w.op([self.name_for(role or op, final)], [type_text(fake.dtype, fake.shape)], op,
                           [v.name for v in inputs], attrs, source_loc(self.node))
        return Value(name, fake, _shadow_after(op, inputs, dict(attrs), fake))

    def emit_multi(self, op: str, inputs: list[Value], fakes: list[torch.Tensor], roles: list[str], attrs=()) -> list[Value]:
        """One op with several outputs, helper values of the node (named path.role)."""
        names = [self.name_for(r, False) for r in roles]
        types = [type_text(f.dtype, f.shape) for f in fakes]
        outs = self.w.op(names, types, op, [v.name for v in inputs], attrs, source_loc(self.node))
        return [Value(n, f, _dense(f)) for n, f in zip(outs, fakes)]

    def fake_like(self, shape, dtype) -> torch.Tensor:
        with torch._subclasses.fake_tensor.FakeTensorMode():
            return torch.empty(shape, dtype=dtype)


# -- helpers for handlers ----------------------------------------------------------------


def _flatten(items):
    for item in items:
        if isinstance(item, (list, tuple)):
            yield from _flatten(item)
        else:
            yield item


def _flops(node) -> int:
    """The FLOPs of `node` by PyTorch's flop counter (0 for ops it does not count)."""
    from torch.utils.flop_counter import flop_registry

    count = flop_registry.get(node.target.overloadpacket)
    if count is None:
        return 0
    fake = lambda a: a.meta.get("val") if isinstance(a, torch.fx.Node) else a  # noqa: E731
    try:
        args = [fake(a) if not isinstance(a, (list, tuple)) else type(a)(fake(x) for x in a) for a in node.args]
        kwargs = {k: fake(v) for k, v in node.kwargs.items()}
        return int(count(*args, out_val=node.meta.get("val"), **kwargs))
    except Exception:  # noqa: BLE001 - a counter that cannot read these arguments counts nothing
        return 0


def _aliased_input(schema, output: int, args):
    """The input that output `output` of `schema` aliases (`Tensor(a)` on both), if any."""
    alias = schema.returns[output].alias_info if output < len(schema.returns) else None
    if alias is None or alias.is_write:
        return None
    for argument, value in zip(schema.arguments, args):
        if argument.alias_info is not None and argument.alias_info.before_set & alias.before_set:
            return value
    return None


def _dense(fake: torch.Tensor) -> torch.Tensor:
    return torch.empty(fake.shape, dtype=fake.dtype, device="meta")


def shadow(value: Value) -> torch.Tensor:
    return value.shadow if value.shadow is not None else _dense(value.fake)


def _shadow_after(op: str, inputs: list[Value], attrs: dict, fake) -> torch.Tensor:
    """memplan's layout of `op`'s output (see `Value.shadow`)."""
    if op == "reshape":
        return shadow(inputs[0]).view(list(fake.shape))
    if op == "transpose":
        return shadow(inputs[0]).permute(list(attrs["perm"]))
    if op == "expand":
        return shadow(inputs[0]).expand(list(fake.shape))
    if op == "slice":
        index = (slice(None),) * attrs["axis"] + (slice(attrs["start"], attrs["end"], attrs.get("step", 1)),)
        return shadow(inputs[0])[index]
    if op == "select":
        return shadow(inputs[0]).select(attrs["axis"], attrs["index"])
    return _dense(fake)


def _viewable(x: Value, shape) -> bool:
    """Whether memplan's `reshape` of `x` to `shape` is a view (else it needs a copy)."""
    try:
        shadow(x).view(list(shape))
        return True
    except RuntimeError:
        return False


def _dims(t: Translator, value: Value, dims) -> list[int]:
    return [d % value.rank if value.rank else 0 for d in ([dims] if isinstance(dims, int) else dims)]


def _reshape(t: Translator, x: Value, final=True) -> Value:
    """`x` under the node's output shape: a view where memplan's layout of `x` allows one (as
    PyTorch's `view` would), else a `contiguous` copy first (as PyTorch's `reshape` makes)."""
    out = t.out_fake()
    if list(out.shape) == x.shape:
        return x
    if not _viewable(x, out.shape):
        x = t.emit("contiguous", [x], fake=x.fake, final=False)
    return t.emit("reshape", [x], [("shape", [int(d) for d in out.shape])], final=final)


def _promoted(t: Translator, *values: Value) -> list[Value]:
    """`values` cast to the dtype of the node's output: PyTorch promotes mixed dtypes (an f32
    residual plus a bf16 branch under autocast is f32), memplan's ops take one dtype."""
    dtype = t.out_fake().dtype
    return [_cast_to(t, v, dtype) for v in values]


def _scalar_or_tensor(t: Translator, a, b, tensor_op: str, scalar_fn):
    if isinstance(a, Value) and isinstance(b, Value):
        return t.emit(tensor_op, _promoted(t, a, b))
    if isinstance(a, Value):
        return scalar_fn(a, float(b))
    raise ExportError(f"{tensor_op} with a Python number first ({a!r}) is not supported")


# -- the handlers ------------------------------------------------------------------------


def linear(t, x, w, b=None):
    if b is None:
        return t.emit("matmul", [x, w], [("transpose_b", True)])
    mm_fake = t.out_fake()
    mm = t.emit("matmul", [x, w], [("transpose_b", True)], fake=mm_fake, final=False, role="mm")
    return t.emit("add", [mm, b])


def matmul(t, a, b):
    if a.rank < 2 or b.rank < 2:
        raise ExportError(f"matmul of a vector ({a.type} @ {b.type}) is not supported")
    return t.emit("matmul", [a, b])


def add(t, a, b, alpha=1):
    if alpha != 1:
        b = t.emit("mul_scalar", [b], [("value", float(alpha))], fake=b.fake, final=False)
    return _scalar_or_tensor(t, a, b, "add", lambda x, s: t.emit("add_scalar", [x], [("value", s)]))


def sub(t, a, b, alpha=1):
    if isinstance(b, Value):
        if alpha != 1:
            b = t.emit("mul_scalar", [b], [("value", float(alpha))], fake=b.fake, final=False)
        return t.emit("sub", _promoted(t, a, b))
    return t.emit("add_scalar", [a], [("value", -float(b) * alpha)])


def mul(t, a, b):
    if not isinstance(a, Value):
        a, b = b, a
    return _scalar_or_tensor(t, a, b, "mul", lambda x, s: t.emit("mul_scalar", [x], [("value", s)]))


def div(t, a, b, rounding_mode=None):
    if rounding_mode is not None:
        raise ExportError(f"div with rounding_mode={rounding_mode!r} is not supported")
    return _scalar_or_tensor(t, a, b, "div", lambda x, s: t.emit("mul_scalar", [x], [("value", 1.0 / s)]))


def unary(op):
    return lambda t, x: t.emit(op, [x])


def gelu(t, x, approximate="none"):
    return t.emit("gelu", [x], [] if approximate == "tanh" else [("approximate", False)])


def pow_scalar(t, x, exponent):
    if isinstance(exponent, Value):
        raise ExportError("pow with a tensor exponent is not supported")
    return t.emit("pow_scalar", [x], [("exponent", float(exponent))])


def view(t, x, *_shape):
    return _reshape(t, x)


def transpose(t, x, d0, d1):
    perm = list(range(x.rank))
    d0, d1 = d0 % x.rank, d1 % x.rank
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return t.emit("transpose", [x], [("perm", perm)])


def permute(t, x, dims):
    return t.emit("transpose", [x], [("perm", _dims(t, x, dims))])


def t_(t, x):
    if x.rank < 2:
        return x
    return t.emit("transpose", [x], [("perm", [1, 0])])


def expand(t, x, sizes, implicit=False):
    out = t.out_fake()
    if list(out.shape) == x.shape:
        return x
    return t.emit("expand", [x], [("shape", [int(d) for d in out.shape])])


def contiguous(t, x, memory_format=None):
    return x if shadow(x).is_contiguous() else t.emit("contiguous", [x])


def clone(t, x, memory_format=None):
    """A copy in PyTorch; in a functional graph nothing writes either copy afterwards, so a
    dense value is its own clone (as torch.compile treats it) and only a strided one needs
    `contiguous`."""
    return contiguous(t, x)


def alias(t, x, *_):
    return x


def _bounds(size: int, start, end) -> tuple[int, int]:
    """PyTorch's slice bounds: negative counts from the end, then clamped to 0..size."""
    start = 0 if start is None else start
    end = size if end is None else end
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    start = min(max(start, 0), size)
    return start, min(max(end, start), size)


def _slice_of(t, x, axis: int, start: int, end: int, step: int = 1, final=True, fake=None) -> Value:
    if start == 0 and end == x.shape[axis] and step == 1:
        return x
    if fake is None:
        fake = shadow(x)[(slice(None),) * axis + (slice(start, end, step),)]
    attrs = [("axis", axis), ("start", start), ("end", end)] + ([("step", step)] if step != 1 else [])
    return t.emit("slice", [x], attrs, fake=torch.empty(fake.shape, dtype=x.fake.dtype, device="meta"), final=final)


def slice_(t, x, dim=0, start=None, end=None, step=1):
    axis = dim % x.rank
    start, end = _bounds(x.shape[axis], start, end)
    return _slice_of(t, x, axis, start, end, step)


def narrow(t, x, dim, start, length):
    axis = dim % x.rank
    start = start + x.shape[axis] if start < 0 else start
    return _slice_of(t, x, axis, start, start + length)


def select(t, x, dim, index):
    axis = dim % x.rank
    index = index + x.shape[axis] if index < 0 else index
    return t.emit("select", [x], [("axis", axis), ("index", index)])


def _pieces(t, x, axis: int, sizes) -> tuple:
    out, start = [], 0
    for size in sizes:
        out.append(_slice_of(t, x, axis, start, start + size, final=False))
        start += size
    return tuple(out)


def split(t, x, split_size, dim=0):
    axis = dim % x.rank
    n = x.shape[axis]
    sizes = [min(split_size, n - s) for s in range(0, n, split_size)] if isinstance(split_size, int) else list(split_size)
    return _pieces(t, x, axis, sizes)


def chunk(t, x, chunks, dim=0):
    axis = dim % x.rank
    size = -(-x.shape[axis] // chunks)
    return split(t, x, size, axis)


def unbind(t, x, dim=0):
    axis = dim % x.rank
    return tuple(t.emit("select", [x], [("axis", axis), ("index", i)], fake=t.fake_like(
        x.shape[:axis] + x.shape[axis + 1:], x.fake.dtype), final=False) for i in range(x.shape[axis]))


def cat(t, tensors, dim=0):
    tensors = [v for v in tensors if v.fake.numel() > 0 or len(tensors) == 1]
    axis = dim % tensors[0].rank
    return t.emit("cat", _promoted(t, *tensors), [("axis", axis)])


def stack(t, tensors, dim=0):
    rank = tensors[0].rank + 1
    axis = dim % rank
    expanded = []
    for v in tensors:
        shape = v.shape[:axis] + [1] + v.shape[axis:]
        fake = t.fake_like(shape, v.fake.dtype)
        x = v if _viewable(v, shape) else t.emit("contiguous", [v], fake=v.fake, final=False)
        expanded.append(t.emit("reshape", [x], [("shape", shape)], fake=fake, final=False))
    return t.emit("cat", expanded, [("axis", axis)])


def _cast_to(t, x: Value, dtype) -> Value:
    """`x` in `dtype` (itself if it has it): the cast an op's `dtype=` argument asks for."""
    if dtype is None or dtype == x.fake.dtype:
        return x
    return t.emit("cast", [x], [("to", dtype)], fake=t.fake_like(x.shape, dtype), final=False)


def softmax(t, x, dim, dtype=None):
    x = _cast_to(t, x, dtype)
    return t.emit("softmax", [x], [("axis", dim % x.rank)] if dim % x.rank != x.rank - 1 else [])


def softmax_internal(t, x, dim, half_to_float=False):
    return softmax(t, x, dim, torch.float32 if half_to_float else None)


def reduce(op):
    def handler(t, x, dims=None, keepdim=False, dtype=None):
        x = _cast_to(t, x, dtype)
        axes = list(range(x.rank)) if dims is None or dims == [] else _dims(t, x, dims)
        attrs = [("axes", axes)] + ([("keepdim", True)] if keepdim else [])
        return t.emit(op, [x], attrs)

    return handler


def embedding(t, weight, ids, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if scale_grad_by_freq or sparse:
        raise ExportError("embedding with scale_grad_by_freq or sparse gradients is not supported")
    return t.emit("embedding", [weight, ids])


def _constant(t, shape, dtype, value, role) -> Value:
    fake = t.fake_like(shape, dtype)
    attrs = [("shape", list(shape)), ("dtype", dtype), ("value", float(value))]
    return t.emit("fill", [], attrs, fake=fake, final=False, role=role)


def layer_norm(t, x, shape, weight=None, bias=None, eps=1e-5, cudnn_enable=True):
    if len(shape) != 1:
        raise ExportError(f"layer_norm over {len(shape)} dimensions is not supported (only the last)")
    d = int(shape[0])
    weight = weight if weight is not None else _constant(t, [d], x.fake.dtype, 1.0, "gamma")
    bias = bias if bias is not None else _constant(t, [d], x.fake.dtype, 0.0, "beta")
    return t.emit("layer_norm", [x, weight, bias], [("eps", float(eps))])


def rms_norm(t, x, shape, weight=None, eps=None):
    if len(shape) != 1:
        raise ExportError(f"rms_norm over {len(shape)} dimensions is not supported (only the last)")
    eps = torch.finfo(x.fake.dtype).eps if eps is None else eps
    weight = weight if weight is not None else _constant(t, [int(shape[0])], x.fake.dtype, 1.0, "gamma")
    return t.emit("rms_norm", [x, weight], [("eps", float(eps))])


def _bias_per_channel(t, y: Value, bias: Value | None, spatial: int) -> Value:
    if bias is None:
        return y
    shaped_fake = t.fake_like([bias.shape[0]] + [1] * spatial, bias.fake.dtype)
    shaped = t.emit("reshape", [bias], [("shape", [bias.shape[0]] + [1] * spatial)], fake=shaped_fake, final=False,
                    role="bias")
    return t.emit("add", [y, shaped])


def _conv_attrs(stride, padding, dilation, groups, output_padding=None) -> list:
    """conv attributes as memplan writes them: the defaults left out."""
    if isinstance(padding, str):
        raise ExportError(f"convolution with padding={padding!r} is not supported (give the numbers)")
    pair = lambda v: list(v) * (2 // len(v)) if len(v) else [0, 0]  # noqa: E731 - [k] means [k, k]
    attrs = [("stride", pair(stride)), ("padding", pair(padding))]
    if output_padding is not None and pair(output_padding) != [0, 0]:
        attrs.append(("output_padding", pair(output_padding)))
    if pair(dilation) != [1, 1]:
        attrs.append(("dilation", pair(dilation)))
    if groups != 1:
        attrs.append(("groups", int(groups)))
    return attrs


def conv2d(t, x, w, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    y = t.emit("conv2d", [x, w], _conv_attrs(stride, padding, dilation, groups), final=bias is None, role="conv")
    return _bias_per_channel(t, y, bias, 2)


def conv_transpose2d(t, x, w, bias=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0), groups=1,
                     dilation=(1, 1)):
    attrs = _conv_attrs(stride, padding, dilation, groups, output_padding)
    y = t.emit("conv_transpose2d", [x, w], attrs, final=bias is None, role="conv_transpose")
    return _bias_per_channel(t, y, bias, 2)


def batch_norm(t, x, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled=True):
    if not training:
        raise ExportError("batch_norm in eval mode is not supported (export the model in train mode)")
    c = x.shape[1]
    weight = weight if weight is not None else _constant(t, [c], x.fake.dtype, 1.0, "gamma")
    bias = bias if bias is not None else _constant(t, [c], x.fake.dtype, 0.0, "beta")
    return t.emit("batch_norm", [x, weight, bias], [("eps", float(eps))])


def max_pool2d(t, x, kernel, stride=(), padding=(0, 0), dilation=(1, 1), ceil_mode=False):
    if ceil_mode or list(dilation) != [1, 1]:
        raise ExportError("max_pool2d with ceil_mode or dilation is not supported")
    kernel = list(kernel) * (2 // len(kernel))
    stride = list(stride) * (2 // len(stride)) if stride else kernel
    padding = list(padding) * (2 // len(padding))
    return t.emit("max_pool2d", [x], [("kernel", kernel), ("stride", stride), ("padding", padding)])


def adaptive_avg_pool2d(t, x, output_size):
    size = [int(d) for d in output_size]
    if size == [1, 1]:
        # Global pooling is a mean: its gradient is a broadcast view, no buffer.
        return t.emit("mean", [x], [("axes", [x.rank - 2, x.rank - 1]), ("keepdim", True)])
    if x.rank != 4:
        raise ExportError(f"adaptive_avg_pool2d of a rank-{x.rank} tensor (memplan's takes [N,C,H,W])")
    return t.emit("adaptive_avg_pool2d", [x], [("output_size", size)])


def upsample_nearest2d(t, x, output_size=None, scale_factors=None):
    out = t.out_fake()
    if scale_factors is not None and any(float(f) != int(f) for f in scale_factors):
        raise ExportError(f"nearest upsampling by scale factors {list(scale_factors)} (memplan matches PyTorch for sizes and integer factors)")
    return t.emit("upsample_nearest2d", [x], [("output_size", [int(d) for d in out.shape[2:]])])


def bce_with_logits(t, logits, targets, weight=None, pos_weight=None, reduction=1):
    if weight is not None or pos_weight is not None or reduction != 1:
        raise ExportError("binary_cross_entropy_with_logits with weights or reduction other than 'mean' is not supported")
    # (CUDA autocast's f32 policy for this op is in the captured graph: its casts come first.)
    return t.emit("bce_with_logits", [logits, targets], fake=t.fake_like([], logits.fake.dtype), role="bce_with_logits")


def where(t, cond, a, b):
    dtype = t.out_fake().dtype
    a = a if isinstance(a, Value) else _constant(t, [], dtype, a, "scalar")
    b = b if isinstance(b, Value) else _constant(t, [], dtype, b, "scalar")
    return t.emit("where", [cond, *_promoted(t, a, b)])


def masked_fill(t, x, mask, value):
    if isinstance(value, Value):
        raise ExportError("masked_fill with a tensor value is not supported (give a number)")
    return t.emit("masked_fill", [x, mask], [("value", float(value))])


_HALF = (torch.float16, torch.bfloat16)


def _fold_f32_cast(t, logits: Value) -> Value | None:
    """The f16/bf16 value that `logits` (the node's first argument) is a cast to f32 of,
    with that cast removed from the step, when nothing else reads the cast (the loss reads
    it alone, nothing returns it): memplan's `cross_entropy(x, f32_loss=true)` reads the
    half values as f32 itself, so the f32 copy, twice the logits' bytes, never exists."""
    node = t.node.args[0]
    if str(node.target) not in ("aten._to_copy.default", "aten.to.dtype") or len(node.users) != 1:
        return None
    source = t.env[node.args[0]]
    if logits.fake.dtype != torch.float32 or not isinstance(source, Value) or source.fake.dtype not in _HALF:
        return None
    cast = next((op for op in t.w.ops if op.outputs[0][0] == logits.name), None)
    if cast is None or cast.op != "cast" or cast.inputs != [source.name] or any(logits.name in op.inputs for op in t.w.ops):
        return None
    t.w.remove(cast)
    return source


def cross_entropy(t, logits, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0):
    if weight is not None or reduction != 1:
        raise ExportError("cross_entropy with class weights or reduction other than 'mean' is not supported")
    if logits.rank != 2:
        raise ExportError(f"cross_entropy of {logits.type} logits: only [N, C] is supported (flatten first)")
    # An f32 loss of f16/bf16 logits, as one op: the logits are read as f32 inside it (exactly,
    # every half value being an f32 value). Either the model casts them itself and nothing
    # else reads the cast, or CUDA autocast does, inside cross_entropy (whose log_softmax and
    # nll_loss it runs in f32): that cast is in no captured graph, so it is never written.
    source = _fold_f32_cast(t, logits)
    f32_loss = source is not None or (t.amp and logits.fake.dtype in _HALF)
    logits = source or logits
    attrs = []
    if ignore_index != -100:
        attrs.append(("ignore_index", int(ignore_index)))
    if label_smoothing:
        attrs.append(("label_smoothing", float(label_smoothing)))
    if f32_loss:
        attrs.append(("f32_loss", True))
    loss = t.fake_like([], torch.float32) if f32_loss else None
    return t.emit("cross_entropy", [logits, target], attrs, fake=loss, role="cross_entropy")


def dropout(t, x, p, train):
    """memplan's seeded dropout: the step's `dropout_seed` input (one i64[] scalar the
    training loop feeds fresh each step) and a stream per dropout site, in order. Its
    masks are memplan's, not PyTorch's: the same in distribution, not element for element."""
    if not train or p == 0:
        return x
    return t.emit("dropout", [x, t.dropout_seed()], [("p", float(p)), ("stream", t.next_stream())])


def attention(t, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    if attn_mask is not None:
        raise ExportError("scaled_dot_product_attention with attn_mask is not supported (use is_causal)")
    if dropout_p:
        raise ExportError("scaled_dot_product_attention with dropout_p > 0 is not supported")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    # PyTorch's flash attention writes out [..., T, H, Ev] and returns a transposed view of it,
    # so the usual `y.transpose(1, 2).contiguous().view(B, T, C)` copies nothing: the same
    # here with `transpose_out` (else the copy would be kept beside out until the backward).
    out = t.out_fake()
    perm = list(range(q.rank))
    perm[-3], perm[-2] = perm[-2], perm[-3]
    rows_first = t.fake_like([out.shape[d] for d in perm], out.dtype)
    lse = t.fake_like(out.shape[:-1], torch.float32)
    attrs = [("causal", True)] if is_causal else []
    attrs += [("scale", scale), ("transpose_out", True)]
    result, _lse = t.emit_multi("attention", [q, k, v], [rows_first, lse], ["attention", "attention.lse"], attrs)
    return t.emit("transpose", [result], [("perm", perm)], fake=out)


def to_dtype(t, x, dtype=None, *rest, **kwargs):
    dtype = kwargs.get("dtype", dtype)
    if dtype is None or dtype == x.fake.dtype:
        return x
    return t.emit("cast", [x], [("to", dtype)])


def buffer_update(t, buffer, *_args, **_kwargs):
    """An in-place update of a buffer (BatchNorm's `num_batches_tracked += 1`): the step
    does not model it, as memplan's `batch_norm` keeps no running statistics either."""
    if t.roles.get(buffer.name) != "state":
        raise ExportError(f"in-place {t.node.target} on a value that is not a buffer ({buffer.name})")
    return buffer


def full(t, size, fill_value, dtype=None, layout=None, device=None, pin_memory=None):
    fake = t.out_fake()
    return t.emit("fill", [], [("shape", [int(d) for d in size]), ("dtype", fake.dtype), ("value", float(fill_value))])


def arange(t, *numbers, **_options):
    """`torch.arange(end)`, `(start, end)` or `(start, end, step)` as a `fill` with a step."""
    start, step = (0, 1) if len(numbers) == 1 else (numbers[0], numbers[2] if len(numbers) > 2 else 1)
    fake = t.out_fake()
    attrs = [("shape", [int(d) for d in fake.shape]), ("dtype", fake.dtype)]
    attrs += [("value", float(start))] if start != 0 else []
    return t.emit("fill", [], attrs + [("step", float(step))], role="arange")


HANDLERS = {
    "aten.linear.default": linear,
    "aten.matmul.default": matmul,
    "aten.mm.default": matmul,
    "aten.bmm.default": matmul,
    "aten.add.Tensor": add,
    "aten.sub.Tensor": sub,
    "aten.mul.Tensor": mul,
    "aten.div.Tensor": div,
    "aten.div.Tensor_mode": div,
    "aten.relu.default": unary("relu"),
    "aten.gelu.default": gelu,
    "aten.silu.default": unary("silu"),
    "aten.sigmoid.default": unary("sigmoid"),
    "aten.tanh.default": unary("tanh"),
    "aten.hardswish.default": unary("hardswish"),
    "aten.exp.default": unary("exp"),
    "aten.log.default": unary("log"),
    "aten.neg.default": unary("neg"),
    "aten.sqrt.default": unary("sqrt"),
    "aten.rsqrt.default": unary("rsqrt"),
    "aten.pow.Tensor_Scalar": pow_scalar,
    "aten.view.default": view,
    "aten.reshape.default": view,
    "aten._unsafe_view.default": view,
    "aten.flatten.using_ints": view,
    "aten.unsqueeze.default": view,
    "aten.squeeze.dim": view,
    "aten.squeeze.dims": view,
    "aten.squeeze.default": view,
    "aten.transpose.int": transpose,
    "aten.permute.default": permute,
    "aten.t.default": t_,
    "aten.expand.default": expand,
    "aten.slice.Tensor": slice_,
    "aten.narrow.default": narrow,
    "aten.select.int": select,
    "aten.split.Tensor": split,
    "aten.split_with_sizes.default": split,
    "aten.chunk.default": chunk,
    "aten.unbind.int": unbind,
    "aten.cat.default": cat,
    "aten.stack.default": stack,
    "aten.contiguous.default": contiguous,
    "aten.clone.default": clone,
    "aten.alias.default": alias,
    "aten.detach.default": alias,
    "aten.softmax.int": softmax,
    "aten._softmax.default": softmax_internal,
    "aten.mean.dim": reduce("mean"),
    "aten.mean.default": reduce("mean"),
    "aten.sum.dim_IntList": reduce("sum"),
    "aten.sum.default": reduce("sum"),
    "aten.embedding.default": embedding,
    "aten.layer_norm.default": layer_norm,
    "aten.rms_norm.default": rms_norm,
    "aten.conv2d.default": conv2d,
    "aten.batch_norm.default": batch_norm,
    "aten.max_pool2d.default": max_pool2d,
    "aten.adaptive_avg_pool2d.default": adaptive_avg_pool2d,
    "aten.cross_entropy_loss.default": cross_entropy,
    "aten.binary_cross_entropy_with_logits.default": bce_with_logits,
    "aten.conv_transpose2d.input": conv_transpose2d,
    "aten.upsample_nearest2d.vec": upsample_nearest2d,
    "aten.upsample_nearest2d.default": upsample_nearest2d,
    "aten.where.self": where,
    "aten.where.ScalarOther": where,
    "aten.where.ScalarSelf": where,
    "aten.where.Scalar": where,
    "aten.masked_fill.Scalar": masked_fill,
    "aten.dropout.default": dropout,
    "aten.scaled_dot_product_attention.default": attention,
    "aten.to.dtype": to_dtype,
    "aten._to_copy.default": to_dtype,
    "aten.full.default": full,
    "aten.arange.default": arange,
    "aten.arange.start": arange,
    "aten.arange.start_step": arange,
    "aten.add_.Tensor": buffer_update,
}
