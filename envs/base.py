"""The environment interface every text environment implements.

A rollout needs, per env and step, the raw observation (the GiGPO *anchor*), the admissible
commands (for the prompt and for constrained decoding), the env reward, whether the episode is
done or won, and whether the step was a no-op (SCPO filters no-op steps before scoring, SPEC §3.3).
Environments are addressed by ``(split, index)`` so that the n members of a group can be put on
the identical task by value, in any process.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any


@dataclass(frozen=True)
class Reset:
    """What ``TextEnv.reset`` returns."""

    observation: str  # raw env text, no template, no history (the anchor of step 0)
    admissible: list[str]  # admissible commands in the env's own order
    task: str  # the task/goal sentence shown to the agent
    family: str  # task family (ALFWorld: e.g. "pick_heat_then_place_in_recep"; WebShop: "webshop")
    task_id: str  # stable id of the game / goal, identical across a group
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Transition:
    """What ``TextEnv.step`` returns."""

    observation: str  # raw env text returned by the step
    admissible: list[str]
    reward: float  # env reward r_t (ALFWorld: 10 on the winning step; WebShop: per reward_mode)
    done: bool
    won: bool
    noop: bool  # the step changed nothing (ALFWorld "Nothing happens."; WebShop: same page)
    info: dict[str, Any] = field(default_factory=dict)


class TextEnv(abc.ABC):
    """One text environment instance; not thread-safe, one episode at a time."""

    #: Episode step limit (ALFWorld 50, WebShop 15); the rollout loop enforces it.
    max_steps: int

    @abc.abstractmethod
    def reset(self, split: str, index: int) -> Reset:
        """Start the episode of task ``index`` of ``split``; same arguments, same episode."""

    @abc.abstractmethod
    def step(self, action: str) -> Transition:
        """Apply one projected action (SPEC §6); never raises for a bad action."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release engine resources."""


def group_slots(groups: Sequence[tuple[str, int]], group_size: int, capacity: int) -> dict[int, tuple[str, int]]:
    """The slot layout every pool and the rollout loop share: slot ``g * group_size + j`` plays
    ``groups[g]`` = (split, index) for member j, so slot i belongs to group ``i // group_size``.
    More slots than the pool's ``capacity`` envs is refused."""
    n = len(groups) * group_size
    if n > capacity:
        raise ValueError(f"{len(groups)} groups x {group_size} = {n} slots; the pool has {capacity}")
    return {g * group_size + j: tuple(task) for g, task in enumerate(groups) for j in range(group_size)}
