"""The real-WebShop adapter: clear errors for a bad checkout, and the mapping onto TextEnv.

The mapping is checked against a stand-in ``web_agent_site`` package written into a temporary
checkout (WebShop's data is not reachable here); it has the attributes the adapter uses.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from tests.conftest import require

require("Stemmer", extra="webshop")

from envs.webshop.config import WebShopConfig  # noqa: E402
from envs.webshop.env import make_webshop_env  # noqa: E402

STAND_IN = '''
import random


class SimServer:
    def __init__(self, base_url, file_path, filter_goals, limit_goals, num_products, human_goals, show_attrs):
        assert file_path.endswith("items_shuffle_1000.json") and num_products == 1000
        self.price = random.random()  # WebShop draws prices and bounds from the global generator
        self.goals = [{"instruction_text": f"goal {i}"} for i in range(600)]


class WebAgentTextEnv:
    def __init__(self, observation_mode, server, session_prefix):
        assert observation_mode == "text"
        self.server, self.prefix, self.url = server, session_prefix, None

    @property
    def state(self):
        return {"url": self.url}

    @property
    def observation(self):
        return f"page {self.url.replace(self.prefix, '')}"

    def reset(self, session):
        self.url = f"/{self.prefix}{session}"
        return self.observation, None

    def _page(self):
        return self.url.replace(self.prefix, "")

    def get_available_actions(self):
        clicks = {"/0": ["search"], "/0/results": ["item"], "/0/item": ["buy now"]}.get(self._page(), [])
        return {"has_search_bar": self._page() == "/0", "clickables": clicks}

    def step(self, action):
        moves = {("/0", "search[shoes]"): "/results", ("/0/results", "click[item]"): "/item",
                 ("/0/item", "click[buy now]"): "/done"}
        move = moves.get((self._page(), action))
        if move:
            self.url = self.url.rsplit("/", 1)[0] + move if self._page().count("/") > 1 else self.url + move
        done = self.url.endswith("/done")
        return self.observation, (0.75 if done else 0), done, None
'''
ENGINE = "DEFAULT_ATTR_PATH = 'data/items_ins_v2_1000.json'\n"


def _checkout(root, data=True):
    pkg = root / "web_agent_site" / "envs"
    pkg.mkdir(parents=True)
    (root / "web_agent_site" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "web_agent_text_env.py").write_text(textwrap.dedent(STAND_IN))
    (root / "web_agent_site" / "engine").mkdir()
    (root / "web_agent_site" / "engine" / "__init__.py").write_text("")
    (root / "web_agent_site" / "engine" / "engine.py").write_text(ENGINE)
    if data:
        (root / "data").mkdir()
        for name in ("items_shuffle_1000.json", "items_ins_v2_1000.json", "items_human_ins.json"):
            (root / "data" / name).write_text("[]")
        (root / "search_engine" / "indexes_1k").mkdir(parents=True)
    return root


@pytest.fixture(autouse=True)
def _stand_in_needs_no_webshop_packages(monkeypatch):
    """The stand-in checkout imports nothing of WebShop's (tests/test_optional_packages.py checks them)."""
    import envs.webshop.config

    monkeypatch.setattr(envs.webshop.config, "CHECKOUT_PACKAGES", ())


@pytest.fixture
def clean_modules():
    yield
    for name in [m for m in sys.modules if m.startswith("web_agent_site")]:
        del sys.modules[name]


def test_missing_checkout_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no web_agent_site/ package there.*git clone"):
        make_webshop_env(WebShopConfig(webshop_checkout=str(tmp_path)))


def test_missing_data_names_the_files(tmp_path):
    _checkout(tmp_path, data=False)
    with pytest.raises(ValueError, match=r"lacks WebShop's data .*small .*items_shuffle_1000.json.*indexes_1k"):
        make_webshop_env(WebShopConfig(webshop_checkout=str(tmp_path), webshop_num_products=1000))
    # The full layout needs its own files (WebShop's loader would fail later on the small file).
    _checkout(tmp_path / "small")
    with pytest.raises(ValueError, match=r"lacks WebShop's data .*full .*items_shuffle.json.*items_ins_v2.json"):
        make_webshop_env(WebShopConfig(webshop_checkout=str(tmp_path / "small")))
    with pytest.raises(ValueError, match="webshop_num_products=7"):
        make_webshop_env(WebShopConfig(webshop_checkout=str(tmp_path), webshop_num_products=7))


@pytest.mark.parametrize("mode,reward", [("binary", 0.0), ("graded", 7.5)])
def test_adapter_maps_webshop_text_env(tmp_path, clean_modules, mode, reward):
    root = _checkout(tmp_path)
    env = make_webshop_env(WebShopConfig(webshop_checkout=str(root), webshop_num_products=1000, reward_mode=mode))
    r = env.reset("valid", 0)
    assert (r.observation, r.task, r.task_id) == ("page /0", "goal 0", "webshop/0")
    assert r.admissible == ["search[<your query>]", "click[search]"]
    t = env.step("click[nonsense]")
    assert t.noop and t.reward == 0 and not t.done
    t = env.step("search[shoes]")
    assert not t.noop and t.admissible == ["click[item]"]
    env.step("click[item]")
    t = env.step("click[buy now]")
    assert t.done and not t.won and t.info["score"] == 0.75 and t.reward == reward
    assert env.reset("train", 0).task_id == "webshop/500"
    with pytest.raises(IndexError):
        env.reset("train", 100)


def test_one_seeded_server_per_process(tmp_path, clean_modules):
    import random

    from envs.webshop.real import shared_server

    config = WebShopConfig(webshop_checkout=str(_checkout(tmp_path)), webshop_num_products=1000)
    a, b = make_webshop_env(config), make_webshop_env(config)
    assert a._env.server is b._env.server and a._env.prefix != b._env.prefix
    state = random.getstate()
    shared_server.cache_clear()
    again = shared_server(config)
    assert again.price == a._env.server.price == random.Random(config.goal_seed).random()
    assert random.getstate() == state  # the global generator is given back untouched
    engine = sys.modules["web_agent_site.engine.engine"]
    assert engine.DEFAULT_ATTR_PATH.endswith("data/items_ins_v2_1000.json")


def test_config_webshop_checkout_reaches_the_real_env(tmp_path, clean_modules):
    from envs.registry import make_env_factory, split_size

    options = {"webshop_checkout": str(_checkout(tmp_path)), "webshop_num_products": 1000}
    env = make_env_factory("webshop", options)()
    assert type(env).__name__ == "RealWebShopEnv" and env.reset("valid", 3).task == "goal 3"
    # The stand-in defines 600 goals: the first 500 are WebShop's validation sessions.
    assert (split_size("webshop", "valid", options), split_size("webshop", "train", options)) == (500, 100)
