"""The exported step is the user's training step (issue 29), held to PyTorch training the
same model on the same batch: which params get a gradient (in memplan: an update in the
expanded step), the losses of three SGD steps and the parameters after them (the
tolerances of test_zoo.py: losses to 1e-5, each parameter within 5% of SGD's largest move
of it, plus f32 rounding's share),
frozen parameters exactly unchanged. What cannot be expressed is refused with the user's
line, or warned about, never silently changed.
"""

import inspect
import re
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import memplan_torch
from memplan_torch import safetensors, step_arguments
from memplan_torch.step import ExportError, ExportWarning
from test_zoo import memplan_steps, torch_steps

LR = 1e-3


def batch():
    torch.manual_seed(7)
    return torch.randn(16, 8), torch.randint(0, 4, (16,))


def trained_in_memplan(memplan, tmp_path, text) -> set[str]:
    """The params the expanded step updates: those with a gradient."""
    step = tmp_path / "expand.step"
    step.write_text(text)
    expanded = memplan("expand", step).stdout
    return set(re.findall(r"update %([\w.]+) <-", expanded))


def arena_of(memplan, step, *flags) -> int:
    """The arena `memplan plan` gives `step` with `flags`."""
    return int(re.search(r'"arena_bytes": (\d+)', memplan("plan", step, *flags, "--format", "json").stdout).group(1))


def train_both(memplan, tmp_path, model, inputs, text, name="model"):
    """Trains `model` three SGD steps in memplan (its export `text`, written to
    `name.step`) and in PyTorch from the same weights and batch: memplan's losses and
    arguments after, PyTorch's losses and each parameter's largest gradient."""
    step, weights = tmp_path / f"{name}.step", tmp_path / "w.safetensors"
    step.write_text(text)
    safetensors.write_new(weights, step_arguments(model, inputs))
    losses, after = memplan_steps(memplan, tmp_path, step, weights, 3)
    expected, largest_grad = torch_steps(model, inputs, torch.optim.SGD(model.parameters(), lr=LR))
    return losses, after, expected, largest_grad


def compare_three_steps(memplan, tmp_path, model, inputs):
    """Exports `model` (SGD), trains it three steps in memplan and in PyTorch from the same
    weights and batch, and checks they agree; returns the export and the parameters
    PyTorch gave a gradient."""
    text = memplan_torch.export_step(model, inputs, optimizer="sgd")
    start = {name: p.detach().clone() for name, p in model.named_parameters()}
    losses, after, expected, largest_grad = train_both(memplan, tmp_path, model, inputs, text)
    assert losses == pytest.approx(expected, rel=1e-5), f"memplan {losses}, PyTorch {expected}"
    with_grad = {name for name, p in model.named_parameters() if p.grad is not None}
    assert trained_in_memplan(memplan, tmp_path, text) == with_grad
    for name, param in model.named_parameters():
        if name not in with_grad:
            assert torch.equal(after[name], start[name]) and torch.equal(param.detach(), start[name]), name
            continue
        difference = (after[name].double() - param.detach().double()).abs()
        # 5% of SGD's largest move of it, plus the moves f32 rounding alone makes: a
        # gradient that is 0 in exact arithmetic (a key projection's bias: softmax ignores
        # what it adds) is rounding noise in both frameworks, of f32's epsilon times the
        # gradients around it (bounded by the model's largest).
        noise = 3 * LR * 2.0**-23 * max(largest_grad.values())
        assert float(difference.max()) <= 0.05 * 3 * LR * largest_grad[name] + noise, name
    return text, with_grad


class Backbone(nn.Module):
    """A backbone and a head, the backbone frozen or not (fine-tuning, linear probes)."""

    def __init__(self, frozen: bool, width: int = 32):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
        self.head = nn.Linear(width, 4)
        self.backbone.requires_grad_(not frozen)

    def forward(self, x, y):
        return F.cross_entropy(self.head(self.backbone(x)), y)


def test_frozen_parameters_are_read_and_never_trained(memplan, tmp_path):
    torch.manual_seed(0)
    text, with_grad = compare_three_steps(memplan, tmp_path, Backbone(frozen=True), batch())
    assert with_grad == {"head.weight", "head.bias"}
    assert "%backbone.0.weight: f32[32,8] state" in text


def test_a_frozen_backbone_plans_without_its_gradients_and_adam_moments(memplan, tmp_path):
    """AdamW keeps two moments per trained param; a frozen backbone has none, nor
    gradients: its arena is smaller by at least the two moments of every frozen weight."""
    arenas = {}
    for frozen in (True, False):
        with torch.device("meta"):
            model, inputs = Backbone(frozen, width=256), (torch.randn(16, 8), torch.randint(0, 4, (16,)))
        step = tmp_path / f"frozen{frozen}.step"
        step.write_text(memplan_torch.export_step(model, inputs))
        arenas[frozen] = arena_of(memplan, step)
    frozen_bytes = 4 * (8 * 256 + 256 + 256 * 256 + 256)
    assert arenas[True] + 2 * frozen_bytes <= arenas[False], arenas


class Target(nn.Module):
    """A target network read through `.detach()`, and a value used both with and without
    its gradient."""

    def __init__(self):
        super().__init__()
        self.online, self.target = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x, y):
        a = torch.tanh(self.online(x))
        goal = self.target(x).detach()
        return ((a * a.detach() - goal) ** 2).mean() + 0 * y.float().mean()


def test_detach_stops_gradients_as_in_pytorch(memplan, tmp_path):
    torch.manual_seed(1)
    text, with_grad = compare_three_steps(memplan, tmp_path, Target(), batch())
    assert with_grad == {"online.weight", "online.bias"}
    assert text.count("= detach(") == 2


class NoGrad(nn.Module):
    """Features computed under `torch.no_grad()` inside forward, added to trained ones."""

    def __init__(self):
        super().__init__()
        self.features, self.head = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x, y):
        with torch.no_grad():
            fixed = F.relu(self.features(x)) * 2
        with torch.set_grad_enabled(True):
            trained = self.head(x + fixed)
        return F.cross_entropy(trained, y)


def test_no_grad_blocks_inside_forward_compute_without_gradients(memplan, tmp_path):
    torch.manual_seed(2)
    text, with_grad = compare_three_steps(memplan, tmp_path, NoGrad(), batch())
    assert with_grad == {"head.weight", "head.bias"}
    # The block's ops keep the user's source lines and modules.
    [features] = [line for line in text.splitlines() if line.strip().startswith("%features.mm")]
    assert 'loc("test_semantics.py":' in features and '"features")' in features


