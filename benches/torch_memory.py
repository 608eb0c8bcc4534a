#!/usr/bin/env python3
"""The ground truth `memplan_torch predict` is held to, measured on a GPU, for any model file.

Runs the training step `predict` predicts, on a CUDA device, in PyTorch eager: `FUNC()`'s
model and batch on the GPU, the optimizer `predict` makes for `--optimizer` (PyTorch's
defaults, `foreach` as on CUDA by default), `--warmup` steps, the peak counters reset, then
`--steps` steps, each `zero_grad(set_to_none=True)`, forward (under CUDA autocast with
`--amp`), `loss.backward()`, `optimizer.step()`. Writes into OUT_DIR (created; existing
files are never overwritten):

  measured.json    torch.cuda.max_memory_allocated() and max_memory_reserved() of those
                   steps, the device, torch's version, the model and flags (the JSON
                   benches/predict_accuracy.py --measured reads);
  snapshot.pickle  torch.cuda.memory._dump_snapshot() of the measured steps (memplan
                   snapshot reads it; memory_viz too).

    PYTHONPATH=python python3 benches/torch_memory.py python/zoo/gpt2.py:make --amp bf16 -o out/gpt2_bf16
"""

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("function", metavar="FILE.py:FUNC")
    parser.add_argument("-o", "--out-dir", required=True)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--amp", choices=["bf16", "f16"])
    parser.add_argument("--optimizer", default="adamw", choices=["sgd", "momentum", "adam", "adamw"])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--expandable-segments", action="store_true")
    args = parser.parse_args()
    if args.expandable_segments:
        # Read by the allocator when CUDA starts: set before torch touches the device.
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    import torch

    from memplan_torch.__main__ import _call, _model_and_inputs, load_function
    from memplan_torch.predict import make_optimizer

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in ("measured.json", "snapshot.pickle"):
        if (out / name).exists():
            sys.exit(f"error: {out / name} exists; nothing is overwritten")
    model, inputs = _model_and_inputs(_call(load_function(args.function), args.function, args.batch), args.function)
    dev = torch.device("cuda")
    model = model.to(dev).train()
    inputs = tuple(x.to(dev) if isinstance(x, torch.Tensor) else x for x in inputs)
    opt = make_optimizer(args.optimizer, model.parameters())
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}.get(args.amp)

    def step():
        opt.zero_grad(set_to_none=True)
        if dtype is None:
            loss = model(*inputs)
        else:
            with torch.autocast("cuda", dtype=dtype):
                loss = model(*inputs)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(max_entries=1_000_000)
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    measured = dict(
        model=args.function, batch=args.batch, optimizer=args.optimizer, amp=args.amp,
        expandable_segments=args.expandable_segments, warmup=args.warmup, steps=args.steps,
        max_memory_allocated=torch.cuda.max_memory_allocated(), max_memory_reserved=torch.cuda.max_memory_reserved(),
        device=torch.cuda.get_device_name(), torch=torch.__version__,
    )
    torch.cuda.memory._dump_snapshot(str(out / "snapshot.pickle"))
    torch.cuda.memory._record_memory_history(enabled=None)
    (out / "measured.json").write_text(json.dumps(measured, indent=2) + "\n")
    print(json.dumps(measured))


if __name__ == "__main__":
    main()
