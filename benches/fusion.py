#!/usr/bin/env python3
"""The fusion pass on the zoo and the real-model suite (issue 32, item 1).

For each model: memplan's arena with nothing of issue 32 (`--recompute none --no-fuse-loss
--no-fuse`), with the defaults but fusion off (`--no-fuse`), with the defaults (fusion where
it lowers the arena, cheap recomputation, the fused loss), the fused ops the default plan
runs, PyTorch eager's own CPU peak for the same step (`predict --device cpu`), and whether
the step with every elementwise chain fused (`--fuse always`) trains on the CPU reference
bit for bit as the step as written (`memplan run --fuse always --steps 2
--compare-unplanned`: planned, fused and recomputed, against the step as written run
unplanned). Every plan is made by `memplan plan` or `run`, which check it with the
independent checker.

    MEMPLAN=target/release/memplan PYTHONPATH=python python benches/fusion.py [--full]

`--full` adds the zoo's GPT-2 small and Llama ~125M at full size under bf16 autocast (their
CPU runs are left out: a full-size step on the f64 CPU reference takes too long).
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


def plan(path: Path, *flags: str) -> dict:
    done = subprocess.run([MEMPLAN, "plan", str(path), "--format", "json", *flags], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1])
    report = json.loads(done.stdout)
    fusion = report.get("fusion") or {}
    return {"arena": report["arena_bytes"], "fused": fusion.get("fused_ops", 0), "inner": fusion.get("inner_ops", 0)}


def faithful(path: Path) -> str:
    try:
        done = subprocess.run([MEMPLAN, "run", str(path), "--fuse", "always", "--steps", "2", "--compare-unplanned"],
                              capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        return "timeout"
    if done.returncode == 0 and "agree bit for bit" in done.stdout:
        return "bit for bit"
    return f"exit {done.returncode}: {(done.stdout + done.stderr).strip().splitlines()[-1][:80]}"


def main():
    import suite

    models = [(f"zoo {m} small", __import__(m).make_small, None) for m in ("gpt2", "llama", "bert", "vit", "resnet", "unet")]
    models += [(f"suite {b.__name__}", b, None) for b in suite.MODELS]
    if "--full" in sys.argv:
        models += [("zoo gpt2 (full, bf16)", __import__("gpt2").make, "bf16"), ("zoo llama 125m (full, bf16)", __import__("llama").make_125m, "bf16")]
    print("| model | arena, none of issue 32 | defaults, --no-fuse | defaults (fusion where it lowers) | fused ops (elementwise ops) | PyTorch CPU peak | `--fuse always` on the CPU vs as written |")
    print("|---|---:|---:|---:|---:|---:|---|")
    raised = above_torch = unfaithful = 0
    for name, build, amp in models:
        try:
            with torch.device("meta"):
                model, inputs = build()
            inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
            text = export_step(model, inputs, amp=amp)
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "step.step"
                path.write_text(text)
                none = plan(path, "--recompute", "none", "--no-fuse-loss", "--no-fuse")
                unfused, default = plan(path, "--no-fuse"), plan(path)
                run = faithful(path) if amp is None else "(full size: not run)"
            torch_peak = replay(record(model, inputs, amp=amp, device="cpu"), MEMPLAN)["max_requested"]
        except Exception as e:  # noqa: BLE001 - a row that says why
            print(f"| {name} | failed: {type(e).__name__}: {str(e)[:80]} | | | | | |", flush=True)
            continue
        raised += default["arena"] > unfused["arena"] or default["arena"] > none["arena"]
        above_torch += default["arena"] > torch_peak
        unfaithful += run not in ("bit for bit", "(full size: not run)")
        print(f"| {name} | {none['arena'] / MIB:.2f} MiB | {unfused['arena'] / MIB:.2f} MiB | {default['arena'] / MIB:.2f} MiB | "
              f"{default['fused']} ({default['inner']}) | {torch_peak / MIB:.2f} MiB | {run} |", flush=True)
    print(f"\nmodels whose default arena is above --no-fuse's or the plain arena: {raised}; above PyTorch's CPU peak: {above_torch}; "
          f"fused CPU runs not bit for bit: {unfaithful}")


if __name__ == "__main__":
    main()
