"""Times writing GPT-2 small's step arguments as safetensors (what `export --weights`
writes): see benches/BENCHMARKS.md. Run from the repository's root:

    PYTHONPATH=python python benches/weights_write.py
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python" / "zoo"))

import gpt2  # noqa: E402 - the zoo is found through the path set above

from memplan_torch import safetensors, step_arguments  # noqa: E402

model, inputs = gpt2.make(batch=1)
args = step_arguments(model, inputs)
total = sum(t.numel() * t.element_size() for t in args.values())
start = time.perf_counter()
data = safetensors.to_bytes(args)
print(f"{len(args)} tensors, {total} bytes of data, to_bytes {time.perf_counter() - start:.3f} s")
