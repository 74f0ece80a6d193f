"""The rollout batch: one row per env step (SPEC §1), plus what later stages add to it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from scpo_lightning.credit import ShapingResult


@dataclass
class RolloutBatch:
    """Rows of one iteration's rollouts, in collection order (step-major, lock-step).

    Per row (SPEC §1): group and trajectory ids, step index, prompt and response token ids, the
    anchor (raw env observation the prompt was built from), the projected action, the observation
    the step returned, env reward, done, validity and no-op flags, token length, task family.
    ``step_returns`` (G_t) and ``episode_scores`` are filled by the collector.

    SCPO's result is ``shaping``, a ``scpo_lightning.credit.ShapingResult`` (credit, G̃, stats,
    the matcher's paths): the PPO epoch stores what its ``scpo_lightning.shaping.ShapingSource``
    returns just before the advantages. ``shaped_returns``, ``scpo_credit`` and ``scpo_stats``
    read it. When the scorer failed on the batch the result has no credit (the batch trains as
    plain GiGPO) and its stats say so (``shaped`` 0, ``scorer_failures`` 1).
    """

    group_ids: list[int]
    traj_ids: list[int]
    steps: list[int]
    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    anchors: list[str]
    actions: list[str]
    observations: list[str]
    responses: list[str]
    rewards: np.ndarray
    dones: np.ndarray
    is_action_valid: np.ndarray
    noop: np.ndarray
    families: list[str]
    #: Per trajectory (index = traj id): won, length, family, task id, why it ended.
    trajectories: list[dict[str, Any]] = field(default_factory=list)
    step_returns: np.ndarray | None = None
    episode_scores: np.ndarray | None = None
    traj_returns: np.ndarray | None = None
    #: Per row, per response token, as the engine sampled (engines.base.Generation): the log-prob
    #: under the sampling distribution (behaviour policy q) and under the policy pi at the rollout
    #: temperature. None when the engine reported none.
    sampling_logprobs: list[list[float]] | None = None
    rollout_logprobs: list[list[float]] | None = None
    #: SCPO's result, once the PPO epoch has it (None: no SCPO callback, or not yet).
    shaping: ShapingResult | None = None
    timings: dict[str, float] = field(default_factory=dict)
    #: Episodes ended by env/worker failures, per reason, and workers restarted (envs.workers).
    env_failures: dict[str, float] = field(default_factory=dict)
    #: Dynamic sampling's counts over all ranks (groups collected, dropped, kept, retries; see
    #: scpo_lightning.dynamic_sampling); empty without it.
    sampling_stats: dict[str, float] = field(default_factory=dict)
    @property
    def shaped_returns(self) -> np.ndarray | None:
        """G̃_t per row, or None (no SCPO, or its scorer failed on this batch)."""
        return None if self.shaping is None else self.shaping.shaped_returns

    @property
    def scpo_credit(self) -> np.ndarray | None:
        """SCPO's credit r_t per row, or None."""
        return None if self.shaping is None else self.shaping.credit

    @property
    def scpo_stats(self) -> dict[str, float]:
        """SCPO's statistics of this batch (empty without SCPO)."""
        return {} if self.shaping is None else self.shaping.stats

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def lengths(self) -> np.ndarray:
        """Token length of each row (prompt + response), the balanced order's weights."""
        return np.array([len(p) + len(r) for p, r in zip(self.prompt_ids, self.response_ids)], dtype=np.int64)

    def episode_metrics(self) -> dict[str, float]:
        """This batch's ``scpo_lightning.metrics.episode_metrics`` (success, length, valid actions, per family)."""
        from scpo_lightning.metrics import episode_metrics

        return episode_metrics(self.trajectories, self.is_action_valid)

    def select_groups(self, groups: Sequence[int]) -> RolloutBatch:
        """The rows and trajectories of ``groups`` only, numbered as ``collect`` numbers them:
        group ``groups[k]`` becomes group k, trajectories 0.. group by group, rows in their order."""
        if self.shaping is not None:
            raise ValueError("select_groups is for collected batches, before SCPO shaping")
        new_group = {int(g): k for k, g in enumerate(groups)}
        trajs = sorted((i for i, t in enumerate(self.trajectories) if t["group"] in new_group),
                       key=lambda i: (new_group[self.trajectories[i]["group"]], i))
        new_traj = {old: k for k, old in enumerate(trajs)}
        rows = [i for i, g in enumerate(self.group_ids) if g in new_group]
        picked = {f.name: _take(getattr(self, f.name), rows) for f in fields(self) if f.name in _ROW_FIELDS}
        picked["group_ids"] = [new_group[g] for g in picked["group_ids"]]
        picked["traj_ids"] = [new_traj[t] for t in picked["traj_ids"]]
        trajectories = [{**self.trajectories[i], "group": new_group[self.trajectories[i]["group"]]} for i in trajs]
        return RolloutBatch(**picked, trajectories=trajectories, timings=dict(self.timings),
                            env_failures=dict(self.env_failures))

    @staticmethod
    def concat(parts: Sequence[RolloutBatch]) -> RolloutBatch:
        """Collected batches as one: each part's groups and trajectories numbered after the
        previous parts' (rows keep their order); timings and failure counts add up."""
        if not parts:
            raise ValueError("concat needs at least one batch")
        ids: dict[str, list] = {"group_ids": [], "traj_ids": []}
        trajectories: list[dict[str, Any]] = []
        groups = 0
        for part in parts:
            if part.shaping is not None:
                raise ValueError("concat is for collected batches, before SCPO shaping")
            ids["group_ids"] += [g + groups for g in part.group_ids]
            ids["traj_ids"] += [t + len(trajectories) for t in part.traj_ids]
            trajectories += [{**t, "group": t["group"] + groups} for t in part.trajectories]
            groups += 1 + max((t["group"] for t in part.trajectories), default=-1)
        joined = {name: _join([getattr(p, name) for p in parts]) for name in _ROW_FIELDS if name not in ids}
        return RolloutBatch(**ids, **joined, trajectories=trajectories, timings=_add([p.timings for p in parts]),
                            env_failures=_add([p.env_failures for p in parts]))


#: Fields with one entry per row (the rest describe the batch or its trajectories).
_ROW_FIELDS = ("group_ids", "traj_ids", "steps", "prompt_ids", "response_ids", "anchors", "actions", "observations",
               "responses", "rewards", "dones", "is_action_valid", "noop", "families", "step_returns",
               "episode_scores", "traj_returns", "sampling_logprobs", "rollout_logprobs")


def _take(value: Any, rows: list[int]) -> Any:
    if value is None:
        return None
    return value[np.asarray(rows, dtype=np.int64)] if isinstance(value, np.ndarray) else [value[i] for i in rows]


def _add(counts: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in counts:
        for key, value in part.items():
            out[key] = out.get(key, 0.0) + value
    return out


def _join(values: list[Any]) -> Any:
    """Row fields of several batches end to end; None where any batch has none (log-probs: all or none)."""
    if any(v is None for v in values):
        return None
    return np.concatenate(values) if isinstance(values[0], np.ndarray) else [x for v in values for x in v]
