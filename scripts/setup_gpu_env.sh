#!/usr/bin/env bash
# The GPU environment (issue 15): vLLM rollouts, the training app and the `bge` scorer in ONE venv,
# .venv-gpu, for a Linux x86_64 node with NVIDIA GPUs (CUDA 12 driver). Then:
#
#   bash scripts/setup_gpu_env.sh               # create or refresh .venv-gpu (idempotent, stamp file)
#   bash scripts/gpu_check.sh                   # the one-GPU acceptance run (<= 8 min)
#   .venv-gpu/bin/torchrun --standalone --nproc_per_node 4 train.py fit --config configs/alfworld_scpo.yaml
#
#   bash scripts/setup_gpu_env.sh --dry-run     # print the commands, run nothing
#
# Pinned: vllm==0.33.0, which pins torch==2.14.0 (CUDA wheels from PyPI) and needs transformers
# >=5.16.1,<5.21; transformers==5.19.0 is the version the bge scorer's `backend: transformers`
# is tested with (.venv-vllm, tests/test_scorers_bge.py). FlagEmbedding is NOT installed: it needs
# transformers < 5; `scorer_options.backend: transformers` gives its scores (the GPU recipes set it).
# The app's dependencies are pinned to the versions of .venv. The project goes on the path by a
# .pth file, not `pip install -e .`, which would pull pyproject's transformers==4.57.6 (the pin
# FlagEmbedding needs) over vLLM's. Not run on the CPU machine this was written on (no CUDA there).
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  --dry-run) DRY=1 ;;
  "") DRY=0 ;;
  *) echo "setup_gpu_env.sh: unknown argument '$1' (use --dry-run or --help)" >&2; exit 2 ;;
esac

PYTHON=${PYTHON:-python3}
VENV=${SCPO_GPU_VENV:-.venv-gpu}
stamp=$VENV/.scpo-gpu-installed
want="$(sha256sum "$0" | cut -c1-16)"
PIP="$VENV/bin/python -m pip install -q"

run() {
  echo "+ $*"
  if [ "$DRY" = 0 ]; then eval "$@"; fi
}

if [ "$DRY" = 0 ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "[setup-gpu] $VENV is up to date"
  exit 0
fi
[ -x "$VENV/bin/python" ] || run "$PYTHON -m venv $VENV"
run "$PIP --upgrade pip"
run "$PIP vllm==0.33.0 torch==2.14.0 transformers==5.19.0"
# The training app (pyproject's dependencies without its transformers pin) and the two environments.
run "$PIP torch==2.14.0 transformers==5.19.0 lightning==2.6.6 'jsonargparse[signatures]==4.53.0' torchmetrics==1.9.0 \
  tensorboard==2.21.0 rich==15.0.0"
# alfworld's fast-downward build calls `python` from PATH: it must be this venv's.
run "PATH=$PWD/$VENV/bin:\$PATH $PIP torch==2.14.0 alfworld==0.4.2 textworld==1.7.0 PyStemmer==3.1.0 \
  flask==3.1.3"
run "echo $PWD > \$($VENV/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')/scpo_lightning_repo.pth"
# Everything a GPU run imports, and CUDA visible: a broken install fails here, not hours into a run.
run "$VENV/bin/python -c 'import torch, vllm, lightning, transformers, callbacks.scpo, scpo_lightning.engines.vllm, \
scpo_lightning.scorers.bge_transformers; assert torch.cuda.is_available(), \"torch sees no CUDA device\"; \
print(\"[setup-gpu] torch\", torch.__version__, \"vllm\", vllm.__version__, \"transformers\", transformers.__version__)'"
run "echo $want > $stamp"
