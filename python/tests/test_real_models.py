"""The real-model suite's smoke subset (issue 30; benches/real_models.py runs all 41):
Hugging Face transformers models built from their config objects (python/models/suite.py;
no download), each exported with no `extern` op, checked, planned, reported by module, and
trained three SGD steps in memplan as PyTorch trains it (test_semantics'
compare_three_steps: which params get a gradient, the losses, the params after)."""

import re
import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "python" / "models"))
import suite  # noqa: E402
from test_semantics import compare_three_steps  # noqa: E402

# Attention of every kind, and the ops the exporter writes as several (Whisper's conv1d,
# Swin's table indexing and roll, Mixtral's topk routing, CLIP's argmax pooling).
SMOKE = ["gpt2", "llama", "mistral", "bert", "bart", "t5", "vit", "whisper", "swin", "mixtral", "clip"]


@pytest.mark.parametrize("name", SMOKE)
def test_a_library_model_trains_in_memplan_as_in_pytorch(memplan, tmp_path, name):
    model, inputs = getattr(suite, name)()
    text, with_grad = compare_three_steps(memplan, tmp_path, model, inputs)
    assert not re.findall(r'target="([^"]+)"', text), "extern ops"
    assert len(with_grad) > 4
    step = tmp_path / "model.step"
    memplan("check", step)
    report = memplan("report", step, "--by", "module").stdout
    assert "model." in report, report


def test_transformers_grouped_mm_experts_say_how_to_export_them():
    """Mixtral's default experts on the CPU (`grouped_mm`: tokens sorted into groups of
    data-dependent sizes) stay extern, with a warning naming the form memplan can express."""
    from transformers import MixtralConfig

    import memplan_torch
    from memplan_torch.step import ExportWarning

    model, inputs = suite._causal_lm(MixtralConfig(**suite.SMALL, num_key_value_heads=2, num_local_experts=4,
                                                   num_experts_per_tok=2), 2)
    with pytest.warns(ExportWarning, match="experts_implementation='batched_mm'"):
        text = memplan_torch.export_step(model, inputs)
    assert 'target="transformers::grouped_mm_fallback' in text
