"""Generated ALFWorld games: byte-identical by address, balanced families, real room sizes, cache +
manifest, errors."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter
from importlib import resources
from pathlib import Path

import pytest

from tests.conftest import require

from envs.alfworld import FAMILIES, SPLIT_SIZES
from envs.alfworld import vocab
from envs.alfworld.alfred_rooms import RECEPTACLE_COUNTS
from envs.alfworld.errors import AlfworldDataError, check_family
from envs.alfworld.games import MANIFEST, GeneratedGames
from envs.alfworld.generator import family_of, room_size, sample_layout


@pytest.fixture(autouse=True)
def _alfworld():
    require("alfworld", extra="alfworld")

ROOT = Path(__file__).resolve().parents[1]

#: sha256 of the canonical game bytes, computed once; any machine must reproduce them exactly.
PINNED = {
    ("small", "train", 0): "b91d6dede0c0266f3e32d100463e742ea0eaa9c4fd971ce871b23d13f2ca81b9",
    ("alfred", "valid_unseen", 5): "42fe0e83c7fb810e920c4f808326a460296f52d2cc3d1a26d3f9c3492d0bdb1d",
    ("medium", "valid_seen", 11): "a5092a6735878b3c4589c228c2696d925c6d16d334075b52f6a086adbc6e2179",
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("size,split,index", sorted(PINNED))
def test_same_address_gives_pinned_bytes(tmp_path, size, split, index):
    assert _sha(GeneratedGames(tmp_path, size).build(split, index)) == PINNED[(size, split, index)]


def test_bytes_do_not_depend_on_the_process_hash_seed():
    code = ("from envs.alfworld.games import GeneratedGames; import hashlib; "
            "print(hashlib.sha256(GeneratedGames('unused', 'small').build('train', 0)).hexdigest())")
    for seed in ("1", "12345"):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert out.stdout.strip() == PINNED[("small", "train", 0)]


def test_splits_and_families():
    assert SPLIT_SIZES["train"] >= 2000 and SPLIT_SIZES["valid_seen"] == 140 and SPLIT_SIZES["valid_unseen"] == 134
    assert [family_of(i) for i in range(6)] == list(FAMILIES)
    assert len(FAMILIES) == 6


def test_game_content_matches_its_metadata(tmp_path):
    games = GeneratedGames(tmp_path, "medium")
    for index in range(6):
        game = json.loads(games.build("valid_seen", index))
        meta = game["metadata"]
        assert meta["family"] == FAMILIES[index]
        assert f"Your task is to: {meta['task']}." in game["grammar"]
        assert "UNKNOWN GOAL" not in game["grammar"]
        assert game["solvable"] is True and game["walkthrough"]
        assert "(:goal" in game["pddl_problem"] and "agent1 - agent" in game["pddl_problem"]
        assert "(openable " in game["pddl_problem"] or index  # medium rooms carry closed receptacles


def test_sizes_scale_the_room(tmp_path):
    def receptacles(size: str) -> int:
        problem = json.loads(GeneratedGames(tmp_path, size).build("train", 6))["pddl_problem"]
        return len(re.findall(r"^\s+\S+ - receptacle$", problem, flags=re.M))

    def distractors(size: str) -> int:
        game = json.loads(GeneratedGames(tmp_path, size).build("train", 6))
        return len(re.findall(r"^\s+\S+ - object$", game["pddl_problem"], flags=re.M))

    assert distractors("tiny") < distractors("small")
    assert receptacles("tiny") <= receptacles("small") <= 3 < receptacles("medium") <= 10 < receptacles("alfred")


def test_cache_writes_once_with_manifest(tmp_path):
    games = GeneratedGames(tmp_path, "small")
    ref = games.game("train", 7)
    path = Path(ref.path)
    assert path.read_bytes() == games.build("train", 7)
    assert ref.game_id == "gen-v2/small/train/00007" and ref.family == FAMILIES[7 % 6]
    manifest = json.loads((path.parent / MANIFEST).read_text())
    assert manifest["size"]["name"] == "small" and manifest["num_games"] == SPLIT_SIZES["train"]
    stats = games.generate_split("train", 0, 3)
    assert stats["games"] == 3 and stats["games_per_s"] > 0
    manifest = json.loads((path.parent / MANIFEST).read_text())
    assert manifest["games"]["00002"]["sha256"] == _sha((path.parent / "00002.tw-pddl").read_bytes())


def test_cache_written_with_other_settings_is_refused(tmp_path):
    games = GeneratedGames(tmp_path, "small")
    games.game("train", 0)
    manifest = games.split_dir("train") / MANIFEST
    data = json.loads(manifest.read_text())
    data["size"]["distractors"] = 99
    manifest.write_text(json.dumps(data))
    with pytest.raises(AlfworldDataError, match="Delete"):
        GeneratedGames(tmp_path, "small").game("train", 1)


def test_clear_errors():
    with pytest.raises(ValueError, match="unknown ALFWorld room size 'huge'"):
        room_size("huge")
    with pytest.raises(ValueError, match="unknown ALFWorld split 'test'"):
        GeneratedGames("unused", "small").build("test", 0)
    with pytest.raises(IndexError, match="out of range"):
        GeneratedGames("unused", "small").build("valid_seen", 140)
    with pytest.raises(ValueError, match="unknown ALFWorld task family 'pick_and_eat'"):
        check_family("pick_and_eat")


def _receptacle_types(problem: str) -> Counter:
    """Receptacle instances per type in a PDDL problem (its facts, not the goal's ``?r`` variables)."""
    return Counter(dict(re.findall(r"\(receptacleType ([^?\s]\S*) (\w+)Type\)", problem)).values())


def test_real_room_counts_agree_with_alfreds_layout_data():
    """Each room's real counts name exactly the receptacle types objects.json gives, and at least the
    instances openable.json lists; a generated room keeps those instances' ALFRED ids."""
    layouts = resources.files("alfworld.gen") / "layouts"
    for number, counts in RECEPTACLE_COUNTS.items():
        assert set(counts) == set(vocab.layout_counts(number)), f"FloorPlan{number}"
        listed = [uid for uid in json.loads((layouts / f"FloorPlan{number}-openable.json").read_text())
                  if vocab._receptacle_type(uid) in counts]
        kept = {r.uid for r in vocab.scene(number).receptacles}
        assert set(listed) <= kept and Counter(r.rtype for r in vocab.scene(number).receptacles) == counts


def test_floorplan14_rooms_are_the_real_games_rooms(tmp_path, shared_fixtures):
    """Generated size-alfred FloorPlan14 games against the real one in the shared fixture: the same
    receptacles and admissible commands at reset, objects within 10 %; and their walkthrough wins."""
    from envs.alfworld import AlfworldConfig, AlfworldEnv

    data = shared_fixtures / "alfworld"
    real_file = next((data / "json_2.1.1" / "train").glob("*-14/trial_*/game.tw-pddl"))
    real = json.loads(real_file.read_text())["pddl_problem"]
    real_start = AlfworldEnv(AlfworldConfig(source="real", data_path=str(data))).reset("train", 0)
    on_14 = [i for i in range(600) if sample_layout("train", i, room_size("alfred")).scene.number == 14][:10]
    games = GeneratedGames(tmp_path, "alfred")
    problems = [json.loads(games.build("train", i))["pddl_problem"] for i in on_14]
    assert len(problems) >= 5 and all(_receptacle_types(p) == _receptacle_types(real) for p in problems)
    objects = [len(re.findall(r"\(pickupable ", p)) for p in problems]
    assert abs(sum(objects) / len(objects) / len(re.findall(r"\(pickupable ", real)) - 1) <= 0.10, objects
    env = AlfworldEnv(AlfworldConfig(source="generated", cache_dir=str(tmp_path), size="alfred"))
    first = env.reset("train", on_14[0])
    assert len(first.admissible) == len(real_start.admissible)
    for action in first.info["walkthrough"]:
        last = env.step(action)
    assert last.won
