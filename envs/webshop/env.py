"""The embedded WebShop as a ``TextEnv``, and the factory that picks embedded or real WebShop.

Splits follow the published recipe: goal indices < 500 (after the seeded shuffle) are the
held-out ``valid`` split; ``train`` index i is goal 500 + i.

Per step, ``info`` carries: ``page`` (page name), ``action_accepted`` (False when WebShop refused
the action: same page, reward 0), ``error`` (why it was refused), and after a purchase
``score`` (WebShop's [0, 1] score), ``score_parts``, ``asin`` and ``options``.
"""

from __future__ import annotations

import functools

from envs.base import Reset, TextEnv, Transition
from envs.webshop.catalog import NUM_VALID_GOALS, Goal, build_catalog, load_catalog
from envs.webshop.config import WebShopConfig, env_reward
from envs.webshop.generate import generate_catalog
from envs.webshop.pages import Element, Shop, State, admissible, apply_action, clickables, page_elements, render_text
from envs.webshop.reward import Score
from envs.webshop.search import LuceneBM25, PyseriniSearch

SPLITS = ("train", "valid")


def goal_index(num_goals: int, split: str, index: int) -> int:
    """Global goal index of ``index`` within ``split``; a clear error when out of range."""
    if split not in SPLITS:
        raise ValueError(f"webshop split {split!r}: choose one of {SPLITS}")
    size = min(NUM_VALID_GOALS, num_goals) if split == "valid" else num_goals - NUM_VALID_GOALS
    if not 0 <= index < size:
        raise IndexError(f"webshop {split} split has {max(size, 0)} goals; index {index} is out of range")
    return index if split == "valid" else NUM_VALID_GOALS + index


@functools.lru_cache(maxsize=4)
def build_shop(config: WebShopConfig) -> Shop:
    """Catalog + search engine, built once per process and config (envs share it read-only)."""
    if config.catalog_dir:
        catalog = load_catalog(config.catalog_dir, config.goal_seed)
    else:
        raw = generate_catalog(config.num_products, config.catalog_seed)
        catalog = build_catalog(*raw, goal_seed=config.goal_seed)
    if config.search_backend == "pyserini":
        engine = PyseriniSearch(catalog.products, config.pyserini_index)
    else:
        engine = LuceneBM25.for_products(catalog.products)
    return Shop(catalog, engine)


class WebShopEnv(TextEnv):
    """The embedded shop: WebShop's pages, actions and reward over a catalog."""

    family = "webshop"

    def __init__(self, config: WebShopConfig | None = None, shop: Shop | None = None):
        self.config = config or WebShopConfig()
        self.max_steps = self.config.max_steps
        self.shop = shop or build_shop(self.config)
        self._goal: Goal | None = None
        self._state = State()
        self._steps = 0
        self._done = False
        self._score: Score | None = None  # set by the purchase

    @property
    def state(self) -> State:
        return self._state

    @property
    def done(self) -> bool:
        return self._done

    def elements(self) -> list[Element]:
        """The current page's visible elements (the Flask site renders these)."""
        return page_elements(self.shop, self._goal, self._state, self._score)

    def _page(self):
        elements = self.elements()
        return render_text(elements), admissible(self._state, clickables(elements))

    def reset(self, split: str, index: int) -> Reset:
        g = goal_index(len(self.shop.catalog.goals), split, index)
        self._goal = self.shop.catalog.goals[g]
        self._state, self._steps, self._done, self._score = State(), 0, False, None
        obs, actions = self._page()
        return Reset(obs, actions, task=self._goal.instruction_text, family=self.family,
                     task_id=f"webshop/{g}", info={"page": "search"})

    def step(self, action: str) -> Transition:
        if self._goal is None or self._done:
            raise RuntimeError("WebShopEnv.step called before reset() or after the episode ended")
        before = self._state
        outcome = apply_action(self.shop, self._goal, before, action)
        self._state, self._score = outcome.state, outcome.score
        self._steps += 1
        info = {"page": self._state.page, "action_accepted": outcome.accepted, "error": outcome.error}
        reward, won = 0.0, False
        if outcome.score is not None:
            score = outcome.score.total
            reward, won = env_reward(score, self.config.reward_mode), score == 1.0
            info.update(score=score, score_parts=outcome.score.as_dict(), asin=before.asin,
                        options=dict(before.options))
        self._done = outcome.score is not None or self._steps >= self.max_steps
        obs, actions = self._page()
        noop = self._state == before  # same page, query, page number, product and options
        return Transition(obs, actions if not self._done else [], reward, self._done, won, noop, info)


def make_webshop_env(config: WebShopConfig | None = None) -> TextEnv:
    """The real WebShop when ``config.webshop_checkout`` is set, else the embedded shop."""
    config = config or WebShopConfig()
    if config.webshop_checkout:
        from envs.webshop.real import RealWebShopEnv

        return RealWebShopEnv(config)
    return WebShopEnv(config)