class Autocast(nn.Module):
    def __init__(self, device: str):
        super().__init__()
        self.a, self.b, self.device = nn.Linear(8, 16), nn.Linear(16, 4), device

    def forward(self, x, y):
        with torch.autocast(self.device, dtype=torch.bfloat16):
            h = self.a(x)
        return F.cross_entropy(self.b(F.relu(h.float())), y)


def test_an_autocast_block_inside_forward_is_cast_as_pytorch_casts_it(memplan, tmp_path):
    torch.manual_seed(3)
    model, inputs = Autocast("cpu"), batch()
    text = memplan_torch.export_step(model, inputs, optimizer="sgd")
    assert re.search(r"bf16\[16,16\] = matmul\(", text), text
    losses, _, expected, _ = train_both(memplan, tmp_path, model, inputs, text, "autocast")
    # bf16 matmuls: PyTorch's CPU kernel accumulates in f32, memplan's reference in f64,
    # both rounding the result to bf16 (8 bits of mantissa): a few parts in a thousand.
    assert losses == pytest.approx(expected, rel=1e-2), f"memplan {losses}, PyTorch {expected}"


def test_a_cuda_autocast_block_is_captured_as_on_a_gpu():
    """On a machine without a GPU, torch.autocast("cuda") would switch itself off (and the
    step would be f32): the block is captured on fake CUDA tensors, with CUDA's casts."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = memplan_torch.export_step(Autocast("cuda"), batch())
    assert re.search(r"bf16\[16,16\] = matmul\(", text), text


class XTanh(torch.autograd.Function):
    """x * tanh(x), keeping x and tanh(x) for its backward."""

    @staticmethod
    def forward(ctx, x):
        t = torch.tanh(x)
        ctx.save_for_backward(x, t)
        return x * t

    @staticmethod
    def backward(ctx, grad):
        x, t = ctx.saved_tensors
        return grad * (t + x * (1 - t * t))


class StraightThrough(torch.autograd.Function):
    """A ReLU whose gradient passes through unchanged, scaled (a quantizer's estimator):
    not the derivative of its forward. A Python number on `ctx`, `None` for it."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return torch.relu(x) * scale

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


class Gate(torch.autograd.Function):
    """x * g for a parameter g, in the `setup_context` style, `once_differentiable`; the
    gradient of g only where `needs_input_grad` says, none for `frozen_bias`."""

    @staticmethod
    def forward(x, g, frozen_bias):
        return x * g + frozen_bias

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, g, _ = inputs
        ctx.save_for_backward(x, g)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        x, g = ctx.saved_tensors
        grad_g = (grad * x).sum(0) if ctx.needs_input_grad[1] else None
        return grad * g, grad_g, None


class WithFunctions(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)
        self.g = nn.Parameter(torch.rand(16) + 0.5)
        self.bias = nn.Parameter(torch.full((16,), 0.1))  # its Function gives it no gradient

    def forward(self, x, y):
        h = XTanh.apply(self.a(x))
        h = StraightThrough.apply(self.b(h), 0.5)
        h = Gate.apply(h, self.g, self.bias)
        return F.cross_entropy(self.c(h), y)


def test_a_custom_function_runs_its_own_backward_as_in_pytorch(memplan, tmp_path):
    """The user's backward, not memplan's derivative of the forward: the straight-through
    gradient and the gate's trains as PyTorch trains them; `bias`, to which the Function
    returns no gradient, gets none."""
    torch.manual_seed(0)
    text, with_grad = compare_three_steps(memplan, tmp_path, WithFunctions(), batch())
    assert "bias" not in with_grad and {"g", "a.weight", "b.weight"} <= with_grad
    assert len(re.findall(r"^  custom_backward\(\d+\)", text, re.M)) == 3, text
    # The backward's ops carry the lines of the user's backward.
    source, start = inspect.getsourcelines(XTanh)
    line = start + next(i for i, text in enumerate(source) if "return grad * (t + x" in text)
    assert f'loc("test_semantics.py":{line}' in text, text


class TwoOutputs(torch.autograd.Function):
    """Two outputs; what the backward reads kept on `ctx` directly, not saved."""

    @staticmethod
    def forward(ctx, x):
        ctx.x = x
        return torch.tanh(x), torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad_a, grad_b):
        t, s = torch.tanh(ctx.x), torch.sigmoid(ctx.x)
        return grad_a * (1 - t * t) + grad_b * s * (1 - s)


class WithMask(torch.autograd.Function):
    """A second output marked non-differentiable (a mask), saved for the backward."""

    @staticmethod
    def forward(ctx, x):
        mask = (x > 0).float()
        ctx.mark_non_differentiable(mask)
        ctx.save_for_backward(mask)
        return x * mask, mask

    @staticmethod
    def backward(ctx, grad, grad_mask):
        mask, = ctx.saved_tensors
        return grad * mask


class Triple(torch.autograd.Function):
    """A backward writing in place."""

    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        grad.mul_(3)
        return grad


class FunctionForms(nn.Module):
    def __init__(self, form):
        super().__init__()
        self.a, self.b, self.form = nn.Linear(8, 16), nn.Linear(16, 4), form

    def forward(self, x, y):
        h = self.a(x)
        if self.form == "two outputs, called twice, one output unused":
            a, b = TwoOutputs.apply(h)
            h, _ = TwoOutputs.apply(a + b)
        elif self.form == "a non-differentiable output":
            h, mask = WithMask.apply(h)
            h = h + mask
        elif self.form == "an in-place backward":
            h = Triple.apply(h)
        elif self.form == "applied without gradients":
            with torch.no_grad():
                tripled = Triple.apply(h)
            h = h + tripled
        return F.cross_entropy(self.b(h), y)


@pytest.mark.parametrize("form", ["two outputs, called twice, one output unused", "a non-differentiable output",
                                  "an in-place backward", "applied without gradients"])
def test_custom_functions_of_every_form_train_as_in_pytorch(memplan, tmp_path, form):
    torch.manual_seed(0)
    _, with_grad = compare_three_steps(memplan, tmp_path, FunctionForms(form), batch())
    assert with_grad == {"a.weight", "a.bias", "b.weight", "b.bias"}


