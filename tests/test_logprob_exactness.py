"""In the real training loop: the PPO ratio starts at exactly 1, and one small step moves the policy
by what the step is, not by bf16 rounding (docs/numerics.md).

The tiny policy gets 10 % of its weights on bf16 ties, as SmolLM2's dequantised GGUF has (under
bf16 autocast, any update flips them by half a bf16 step), and weights large enough for peaked
next-token distributions, as a trained model has (small changes then show in the log-probs). Advantages are zero, so the first
optimizer step is AdamW's first step on the entropy term alone: every weight moves by ~lr.
"""

from __future__ import annotations

import lightning as L
import numpy as np
import pytest
import torch

import scpo_lightning.logprobs as logprobs
import scpo_lightning.ppo_epoch as ppo_epoch
from scpo_lightning.datamodule import RolloutDataModule
from scpo_lightning.losses import RolloutCorrection, k3_kl
from scpo_lightning.module import SCPOModule
from scpo_lightning.rollout import RolloutConfig
from scpo_lightning.testing import build_tiny_llama


@pytest.mark.parametrize("precision, generation, sharing", [("32-true", None, False), ("32-true", "bfloat16", False),
                                                             ("bf16-mixed", "bfloat16", False), ("32-true", None, True)])
def test_first_ratio_is_exactly_one_and_one_step_at_lr_1e6_moves_little(tmp_path, monkeypatch, precision, generation,
                                                                          sharing):
    calls = []
    real_loss = ppo_epoch.policy_loss

    def spy(logp, old_logp, ref_logp, advantages, mask, *args, **kwargs):
        calls.append((logp.detach().clone(), old_logp.clone(), ref_logp.clone(), mask.bool()))
        return real_loss(logp, old_logp, ref_logp, advantages, mask, *args, **kwargs)

    monkeypatch.setattr(ppo_epoch, "policy_loss", spy)
    shared_passes = []
    real_shared = logprobs.shared_prefix_logits
    monkeypatch.setattr(logprobs, "shared_prefix_logits", lambda *a, **k: shared_passes.append(1) or real_shared(*a, **k))
    monkeypatch.setattr(SCPOModule, "advantages", lambda self, batch: np.zeros(len(batch)))
    torch.manual_seed(0)
    # 3 mini-batches of near-equal size cut into micro-batches of 3: a grouping that contiguous
    # 3-row chunks over the whole batch would not reproduce.
    module = SCPOModule(max_new_tokens=12, policy=str(build_tiny_llama(tmp_path / "tiny", bf16_ties=0.1, init_std=0.4)), lr=1e-6, kl_coef=0.01,
                        mini_batch_rows=5, micro_batch_rows=3, generation_batch_size=8, generation_autocast=generation,
                        logprob_prefix_sharing=sharing)  # sharing: the old, reference and update passes alike
    data = RolloutDataModule(
        env="corridor", env_options={"rooms": 3, "max_steps": 3}, groups_per_batch=2, group_size=2, workers=0,
        val_episodes=0, progress=False,
        rollout=RolloutConfig(env="alfworld", max_steps=3, action_mode="constrained", max_prompt_tokens=4096))
    trainer = L.Trainer(max_epochs=1, num_sanity_val_steps=0, limit_val_batches=0, accelerator="cpu", devices=1,
                        precision=precision, logger=False, enable_progress_bar=False, enable_checkpointing=False)
    trainer.fit(module, data)

    steps = module.step_metrics
    assert len(steps) >= 2 and all(s["applied"] for s in steps)
    assert bool(shared_passes) == sharing
    plan = ppo_epoch.distributed.update_plan(int(module.last_metrics["train/rows"]), 5, 3)
    first = len(plan[0][0])
    assert first >= 2  # at least one micro-batch that contiguous chunks would group differently
    for logp, old, ref, mask in calls[:first]:
        # Before any step the policy is π_old, computed in the same micro-batch: bit for bit.
        assert torch.equal(logp[mask], old[mask]) and torch.equal(old[mask], ref[mask])
    assert steps[0]["clip_frac"] == 0.0 and steps[0]["kl"] == 0.0
    # The second mini-batch sees the policy after one step at lr 1e-6.
    logp, old, ref, mask = calls[first]
    delta = (logp - ref)[mask].abs()
    assert float(k3_kl(logp[mask], ref[mask]).mean()) < 1e-3
    # A bf16 trainer rounds every matmul output: a small change of its inputs flips some roundings
    # by a whole bf16 step, a floor of ~0.015 nats mean |Δ| whatever the step (docs/numerics.md).
    assert float(delta.mean()) < (1e-2 if precision == "32-true" else 5e-2)
    assert steps[1]["kl"] < 1e-3
    # The sampler's own log-probs of π: the trainer's where both compute in fp32, up to the order of
    # fp32 sums (incremental decoding vs one forward). This peaked model amplifies that order through
    # its layers: mean 9.2e-6, max 9.5e-5 here (1.2e-4 max on another Xeon; the standard tiny model
    # stays <= 1e-4, tests/test_rollout_logprobs.py); a bf16 sampler is off by far more (the metric
    # sees it: a max over the sampled tokens: 1.19 against an fp32 trainer). Against a bf16 trainer
    # both sides round, but at different places (incremental decoding vs one forward): 8.6e-3 max on
    # an AVX2 EPYC, whose bf16 matmuls are emulated, above 1e-2 on a Xeon with AVX512-BF16; either
    # way many times the fp32 bound.
    diff, mean = module.last_metrics["rollout/logprob_diff_max"], module.last_metrics["rollout/logprob_diff_mean"]
    if generation is None:
        assert diff <= 3e-4 and mean <= 3e-5
    else:
        assert (1e-2 if precision == "32-true" else 2e-3) < diff < 10.0


