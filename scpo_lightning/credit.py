"""The SCPO shaper's second phase (SPEC §3.5-3.10): pair scores in, credit and its record out.

``apply_plan`` runs the monotonic matcher on every failed sibling of a ``ShapingPlan`` and
returns a ``ShapingResult``: the credit r per row, G̃ = G + α r when step returns are given, the
batch's SCPO statistics and, per failed sibling, the path the matcher took (``CreditPath``). The
result is the one hand-off from shaping to every later stage: the estimator reads
``shaped_returns``, the logger draws the heatmap from ``paths`` and logs ``stats``; nothing
recomputes the credit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from scpo_lightning._arrays import to_numpy
from scpo_lightning.scorers.base import StepScorer
from scpo_lightning.scpo import check_thresholds, match, semantic_prefix_table
from scpo_lightning.scpo_config import SCPOConfig
from scpo_lightning.shaper import ShapingPlan, plan_shaping


@dataclass(frozen=True)
class CreditPath:
    """One failed sibling's match against its reference, as the matcher made it (SPEC §3.10)."""

    group: Any
    rows: np.ndarray  # batch rows of the sibling's filtered steps, chronological (ℓ)
    sim: np.ndarray  # m×ℓ: M[u, v] = f(reference step u, failed step v)
    positions: np.ndarray  # per failed step, the reference position it was credited at (-1: none)
    order: np.ndarray  # the processing order, a permutation of range(ℓ)
    credit: float  # Σ r over the sibling's steps
    from_buffer: bool = False


@dataclass(frozen=True)
class ShapingResult:
    """One batch's SCPO shaping, as the module, the logger and the benchmarks read it.

    ``credit`` is None (and ``shaped_returns`` too) when the scorer failed on the batch: it then
    trains as plain GiGPO and ``stats`` says so (``shaped`` 0, ``scorer_failures`` 1).
    """

    credit: np.ndarray | None  # r_t ∈ [0, 1] per row (0 outside failed siblings)
    shaped_returns: np.ndarray | None  # G̃_t = G_t + α r_t per row (None without step returns)
    stats: dict[str, float]
    paths: tuple[CreditPath, ...] = ()
    theta: float = 0.6  # the θ the paths were matched at (the heatmap tints cells at or above it)

    def with_stats(self, **extra: float) -> ShapingResult:
        return ShapingResult(self.credit, self.shaped_returns, {**self.stats, **extra}, self.paths, self.theta)


def apply_plan(plan: ShapingPlan, scores: Any, config: SCPOConfig, step_returns: Any = None) -> ShapingResult:
    """Run the monotonic matcher on every failed sibling (SPEC §3.6) and shape G (§3.8).

    ``scores[i]`` scores ``plan.pairs[i]``. Rows of successful siblings, filtered rows and rows of
    groups without a reference get r = 0. With ``step_returns`` (G per row) the result carries
    G̃ = G + α r; only the step-level advantage may see it (§3.9).
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.shape != (len(plan.pairs),):
        raise ValueError(f"scorer returned {s.shape} scores for {len(plan.pairs)} pairs")
    if not (np.all(s >= 0.0) and np.all(s <= 1.0)):  # also catches NaN
        raise ValueError("scorer scores must lie in [0, 1] (normalised scorer output)")
    check_thresholds(config.theta, config.lam)
    credit = np.zeros(plan.n_rows)
    paths, credited = [], 0
    tables: dict[int, np.ndarray] = {}  # the reference's prefix table, built once per group
    for b in plan.blocks:
        if b.sim_pairs.size == 0:
            continue  # a sibling with no kept steps, or a reference without any: no credit
        pi = tables.get(id(b.ref_pairs))
        if pi is None:
            pi = tables[id(b.ref_pairs)] = semantic_prefix_table(s[b.ref_pairs], config.theta)
        sim = s[b.sim_pairs]
        r, positions = match(sim, pi, config.theta, config.lam, b.order.tolist(), config.monotonic)
        credit[b.rows] = r
        paths.append(CreditPath(b.group, b.rows, sim, positions, b.order, float(r.sum()), b.from_buffer))
        credited += int(np.count_nonzero(r))
    stats = dict(plan.stats)
    n_failed = plan.stats.get("failed_trajectories", 0.0)
    stats["credited_steps_per_failed"] = credited / n_failed if n_failed else 0.0
    stats["mean_aux_reward"] = (
        float(config.alpha * credit[plan.failed_rows].mean()) if len(plan.failed_rows) else 0.0
    )
    shaped = None if step_returns is None else _returns(step_returns, plan.n_rows) + config.alpha * credit
    return ShapingResult(credit, shaped, stats, tuple(paths), config.theta)


def scpo_shape(step_returns: Any, *, scorer: StepScorer, config: SCPOConfig, **rows: Any) -> ShapingResult:
    """Plan, score and match in one call: G̃ = G + α r (SPEC §3.8).

    ``rows`` are the keyword arguments of ``plan_shaping`` (``rng`` included). Only the
    step-level advantage may see G̃; episode scores and success labels stay unshaped (§3.9).
    """
    plan = plan_shaping(config=config, **rows)
    _returns(step_returns, plan.n_rows)  # before the scorer's work
    scores = scorer.score(plan.pairs) if plan.pairs else np.zeros(0)
    return apply_plan(plan, scores, config, step_returns)


def _returns(step_returns: Any, n_rows: int) -> np.ndarray:
    g = to_numpy(step_returns, "step_returns")
    if len(g) != n_rows:
        raise ValueError(f"`step_returns` has {len(g)} rows; the batch has {n_rows}")
    return g