def test_a_custom_function_under_amp_casts_its_gradients_as_autograd_does(memplan, tmp_path):
    """Under bf16 autocast the gate's input is bf16 and its backward computes in f32:
    autograd casts the returned gradient to the input's dtype, and so does the block; the
    export warns that PyTorch runs the backward without autocast."""
    with pytest.warns(ExportWarning, match=r"test_semantics\.py:\d+: a custom torch.autograd.Function under --amp"):
        text = memplan_torch.export_step(WithFunctions(), batch(), amp="bf16")
    block = text[text.index("  custom_backward(2)"):]
    assert re.search(r"= cast\(%[\w.]+, to=bf16\)", block[:block.index("  }")]), block
    step = tmp_path / "amp.step"
    step.write_text(text)
    memplan("check", step)


class Swish(torch.autograd.Function):
    """timm's memory-efficient Swish: keeps x only and recomputes sigmoid in backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        x, = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * (s * (1 + x * (1 - s)))


class SwishNet(nn.Module):
    def __init__(self, custom: bool, width: int = 256):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(4))
        self.head, self.custom = nn.Linear(width, 4), custom

    def forward(self, x, y):
        for layer in self.layers:
            h = layer(x)
            x = Swish.apply(h) if self.custom else h * torch.sigmoid(h)
        return F.cross_entropy(self.head(x), y)


def test_a_custom_function_keeps_what_it_saved(memplan, tmp_path):
    """A memory-efficient Swish keeps only its input: its block binds x and the output's
    gradient, nothing else, and the step plans below the same net written `h *
    sigmoid(h)` (whose derivative keeps sigmoid(h) too), as in PyTorch."""
    with torch.device("meta"):
        inputs = (torch.randn(512, 256), torch.randint(0, 4, (512,)))
    arenas = {}
    for custom in (True, False):
        with torch.device("meta"):
            model = SwishNet(custom)
        text = memplan_torch.export_step(model, inputs)
        if custom:
            headers = re.findall(r"^  custom_backward\(\d+\)\((.*)\) -> \((.*)\) \{$", text, re.M)
            assert len(headers) == 4, text
            for binds, grads in headers:
                kept = re.findall(r"= (grad )?(%[\w.]+)", binds)
                assert [k for k, _ in kept] == ["", "grad "], binds
                assert grads == kept[0][1], (binds, grads)
        step = tmp_path / f"swish{custom}.step"
        step.write_text(text)
        arenas[custom] = arena_of(memplan, step, "--schedule", "program")
    assert arenas[True] < arenas[False], arenas


class FunctionInCheckpoint(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 4)

    def forward(self, x, y):
        return F.cross_entropy(checkpoint(lambda h: XTanh.apply(self.a(h)), x, use_reentrant=False), y)


def test_a_custom_function_inside_a_checkpoint_is_refused_at_the_users_line():
    with pytest.raises(ExportError, match=r"^test_semantics\.py:\d+: the custom torch.autograd.Function XTanh runs inside"):
        memplan_torch.export_step(FunctionInCheckpoint(), batch())
    with pytest.warns(ExportWarning, match="torch.utils.checkpoint dropped"):
        text = memplan_torch.export_step(FunctionInCheckpoint(), batch(), user_checkpoint="drop")
    assert "custom_backward(0)" in text


class Checkpointed(nn.Module):
    """Three MLP blocks, each checkpointed (non-reentrant, as PyTorch recommends, or
    reentrant) or not."""

    def __init__(self, use_checkpoint: bool, width: int = 8, context_fn=None, reentrant: bool = False):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
                                    for _ in range(3))
        self.stem, self.head = nn.Linear(8, width), nn.Linear(width, 4)
        self.use_checkpoint, self.context_fn, self.reentrant = use_checkpoint, context_fn, reentrant

    def forward(self, x, y):
        h = self.stem(x)
        for block in self.blocks:
            if self.context_fn is not None:
                h = h + checkpoint(block, h, use_reentrant=False, context_fn=self.context_fn)
            elif self.use_checkpoint:
                h = h + checkpoint(block, h, use_reentrant=self.reentrant)
            else:
                h = h + block(h)
        return F.cross_entropy(self.head(h), y)


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointed_blocks_train_as_in_pytorch(memplan, tmp_path, reentrant):
    torch.manual_seed(0)
    text, with_grad = compare_three_steps(memplan, tmp_path, Checkpointed(True, reentrant=reentrant), batch())
    assert len(with_grad) == 16
    # Each checkpoint call's ops are marked with the call's number, nothing else is.
    marked = re.findall(r"^  %([\w.]+): .* checkpoint\((\d+)\)", text, re.M)
    assert {region for _, region in marked} == {"0", "1", "2"}
    assert all(name.startswith(f"blocks.{region}.") for name, region in marked), marked
    step = tmp_path / "model.step"
    assert "recompute(" in memplan("expand", step).stdout


def test_checkpointing_plans_the_memory_pytorch_saves_by_it(memplan, tmp_path):
    """What PyTorch's checkpoint saves: the blocks' inner activations are recomputed, not
    kept, so the step plans smaller than the same model without checkpointing, and the
    report says the user's checkpoints were kept. `--user-checkpoint drop` exports the
    model without them (planned as the unchekpointed model), saying so."""
    with torch.device("meta"):
        inputs = (torch.randn(512, 8), torch.randint(0, 4, (512,)))
    arenas, texts = {}, {}
    for use in (True, False):
        with torch.device("meta"):
            model = Checkpointed(use, width=64)
        texts[use] = memplan_torch.export_step(model, inputs)
        step = tmp_path / f"checkpointed{use}.step"
        step.write_text(texts[use])
        for schedule in ("program", "memory"):
            report = memplan("plan", step, "--schedule", schedule).stdout
            arenas[use, schedule] = int(re.search(r"^arena +(\d+) B", report, re.M).group(1))
            assert ("checkpoint   the user's, kept: 3 regions" in report) == use, report
    for schedule in ("program", "memory"):
        assert arenas[True, schedule] < arenas[False, schedule], arenas
    with torch.device("meta"):
        model = Checkpointed(True, width=64)
    with pytest.warns(ExportWarning, match=r"test_semantics\.py:\d+: torch.utils.checkpoint dropped"):
        dropped = memplan_torch.export_step(model, inputs, user_checkpoint="drop")
    ops = lambda text: [re.sub(r" loc\(.*\)$", "", line) for line in text.splitlines()]  # noqa: E731
    assert ops(dropped) == ops(texts[False])


def _save_matmuls(ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy

    matmuls = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)
    return CheckpointPolicy.MUST_SAVE if op in matmuls else CheckpointPolicy.PREFER_RECOMPUTE


def _selective():
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(_save_matmuls)


def test_a_selective_checkpoint_policy_trains_as_in_pytorch(memplan, tmp_path):
    """A policy saving every matmul (PyTorch's selective activation checkpointing): the
    linear layers' outputs are saved (`checkpoint_saved(N)`), the GELUs recomputed, and
    the step trains as PyTorch's."""
    torch.manual_seed(0)
    text, with_grad = compare_three_steps(memplan, tmp_path, Checkpointed(True, context_fn=_selective), batch())
    assert len(with_grad) == 16
    saved = re.findall(r"^  %([\w.]+): .* checkpoint_saved\((\d+)\)", text, re.M)
    recomputed = re.findall(r"^  %([\w.]+): .* checkpoint\((\d+)\)", text, re.M)
    # nn.Linear is a matmul and a bias add, both of the node PyTorch's addmm computes.
    assert {name for name, _ in saved} == {f"blocks.{i}.{k}{s}" for i in range(3) for k in (0, 2) for s in ("", ".mm")}, saved
    assert {name for name, _ in recomputed} == {f"blocks.{i}.1" for i in range(3)}, recomputed
    expanded = memplan("expand", tmp_path / "model.step").stdout
    assert "gelu(%blocks.0.0, approximate=false) recompute(0)" in expanded and "matmul(%blocks.0.1.recompute" not in expanded


def test_a_selective_policy_plans_between_checkpointing_all_and_none(memplan, tmp_path):
    """Saving the matmuls keeps the blocks' widest activations that full checkpointing
    recomputes, and not the GELUs' outputs that no checkpointing keeps."""
    with torch.device("meta"):
        inputs = (torch.randn(512, 8), torch.randint(0, 4, (512,)))
    arenas = {}
    for name, use, context_fn in (("all", True, None), ("selective", True, _selective), ("none", False, None)):
        with torch.device("meta"):
            model = Checkpointed(use, width=64, context_fn=context_fn)
        step = tmp_path / f"{name}.step"
        step.write_text(memplan_torch.export_step(model, inputs))
        # As the user's policies keep them: memplan's own cheap recomputation off.
        arenas[name] = arena_of(memplan, step, "--schedule", "program", "--no-recompute")
    assert arenas["all"] < arenas["selective"] < arenas["none"], arenas


class ReentrantOnData(nn.Module):
    """PyTorch's pitfall: a reentrant checkpoint whose inputs need no gradient (the data)
    passes none, so the block's params get no gradient."""

    def __init__(self):
        super().__init__()
        self.block, self.head = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x, y):
        return F.cross_entropy(self.head(checkpoint(self.block, x, use_reentrant=True)), y)


