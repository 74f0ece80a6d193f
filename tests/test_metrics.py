"""scpo_lightning/metrics.py: one definition of an episode's metrics, declared SCPO statistics."""

from __future__ import annotations

import pytest

from scpo_lightning.metrics import SCPO_STATS, episode_metrics, episode_values, reduce_rule, scpo_metrics

TRAJS = [{"won": True, "length": 3, "family": "a"}, {"won": False, "length": 5, "family": "a"},
         {"won": False, "length": 8, "family": "b"}]


def test_episode_metrics_by_hand():
    # success (1 + 0 + 0) / 3; length (3 + 5 + 8) / 3 = 16/3; family a: 1/2, b: 0/1; rows: 3 of 4 valid.
    got = episode_metrics(TRAJS, [True, True, False, True])
    assert got == pytest.approx({"success": 1 / 3, "episode_length": 16 / 3, "success/a": 0.5, "success/b": 0.0,
                                 "valid_action_ratio": 0.75})


def test_a_graded_episode_without_a_purchase_scores_zero():
    assert episode_values({"won": False, "length": 15, "family": "webshop"}, scored=True)["score"] == 0.0
    assert "score" not in episode_values(TRAJS[0], scored=False)


def test_every_scpo_statistic_has_a_reduction_and_an_unknown_one_is_refused():
    assert {reduce_rule(f"scpo/{k}") for k in SCPO_STATS} <= {"sum", "max", "mean"}
    assert reduce_rule("time/rollout_s") == "max" and reduce_rule("env_failures/step_timeout") == "sum"
    assert scpo_metrics({"groups": 2.0}) == {"scpo/groups": 2.0}
    with pytest.raises(KeyError, match="SCPO_STATS"):
        scpo_metrics({"groups": 2.0, "my_new_stat": 1.0})
