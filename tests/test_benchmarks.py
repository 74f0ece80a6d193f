"""The benchmarks' own checks: their baselines compute what the application computes, and the
iteration timer's bookkeeping adds up. Timing itself is never asserted (benchmarks/ measures it)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from benchmarks import plain_loop
from benchmarks.credit_math import make_batch, run_once, run_plain
from benchmarks.iteration_breakdown import union_seconds
from benchmarks.shaper_cost import naive_shape, ours_shape, rollouts_key
from scpo_lightning.batch import RolloutBatch
from scpo_lightning.returns import step_returns, trajectory_returns
from scpo_lightning.scorers import LexicalScorer
from scpo_lightning.scpo_config import SCPOConfig
from scpo_lightning.shaper import plan_shaping


#: θ = 0.8 on the synthetic batch's lexical scores: the matcher falls back and re-matches, so the
#: monotonic rule and the processing order both change the credit (checked below), and a baseline
#: that got either wrong would differ.
THETA = 0.8


@pytest.fixture(scope="module")
def small_batch() -> dict:
    batch = make_batch(groups=6, group_size=4, steps=12, seed=3)
    paper = run_once(batch, SCPOConfig(theta=THETA), LexicalScorer())[2]
    repeated = run_once(batch, SCPOConfig(theta=THETA, monotonic=False), LexicalScorer())[2]
    chronological = run_once(batch, SCPOConfig(theta=THETA, order="chronological"), LexicalScorer())[2]
    assert np.count_nonzero(paper) > 0
    assert np.any(paper != repeated) and np.any(paper != chronological), "the fixture must exercise the matcher"
    return batch


@pytest.mark.parametrize("baseline, uids", [(plain_loop.published_shape, True), (plain_loop.tidy, False)])
def test_plain_loop_baselines_compute_the_same_credit_and_advantages(small_batch, baseline, uids):
    config, scorer = SCPOConfig(theta=THETA), LexicalScorer()
    _, _, credit, adv = run_once(small_batch, config, scorer)
    plan = plan_shaping(
        group_ids=small_batch["group_ids"], traj_ids=small_batch["traj_ids"], steps=small_batch["steps"],
        traj_returns=trajectory_returns(small_batch["rewards"], small_batch["traj_ids"]),
        actions=small_batch["actions"], observations=small_batch["observations"],
        is_action_valid=small_batch["is_action_valid"], noop=small_batch["noop"], lengths=small_batch["lengths"],
        config=config)
    score_of = dict(zip(plan.pairs, scorer.score(plan.pairs).tolist()))
    rows = plain_loop.with_uids(small_batch) if uids else small_batch
    _, their_credit, their_adv = run_plain(baseline, rows, config, score_of)
    np.testing.assert_allclose(their_credit, credit, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(their_adv, adv, rtol=1e-7, atol=1e-9)


def _rollout_batch(rows: dict) -> RolloutBatch:
    n = len(rows["steps"])
    batch = RolloutBatch(
        group_ids=rows["group_ids"], traj_ids=rows["traj_ids"], steps=rows["steps"],
        prompt_ids=[[1] * (length - 1) for length in rows["lengths"]], response_ids=[[2]] * n,
        anchors=rows["anchors"], actions=rows["actions"], observations=rows["observations"],
        responses=rows["actions"], rewards=np.asarray(rows["rewards"]), dones=np.zeros(n, dtype=bool),
        is_action_valid=np.asarray(rows["is_action_valid"]), noop=np.asarray(rows["noop"]), families=["x"] * n)
    batch.step_returns = step_returns(batch.rewards, batch.traj_ids, batch.steps, batch.is_action_valid)
    batch.traj_returns = trajectory_returns(batch.rewards, batch.traj_ids)
    return batch


def test_naive_shaper_requests_every_pair_and_credits_like_the_callback(small_batch):
    from callbacks.scpo import SCPOCallback
    from scpo_lightning.estimators import GiGPO

    callback = SCPOCallback(scorer="lexical", theta=THETA)
    callback.setup(None, SimpleNamespace(estimator=GiGPO()), "fit")  # SCPO on GiGPO: its start-up check passes
    try:
        naive_credit, naive = naive_shape(_rollout_batch(small_batch), callback.config, LexicalScorer())
        credit, ours = ours_shape(callback, _rollout_batch(small_batch))
    finally:
        callback.teardown(None, None, "fit")
    assert np.count_nonzero(credit) > 0
    np.testing.assert_array_equal(naive_credit, credit)
    # The naive loop sends exactly the pairs the paper's shaper requests; ours scores each distinct one once.
    assert naive["pairs_requested"] == ours["pairs_requested"] > ours["pairs_scored"] == ours["pairs_distinct"]


def test_union_seconds_counts_overlapping_intervals_once():
    # A validation run's first collection happens before its hooks and overlaps nothing; the
    # hooks' span contains the second collection.
    assert union_seconds([(0.0, 2.0), (3.0, 10.0), (4.0, 6.0), (9.0, 12.0)]) == pytest.approx(11.0)
    assert union_seconds([]) == 0.0


def test_decade_ratios_pair_learning_rates_ten_apart():
    from benchmarks.numerics import decade_ratios

    # |Δ| 1e-3 → 1e-4 → 1.2e-5: ratios 10 and 8.33 (1e-4 / 1.2e-5); KL 1e-6 → 1e-8 → 0: 100, then no ratio
    entry = {f"zero_advantages_lr_{lr:g}": {"mean_abs_dlogp": d, "k3_kl": k}
             for lr, d, k in [(1e-6, 1e-3, 1e-6), (1e-7, 1e-4, 1e-8), (1e-8, 1.2e-5, 0.0), (0.0, 0.0, 0.0)]}
    got = decade_ratios(entry, "zero", [1e-6, 1e-7, 1e-8, 0.0])
    assert list(got) == ["1e-06/1e-07", "1e-07/1e-08"]
    assert got["1e-06/1e-07"] == pytest.approx({"mean_abs_dlogp": 10.0, "k3_kl": 100.0})
    assert got["1e-07/1e-08"]["mean_abs_dlogp"] == pytest.approx(100 / 12) and got["1e-07/1e-08"]["k3_kl"] is None


def test_replay_tells_a_repeated_batch_from_a_new_one(small_batch):
    # A training run's first batch can repeat a recorded one; only an identical one may be left out.
    changed = dict(small_batch, actions=[*small_batch["actions"][:-1], "go to shelf 99"])
    assert rollouts_key(_rollout_batch(small_batch)) == rollouts_key(_rollout_batch(dict(small_batch)))
    assert rollouts_key(_rollout_batch(small_batch)) != rollouts_key(_rollout_batch(changed))


def test_iteration_speed_reads_a_prompts_admissible_list_and_cuts_rows():
    from benchmarks.iteration_speed import admissible_in, take_rows
    from envs.spec import HOUSEHOLD_PROMPT
    from scpo_lightning.prompts import build_prompt

    text = build_prompt(HOUSEHOLD_PROMPT, "task", "obs", ["go to desk 1", "take mug 1 from desk 1", "help"], [], step=0)
    assert admissible_in(text) == ["go to desk 1", "take mug 1 from desk 1"]  # as listed: help is never shown
    with pytest.raises(ValueError, match="lists no admissible actions"):
        admissible_in("no list here")
    rows = 5
    batch = RolloutBatch(group_ids=[0] * rows, traj_ids=[0, 1, 0, 1, 0], steps=[0, 0, 1, 1, 2],
                         prompt_ids=[[1, 2]] * rows, response_ids=[[3]] * rows, anchors=list("abcde"),
                         actions=list("abcde"), observations=list("abcde"), responses=list("abcde"),
                         rewards=np.arange(rows, dtype=float), dones=np.zeros(rows, bool),
                         is_action_valid=np.ones(rows, bool), noop=np.zeros(rows, bool), families=["f"] * rows,
                         trajectories=[{"won": False}, {"won": True}])
    cut = take_rows(batch, 3)
    assert len(cut) == 3 and cut.anchors == ["a", "b", "c"] and list(cut.rewards) == [0.0, 1.0, 2.0]
    assert cut.trajectories == batch.trajectories and len(batch) == rows  # per-trajectory data kept, original intact
