#!/usr/bin/env bash
# The GPU check (issue 7): HF generation, the scorer and an FSDP2 training iteration on a lent GPU
# machine, with timings and peak memory; nothing is downloaded, the model is built on the spot.
#
#   bash scripts/gpu_check.sh [--cpu] [--out DIR]
#
# Python: $PYTHON, else .venv/bin/python, else python3 (the GPU machines' image holds torch,
# lightning and transformers; this repo is put on PYTHONPATH, nothing is installed). --cpu runs
# the same checks on the CPU with a tiny model. Stops after 10 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
[[ " $* " == *" --cpu "* ]] && export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
"$PY" -c 'import sys, torch, lightning, transformers
print(f"[gpu_check] python {sys.version.split()[0]}, torch {torch.__version__}, lightning {lightning.__version__}, "
      f"transformers {transformers.__version__}, cuda {torch.cuda.is_available()}")'
exec timeout 600 "$PY" scripts/gpu_check.py "$@"