def test_a_reentrant_checkpoint_of_data_trains_nothing_inside_as_in_pytorch(memplan, tmp_path):
    torch.manual_seed(0)
    with pytest.warns(ExportWarning, match=r"test_semantics\.py:\d+: .*use_reentrant=True\) of inputs that need no gradient"):
        _, with_grad = compare_three_steps(memplan, tmp_path, ReentrantOnData(), batch())
    assert with_grad == {"head.weight", "head.bias"}


class Diagonal(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x, y):
        pairs = self.a(x).view(-1, 4, 2).diagonal(dim1=1, dim2=2)  # a view: no handler yet
        return F.cross_entropy(pairs.repeat(1, 2), y)


def test_a_view_without_a_handler_is_an_extern_view():
    text = memplan_torch.export_step(Diagonal(), batch())
    assert re.search(r"= extern_view\(%a\.reshape, target=\"aten::diagonal.default\"", text), text


class Unflatten(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x, y):
        heads = self.a(x).unflatten(-1, (2, 4))  # PyTorch's own decomposition: a view
        return F.cross_entropy(heads.flatten(1)[:, :4], y)


def test_an_op_pytorch_defines_through_others_is_translated_through_them(memplan, tmp_path):
    """`unflatten` has no handler; PyTorch defines it by `view` (CompositeImplicitAutograd),
    which the exporter translates: a reshape, no extern."""
    torch.manual_seed(5)
    text, _ = compare_three_steps(memplan, tmp_path, Unflatten(), batch())
    assert "extern" not in text and "reshape(%a, shape=[16, 2, 4])" in text, text


def test_library_code_counts_as_the_users():
    """A frame in torchvision (beside torch in site-packages) is the location, not torch's."""
    from memplan_torch.datadep import _TORCH_DIR
    from memplan_torch.translate import source_loc

    class Node:
        meta = {"stack_trace": (
            f'  File "{_TORCH_DIR}vision/models/resnet.py", line 92, in forward\n    out = self.conv1(x)\n'
            f'  File "{_TORCH_DIR}/nn/modules/conv.py", line 548, in forward\n    return self._conv_forward(...)\n')}

    assert source_loc(Node()) == ("resnet.py", 92, None)


class InPlace(nn.Module):
    """The in-place writes people write: an in-place ReLU, `+=` residuals, `relu_`, `mul_`,
    `masked_fill_`, a write into a slice of a fresh tensor and `h[:, 0] += 1`."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.head = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(16, 4)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x, y, mask):
        h = self.act(self.a(x))
        r = self.b(h)
        r += h
        r.mul_(0.5)
        r.masked_fill_(mask, 0.25)
        r.relu_()
        out = torch.zeros(x.shape[0], 16)
        out[:, :8] = r
        out[:, 8:] = torch.tanh(h)
        out[:, 0] += 1
        return F.cross_entropy(self.head(out), y)


def test_in_place_writes_are_the_users_step(memplan, tmp_path):
    torch.manual_seed(4)
    x, y = batch()
    text, with_grad = compare_three_steps(memplan, tmp_path, InPlace(), (x, y, x < -1.5))
    assert with_grad == {"a.weight", "a.bias", "b.weight", "b.bias", "head.weight", "head.bias"}
    assert "extern" not in text
    assert text.count("= slice_scatter(") == 3, text


class Vgg(nn.Module):
    """A small VGG-like stack whose activations are in-place or not."""

    def __init__(self, inplace: bool):
        super().__init__()
        layers, c = [], 3
        for width in (16, 16, 32, 32):
            layers += [nn.Conv2d(c, width, 3, padding=1), nn.ReLU(inplace=inplace)]
            c = width
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(32, 10)

    def forward(self, x, y):
        return F.cross_entropy(self.head(self.features(x).mean((2, 3))), y)


def test_an_in_place_relu_plans_no_larger_than_a_relu(memplan, tmp_path):
    """nn.ReLU(inplace=True) is functionalized to relu, and memplan's in-place pass finds the
    reuse again: the same step, the same arena (it was +49% as copying externs)."""
    arenas, texts = {}, {}
    inputs = (torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,)))
    for inplace in (True, False):
        torch.manual_seed(5)
        step = tmp_path / f"vgg{inplace}.step"
        texts[inplace] = memplan_torch.export_step(Vgg(inplace), inputs)
        step.write_text(texts[inplace])
        arenas[inplace] = arena_of(memplan, step)
    assert arenas[True] <= arenas[False], arenas
    assert texts[True] == texts[False]


class Norms(nn.Module):
    """BatchNorm's running statistics and counter, a frozen BatchNorm in eval mode, and
    buffers of the user's own: an EMA and a step counter."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8, momentum=0.2)
        self.frozen = nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 4)
        self.register_buffer("ema", torch.zeros(8))
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x, y):
        h = F.relu(self.frozen(self.bn(self.conv(x))))
        pooled = h.mean((2, 3))
        self.ema.mul_(0.9).add_(pooled.detach().mean(0), alpha=0.1)
        self.calls += 1
        return F.cross_entropy(self.head(pooled), y)


