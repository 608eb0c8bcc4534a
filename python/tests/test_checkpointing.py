"""`checkpoint`: which modules to wrap in torch.utils.checkpoint for a memory target.

Proved as the issue asks: the advice is applied with `apply_checkpointing`, the step is
predicted again from scratch and meets the target, the export keeps the checkpointing
(memplan recomputes what PyTorch recomputes) and plans and checks, and PyTorch training the
checkpointed model computes the same loss and gradients as the plain one.
"""

import json
import subprocess
import sys

import torch

from conftest import REPO, ZOO, memplan_binary

sys.path.insert(0, str(ZOO))

import gpt2  # noqa: E402

from memplan_torch import apply_checkpointing, export_step  # noqa: E402
from memplan_torch.checkpointing import candidates  # noqa: E402
from memplan_torch.predict import record, replay  # noqa: E402

ENV = {"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/bin:/bin"}


def allocated(model, inputs) -> int:
    return replay(record(model, inputs, optimizer="adamw"), memplan_binary())["max_memory_allocated"]


def test_the_advice_meets_the_target_when_applied_and_exported(tmp_path):
    build = lambda: gpt2.make_small(batch=32)
    model, inputs = build()
    assert candidates(model)[0] == ["transformer.h.0", "transformer.h.1"]
    plain = allocated(model, inputs)
    model, inputs = build()
    restore = apply_checkpointing(model, ["transformer.h.0", "transformer.h.1"])
    everything = allocated(model, inputs)
    restore()
    assert everything < plain
    target = (plain + everything) // 2
    done = subprocess.run([sys.executable, "-m", "memplan_torch", "checkpoint", str(ZOO / "gpt2.py:make_small"), "--batch", "32",
                           "--memory", f"{target}B", "--by", "allocated", "--format", "json", "--memplan", memplan_binary()],
                          capture_output=True, text=True, cwd=REPO, env=ENV)
    assert done.returncode == 0, done.stderr
    advice = json.loads(done.stdout)["advice"]
    assert advice["modules"] and advice["eager"]["max_memory_allocated"] <= target
    # Applied to a fresh model, predicted from scratch: the target holds.
    model, inputs = build()
    apply_checkpointing(model, advice["modules"], selective=advice["selective"])
    assert allocated(model, inputs) <= target
    # Exported with the checkpointing kept: one region per wrapped module, and memplan
    # plans and checks the step.
    text = export_step(model, inputs, user_checkpoint="keep")
    regions = {line.rsplit("checkpoint(", 1)[1].split(")")[0] for line in text.splitlines() if ") checkpoint(" in line}
    assert len(regions) == len(advice["modules"])
    step = tmp_path / "checkpointed.step"
    step.write_text(text)
    checked = subprocess.run([memplan_binary(), "check", str(step)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


def test_checkpointing_changes_memory_not_the_step():
    torch.manual_seed(0)
    results = []
    for wrap in (False, True):
        model, (tokens, targets) = gpt2.make_small(batch=4)
        if wrap:
            apply_checkpointing(model, ["transformer.h.0", "transformer.h.1"], selective=True)
        loss = model(tokens, targets)
        loss.backward()
        results.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    (loss_a, grads_a), (loss_b, grads_b) = results
    assert torch.equal(loss_a, loss_b)
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=0, atol=1e-6, msg=name)


def test_no_plan_that_fits_is_exit_2_with_the_least_reached():
    done = subprocess.run([sys.executable, "-m", "memplan_torch", "checkpoint", str(ZOO / "gpt2.py:make_small"), "--memory", "1KiB",
                           "--memplan", memplan_binary()], capture_output=True, text=True, cwd=REPO, env=ENV)
    assert done.returncode == 2
    assert "the least tried is" in done.stderr and "Traceback" not in done.stderr
