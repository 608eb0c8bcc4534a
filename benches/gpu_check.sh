#!/usr/bin/env bash
# One pass of every GPU check issue 20 asks for, sized to fit a short GPU lease (about 9
# minutes on an H100): the GPU tests, `run --check` on the tiny models and the half-precision
# corpus steps, compute-sanitizer on the tensor-core attention, a profile of each bf16 zoo
# model, PyTorch's own memory for `predict` (benches/torch_memory.py), then
# benches/gpu_vs_pytorch.py. Build on a machine with the crates registry, carry
# the two binaries, run from the repository root on the GPU machine:
#
#   cargo build --release --features cuda
#   cargo test --release --features cuda --no-run --test cuda    # prints target/release/deps/cuda-<hash>
#   benches/gpu_check.sh OUT_DIR target/release/memplan target/release/deps/cuda-<hash>
#
# Everything it prints also lands in OUT_DIR (logs, profiles, the benchmark's table and JSON).
# Each stage has its own time limit, so a slow stage cannot eat the others' time. The first
# run of a new build waits for NVRTC and the driver to compile the kernels (tens of seconds;
# both cached on disk for later runs: ~/.cache/memplan/ptx and ~/.nv/ComputeCache): the GPU
# tests come first and pay it.
set -u
out=${1:?usage: gpu_check.sh OUT_DIR MEMPLAN CUDA_TEST_BINARY}
memplan=${2:?memplan binary}
tests=${3:?the cuda test binary}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# NVRTC, cuBLAS (and cuDNN) from the pip wheels PyTorch brings, when no toolkit is on the path.
for d in $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, x, "lib") for p in nvidia.__path__ for x in os.listdir(p)))' 2>/dev/null); do
  [ -d "$d" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:$d"
done
export LD_LIBRARY_PATH
start=$(date +%s)
stage() { echo "[$(( $(date +%s) - start )) s] $*"; }
{
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
stage "GPU tests"
timeout 200 "$tests" --nocapture > "$out/gpu_tests.log" 2>&1; echo "GPU tests: exit $?"
grep -E '^test |test result|panicked' "$out/gpu_tests.log" | head -12
stage "run --check"
for f in ir/models/mlp.step ir/models/mlp_adam.step ir/models/gpt2_tiny.step ir/models/resnet18_tiny.step \
         ir/torch/gpt2_small.step ir/torch/gpt2_small_bf16.step ir/torch/llama_small.step ir/torch/vit_small.step \
         ir/features/half_loss.step ir/features/fused_attention.step ir/features/dropout.step \
         ir/torch/resnet_small.step ir/features/writes.step ir/features/checkpoint.step \
         ir/features/masked_attention.step ir/features/rotary.step ir/features/custom_backward.step \
         ir/features/checkpoint_selective.step ir/features/routing.step \
         ir/features/attention_dropout.step ir/features/noise.step ir/features/embedding_bag.step \
         ir/features/volumes_and_sampling.step ir/features/fused_loss.step ir/features/lanes.step; do
  o=$(timeout 40 "$memplan" run "$f" --device cuda --steps 3 --check 2>&1); rc=$?
  echo "$f: exit $rc; $(echo "$o" | grep -E 'largest error|differs|error:' | tail -2 | tr '\n' ' ' | cut -c1-300)"
done
stage "run --check, every elementwise chain fused (kernels generated per fused body, NVRTC)"
for f in ir/features/fusion.step ir/features/activations.step ir/features/rotary.step ir/features/mixed_dtypes.step \
         ir/models/gpt2_tiny.step ir/torch/llama_small.step ir/features/fused_norm.step; do
  o=$(timeout 40 "$memplan" run "$f" --device cuda --steps 3 --check --fuse always 2>&1); rc=$?
  echo "$f (fused): exit $rc; $(echo "$o" | grep -E 'largest error|differs|error:' | tail -2 | tr '\n' ' ' | cut -c1-300)"
done
stage "compute-sanitizer memcheck"
for f in ir/models/gpt2_tiny.step ir/torch/gpt2_small_bf16.step ir/torch/llama_small.step ir/torch/unet_small.step ir/features/fused_loss.step ir/features/fusion.step ir/features/lanes.step; do
  echo "$f: $(timeout 60 compute-sanitizer --tool memcheck "$memplan" run "$f" --device cuda --steps 1 2>&1 | grep 'ERROR SUMMARY')"
done
echo "ir/features/fused_norm.step (fused): $(timeout 60 compute-sanitizer --tool memcheck "$memplan" run ir/features/fused_norm.step --device cuda --steps 1 --fuse always 2>&1 | grep 'ERROR SUMMARY')"
stage "compute-sanitizer racecheck: the tensor-core attention's double-buffered copies (cp.async)"
echo "ir/torch/gpt2_small_bf16.step: $(timeout 90 compute-sanitizer --tool racecheck "$memplan" run ir/torch/gpt2_small_bf16.step --device cuda --steps 1 2>&1 | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' | tr '\n' ' ')"
stage "profiles"
scratch=$(mktemp -d)
for m in gpt2.py:make llama.py:make_125m; do
  step="$scratch/$(echo "$m" | cut -d. -f1)_bf16.step"
  PYTHONPATH=python timeout 60 python3 -m memplan_torch export "python/zoo/$m" -o "$step" --amp bf16 > /dev/null 2>&1
  timeout 60 "$memplan" run "$step" --device cuda --steps 6 --profile > "$out/profile_$(basename "$step" .step).log" 2>&1
  echo "$step: exit $?"; grep -E 'step time|^  [a-z_0-9]+ +[0-9]+ ' "$out/profile_$(basename "$step" .step).log" | head -8
done
stage "PyTorch's own memory, against predict (issue 31)"
# The step `python -m memplan_torch predict` predicts, measured: max_memory_* and a memory
# snapshot per model. Here afterwards: benches/predict_accuracy.py --measured OUT/torch_memory/*/measured.json
for spec in "python/zoo/gpt2.py:make --amp bf16" "python/zoo/llama.py:make_125m --amp bf16" "python/zoo/llama.py:make_125m" \
            "benches/ir_twins.py:resnet18 --optimizer momentum" "python/zoo/llama.py:make_125m --amp bf16 --expandable-segments"; do
  name=$(echo "$spec" | tr ' /:.' '____' | tr -s '_')
  PYTHONPATH=python:benches timeout 45 python3 benches/torch_memory.py $spec -o "$out/torch_memory/$name" 2>&1 | tail -1
done
stage "side by side with PyTorch"
timeout 300 python3 benches/gpu_vs_pytorch.py --memplan "$memplan" --steps 6 --warmup 2 --models gpt2,resnet18 --out-dir "$scratch" \
  2>&1 | grep -v -E 'UserWarning|detach\(\)|losses.append'
cp "$scratch"/gpu_vs_pytorch.md "$scratch"/gpu_vs_pytorch.json "$out"/ 2>/dev/null
stage done
} 2>&1 | tee "$out/gpu_check.log"
