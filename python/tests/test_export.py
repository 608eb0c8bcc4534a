"""The exporter on small hand-made models: names, source lines, views kept as views,
optimizers, errors; the command line (`export`, `fit`)."""

import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import memplan_torch
from memplan_torch.step import float_text

from conftest import ZOO, memplan_binary, read_safetensors


class Heads(nn.Module):
    """Splits features into heads and back, as attention code does."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, x, y):
        b, t, c = x.shape
        h = self.proj(x).view(b, t, 4, 4).transpose(1, 2)  # views of proj's bytes
        h = torch.softmax(h, dim=-1)
        h = h.transpose(1, 2).reshape(b * t, c)  # a copy: the transposed data is not dense
        return F.cross_entropy(self.out(h), y)


def heads_inputs():
    return torch.randn(2, 3, 16), torch.randint(0, 4, (6,))


def lines(text, op):
    return [line for line in text.splitlines() if f"= {op}(" in line]


def test_names_are_state_dict_and_module_paths_and_the_loss_is_loss():
    text = memplan_torch.export_step(Heads(), heads_inputs())
    assert "%proj.weight: f32[16,16] param" in text and "%out.bias: f32[4] param" in text
    assert "%x: f32[2,3,16] input" in text and "%y: i64[6] input" in text
    assert "  %proj: f32[2,3,16] = add(%proj.mm, %proj.bias)" in text, "a module's result is named after it"
    assert "%loss: f32[] = cross_entropy(" in text
    assert text.rstrip().endswith("backward %loss with adamw()\n  return %loss\n}".rstrip())


def test_every_op_carries_the_users_source_line_and_module():
    text = memplan_torch.export_step(Heads(), heads_inputs())
    source = open(__file__).read().splitlines()
    for line in text.splitlines():
        if " = " not in line or not line.strip().startswith("%"):
            continue
        assert 'loc("test_export.py":' in line, line
        number, module = line.split('loc("test_export.py":')[1].rstrip(")").split(", ")
        assert "def forward" not in source[int(number) - 1] and source[int(number) - 1].strip(), f"{line} -> {number}"
        assert module in ('"proj"', '"out"', '""'), line
    assert 'add(%proj.mm, %proj.bias) loc("test_export.py":29, "proj")' in text


def test_views_stay_views_and_only_a_non_dense_reshape_copies():
    text = memplan_torch.export_step(Heads(), heads_inputs())
    assert len(lines(text, "reshape")) == 2, text
    assert len(lines(text, "transpose")) == 2, text
    assert len(lines(text, "contiguous")) == 1, "PyTorch's reshape of transposed data copies, and so does the step"


def test_optimizers_take_pytorchs_defaults():
    assert memplan_torch.optimizer_attrs("adamw") == ("adamw", [])
    assert memplan_torch.optimizer_attrs("adamw", lr=3e-4, weight_decay=0.1) == ("adamw", [("lr", 3e-4), ("weight_decay", 0.1)])
    assert memplan_torch.optimizer_attrs("sgd") == ("sgd", [("lr", 1e-3)])
    assert memplan_torch.optimizer_attrs("momentum", lr=0.1) == ("sgd_momentum", [("lr", 0.1)])
    with pytest.raises(memplan_torch.ExportError, match="takes no weight_decay"):
        memplan_torch.optimizer_attrs("adam", weight_decay=0.1)
    with pytest.raises(memplan_torch.ExportError, match="unknown optimizer"):
        memplan_torch.optimizer_attrs("lion")


def test_floats_print_as_memplan_prints_them():
    assert [float_text(x) for x in (1e-8, 0.001, 1.0, -2.5e-10, float("-inf"))] == ["1e-8", "0.001", "1.0", "-2.5e-10", "-inf"]


class Unsupported(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.erfinv(torch.tanh(self.lin(x))).sum()


def test_an_op_memplan_has_no_row_for_is_planned_as_extern(memplan, tmp_path):
    text = memplan_torch.export_step(Unsupported(), (torch.randn(2, 4),))
    [line] = lines(text, "extern")
    assert 'target="aten::erfinv.default", shape=[2, 4], dtype=f32' in line
    path = tmp_path / "erfinv.step"
    path.write_text(text)
    assert memplan("check", path).stdout.startswith("ok: ")
    assert "extern_backward(" in memplan("expand", path).stdout
    done = memplan("run", path, check=False)
    assert done.returncode == 1 and "cannot execute: aten::erfinv.default (1x)" in done.stderr


def test_an_extern_op_counts_the_flops_of_the_ops_it_is_made_of():
    """conv_transpose3d (no memplan op; its decomposition, `convolution`, has none either,
    so it stays one extern op) counted by PyTorch's flop counter through that convolution
    as 2·(input positions)·k³·C_in·C_out FLOPs; erfinv, which it does not count, one per
    element."""

    class Volume(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.ConvTranspose3d(2, 4, 3, bias=False)

        def forward(self, x):
            return torch.erfinv(torch.tanh(self.conv(x))).sum()

    text = memplan_torch.export_step(Volume(), (torch.randn(1, 2, 5, 5, 5),))
    [conv] = [line for line in lines(text, "extern") if "aten::conv_transpose3d" in line]
    assert f"flops={2 * (5 * 5 * 5) * 27 * (2 * 4)}" in conv, conv
    [erfinv] = [line for line in lines(text, "extern") if "erfinv" in line]
    assert f"flops={4 * 7 * 7 * 7}" in erfinv, erfinv


def test_a_model_must_return_a_scalar_loss():
    class NoLoss(nn.Module):
        def forward(self, x):
            return x * 2

    with pytest.raises(memplan_torch.ExportError, match="not a float scalar loss"):
        memplan_torch.export_step(NoLoss(), (torch.randn(4),))


def test_a_virtual_model_has_no_weights_and_exports_the_same(memplan, tmp_path):
    sys.path.insert(0, str(ZOO))
    import mlp

    sys.path.pop(0)
    real = memplan_torch.export_step(*mlp.make())
    with memplan_torch.virtual():
        model, inputs = mlp.make()
    assert all(p.device.type == "meta" for p in model.parameters())
    assert memplan_torch.export_step(model, inputs) == real
    path = tmp_path / "mlp.step"
    path.write_text(real)
    assert memplan("check", path).stdout.startswith("ok: ")


def run_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "memplan_torch", *map(str, args)], capture_output=True, text=True, cwd=cwd)


def test_export_never_overwrites_and_says_what_is_wrong(tmp_path):
    out = tmp_path / "m.step"
    out.write_text("mine")
    done = run_cli("export", f"{ZOO / 'mlp.py'}:make", "-o", out, cwd=tmp_path)
    assert done.returncode == 1 and "exists; memplan never overwrites a file" in done.stderr
    assert out.read_text() == "mine"
    done = run_cli("export", f"{ZOO / 'mlp.py'}:nothing", "-o", tmp_path / "n.step", cwd=tmp_path)
    assert done.returncode == 1 and "defines no `nothing`" in done.stderr
    done = run_cli("export", "missing.py:make", "-o", tmp_path / "n.step", cwd=tmp_path)
    assert done.returncode == 1 and "no such file" in done.stderr
    model = tmp_path / "bad.py"
    model.write_text(textwrap.dedent("""
        import torch
        class M(torch.nn.Module):
            def forward(self, x):
                return torch.erfinv(x).sum()
        def make():
            return M(), (torch.randn(3),)
    """))
    done = run_cli("export", f"{model}:make", "-o", tmp_path / "erfinv.step", cwd=tmp_path)
    assert done.returncode == 0 and "note: written as extern" in done.stderr and "aten::erfinv.default (1x)" in done.stderr


def test_data_dependent_python_is_one_screen_from_the_command_line(tmp_path):
    model = tmp_path / "branchy.py"
    model.write_text(textwrap.dedent("""
        import torch
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(4, 4)
            def forward(self, x):
                h = self.a(x)
                if h.sum() > 0:
                    h = h * 2
                return h.sum()
        def make():
            return M(), (torch.randn(3, 4),)
    """))
    done = run_cli("export", f"{model}:make", "-o", tmp_path / "b.step", cwd=tmp_path)
    lines = [line for line in done.stderr.splitlines() if "NumPy" not in line and "_conversion_method" not in line]
    assert done.returncode == 1 and not (tmp_path / "b.step").exists()
    assert lines[0] == "error: branchy.py:9: `if h.sum() > 0:` depends on a tensor's values (data-dependent Python), " \
        "which a planned training step cannot: its ops and shapes are fixed before it runs", done.stderr
    assert len(lines) == 2 and lines[1].startswith("  hint: compute both sides"), done.stderr
    # MEMPLAN_TORCH_DETAILS=1 shows what torch raised too, then the same error.
    import os

    details = subprocess.run([sys.executable, "-m", "memplan_torch", "export", f"{model}:make", "-o", tmp_path / "b.step"],
                             capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "MEMPLAN_TORCH_DETAILS": "1"})
    assert details.returncode == 1 and "Traceback" in details.stderr and lines[0] in details.stderr


def test_the_command_line_reads_sizes_and_dtypes_as_users_write_them_and_fails_early(tmp_path):
    """Units in any case, a bare number refused (24 is not 24 bytes), torch's dtype names,
    a misused flag exit 1 (2 says nothing fits), a missing output directory refused before
    any export, `--batch N` calling FUNC(batch=N), and a FUNC without `batch` a clear error."""
    from memplan_torch.__main__ import Failure, parse_size

    assert parse_size("24gb") == 24 * 10**9 and parse_size("24GiB") == parse_size("24 gib") == 24 << 30
    assert parse_size("1.5KiB") == 1536 and parse_size("512B") == 512
    for bad, why in [("24", "has no unit"), ("24 parsecs", "unknown unit"), ("GiB", "expected a size"), ("0MiB", "positive")]:
        with pytest.raises(Failure, match=why):
            parse_size(bad)
    done = run_cli("fit", f"{ZOO / 'mlp.py'}:make", "--memory", "24", "--memplan", memplan_binary(), cwd=tmp_path)
    assert done.returncode == 1 and "`24` has no unit" in done.stderr
    done = run_cli("export", f"{ZOO / 'mlp.py'}:make", "-o", tmp_path / "x.step", "--amp", "float16", "--bogus", cwd=tmp_path)
    assert done.returncode == 1 and "unrecognized arguments: --bogus" in done.stderr
    done = run_cli("export", f"{ZOO / 'mlp.py'}:make", "-o", tmp_path / "no" / "x.step", cwd=tmp_path)
    assert done.returncode == 1 and "does not exist" in done.stderr and "Traceback" not in done.stderr
    assert "NumPy" not in done.stderr
    model = tmp_path / "sized.py"
    model.write_text(textwrap.dedent("""
        import torch
        class Loss(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 1)
            def forward(self, x):
                return self.lin(x).sum()
        def make(batch=2):
            return Loss(), (torch.randn(batch, 4),)
        def fixed():
            return Loss(), (torch.randn(3, 4),)
    """))
    done = run_cli("export", f"{model}:make", "-o", tmp_path / "b.step", "--batch", 5, "--amp", "bfloat16", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "%x: f32[5,4] input" in (tmp_path / "b.step").read_text()
    done = run_cli("export", f"{model}:fixed", "-o", tmp_path / "c.step", "--batch", 5, cwd=tmp_path)
    assert done.returncode == 1 and "takes no `batch` argument" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "c.step").exists()


def test_fit_finds_the_largest_batch_that_fits(tmp_path):
    done = run_cli("fit", f"{ZOO / 'mlp.py'}:make", "--memory", "8MiB", "--memplan", memplan_binary(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    best = int(done.stdout.strip().splitlines()[-1].split(": ")[-1])
    rows = {int(line.split()[0]): int(line.split()[1]) for line in done.stdout.splitlines()[1:-1] if line.split()[1].isdigit()}
    assert rows[best] <= 8 << 20 and best + 1 in rows and rows[best + 1] > 8 << 20, done.stdout
    # Both terms, each named: memplan's arena and PyTorch eager's predicted memory (the
    # mlp's eager step needs more than 8 MiB: cuBLAS's workspace alone is 32 MiB).
    header = done.stdout.splitlines()[0]
    assert "memplan arena" in header and "PyTorch eager allocated" in header and "PyTorch eager reserved" in header
    assert "PyTorch eager fits no batch in 8MiB" in done.stdout
    done = run_cli("fit", f"{ZOO / 'mlp.py'}:make", "--memory", "10TiB", "--max-batch", "64", "--memplan", memplan_binary(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "the --max-batch cap, 64: larger batches were not tried" in done.stdout
    done = run_cli("fit", f"{ZOO / 'mlp.py'}:make", "--memory", "1KiB", "--memplan", memplan_binary(), cwd=tmp_path)
    assert done.returncode == 2 and "no batch fits" in done.stderr


class Mixed(nn.Module):
    """One of each op a handler maps beyond the zoo's: a depthwise dilated conv, nearest
    upsampling by a factor, masked_fill and where with a scalar, narrow and stack."""

    def __init__(self):
        super().__init__()
        self.depthwise = nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=4)
        self.pointwise = nn.Conv2d(4, 2, 1)

    def forward(self, x, drop, leak, target):
        h = F.interpolate(self.depthwise(x), scale_factor=2, mode="nearest")
        h = self.pointwise(h).masked_fill(drop, 0.0)
        h = torch.where(leak, 0.1 * h, h)
        parts = torch.stack([h.narrow(1, 0, 1), h.narrow(1, 1, 1)], dim=0).sum(0)
        return ((parts - target) ** 2).mean()


def mixed_inputs():
    torch.manual_seed(1)
    return torch.randn(2, 4, 5, 5), torch.rand(2, 1, 10, 10) > 0.7, torch.rand(10) > 0.5, torch.randn(2, 1, 10, 10)


def test_handled_ops_become_memplan_ops_and_compute_pytorchs_loss(memplan, tmp_path):
    torch.manual_seed(0)
    model = Mixed()
    text = memplan_torch.export_step(model, mixed_inputs(), optimizer="sgd")
    assert "extern" not in text, text
    [conv] = [line for line in lines(text, "conv2d") if "groups=4" in line]
    assert "dilation=[2, 2]" in conv
    assert lines(text, "upsample_nearest2d") and lines(text, "masked_fill") and lines(text, "where")
    step = tmp_path / "mixed.step"
    step.write_text(text)
    weights = tmp_path / "w.safetensors"
    from memplan_torch import safetensors, step_arguments

    safetensors.write_new(weights, step_arguments(model, mixed_inputs()))
    done = memplan("run", step, "--weights", weights)
    [loss] = [float(line.split("loss")[1]) for line in done.stdout.splitlines() if line.startswith("step 1")]
    assert loss == pytest.approx(model(*mixed_inputs()).item(), rel=1e-5)


class HardGates(nn.Module):
    """MobileNetV3's gates: hardswish activations and a hardsigmoid squeeze-excitation."""

    def __init__(self):
        super().__init__()
        self.a, self.gate, self.b = nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 4)

    def forward(self, x, y):
        h = F.hardswish(self.a(x))
        h = h * F.hardsigmoid(self.gate(h))
        return F.cross_entropy(self.b(h), y)


