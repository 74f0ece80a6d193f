"""Dynamic sampling (data.dynamic_sampling): which groups of hand-built batches are dropped, kept
for SCPO or topped up, the counts, and a short training run that logs them."""

from __future__ import annotations

import csv
import math

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from callbacks.logging import RLLogger
from callbacks.scpo import SCPOCallback
from scpo_lightning.datamodule import RolloutDataModule
from scpo_lightning.dynamic_sampling import DynamicSampling, informative_batch, zero_variance_groups
from scpo_lightning.module import SCPOModule
from scpo_lightning.rollout import RolloutConfig
from scpo_lightning.testing import build_tiny_llama
from tests.test_reference_buffer import X0, X1, X2, make_batch

WIN, LOSE = [X0, X1], [X2]


def batch_of(*groups, task="t"):
    """One group per entry: its members' outcomes (True = won), e.g. batch_of([True, False], [False, False])."""
    return make_batch([(g, f"{task}{g}", won, WIN if won else LOSE) for g, outcomes in enumerate(groups)
                       for won in outcomes])


def test_zero_variance_groups_are_those_whose_episode_scores_are_all_equal():
    batch = batch_of([True, False], [False, False], [True, True])
    assert zero_variance_groups(batch) == {1, 2}
    # An invalid step changes that row's episode score (R(τ) - 0.1): its group has an episode signal.
    assert zero_variance_groups(make_batch([(0, "t", False, [X0, (*X1, 0)]), (0, "t", False, [X2])])) == set()


def test_without_top_up_zero_variance_groups_are_dropped_unless_scpo_credits_them():
    # g0 mixed: kept. g1 all failed: dropped. g2 all won: dropped. g3 all failed, but SCPO holds a
    # reference for it (a buffered success of its task): kept.
    batch = batch_of([True, False], [False, False], [True, True], [False, False])
    out, counts = informative_batch(batch, lambda *a: pytest.fail("no top-up"), 4, DynamicSampling(top_up=False),
                                    creditable=lambda b: {0, 3})
    assert [t["task_id"] for t in out.trajectories] == ["t0", "t0", "t3", "t3"]
    assert out.group_ids == [0, 0, 0, 1, 1] and out.traj_ids == [0, 0, 1, 2, 3]  # renumbered as collected
    assert counts | {"trajectories_collected": 0, "successes_collected": 0} == {
        "groups_collected": 4, "groups_zero_variance": 3, "groups_kept_for_scpo": 1, "groups_surplus": 0,
        "groups_dropped": 2, "groups_kept": 2, "groups_short": 2, "retries": 0,
        "trajectories_collected": 0, "successes_collected": 0}
    assert (counts["trajectories_collected"], counts["successes_collected"]) == (8, 3)


def test_top_up_collects_until_the_target_and_keeps_the_first_informative_groups():
    first = batch_of([True, False], [False, False])  # 1 informative of 2
    draws = [batch_of([False, False], [True, True], task="u"),  # none
             batch_of([False, True], [True, False], task="v")]  # 2 informative, 1 needed: v1 is surplus
    asked = []

    def more(retry, needed):
        asked.append((retry, needed))
        return draws[retry - 1]

    out, counts = informative_batch(first, more, 2, DynamicSampling(max_retries=5), creditable=lambda b: set())
    assert asked == [(1, True), (2, True)]
    assert [t["task_id"] for t in out.trajectories] == ["t0", "t0", "v0", "v0"] and sorted(set(out.group_ids)) == [0, 1]
    assert (counts["groups_collected"], counts["groups_kept"], counts["groups_surplus"], counts["retries"]) == (6, 2, 1, 2)
    assert counts["groups_dropped"] == 4 and counts["groups_short"] == 0
    np.testing.assert_array_equal(out.episode_scores, [10.0, 10.0, 0.0, 0.0, 10.0, 10.0])


