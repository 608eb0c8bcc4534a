"""`predict`: PyTorch's own memory for a training step, before running it.

Held to PyTorch itself: on the CPU the prediction is compared with PyTorch's profiler
running the same step for real; the CUDA emulation's dtypes with CUDA's own autocast run by
PyTorch's dispatcher on fake CUDA tensors; the trace `predict` writes replays to the figures
it printed.
"""

import json
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import REPO, ZOO, memplan_binary

sys.path.insert(0, str(REPO / "benches"))
sys.path.insert(0, str(ZOO))

from memplan_torch.cuda_autocast import CudaAutocast  # noqa: E402
from memplan_torch.export import _cuda_autocast, _fake_cuda  # noqa: E402
from memplan_torch.predict import cuda_sdpa_backend, record, replay  # noqa: E402


class Mixed(nn.Module):
    """Ops of every autocast policy: lower precision (linear, conv, bmm), float32 (layer
    norm, group norm, exp, pow, mse), a dtype set (softmax, sum), promotion (cat), none
    (gelu, add)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(2, 8)
        self.fc = nn.Linear(8 * 4 * 4, 32)
        self.ln = nn.LayerNorm(32)
        self.out = nn.Linear(32, 10)

    def forward(self, x, y):
        h = self.norm(self.conv(x)).flatten(1)
        h = F.gelu(self.ln(self.fc(h)))
        a = torch.bmm(h.unsqueeze(2), h.unsqueeze(1)).softmax(-1)
        extra = a.sum() + h.exp().pow(2).mean() + F.mse_loss(h, torch.cat([h[:, :16], h[:, 16:].float()], 1))
        return F.cross_entropy(self.out(h), y) + 1e-3 * extra


class _Dtypes(TorchDispatchMode):
    """(op, output dtype) of every op that computes something."""

    def __init__(self, paused=()):
        super().__init__()
        self.seen = []
        self.paused = paused  # the emulation's own calls (on CUDA twins) are not the model's

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and not self.paused and func.overloadpacket.__name__ not in ("detach", "view", "_unsafe_view", "t", "unsqueeze", "slice", "expand", "transpose", "alias"):
            self.seen.append((func.overloadpacket.__name__, out.dtype))
        return out


def test_cuda_autocast_on_cpu_casts_as_cuda_autocast_does():
    model, x, y = Mixed(), torch.randn(4, 3, 4, 4), torch.randint(0, 10, (4,))
    # CUDA's own autocast, on fake CUDA tensors (the forward runs; no backward is needed).
    with _fake_cuda(model, (x, y)) as (cx, cy), _cuda_autocast(torch.bfloat16), _Dtypes() as cuda:
        model(cx, cy)
    # The emulation, on fake CPU tensors.
    paused = []
    mode = FakeTensorMode()
    with mode:
        fx, fy = torch.empty(4, 3, 4, 4), torch.zeros(4, dtype=torch.long)
    fake_params = {}
    with CudaAutocast("bf16", paused) as autocast, mode:
        for name, p in model.named_parameters():
            fake_params[name] = nn.Parameter(torch.empty(p.shape))
        with autocast.region(), _Dtypes(paused) as cpu:
            torch.func.functional_call(model, fake_params, (fx, fy))
    assert [dtype for _, dtype in cpu.seen] == [dtype for _, dtype in cuda.seen], list(zip(cpu.seen, cuda.seen))
    assert (torch.float32 in {d for _, d in cuda.seen}) and (torch.bfloat16 in {d for _, d in cuda.seen})


def test_the_cpu_prediction_is_pytorchs_own_peak():
    from torch_cpu_peak import pytorch_peak

    import gpt2
    import resnet

    for build in (gpt2.make_small, resnet.make_small):
        model, inputs = build()
        measured = pytorch_peak(model, inputs)
        model, inputs = build()
        predicted = replay(record(model, inputs, optimizer="adamw", device="cpu"), memplan_binary())["max_requested"]
        # Within the 5%: a CPU kernel's scratch that outlives its own call is not seen.
        assert abs(predicted - measured) <= 0.05 * measured, (build.__module__, predicted, measured)


def test_sdpa_backend_is_chosen_as_on_a_gpu():
    with torch.device("meta"):
        q = torch.empty(2, 8, 16, 64, dtype=torch.bfloat16)
        kv = torch.empty(2, 2, 16, 64, dtype=torch.bfloat16)
    assert cuda_sdpa_backend(q, q, q, is_causal=True) == "flash"
    assert cuda_sdpa_backend(q.float(), q.float(), q.float()) == "efficient"
    assert cuda_sdpa_backend(q, q, q, attn_mask=torch.empty(16, 16, device="meta")) == "efficient"
    assert cuda_sdpa_backend(q.float(), kv.float(), kv.float(), enable_gqa=True) == "math"
    assert cuda_sdpa_backend(q.float(), kv.float(), kv.float(), enable_gqa=True, autocast=torch.bfloat16) == "flash"


def test_predict_prints_pytorchs_terms_and_its_trace_replays_to_them(tmp_path):
    trace = tmp_path / "step.trace"
    done = subprocess.run([sys.executable, "-m", "memplan_torch", "predict", str(ZOO / "gpt2.py:make_small"), "--batch", "3",
                           "--amp", "bfloat16", "--format", "json", "--trace", str(trace), "--memplan", memplan_binary()],
                          capture_output=True, text=True, cwd=REPO, env={"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    eager = result["eager"]
    assert result["batch"] == 3 and result["amp"] == "bf16"
    assert 0 < eager["max_memory_allocated"] <= eager["max_memory_reserved"]
    assert eager["max_memory_allocated"] % 512 == 0
    assert result["memplan"]["arena"] > 0
    assert result["fixed"]["cublas_workspace"] == 32 << 20
    replayed = subprocess.run([memplan_binary(), "replay", str(trace), "--format", "json"], capture_output=True, text=True)
    figures = json.loads(replayed.stdout)
    assert (figures["max_memory_allocated"], figures["max_memory_reserved"]) == (eager["max_memory_allocated"], eager["max_memory_reserved"])
    # A larger batch needs more.
    bigger = subprocess.run([sys.executable, "-m", "memplan_torch", "predict", str(ZOO / "gpt2.py:make_small"), "--batch", "6",
                             "--amp", "bf16", "--format", "json", "--no-arena", "--memplan", memplan_binary()],
                            capture_output=True, text=True, cwd=REPO, env={"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/bin:/bin"})
    assert json.loads(bigger.stdout)["eager"]["max_memory_allocated"] > eager["max_memory_allocated"]


@pytest.mark.parametrize("args, message", [
    (["predict", "nofile.py:make"], "no such file"),
    (["predict", str(ZOO / "mlp.py:make"), "--batch", "0"], "positive batch"),
])
def test_predict_refuses_bad_input_clearly(args, message):
    done = subprocess.run([sys.executable, "-m", "memplan_torch", *args, "--memplan", memplan_binary()],
                          capture_output=True, text=True, cwd=REPO, env={"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr


def test_a_hugging_face_model_predicts_under_cuda_autocast():
    sys.path.insert(0, str(REPO / "python" / "models"))
    import suite

    with torch.device("meta"):
        model, inputs = suite.llama()
    figures = {amp: replay(record(model, inputs, amp=amp), memplan_binary()) for amp in (None, "bf16")}
    for f in figures.values():
        assert 0 < f["max_memory_allocated"] <= f["max_memory_reserved"]
    # Under bf16 autocast the weights' casts and the f32 logits' copies exist: not the f32 step.
    assert figures["bf16"]["max_requested"] != figures[None]["max_requested"]
