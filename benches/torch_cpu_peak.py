"""PyTorch's own peak for one training step on the CPU, beside memplan's arena for the
exported step (benches/BENCHMARKS.md, issue 29).

PyTorch's figure is the most bytes of tensors live at once during one steady-state step
(the optimizer's state already exists; `zero_grad()` sets gradients to None; forward,
`loss.backward()`, `optimizer.step()`), from PyTorch's own memory profile of the step
(`torch.profiler` with `profile_memory=True`, its memory timeline: every allocation and
free, the tensors that existed before the step included). memplan's is the arena
`memplan plan` gives the step `memplan_torch.export_step` writes for the same model, batch
and optimizer (AdamW, PyTorch's defaults).

    MEMPLAN=target/release/memplan PYTHONPATH=python python benches/torch_cpu_peak.py
"""

import os
import re
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import Action, MemoryProfile
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.dirname(__file__))
import checkpoint_blocks  # noqa: E402

import memplan_torch  # noqa: E402


def pytorch_peak(model, inputs) -> int:
    """Peak bytes of live tensors in one steady-state AdamW step of `model(*inputs)`."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(*inputs).backward()
        optimizer.step()

    # The CPU allocator's own events (every allocation and free, in bytes, in order), over
    # every step from before the first: a tensor allocated before a profile starts and
    # freed during it has no free event in the profile's memory timeline ("Memory block of
    # unknown size was allocated before the profiling started"), so profiling only the
    # measured step counts the previous step's gradients, which zero_grad frees, as live
    # throughout. Before the first step only the parameters, buffers and inputs exist, and
    # they live on: they are the baseline. The peak is the most bytes live during the last
    # step, once the optimizer's state exists (a record_function marks that step).
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in [*model.parameters(), *model.buffers(), *(x for x in inputs if isinstance(x, torch.Tensor))]}
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
        step()
        with torch.profiler.record_function("memplan::measured_step"):
            step()
    events = prof.profiler.kineto_results.events()
    marker = next(e for e in events if e.name() == "memplan::measured_step")
    begin, end = marker.start_ns(), marker.end_ns()
    memory = sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
    live = sum(storages.values())
    peak = 0
    for t, nbytes in memory:
        live += nbytes
        if begin <= t <= end:
            peak = max(peak, live)
    return peak


def memplan_arena(model, inputs, *flags) -> int:
    memplan = os.environ.get("MEMPLAN", "target/release/memplan")
    with tempfile.TemporaryDirectory() as tmp:
        step = os.path.join(tmp, "model.step")
        with open(step, "w") as f:
            f.write(memplan_torch.export_step(model, inputs))
        out = subprocess.run([memplan, "plan", step, "--format", "json", *flags], capture_output=True, text=True, check=True)
    return int(re.search(r'"arena_bytes": (\d+)', out.stdout).group(1))


class Recurrence(torch.nn.Module):
    """benches/data/recurrence_64.step: h = tanh(h @ w), 64 steps, one weight."""

    def __init__(self, steps=64, d=256):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(d, d) * 0.05)
        self.steps = steps

    def forward(self, h):
        for _ in range(self.steps):
            h = torch.tanh(h @ self.w)
        return h.sum()


class Swish(torch.autograd.Function):
    """timm's memory-efficient Swish: keeps x only."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * (s * (1 + x * (1 - s)))


class SwishNet(torch.nn.Module):
    def __init__(self, custom, width=256, depth=4):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.head, self.custom = torch.nn.Linear(width, 10), custom

    def forward(self, x, y):
        for layer in self.layers:
            h = layer(x)
            x = Swish.apply(h) if self.custom else h * torch.sigmoid(h)
        return F.cross_entropy(self.head(x), y)


def cases():
    torch.manual_seed(0)
    yield "recurrence, 64 steps", Recurrence(), (torch.randn(8, 256),)
    for name in ("checkpointed", "plain"):
        model, inputs = getattr(checkpoint_blocks, name)()
        yield f"checkpoint_blocks.py:{name}", model, inputs
    batch = (torch.randn(512, 256), torch.randint(0, 10, (512,)))
    yield "Swish as a custom Function", SwishNet(True), batch
    yield "Swish as h * sigmoid(h)", SwishNet(False), batch


def main():
    print("| model | PyTorch CPU peak | memplan arena (program order) | memplan arena (default) | default / PyTorch |")
    print("|---|---:|---:|---:|---:|")
    for name, model, inputs in cases():
        torch_bytes = pytorch_peak(model, inputs)
        program = memplan_arena(model, inputs, "--schedule", "program")
        default = memplan_arena(model, inputs)
        print(f"| {name} | {torch_bytes:,} B | {program:,} B | {default:,} B | {default / torch_bytes:.3f} |")


if __name__ == "__main__":
    main()
