"""ir/models' twins in PyTorch (benches/gpu_vs_pytorch.py's `ir_model`) as FILE.py:FUNC
functions, so the tools that take one (`python -m memplan_torch predict`,
benches/torch_memory.py) can measure and predict the steps BENCHMARKS.md measured on a GPU.
Each returns (model, batch) on the default device (meta under `predict`); the optimizer the GPU run used is named beside it."""

import torch

from gpu_vs_pytorch import ir_model


def resnet18():
    """ResNet-18, batch 32 (the GPU run: SGD with momentum, `--optimizer momentum`)."""
    model, batch, _ = ir_model("resnet18", torch.get_default_device())
    return model, batch


def gpt2():
    """GPT-2 with its attention written out, batch 8 x 1024 (the GPU run: AdamW)."""
    model, batch, _ = ir_model("gpt2", torch.get_default_device())
    return model, batch