def hard_inputs():
    torch.manual_seed(3)
    # 4·N(0, 1) inputs put many pre-activations beyond the kinks at ±3.
    return torch.randn(32, 8) * 4, torch.randint(0, 4, (32,))


def test_hardsigmoid_trains_as_in_pytorch(memplan, tmp_path):
    """Three SGD steps of hardswish and hardsigmoid in memplan against PyTorch's (the
    tolerances of test_zoo.py: losses to 1e-5, parameters within 5% of SGD's largest move)."""
    from memplan_torch import safetensors, step_arguments
    from test_zoo import memplan_steps, torch_steps

    torch.manual_seed(0)
    model = HardGates()
    text = memplan_torch.export_step(model, hard_inputs(), optimizer="sgd")
    assert lines(text, "hardsigmoid") and lines(text, "hardswish") and "extern" not in text, text
    step, weights = tmp_path / "hard.step", tmp_path / "w.safetensors"
    step.write_text(text)
    safetensors.write_new(weights, step_arguments(model, hard_inputs()))
    losses, after = memplan_steps(memplan, tmp_path, step, weights, 3)
    expected, largest_grad = torch_steps(model, hard_inputs(), torch.optim.SGD(model.parameters(), lr=1e-3))
    assert losses == pytest.approx(expected, rel=1e-5), f"memplan {losses}, PyTorch {expected}"
    assert set(after) == {name for name, _ in model.named_parameters()} == set(largest_grad)
    for name, param in model.named_parameters():
        difference = (after[name].double() - param.detach().double()).abs()
        assert float(difference.max()) <= 0.05 * 3 * 1e-3 * largest_grad[name], name


