"""RolloutBatch.episode_metrics on graded (WebShop) episodes."""

from __future__ import annotations

import numpy as np

from scpo_lightning.batch import RolloutBatch


def test_score_counts_an_episode_that_bought_nothing_as_zero():
    trajs = [{"won": False, "length": 15, "family": "webshop"},  # ran out of steps: no score
             {"won": True, "length": 4, "family": "webshop", "score": 1.0},
             {"won": False, "length": 6, "family": "webshop", "score": 0.5}]
    empty = np.zeros(0)
    batch = RolloutBatch([], [], [], [], [], [], [], [], [], empty, empty.astype(bool), empty.astype(bool),
                         empty.astype(bool), [], trajectories=trajs)
    metrics = batch.episode_metrics()
    # (0 + 1.0 + 0.5) / 3 episodes, in percent.
    assert np.isclose(metrics["score"], 50.0) and np.isclose(metrics["success"], 1 / 3)


def _two_groups() -> RolloutBatch:
    from tests.test_reference_buffer import X0, X1, X2, make_batch

    batch = make_batch([(0, "a", True, [X0, X1]), (0, "a", False, [X2]), (1, "b", False, [X1]), (1, "b", True, [X2])])
    batch.rollout_logprobs = [[-0.5 * i] for i in range(len(batch))]
    batch.timings, batch.env_failures = {"rollout_s": 1.0}, {"step_timeout": 1.0}
    return batch


def test_select_groups_keeps_their_rows_and_renumbers_them_as_collected():
    batch = _two_groups()
    picked = batch.select_groups([1])
    assert picked.group_ids == [0, 0] and picked.traj_ids == [0, 1] and picked.actions == batch.actions[3:]
    assert [t["task_id"] for t in picked.trajectories] == ["b", "b"] and [t["group"] for t in picked.trajectories] == [0, 0]
    np.testing.assert_array_equal(picked.episode_scores, batch.episode_scores[3:])
    assert picked.rollout_logprobs == batch.rollout_logprobs[3:] and picked.timings == batch.timings
    assert len(batch.select_groups([])) == 0


def test_concat_numbers_each_part_after_the_previous_and_adds_counts():
    a, b = _two_groups(), _two_groups().select_groups([1])
    joined = RolloutBatch.concat([a, b])
    assert joined.group_ids == a.group_ids + [2, 2] and joined.traj_ids == a.traj_ids + [4, 5]
    assert [t["group"] for t in joined.trajectories] == [0, 0, 1, 1, 2, 2]
    np.testing.assert_array_equal(joined.step_returns, np.concatenate([a.step_returns, b.step_returns]))
    assert joined.timings == {"rollout_s": 2.0} and joined.env_failures == {"step_timeout": 2.0}
    b.rollout_logprobs = None  # an engine without log-probs: none for the whole batch
    assert RolloutBatch.concat([a, b]).rollout_logprobs is None
