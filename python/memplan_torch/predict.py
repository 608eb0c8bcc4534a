"""What PyTorch eager itself will use for one training step on a CUDA device, before running it.

`record()` runs the user's step in PyTorch, on fake tensors (shapes and dtypes, no memory,
no GPU), and writes down every tensor storage it allocates and frees, in the order PyTorch
does: the forward as the user's code runs it, autograd's real backward (its order, the
tensors it saved, freed as it goes), `optimizer.step()` as PyTorch's optimizer runs on
CUDA (the `foreach` implementation, its temporaries included), gradients set to None at
the start of each step as `zero_grad()` does. Storage lifetimes are Python's own: a storage
is freed when PyTorch drops its last reference, observed through a weak reference.

The trace (memplan's allocation-trace format) is then replayed by `memplan replay`, a model
of PyTorch's CUDA caching allocator (rounding, pools, segments, splitting), which says
`torch.cuda.max_memory_allocated()` and `max_memory_reserved()` for the last of the steps.

What runs on the CPU here and on the GPU there differs in a few known places, each handled:
- autocast: `--amp` runs CUDA's autocast policy (`cuda_autocast.py`), not the CPU's;
- the optimizer's step counters live on the host on CUDA (not capturable): left out;
- cuBLAS's workspace, allocated through the caching allocator at the first matrix product
  and kept: one allocation of `CUBLAS_WORKSPACE` bytes (stated apart as a fixed cost).
- CUDA kernels' own scratch (never a tensor): FlashAttention-2's backward (`_cuda_scratch`).
Not modelled: other kernels' scratch (cuDNN's convolution workspaces: ResNet-18 is
predicted 9% under an H100's measurement), several streams, CUDA graphs.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import weakref

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map_only

# PyTorch's default cuBLAS workspace on Hopper GPUs (CUBLAS_WORKSPACE_CONFIG :4096:8,
# 8 chunks of 4096 KiB), allocated from the caching allocator once per handle and stream.
CUBLAS_WORKSPACE = 4096 * 1024 * 8

_MATMULS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "_scaled_dot_product_flash_attention_for_cpu"}


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _cuda_scratch(func, args) -> list[tuple[int, str]]:
    """Tensors CUDA's kernel for `func` allocates for its own use while it runs, that the
    CPU's kernel does not (bytes, what). FlashAttention-2's backward (the kernel PyTorch's
    flash backend runs) accumulates dQ in float32 over rows rounded up to 128 and head
    sizes rounded up to 32, keeps float32 row sums, and with grouped queries computes dK
    and dV for every query head before summing them per key head."""
    if func is not torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default:
        return []
    query, key = args[1], args[2]
    if query.dim() != 4:
        return []
    batch, heads, rows, head_size = query.shape
    key_rows = key.shape[-2]
    scratch = [(4 * batch * _round_up(rows, 128) * heads * _round_up(head_size, 32), "flash attention backward dq accumulator"),
               (4 * batch * heads * _round_up(rows, 128), "flash attention backward row sums")]
    if key.shape[1] != heads:
        expanded = batch * key_rows * heads * head_size * key.element_size()
        scratch += [(expanded, "flash attention backward dk for every query head"), (expanded, "flash attention backward dv for every query head")]
    return scratch


_VIEWS_AND_FREE = {"view", "_unsafe_view", "t", "transpose", "permute", "expand", "slice", "select", "unsqueeze", "squeeze",
                   "alias", "detach", "as_strided", "split", "split_with_sizes", "unbind", "chunk", "narrow", "reshape",
                   "empty", "empty_strided", "empty_like", "zeros", "zeros_like", "ones", "ones_like", "full", "lift_fresh",
                   "_to_copy", "clone", "copy_", "zero_", "fill_", "arange"}


def _real_like(t: torch.Tensor) -> torch.Tensor:
    """A real tensor with `t`'s shape, strides and dtype, holding harmless values
    (floats drawn from [0, 1), integers and booleans zero)."""
    real = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype)
    if real.is_floating_point():
        real.uniform_()
    else:
        real.zero_()
    return real


def _cpu_kernel_scratch(func, args, kwargs) -> int:
    """The bytes the CPU kernel of `func` holds for its own use at its peak, above its
    outputs (convolutions' column buffers, attention's per-thread blocks, ...): measured by
    running it once on real tensors of the same shapes under PyTorch's memory profiler.
    Zero for a kernel that cannot run on made-up values."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.profiler import ProfilerActivity, profile

    with unset_fake_temporarily(), torch.no_grad():
        try:
            real_args, real_kwargs = tree_map_only(torch.Tensor, _real_like, (args, kwargs))
            with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
                out = func(*real_args, **real_kwargs)
            del out
        except Exception:  # noqa: BLE001 - values the kernel refuses: no measurement
            return 0
    live = peak = 0
    for event in prof.profiler.kineto_results.events():
        if event.name() == "[memory]" and event.device_type() == torch.autograd.DeviceType.CPU:
            live += event.nbytes()
            peak = max(peak, live)
    return max(0, peak - live) if live >= 0 else 0