class Dropping(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 1)

    def forward(self, x):
        return self.b(F.dropout(F.relu(self.a(F.dropout(x, 0.2))), 0.5)).mean()


def test_dropout_takes_the_steps_seed_and_a_stream_per_site(memplan, tmp_path):
    text = memplan_torch.export_step(Dropping(), (torch.randn(4, 8),))
    assert "%dropout_seed: i64[] input," in text
    sites = lines(text, "dropout")
    assert [("p=0.2" in s, "stream=0" in s) for s in sites] == [(True, True), (False, False)]
    assert "p=0.5, stream=1" in sites[1]
    step = tmp_path / "dropping.step"
    step.write_text(text)
    assert memplan("check", step).stdout.startswith("ok: ")
    assert "dropout_backward(" in memplan("expand", step).stdout


class HalfHead(nn.Module):
    """A bf16 head whose logits the model casts to f32 for its loss itself (as training code
    without autocast does); with `also`, something else reads the f32 logits too."""

    def __init__(self, also=False):
        super().__init__()
        torch.manual_seed(0)
        self.head = nn.Linear(8, 10).to(torch.bfloat16)
        self.also = also

    def forward(self, x, y):
        logits = self.head(x.to(torch.bfloat16)).float()
        loss = F.cross_entropy(logits, y)
        return loss + logits.mean() if self.also else loss


