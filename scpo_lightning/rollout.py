"""The multi-turn rollout loop: prompts, batched generation, projection, env steps (SPEC §1, §6).

``collect`` runs ``len(tasks) × group_size`` environments in lock-step; the n members of a group
are reset on the identical task (slot i is in group ``i // group_size``: the pools' layout,
``envs.base.group_slots``). Each step, every active env gets a prompt built from its raw
observation and history, the engine generates all responses in one batched call, responses are
projected to actions, and the env pool steps all envs in parallel.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from envs.common.rules import TEXTS, Rule, check, count, number, one_of, optional
from envs.registry import prompt_styles
from scpo_lightning.batch import RolloutBatch
from scpo_lightning.engines.base import RolloutEngine, SamplingParams
from scpo_lightning.prompts import build_prompt, project_action, prompt_style
from scpo_lightning.returns import episode_scores, step_returns, trajectory_returns

TRUNCATION = ("error", "left")
ACTION_MODES = ("free", "constrained")
def constrained_choices(admissible: Sequence[str], task: str, search_placeholder: str | None) -> list[str]:
    """Admissible actions for constrained decoding: the prompt's list (``help`` removed, SPEC §6).

    Free-text search cannot be enumerated, so in constrained mode the search bar's placeholder
    (``PromptStyle.search_placeholder``) is replaced by one concrete query, the task sentence
    itself (WebShop's instruction).
    """
    return [f"search[{task}]" if a == search_placeholder else a for a in admissible if a != "help"]


def offered_actions(admissible: Sequence[str], exclude: Sequence[str]) -> list[str]:
    """The admissible actions minus those whose command is in ``exclude`` (rollout.exclude_actions).

    An entry removes the action equal to it and every action starting with it plus a space, so
    "examine" removes "examine drawer 1". Removing everything is a configuration error: an agent
    must always have an action to take.
    """
    if not exclude:
        return list(admissible)
    kept = [a for a in admissible if not any(a == e or a.startswith(e + " ") for e in exclude)]
    if not kept:
        raise ValueError(f"rollout.exclude_actions={list(exclude)} removes every admissible action of a state "
                         f"({list(admissible)[:8]}...); exclude fewer commands")
    return kept


class PoolResult(Protocol):
    results: list[Any]  # per slot: Reset / Transition, or None (slot not in play or lost)
    stats: dict[str, int]  # episodes ended per failure reason, workers restarted


class EnvPool(Protocol):
    """What the loop needs from an env worker pool (``envs.workers.EnvPool``)."""

    def reset(self, groups: Sequence[tuple[str, int]], group_size: int) -> PoolResult: ...

    def step(self, actions: Sequence[str | None]) -> PoolResult: ...


@dataclass(frozen=True)
class RolloutPolicy:
    """What the DataModule collects rollouts with, handed over by the module (``SCPOModule.rollout_policy``).

    Args:
        engine: Generates the responses with the policy's current weights.
        tokenizer: The policy's tokenizer (chat template, prompt tokens).
        context: ``context(validation)`` is entered around every collection; collective (sharded
            weights are gathered), so every rank enters it equally often.
        device: Where the DataModule's cross-rank counts are reduced.
        sampling: How responses are sampled (the module's settings).
    """

    engine: RolloutEngine
    tokenizer: Any
    context: Callable[[bool], AbstractContextManager]
    device: Any
    sampling: SamplingSettings


class PolicySource(Protocol):
    """The policy as the DataModule takes it in ``setup`` (``SCPOModule``)."""

    def prompt_tokenizer(self) -> Any:
        """Its tokenizer, loadable before the weights (the first prompts are checked at set-up)."""

    def rollout_policy(self) -> RolloutPolicy:
        """What each collection generates with, once the weights are loaded."""


@dataclass(frozen=True)
class SamplingSettings:
    """The sampling settings, one source: ``model.temperature``, ``model.top_p``,
    ``model.max_new_tokens``, ``model.val_temperature`` (the module recomputes log-probs at the
    training temperature, so it owns them all)."""

    temperature: float
    top_p: float
    max_new_tokens: int
    val_temperature: float

    def params(self, validation: bool, seed: int | None) -> SamplingParams:
        """The engine's parameters for a training or a validation collection."""
        temperature = self.val_temperature if validation else self.temperature
        return SamplingParams(temperature, self.top_p, self.max_new_tokens, seed=seed)


@dataclass(frozen=True)
class RolloutConfig:
    """Settings of the rollout loop.

    Args:
        env: Prompt style and action projection (an EnvSpec's prompt name: alfworld or webshop); null = the one data.env declares, which is the only value the DataModule accepts.
        max_steps: Episode step limit, the one source of the horizon: the DataModule also sets the env's own limit from it (ALFWorld 50, WebShop 15).
        history_length: (observation, action) pairs of history in the prompt (SPEC §6).
        max_prompt_tokens: Longest prompt in tokens (chat template included).
        truncation: What a longer prompt does: error (stop with a clear message) or left (keep its last tokens).
        action_mode: free (the model writes <think>/<action>; projection flags bad output) or constrained (decoding forced to <action> + an admissible action).
        gamma: Discount γ of the step returns.
        invalid_penalty: Subtracted from an invalid row's return and episode score (SPEC §2.2).
        exclude_actions: Constrained mode only: commands never offered (neither listed in the prompt nor decodable), e.g. [look, inventory, examine] so that a small model cannot loop on commands that never change the world. Empty = the paper's full admissible list.
        system_prompt: A system message before each step's user message; null = none, so the chat template adds its own default (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by Hugging Face", 16 tokens of every row; "" keeps an empty one).
    """

    env: str | None = None
    max_steps: int = 50
    history_length: int = 2
    max_prompt_tokens: int = 2048
    truncation: str = "error"
    action_mode: str = "free"
    gamma: float = 0.95
    invalid_penalty: float = 0.1
    exclude_actions: tuple[str, ...] = ()
    system_prompt: str | None = None

    def __post_init__(self) -> None:
        check("data.rollout", RolloutConfig, vars(self), {  # every value, at start-up
            "env": optional(one_of(*sorted(prompt_styles()))), "max_steps": count(1), "history_length": count(0),
            "max_prompt_tokens": count(1), "truncation": one_of(*TRUNCATION), "action_mode": one_of(*ACTION_MODES),
            "gamma": number(0, 1), "invalid_penalty": number(0, finite=True), "exclude_actions": TEXTS,
            "system_prompt": Rule(lambda v: v is None or isinstance(v, str), "null or a string"),
        })
        if self.exclude_actions and self.action_mode != "constrained":
            raise ValueError("data.rollout.exclude_actions only applies to action_mode: constrained (a free-text "
                             "model can write any command); remove it or set action_mode: constrained")


def tokenize_prompt(tokenizer: Any, text: str, cfg: RolloutConfig) -> list[int]:
    system = [] if cfg.system_prompt is None else [{"role": "system", "content": cfg.system_prompt}]
    ids = tokenizer.apply_chat_template([*system, {"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True)
    # transformers 4 returns a list (or a dict), 5 a BatchEncoding (a Mapping, not a dict).
    ids = list(ids["input_ids"] if isinstance(ids, Mapping) else ids)
    if len(ids) > cfg.max_prompt_tokens:
        if cfg.truncation == "error":
            raise ValueError(
                f"a prompt has {len(ids)} tokens > rollout.max_prompt_tokens={cfg.max_prompt_tokens}; "
                "raise max_prompt_tokens, shorten history_length, or set truncation: left"
            )
        ids = ids[-cfg.max_prompt_tokens :]
    return ids


def collect(
    pool: EnvPool,
    engine: RolloutEngine,
    tokenizer: Any,
    tasks: Sequence[tuple[str, int]],
    group_size: int,
    params: SamplingParams,
    cfg: RolloutConfig,
    progress: bool = True,
    description: str = "rollout",
) -> RolloutBatch:
    """Run one batch of grouped episodes and return its rows with G_t and episode scores."""
    t_start = time.perf_counter()
    n = len(tasks) * group_size
    style = prompt_style(cfg.env, "prompts")
    reset = pool.reset(tasks, group_size)
    failures: dict[str, int] = dict(reset.stats)
    starts = reset.results
    obs = [r.observation if r else "" for r in starts]
    admissible = [offered_actions(r.admissible, cfg.exclude_actions) if r else [] for r in starts]
    history: list[list[tuple[str, str]]] = [[] for _ in range(n)]
    # A slot whose reset was lost (its worker died twice) ends before its first step, recorded.
    active = [i for i in range(n) if starts[i] is not None]
    trajs = [
        {"won": False, "length": 0, "family": r.family if r else "unknown", "task_id": r.task_id if r else "",
         "task": r.task if r else "", "group": i // group_size, "end": "max_steps" if r else "reset_failed",
         "reward": 0.0}
        for i, r in enumerate(starts)
    ]
    rows: dict[str, list] = {k: [] for k in (
        "group_ids", "traj_ids", "steps", "prompt_ids", "response_ids", "anchors", "actions",
        "observations", "responses", "rewards", "dones", "is_action_valid", "noop", "families",
        "sampling_logprobs", "rollout_logprobs")}
    gen_s = env_s = 0.0
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("step {task.completed}/{task.total}"),
               TextColumn("active {task.fields[active]}"), TimeElapsedColumn())
    with Progress(*columns, disable=not progress, transient=True) as bar:
        task_bar = bar.add_task(description, total=cfg.max_steps, active=n)
        for t in range(cfg.max_steps):
            if not active:
                break
            prompts = [
                tokenize_prompt(tokenizer, build_prompt(style, trajs[i]["task"], obs[i], admissible[i],
                                                         history[i], t, cfg.history_length), cfg)
                for i in active
            ]
            t0 = time.perf_counter()
            allowed = ([constrained_choices(admissible[i], trajs[i]["task"], style.search_placeholder) for i in active]
                       if cfg.action_mode == "constrained" else None)
            gens = engine.generate(prompts, params.at_step(t), allowed=allowed)
            t1 = time.perf_counter()
            projected = [project_action(g.text, style, cfg.action_mode == "free") for g in gens]
            actions: list[str | None] = [None] * n
            for i, p in zip(active, projected):
                actions[i] = p.action
            stepped = pool.step(actions)
            for key, count in stepped.stats.items():
                failures[key] = failures.get(key, 0) + count
            results = [stepped.results[i] for i in active]
            env_s += time.perf_counter() - t1
            gen_s += t1 - t0
            still_active = []
            for i, prompt, gen, proj, res in zip(active, prompts, gens, projected, results):
                if "failure" in res.info:
                    # The env never processed this step (worker died, hung or raised): no row, the
                    # episode ends with the reason, counted in the batch's failure metrics.
                    trajs[i]["end"] = res.info["failure"]
                    continue
                done = res.done or res.won or t == cfg.max_steps - 1
                for key, value in (
                    ("group_ids", i // group_size), ("traj_ids", i), ("steps", t), ("prompt_ids", prompt),
                    ("response_ids", gen.token_ids), ("anchors", obs[i]), ("actions", proj.action),
                    ("observations", res.observation), ("responses", gen.text), ("rewards", res.reward),
                    ("dones", done), ("is_action_valid", proj.valid), ("noop", res.noop),
                    ("families", trajs[i]["family"]), ("sampling_logprobs", gen.logprobs),
                    ("rollout_logprobs", gen.policy_logprobs),
                ):
                    rows[key].append(value)
                traj = trajs[i]
                traj["length"] += 1
                traj["reward"] += res.reward
                traj.update({k: v for k, v in res.info.items() if k in ("score", "end")})
                history[i].append((obs[i], proj.action))
                obs[i], admissible[i] = res.observation, offered_actions(res.admissible, cfg.exclude_actions)
                if res.won:
                    traj["won"], traj["end"] = True, "won"
                elif res.done and traj["end"] == "max_steps":
                    traj["end"] = "done"
                if not done:
                    still_active.append(i)
            active = still_active
            bar.update(task_bar, completed=t + 1, active=len(active))
    logprobs = {k: rows.pop(k) for k in ("sampling_logprobs", "rollout_logprobs")}
    batch = RolloutBatch(
        **{k: v for k, v in rows.items() if k not in ("rewards", "dones", "is_action_valid", "noop")},
        # An engine reports log-probs for every row or for none (None then, not a list of Nones).
        **{k: (None if any(v is None for v in rows_lp) else rows_lp) for k, rows_lp in logprobs.items()},
        rewards=np.asarray(rows["rewards"], dtype=np.float64),
        dones=np.asarray(rows["dones"], dtype=bool),
        is_action_valid=np.asarray(rows["is_action_valid"], dtype=bool),
        noop=np.asarray(rows["noop"], dtype=bool),
        trajectories=trajs,
    )
    batch.step_returns = step_returns(batch.rewards, batch.traj_ids, batch.steps, batch.is_action_valid,
                                      cfg.gamma, cfg.invalid_penalty)
    batch.episode_scores = episode_scores(batch.rewards, batch.traj_ids, batch.is_action_valid, cfg.invalid_penalty)
    batch.traj_returns = trajectory_returns(batch.rewards, batch.traj_ids)
    batch.timings = {"generate_s": gen_s, "env_s": env_s, "rollout_s": time.perf_counter() - t_start}
    batch.env_failures = {k: float(v) for k, v in failures.items()}
    return batch
