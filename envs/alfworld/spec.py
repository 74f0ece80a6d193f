"""ALFWorld's ``EnvSpec`` (envs.spec): the real engine, six task families, the ALFRED prompt."""

from __future__ import annotations

from envs.alfworld.env import WIN_REWARD, AlfworldConfig, announce_source, check_split, make_source
from envs.alfworld.vocab import FAMILIES
from envs.base import TextEnv
from envs.spec import HOUSEHOLD_PROMPT, EnvSpec


def make_env(**options) -> TextEnv:
    from envs.alfworld.env import AlfworldEnv

    return AlfworldEnv(AlfworldConfig(**options))


def split_size(config: AlfworldConfig, split: str) -> int:
    return make_source(config).num_games(split)


SPEC = EnvSpec(
    name="alfworld", settings=AlfworldConfig, make=make_env, prompt=HOUSEHOLD_PROMPT, families=FAMILIES,
    check_split=check_split, split_size=split_size, announce=announce_source,
    minilm_knots=(0.338, 0.886),  # scripts/calibrate_minilm.py, docs/scorers.md
    commands=("go", "open", "close", "take", "move", "put", "use", "heat", "cool", "clean", "slice", "toggle",
              "examine", "look", "inventory", "help"),
    reward_range=(0.0, WIN_REWARD),  # WIN_REWARD on the winning step, 0 on every other
)