def half_head_inputs():
    torch.manual_seed(2)
    return torch.randn(4, 8), torch.randint(0, 10, (4,))


def test_an_f32_cast_only_the_loss_reads_is_fused_into_it(memplan, tmp_path):
    model = HalfHead()
    text = memplan_torch.export_step(model, half_head_inputs())
    [loss] = lines(text, "cross_entropy")
    assert loss.startswith("  %loss: f32[] = cross_entropy(%head, %y, f32_loss=true)"), loss
    assert not [line for line in lines(text, "cast") if "to=f32" in line], "no f32 copy of the logits"
    step = tmp_path / "half_head.step"
    step.write_text(text)
    weights = tmp_path / "w.safetensors"
    from memplan_torch import safetensors, step_arguments

    safetensors.write_new(weights, step_arguments(model, half_head_inputs()))
    done = memplan("run", step, "--weights", weights)
    [value] = [float(line.split("loss")[1]) for line in done.stdout.splitlines() if line.startswith("step 1")]
    # The bf16 logits are rounded once in memplan (after the bias add) and in PyTorch (whose
    # addmm adds the bias before rounding): a few differ by a bf16 ulp (2^-8 relative), as
    # in test_zoo's autocast comparison; the loss of the same logits is computed in f32.
    assert value == pytest.approx(model(*half_head_inputs()).item(), rel=1e-4)

    # Another reader of the f32 logits: the cast stays, and the loss reads it.
    text = memplan_torch.export_step(HalfHead(also=True), half_head_inputs())
    [cast] = [line for line in lines(text, "cast") if "to=f32" in line]
    assert cast.startswith("  %cast.1: f32[4,10] = cast(%head, to=f32)"), cast
    [loss] = lines(text, "cross_entropy")
    assert "= cross_entropy(%cast.1, %y) loc(" in loss, loss
    step.write_text(text)
    assert memplan("check", step).stdout.startswith("ok: ")


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.proj = nn.Linear(16, 48), nn.Linear(16, 16)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, 4, 4).transpose(1, 2) for z in self.qkv(x).split(16, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c)).mean()


