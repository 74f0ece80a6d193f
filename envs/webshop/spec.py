"""WebShop's ``EnvSpec`` (envs.spec): embedded or real shop, graded score, its page prompt."""

from __future__ import annotations

from envs.base import TextEnv
from envs.spec import EnvSpec, PromptStyle
from envs.webshop.catalog import NUM_VALID_GOALS
from envs.webshop.config import WebShopConfig

PROMPT = PromptStyle(
    name="webshop",
    role="You are an expert shopping agent browsing a web shop through its text interface.",
    fallback_chars=20,
    pages_repeat_task=True,
    search_placeholder="search[<your query>]",  # its search bar, as envs/webshop/pages.py lists it
)


def make_env(**options) -> TextEnv:
    from envs.webshop.env import make_webshop_env

    return make_webshop_env(WebShopConfig(**options))  # the real checkout when webshop_checkout is set


def check_split(config: WebShopConfig, split: str, counted: bool) -> int | None:
    from envs.webshop.env import SPLITS

    if split not in SPLITS:
        raise ValueError(f"WebShop has no split {split!r}; choose one of {SPLITS}")
    return NUM_VALID_GOALS if split == "valid" else None  # at most; the goals past them train


def split_size(config: WebShopConfig, split: str) -> int:
    from envs.webshop.env import build_shop
    from envs.webshop.real import real_goal_count

    goals = real_goal_count(config) if config.webshop_checkout else len(build_shop(config).catalog.goals)
    return min(NUM_VALID_GOALS, goals) if split == "valid" else goals - NUM_VALID_GOALS


SPEC = EnvSpec(
    name="webshop", settings=WebShopConfig, make=make_env, prompt=PROMPT, families=("webshop",), scored=True,
    check_split=check_split, split_size=split_size,
    # Its pages repeat the instruction and run to hundreds of tokens: unrelated steps already have cosines ~0.83.
    minilm_knots=(0.833, 0.98),
    commands=("search", "click"), reward_range=(0.0, 10.0),  # 10 x the purchase score (config.env_reward)
)
