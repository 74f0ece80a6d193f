"""``train.py validate``: the validation episodes once, on a checkpoint's policy; ``test`` and
``predict`` are not offered (the app has no data for them)."""

from __future__ import annotations

import re
import sys

import pytest
import torch

import train
from tests.test_security import _corridor_config


@pytest.fixture(autouse=True)
def _no_pytest_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py"])


@pytest.mark.slow
def test_validate_plays_the_validation_episodes_on_the_checkpoints_policy(tmp_path, capsys, monkeypatch):
    config = _corridor_config(tmp_path)  # tiny Llama, corridor world, one iteration, a checkpoint
    train.main(["fit", "--config", str(config)])
    checkpoint = tmp_path / "ckpt" / "last.ckpt"
    trained = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    capsys.readouterr()

    import scpo_lightning.module

    seen = {}
    real = scpo_lightning.module.SCPOModule.on_validation_epoch_start
    monkeypatch.setattr(scpo_lightning.module.SCPOModule, "on_validation_epoch_start",
                        lambda self: seen.update(self.state_dict()) or real(self), raising=False)
    train.main(["validate", "--config", str(config), "--ckpt_path", str(checkpoint)])
    out = capsys.readouterr().out
    # The iteration counter and the weights come from the checkpoint (a fresh policy validates "it 0").
    assert re.search(r"\[val @ it 1\] .*success \d", out), out[-2000:]
    assert seen.keys() == trained.keys() and all(torch.equal(seen[k], trained[k]) for k in trained)
    assert list((tmp_path / "ckpt").iterdir()) == [checkpoint]  # validation writes no checkpoint


@pytest.mark.parametrize("subcommand", ["test", "predict"])
def test_test_and_predict_are_not_subcommands(subcommand, capsys):
    with pytest.raises(SystemExit) as exit_:
        train.main([subcommand, "--help"])
    assert exit_.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
