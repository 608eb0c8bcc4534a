#!/usr/bin/env python3
"""memplan's CUDA executor against PyTorch on the same training steps (issue 20's targets).

Two sets of models, each run side by side with PyTorch on the same machine, every run in
its own process:

  * ir/models (gpt2_tiny, gpt2, resnet18, vgg16; shapes as examples/gen_models.rs writes
    them): `memplan run ir/models/MODEL.step --device cuda --steps N` against the same step
    in PyTorch eager, f32, TF32 off (`torch.compile` too for the convolution nets);
  * the PyTorch zoo (python/zoo: GPT-2 small nanoGPT-style with SDPA, Llama ~125M), the step
    exported by the front end (`python -m memplan_torch export`, f32 and `--amp bf16`, AdamW
    as the exporter's default), run by memplan, against the same model in PyTorch: eager
    f32 + SDPA, eager bf16 autocast + SDPA, torch.compile bf16 autocast + SDPA; and memplan
    once more under `--budget 0.5x` (the plan's extra FLOPs, from `memplan plan --format
    json`, against the extra step time).

From memplan: the planned arena, what its one allocation took, the workspace, the kernel
module and cuBLAS handle (free device memory before/after each), the mean step time over
steps 2..N (CUDA events). From PyTorch: torch.cuda.max_memory_allocated() and
max_memory_reserved() over N timed steps after W warm-up steps (peaks reset after the
warm-up), mean step time (CUDA events): zero_grad(set_to_none=True), forward (under
autocast where bf16), backward, optimizer step.

Prints two Markdown tables and the targets with their ratios (and writes them, with the
raw numbers as JSON, under --out-dir or $OUT if given). Usage, from the repository root on
a machine with a GPU (PyTorch installed; the zoo exports need python/ on PYTHONPATH):

  cargo build --release --features cuda        # on a machine with the crates registry
  PYTHONPATH=python python3 benches/gpu_vs_pytorch.py --memplan target/release/memplan --steps 10
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MODELS = {
    # name: kind and shapes, as examples/gen_models.rs writes ir/models/NAME.step.
    "gpt2_tiny": dict(kind="gpt2", layers=2, hidden=64, heads=4, seq=32, vocab=512, batch=4, lr=0.0006, wd=0.1),
    "gpt2": dict(kind="gpt2", layers=12, hidden=768, heads=12, seq=1024, vocab=50257, batch=8, lr=0.0006, wd=0.1),
    "resnet18": dict(kind="resnet18", batch=32, image=224, widths=[64, 128, 256, 512], classes=1000, lr=0.1, momentum=0.9),
    "vgg16": dict(kind="vgg16", batch=256, image=224, classes=1000, lr=0.01),
}

# The zoo models: (name, python/zoo file:function). memplan runs the front end's export.
ZOO = {
    "gpt2_zoo": "gpt2.py:make",
    "llama125m_zoo": "llama.py:make_125m",
}

# VGG-16 configuration D; 0 marks a max pool (as examples/gen_models.rs).
VGG_CFG = [64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0]


# ---------------------------------------------------------------------------------------
# PyTorch eager versions of the steps.


def torch_step(name, steps, warmup, tf32, compiled=False):
    """Runs model `name` of ir/models in PyTorch (eager, or torch.compile'd); returns its
    memory peaks and step times."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    model, batch, make_optimizer = ir_model(name, torch.device("cuda"))
    opt = make_optimizer(model.parameters())
    forward = torch.compile(model) if compiled else model
    return measure(lambda: forward(*batch), opt, steps, warmup, tf32)


def ir_model(name, dev):
    """Model `name` of ir/models in PyTorch on device `dev`: (model, batch, a function from
    parameters to its optimizer). Also what benches/predict_accuracy.py predicts."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(0)
    cfg = MODELS[name]

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
        make_optimizer = lambda p: torch.optim.AdamW(p, lr=cfg["lr"], weight_decay=cfg["wd"], betas=(0.9, 0.999), eps=1e-8)
    elif cfg["kind"] == "vgg16":
        N, S, K = cfg["batch"], cfg["image"], cfg["classes"]

        class VGG16(nn.Module):
            # conv 3x3 pad 1 + bias + relu, max pools 2x2, fc 25088-4096-4096-1000, no dropout.
            def __init__(self):
                super().__init__()
                layers, cin = [], 3
                for width in VGG_CFG:
                    if width == 0:
                        layers.append(nn.MaxPool2d(2, 2))
                    else:
                        layers += [nn.Conv2d(cin, width, 3, 1, 1), nn.ReLU()]
                        cin = width
                self.features = nn.Sequential(*layers)
                self.fc = nn.Sequential(
                    nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, K)
                )

            def forward(self, x, labels):
                return F.cross_entropy(self.fc(torch.flatten(self.features(x), 1)), labels)

        model = VGG16().to(dev)
        batch = (torch.randn(N, 3, S, S, device=dev), torch.randint(0, K, (N,), device=dev))
        make_optimizer = lambda p: torch.optim.SGD(p, lr=cfg["lr"])
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
        make_optimizer = lambda p: torch.optim.SGD(p, lr=cfg["lr"], momentum=cfg["momentum"])

    return model, batch, make_optimizer


def torch_zoo_step(name, steps, warmup, variant):
    """Runs zoo model `name` in PyTorch: variant `eager_f32`, `eager_bf16` (autocast) or
    `compile_bf16` (torch.compile, autocast). Attention is the model's own SDPA call."""
    import importlib.util

    import torch

    path, function = ZOO[name].split(":")
    spec = importlib.util.spec_from_file_location("zoo_" + name, os.path.join(REPO, "python", "zoo", path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, batch = getattr(module, function)()
    dev = torch.device("cuda")
    model, batch = model.to(dev), tuple(t.to(dev) for t in batch)
    # The exporter's default optimizer: torch.optim.AdamW's defaults, weight decay 0.01.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    forward = torch.compile(model) if variant.startswith("compile") else model
    if variant.endswith("bf16"):

        def loss():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return forward(*batch)

    else:

        def loss():
            return forward(*batch)

    return measure(loss, opt, steps, warmup, tf32=False)


def measure(loss_fn, opt, steps, warmup, tf32):
    """Warm-up steps, then timed steps with the peak counters reset before them."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
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


def memplan_step(binary, step, steps, flags=()):
    """Runs memplan on a .step file and parses what it prints."""
    cmd = [binary, "run", step, "--device", "cuda", "--steps", str(steps), *flags]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        return dict(error=(out.stderr or out.stdout).strip()[-2000:], command=" ".join(cmd))
    text = out.stdout
    first = lambda pattern: int(re.search(pattern, text).group(1))
    mean = re.search(r"mean ([0-9.]+) ms, best ([0-9.]+) ms", text)
    device = re.search(r"step\(s\) on (.*?) \(sm_", text)
    result = dict(
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
    result["total_measured"] = result["arena_measured"] + result["workspace_measured"] + result["other_measured"]
    return result


def memplan_flops(binary, step, flags=()):
    """The plan's FLOPs (and, under a budget, its extra FLOPs) from `plan --format json`."""
    out = subprocess.run([binary, "plan", step, "--format", "json", *flags], capture_output=True, text=True)
    if out.returncode != 0:
        return dict(error=out.stderr.strip()[-2000:])
    plan = json.loads(out.stdout)
    remat = plan.get("remat") or {}
    return dict(arena=plan["arena_bytes"], extra_flops=remat.get("extra_flops"), base_flops=remat.get("base_flops"))


def export_zoo(name, out_dir, amp):
    """Exports zoo model `name` with the front end; returns the .step path."""
    step = os.path.join(out_dir, f"{name}_{amp or 'f32'}.step")
    if os.path.exists(step):
        os.remove(step)  # the exporter never overwrites: this is our own scratch file
    cmd = [sys.executable, "-m", "memplan_torch", "export", os.path.join(REPO, "python", "zoo", ZOO[name]), "-o", step]
    if amp:
        cmd += ["--amp", amp]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(REPO, "python"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr}")
    return step


def child(args, *extra):
    """One PyTorch measurement in its own process (fresh allocator, fresh peaks)."""
    cmd = [sys.executable, __file__, "--steps", str(args.steps), "--warmup", str(args.warmup), *extra]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode == 0:
        return json.loads(out.stdout.strip().splitlines()[-1])
    return dict(error=out.stderr.strip()[-2000:])


def budget_target(name, budget, plain, under_budget):
    """Issue 20's recomputation target: extra step time ≤ the plan's extra FLOPs + 3 points."""
    if "error" in budget:
        return f"{name} --budget 0.5x: not planned ({budget['error'].splitlines()[0]})"
    if not (plain.get("step_ms_mean") and under_budget.get("step_ms_mean")):
        return f"{name} --budget 0.5x: not run"
    extra_flops = 100 * budget["extra_flops"] / budget["base_flops"]
    extra_time = 100 * (under_budget["step_ms_mean"] / plain["step_ms_mean"] - 1)
    verdict = "met" if extra_time <= extra_flops + 3 else "missed"
    return f"{name} --budget 0.5x: extra step time {extra_time:+.2f}% ≤ extra FLOPs {extra_flops:+.2f}% + 3 points: {verdict}"


def mib(b):
    return f"{b / 2**20:.1f} MiB" if b is not None else "–"


def ratio(a, b):
    return f"{a / b:.3f}" if a is not None and b else "–"


def ms(r):
    return f"{r['step_ms_mean']:.2f}" if r.get("step_ms_mean") else "–"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memplan", default="target/release/memplan")
    parser.add_argument("--models", default="gpt2_tiny,gpt2,resnet18,vgg16", help="ir/models steps ('' for none)")
    parser.add_argument("--zoo", default="gpt2_zoo,llama125m_zoo", help="zoo models ('' for none)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tf32", action="store_true", help="let PyTorch use TF32 (memplan never does)")
    parser.add_argument("--out-dir", default=os.environ.get("OUT"))
    parser.add_argument("--torch-only", help=argparse.SUPPRESS)
    parser.add_argument("--torch-compile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--torch-zoo", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.torch_only:  # the child process of one PyTorch measurement
        print(json.dumps(torch_step(args.torch_only, args.steps, args.warmup, args.tf32, args.torch_compile)))
        return
    if args.torch_zoo:
        print(json.dumps(torch_zoo_step(args.torch_zoo, args.steps, args.warmup, args.variant)))
        return

    raw, lines, targets = {}, [], []
    device = None

    # ir/models: memplan against PyTorch eager (and torch.compile for the convolution nets).
    if args.models:
        lines += [
            "| model | memplan arena (planned) | memplan total on device | PyTorch eager max_memory_allocated | eager max_memory_reserved | arena / eager allocated | memplan ms | eager ms | memplan / eager | torch.compile ms | memplan / compile |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    for name in filter(None, args.models.split(",")):
        mp = memplan_step(args.memplan, f"ir/models/{name}.step", args.steps)
        tf32 = ["--tf32"] if args.tf32 else []
        eager = child(args, "--torch-only", name, *tf32)
        conv = MODELS[name]["kind"] in ("resnet18", "vgg16")
        compiled = child(args, "--torch-only", name, "--torch-compile", *tf32) if conv else {}
        raw[name] = dict(memplan=mp, eager=eager, compile=compiled)
        for what, r in [("memplan", mp), ("eager", eager), ("compile", compiled)]:
            if "error" in r:
                print(f"{name}: {what} failed: {r['error'].splitlines()[-1]}", file=sys.stderr)
        device = device or mp.get("device") or eager.get("device")
        lines.append(
            f"| {name} | {mib(mp.get('arena_planned'))} | {mib(mp.get('total_measured'))} | "
            f"{mib(eager.get('max_memory_allocated'))} | {mib(eager.get('max_memory_reserved'))} | "
            f"{ratio(mp.get('arena_planned'), eager.get('max_memory_allocated'))} | {ms(mp)} | {ms(eager)} | "
            f"{ratio(mp.get('step_ms_mean'), eager.get('step_ms_mean'))} | {ms(compiled)} | "
            f"{ratio(mp.get('step_ms_mean'), compiled.get('step_ms_mean'))} |"
        )
        print(lines[-1], flush=True)
        if name == "gpt2":  # recomputation: extra step time against the plan's extra FLOPs
            step = f"ir/models/{name}.step"
            budget_run = memplan_step(args.memplan, step, args.steps, ["--budget", "0.5x"])
            raw[name]["memplan_budget"] = budget_run
            targets.append(budget_target(name, memplan_flops(args.memplan, step, ["--budget", "0.5x"]), mp, budget_run))
        if conv:
            targets.append(
                f"{name} f32 step time ≤ 1.3× PyTorch eager: {ratio(mp.get('step_ms_mean'), eager.get('step_ms_mean'))}"
            )

    # The zoo: the front end's exports against eager f32, eager bf16 + SDPA, torch.compile bf16.
    if args.zoo:
        lines += [
            "",
            "| zoo model | run | arena or max_memory_allocated | total on device / max_memory_reserved | step ms |",
            "|---|---|---|---|---|",
        ]
    scratch = args.out_dir or "."
    os.makedirs(scratch, exist_ok=True)
    for name in filter(None, args.zoo.split(",")):
        f32_step, bf16_step = export_zoo(name, scratch, None), export_zoo(name, scratch, "bf16")
        runs = {
            "memplan f32": memplan_step(args.memplan, f32_step, args.steps),
            "memplan bf16": memplan_step(args.memplan, bf16_step, args.steps),
            "memplan bf16 --budget 0.5x": memplan_step(args.memplan, bf16_step, args.steps, ["--budget", "0.5x"]),
        }
        for variant in ("eager_f32", "eager_bf16", "compile_bf16"):
            runs[f"PyTorch {variant}"] = child(args, "--torch-zoo", name, "--variant", variant)
        budget = memplan_flops(args.memplan, bf16_step, ["--budget", "0.5x"])
        raw[name] = dict(runs=runs, budget_plan=budget)
        for what, r in runs.items():
            if "error" in r:
                print(f"{name}: {what} failed: {r['error'].splitlines()[-1]}", file=sys.stderr)
            memory = r.get("arena_planned", r.get("max_memory_allocated"))
            total = r.get("total_measured", r.get("max_memory_reserved"))
            lines.append(f"| {name} | {what} | {mib(memory)} | {mib(total)} | {ms(r)} |")
            print(lines[-1], flush=True)
        mp, mp_budget = runs["memplan bf16"], runs["memplan bf16 --budget 0.5x"]
        eager, compiled = runs["PyTorch eager_bf16"], runs["PyTorch compile_bf16"]
        targets += [
            f"{name} bf16 arena ≤ 0.9× torch.compile's max_memory_allocated: "
            f"{ratio(mp.get('arena_planned'), compiled.get('max_memory_allocated'))}",
            f"{name} bf16 step time ≤ 1.2× PyTorch eager bf16+SDPA: {ratio(mp.get('step_ms_mean'), eager.get('step_ms_mean'))} "
            f"(stretch, ≤ torch.compile's: {ratio(mp.get('step_ms_mean'), compiled.get('step_ms_mean'))})",
        ]
        targets.append(budget_target(f"{name} bf16", budget, mp, mp_budget))

    head = (
        f"Device: {device}; {args.steps} timed steps after {args.warmup} warm-up (PyTorch), "
        f"memplan's mean over steps 2..{args.steps}; TF32 {'on' if args.tf32 else 'off'} in PyTorch."
    )
    table = "\n".join([head, ""] + lines + ["", "Targets:"] + [f"- {t}" for t in targets])
    print(table)
    if args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
        with open(os.path.join(args.out_dir, "gpu_vs_pytorch.md"), "w") as f:
            f.write(table + "\n")
        with open(os.path.join(args.out_dir, "gpu_vs_pytorch.json"), "w") as f:
            json.dump(raw, f, indent=2)


if __name__ == "__main__":
    main()
