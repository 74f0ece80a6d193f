"""A scorer that raises, hangs or returns NaN costs one batch its SCPO shaping, not the run.

The batch then trains as plain GiGPO (``shaped_returns`` None), with a logged warning and the
``scpo/scorer_failures`` counters; ``on_scorer_error: fail`` stops the run instead.
"""

from __future__ import annotations

import csv
import logging
import math
import subprocess
import sys
import threading
import time

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from callbacks.logging import RLLogger
from callbacks.scpo import SCPOCallback
from scpo_lightning.batch import RolloutBatch
from scpo_lightning.datamodule import RolloutDataModule
from scpo_lightning.module import SCPOModule
from scpo_lightning.returns import episode_scores, step_returns, trajectory_returns
from scpo_lightning.rollout import RolloutConfig
from scpo_lightning.scorers import CachedScorer
from scpo_lightning.scorers.lexical import LexicalScorer
from scpo_lightning.testing import build_tiny_llama


def two_sibling_batch() -> RolloutBatch:
    """One group: trajectory 0 wins in two steps; trajectory 1 repeats its first step, then fails.
    The failed sibling's first step equals a reference step, so a working scorer credits it."""
    traj_ids, steps = [0, 0, 1, 1], [0, 1, 0, 1]
    rewards = np.array([0.0, 10.0, 0.0, 0.0])
    valid = np.ones(4, dtype=bool)
    actions = ["go east", "go east", "go east", "look"]
    batch = RolloutBatch(
        group_ids=[0] * 4, traj_ids=traj_ids, steps=steps, prompt_ids=[[1, 2]] * 4, response_ids=[[3]] * 4,
        anchors=["room 0", "room 1", "room 0", "room 1"], actions=actions,
        observations=["room 1", "room 2", "room 1", "room 1"], responses=actions, rewards=rewards,
        dones=np.array([False, True, False, True]), is_action_valid=valid, noop=np.zeros(4, dtype=bool),
        families=["corridor"] * 4,
        trajectories=[{"won": True, "length": 2, "family": "corridor"}, {"won": False, "length": 2, "family": "corridor"}],
    )
    batch.step_returns = step_returns(rewards, traj_ids, steps, valid)
    batch.episode_scores = episode_scores(rewards, traj_ids, valid)
    batch.traj_returns = trajectory_returns(rewards, traj_ids)
    return batch


class Scripted(LexicalScorer):
    """Lexical scores, except the calls listed in ``faults`` (0-based): raise, hang or return NaN."""

    def __init__(self, **faults: str):
        super().__init__()
        self.faults, self.calls, self.release = faults, 0, threading.Event()

    def score(self, pairs):
        call, self.calls = self.calls, self.calls + 1
        fault = self.faults.get(f"call{call}")
        if fault == "raise":
            raise RuntimeError("CUDA error: device-side assert triggered")
        if fault == "hang":
            assert self.release.wait(timeout=60), "test deadlock"
        if fault == "nan":
            return np.full(len(pairs), np.nan)
        return super().score(pairs)


def shape(callback: SCPOCallback, batch: RolloutBatch) -> float:
    """What the module does around its update: start shaping, later wait for it. Returns the wait."""
    callback.on_train_batch_start(None, None, batch, 0)
    began = time.monotonic()
    batch.shaping = callback.result(batch)
    return time.monotonic() - began


def callback_with(inner, **kwargs) -> SCPOCallback:
    callback = SCPOCallback(scorer="lexical", order="chronological", **kwargs)
    callback.scorer = CachedScorer(inner, cache_entries=0)
    return callback


@pytest.mark.parametrize("fault, reason", [("raise", "device-side assert"), ("nan", "non-finite scores")])
def test_failed_scoring_skips_that_batch_only_with_a_warning_and_counters(caplog, fault, reason):
    callback = callback_with(Scripted(call0=fault))
    bad, good = two_sibling_batch(), two_sibling_batch()
    with caplog.at_level(logging.WARNING, logger="callbacks.scpo"):
        shape(callback, bad)
    assert bad.shaped_returns is None  # the module falls back to G_t: plain GiGPO for this batch
    assert bad.scpo_stats == {"shaped": 0.0, "scorer_failures": 1.0, "scorer_failures_total": 1.0}
    assert len(caplog.records) == 1 and reason in caplog.text and "plain GiGPO" in caplog.text
    assert bad.shaping.credit is None and bad.shaping.paths == ()  # nothing to draw a heatmap from

    shape(callback, good)  # the next batch is shaped again; the total keeps the earlier failure
    assert good.shaped_returns is not None and good.scpo_credit[2] > 0
    assert good.scpo_stats["shaped"] == 1.0 and good.scpo_stats["scorer_failures"] == 0.0
    assert good.scpo_stats["scorer_failures_total"] == 1.0
    assert callback.state_dict()["scorer_failures"] == 1  # survives a resume
    callback.scorer.close()


