"""Start-up validation of the games a run plays: every split it needs exists, and which source
(an installed ALFWorld dataset or generated rooms) it plays is said, never guessed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from envs.alfworld.errors import AlfworldDataError
from scpo_lightning.datamodule import RolloutDataModule


# ------------------------------------------------------------- the splits a run plays, and which games
def _dataset(tmp: Path, *splits: str) -> str:
    """An ALFWorld data folder whose json_2.1.1/ holds (empty) folders of ``splits``."""
    for split in splits:
        (tmp / "alf" / "json_2.1.1" / split).mkdir(parents=True, exist_ok=True)
    return str(tmp / "alf")


SPLITS = [  # (case, data settings given tmp_path, what the message must say)
    ("generated: no such validation split", lambda tmp: {"val_split": "valid_unseen2"},
     ["data.val_split='valid_unseen2'", "unknown ALFWorld split"]),
    ("generated: validation runs past the split", lambda tmp: {"val_start_index": 100, "val_episodes": 128},
     ["data.val_split='valid_seen' holds 140 tasks", "data.val_start_index + data.val_episodes = 228"]),
    ("real: no train folder", lambda tmp: {"env_options": {"data_path": _dataset(tmp, "valid_seen")}, "val_episodes": 0},
     ["data.train_split='train'", "no split 'train' under", "alf/json_2.1.1", "have ['valid_seen']"]),
    ("real: no validation folder", lambda tmp: {"env_options": {"data_path": _dataset(tmp, "train")}},
     ["data.val_split='valid_seen'", "no split 'valid_seen' under", "alf/json_2.1.1", "have ['train']"]),
    ("webshop: ALFWorld's split name", lambda tmp: {"env": "webshop", "env_options": {}},
     ["data.val_split='valid_seen'", "WebShop has no split 'valid_seen'"]),
]


@pytest.mark.parametrize("data, says", [c[1:] for c in SPLITS], ids=[c[0] for c in SPLITS])
def test_every_split_the_run_plays_is_checked_at_start_up(data, says, tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = {"env": "alfworld", "env_options": {"cache_dir": str(tmp_path / "games")}, "workers": 0, **data(tmp_path)}
    with pytest.raises(ValueError) as info:
        RolloutDataModule(**settings)
    for part in says:
        assert part in str(info.value), f"{part!r} missing from: {info.value}"


def test_splits_that_the_run_plays_are_all_it_needs(tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    RolloutDataModule(env="alfworld", env_options={"data_path": _dataset(tmp_path, "train")}, val_episodes=0)
    RolloutDataModule(env="alfworld", env_options={"source": "generated"}, val_start_index=12, val_episodes=128)


def test_quickstart_plays_generated_rooms_even_where_the_dataset_is_installed():
    config = yaml.safe_load((Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml").read_text())
    assert config["data"]["env_options"]["source"] == "generated"


@pytest.mark.parametrize("where, says", [
    (None, "ALFWorld plays generated 'alfred' rooms (source: auto and no dataset here (no data_path, no $ALFWORLD_DATA"),
    ("data_path", "ALFWorld plays the real games in {data} (data_path)"),
    ("$ALFWORLD_DATA", "ALFWorld plays the real games in {data} ($ALFWORLD_DATA)"),
])
def test_source_auto_says_which_games_it_plays_and_why(where, says, tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    data = _dataset(tmp_path, "train")
    options = {"data_path": data} if where == "data_path" else {"cache_dir": str(tmp_path / "games")}
    if where == "$ALFWORLD_DATA":
        monkeypatch.setenv("ALFWORLD_DATA", data)
    with caplog.at_level("INFO", logger="envs"):
        RolloutDataModule(env="alfworld", env_options=options, val_episodes=0)
    assert says.format(data=data) in caplog.text


def test_a_wrong_alfworld_data_variable_is_an_error_not_a_fallback(tmp_path, monkeypatch):
    # A folder the user named that is not here is a wrong value (not the FileNotFoundError a dry run lists).
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "no-such-data"))
    with pytest.raises(AlfworldDataError, match=r"\$ALFWORLD_DATA='.*no-such-data' does not exist.*unset it"):
        RolloutDataModule(env="alfworld")
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))  # a folder, but not the dataset
    with pytest.raises(ValueError, match=r"\$ALFWORLD_DATA='.*' has no json_2.1.1/"):
        RolloutDataModule(env="alfworld")
    RolloutDataModule(env="alfworld", env_options={"source": "generated"})  # never looks at it
    # `import alfworld` sets $ALFWORLD_DATA to its own default folder: that names no dataset.
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / ".cache" / "alfworld"))
    RolloutDataModule(env="alfworld")