def test_buffers_the_forward_writes_are_updated_as_in_pytorch(memplan, tmp_path):
    torch.manual_seed(6)
    model = Norms()
    model.frozen.running_mean.uniform_(-1, 1)
    model.frozen.running_var.uniform_(0.5, 2)
    inputs = (torch.randn(4, 3, 6, 6), torch.randint(0, 4, (4,)))
    model.frozen.eval()
    text = memplan_torch.export_step(model, inputs, optimizer="sgd")
    assert "extern" not in text
    assert model.training and not model.frozen.training, "the modes the user set are kept"
    losses, after, expected, _ = train_both(memplan, tmp_path, model, inputs, text, "norms")
    assert losses == pytest.approx(expected, rel=1e-5), f"memplan {losses}, PyTorch {expected}"
    buffers = dict(model.named_buffers())
    assert set(buffers) <= set(after), set(buffers) - set(after)
    for name, buffer in buffers.items():
        if buffer.dtype == torch.long:
            assert torch.equal(after[name], buffer), (name, after[name], buffer)
        else:
            assert torch.allclose(after[name].double(), buffer.double(), rtol=1e-5, atol=1e-6), (name, after[name], buffer)
    assert int(buffers["calls"]) == 3 and int(buffers["bn.num_batches_tracked"]) == 3
    assert int(buffers["frozen.num_batches_tracked"]) == 0


def test_export_leaves_the_models_modes_as_they_were():
    """A model in eval mode is captured in training mode (dropout drops, BatchNorm uses the
    batch's statistics), and left in eval mode."""
    model = Norms().eval()
    text = memplan_torch.export_step(model, (torch.randn(4, 3, 6, 6), torch.randint(0, 4, (4,))))
    assert text.count("= batch_norm_stats(") == 2, text
    assert not any(module.training for module in model.modules())


class DataDependent(nn.Module):
    """Python that decides on a tensor's values, each way people write it."""

    def __init__(self, how: str):
        super().__init__()
        self.a, self.how = nn.Linear(8, 4), how

    def forward(self, x, y):
        h = self.a(x)
        if self.how == "branch":
            if h.sum() > 0:  # the branch
                h = h * 2
        elif self.how == "item":
            scale = h.mean().item()  # the item
            h = h * scale
        elif self.how == "mask":
            return F.cross_entropy(h, y) + h[h > 0].sum()  # the mask
        elif self.how == "nonzero":
            rows = torch.nonzero(y)  # the nonzero
            return F.cross_entropy(h, y) + h[rows[:, 0]].sum()
        return F.cross_entropy(h, y)


def _line_of(marker: str) -> int:
    import inspect

    source, start = inspect.getsourcelines(DataDependent)
    return start + next(i for i, line in enumerate(source) if marker in line)


@pytest.mark.parametrize("how,code,says", [
    ("branch", "if h.sum() > 0:  # the branch", "depends on a tensor's values"),
    ("item", "h = h * scale", "uses `.item()`"),
])
def test_data_dependent_python_is_one_error_at_the_users_line(how, code, says):
    with pytest.raises(ExportError) as error:
        memplan_torch.export_step(DataDependent(how), batch())
    message = str(error.value)
    first = message.splitlines()[0]
    assert first.startswith(f"test_semantics.py:{_line_of(code)}: `{code}`"), message
    assert says in first and "hint: " in message and len(message.splitlines()) <= 3, message
    if how == "item":
        # It names where the value was read too.
        assert f"test_semantics.py:{_line_of('# the item')}: `scale = h.mean().item()  # the item`" in first, message


@pytest.mark.parametrize("how,bound", [("mask", "u0 <= 64"), ("nonzero", "u0 <= 16")])
def test_a_data_dependent_size_is_planned_at_its_upper_bound(memplan, tmp_path, how, bound):
    with pytest.warns(ExportWarning, match=rf"test_semantics\.py:{_line_of('# the ' + how)}: .*planned with its upper bound"):
        text = memplan_torch.export_step(DataDependent(how), batch())
    assert f'bound="{bound}"' in text
    step = tmp_path / f"{how}.step"
    step.write_text(text)
    report = memplan("plan", step).stdout
    assert re.search(rf"^bounded +{re.escape(bound)} at test_semantics\.py:{_line_of('# the ' + how)}: ", report, re.M), report