class _Recorder(TorchDispatchMode):
    """Writes an `alloc` event for each new storage an op returns and a `free` event when
    PyTorch releases it (a weak reference's callback)."""

    def __init__(self, phase: list[str], where: list[str], paused: list[bool], cuda: bool):
        super().__init__()
        self.paused = paused
        self.cuda = cuda
        self.cpu_scratch: dict[tuple, int] = {}
        self.events: list[tuple] = []
        self.live: dict[int, int] = {}
        self.next_id = 0
        self.phase = phase
        self.where = where
        self.host: set[int] = set()
        self.workspace = False

    def track(self, tensor: torch.Tensor, label: str) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self.live:
            return
        ident = self.next_id
        self.next_id += 1
        self.live[key] = ident
        self.events.append(("alloc", ident, storage.nbytes(), label))

        def freed(key=key, ident=ident, events=self.events, live=self.live):
            live.pop(key, None)
            events.append(("free", ident))

        weakref.finalize(storage, freed)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        scratch = [] if self.paused else _cuda_scratch(func, args) if self.cuda else self._cpu_scratch(func, args, kwargs or {})
        held = []
        for size, what in scratch:
            self.next_id += 1
            held.append(("scratch", self.next_id))
            self.events.append(("alloc", held[-1], size, f"{what} {self.phase[-1]} {self.where[-1]}".rstrip()))
        out = func(*args, **(kwargs or {}))
        self.events.extend(("free", ident) for ident in reversed(held))
        if self.paused:
            return out
        name = func.overloadpacket.__name__
        if self.cuda and name in _MATMULS and not self.workspace:
            self.workspace = True
            self.events.append(("alloc", -1, CUBLAS_WORKSPACE, "cuBLAS workspace (kept)"))
        label = f"{func.overloadpacket.__name__} {self.phase[-1]} {self.where[-1]}".rstrip()
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.track(t, label)
        return out

    def _cpu_scratch(self, func, args, kwargs) -> list[tuple[int, str]]:
        """The CPU kernel's own scratch (`_cpu_kernel_scratch`), measured once per op and
        argument shapes."""
        if func.namespace != "aten" or func.overloadpacket.__name__ in _VIEWS_AND_FREE:
            return []
        key = (func, *(
            (tuple(a.shape), tuple(a.stride()), a.dtype) if isinstance(a, torch.Tensor) else repr(a)
            for a in tree_leaves((args, kwargs))))
        if key not in self.cpu_scratch:
            self.cpu_scratch[key] = _cpu_kernel_scratch(func, args, kwargs)
        size = self.cpu_scratch[key]
        return [(size, f"{func.overloadpacket.__name__} kernel scratch")] if size else []

    def trace(self) -> str:
        """The events in memplan's allocation-trace format, the host tensors left out."""
        lines = ["# memplan allocation trace (memplan_torch predict): alloc ID BYTES LABEL | free ID | reset"]
        ids = {}
        for event in self.events:
            if event[0] == "reset":
                lines.append("reset")
                continue
            ident = event[1]
            if ident in self.host:
                continue
            if ident not in ids:
                ids[ident] = len(ids)
            if event[0] == "alloc":
                if event[2] > 0:
                    lines.append(f"alloc {ids[ident]} {event[2]} {event[3]}")
                else:
                    self.host.add(ident)
            else:
                lines.append(f"free {ids[ident]}")
        return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _fake_model(model: torch.nn.Module, inputs: tuple, mode: FakeTensorMode):
    """`model`'s parameters and buffers replaced by fake CPU tensors of the same shapes and
    dtypes for the duration (export's `swapped_tensors`); yields the inputs as fake tensors.
    Integer tensors keep their values where they have some (indices)."""
    from .export import swapped_tensors

    def fake(t):
        if not t.is_floating_point() and t.device.type != "meta":
            return mode.from_tensor(t.detach().cpu())
        with mode:
            return torch.empty(t.shape, dtype=t.dtype, device="cpu")

    with swapped_tensors(model, inputs, fake) as fake_inputs:
        yield fake_inputs


