"""Prompt building with history and action projection (SPEC §6, the published recipe).

The policy sees one user message per step. Step 1 shows the observation and the admissible
actions; later steps add the task, the step count and the last ``history_length``
(observation, action) pairs. The answer must be ``<think>…</think><action>…</action>``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from envs.registry import prompt_styles
from envs.spec import PromptStyle

_CJK = re.compile(r"[\u4e00-\u9fff]")

_INSTRUCTION = (
    "Now choose your next action. First reason step by step about the situation inside "
    "<think> </think> tags. Then give exactly one admissible action inside <action> </action> tags."
)


def prompt_style(env: str, use: str) -> PromptStyle:
    """The style ``data.rollout.env`` names (each env declares its own in its ``EnvSpec``), resolved
    once per collection: the functions below take the style itself."""
    styles = prompt_styles()
    if env not in styles:
        raise ValueError(f"unknown env {env!r} for {use}; expected one of {sorted(styles)}")
    return styles[env]


@dataclass(frozen=True)
class Projection:
    action: str  # what the env receives
    valid: bool  # SPEC §6 `is_action_valid`


def project_action(text: str, style: PromptStyle, require_think: bool = True) -> Projection:
    """Map a raw response to an env action and its validity flag.

    Lower-cased text between the first ``<action>`` and the next ``</action>``, stripped. Invalid
    when a think or action tag is missing or the text contains CJK characters. When the action
    tags are missing, the env receives the last ``PromptStyle.fallback_chars`` characters of the
    lower-cased response (ALFWorld 30, WebShop 20); when only the think tags are missing (or CJK appears), it receives the
    extracted action but the row is still flagged invalid, as in the published projection.
    Admissibility is not checked: a non-admissible command gets the env's own answer.
    ``require_think=False`` is for constrained decoding, whose forced format has no think block.
    """
    fallback = style.fallback_chars
    lower = text.lower()
    start = lower.find("<action>")
    end = lower.find("</action>", start + len("<action>")) if start >= 0 else -1
    if start < 0 or end < 0:
        return Projection(lower[-fallback:], False)
    action = lower[start + len("<action>") : end].strip()
    thought = "<think>" in text and "</think>" in text
    valid = (thought or not require_think) and not _CJK.search(text)
    return Projection(action, valid)


def format_admissible(actions: Sequence[str]) -> str:
    """Each action single-quoted, joined by newline + space; ``help`` removed (SPEC §6)."""
    return "\n ".join(f"'{a}'" for a in actions if a != "help")


def format_webshop_observation(observation: str, task: str) -> str:
    """verl-agent's WebShop observation: the " [SEP] " parts after the instruction, each single-quoted.

    WebShop repeats "Instruction: [SEP] <task>" at the top of every page; the published prompt
    states the task once and shows only what follows it. A page without the instruction (the
    done page) is shown as it is.
    """
    parts = observation.split(" [SEP] ")
    if task not in parts:
        return observation
    return " [SEP] ".join(f"'{p}'" for p in parts[parts.index(task) + 1 :])


def build_prompt(
    style: PromptStyle,
    task: str,
    observation: str,
    admissible: Sequence[str],
    history: Sequence[tuple[str, str]],
    step: int,
    history_length: int = 2,
) -> str:
    """The user message at 0-based ``step`` in ``style``; ``history`` holds all earlier (observation, action) pairs."""
    actions = format_admissible(admissible)
    if style.pages_repeat_task:
        observation = format_webshop_observation(observation, task)
        history = [(format_webshop_observation(obs, task), act) for obs, act in history]
    if step == 0:
        return (
            f"{style.role}\nYour current observation is: {observation}\n"
            f"Your admissible actions now are: [{actions}].\n\n{_INSTRUCTION}"
        )
    recent = list(history)[-history_length:] if history_length > 0 else []
    first = len(history) - len(recent) + 1
    past = "\n".join(
        f"[Observation {first + k}: '{obs}', Action {first + k}: '{act}']" for k, (obs, act) in enumerate(recent)
    )
    return (
        f"{style.role} Your task is to: {task}\n"
        f"You have already taken {step} step(s). Your last {len(recent)} observation(s) and action(s):\n{past}\n"
        f"You are now at step {step + 1} and your current observation is: {observation}\n"
        f"Your admissible actions now are: [{actions}].\n\n{_INSTRUCTION}"
    )
