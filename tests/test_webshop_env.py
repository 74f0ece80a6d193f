"""The embedded WebShop env: pages, actions, no-ops, limits, reward modes, search, policies."""

from __future__ import annotations

import importlib.util
import random

import pytest

from tests.conftest import require

require("Stemmer", extra="webshop")

from envs.base import TextEnv  # noqa: E402
from envs.webshop.config import WebShopConfig  # noqa: E402
from envs.webshop.env import WebShopEnv, build_shop, make_webshop_env  # noqa: E402
from envs.webshop.policies import goal_query, run_oracle, run_random  # noqa: E402
from envs.webshop.search import PyseriniSearch, java_major_version  # noqa: E402


@pytest.fixture(scope="module")
def env():
    return WebShopEnv(WebShopConfig())


def _goal(env, split, index):
    return env.shop.catalog.goals[int(env.reset(split, index).task_id.split("/")[1])]


def _open_target(env, goal):
    """Search the target's own title (it ranks first) and open its item page."""
    t = env.step(f"search[{goal.name}]")
    assert f"click[{goal.asin.lower()}]" in t.admissible
    return env.step(f"click[{goal.asin.lower()}]")


def test_is_a_text_env_and_reset_is_deterministic(env):
    assert isinstance(env, TextEnv) and env.max_steps == 15
    a, b = env.reset("valid", 7), WebShopEnv(WebShopConfig()).reset("valid", 7)
    assert a == b and a.task_id == "webshop/7" and a.family == "webshop"
    assert env.reset("train", 0).task_id == "webshop/500"
    assert a.observation == f"WebShop [SEP] Instruction: [SEP] {a.task} [SEP] Search"
    assert a.admissible == ["search[<your query>]", "click[search]"]
    with pytest.raises(ValueError, match="split 'test'"):
        env.reset("test", 0)
    with pytest.raises(IndexError, match="valid split has 500 goals"):
        env.reset("valid", 500)


def test_page_flow_text_and_admissible_actions(env):
    goal = _goal(env, "valid", 3)
    t = env.step(f"search[{goal_query(goal.instruction_text)}]")
    parts = t.observation.split(" [SEP] ")
    assert parts[:5] == ["Instruction:", goal.instruction_text, "Back to Search",
                         "Page 1 (Total results: 50)", "Next >"]
    assert t.admissible[:2] == ["click[back to search]", "click[next >]"]
    assert len(t.admissible) == 12 and not t.noop and t.reward == 0
    t = env.step("click[next >]")
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in t.observation
    assert t.admissible[:3] == ["click[back to search]", "click[< prev]", "click[next >]"]
    asin = t.admissible[3][len("click["):-1]
    t = env.step(f"click[{asin}]")
    product = env.shop.product(asin.upper())
    assert t.info["page"] == "item" and f"[SEP] {product.title} [SEP] Price: {product.price_tag}" in t.observation
    assert t.observation.endswith("Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now")
    assert t.admissible[:6] == ["click[back to search]", "click[< prev]", "click[description]",
                                "click[features]", "click[reviews]", "click[buy now]"]
    name, values = next(iter(product.options.items()))
    assert f"[SEP] {name} [SEP] {' [SEP] '.join(values)}" in t.observation
    t = env.step("click[features]")
    assert t.observation.endswith(" [SEP] ".join(product.bullets))
    t = env.step("click[< prev]")
    assert t.info["page"] == "item"
    t = env.step("click[< prev]")
    assert t.info["page"] == "results" and "Page 2 (Total results: 50)" in t.observation
    t = env.step("click[back to search]")
    assert t.info["page"] == "search" and t.observation.startswith("WebShop [SEP] Instruction:")


def test_invalid_actions_keep_the_page_with_reward_zero(env):
    r = env.reset("valid", 1)
    for bad, error in (("click[search]", "not clickable"), ("click[buy now]", "not clickable"),
                       ("buy the thing", "unknown action syntax"), ("search[]", "unknown action syntax")):
        t = env.step(bad)
        assert (t.observation, t.reward, t.done, t.noop) == (r.observation, 0.0, False, True)
        assert t.info["action_accepted"] is False and error in t.info["error"]


def test_option_click_changes_state_and_repeat_is_a_noop(env):
    goal = _goal(env, "valid", 0)
    _open_target(env, goal)
    value = goal.goal_options[0]
    first = env.step(f"click[{value}]")
    assert not first.noop and first.info["action_accepted"]  # same text, new chosen option
    again = env.step(f"click[{value}]")
    assert again.noop and again.info["action_accepted"]