def cuda_sdpa_backend(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
                      autocast: torch.dtype | None = None) -> str:
    """The backend PyTorch's `scaled_dot_product_attention` picks on an Ampere or Hopper GPU
    (sdp_utils.cpp, in its order: flash, then memory-efficient, then math), from what each
    accepts: flash takes f16/bf16, no explicit mask, equal head sizes up to 256, and grouped
    queries; memory-efficient takes f32 too and a mask, but not grouped queries (nor, for
    f32, head sizes that are not multiples of 4, or 8 for 16-bit types); math takes all.
    Under `autocast` (a dtype), the inputs are that dtype by the time the choice is made."""
    dims = (query.shape[-1], key.shape[-1], value.shape[-1])
    grouped = enable_gqa and query.dim() >= 3 and query.shape[-3] != key.shape[-3]
    dtype = autocast if autocast is not None and query.dtype in (torch.float32, torch.float16, torch.bfloat16) else query.dtype
    half = dtype in (torch.float16, torch.bfloat16)
    if half and attn_mask is None and dims[0] == dims[1] == dims[2] and dims[0] <= 256 and dims[0] % 8 == 0 and query.dim() == 4:
        return "flash"
    if dtype in (torch.float32, torch.float16, torch.bfloat16) and not grouped and dims[0] == dims[1] \
            and dims[0] % (8 if half else 4) == 0 and dims[2] % (8 if half else 4) == 0:
        return "efficient"
    return "math"


class _FusedRmsNorm(torch.autograd.Function):
    """What CUDA's fused RMS norm (`aten._fused_rms_norm`, which `F.rms_norm` runs on CUDA)
    allocates and saves: the output and the reciprocal RMS, the input and weight saved;
    the CPU runs a composite that saves more. Fake tensors: the values do not matter."""

    @staticmethod
    def forward(ctx, x, weight, dims):
        dtype = torch.result_type(x, weight) if weight is not None else x.dtype
        out = torch.empty(x.shape, dtype=dtype)
        rstd = torch.empty((*x.shape[:x.dim() - dims], *([1] * dims)), dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)
        ctx.save_for_backward(x, weight, rstd)
        return out

    @staticmethod
    def backward(ctx, grad):
        x, weight, _rstd = ctx.saved_tensors
        return torch.empty_like(x), (torch.empty_like(weight) if weight is not None else None), None


class _CudaAttention(TorchFunctionMode):
    """Two ops that run differently on CUDA and on the CPU, as on CUDA.
    `F.scaled_dot_product_attention` through the backend CUDA would pick: where that is
    the math backend (which saves the [.., T, S] attention weights), the CPU runs its math
    backend too; flash and memory-efficient attention save the same tensors as the CPU's
    fused kernel (output and log-sum-exp). `F.rms_norm` as CUDA's fused kernel."""

    def __init__(self, autocast: torch.dtype | None):
        super().__init__()
        self.autocast = autocast

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            if cuda_sdpa_backend(*args, **kwargs, autocast=self.autocast) == "math":
                with sdpa_kernel([SDPBackend.MATH]):
                    return func(*args, **kwargs)
        if func in (torch.nn.functional.rms_norm, torch.rms_norm):
            x, shape = args[0], args[1]
            weight = args[2] if len(args) > 2 else kwargs.get("weight")
            return _FusedRmsNorm.apply(x, weight, len(shape))
        return func(*args, **kwargs)


def _where_hooks(model: torch.nn.Module, where: list[str]):
    """Forward hooks keeping `where[-1]` the qualified name of the module running."""
    handles = []
    for name, module in model.named_modules():
        def pre(_m, _a, name=name):
            where.append(name or "(model)")

        def post(_m, _a, _o):
            where.pop()

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    return handles


OPTIMIZER_DEFAULTS = {"sgd": {"lr": 1e-3}, "momentum": {"lr": 1e-3, "momentum": 0.9}, "adam": {"lr": 1e-3}, "adamw": {"lr": 1e-3, "weight_decay": 1e-2}}


def make_optimizer(name: str, params, lr=None, weight_decay=None, momentum=None):
    """The PyTorch optimizer the exporter's `--optimizer` names, with PyTorch's defaults
    (weight decay 0.01 for AdamW, as the exporter)."""
    if name not in OPTIMIZER_DEFAULTS:
        raise ValueError(f"unknown optimizer {name!r}; the optimizers are {', '.join(OPTIMIZER_DEFAULTS)}")
    given = {"lr": lr, "weight_decay": weight_decay, "momentum": momentum}
    options = {k: (given[k] if given[k] is not None else v) for k, v in OPTIMIZER_DEFAULTS[name].items()}
    params = [p for p in params if p.requires_grad]
    cls = {"sgd": torch.optim.SGD, "momentum": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name]
    return cls(params, **options)