def _fit_one_iteration(tmp_path, **module_kw) -> SCPOModule:
    module = SCPOModule(max_new_tokens=12, policy=str(build_tiny_llama(tmp_path / "tiny", init_std=0.4)), lr=1e-6, mini_batch_rows=5,
                        micro_batch_rows=3, generation_batch_size=8, **module_kw)
    data = RolloutDataModule(
        env="corridor", env_options={"rooms": 3, "max_steps": 3}, groups_per_batch=2, group_size=2, workers=0,
        val_episodes=0, progress=False,
        rollout=RolloutConfig(env="alfworld", max_steps=3, action_mode="free", max_prompt_tokens=4096))
    trainer = L.Trainer(max_epochs=1, num_sanity_val_steps=0, limit_val_batches=0, accelerator="cpu", devices=1,
                        logger=False, enable_progress_bar=False, enable_checkpointing=False)
    trainer.fit(module, data)
    return module


def test_rollout_logprobs_as_old_skip_the_recompute_and_still_measure_the_mismatch(tmp_path, monkeypatch):
    passes = []
    real = ppo_epoch.response_logprobs
    monkeypatch.setattr(ppo_epoch, "response_logprobs", lambda *a, **k: passes.append(k["with_entropy"]) or real(*a, **k))
    module = _fit_one_iteration(tmp_path, old_logprobs="rollout", kl_coef=0.0)
    assert passes and all(passes)  # every forward was an update pass: no recompute pass ran
    m = module.last_metrics
    # fp32 sampler and trainer, measured on the first mini-batch before the policy moved.
    assert m["rollout/logprob_diff_max"] <= 1e-4 and m["rollout/logprob_k3"] <= 1e-8
    assert abs(m["rollout/sampling_logprob_gap"]) <= 1e-4  # free mode, top_p 1: q is π


@pytest.mark.parametrize("mode", ["tis", "mask"])
def test_rollout_correction_in_the_loop_keeps_every_token_when_sampler_and_trainer_agree(tmp_path, mode):
    module = _fit_one_iteration(tmp_path, rollout_correction=RolloutCorrection(mode=mode, cap=2.0))
    assert module.last_metrics["train/kept_frac"] == 1.0
    assert all(s["kept_frac"] == 1.0 for s in module.step_metrics)


def test_rollout_old_logprobs_and_a_correction_exclude_each_other(tmp_path):
    with pytest.raises(ValueError, match=r"model\.rollout_correction corrects π_old.*old_logprobs: rollout"):
        SCPOModule(policy=str(build_tiny_llama(tmp_path / "tiny")), old_logprobs="rollout",
                   rollout_correction=RolloutCorrection(mode="tis"))
