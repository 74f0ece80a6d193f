"""Rollout correction (TIS / masked IS, scpo_lightning.losses.rollout_correction): hand-computed cases."""

import math

import pytest
import torch

from scpo_lightning.losses import RolloutCorrection, policy_loss, rollout_correction

LN = math.log
# Three tokens of one row. π_old (the trainer's) = 0.5, 0.9, 0.1; π_rollout (the sampler's) =
# 0.25, 0.9, 0.5, so ρ = π_old / π_rollout = 2, 1, 0.2.
OLD = torch.tensor([[LN(0.5), LN(0.9), LN(0.1)]], dtype=torch.float64)
ROLLOUT = torch.tensor([[LN(0.25), LN(0.9), LN(0.5)]], dtype=torch.float64)
MASK = torch.ones_like(OLD)


def test_tis_truncates_the_ratio_from_above_only():
    # cap 1.5: w = min(ρ, 1.5) = 1.5, 1, 0.2; every token kept.
    w, keep = rollout_correction(OLD, ROLLOUT, MASK, "tis", 1.5)
    assert w.tolist()[0] == pytest.approx([1.5, 1.0, 0.2], abs=1e-12)
    assert keep.tolist() == [[1.0, 1.0, 1.0]]


def test_mask_drops_tokens_outside_the_bounds_and_keeps_the_weight_of_the_rest():
    # cap 1.5: bounds [1/1.5, 1.5] = [0.667, 1.5]: ρ = 2 and 0.2 are outside, ρ = 1 inside.
    w, keep = rollout_correction(OLD, ROLLOUT, MASK, "mask", 1.5)
    assert w.tolist()[0] == pytest.approx([0.0, 1.0, 0.0], abs=1e-12)
    assert keep.tolist() == [[0.0, 1.0, 0.0]]
    # cap 3: bounds [0.333, 3]: ρ = 2 and 1 inside (weights ρ), 0.2 outside.
    w, keep = rollout_correction(OLD, ROLLOUT, MASK, "mask", 3.0)
    assert w.tolist()[0] == pytest.approx([2.0, 1.0, 0.0], abs=1e-12)
    assert keep.tolist() == [[1.0, 1.0, 0.0]]


def test_none_changes_nothing_and_padding_stays_out():
    w, keep = rollout_correction(OLD, ROLLOUT, torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64), "none", 2.0)
    assert w.tolist() == [[1.0, 1.0, 1.0]] and keep.tolist() == [[1.0, 1.0, 0.0]]


def test_corrected_pg_loss_by_hand():
    # logp = π_old (ratio 1, no clip), A = +1: the per-token PPO loss is −A·1 = −1 everywhere.
    adv = torch.ones(1, dtype=torch.float64)
    ent = torch.zeros_like(OLD)
    plain = policy_loss(OLD, OLD, OLD, adv, MASK, ent, entropy_coef=0.0, kl_coef=0.0)
    assert plain.pg_loss.item() == pytest.approx(-1.0) and plain.kept_frac.item() == 1.0
    # TIS, cap 1.5: token-mean of −w = −(1.5 + 1 + 0.2) / 3 = −0.9 (all three tokens in the mean).
    w, keep = rollout_correction(OLD, ROLLOUT, MASK, "tis", 1.5)
    tis = policy_loss(OLD, OLD, OLD, adv, MASK, ent, entropy_coef=0.0, kl_coef=0.0, is_weights=w, pg_mask=keep)
    assert tis.pg_loss.item() == pytest.approx(-0.9, abs=1e-12)
    # Mask, cap 3: tokens 1 and 2 kept with w = 2 and 1: −(2 + 1) / 2 = −1.5 (the dropped token
    # is out of the denominator too); kept_frac = 2/3.
    w, keep = rollout_correction(OLD, ROLLOUT, MASK, "mask", 3.0)
    masked = policy_loss(OLD, OLD, OLD, adv, MASK, ent, entropy_coef=0.0, kl_coef=0.0, is_weights=w, pg_mask=keep)
    assert masked.pg_loss.item() == pytest.approx(-1.5, abs=1e-12)
    assert masked.kept_frac.item() == pytest.approx(2 / 3)


def test_weights_carry_no_gradient():
    # ∂/∂logp of w·(−A·ρ(logp)) with w fixed: at ρ = 1, −A·w per token: w = 1.5, 1, 0.2 for A = 1.
    logp = OLD.clone().requires_grad_(True)
    w, keep = rollout_correction(logp, ROLLOUT, MASK, "tis", 1.5)
    out = policy_loss(logp, OLD, OLD, torch.ones(1, dtype=torch.float64), MASK, torch.zeros_like(OLD),
                      entropy_coef=0.0, kl_coef=0.0, is_weights=w, pg_mask=keep)
    out.loss.backward()
    assert (logp.grad * 3).tolist()[0] == pytest.approx([-1.5, -1.0, -0.2], abs=1e-12)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match=r"model\.rollout_correction\.mode must be one of"):
        RolloutCorrection(mode="clip")
    with pytest.raises(ValueError, match=r"model\.rollout_correction\.cap must be a finite number > 1"):
        RolloutCorrection(mode="tis", cap=1.0)
