"""scripts/gpu_check.py's rollout-vs-train mismatch (run for real in .venv-vllm by scripts/gpu_check.sh
--cpu): here on the HF engine, whose fp32 samples the trainer reproduces, so no TIS is advised; a
sampler that lags by a constant log-prob offset is advised to turn TIS on."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from scpo_lightning.module import SCPOModule
from scpo_lightning.testing import build_tiny_llama

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    torch.manual_seed(0)
    policy = SCPOModule(policy=str(build_tiny_llama(tmp_path_factory.mktemp("tiny"))), kl_coef=0.0)
    policy.configure_model()
    return policy


def test_tis_is_advised_for_a_lagging_sampler_only(gpu_check, module, monkeypatch):
    real, seen = module.engine.generate, []
    monkeypatch.setattr(module.engine, "generate", lambda *a, **k: seen.extend(real(*a, **k)) or list(seen))
    mismatch = gpu_check.measure_mismatch(module, [[1, 5, 9], [1, 7]], torch.device("cpu"))
    assert mismatch["tokens"] > 0 and mismatch["max_abs"] < 1e-4 and 0 <= mismatch["k3"] < 1e-8
    assert not mismatch["tis_advised"]
    assert "within 0.001: the recipes' rollout_correction none is fine" in gpu_check.tis_advice(mismatch)
    # The same samples with every log-prob 0.1 nats off: k3 = e^0.1 - 0.1 - 1 = 5.2e-3 per token > 1e-3.
    lagging = [replace(g, policy_logprobs=[x - 0.1 for x in g.policy_logprobs]) for g in seen]
    monkeypatch.setattr(module.engine, "generate", lambda *a, **k: lagging)
    mismatch = gpu_check.measure_mismatch(module, [[1, 5, 9], [1, 7]], torch.device("cpu"))
    assert mismatch["k3"] == pytest.approx(0.0052, abs=2e-4) and mismatch["tis_advised"]
    assert f"set model.rollout_correction: {gpu_check.TIS_SETTING}" in gpu_check.tis_advice(mismatch)