def test_attention_writes_rows_before_heads_so_merging_the_heads_copies_nothing(memplan, tmp_path):
    text = memplan_torch.export_step(SelfAttention(), (torch.randn(2, 5, 16),))
    [attention] = lines(text, "attention")
    assert attention.startswith("  %attention: f32[2,5,4,4], %attention.lse: f32[2,4,5] = attention("), attention
    assert "causal=true, scale=0.5, transpose_out=true)" in attention
    assert not lines(text, "contiguous"), "PyTorch's flash layout: y.transpose(1, 2).contiguous() is a view"
    step = tmp_path / "attention.step"
    step.write_text(text)
    assert memplan("check", step).stdout.startswith("ok: ")


def test_weights_are_written_byte_for_byte(tmp_path):
    """Every dtype, a transposed (non-contiguous) view, a scalar and an empty tensor come
    back from the file equal, in row-major order."""
    from memplan_torch import safetensors

    torch.manual_seed(0)
    tensors = {
        "w": torch.randn(3, 4).t(),
        "h": torch.randn(5, dtype=torch.float16),
        "b": torch.randn(2, 3, dtype=torch.bfloat16),
        "i": torch.arange(-3, 3, dtype=torch.int32),
        "l": torch.tensor([1 << 40, -5]),
        "m": torch.tensor([True, False, True]),
        "s": torch.tensor(2.5),
        "e": torch.zeros(0, 3),
    }
    path = tmp_path / "w.safetensors"
    safetensors.write_new(path, tensors)
    back = read_safetensors(path)
    assert list(back) == list(tensors)
    for name, tensor in tensors.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name


def test_autocast_casts_a_value_once_for_all_its_readers():
    """Under --amp, PyTorch's autocast casts the normed input once for each of q, k and v;
    the step casts it once (values never change, so one cast serves every reader)."""
    import re

    sys.path.insert(0, str(ZOO))
    import llama

    model, inputs = llama.make_small()
    text = memplan_torch.export_step(model, inputs, amp="bf16")
    casts = re.findall(r"= cast\((%[\w.]+), (to=\w+)\)", text)
    assert casts and len(casts) == len(set(casts)), [c for c in casts if casts.count(c) > 1][:3]
    # The projections of q, k and v read the same cast of the attention's normed input.
    reads = re.findall(r"%layers\.0\.attention\.w[qkv]: \S+ = matmul\((%[\w.]+), ", text)
    assert len(reads) == 3 and len(set(reads)) == 1, reads
