#!/usr/bin/env bash
# The GPU check: run on a machine with a CUDA GPU after the README's GPU install
#   pip install -r requirements-gpu.txt
#   pip install flash-attn==2.8.3 --no-build-isolation
#   pip install --no-deps -e .
#   bash bench/gpu_check.sh
# It runs the gpu-marked tests: the smoke config on verl's CUDA platform with the hf rollout
# (tests/e2e/test_train_gpu.py), then GRPO with verl's vLLM rollout and flash-attention, the same with LoRA, and
# greedy evaluation with repeats on vLLM (tests/vllm/test_gpu_check.py). Each checks the rollout/actor
# log-prob agreement after verl's weight sync, as the CPU tier does. One GPU is enough; about 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'bench/gpu_check.sh: no CUDA device here')"
python -c "import vllm, flash_attn" || { echo "bench/gpu_check.sh: install vllm and flash-attn first (README, GPU machines)"; exit 1; }
exec python -m pytest -m gpu -p no:xdist -v tests/e2e/test_train_gpu.py tests/vllm/test_gpu_check.py "$@"