class Masks(nn.Module):
    """Masks made by comparisons, as attention masks and clamps are: with a number, with a
    broadcast tensor, and on integer labels."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x, y):
        h = self.a(x)
        h = h.masked_fill(h < -0.5, 0.0)
        h = torch.where(h >= h.mean(0, keepdim=True), h, h * 0.5)
        keep = (y != 0).unsqueeze(1)
        h = h * keep.to(h.dtype) + h * (y.unsqueeze(1) == 0)
        return F.cross_entropy(self.b(h), y)


def test_comparisons_make_masks_as_pytorch_does(memplan, tmp_path):
    torch.manual_seed(3)
    text, with_grad = compare_three_steps(memplan, tmp_path, Masks(), batch())
    assert "extern" not in text
    for line in ('compare_scalar(%a, value=-0.5, op="lt")', 'op="ge"', 'op="ne"', 'op="eq"'):
        assert line in text, text
    assert with_grad == {"a.weight", "a.bias", "b.weight", "b.bias"}


class Recurrence(nn.Module):
    """One weight read at every step of a 32-step recurrence (an RNN, Mamba's slow path)."""

    def __init__(self, width: int = 64, steps: int = 32):
        super().__init__()
        self.cell, self.head, self.steps = nn.Linear(width, width), nn.Linear(width, 4), steps
        self.inp = nn.Linear(8, width)

    def forward(self, x, y):
        h = torch.tanh(self.inp(x))
        for _ in range(self.steps):
            h = torch.tanh(self.cell(h))
        return F.cross_entropy(self.head(h), y)


def test_a_recurrence_sums_its_weight_gradient_as_pytorch_does(memplan, tmp_path):
    """PyTorch adds each step's contribution to the shared weight's .grad as it arrives;
    so does the step: in program order the backward holds a few weight-sized gradients,
    not one per step, and training matches PyTorch's."""
    torch.manual_seed(1)
    text, with_grad = compare_three_steps(memplan, tmp_path, Recurrence(), batch())
    assert "cell.weight" in with_grad
    arena = arena_of(memplan, tmp_path / "model.step", "--schedule", "program")
    weight = 64 * 64 * 4
    activations = 2 * 33 * 16 * 64 * 4  # each step's pre-activation and tanh output, at batch 16
    assert arena < activations + 8 * weight, arena


class DropPath(nn.Module):
    """Stochastic depth as timm and torchvision write it: a per-sample mask from
    `new_empty(...).bernoulli_(keep)`, scaled by 1/keep, on a residual branch."""

    def __init__(self, keep: float):
        super().__init__()
        self.a, self.b, self.keep = nn.Linear(8, 8), nn.Linear(8, 4), keep

    def forward(self, x, y):
        h = self.a(x)
        mask = h.new_empty((h.shape[0], 1)).bernoulli_(self.keep)
        h = x + F.relu(h) * mask / self.keep
        return F.cross_entropy(self.b(h), y)


def test_stochastic_depth_masks_are_memplans_draw(memplan, tmp_path):
    """bernoulli_ is a mask drawn with memplan's dropout (the same distribution as PyTorch's,
    not the same bits): with keep = 1 every sample is kept, so training matches PyTorch's
    exactly; with keep = 0.75 the step runs (no extern) with dropout p = 0.25."""
    torch.manual_seed(2)
    text, with_grad = compare_three_steps(memplan, tmp_path, DropPath(1.0), batch())
    assert "extern" not in text and "bernoulli" not in text
    assert with_grad == {"a.weight", "a.bias", "b.weight", "b.bias"}
    text = memplan_torch.export_step(DropPath(0.75), batch())
    assert "extern" not in text and "%zeros" not in text, text
    assert re.search(r"= dropout\(%ones, %dropout_seed, p=0\.25, stream=0\)", text), text
    step = tmp_path / "droppath.step"
    step.write_text(text)
    assert "loss" in memplan("run", step).stdout


def _splitmix64(state: int, n: int) -> int:
    """SplitMix64's output `n` from `state` (docs/IR.md, `dropout`), in Python integers."""
    z = (state + (n + 1) * 0x9E3779B97F4A7C15) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    return z ^ (z >> 31)


def memplans_keep_mask(seed: int, stream: int, shape, p: float) -> torch.Tensor:
    """The elements memplan's dropout with (seed, stream) keeps, as IR.md defines them:
    element i kept iff the top 53 bits of sm(key, i) over 2^53 are >= p."""
    key = _splitmix64(_splitmix64(seed % 2**64, 0), stream)
    count = 1
    for d in shape:
        count *= d
    kept = [(_splitmix64(key, i) >> 11) / 2.0**53 >= p for i in range(count)]
    return torch.tensor(kept).reshape(shape)


class AttentionDropout(nn.Module):
    """Two attention layers trained with dropout on their probabilities (SDPA's
    `dropout_p`): one with a padding mask (bool), one causal without a mask. With `keep`
    set (the masks memplan draws, by layer) the same layers written out in PyTorch's math:
    softmax, the mask times 1 / (1 - p), the product with v."""

    P = (0.4, 0.25)

    def __init__(self):
        super().__init__()
        self.qkv1, self.qkv2, self.o = nn.Linear(8, 24), nn.Linear(8, 24), nn.Linear(8, 4)
        pad = torch.ones(2, 1, 1, 16, dtype=torch.bool)
        pad[1, ..., 13:] = False
        self.register_buffer("pad", pad, persistent=False)
        self.keep = None

    def attend(self, layer, h, qkv, mask, causal):
        b = h.shape[0]
        q, k, v = qkv(h).view(b, 16, 3, 2, 4).permute(2, 0, 3, 1, 4)
        if self.keep is None:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.P[layer], is_causal=causal)
        else:
            scores = q @ k.transpose(-1, -2) / 2.0
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            if causal:
                scores = scores.masked_fill(torch.ones(16, 16, dtype=torch.bool).triu(1), float("-inf"))
            probs = scores.softmax(-1) * self.keep[layer] / (1 - self.P[layer])
            out = probs @ v
        return out.transpose(1, 2).reshape(b, 16, 8)

    def forward(self, x, y):
        h = x.reshape(2, 16, 8)
        h = h + self.attend(0, h, self.qkv1, self.pad, False)
        h = h + self.attend(1, h, self.qkv2, None, True)
        return F.mse_loss(self.o(h), y)


