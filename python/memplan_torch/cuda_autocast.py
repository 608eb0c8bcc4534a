"""CUDA's autocast on the fake CPU tensors `predict` runs a step on.

`predict` runs the user's step on fake CPU tensors (the autograd engine will not run
backward on fake CUDA tensors without a GPU), but the step it stands for runs under CUDA's
autocast, whose choices differ from the CPU's (on CUDA, `layer_norm`, `softmax`, `sum`,
`exp` run in float32; on the CPU in bfloat16), and those choices decide the dtypes, so the
bytes, of everything after. So for the duration, every op that has an autocast kernel for
CUDA or for the CPU gets a kernel at the CPU's autocast key that asks CUDA's own autocast
kernel what it would do: the op runs once on fake CUDA twins of its arguments with CUDA
autocast on, the casts CUDA's kernel makes are noted, and the same casts are made to the
CPU tensors (through autograd, as on CUDA) before the op runs on them. An op that the CPU
autocasts and CUDA does not runs as it is. Ops with a `dtype` argument that CUDA's autocast
sets (`softmax`, `sum`, ...) get the same dtype.

CUDA's cast cache is kept as CUDA keeps it: a float32 leaf that requires grad (a weight) is
cast once per autocast region and the cast held until the region ends.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref

import torch
from torch.utils._pytree import tree_map_only

AMP = {"bf16": torch.bfloat16, "f16": torch.float16}


def _autocast_ops() -> tuple[set[str], set[str]]:
    """The ops with an autocast kernel for CUDA, and for the CPU, as the dispatcher has them."""
    names = torch._C._dispatch_get_all_op_names()
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    return {n for n in names if has(n, "AutocastCUDA")}, {n for n in names if has(n, "AutocastCPU")}


def _op(name: str):
    """`aten::softmax.int` -> torch.ops.aten.softmax.int (any namespace: torchvision's
    ops have autocast kernels too)."""
    namespace, _, rest = name.partition("::")
    base, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, namespace), base), overload or "default")


class _Seen(Exception):
    """Raised by the capturing kernel with the arguments autocast's wrapper passed on."""

    def __init__(self, args, kwargs):
        super().__init__("autocast's redispatch")
        self.args, self.kwargs = args, kwargs


def _capture(*args, **kwargs):
    """The kernel at the twins' autograd key: what reaches it is what CUDA's autocast
    wrapper made of the call (its casts done, its dtype set); the op itself never runs."""
    raise _Seen(args, kwargs)


class CudaAutocast:
    """Installs the kernels (see the module docs) while open; `region()` is one autocast
    region (`with torch.autocast("cuda", dtype)` around the forward)."""

    def __init__(self, amp: str | None, paused: list[bool]):
        self.dtype = AMP[amp] if amp is not None else None
        self.paused = paused
        self.cache: dict[int, tuple[weakref.ref, torch.Tensor]] = {}
        self.libraries: dict[str, torch.library.Library] = {}

    def __enter__(self):
        if self.dtype is None:
            return self
        cuda, cpu = _autocast_ops()
        self.libraries = {}
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel": that is the point, for now.
            warnings.simplefilter("ignore", UserWarning)
            self._install(cuda, cpu)
        return self

    def _install(self, cuda: set[str], cpu: set[str]) -> None:
        for name in sorted(cuda | cpu):
            namespace, _, short = name.partition("::")
            if namespace not in self.libraries:
                self.libraries[namespace] = torch.library.Library(namespace, "IMPL")
            library = self.libraries[namespace]
            kernel = self._kernel(_op(name)) if name in cuda else torch.library.fallthrough_kernel
            library.impl(short, kernel, "AutocastCPU", allow_override=True)
            if name in cuda:
                library.impl(short, _capture, "AutogradCUDA", allow_override=True)

    def __exit__(self, *exc):
        for library in self.libraries.values():
            library._destroy()
        self.libraries = {}

    @contextlib.contextmanager
    def region(self):
        if self.dtype is None:
            yield
            return
        was = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
        torch.set_autocast_enabled("cpu", True)
        torch.set_autocast_dtype("cpu", self.dtype)
        try:
            yield
        finally:
            torch.set_autocast_enabled("cpu", was[0])
            torch.set_autocast_dtype("cpu", was[1])
            self.cache.clear()

    def _cuda_choice(self, args, kwargs, op):
        """What CUDA's autocast wrapper passes on for this call, on fake CUDA twins of the
        arguments; `None` if the call never reached the op (a wrapper that redispatches to
        another overload)."""

        def twin(t):
            return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")

        self.paused.append(True)
        was = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
        try:
            cuda_args, cuda_kwargs = tree_map_only(torch.Tensor, twin, (args, kwargs))
            torch.set_autocast_enabled("cuda", True)
            torch.set_autocast_dtype("cuda", self.dtype)
            op(*cuda_args, **cuda_kwargs)
        except _Seen as seen:
            return seen.args, seen.kwargs
        finally:
            torch.set_autocast_enabled("cuda", was[0])
            torch.set_autocast_dtype("cuda", was[1])
            self.paused.pop()
        return None

    def _cast(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """`cached_cast`: a weight's cast is made once per region and kept."""
        if not t.is_floating_point() or t.dtype in (torch.float64, dtype):
            return t
        cache = dtype == self.dtype and t.dtype == torch.float32 and t.requires_grad and t.is_leaf and not t._is_view()
        if cache:
            hit = self.cache.get(id(t))
            if hit is not None and hit[0]() is t:
                return hit[1]
        casted = t.to(dtype)
        if cache:
            self.cache[id(t)] = (weakref.ref(t), casted)
        return casted

    def _kernel(self, op):
        schema = op._schema.arguments

        def by_name(args, kwargs):
            named = {}
            for i, a in enumerate(schema):
                if i < len(args) and not a.kwarg_only:
                    named[a.name] = args[i]
                elif a.name in kwargs:
                    named[a.name] = kwargs[a.name]
            return named

        def cast_like(mine, theirs):
            if isinstance(mine, torch.Tensor) and isinstance(theirs, torch.Tensor):
                return self._cast(mine, theirs.dtype)
            if isinstance(mine, (list, tuple)) and isinstance(theirs, (list, tuple)) and len(mine) == len(theirs):
                return type(mine)(cast_like(m, t) for m, t in zip(mine, theirs))
            return mine

        def kernel(*args, **kwargs):
            with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)):
                seen = self._cuda_choice(args, kwargs, op)
                if seen is None:
                    return op(*args, **kwargs)
                mine, theirs = by_name(args, kwargs), by_name(*seen)
                for name, value in theirs.items():
                    # The wrapper casts tensors and may set a dtype; nothing else changes.
                    mine[name] = cast_like(mine[name], value) if name in mine else value
                    if name == "dtype":
                        mine[name] = value
                return op(**mine)

        return kernel
