"""A toy environment added the way any new one is: this module (env, settings, ``EnvSpec``) plus
one line in ``envs.registry.SPECS`` (tests/test_env_spec.py adds that line).

A beacon room: ``search[<your query>]`` stands for a free-text query; searching for the task
word lights the beacon (won, score 1). Two task families, a scored end, its own prompt style.
"""

from __future__ import annotations

from dataclasses import dataclass

from envs.base import Reset, TextEnv, Transition
from envs.spec import EnvSpec, PromptStyle

WORDS = ("red", "blue", "green")
SEARCH = "search[<your query>]"


@dataclass(frozen=True)
class BeaconConfig:
    """Args:
        max_steps: Episode step limit.
        valid_tasks: Tasks of the valid split.
    """

    max_steps: int = 5
    valid_tasks: int = 6


class BeaconEnv(TextEnv):
    def __init__(self, **options):
        self.config = BeaconConfig(**options)
        self.max_steps, self.steps, self.word = self.config.max_steps, 0, ""

    def reset(self, split: str, index: int) -> Reset:
        self.steps, self.word = 0, WORDS[index % len(WORDS)]
        return Reset("A dark room with a beacon.", [SEARCH, "wait"], f"light the {self.word} beacon",
                     "beacon_even" if index % 2 == 0 else "beacon_odd", f"{split}/{index}")

    def step(self, action: str) -> Transition:
        self.steps += 1
        won = self.word in action and action.startswith("search[")
        done = won or self.steps >= self.max_steps
        return Transition("The beacon shines." if won else "Darkness.", [SEARCH, "wait"], float(won), done, won,
                          not won, {"score": float(won)} if done else {})


def check_split(config: BeaconConfig, split: str, counted: bool) -> int | None:
    if split not in ("train", "valid"):
        raise ValueError(f"the beacon room has no split {split!r}; choose train or valid")
    return config.valid_tasks if split == "valid" else None


def split_size(config: BeaconConfig, split: str) -> int | None:
    return config.valid_tasks if split == "valid" else None


PROMPT = PromptStyle(name="beacon", role="You are a lamplighter.", fallback_chars=7, search_placeholder=SEARCH)
SPEC = EnvSpec(name="beacon", settings=BeaconConfig, make=BeaconEnv, prompt=PROMPT,
               families=("beacon_even", "beacon_odd"), scored=True, check_split=check_split, split_size=split_size,
               minilm_knots=(0.5, 0.9))