def test_attention_dropout_is_pytorchs_attention_with_memplans_mask(memplan, tmp_path):
    """SDPA with dropout_p > 0 exports as `dropout_attention` (a stream per site, the step's
    seed), and trains three SGD steps as PyTorch's own math of attention does with the mask
    memplan draws from that seed (computed here from IR.md's hash, independently), losses
    and parameters: the same dropout, the same gradients through it."""
    torch.manual_seed(5)
    model, inputs = AttentionDropout(), (torch.randn(32, 8), torch.randn(2, 16, 4))
    text = memplan_torch.export_step(model, inputs, optimizer="sgd")
    sites = [line for line in text.splitlines() if "= dropout_attention(" in line]
    assert len(sites) == 2 and "extern" not in text, text
    streams = [int(re.search(r"stream=(\d+)", s).group(1)) for s in sites]
    assert [f"p={p}" in s for p, s in zip(AttentionDropout.P, sites)] == [True, True] and len(set(streams)) == 2
    assert "causal=true" in sites[1] and "%dropout_seed" in sites[0]
    step, weights = tmp_path / "drop.step", tmp_path / "w.safetensors"
    step.write_text(text)
    seed = 1234567
    arguments = step_arguments(model, inputs)
    arguments["dropout_seed"] = torch.tensor(seed, dtype=torch.int64)
    safetensors.write_new(weights, arguments)
    losses, after = memplan_steps(memplan, tmp_path, step, weights, 3)
    model.keep = [memplans_keep_mask(seed, stream, (2, 2, 16, 16), p) for stream, p in zip(streams, AttentionDropout.P)]
    assert all(0.4 < float(k.float().mean()) < 0.9 for k in model.keep)
    expected, largest_grad = torch_steps(model, inputs, torch.optim.SGD(model.parameters(), lr=LR))
    assert losses == pytest.approx(expected, rel=1e-5), f"memplan {losses}, PyTorch {expected}"
    for name, param in model.named_parameters():
        difference = (after[name].double() - param.detach().double()).abs()
        assert float(difference.max()) <= 0.05 * 3 * LR * largest_grad[name], name
    # Another seed draws other masks: another loss.
    arguments["dropout_seed"] = torch.tensor(seed + 1, dtype=torch.int64)
    safetensors.write_new(tmp_path / "w2.safetensors", arguments)
    assert memplan_steps(memplan, tmp_path, step, tmp_path / "w2.safetensors", 1)[0][0] != losses[0]


def memplans_random(seed: int, stream: int, shape, normal: bool) -> torch.Tensor:
    """memplan's `random` f32 numbers (docs/IR.md), computed here independently: uniform,
    the top 24 bits of sm(key, i) over 2^24; normal, Box-Muller of the 53-bit uniforms of
    2i and 2i + 1 in f64."""
    import math

    key = _splitmix64(_splitmix64(seed % 2**64, 0), stream)
    count = math.prod(shape)
    if normal:
        u = [(_splitmix64(key, n) >> 11) / 2.0**53 for n in range(2 * count)]
        values = [math.sqrt(-2.0 * math.log(1.0 - u[2 * i])) * math.cos(2 * math.pi * u[2 * i + 1]) for i in range(count)]
    else:
        values = [(_splitmix64(key, i) >> 40) / 2.0**24 for i in range(count)]
    return torch.tensor(values, dtype=torch.float64).to(torch.float32).reshape(shape)


class StackedLstm(nn.Module):
    """A 2-layer bidirectional LSTM with dropout between the layers; with `keep` set (the
    mask memplan draws, time-major as aten applies it) the same as two 1-layer LSTMs with
    that mask between them, in PyTorch's own modules."""

    P = 0.3

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(4, 5, num_layers=2, bidirectional=True, dropout=self.P)
        self.head = nn.Linear(10, 3)
        self.keep = None

    def forward(self, x, y):
        if self.keep is None:
            out, _ = self.lstm(x)
        else:
            names = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
            params = lambda layer: [getattr(self.lstm, f"{n}_l{layer}{s}") for s in ("", "_reverse") for n in names]  # noqa: E731
            between, _, _ = torch._VF.lstm(x, (torch.zeros(2, 2, 5), torch.zeros(2, 2, 5)), params(0), True, 1, 0.0,
                                           False, True, False)
            between = between * self.keep / (1 - self.P)
            out, _, _ = torch._VF.lstm(between, (torch.zeros(2, 2, 5), torch.zeros(2, 2, 5)), params(1), True, 1, 0.0,
                                       False, True, False)
        return F.cross_entropy(self.head(out[-1]), y)


def test_dropout_between_recurrent_layers_is_memplans_dropout_held_to_pytorch(memplan, tmp_path):
    """nn.LSTM(dropout=p) in training: the first layer's output goes through memplan's seeded
    dropout (its own stream) into the second; three SGD steps equal PyTorch's training of
    the same layers with memplan's mask between them (computed here from IR.md's hash)."""
    torch.manual_seed(8)
    model, inputs = StackedLstm(), (torch.randn(3, 2, 4), torch.tensor([0, 2]))
    text = memplan_torch.export_step(model, inputs, optimizer="sgd")
    assert "extern" not in text, text
    [site] = [line for line in text.splitlines() if "= dropout(" in line]
    assert "p=0.3" in site and "%dropout_seed" in site
    stream = int(re.search(r"stream=(\d+)", site).group(1))
    step, weights = tmp_path / "lstm.step", tmp_path / "w.safetensors"
    step.write_text(text)
    seed = 77
    arguments = step_arguments(model, inputs)
    arguments["dropout_seed"] = torch.tensor(seed, dtype=torch.int64)
    safetensors.write_new(weights, arguments)
    losses, after = memplan_steps(memplan, tmp_path, step, weights, 3)
    model.keep = memplans_keep_mask(seed, stream, (3, 2, 10), StackedLstm.P)
    assert 0 < int(model.keep.sum()) < 60
    expected, largest_grad = torch_steps(model, inputs, torch.optim.SGD(model.parameters(), lr=LR))
    assert losses == pytest.approx(expected, rel=1e-5), f"memplan {losses}, PyTorch {expected}"
    for name, param in model.named_parameters():
        difference = (after[name].double() - param.detach().double()).abs()
        assert float(difference.max()) <= 0.05 * 3 * LR * largest_grad[name] + 1e-9, name


