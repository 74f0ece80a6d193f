"""GiGPO, GRPO and RLOO advantages (SPEC §2.4-2.8) against hand-computed values."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scpo_lightning.gigpo import (
    episode_advantage,
    gigpo_advantage,
    grpo_advantage,
    rloo_advantage,
    step_advantage,
)

EPS = 1e-6


def test_episode_advantage_uses_all_rows_of_the_group():
    # Group "g": a success of 2 rows (score 10) and a failure of 3 rows (score 0).
    # Row-level stats (SPEC §2.4): mean = 20/5 = 4; unbiased var = (2*6² + 3*4²)/4 = 30.
    # A_E = (10-4)/(√30+ε) on success rows, (0-4)/(√30+ε) on failure rows.
    a = episode_advantage([10, 10, 0, 0, 0], ["g"] * 5)
    s = math.sqrt(30.0) + EPS
    np.testing.assert_allclose(a, [6 / s, 6 / s, -4 / s, -4 / s, -4 / s], rtol=1e-12)
    # mean_norm: x - mean only.
    np.testing.assert_allclose(episode_advantage([10, 10, 0, 0, 0], ["g"] * 5, "mean_norm"), [6, 6, -4, -4, -4])


def test_episode_singleton_group_uses_mean_0_std_1():
    # One row alone in its group: mean 0, std 1 -> A_E = 3 / (1 + ε) and 3 under mean_norm.
    np.testing.assert_allclose(episode_advantage([3.0], ["solo"]), [3.0 / (1 + EPS)], rtol=1e-15)
    np.testing.assert_allclose(episode_advantage([3.0], ["solo"], "mean_norm"), [3.0])


def test_step_groups_are_exact_anchor_matches_within_a_group():
    # Group "g": anchors "s0" (rows 0, 2: returns 2 and 4, across two trajectories), "s1" (row 1,
    # singleton), "S0" (row 3: case differs -> its own singleton), "s0 " (row 4: trailing space).
    # Group "h" also has anchor "s0" (row 5) but groups never mix -> singleton.
    # s0 in g: mean 3, unbiased std √2 -> ±1/(√2+ε); singletons -> 0.
    a = step_advantage([2, 7, 4, 9, 1, 5], ["g", "g", "g", "g", "g", "h"], ["s0", "s1", "s0", "S0", "s0 ", "s0"])
    d = 1 / (math.sqrt(2) + EPS)
    np.testing.assert_allclose(a, [-d, 0, d, 0, 0, 0], rtol=1e-12)


def test_step_group_with_zero_std_gives_zero():
    # Same anchor, same return 5.0 twice (a duplicated state): (5-5)/(0+ε) = 0, not NaN.
    a = step_advantage([5.0, 5.0, 1.0], ["g"] * 3, ["s", "s", "t"])
    np.testing.assert_array_equal(a, [0.0, 0.0, 0.0])


def test_gigpo_combines_levels_with_omega():
    # Two trajectories in one group, anchors: traj A (score 10): s0, s1; traj B (score 0): s0, s2.
    # A_E: mean 5, std √(4*25/3) = √(100/3) -> ±5/(√(100/3)+ε).
    # A_S: s0 has returns 9.5 (A) and 0 (B): mean 4.75, std √(2*4.75²) = 4.75√2 -> ±4.75/(4.75√2+ε);
    #      s1 and s2 are singletons -> 0. ω = 0.5.
    scores, returns = [10, 10, 0, 0], [9.5, 10, 0, 0]
    a = gigpo_advantage(scores, returns, ["g"] * 4, ["s0", "s1", "s0", "s2"], omega=0.5)
    e = 5 / (math.sqrt(100 / 3) + EPS)
    s = 4.75 / (4.75 * math.sqrt(2) + EPS)
    np.testing.assert_allclose(a, [e + 0.5 * s, e, -e - 0.5 * s, -e], rtol=1e-12)


def test_tensor_in_tensor_out():
    # Scores and returns (1, 0), one anchor: each level gives ±0.5/(√0.5+ε); A = A_E + A_S.
    a = gigpo_advantage(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 0.0]), [0, 0], ["s", "s"])
    assert isinstance(a, torch.Tensor) and a.dtype == torch.float32
    d = 2 * 0.5 / (math.sqrt(0.5) + EPS)
    np.testing.assert_allclose(a.numpy(), [d, -d], rtol=1e-6)


def test_grpo_is_episode_level_only():
    np.testing.assert_allclose(grpo_advantage([1, 0], ["g", "g"], "mean_norm"), [0.5, -0.5])


def test_rloo_leave_one_out():
    # Group g: trajectories a (R=10, 2 rows, second row invalid: score 9.9), b (R=0), c (R=5).
    # Baselines: a -> (0+5)/2 = 2.5; b -> (10+5)/2 = 7.5; c -> (10+0)/2 = 5. Lone trajectory d: 0.
    scores = [10, 9.9, 0, 5, 3]
    rets = [10, 10, 0, 5, 3]
    a = rloo_advantage(scores, rets, ["a", "a", "b", "c", "d"], ["g", "g", "g", "g", "k"])
    np.testing.assert_allclose(a, [7.5, 7.4, -7.5, 0.0, 3.0])


def test_bad_mode_and_lengths_are_clear_errors():
    with pytest.raises(ValueError, match="mode"):
        episode_advantage([1.0], ["g"], mode="std")
    with pytest.raises(ValueError, match="same length"):
        gigpo_advantage([1.0, 2.0], [1.0], ["g", "g"], ["s", "s"])


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    n_groups=st.integers(1, 4),
    n_anchors=st.integers(1, 5),
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(["mean_std_norm", "mean_norm"]),
)
def test_matches_per_group_loop_and_is_permutation_equivariant(n, n_groups, n_anchors, seed, mode):
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, n_groups, n).tolist()
    anchors = [f"obs {k}" for k in rng.integers(0, n_anchors, n)]
    scores = rng.integers(0, 2, n) * 10.0
    returns = rng.normal(size=n)
    got = gigpo_advantage(scores, returns, groups, anchors, mode=mode, omega=0.7)

    def norm(x, single_value):
        if len(x) == 1:
            return [single_value(x[0])]
        x = np.asarray(x)
        c = x - x.mean()
        return list(c / (x.std(ddof=1) + EPS) if mode == "mean_std_norm" else c)

    expected = np.zeros(n)
    for g in set(groups):
        idx = [i for i in range(n) if groups[i] == g]
        single = (lambda v: v / (1 + EPS)) if mode == "mean_std_norm" else (lambda v: v)
        expected[idx] += norm(scores[idx], single)
        for s in {anchors[i] for i in idx}:
            jdx = [i for i in idx if anchors[i] == s]
            expected[jdx] += 0.7 * np.asarray(norm(returns[jdx], lambda v: 0.0))
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-9)
    perm = rng.permutation(n)
    again = gigpo_advantage(scores[perm], returns[perm], [groups[i] for i in perm], [anchors[i] for i in perm], mode=mode, omega=0.7)
    np.testing.assert_allclose(again, got[perm], rtol=1e-12, atol=1e-12)


# SCPO on GRPO and RLOO (scpo_lightning/gigpo.py docstring). One group: trajectory a succeeds
# (R = 10, rows 0-1), b fails (R = 0, rows 2-3; SCPO credits row 3: G 0 -> G̃ 0.5).
SHAPED_GROUP = dict(scores=[10, 10, 0, 0], step_returns=[9.5, 10, 0, 0], shaped_returns=[9.5, 10, 0, 0.5])


def test_grpo_reads_the_scpo_credit_through_a_step_term():
    c = SHAPED_GROUP
    # Δ = G̃ - G = (0, 0, 0, 0.5). mean_norm: A_E = x - 5 = (5, 5, -5, -5); A_E(Δ) = Δ - 0.125.
    # ω = 1: A = (4.875, 4.875, -5.125, -4.625): the credited row gains 0.5 on its uncredited sibling.
    a = grpo_advantage(c["scores"], ["g"] * 4, "mean_norm", shaped_returns=c["shaped_returns"],
                       step_returns=c["step_returns"])
    np.testing.assert_allclose(a, [4.875, 4.875, -5.125, -4.625], rtol=1e-12)
    # mean_std_norm: A_E = ±5/(√(100/3)+ε); Δ has mean 0.125, unbiased std √((3·0.125² + 0.375²)/3)
    # = √0.0625 = 0.25, so A_E(Δ) = (-0.125, -0.125, -0.125, 0.375)/(0.25+ε); ω = 0.5.
    a = grpo_advantage(c["scores"], ["g"] * 4, shaped_returns=c["shaped_returns"], step_returns=c["step_returns"],
                       omega=0.5)
    e, d = 5 / (math.sqrt(100 / 3) + EPS), 0.5 / (0.25 + EPS)
    np.testing.assert_allclose(a, [e - 0.125 * d, e - 0.125 * d, -e - 0.125 * d, -e + 0.375 * d], rtol=1e-12)


def test_rloo_reads_the_scpo_credit_with_a_leave_one_out_baseline():
    c = SHAPED_GROUP
    # Add trajectory z (R = 0, one row, no credit). Outcome: a -> 10 - (0+0)/2 = 10; b, z -> 0 - (10+0)/2 = -5.
    # Mean credit per row: a 0, b 0.25, z 0. Credit term: a -> 0 - (0.25+0)/2 = -0.125;
    # b row 2 -> 0 - (0+0)/2 = 0, row 3 -> 0.5 - 0 = 0.5; z -> 0 - (0+0.25)/2 = -0.125. ω = 1.
    a = rloo_advantage(c["scores"] + [0], [10, 10, 0, 0, 0], ["a", "a", "b", "b", "z"], ["g"] * 5,
                       shaped_returns=c["shaped_returns"] + [0], step_returns=c["step_returns"] + [0])
    np.testing.assert_allclose(a, [9.875, 9.875, -5.0, -4.5, -5.125], rtol=1e-12)


def test_unshaped_returns_give_the_plain_estimators_bit_for_bit():
    rng = np.random.default_rng(3)
    groups = rng.integers(0, 3, 30)
    traj = groups * 10 + rng.integers(0, 3, 30)
    rets = (traj % 2) * 10.0
    scores = rets - 0.1 * (rng.random(30) < 0.2)
    g = rng.normal(size=30)
    for mode in ("mean_std_norm", "mean_norm"):
        plain = grpo_advantage(scores, groups, mode)
        np.testing.assert_array_equal(grpo_advantage(scores, groups, mode, shaped_returns=g, step_returns=g), plain)
    plain = rloo_advantage(scores, rets, traj, groups)
    np.testing.assert_array_equal(rloo_advantage(scores, rets, traj, groups, shaped_returns=g, step_returns=g), plain)


def test_shaped_returns_without_step_returns_is_a_clear_error():
    with pytest.raises(ValueError, match="step_returns"):
        grpo_advantage([1, 0], ["g", "g"], shaped_returns=[0.5, 0])
    with pytest.raises(ValueError, match="step_returns"):
        rloo_advantage([1, 0], [1, 0], ["a", "b"], ["g", "g"], shaped_returns=[0.5, 0])
    with pytest.raises(ValueError, match="same length"):
        rloo_advantage([1, 0], [1, 0], ["a", "b"], ["g", "g"], shaped_returns=[0.5], step_returns=[0.0])


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    n_groups=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
    mode=st.sampled_from(["mean_std_norm", "mean_norm"]),
)
def test_scpo_credit_term_matches_a_per_group_loop_and_moves_advantage_to_credited_rows(n, n_groups, seed, mode):
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, n_groups, n)
    traj = groups * 5 + rng.integers(0, 4, n)
    rets = np.array([10.0 * (t % 3 == 0) for t in traj])
    g = rng.normal(size=n)
    delta = 0.5 * rng.random(n) * (rng.random(n) < 0.4) * (rets == 0)  # α r on some failed rows
    shaped = dict(shaped_returns=g + delta, step_returns=g, omega=0.7)
    d = (g + delta) - g  # Δ as the estimators compute it
    grpo_term = (grpo_advantage(rets, groups, mode, **shaped) - grpo_advantage(rets, groups, mode)) / 0.7
    rloo_term = (rloo_advantage(rets, rets, traj, groups, **shaped) - rloo_advantage(rets, rets, traj, groups)) / 0.7
    for k in set(groups.tolist()):
        rows = np.flatnonzero(groups == k)
        x = d[rows]
        if len(rows) == 1:  # §2.4 singleton: mean 0, std 1
            want = x / (1 + EPS) if mode == "mean_std_norm" else x
        else:
            want = (x - x.mean()) / (x.std(ddof=1) + EPS) if mode == "mean_std_norm" else x - x.mean()
        np.testing.assert_allclose(grpo_term[rows], want, rtol=1e-7, atol=1e-7)
        trajs = sorted(set(traj[rows].tolist()))
        mean_of = {t: d[traj == t].mean() for t in trajs}
        for i in rows:
            others = [mean_of[t] for t in trajs if t != traj[i]]
            np.testing.assert_allclose(rloo_term[i], d[i] - (np.mean(others) if others else 0.0), rtol=1e-7, atol=1e-7)
        # Zero-sum: the credit moves advantage inside the group, it adds none.
        if len(rows) > 1:
            assert abs(grpo_term[rows].sum()) < 1e-6 * max(1.0, np.abs(grpo_term[rows]).max())
        if len(trajs) > 1:
            assert abs(sum(rloo_term[traj == t].mean() for t in trajs)) < 1e-9
        # The most credited row of a group whose credit varies gains advantage under both.
        top = rows[np.argmax(x)]
        if len(rows) > 1 and x.max() > x.min():
            assert grpo_term[top] > 0
        if len(trajs) > 1 and d[top] > max(mean_of[t] for t in trajs if t != traj[top]):
            assert rloo_term[top] > 0


@pytest.mark.parametrize("estimator, gain", [
    # Anchors s0 (rows 0, 2) and s1 (rows 1, 3); mean_norm, ω = 1; Δ = (0, 0, 0, 0.5).
    # gigpo: step group s1 holds G 10 and 0 -> 0.5: mean 5 -> 5.25, so rows 1, 3 move by ∓0.25.
    ("gigpo", [0.0, -0.25, 0.0, 0.25]),
    # grpo: Δ - mean Δ = Δ - 0.125.
    ("grpo", [-0.125, -0.125, -0.125, 0.375]),
    # rloo: mean credit per row a 0, b 0.25 -> a rows 0 - 0.25, b rows Δ - 0.
    ("rloo", [-0.25, -0.25, 0.0, 0.5]),
])
def test_module_passes_scpo_credit_to_every_estimator(estimator, gain):
    # SCPOModule.advantages reads only its estimator, hparams and batch fields: run it on stand-ins, shaped and not.
    from types import SimpleNamespace

    from scpo_lightning.estimators import estimator_class
    from scpo_lightning.module import SCPOModule

    c = SHAPED_GROUP
    module = SimpleNamespace(hparams=SimpleNamespace(norm_mode="mean_norm", omega=1.0),
                             estimator=estimator_class(estimator)())
    batch = SimpleNamespace(episode_scores=np.array(c["scores"], float), group_ids=["g"] * 4,
                            traj_returns=np.array([10.0, 10, 0, 0]), traj_ids=["a", "a", "b", "b"],
                            anchors=["s0", "s1", "s0", "s1"], step_returns=np.array(c["step_returns"]),
                            shaped_returns=None)
    plain = SCPOModule.advantages(module, batch)
    batch.shaped_returns = np.array(c["shaped_returns"])
    np.testing.assert_allclose(SCPOModule.advantages(module, batch) - plain, gain, rtol=1e-12, atol=1e-12)
