"""Real-data mode: the downloaded layout (shared fixture) plays and wins; a split holds exactly the games
alfworld's AlfredTWEnv collects, in its order; bad folders fail clearly."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from envs.alfworld import AlfworldConfig, AlfworldEnv, make_source
from envs.alfworld.errors import AlfworldDataError, AlfworldNotInstalled, import_alfworld
from envs.alfworld.real_data import RealGames
from tests.conftest import require

TASK_DIR = "pick_heat_then_place_in_recep-Potato-None-SinkBasin-14"


@pytest.fixture(autouse=True)
def _alfworld():
    require("alfworld", extra="alfworld")


@pytest.fixture
def data_dir(shared_fixtures) -> Path:
    path = shared_fixtures / "alfworld"
    if not (path / "json_2.1.1").is_dir():
        pytest.skip(f"no ALFWorld fixture under {path}")
    return path


def _trial(data_dir: Path) -> Path:
    return next((data_dir / "json_2.1.1" / "train" / TASK_DIR).iterdir())


def test_real_game_plays_and_its_walkthrough_wins(data_dir):
    env = AlfworldEnv(AlfworldConfig(source="real", data_path=str(data_dir)))
    first = env.reset("train", 0)
    assert first.family == "pick_heat_then_place_in_recep"  # from the game path
    assert first.task == "heat some potato and put it in sinkbasin."
    assert first.observation.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert first.task_id.startswith(f"json_2.1.1/train/{TASK_DIR}/trial_")
    assert first.info["source"] == "real"
    for action in first.info["walkthrough"]:
        last = env.step(action)
    assert last.won and last.reward == 10.0 and last.done


def test_alfworld_data_env_var_selects_real_games(data_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("ALFWORLD_DATA", str(data_dir))
    assert make_source(AlfworldConfig()).kind == "real"
    assert make_source(AlfworldConfig(source="generated", cache_dir=str(tmp_path))).kind == "generated"


def test_game_without_task_in_grammar_is_assembled_like_alfworld(data_dir, tmp_path):
    trial = tmp_path / "json_2.1.1" / "valid_seen" / TASK_DIR / "trial_x"
    trial.mkdir(parents=True)
    game = json.loads((_trial(data_dir) / "game.tw-pddl").read_text())
    game["grammar"] = game["grammar"].replace("heat some potato and put it in sinkbasin", "UNKNOWN GOAL")
    (trial / "game.tw-pddl").write_text(json.dumps(game))
    shutil.copy(_trial(data_dir) / "traj_data.json", trial)
    first = AlfworldEnv(AlfworldConfig(source="real", data_path=str(tmp_path))).reset("valid_seen", 0)
    assert first.task in ("put a hot potato in sinkbasin.", "heat some potato and put it in sinkbasin.")


def _edge_case_split(fixture_trial: Path, split_dir: Path) -> dict[str, Path]:
    """A split with one trial of every kind alfworld's collect_game_files tells apart."""
    traj = json.loads((fixture_trial / "traj_data.json").read_text())
    game = json.loads((fixture_trial / "game.tw-pddl").read_text())
    unsolvable, keyless = {**game, "solvable": False}, {k: v for k, v in game.items() if k != "solvable"}
    trials = {  # name -> (task folder/trial, traj_data.json or None, game.tw-pddl or None)
        "good_b": (f"{TASK_DIR}/trial_b", traj, game),
        "good_a": (f"{TASK_DIR}/trial_a", traj, game),
        "good_longer_name": (f"{TASK_DIR}0/trial_a", traj, game),
        # "-14-b/" sorts before "-14/" as a path string, after it folder by folder (as walks go).
        "good_dash_suffix": (f"{TASK_DIR}-b/trial_a", traj, game),
        "nested_parent": (f"{TASK_DIR}/trial_c", traj, game),
        "nested_child": (f"{TASK_DIR}/trial_c/retry", traj, game),
        "no_game_file": (f"{TASK_DIR}/trial_d", traj, None),  # initial_state.pddl + traj_data.json only
        "no_solvable_key": (f"{TASK_DIR}/trial_e", traj, keyless),
        "unsolvable": (f"{TASK_DIR}/trial_f", traj, unsolvable),
        "no_traj_data": (f"{TASK_DIR}/trial_g", None, game),
        "unknown_task_type": ("pick_and_eat-Potato-None-SinkBasin-14/trial_a", {**traj, "task_type": "pick_and_eat"},
                              game),
        "movable": ("pick_and_place_with_movable_recep-Potato-Pan-SinkBasin-14/trial_a", traj, game),
        "sliced": ("pick_heat_then_place_in_recep-PotatoSliced-None-SinkBasin-14/trial_a", traj, game),
    }
    paths = {}
    for name, (where, traj_data, game_data) in trials.items():
        folder = split_dir / where
        folder.mkdir(parents=True)
        shutil.copy(fixture_trial / "initial_state.pddl", folder)
        if traj_data is not None:
            (folder / "traj_data.json").write_text(json.dumps(traj_data))
        if game_data is not None:
            (folder / "game.tw-pddl").write_text(json.dumps(game_data))
        paths[name] = folder
    return paths


