#!/usr/bin/env python3
"""memplan's CUDA executor against PyTorch eager on the same training steps.

For each model (gpt2_tiny, gpt2, resnet18 of ir/models/, shapes as examples/gen_models.rs
writes them) this runs

  * memplan:  `memplan run ir/models/MODEL.step --device cuda --steps N` in its own process,
    and reads the planned arena, what its one allocation took, the workspace, what the
    kernels and the cuBLAS handle took, and the mean step time over steps 2..N;
  * PyTorch eager, in its own process: the same model, batch, loss and optimizer
    (zero_grad(set_to_none=True), forward, backward, optimizer step), W warm-up steps, then
    N timed steps (CUDA events) with the peak-memory counters reset before them:
    torch.cuda.max_memory_allocated() and max_memory_reserved().

Both compute in f32 without TF32 (memplan's cuBLAS calls use CUBLAS_COMPUTE_32F; PyTorch's
TF32 switches are turned off unless --tf32), so the times compare like with like.

Prints a Markdown table (and writes it, with the raw numbers as JSON, under --out-dir if
given). Usage, from the repository root on a machine with a GPU:

  cargo build --release --features cuda
  python3 benches/gpu_vs_pytorch.py --memplan target/release/memplan --steps 10
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys

MODELS = {
    # name: kind and shapes, as examples/gen_models.rs writes ir/models/NAME.step.
    "gpt2_tiny": dict(kind="gpt2", layers=2, hidden=64, heads=4, seq=32, vocab=512, batch=4, lr=0.0006, wd=0.1),
    "gpt2": dict(kind="gpt2", layers=12, hidden=768, heads=12, seq=1024, vocab=50257, batch=8, lr=0.0006, wd=0.1),
    "resnet18": dict(kind="resnet18", batch=32, image=224, widths=[64, 128, 256, 512], classes=1000, lr=0.1, momentum=0.9),
}


# ---------------------------------------------------------------------------------------
# PyTorch eager versions of the steps.


def torch_step(name, steps, warmup, tf32):
    """Runs model `name` in PyTorch eager; returns its memory peaks and step times."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(0)
    cfg = MODELS[name]
    dev = torch.device("cuda")

    if cfg["kind"] == "gpt2":
        B, T, C, nh, V, L = cfg["batch"], cfg["seq"], cfg["hidden"], cfg["heads"], cfg["vocab"], cfg["layers"]
        hd = C // nh

        class Block(nn.Module):
            # pre-LN; q, k, v as three [C, C] linears (the op set has no slice), like the step.
            def __init__(self):
                super().__init__()
                self.ln_1, self.ln_2 = nn.LayerNorm(C, eps=1e-5), nn.LayerNorm(C, eps=1e-5)
                self.q, self.k, self.v = nn.Linear(C, C), nn.Linear(C, C), nn.Linear(C, C)
                self.c_proj = nn.Linear(C, C)
                self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

            def forward(self, x, mask):
                h = self.ln_1(x)
                heads = lambda t: t.view(B, T, nh, hd).transpose(1, 2)
                q, k, v = heads(self.q(h)), heads(self.k(h)), heads(self.v(h))
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
                att = att.masked_fill(mask, float("-inf"))
                att = F.softmax(att, dim=-1)
                y = (att @ v).transpose(1, 2).contiguous().view(B * T, C)
                x = x + self.c_proj(y)
                return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

        class GPT(nn.Module):
            def __init__(self):
                super().__init__()
                self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
                self.blocks = nn.ModuleList(Block() for _ in range(L))
                self.ln_f = nn.LayerNorm(C, eps=1e-5)
                self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1))

            def forward(self, idx, pos, targets):
                x = (self.wte(idx) + self.wpe(pos)).view(B * T, C)
                for block in self.blocks:
                    x = block(x, self.mask)
                logits = self.ln_f(x) @ self.wte.weight.t()  # tied, as in the step
                return F.cross_entropy(logits, targets.view(-1))

        model = GPT().to(dev)
        batch = (
            torch.randint(0, V, (B, T), device=dev),
            torch.arange(T, device=dev),
            torch.randint(0, V, (B, T), device=dev),
        )
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["wd"], betas=(0.9, 0.999), eps=1e-8)
    else:
        N, S, W, K = cfg["batch"], cfg["image"], cfg["widths"], cfg["classes"]

        def conv_bn(cin, cout, k, stride):
            # Training-mode batch norm with batch statistics only, as in the step.
            return nn.Sequential(
                nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout, track_running_stats=False)
            )

        class BasicBlock(nn.Module):
            def __init__(self, cin, width, stride):
                super().__init__()
                self.conv1, self.conv2 = conv_bn(cin, width, 3, stride), conv_bn(width, width, 3, 1)
                self.down = conv_bn(cin, width, 1, stride) if stride != 1 or cin != width else None

            def forward(self, x):
                out = self.conv2(F.relu(self.conv1(x), inplace=True))
                return F.relu(out + (self.down(x) if self.down is not None else x), inplace=True)

        class ResNet18(nn.Module):
            def __init__(self):
                super().__init__()
                self.stem = conv_bn(3, W[0], 7, 2)
                blocks, cin = [], W[0]
                for stage, width in enumerate(W):
                    for b in range(2):
                        blocks.append(BasicBlock(cin, width, 2 if stage > 0 and b == 0 else 1))
                        cin = width
                self.blocks = nn.Sequential(*blocks)
                self.fc = nn.Linear(W[3], K)

            def forward(self, x, labels):
                x = F.max_pool2d(F.relu(self.stem(x), inplace=True), 3, 2, 1)
                x = self.blocks(x).mean((2, 3))
                return F.cross_entropy(self.fc(x), labels)

        model = ResNet18().to(dev)
        batch = (torch.randn(N, 3, S, S, device=dev), torch.randint(0, K, (N,), device=dev))
        opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(*batch)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        losses.append(float(loss))
    return dict(
        max_memory_allocated=torch.cuda.max_memory_allocated(),
        max_memory_reserved=torch.cuda.max_memory_reserved(),
        step_ms_mean=sum(times) / len(times),
        step_ms_best=min(times),
        losses=losses,
        device=torch.cuda.get_device_name(),
        torch=torch.__version__,
        tf32=tf32,
    )


