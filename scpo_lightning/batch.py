"""The rollout batch: one row per env step (SPEC §1), plus what later stages add to it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class RolloutBatch:
    """Rows of one iteration's rollouts, in collection order (step-major, lock-step).

    Per row (SPEC §1): group and trajectory ids, step index, prompt and response token ids, the
    anchor (raw env observation the prompt was built from), the projected action, the observation
    the step returned, env reward, done, validity and no-op flags, token length, task family.
    ``step_returns`` (G_t) and ``episode_scores`` are filled by the collector; the SCPO callback
    sets ``shaped_returns`` (G̃_t) and ``scpo_stats``; the module reads G̃ when present. When the
    scorer failed on the batch, ``shaped_returns`` stays None (the batch trains as plain GiGPO)
    and ``scpo_stats`` says so (``shaped`` 0, ``scorer_failures`` 1).
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
    shaped_returns: np.ndarray | None = None
    #: Per row, per response token, as the engine sampled (engines.base.Generation): the log-prob
    #: under the sampling distribution (behaviour policy q) and under the policy pi at the rollout
    #: temperature. None when the engine reported none.
    sampling_logprobs: list[list[float]] | None = None
    rollout_logprobs: list[list[float]] | None = None
    scpo_credit: np.ndarray | None = None
    scpo_stats: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    #: Episodes ended by env/worker failures, per reason, and workers restarted (envs.workers).
    env_failures: dict[str, float] = field(default_factory=dict)
    #: Set by the SCPO callback while the scorer runs in the background; ``wait_shaping`` ends it
    #: (it waits at most the callback's scorer_timeout_s, and raises only with on_scorer_error: fail).
    pending_shaping: Callable[[], None] | None = None

    def wait_shaping(self) -> None:
        """Block until SCPO shaping (if started) has written ``shaped_returns``."""
        if self.pending_shaping is not None:
            finish, self.pending_shaping = self.pending_shaping, None
            finish()

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def lengths(self) -> np.ndarray:
        """Token length of each row (prompt + response), the balanced order's weights."""
        return np.array([len(p) + len(r) for p, r in zip(self.prompt_ids, self.response_ids)], dtype=np.int64)

    def episode_metrics(self) -> dict[str, float]:
        """Success rate, mean episode length, valid-action ratio and per-family success."""
        trajs = self.trajectories
        out = {
            "success": float(np.mean([t["won"] for t in trajs])) if trajs else 0.0,
            "episode_length": float(np.mean([t["length"] for t in trajs])) if trajs else 0.0,
            "valid_action_ratio": float(self.is_action_valid.mean()) if len(self) else 0.0,
        }
        for family in sorted({t["family"] for t in trajs}):
            won = [t["won"] for t in trajs if t["family"] == family]
            out[f"success/{family}"] = float(np.mean(won))
        if any("score" in t for t in trajs):  # graded envs: an episode that bought nothing scores 0
            out["score"] = 100.0 * float(np.mean([t.get("score", 0.0) for t in trajs]))
        return out
