"""Estimators as components (scpo_lightning/estimators.py): chosen by name or import path, and
SCPO refuses at start-up one that would ignore its credit."""

from __future__ import annotations

import numpy as np
import pytest

from scpo_lightning.estimators import GRPO, Estimator, GiGPO, build_estimator, estimator_class


class EpisodeOnly(Estimator):
    """A toy estimator that reads the episode score alone: SCPO's credit would never reach it."""

    reads_step_credit = False

    def __call__(self, rows, mode, omega):
        return np.asarray(rows.episode_scores, dtype=np.float64)


def test_names_and_import_paths_choose_the_estimator():
    assert estimator_class("grpo") is GRPO
    assert estimator_class("scpo_lightning.estimators.GRPO") is GRPO
    assert estimator_class("tests.test_estimators.EpisodeOnly") is EpisodeOnly
    for bad in ("ppo", "numpy.ndarray", "no.such.module.Class", "tests.test_estimators.Missing"):
        with pytest.raises(ValueError, match=rf"model\.estimator='{bad}' names no estimator; use one of "):
            estimator_class(bad)


class Scaled(GiGPO):
    """GiGPO times a constant: an estimator with a setting of its own (init_args)."""

    def __init__(self, scale: float = 1.0):
        self.scale = scale

    def __call__(self, rows, mode, omega):
        return self.scale * super().__call__(rows, mode, omega)


def test_class_path_and_init_args_build_the_estimator_as_lightningcli_writes_components():
    assert type(build_estimator({"class_path": "scpo_lightning.estimators.GRPO"})) is GRPO
    scaled = build_estimator({"class_path": "tests.test_estimators.Scaled", "init_args": {"scale": 2.0}})
    assert isinstance(scaled, Scaled) and scaled.scale == 2.0
    with pytest.raises(ValueError, match=r"model\.estimator\.init_args: Scaled takes no option\(s\) \['size'\]"):
        build_estimator({"class_path": "tests.test_estimators.Scaled", "init_args": {"size": 2}})
    with pytest.raises(ValueError, match=r"model\.estimator=\{'class': 'GRPO'\}: give a name"):
        build_estimator({"class": "GRPO"})


def test_a_module_with_an_unknown_estimator_fails_naming_the_field(tmp_path):
    from scpo_lightning.module import SCPOModule
    from scpo_lightning.testing import build_tiny_llama

    with pytest.raises(ValueError, match=r"model\.estimator must be one of \('gigpo', 'grpo', 'rloo'\), the import "
                                         r"path of an Estimator subclass or \{class_path: ..., init_args: ...\}; "
                                         r"got 'numpy.ndarray'"):
        SCPOModule(policy=str(build_tiny_llama(tmp_path / "tiny")), estimator="numpy.ndarray")


def test_scpo_refuses_at_start_up_an_estimator_that_ignores_its_credit(tmp_path):
    import lightning as L

    from callbacks.scpo import SCPOCallback
    from scpo_lightning.datamodule import RolloutDataModule
    from scpo_lightning.module import SCPOModule
    from scpo_lightning.testing import build_tiny_llama

    policy = str(build_tiny_llama(tmp_path / "tiny"))
    data = RolloutDataModule(env="corridor", workers=0, val_episodes=0, progress=False)
    trainer = L.Trainer(max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, callbacks=[SCPOCallback(scorer="lexical")])
    module = SCPOModule(policy=policy, estimator="tests.test_estimators.EpisodeOnly")
    with pytest.raises(ValueError, match=r"SCPOCallback needs an estimator that reads its step credit, but "
                                         r"model\.estimator \(EpisodeOnly\) declares reads_step_credit = False"):
        trainer.fit(module, data)
    assert module.policy is None  # refused before the model loaded
    for name in ("gigpo", "grpo", "rloo"):  # each shipped estimator reads the credit
        SCPOCallback(scorer="lexical").check_module(SCPOModule(policy=policy, estimator=name))
