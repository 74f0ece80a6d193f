"""Drive a real WebShop checkout's own text environment behind the ``TextEnv`` interface.

A checkout (https://github.com/princeton-nlp/WebShop, or the copy inside verl-agent) must hold
its ``web_agent_site`` package, its ``data`` files and a Lucene index under
``search_engine/`` (its ``setup.sh`` downloads and builds them), and WebShop's own requirements
must be installed (spaCy with its English model, pyserini, thefuzz, gym, bs4, flask).

Mapping: ``reset(split, index)`` opens WebShop session ``index`` (valid) or ``500 + index``
(train), as the published recipe does; reward per ``reward_mode`` from WebShop's [0, 1] score;
``noop`` when neither the page URL nor the text changed (WebShop refused the action, or the
click led to the same page); admissible actions formatted as verl-agent does.
"""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path

from envs.base import Reset, TextEnv, Transition
from envs.webshop.config import WebShopConfig, check_checkout, env_reward
from envs.webshop.env import goal_index


class RealWebShopEnv(TextEnv):
    """WebShop's ``WebAgentTextEnv`` in text mode."""

    family = "webshop"

    def __init__(self, config: WebShopConfig):
        self.config = config
        self.max_steps = config.max_steps
        checkout = Path(config.webshop_checkout).expanduser().resolve()
        products_file = check_checkout(checkout, config.webshop_num_products)
        if str(checkout) not in sys.path:
            sys.path.insert(0, str(checkout))
        try:
            module = importlib.import_module("web_agent_site.envs.web_agent_text_env")
        except Exception as exc:  # its imports need spaCy models, pyserini, gym, ...
            raise ImportError(
                f"importing WebShop's text env from {checkout} failed ({exc!r}); install the "
                "checkout's requirements (see its setup.sh)"
            ) from exc
        self._env = module.WebAgentTextEnv(
            observation_mode="text", file_path=str(products_file),
            num_products=config.webshop_num_products, human_goals=config.webshop_human_goals,
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


@functools.lru_cache(maxsize=4)
def real_goal_count(config: WebShopConfig) -> int:
    """How many goals the checkout's WebShop defines (its env is built once in this process)."""
    return len(RealWebShopEnv(config)._env.server.goals)