# ---------------------------------------------------------------------------------------
# memplan.


def memplan_step(binary, name, steps):
    """Runs memplan on ir/models/NAME.step and parses what it prints."""
    cmd = [binary, "run", f"ir/models/{name}.step", "--device", "cuda", "--steps", str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return dict(error=(out.stderr or out.stdout).strip(), command=" ".join(cmd))
    text = out.stdout
    first = lambda pattern: int(re.search(pattern, text).group(1))
    mean = re.search(r"mean ([0-9.]+) ms, best ([0-9.]+) ms", text)
    device = re.search(r"step\(s\) on (.*?) \(sm_", text)
    return dict(
        arena_planned=first(r"arena +planned +(\d+) B"),
        arena_measured=first(r"arena +measured +(\d+) B"),
        workspace_measured=first(r"workspace +measured +(\d+) B"),
        other_measured=first(r"other +measured +(\d+) B"),
        step_ms_mean=float(mean.group(1)) if mean else None,
        step_ms_best=float(mean.group(2)) if mean else None,
        device=device.group(1) if device else None,
        command=" ".join(cmd),
        output=text,
    )


def mib(b):
    return f"{b / 2**20:.1f} MiB" if b is not None else "–"


def ratio(a, b):
    return f"{a / b:.3f}" if a is not None and b else "–"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memplan", default="target/release/memplan")
    parser.add_argument("--models", default="gpt2_tiny,gpt2,resnet18")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--tf32", action="store_true", help="let PyTorch use TF32 (memplan never does)")
    parser.add_argument("--out-dir", default=os.environ.get("OUT"))
    parser.add_argument("--torch-only", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.torch_only:  # the child process of one PyTorch measurement
        print(json.dumps(torch_step(args.torch_only, args.steps, args.warmup, args.tf32)))
        return

    rows, raw = [], {}
    for name in args.models.split(","):
        mp = memplan_step(args.memplan, name, args.steps)
        child = [sys.executable, __file__, "--torch-only", name, "--steps", str(args.steps), "--warmup", str(args.warmup)]
        if args.tf32:
            child.append("--tf32")
        out = subprocess.run(child, capture_output=True, text=True)
        if out.returncode == 0:
            pt = json.loads(out.stdout.strip().splitlines()[-1])
        else:
            pt = dict(error=out.stderr.strip()[-2000:])
        raw[name] = dict(memplan=mp, pytorch=pt)
        if "error" in mp:
            print(f"{name}: memplan failed: {mp['error']}", file=sys.stderr)
        if "error" in pt:
            print(f"{name}: PyTorch failed: {pt['error']}", file=sys.stderr)
        arena, used = mp.get("arena_planned"), None
        if arena is not None:
            used = mp["arena_measured"] + mp["workspace_measured"] + mp["other_measured"]
        rows.append(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                name,
                mib(arena),
                mib(used),
                mib(pt.get("max_memory_allocated")),
                mib(pt.get("max_memory_reserved")),
                ratio(arena, pt.get("max_memory_reserved")),
                ratio(arena, pt.get("max_memory_allocated")),
                f"{mp['step_ms_mean']:.2f}" if mp.get("step_ms_mean") else "–",
                f"{pt['step_ms_mean']:.2f}" if pt.get("step_ms_mean") else "–",
                ratio(mp.get("step_ms_mean"), pt.get("step_ms_mean")),
            )
        )
    device = next((r["memplan"].get("device") or r["pytorch"].get("device") for r in raw.values()), None)
    table = "\n".join(
        [
            f"Device: {device}; {args.steps} timed steps after {args.warmup} warm-up (PyTorch), memplan's mean over steps 2..{args.steps}; TF32 {'on' if args.tf32 else 'off'} in PyTorch.",
            "",
            "| model | memplan arena (planned) | memplan total on device (arena + workspace + kernels/cuBLAS, measured) | PyTorch max_memory_allocated | PyTorch max_memory_reserved | arena / reserved | arena / allocated | memplan step (ms) | PyTorch step (ms) | step time ratio |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        + rows
    )
    print(table)
    if args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
        with open(os.path.join(args.out_dir, "gpu_vs_pytorch.md"), "w") as f:
            f.write(table + "\n")
        with open(os.path.join(args.out_dir, "gpu_vs_pytorch.json"), "w") as f:
            json.dump(raw, f, indent=2)


if __name__ == "__main__":
    main()