def test_on_scorer_error_fail_stops_the_run_naming_the_setting():
    callback = callback_with(Scripted(call0="raise"), on_scorer_error="fail")
    with pytest.raises(RuntimeError, match="on_scorer_error") as err:
        shape(callback, two_sibling_batch())
    assert "device-side assert" in str(err.value)
    callback.scorer.close()


def test_hung_scorer_times_out_per_batch_and_recovers_when_it_returns(caplog):
    inner = Scripted(call0="hang")
    callback = callback_with(inner, scorer_timeout_s=0.5)
    first, second, third = two_sibling_batch(), two_sibling_batch(), two_sibling_batch()
    with caplog.at_level(logging.WARNING, logger="callbacks.scpo"):
        assert shape(callback, first) < 5  # waits for the timeout, not for the hung call
        assert shape(callback, second) < 5  # queued behind the hung call: times out too, is cancelled
    assert first.shaped_returns is None and second.shaped_returns is None
    assert second.scpo_stats["scorer_failures_total"] == 2.0
    assert caplog.text.count("scorer_timeout_s=0.5") == 2
    inner.release.set()  # the hung call returns (its result is no longer wanted)
    shape(callback, third)
    assert third.shaped_returns is not None and third.scpo_stats["scorer_failures_total"] == 2.0
    assert inner.calls == 2  # the cancelled second batch never reached the model


def test_a_hung_scorer_does_not_block_the_end_of_the_run():
    inner = Scripted(call0="hang")
    callback = callback_with(inner, scorer_timeout_s=0.2)
    shape(callback, two_sibling_batch())
    began = time.monotonic()
    callback.teardown(None, None, "fit")
    assert time.monotonic() - began < 2
    inner.release.set()


def test_a_process_whose_scorer_hangs_forever_still_exits():
    script = (
        "import threading\n"
        "from scpo_lightning.scorers.cached import CachedScorer\n"
        "class Hang:\n"
        "    def score(self, pairs):\n"
        "        threading.Event().wait()\n"
        "scorer = CachedScorer(Hang())\n"
        "scorer.submit([('a', 'b')])\n"
        "scorer.close(timeout=0.2)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("kwargs, field", [({"on_scorer_error": "ignore"}, "SCPOCallback.on_scorer_error"),
                                           ({"scorer_timeout_s": 0}, "SCPOCallback.scorer_timeout_s")])
def test_bad_scorer_fault_settings_are_named(kwargs, field):
    with pytest.raises(ValueError, match=field):
        SCPOCallback(scorer="lexical", **kwargs)


class FailFirstBatch(CachedScorer):
    """The first batch's scoring raises, whether or not it has pairs for the model."""

    def score_batch(self, pairs):
        self.batches = getattr(self, "batches", 0) + 1
        if self.batches == 1:
            raise RuntimeError("scorer out of memory")
        return super().score_batch(pairs)


def test_training_continues_as_gigpo_and_the_failure_is_logged(tmp_path):
    torch.manual_seed(0)
    callback = SCPOCallback(scorer="lexical")
    callback.scorer = FailFirstBatch(LexicalScorer())
    module = SCPOModule(max_new_tokens=12, policy=str(build_tiny_llama(tmp_path / "tiny")), lr=1e-3, kl_coef=0.0,
                        mini_batch_rows=16, micro_batch_rows=8, generation_batch_size=16)
    data = RolloutDataModule(
        env="corridor", env_options={"rooms": 3, "max_steps": 3}, groups_per_batch=3, group_size=4, workers=0,
        val_episodes=0, progress=False,
        rollout=RolloutConfig(env="alfworld", max_steps=3, action_mode="constrained", max_prompt_tokens=4096))
    trainer = L.Trainer(max_epochs=2, num_sanity_val_steps=0, limit_val_batches=0, accelerator="cpu", devices=1,
                        logger=CSVLogger(tmp_path / "logs", name="", version=""), enable_progress_bar=False,
                        enable_checkpointing=False, callbacks=[callback, RLLogger()])
    trainer.fit(module, data)
    rows = [r for r in csv.DictReader((tmp_path / "logs" / "metrics.csv").open()) if r.get("train/loss")]
    assert [float(r["scpo/scorer_failures"]) for r in rows] == [1.0, 0.0]
    assert [float(r["scpo/scorer_failures_total"]) for r in rows] == [1.0, 1.0]
    assert [float(r["scpo/shaped"]) for r in rows] == [0.0, 1.0]
    for r in rows:  # the unshaped iteration trained like any other
        assert math.isfinite(float(r["train/loss"])) and float(r["train/optimizer_steps"]) >= 1
