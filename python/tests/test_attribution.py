"""Where `memplan report --by module` (and `--by loc`) puts the loss, the logits and their
gradients for an exported language model: the logits and their gradient under the output
head, named after it, at the head's line; the loss at the top-level module's loss line.

The rule (docs/REPORTS.md, "Source locations"): a gradient is attributed where the value it
is the gradient of is (the op that made its bytes, views followed back); a view a caller
takes of a submodule's result is named after the result (`%lm_head.reshape`).
"""

import json

import torch
import torch.nn as nn
import torch.nn.functional as F

import memplan_torch

VOCAB, DIM = 512, 8


class TinyLM(nn.Module):
    """An output head much wider than the model, so its logits dominate the memory."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.norm = nn.LayerNorm(DIM)
        self.lm_head = nn.Linear(DIM, VOCAB, bias=False)

    def forward(self, ids, targets):
        logits = self.lm_head(self.norm(self.embed(ids)))  # HEAD_LINE
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))  # LOSS_LINE


def line_of(marker: str) -> int:
    source = open(__file__).read().splitlines()
    return next(i + 1 for i, line in enumerate(source) if line.rstrip().endswith(f"# {marker}"))


def export(tmp_path):
    torch.manual_seed(0)
    ids = torch.randint(0, VOCAB, (2, 16))
    text = memplan_torch.export_step(TinyLM(), (ids, torch.roll(ids, -1, dims=1)))
    step = tmp_path / "tiny_lm.step"
    step.write_text(text)
    return step, text


def test_the_callers_view_of_the_logits_is_named_after_the_head(tmp_path):
    _, text = export(tmp_path)
    head, loss = line_of("HEAD_LINE"), line_of("LOSS_LINE")
    assert f'%lm_head: f32[2,16,{VOCAB}] = matmul(%norm, %lm_head.weight, transpose_b=true) loc("test_attribution.py":{head}, "lm_head")' in text, text
    # The root's `logits.view(-1, V)`: the root's op at the loss line, named after the logits.
    assert f'%lm_head.reshape: f32[32,{VOCAB}] = reshape(%lm_head, shape=[32, {VOCAB}]) loc("test_attribution.py":{loss}, "")' in text, text
    # A view of an input is named as before (the root's, `reshape`); so is the loss.
    assert f'%reshape: i64[32] = reshape(%targets, shape=[32]) loc("test_attribution.py":{loss}, "")' in text, text
    assert f'%loss: f32[] = cross_entropy(%lm_head.reshape, %reshape) loc("test_attribution.py":{loss}, "")' in text, text


def test_the_logits_gradient_is_the_heads(memplan, tmp_path):
    step, _ = export(tmp_path)
    head, loss = line_of("HEAD_LINE"), line_of("LOSS_LINE")
    expanded = memplan("expand", step).stdout
    op_line = {line.split(":")[0].strip(): line for line in expanded.splitlines() if line.startswith("  %")}
    # The loss's backward writes the logits' gradient: the head's line and module.
    grad = op_line["%lm_head.reshape.grad"]
    assert "= cross_entropy_backward(" in grad and grad.endswith(f'loc("test_attribution.py":{head}, "lm_head")'), grad
    # The head's backward writes the norm's output gradient: the norm's.
    assert op_line["%norm.grad"].endswith(f'loc("test_attribution.py":{head}, "norm")'), op_line["%norm.grad"]
    # The head's weight gradient: the head's.
    assert op_line["%lm_head.weight.grad"].endswith(f'loc("test_attribution.py":{head}, "lm_head")'), op_line["%lm_head.weight.grad"]

    # Where the logits' gradient is written, `report --by module` puts it under the head.
    plan = json.loads(memplan("plan", step, "--format", "json").stdout)
    ops = [line for line in plan["ir"].splitlines() if line.startswith("  %") and " = " in line]
    written = next(i for i, line in enumerate(ops) if line.startswith("  %lm_head.reshape.grad:"))
    at = plan["plan"]["schedule"].index(written)
    report = json.loads(memplan("report", step, "--by", "module", "--at", at, "--format", "json").stdout)
    assert report["op"].startswith("%lm_head.reshape.grad = cross_entropy_backward("), report["op"]
    value = next(v for v in report["values"] if v["op"] == "cross_entropy_backward")
    assert value["value"] == "%lm_head.reshape.grad" and value["class"] == "grad", value
    assert value["bytes"] == 32 * VOCAB * 4 and value["module"] == "lm_head", value
    assert value["loc"] == f"test_attribution.py:{head}", value
    groups = {g["key"]: g for g in report["groups"]}
    assert groups["lm_head"]["by_class"]["grad"] >= value["bytes"], groups["lm_head"]
    # The root module keeps only the loss's own gradient, the 4-byte seed.
    root_grads = [v["value"] for v in report["values"] if v["module"] == "" and v["class"] == "grad"]
    assert root_grads == ["%loss.grad"], root_grads
    # The largest group at that step: the head's, its logits' gradient.
    assert report["groups"][0]["key"] == "lm_head", report["groups"][0]

    # By line: the head's line, not the loss line.
    by_loc = json.loads(memplan("report", step, "--by", "loc", "--at", at, "--format", "json").stdout)
    lines = {g["key"]: g for g in by_loc["groups"]}
    assert lines[f"test_attribution.py:{head}"]["by_class"]["grad"] >= value["bytes"], by_loc["groups"]
    assert f"test_attribution.py:{loss}" not in lines or lines[f"test_attribution.py:{loss}"]["by_class"]["grad"] == 0, by_loc["groups"]
