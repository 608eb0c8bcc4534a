"""The PyTorch zoo at full size (python/zoo/): export time, plan time and arenas.

For each model: `python -m memplan_torch export` (virtual weights: nothing allocated),
then `memplan plan --format json` twice, once as planned (memory-aware schedule, in-place,
offsets) and once with `--schedule program --no-inplace` (the ops in PyTorch's order, no
output over an input: what an allocator that does not plan faces, with offsets still
packed). Prints a Markdown table for benches/BENCHMARKS.md.

    python benches/torch_zoo.py --memplan target/release/memplan [--only gpt2]

Needs the `memplan_torch` package (`pip install ./python`) and a release build.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ZOO = REPO / "python" / "zoo"

# (label, zoo file:function, export flags)
MODELS = [
    ("GPT-2 small (124M), batch 8 x 1024", "gpt2.py:make", []),
    ("GPT-2 small, --amp bf16", "gpt2.py:make", ["--amp", "bf16"]),
    ("Llama ~125M (GQA 12/4), batch 8 x 1024", "llama.py:make_125m", []),
    ("Llama ~125M, --amp bf16", "llama.py:make_125m", ["--amp", "bf16"]),
    ("Llama 7B shape (GQA 32/8), batch 1 x 2048", "llama.py:make_7b", []),
    ("Llama 7B shape, --amp bf16", "llama.py:make_7b", ["--amp", "bf16"]),
    ("ResNet-50, batch 32 x 224²", "resnet.py:make", []),
    ("ViT-B/16, batch 32 x 224²", "vit.py:make", []),
    ("BERT-base (dropout 0.1), batch 32 x 512", "bert.py:make", []),
    ("U-Net, batch 8 x 256²", "unet.py:make", []),
]


def timed(command: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr}")
    return elapsed, done.stdout


def gib(n: int) -> str:
    return f"{n / 2**30:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memplan", default=str(REPO / "target/release/memplan"))
    parser.add_argument("--only", help="models whose zoo file:function contains this")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, function, flags in MODELS:
            if args.only and args.only not in function:
                continue
            step = Path(tmp) / f"{len(rows)}.step"
            export_s, _ = timed([sys.executable, "-m", "memplan_torch", "export", f"{ZOO / function}", "-o", str(step), *flags])
            plan_s, out = timed([args.memplan, "plan", str(step), "--format", "json"])
            planned = json.loads(out)
            _, out = timed([args.memplan, "plan", str(step), "--format", "json", "--schedule", "program", "--no-inplace"])
            unplanned = json.loads(out)
            externs = step.read_text().count("= extern")
            rows.append((label, planned, unplanned, export_s, plan_s, externs))
            print(f"{label}: done", file=sys.stderr)
    print("| model | ops | values | export s | plan s | arena GiB | lower bound GiB | program order, no in-place: arena GiB | ratio | extern ops |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, planned, unplanned, export_s, plan_s, externs in rows:
        arena, bound, naive = planned["arena_bytes"], planned["lower_bound"], unplanned["arena_bytes"]
        print(
            f"| {label} | {planned['ops']} | {planned['values']} | {export_s:.1f} | {plan_s:.1f} | {gib(arena)} | "
            f"{gib(bound)} | {gib(naive)} | {arena / naive:.3f} | {externs} |"
        )


if __name__ == "__main__":
    main()
