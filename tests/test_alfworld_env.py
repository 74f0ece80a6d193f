"""AlfworldEnv on the real engine: walkthroughs win, rewards, no-ops, step limit, group identity."""

from __future__ import annotations

from functools import partial

import pytest

from envs.alfworld import FAMILIES, AlfworldConfig, AlfworldEnv
from envs.alfworld.env import make_source
from envs.workers import EnvPool
from tests.conftest import require


@pytest.fixture(autouse=True)
def _alfworld():
    require("alfworld", extra="alfworld")


def _config(tmp_path, size="small", **kw) -> AlfworldConfig:
    return AlfworldConfig(source="generated", cache_dir=str(tmp_path), size=size, **kw)


def _replay(env: AlfworldEnv, split: str, index: int):
    first = env.reset(split, index)
    rewards, last = [], None
    for action in first.info["walkthrough"]:
        last = env.step(action)
        rewards.append(last.reward)
        assert not last.noop, f"{first.task_id}: walkthrough step {action!r} did nothing"
    return first, last, rewards


@pytest.mark.parametrize("split, size", [("train", "small"), ("valid_seen", "small"), ("valid_unseen", "small"),
                                         ("train", "tiny"), ("valid_seen", "tiny")])
def test_walkthroughs_win_for_every_family_small_rooms(tmp_path, split, size):
    env = AlfworldEnv(_config(tmp_path, size=size))
    for index in range(12):  # two games of each family (families cycle with the index)
        first, last, rewards = _replay(env, split, index)
        assert first.family == FAMILIES[index % 6]
        assert last.won and last.done, f"{first.task_id} ({first.family}) walkthrough did not win"
        assert rewards == [0.0] * (len(rewards) - 1) + [10.0]


@pytest.mark.slow
@pytest.mark.parametrize("size", ["medium", "alfred"])
def test_walkthroughs_win_for_every_family_large_rooms(tmp_path, size):
    env = AlfworldEnv(_config(tmp_path, size=size))
    for index in range(6):
        first, last, _ = _replay(env, "valid_seen", 20 + index)
        assert last.won, f"{first.task_id} ({first.family}) walkthrough did not win"


def test_reset_gives_the_engine_intro_and_commands(tmp_path):
    env = AlfworldEnv(_config(tmp_path))
    first = env.reset("train", 3)
    assert first.observation.startswith("-= Welcome to TextWorld, ALFRED! =-")
    assert f"Your task is to: {first.task}" in first.observation
    assert first.family == "pick_heat_then_place_in_recep" and ("heat" in first.task or "hot" in first.task)
    assert first.task_id == "gen-v2/small/train/00003"
    assert {"look", "inventory", "help"} <= set(first.admissible)
    assert any(a.startswith("go to ") for a in first.admissible)
    assert first.info["source"] == "generated"


def test_non_admissible_command_is_the_engines_nothing_happens(tmp_path):
    env = AlfworldEnv(_config(tmp_path))
    first = env.reset("train", 0)
    out = env.step("fly to the moon")
    assert out.observation == "Nothing happens." and out.noop and out.reward == 0.0 and not out.done
    assert out.admissible == first.admissible


def test_step_limit_ends_the_episode(tmp_path):
    env = AlfworldEnv(_config(tmp_path, max_steps=3))
    env.reset("train", 0)
    outs = [env.step("look") for _ in range(3)]
    assert [o.done for o in outs] == [False, False, True]
    assert outs[-1].info["truncated"] and not outs[-1].won
    with pytest.raises(RuntimeError, match="reset first"):
        env.step("look")


def test_group_members_in_different_workers_see_the_identical_game(tmp_path):
    factory = partial(AlfworldEnv, _config(tmp_path))
    with EnvPool(factory, num_envs=8, num_workers=2, timeout_s=120.0) as pool:
        out = pool.reset([("train", 5), ("valid_unseen", 2)], group_size=4)
        assert out.stats == {}
        for group in (out.results[:4], out.results[4:]):
            assert len({r.task_id for r in group}) == 1
            assert len({r.observation for r in group}) == 1
            assert len({tuple(r.admissible) for r in group}) == 1
        assert out.results[0].task_id != out.results[4].task_id
        # identical game => identical transitions for identical actions, in both workers
        action = next(a for a in out.results[0].admissible if a.startswith("go to"))
        steps = pool.step([action] * 4 + [None] * 4).results
        assert len({(t.observation, tuple(t.admissible)) for t in steps[:4]}) == 1


def test_families_option_plays_only_those_families(tmp_path):
    config = _config(tmp_path, size="tiny", families=["look_at_obj_in_light", "pick_and_place_simple"])
    source = make_source(config)
    # Families cycle with the generated index (0 pick_and_place_simple, 1 look_at_obj_in_light, ...):
    # train keeps indices 0, 1, 6, 7, ... -> 593 + 592 of 3,553; valid_seen 24 + 24 of 140.
    assert (source.num_games("train"), source.num_games("valid_seen")) == (1185, 48)
    assert [source.game("train", i).game_id[-5:] for i in range(4)] == ["00000", "00001", "00006", "00007"]
    env = AlfworldEnv(config)
    assert env.reset("train", 2).family == "pick_and_place_simple"
    with pytest.raises(IndexError, match="1185 games of the families"):
        source.game("train", 1185)


def test_unknown_family_is_a_named_error(tmp_path):
    with pytest.raises(ValueError, match=r"AlfworldConfig\.families=\['pick_and_place'\]: unknown"):
        _config(tmp_path, families=["pick_and_place"])
