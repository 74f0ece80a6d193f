"""A tiny deterministic corridor world for fast end-to-end tests and debugging on any machine.

Task ``index`` of a split puts the agent in room ``start`` of a corridor and asks it to reach
room ``goal``; ``go east``/``go west`` move, ``look`` repeats the room, walking into a wall or any
other command answers "Nothing happens." (a no-op). Reaching the goal wins with reward 10. It is
small enough that a random policy succeeds often, so SCPO has successful siblings to work with.
"""

from __future__ import annotations

import random

from envs.base import Reset, TextEnv, Transition
from envs.common.rules import check, count
from envs.spec import HOUSEHOLD_PROMPT, EnvSpec

ACTIONS = ["go east", "go west", "look"]


class CorridorEnv(TextEnv):
    """A corridor of ``rooms`` rooms; (split, index) fixes the start and the goal."""

    def __init__(self, rooms: int = 4, max_steps: int = 8):
        check("CorridorEnv", CorridorEnv, locals(), {"rooms": count(2), "max_steps": count(1)})
        self.rooms, self.max_steps = rooms, max_steps
        self.pos = self.goal = 0

    def _obs(self) -> str:
        return f"You are in room {self.pos} of {self.rooms}. Doors lead east and west."

    def reset(self, split: str, index: int) -> Reset:
        rng = random.Random(f"{split}/{index}")
        self.goal = rng.randrange(self.rooms)
        self.pos = rng.choice([r for r in range(self.rooms) if r != self.goal])
        task = f"go to room {self.goal}"
        return Reset(f"Welcome to the corridor. {self._obs()} Your task is to: {task}.", list(ACTIONS),
                     task, "corridor", f"{split}/{index}")

    def step(self, action: str) -> Transition:
        move = {"go east": 1, "go west": -1}.get(action.strip())
        target = self.pos + move if move is not None else None
        if action.strip() == "look":
            obs, noop = self._obs(), False
        elif target is None or not 0 <= target < self.rooms:
            obs, noop = "Nothing happens.", True
        else:
            self.pos, noop = target, False
            obs = self._obs()
        won = self.pos == self.goal
        return Transition(obs, list(ACTIONS), 10.0 if won else 0.0, won, won, noop)


# Building CorridorEnv only checks its options, so the class is its own settings.
SPEC = EnvSpec(name="corridor", settings=CorridorEnv, make=CorridorEnv, prompt=HOUSEHOLD_PROMPT, families=("corridor",),
               # commands: () = unchecked: tests run it with ALFWorld's rollout settings (quickstart's exclude_actions).
               reward_range=(0.0, 10.0))
