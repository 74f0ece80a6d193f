"""Run a check script in the vLLM environment (``.venv-vllm``, built by scripts/setup_vllm_env.sh).

vLLM needs transformers 5 and this environment pins 4.57.6, so what must run next to vLLM runs
in a subprocess there. Without ``.venv-vllm`` the calling test skips, except when
``SCPO_REQUIRE_VLLM=1`` (set where CI builds it): then a missing environment fails instead of
hiding a broken install step.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def run_in_vllm_env(script: str, *args: str, timeout: int = 600) -> dict:
    """Run ``tests/<script>`` in ``.venv-vllm``; assert exit 0; return its last stdout line as JSON."""
    if not VLLM_PYTHON.exists():
        message = f"needs the vLLM environment {VLLM_PYTHON.parent.parent} (bash scripts/setup_vllm_env.sh)"
        if os.environ.get("SCPO_REQUIRE_VLLM") == "1":
            pytest.fail(message)
        pytest.skip(message)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    run = subprocess.run([str(VLLM_PYTHON), str(ROOT / "tests" / script), *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, (run.stdout + run.stderr)[-6000:]
    return json.loads(run.stdout.strip().splitlines()[-1])