class _SortedScandir:
    """``os.scandir`` listing names in sorted order: alfworld's os.walk then visits folders in the
    order ours does on every file system."""

    def __init__(self, scandir, path):
        self._entries = iter(sorted(scandir(path), key=lambda e: e.name))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._entries)


def test_assembly_keeps_alfworlds_games_in_alfworlds_order(data_dir, tmp_path, monkeypatch):
    from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

    paths = _edge_case_split(_trial(data_dir), tmp_path / "json_2.1.1" / "train")
    games = RealGames(tmp_path)
    kept = [Path(games.game("train", i).path).parent for i in range(games.num_games("train"))]
    assert kept == [paths[n] for n in ("good_a", "good_b", "nested_child", "nested_parent", "good_dash_suffix",
                                        "good_longer_name")]
    assert games.skipped["train"] == {"movable_or_sliced": 2, "task_type": 1, "no_game_file": 1,
                                      "no_solvable_key": 1, "unsolvable": 1}
    assert games.families("train") == ["pick_heat_then_place_in_recep"] * 6  # from traj_data.json, as alfworld

    scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": _SortedScandir(scandir, path))
    config = {"env": {"goal_desc_human_anns_prob": 0, "task_types": [1, 2, 3, 4, 5, 6]},
              "dataset": {"data_path": str(tmp_path / "json_2.1.1" / "train"), "num_train_games": -1}}
    theirs = AlfredTWEnv(config, train_eval="train").game_files
    assert theirs == [str(path / "game.tw-pddl") for path in kept]


def test_a_split_of_skipped_trials_names_the_reasons(data_dir, tmp_path):
    split_dir = tmp_path / "json_2.1.1" / "valid_seen"
    for name, path in _edge_case_split(_trial(data_dir), split_dir).items():
        if name.startswith(("good", "nested")) and path.exists():  # a nested child goes with its parent
            shutil.rmtree(path)
    with pytest.raises(AlfworldDataError, match=r"no playable games under .*valid_seen \(\{'movable_or_sliced': 2, "
                                                 r"'no_game_file': 1, 'no_solvable_key': 1, 'task_type': 1, "
                                                 r"'unsolvable': 1\}\)"):
        RealGames(tmp_path).num_games("valid_seen")


def test_bad_data_folders_say_what_was_expected(tmp_path):
    with pytest.raises(AlfworldDataError, match="has no json_2.1.1/.*alfworld-download"):
        RealGames(tmp_path)
    (tmp_path / "json_2.1.1" / "train").mkdir(parents=True)
    with pytest.raises(AlfworldDataError, match="no playable games under .*train.*game.tw-pddl"):
        RealGames(tmp_path).num_games("train")
    with pytest.raises(AlfworldDataError, match="no split 'valid_seen'.*have \\['train'\\]"):
        RealGames(tmp_path).num_games("valid_seen")


def test_real_mode_without_a_dataset_says_how_to_point_at_one(monkeypatch, tmp_path):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.cache/alfworld dataset either
    with pytest.raises(ValueError, match="needs data_path or \\$ALFWORLD_DATA"):
        make_source(AlfworldConfig(source="real"))
    assert make_source(AlfworldConfig(cache_dir=str(tmp_path))).kind == "generated"


def test_unreadable_trial_files_are_named(data_dir, tmp_path):
    trial = tmp_path / "json_2.1.1" / "train" / TASK_DIR / "trial_z"
    trial.mkdir(parents=True)
    shutil.copy(_trial(data_dir) / "game.tw-pddl", trial)
    (trial / "traj_data.json").write_text("{not json")
    with pytest.raises(AlfworldDataError, match=r"cannot read .*trial_z/traj_data.json as JSON"):
        RealGames(tmp_path).num_games("train")
    (trial / "traj_data.json").write_text("{}")
    with pytest.raises(AlfworldDataError, match=r"traj_data.json has no 'task_type'"):
        RealGames(tmp_path).num_games("train")


def test_missing_engine_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "fast_downward", None)  # makes `import fast_downward` fail
    with pytest.raises(AlfworldNotInstalled, match=r"pip install -e '\.\[alfworld\]'"):
        import_alfworld()
