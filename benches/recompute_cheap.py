#!/usr/bin/env python3
"""`memplan plan`'s defaults (cheap recomputation, the loss fused with its projection) on
the zoo and the real-model suite (issue 32).

For each model: memplan's arena with neither (`--recompute none --no-fuse-loss`), with
both (the default: cheap recomputation allowing 10% more bytes moved), with 20%, what it
costs (extra FLOPs, ops recomputed), and PyTorch
eager's own peak for the same step on the CPU (`predict --device cpu`, within 5% of the
profiler on every model: BENCHMARKS.md, "PyTorch's own memory, predicted"). Every plan is
made by `memplan plan`, which checks it with the independent checker.

    MEMPLAN=target/release/memplan PYTHONPATH=python python benches/recompute_cheap.py [--full]

`--full` adds the zoo's GPT-2 small and Llama ~125M at full size under bf16 autocast (the
issue's targets: at most 0.85x torch.compile's max_memory_allocated on an H100).
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE.parent / "python" / "models"))
sys.path.insert(0, str(HERE.parent / "python" / "zoo"))

import torch  # noqa: E402

from memplan_torch import export_step  # noqa: E402
from memplan_torch.predict import record, replay  # noqa: E402

MEMPLAN = os.environ.get("MEMPLAN", str(HERE.parent / "target" / "release" / "memplan"))
MIB = 2**20
COMPILE = {"zoo gpt2 (full, bf16)": 5237.3, "zoo llama 125m (full, bf16)": 4681.1}


def plan(text: str, *flags: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "step.step"
        path.write_text(text)
        done = subprocess.run([MEMPLAN, "plan", str(path), "--format", "json", *flags], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1])
    report = json.loads(done.stdout)
    remat = report.get("remat") or {}
    return {"arena": report["arena_bytes"], "count": remat.get("count", 0), "flops": remat.get("overhead_percent", 0.0)}


def main():
    import suite

    models = [(f"zoo {m} small", __import__(m).make_small, None) for m in ("gpt2", "llama", "bert", "vit", "resnet", "unet")]
    models += [(f"suite {b.__name__}", b, None) for b in suite.MODELS]
    if "--full" in sys.argv:
        models += [("zoo gpt2 (full, bf16)", __import__("gpt2").make, "bf16"), ("zoo llama 125m (full, bf16)", __import__("llama").make_125m, "bf16")]
    print("| model | arena, neither | default (cheap 10%, fused loss) | ops recomputed, extra FLOPs | cheap:20% | PyTorch CPU peak (predicted) | default / PyTorch |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    worse = 0
    for name, build, amp in models:
        try:
            with torch.device("meta"):
                model, inputs = build()
            inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
            text = export_step(model, inputs, amp=amp)
            none, cheap, cheap20 = plan(text, "--recompute", "none", "--no-fuse-loss"), plan(text), plan(text, "--recompute", "cheap:20%")
            torch_peak = replay(record(model, inputs, amp=amp, device="cpu"), MEMPLAN)["max_requested"]
        except Exception as e:  # noqa: BLE001 - a row that says why
            print(f"| {name} | failed: {type(e).__name__}: {str(e)[:80]} | | | | | |", flush=True)
            continue
        worse += cheap["arena"] > none["arena"] or cheap["arena"] > torch_peak
        ratio = cheap["arena"] / torch_peak
        extra = f" (compile: {cheap['arena'] / MIB / COMPILE[name]:.3f}x, cheap:20% {cheap20['arena'] / MIB / COMPILE[name]:.3f}x)" if name in COMPILE else ""
        print(f"| {name} | {none['arena'] / MIB:.2f} MiB | {cheap['arena'] / MIB:.2f} MiB | {cheap['count']}, +{cheap['flops']:.3f}% | "
              f"{cheap20['arena'] / MIB:.2f} MiB | {torch_peak / MIB:.2f} MiB | {ratio:.3f}{extra} |", flush=True)
    print(f"\nmodels where the default plan is above the plain arena or above PyTorch's CPU peak: {worse}")


if __name__ == "__main__":
    main()
