"""Drive a real WebShop checkout's own text environment behind the ``TextEnv`` interface.

A checkout (https://github.com/princeton-nlp/WebShop, or the copy inside verl-agent) must hold
its ``web_agent_site`` package, its ``data`` files and a Lucene index under
``search_engine/`` (its ``setup.sh`` downloads and builds them); the packages its code imports
are listed in docs/webshop.md (install them next to the project, not from its requirements.txt,
whose pins would downgrade the project's own).

One WebShop server per process. WebShop's ``SimServer`` loads the catalog and index and draws
the product prices and goal price bounds; every env of the process shares it (one catalog and
index in memory), each with its own session prefix so that siblings on one goal do not share a
session. Its draws come from the global ``random`` module, unseeded; the server is built with
that generator seeded from ``goal_seed`` and restored afterwards, so every env, process and run
gets the same prices, bounds and goal order (WebShop then shuffles the goals with its own fixed
seed, 233).

Mapping: ``reset(split, index)`` opens WebShop goal ``index`` (valid) or ``500 + index``
(train), as the published recipe does; reward per ``reward_mode`` from WebShop's [0, 1] score;
``noop`` when neither the page URL nor the text changed (WebShop refused the action, or the
click led to the same page); admissible actions formatted as verl-agent does.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import random
import sys
from contextlib import contextmanager
from pathlib import Path

from envs.base import Reset, TextEnv, Transition
from envs.webshop.config import WebShopConfig, check_checkout, env_reward
from envs.webshop.env import goal_index

_SESSION_PREFIXES = itertools.count()


@contextmanager
def _seeded_global_random(seed: int):
    """Seed the global ``random`` generator for WebShop's draws, then give back its old state."""
    saved = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(saved)


def _text_env_module(checkout: Path):
    if str(checkout) not in sys.path:
        sys.path.insert(0, str(checkout))
    try:
        return importlib.import_module("web_agent_site.envs.web_agent_text_env")
    except Exception as exc:  # its imports need spaCy's en_core_web_sm, pyserini, gym, ...
        raise ImportError(
            f"importing WebShop's text env from {checkout} failed ({exc!r}); install the packages "
            "docs/webshop.md lists for a real checkout"
        ) from exc


@functools.lru_cache(maxsize=2)
def shared_server(config: WebShopConfig):
    """This process's WebShop server for ``config`` (built once, shared by its envs)."""
    checkout = Path(config.webshop_checkout).expanduser().resolve()
    files = check_checkout(checkout, config.webshop_num_products)
    module = _text_env_module(checkout)
    # WebShop's loader reads the attributes from a fixed path (the small layout's file).
    engine = importlib.import_module("web_agent_site.engine.engine")
    engine.DEFAULT_ATTR_PATH = str(files.attributes)
    with _seeded_global_random(config.goal_seed):
        return module.SimServer(
            "http://127.0.0.1:3000", str(files.products), None, -1,
            config.webshop_num_products, config.webshop_human_goals, False,
        )


class RealWebShopEnv(TextEnv):
    """WebShop's ``WebAgentTextEnv`` in text mode, on this process's shared server."""

    family = "webshop"

    def __init__(self, config: WebShopConfig):
        self.config = config
        self.max_steps = config.max_steps
        server = shared_server(config)
        module = sys.modules[type(server).__module__]
        with _seeded_global_random(config.goal_seed):  # its constructor opens a random session
            self._env = module.WebAgentTextEnv(
                observation_mode="text", server=server, session_prefix=f"env{next(_SESSION_PREFIXES)}_",
            )
        self._steps, self._done, self._started = 0, False, False

    def _admissible(self) -> list[str]:
        avail = self._env.get_available_actions()
        search = ["search[<your query>]"] if avail["has_search_bar"] else []
        return search + [f"click[{c}]" for c in avail["clickables"]]

    def reset(self, split: str, index: int) -> Reset:
        goals = self._env.server.goals
        g = goal_index(len(goals), split, index)
        obs, _ = self._env.reset(session=g)
        self._steps, self._done, self._started = 0, False, True
        return Reset(obs, self._admissible(), task=goals[g]["instruction_text"], family=self.family,
                     task_id=f"webshop/{g}", info={"page": self._env.state["url"]})

    def step(self, action: str) -> Transition:
        if not self._started or self._done:
            raise RuntimeError("RealWebShopEnv.step called before reset() or after the episode ended")
        before = (self._env.state["url"], self._env.observation)
        obs, score, done, _ = self._env.step(action)
        self._steps += 1
        after = (self._env.state["url"], obs)
        info = {"page": after[0]}
        won = bool(done) and score == 1.0
        if done:
            info["score"] = float(score)
        self._done = bool(done) or self._steps >= self.max_steps
        reward = env_reward(float(score), self.config.reward_mode) if done else 0.0
        admissible = [] if self._done else self._admissible()
        return Transition(obs, admissible, reward, self._done, won, after == before, info)


def real_goal_count(config: WebShopConfig) -> int:
    """How many goals the checkout's WebShop defines."""
    return len(shared_server(config).goals)