def test_episode_stops_at_max_steps():
    env = WebShopEnv(WebShopConfig(max_steps=3))
    env.reset("valid", 0)
    steps = [env.step("click[nothing]") for _ in range(3)]
    assert [t.done for t in steps] == [False, False, True] and steps[-1].admissible == []
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("click[nothing]")


@pytest.mark.parametrize("mode", ["binary", "graded"])
def test_reward_modes(mode):
    env = WebShopEnv(WebShopConfig(reward_mode=mode))
    win = run_oracle(env, "valid", 0)
    assert win.won and win.score == 1.0 and win.reward == 10.0
    goal = _goal(env, "valid", 0)
    _open_target(env, goal)
    t = env.step("click[buy now]")  # no options chosen: a partial score
    assert t.done and not t.won and 0 < t.info["score"] < 1
    assert t.reward == (0.0 if mode == "binary" else pytest.approx(10 * t.info["score"]))
    assert t.observation.startswith("Thank you for shopping with us!")


def test_config_errors():
    with pytest.raises(ValueError, match="reward_mode='sparse'"):
        WebShopConfig(reward_mode="sparse")
    with pytest.raises(ValueError, match="needs pyserini_index"):
        WebShopConfig(search_backend="pyserini")


def test_search_drops_zero_scores_and_returns_at_most_50(env):
    engine = env.shop.engine
    assert engine.search("qwertyuiop zxcvbnm") == []
    assert engine.search("the of and") == []  # stop words only
    hits = engine.search("wall clock")
    assert len(hits) == 50 and env.shop.product(hits[0]).query == "wall clock"
    assert engine.search("Wall Clocks") == hits  # lower-cased and stemmed like Lucene's analyzer


def test_pyserini_needs_java_21(env, monkeypatch, tmp_path):
    monkeypatch.setattr("envs.webshop.search.java_major_version", lambda: 17)
    with pytest.raises(RuntimeError, match=r"needs Java >= 21 \(java 17 on PATH\).*bm25s"):
        PyseriniSearch(env.shop.catalog.products, tmp_path)
    monkeypatch.setattr("envs.webshop.search.java_major_version", lambda: None)
    with pytest.raises(RuntimeError, match=r"needs Java >= 21 \(no java on PATH\)"):
        PyseriniSearch(env.shop.catalog.products, tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("pyserini") is not None, reason="pyserini is installed")
def test_pyserini_missing_is_a_clear_error(env, monkeypatch, tmp_path):
    monkeypatch.setattr("envs.webshop.search.java_major_version", lambda: 21)
    with pytest.raises(RuntimeError, match=r"needs `pip install pyserini` \(Python >= 3.12\)"):
        PyseriniSearch(env.shop.catalog.products, tmp_path)


@pytest.mark.parametrize("banner,major", [('openjdk version "21.0.2" 2024-01-16', 21),
                                          ('java version "1.8.0_392"', 8)])
def test_java_version_parsing(tmp_path, banner, major):
    java = tmp_path / "java"
    java.write_text(f"#!/bin/sh\necho '{banner}' >&2\n")
    java.chmod(0o755)
    assert java_major_version(str(java)) == major


def test_oracle_scores_one_on_95_percent_of_200_validation_goals():
    env = make_webshop_env(WebShopConfig())
    scores = [run_oracle(env, "valid", i).score for i in range(200)]
    assert sum(s == 1.0 for s in scores) >= 190


def test_random_policy_is_a_low_floor():
    env = WebShopEnv(WebShopConfig())
    rng = random.Random(0)
    episodes = [run_random(env, "valid", i, rng) for i in range(100)]
    success = sum(e.won for e in episodes) / len(episodes)
    assert success < 0.3 and all(len(e.actions) <= 15 for e in episodes)


def test_shop_is_shared_per_config():
    assert build_shop(WebShopConfig()) is build_shop(WebShopConfig())


def test_prompt_states_the_instruction_once(env):
    from scpo_lightning.prompts import build_prompt, format_webshop_observation, prompt_style

    reset = env.reset("valid", 0)
    results = env.step(f"search[{reset.task}]").observation
    shown = format_webshop_observation(results, reset.task)
    # verl-agent's format: the parts after the instruction, each single-quoted.
    assert shown.startswith("'Back to Search' [SEP] 'Page 1 (Total results: ")
    assert format_webshop_observation("Thank you [SEP] 1.0", reset.task) == "Thank you [SEP] 1.0"
    prompt = build_prompt(prompt_style("webshop", "prompts"), reset.task, results, ["click[back to search]"],
                          [(reset.observation, f"search[{reset.task}]")], step=1)
    assert prompt.count(reset.task) == 2  # the task line, and the search action in the history
