"""Checkpointing advice PyTorch can apply: which modules to wrap in `torch.utils.checkpoint`
for a training step to fit a memory target, what PyTorch will then use (predicted as
`predict` predicts it), and what it costs in FLOPs.

The candidates are a network's repeated blocks: the children of every `nn.ModuleList` or
`nn.Sequential` whose children are all of one class (GPT-2's `h.0 ... h.11`, a ResNet
stage's blocks), the list with the most activation-holding blocks first. Two ways to wrap a
block, both PyTorch's own: **full** (`checkpoint(block, ..., use_reentrant=False)`: only
the block's inputs are kept, its whole forward runs again in the backward) and
**selective** (the same with `create_selective_checkpoint_contexts` and a policy that keeps
the outputs of matrix products and attention, and recomputes the cheap ops between them).
The search tries selective checkpointing of every block, then full checkpointing of the
first k blocks for the smallest k that meets the target (bisection; the peak falls as k
grows), and advises the plan that meets the target with the fewest extra FLOPs. Extra FLOPs
are counted by PyTorch's `FlopCounterMode` over the whole step, with and without the plan.

`apply_checkpointing(model, names, selective=False)` applies an advice in one call (and
returns a function that undoes it); the exporter keeps the checkpointing (`--user-checkpoint
keep`), so memplan plans the step PyTorch will run.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

# What selective checkpointing keeps: the outputs of the expensive ops. Everything else in a
# wrapped block is recomputed in the backward.
_SAVED_OPS = {
    torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default, torch.ops.aten.baddbmm.default,
    torch.ops.aten.convolution.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default, torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
}


def _keep_expensive(ctx, op, *args, **kwargs):
    """The selective policy: save matrix products, convolutions and attention, recompute
    the rest."""
    return CheckpointPolicy.MUST_SAVE if op in _SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def candidates(model: torch.nn.Module) -> list[list[str]]:
    """The repeated blocks of `model`: for each ModuleList or Sequential of at least two
    children all of one class, the children's qualified names; longest lists first."""
    found = []
    for name, module in model.named_modules():
        if isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)) and len(module) >= 2:
            kinds = {type(child) for child in module}
            parametrized = any(p.requires_grad for p in module.parameters())
            if len(kinds) == 1 and parametrized and not isinstance(module[0], (torch.nn.ModuleList, torch.nn.Sequential)):
                found.append([f"{name}.{i}" if name else str(i) for i in range(len(module))])
    found.sort(key=len, reverse=True)
    return found


def apply_checkpointing(model: torch.nn.Module, names: list[str], selective: bool = False):
    """Wraps each named submodule's forward in `torch.utils.checkpoint.checkpoint`
    (non-reentrant; with `selective`, under the selective policy that keeps matrix
    products and attention). Returns a function that restores the model."""
    undo = []
    for name in names:
        module = model.get_submodule(name)
        if "forward" in vars(module):
            raise ValueError(f"{name} already has its own forward attribute (wrapped twice?)")
        inner = module.forward

        def forward(*args, _inner=inner, **kwargs):
            extra = {"context_fn": functools.partial(create_selective_checkpoint_contexts, _keep_expensive)} if selective else {}
            return checkpoint(_inner, *args, use_reentrant=False, **extra, **kwargs)

        module.forward = forward
        undo.append(module)

    def restore():
        for module in undo:
            del module.forward

    return restore


@dataclass
class Plan:
    """One way to checkpoint: the modules wrapped, how, and what PyTorch then uses."""

    names: list[str]
    selective: bool
    eager: dict = field(default_factory=dict)
    flops: int = 0

    def describe(self) -> str:
        if not self.names:
            return "no checkpointing"
        how = "selective checkpointing (matrix products and attention kept)" if self.selective else "torch.utils.checkpoint"
        shown = ", ".join(self.names) if len(self.names) <= 4 else f"{', '.join(self.names[:2])}, ..., {self.names[-1]}"
        return f"{len(self.names)} module(s) in {how}: {shown}"


def step_flops(model, inputs, optimizer, amp) -> int:
    """FLOPs of one training step (forward, backward with any recomputation), counted by
    PyTorch's FlopCounterMode on fake tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode

    from .cuda_autocast import AMP
    from .predict import _fake_model

    mode = FakeTensorMode(allow_non_fake_inputs=False)
    with _fake_model(model, inputs, mode) as fake_inputs, mode:
        counter = FlopCounterMode(display=False)
        with counter:
            if amp is not None:
                with torch.autocast("cpu", dtype=AMP[amp]):
                    loss = model(*fake_inputs)
            else:
                loss = model(*fake_inputs)
            loss.backward()
        for p in model.parameters():
            p.grad = None
    return counter.get_total_flops()


def advise(build, target: int, predict, optimizer="adamw", amp=None, metric="max_memory_reserved"):
    """The cheapest plan (fewest extra FLOPs) whose predicted `metric` is at most `target`
    bytes, or None; and every plan tried. `build()` makes a fresh (model, inputs);
    `predict(model, inputs)` returns the `eager` figures of a step."""
    tried: list[Plan] = []

    def evaluate(names, selective):
        model, inputs = build()
        restore = apply_checkpointing(model, names, selective)
        try:
            plan = Plan(list(names), selective, predict(model, inputs), step_flops(model, inputs, optimizer, amp))
        finally:
            restore()
        tried.append(plan)
        return plan

    base = evaluate([], False)
    if base.eager[metric] <= target:
        return base, tried
    model, _ = build()
    lists = candidates(model)
    if not lists:
        return None, tried
    blocks = lists[0]
    fitting = []
    selective = evaluate(blocks, True)
    if selective.eager[metric] <= target:
        fitting.append(selective)
    full_all = evaluate(blocks, False)
    if full_all.eager[metric] <= target:
        low, high = 0, len(blocks)  # fits(high); the smallest k that fits lies in (low, high]
        by_k = {len(blocks): full_all}
        while high - low > 1:
            mid = (low + high) // 2
            plan = evaluate(blocks[:mid], False)
            by_k[mid] = plan
            low, high = (low, mid) if plan.eager[metric] <= target else (mid, high)
        fitting.append(by_k[high])
    if not fitting:
        return None, tried
    best = min(fitting, key=lambda p: (p.flops, p.eager[metric]))
    return best, tried