DEVICES = ("cuda", "cpu")


def record(model: torch.nn.Module, inputs: tuple, optimizer="adamw", amp: str | None = None, device: str = "cuda",
           steps: int = 3) -> str:
    """The allocation trace of `steps` training steps of `model(*inputs)` (the loss), with
    a `reset` before the last: that step's peaks are a steady-state step's (the optimizer's
    state exists, the allocator's cache is warm). `optimizer`: a name of
    `make_optimizer`, or a function from the parameters to a `torch.optim` optimizer.
    `device="cuda"`: the step as PyTorch runs it on a CUDA device (see the module docs);
    `"cpu"`: as it runs on the CPU (the CPU's autocast, its optimizer implementation)."""
    from .cuda_autocast import CudaAutocast

    if device not in DEVICES:
        raise ValueError(f"device {device!r}: expected one of {', '.join(DEVICES)}")
    cuda = device == "cuda"
    mode = FakeTensorMode(allow_non_fake_inputs=False)
    phase, where, paused = ["setup"], [""], []
    recorder = _Recorder(phase, where, paused, cuda)
    hooks = []
    was_training = model.training
    model.train()
    try:
        with _fake_model(model, inputs, mode) as fake_inputs:
            hooks = _where_hooks(model, where)
            for name, t in list(model.named_parameters()) + list(model.named_buffers()):
                recorder.track(t, f"{'parameter' if isinstance(t, torch.nn.Parameter) else 'buffer'} {name}")
            for i, x in enumerate(fake_inputs):
                if isinstance(x, torch.Tensor):
                    recorder.track(x, f"input {i}")
            with CudaAutocast(amp if cuda else None, paused) as autocast, mode, recorder:
                opt = make_optimizer(optimizer, model.parameters()) if isinstance(optimizer, str) else optimizer(model.parameters())
                if cuda:
                    # On CUDA tensors PyTorch's optimizers default to their `foreach`
                    # implementation (on the CPU to the per-parameter loop).
                    for group in opt.param_groups:
                        if group.get("foreach") is None and group.get("fused") is not True:
                            group["foreach"] = True

                def forward():
                    if cuda:
                        with autocast.region(), _CudaAttention(autocast.dtype):
                            return model(*fake_inputs)
                    if amp is not None:
                        from .cuda_autocast import AMP
                        with torch.autocast("cpu", dtype=AMP[amp]):
                            return model(*fake_inputs)
                    return model(*fake_inputs)

                loss = None
                for step in range(steps):
                    if step == steps - 1:
                        recorder.events.append(("reset",))
                    phase[-1] = "zero_grad"
                    opt.zero_grad(set_to_none=True)
                    phase[-1] = "forward"
                    loss = forward()
                    phase[-1] = "backward"
                    where.append("")
                    loss.backward()
                    where.pop()
                    phase[-1] = "optimizer"
                    opt.step()
                if cuda:
                    # The step counters of PyTorch's optimizers are host tensors on CUDA.
                    for state in opt.state.values():
                        step_tensor = state.get("step")
                        if isinstance(step_tensor, torch.Tensor):
                            ident = recorder.live.get(step_tensor.untyped_storage()._cdata)
                            if ident is not None:
                                recorder.host.add(ident)
                trace = recorder.trace()
                del loss, opt
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    return trace


def replay(trace: str, memplan: str, expandable_segments: bool = False) -> dict:
    """`memplan replay --format json` on a trace: the caching allocator's figures."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "step.trace")
        with open(path, "w") as f:
            f.write(trace)
        command = [memplan, "replay", path, "--format", "json", "--top", "1000000"] + (["--expandable-segments"] if expandable_segments else [])
        try:
            done = subprocess.run(command, capture_output=True, text=True)
        except OSError as e:
            raise PredictError(f"cannot run memplan ({memplan}): {e.strerror}; build it with `cargo build --release` "
                               "or name it with --memplan") from None
    if done.returncode != 0:
        raise PredictError(f"memplan replay failed ({done.returncode}):\n{done.stderr}")
    return json.loads(done.stdout)


class PredictError(Exception):
    """A prediction that cannot be made (the message says why)."""