def test_top_up_stops_after_max_retries_and_trains_what_it_has():
    out, counts = informative_batch(batch_of([False, False]), lambda retry, needed: batch_of([True, True]), 2,
                                    DynamicSampling(max_retries=2), creditable=lambda b: set())
    assert len(out) == 0 and out.trajectories == []  # an iteration without an update
    assert (counts["retries"], counts["groups_collected"], counts["groups_short"]) == (2, 3, 2)


def test_a_rank_with_enough_groups_still_takes_part_in_every_retry():
    # This rank has its 1 group; another rank needs more twice: this one draws but collects nothing.
    wants = iter([True, True, False])
    asked = []
    out, counts = informative_batch(batch_of([True, False]), lambda retry, needed: asked.append(needed), 1,
                                    DynamicSampling(max_retries=5), creditable=lambda b: set(),
                                    any_rank=lambda flag: next(wants))
    assert asked == [False, False] and counts["retries"] == 2 and counts["groups_kept"] == 1


@pytest.mark.parametrize("kw, says", [({"max_retries": 0}, "data.dynamic_sampling.max_retries must be an integer >= 1"),
                                      ({"top_up": "yes"}, "data.dynamic_sampling.top_up must be true or false")])
def test_bad_dynamic_sampling_settings_are_named(kw, says):
    with pytest.raises(ValueError, match=says):
        DynamicSampling(**kw)


def fit(tmp_path, dynamic_sampling: DynamicSampling, scpo: bool = True) -> list[dict[str, str]]:
    """Two iterations of the tiny model on the corridor (with SCPO's buffer); the logged rows."""
    torch.manual_seed(0)
    module = SCPOModule(max_new_tokens=12, policy=str(build_tiny_llama(tmp_path / "tiny")), lr=1e-3, kl_coef=0.0,
                        mini_batch_rows=16, micro_batch_rows=8, generation_batch_size=16)
    data = RolloutDataModule(
        env="corridor", env_options={"rooms": 3, "max_steps": 3}, groups_per_batch=2, group_size=3, workers=0,
        val_episodes=0, progress=False, dynamic_sampling=dynamic_sampling,
        rollout=RolloutConfig(env="alfworld", max_steps=3, action_mode="constrained", max_prompt_tokens=4096))
    callbacks = [SCPOCallback(scorer="lexical", reference_source="both")] if scpo else []
    trainer = L.Trainer(max_epochs=2, num_sanity_val_steps=0, limit_val_batches=0, accelerator="cpu", devices=1,
                        logger=CSVLogger(tmp_path / "logs", name="", version=""), enable_progress_bar=False,
                        enable_checkpointing=False, callbacks=[*callbacks, RLLogger()])
    trainer.fit(module, data)
    return [r for r in csv.DictReader((tmp_path / "logs" / "metrics.csv").open()) if r.get("sampling/groups_collected")]


def test_an_iteration_without_informative_groups_trains_no_step(tmp_path, monkeypatch):
    monkeypatch.setattr("scpo_lightning.dynamic_sampling.zero_variance_groups",
                        lambda batch: {t["group"] for t in batch.trajectories})  # nothing varies
    rows = fit(tmp_path, DynamicSampling(top_up=False), scpo=False)  # SCPO would keep the groups it credits
    assert [(float(r["sampling/groups_kept"]), float(r["sampling/groups_dropped"])) for r in rows] == [(0, 2), (0, 2)]
    assert all(float(r["train/rows"]) == 0 and float(r["train/optimizer_steps"]) == 0 for r in rows)


def test_training_with_dynamic_sampling_and_the_buffer_logs_the_counts(tmp_path):
    rows = fit(tmp_path, DynamicSampling(max_retries=2))
    assert len(rows) == 2
    for r in rows:
        collected, kept, retries = (float(r[f"sampling/{k}"]) for k in ("groups_collected", "groups_kept", "retries"))
        assert collected == 2 * (1 + retries) and 0 <= kept <= 2 and retries <= 2
        assert float(r["sampling/groups_dropped"]) == collected - kept
        assert float(r["train/rows"]) == 0 or math.isfinite(float(r["train/loss"]))
        assert "scpo/groups_with_buffer_reference" in r and "scpo/buffer_size" in r
