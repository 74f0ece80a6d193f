"""Environments describe themselves (envs/spec.py): a new one is one module plus one registry line."""

from __future__ import annotations

import csv

import lightning as L
import pytest
from lightning.pytorch.loggers import CSVLogger

from callbacks.logging import RLLogger
from envs import registry
from tests import beacon_env


@pytest.fixture
def beacon(monkeypatch):
    monkeypatch.setitem(registry.SPECS, beacon_env.SPEC.name, beacon_env.SPEC)  # the one registry line


def test_an_unknown_env_is_an_error_never_another_envs_settings():
    for call in (lambda: registry.check_options("minecraft", {"rooms": 3}), lambda: registry.env_spec("minecraft"),
                 lambda: registry.split_size("minecraft", "train")):
        with pytest.raises(ValueError, match=r"data\.env: unknown environment 'minecraft'; expected one of"):
            call()


def test_a_new_env_is_unknown_everywhere_until_registered():
    from scpo_lightning.prompts import prompt_style
    from scpo_lightning.rollout import RolloutConfig

    with pytest.raises(ValueError, match="unknown env 'beacon'"):
        prompt_style("beacon", "prompts")
    with pytest.raises(ValueError, match=r"data\.rollout\.env must be null or one of \(.alfworld., .webshop.\); got .beacon."):
        RolloutConfig(env="beacon")


def test_a_registered_env_trains_and_validates_end_to_end(beacon, tmp_path):
    from scpo_lightning.datamodule import RolloutDataModule
    from scpo_lightning.module import SCPOModule
    from scpo_lightning.prompts import build_prompt, project_action, prompt_style
    from scpo_lightning.rollout import RolloutConfig
    from scpo_lightning.scorers.minilm import calibrations
    from scpo_lightning.testing import build_tiny_llama

    style = prompt_style("beacon", "prompts")
    assert build_prompt(style, "t", "obs", ["wait"], [], 0).startswith("You are a lamplighter.")
    assert project_action("no tags at all", style).action == " at all"  # its own fallback_chars
    assert calibrations()["beacon"].zero == 0.5
    with pytest.raises(ValueError, match=r"data\.val_split='test': the beacon room has no split 'test'"):
        RolloutDataModule(env="beacon", val_split="test", workers=0, rollout=RolloutConfig(env="beacon"))
    with pytest.raises(ValueError, match=r"data\.val_split='valid' holds 6 tasks"):
        RolloutDataModule(env="beacon", val_split="valid", val_episodes=7, workers=0,
                          rollout=RolloutConfig(env="beacon"))

    module = SCPOModule(policy=str(build_tiny_llama(tmp_path / "tiny")), kl_coef=0.0, mini_batch_rows=8,
                        micro_batch_rows=8, generation_batch_size=16, max_new_tokens=48)
    data = RolloutDataModule(env="beacon", val_split="valid", groups_per_batch=2, group_size=2, workers=0,
                             val_episodes=4, val_batch_episodes=4, progress=False,
                             rollout=RolloutConfig(env="beacon", max_steps=2, action_mode="constrained",
                                                   max_prompt_tokens=4096))
    assert data.env.factory()().max_steps == 2  # the horizon reaches the env from data.rollout.max_steps
    batches = []
    trainer = L.Trainer(max_epochs=1, num_sanity_val_steps=0, accelerator="cpu", devices=1,
                        logger=CSVLogger(tmp_path / "logs", name="", version=""), enable_progress_bar=False,
                        enable_checkpointing=False, callbacks=[_Keep(batches), RLLogger()])
    trainer.fit(module, data)
    # Constrained decoding offered the placeholder as the task sentence, so every episode searched it.
    assert batches and all(a.startswith(("search[light the", "wait")) for a in batches[0].actions)
    logged = set().union(*csv.DictReader((tmp_path / "logs" / "metrics.csv").open()))
    assert {"val/success", "val/score"} <= logged and logged & {"val/success/beacon_even", "val/success/beacon_odd"}


class _Keep(L.Callback):
    def __init__(self, batches):
        self.batches = batches

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.batches.append(batch)
