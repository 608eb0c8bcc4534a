#!/usr/bin/env python3
"""How close `python -m memplan_torch predict` comes to PyTorch's own memory (issue 31).

Two comparisons, printed as Markdown tables (BENCHMARKS.md records them):

* **GPU**: `torch.cuda.max_memory_allocated()` and `max_memory_reserved()` of one
  steady-state training step as measured on a GPU, against `predict` (device cuda), made
  here without a GPU. The measurements are those benches/BENCHMARKS.md records for an H100
  (benches/gpu_vs_pytorch.py, "GPU, 2026-11-27": W=2 warm-up steps, peaks reset, 6 timed
  steps), listed below with the model each was measured on; any JSON file that
  benches/torch_memory.py writes on a GPU (`--measured FILE ...`) adds a row.
* **CPU**: PyTorch's own peak of live tensor bytes in one steady-state AdamW step on the
  CPU (its profiler's memory timeline: benches/torch_cpu_peak.py's `pytorch_peak`), against
  `predict --device cpu`, for the zoo's small models and every model of the real-model suite
  (python/models/suite.py).

    MEMPLAN=target/release/memplan PYTHONPATH=python python benches/predict_accuracy.py [--measured X.json ...] [--no-cpu]
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE.parent / "python" / "models"))
sys.path.insert(0, str(HERE.parent / "python" / "zoo"))

import torch  # noqa: E402

from memplan_torch.predict import record, replay  # noqa: E402

MEMPLAN = os.environ.get("MEMPLAN", str(HERE.parent / "target" / "release" / "memplan"))
MIB = 2**20

# (name, how the model is built, optimizer, amp, measured allocated MiB, reserved MiB or None, source)
H100 = "NVIDIA H100 80GB HBM3, PyTorch 2.11.0+cu130, benches/gpu_vs_pytorch.py (BENCHMARKS.md, GPU 2026-11-27)"
GPU_MEASURED = [
    ("GPT-2 small (zoo), batch 8 x 1024, eager f32 + SDPA", "zoo:gpt2:make", "adamw", None, 10869.1, 11514.0, H100),
    ("GPT-2 small (zoo), eager bf16 autocast + SDPA", "zoo:gpt2:make", "adamw", "bf16", 8309.8, 9748.0, H100),
    ("Llama ~125M (zoo), batch 8 x 1024, eager f32 + SDPA", "zoo:llama:make_125m", "adamw", None, 14528.6, 16052.0, H100),
    ("Llama ~125M (zoo), eager bf16 autocast + SDPA", "zoo:llama:make_125m", "adamw", "bf16", 7455.0, 9108.0, H100),
    ("ResNet-18 (ir/models' twin), batch 32, eager f32, SGD momentum", "ir:resnet18", None, None, 908.2, None, H100),
    ("GPT-2 (ir/models' twin, attention written out), eager f32", "ir:gpt2", None, None, 15469.4, None, H100),
]


def build(spec: str, device="meta"):
    """(model, inputs, optimizer) for a spec of GPU_MEASURED or a measured JSON."""
    kind, _, rest = spec.partition(":")
    if kind == "zoo":
        module, function = rest.split(":")
        with torch.device(device):
            model, inputs = getattr(__import__(module), function)()
        return model, inputs, None
    if kind == "ir":
        import gpu_vs_pytorch

        model, inputs, make_optimizer = gpu_vs_pytorch.ir_model(rest, torch.device(device))
        return model, inputs, make_optimizer
    raise ValueError(spec)


def gpu_rows(extra: list[str]):
    rows = [(name, spec, None, opt, amp, False, alloc, reserved) for name, spec, opt, amp, alloc, reserved, _ in GPU_MEASURED]
    for path in extra:
        m = json.loads(Path(path).read_text())
        flags = "".join([f" batch {m['batch']}" if m.get("batch") else "", f" {m['amp']}" if m.get("amp") else "",
                         " expandable segments" if m.get("expandable_segments") else ""])
        rows.append((f"{m['model']}{flags} ({m['device']}, PyTorch {m['torch']})", m["model"], m.get("batch"), m["optimizer"],
                     m.get("amp"), bool(m.get("expandable_segments")), m["max_memory_allocated"] / MIB, m["max_memory_reserved"] / MIB))
    print("| model | measured allocated | predicted | error | measured reserved | predicted | error |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, spec, batch, opt, amp, expandable, alloc, reserved in rows:
        if spec.startswith(("zoo:", "ir:")):
            model, inputs, make_optimizer = build(spec)
        else:
            from memplan_torch.__main__ import _call, _model_and_inputs, load_function

            func = load_function(spec)
            with torch.device("meta"):
                model, inputs = _model_and_inputs(_call(func, spec, batch), spec)
            make_optimizer = None
        figures = replay(record(model, inputs, optimizer=make_optimizer or opt or "adamw", amp=amp), MEMPLAN, expandable_segments=expandable)
        p_alloc, p_res = figures["max_memory_allocated"] / MIB, figures["max_memory_reserved"] / MIB
        err = lambda p, m: f"{(p - m) / m * 100:+.1f}%" if m else "–"
        shown = lambda m: f"{m:.1f} MiB" if m else "–"
        print(f"| {name} | {shown(alloc)} | {p_alloc:.1f} MiB | {err(p_alloc, alloc)} | {shown(reserved)} | {p_res:.1f} MiB | {err(p_res, reserved)} |", flush=True)


def cpu_rows():
    import suite
    from torch_cpu_peak import pytorch_peak

    zoo = [("zoo gpt2 small", "gpt2", "make_small"), ("zoo llama small", "llama", "make_small"),
           ("zoo resnet small", "resnet", "make_small"), ("zoo bert small", "bert", "make_small"),
           ("zoo vit small", "vit", "make_small"), ("zoo unet small", "unet", "make_small"), ("zoo mlp", "mlp", "make")]
    builders = [(label, getattr(__import__(module), function)) for label, module, function in zoo]
    builders += [(f"suite {b.__name__}", b) for b in suite.MODELS]
    print("| model | PyTorch CPU peak | predicted (--device cpu) | error | predict s |")
    print("|---|---:|---:|---:|---:|")
    errors = []
    for label, builder in builders:
        try:
            model, inputs = builder()
            inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
            measured = pytorch_peak(model, inputs)
            started = time.perf_counter()
            model, inputs = builder()
            inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
            predicted = replay(record(model, inputs, optimizer="adamw", device="cpu"), MEMPLAN)["max_requested"]
            took = time.perf_counter() - started
        except Exception as e:  # noqa: BLE001 - a model that cannot be predicted is a row that says why
            print(f"| {label} | – | failed: {type(e).__name__}: {str(e).splitlines()[0][:90] if str(e) else ''} | – | – |", flush=True)
            continue
        error = (predicted - measured) / measured * 100
        errors.append(abs(error))
        print(f"| {label} | {measured / MIB:.3f} MiB | {predicted / MIB:.3f} MiB | {error:+.1f}% | {took:.1f} |", flush=True)
    if errors:
        within = sum(e <= 5 for e in errors)
        print(f"\n{len(errors)} predicted; {within} within 5%; largest error {max(errors):.1f}%")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measured", nargs="*", default=[], help="JSON files benches/torch_memory.py wrote on a GPU")
    parser.add_argument("--no-cpu", action="store_true", help="skip the CPU comparison (which runs every model)")
    args = parser.parse_args()
    print(f"## GPU ({H100} unless the row says otherwise)\n")
    gpu_rows(args.measured)
    if not args.no_cpu:
        print("\n## CPU\n")
        cpu_rows()


if __name__ == "__main__":
    main()