class Denoiser(nn.Module):
    """A diffusion model's training step: timesteps from `randint` pick a noise level from
    a table, noise from `randn_like` (and `normal_`), a random mix from `rand`; the network
    predicts the noise. With `draws` set (memplan's numbers by site, in order) the same
    step with those numbers in place of PyTorch's draws."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(9, 16), nn.SiLU(), nn.Linear(16, 8))
        self.register_buffer("levels", torch.linspace(0.1, 0.9, 10), persistent=False)
        self.draws = None

    def draw(self, make):
        return make() if self.draws is None else self.draws.pop(0)

    def forward(self, x):
        steps = self.draw(lambda: torch.randint(0, 10, (x.shape[0],)))
        noise = self.draw(lambda: torch.randn_like(x))
        extra = self.draw(lambda: torch.empty_like(x).normal_(0.0, 0.5))
        mix = self.draw(lambda: torch.rand(x.shape[0], 1))
        level = self.levels[steps].unsqueeze(1)
        noisy = x * (1 - level) + (noise + extra * mix) * level
        predicted = self.net(torch.cat([noisy, level], dim=1))
        return F.mse_loss(predicted, noise)


def test_random_tensors_are_memplans_draws_and_train_as_pytorch_with_them(memplan, tmp_path):
    """randint, randn_like, normal_ and rand export as memplan's `random` (a stream each, no
    extern), and the step trains three SGD steps as PyTorch trains the same model fed the
    numbers memplan draws (computed here from IR.md's definition): losses and parameters."""
    torch.manual_seed(6)
    model, inputs = Denoiser(), (torch.randn(12, 8),)
    text = memplan_torch.export_step(model, inputs, optimizer="sgd")
    sites = [line for line in text.splitlines() if "= random(" in line]
    assert len(sites) == 4 and "extern" not in text, text
    streams = [int(re.search(r"stream=(\d+)", s).group(1)) for s in sites]
    assert len(set(streams)) == 4 and ["normal=true" in s for s in sites] == [False, True, True, False]
    step, weights = tmp_path / "denoise.step", tmp_path / "w.safetensors"
    step.write_text(text)
    seed = 424242
    arguments = step_arguments(model, inputs)
    arguments["dropout_seed"] = torch.tensor(seed, dtype=torch.int64)
    safetensors.write_new(weights, arguments)
    losses, after = memplan_steps(memplan, tmp_path, step, weights, 3)
    steps = (memplans_random(seed, streams[0], (12,), False) * 10).long()
    assert 0 <= int(steps.min()) and int(steps.max()) <= 9 and len(set(steps.tolist())) > 3
    draws = [
        steps,
        memplans_random(seed, streams[1], (12, 8), True),
        memplans_random(seed, streams[2], (12, 8), True) * 0.5,
        memplans_random(seed, streams[3], (12, 1), False),
    ]
    assert abs(float(draws[1].mean())) < 0.4 and 0.5 < float(draws[1].std()) < 1.5
    model.draws = [d for _ in range(3) for d in draws]  # the same seed every step: the same draws
    expected, largest_grad = torch_steps(model, inputs, torch.optim.SGD(model.parameters(), lr=LR))
    assert losses == pytest.approx(expected, rel=1e-5), f"memplan {losses}, PyTorch {expected}"
    for name, param in model.named_parameters():
        difference = (after[name].double() - param.detach().double()).abs()
        assert float(difference.max()) <= 0.05 * 3 * LR * largest_grad[name], name


class MaskedAttention(nn.Module):
    """Attention with PyTorch's attn_mask: a padding mask (bool data), a learned position
    bias (a float mask with a gradient), grouped-query heads (`enable_gqa`)."""

    def __init__(self, how):
        super().__init__()
        self.q, self.k, self.v, self.o = nn.Linear(8, 16), nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(16, 4)
        self.position = nn.Parameter(torch.randn(4, 16, 16) * 0.1)
        self.how = how

    def forward(self, x, y):
        b = x.shape[0] // 16
        h = x.reshape(b, 16, 8)
        q = self.q(h).view(b, 16, 4, 4).transpose(1, 2)
        k = self.k(h).view(b, 16, 2, 4).transpose(1, 2)
        v = self.v(h).view(b, 16, 2, 4).transpose(1, 2)
        keep = torch.arange(16) < 12  # the last 4 keys are padding
        if self.how == "bool padding mask":
            mask = keep.view(1, 1, 1, 16).expand(b, 1, 1, 16)
        elif self.how == "learned bias":
            mask = self.position
        else:  # "a float padding mask plus a learned bias"
            mask = torch.where(keep, 0.0, float("-inf")) + self.position
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return F.cross_entropy(self.o(out.transpose(1, 2).reshape(b * 16, 16)), y)


@pytest.mark.parametrize("how", ["bool padding mask", "learned bias", "a float padding mask plus a learned bias"])
def test_attention_with_a_mask_trains_as_in_pytorch(memplan, tmp_path, how):
    torch.manual_seed(0)
    text, with_grad = compare_three_steps(memplan, tmp_path, MaskedAttention(how), batch())
    assert "= masked_attention(" in text and "extern" not in text, text
    assert ("position" in with_grad) == (how != "bool padding mask")


class MaskLogic(nn.Module):
    """Masks combined with &, |, ^ and ~ (Mistral's sliding window, DeBERTa's inversion) and
    integer abs and minimum (T5's relative position buckets) choosing what the loss reads."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, x, y):
        h = self.a(x)
        i = torch.arange(8)
        distance = torch.minimum((i.view(8, 1) - i.view(1, 8)).abs(), torch.full((8, 8), 3))
        near = distance < 3
        causal = i.view(8, 1) >= i.view(1, 8)
        keep = (near & causal) | (~causal ^ near)
        scores = h[:, :, None] * h[:, None, :] / 8
        scores = scores.masked_fill(~keep, -1e4) + distance.float() * 0.01
        return F.cross_entropy(scores.softmax(-1).sum(1)[:, :4], y)


def test_mask_logic_and_integer_abs_and_minimum_train_as_in_pytorch(memplan, tmp_path):
    torch.manual_seed(0)
    text, with_grad = compare_three_steps(memplan, tmp_path, MaskLogic(), batch())
    assert "extern" not in text and with_grad == {"a.weight", "a.bias"}


class AvgPools(nn.Module):
    """Average pooling as DenseNet's transitions (2x2, stride 2) and Inception's branches
    (3x3, stride 1, padding counted) use it."""

    def __init__(self):
        super().__init__()
        self.conv, self.head = nn.Conv2d(2, 4, 3, padding=1), nn.Linear(4 * 2 * 2, 4)
        self.up = nn.Linear(8, 128)

    def forward(self, x, y):
        h = F.avg_pool2d(torch.relu(self.conv(self.up(x).view(16, 2, 8, 8))), 3, 1, 1)
        h = nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False)(h)
        h = F.avg_pool2d(h, 2)
        return F.cross_entropy(self.head(h.flatten(1)), y)


def test_average_pooling_trains_as_in_pytorch(memplan, tmp_path):
    torch.manual_seed(0)
    text, with_grad = compare_three_steps(memplan, tmp_path, AvgPools(), batch())
    assert text.count("groups=4") == 3 and "extern" not in text, text
