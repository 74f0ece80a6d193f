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
