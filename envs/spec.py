"""What an environment declares about itself, once, for the rest of the app (``envs.registry``).

Adding an environment: a module that defines the env (an ``envs.base.TextEnv``), its settings
class and an ``EnvSpec``, plus one line in ``envs.registry.SPECS``. Nothing else names envs: the
config checks, the prompts, the action projection, validation metrics and the MiniLM scorer read
the spec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envs.base import TextEnv


@dataclass(frozen=True)
class PromptStyle:
    """How the policy is prompted in an env and how its answers become actions (SPEC §6).

    Args:
        name: The ``data.rollout.env`` value that selects this style (envs may share one).
        role: The sentence each step's user message starts with.
        fallback_chars: Characters of a malformed response's end sent to the env as the action.
        pages_repeat_task: Observations repeat "<task> [SEP]" at the top of every page (WebShop):
            the prompt states the task once and shows only what follows it.
        search_placeholder: An admissible action standing for free-text search; constrained
            decoding cannot enumerate queries, so it offers the task sentence as the one query.
    """

    name: str
    role: str
    fallback_chars: int
    pages_repeat_task: bool = False
    search_placeholder: str | None = None


#: The household style: ALFWorld's prompt (the ALFRED role, its 30-character fallback), declared here
#: because the corridor test world shares it (rooms and doors fit it); ``data.rollout.env`` alfworld.
HOUSEHOLD_PROMPT = PromptStyle(
    name="alfworld",
    role="You are an expert household agent acting in a text-based ALFRED environment.",
    fallback_chars=30,
)


def _any_split(settings: Any, split: str, counted: bool) -> int | None:
    """Every split name and index is a task (a generated world): nothing to check, size unknown."""
    return None


def _unknown_size(settings: Any, split: str) -> int | None:
    return None


@dataclass(frozen=True)
class EnvSpec:
    """One environment, as the app sees it.

    Args:
        name: The ``data.env`` value.
        settings: Class whose keyword arguments are ``data.env_options``; building it checks them.
        make: ``make(**env_options)`` builds one env; a module-level function (worker processes
            receive it pickled).
        prompt: Its prompt style and action projection.
        families: Every task family ``Reset.family`` can report (per-family validation metrics
            are created for all of them up front, so every rank holds the same metric keys).
        scored: Episodes end with a graded ``info["score"]``, logged as val/score.
        check_split: ``check_split(settings, split, counted)`` raises ValueError for a split the
            env does not have; with ``counted``, returns its number of tasks when cheap to know.
        split_size: ``split_size(settings, split)``: addressable tasks of a split, None = any index.
        announce: Logs at start-up which data the run plays and why; None = nothing to say.
        step_limit: The settings field holding the env's own step limit, set from
            ``data.rollout.max_steps`` (the one source of the horizon); None = the env has none.
        minilm_knots: (zero, at_theta) cosine knots of the MiniLM scorer's calibration for this
            env (``scpo_lightning.scorers.minilm.CosineMap``); None = no preset.
        commands: The first word of every action the env can admit: each ``data.rollout.exclude_actions``
            entry must start with one. Empty = not checked.
        reward_range: The least and the greatest total env reward of an episode; an episode is a
            success when its total exceeds ``SCPOCallback.tau_succ``, which must lie in [low, high).
    """

    name: str
    settings: type
    make: Callable[..., TextEnv]
    prompt: PromptStyle
    families: tuple[str, ...]
    scored: bool = False
    check_split: Callable[[Any, str, bool], int | None] = _any_split
    split_size: Callable[[Any, str], int | None] = _unknown_size
    announce: Callable[[Any], None] | None = None
    step_limit: str | None = "max_steps"
    minilm_knots: tuple[float, float] | None = None
    commands: tuple[str, ...] = ()
    reward_range: tuple[float, float] = (0.0, 10.0)
