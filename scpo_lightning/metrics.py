"""What the app logs per iteration, each family with how it combines over ranks: the one home.

- ``rollout/`` (episode metrics) and ``val/``: computed from the trajectories of *all* ranks, so
  they are exact, not averages of per-rank averages. ``episode_values`` is the per-episode
  definition both training rollouts and validation use.
- ``scpo/``: SCPO's statistics of a batch (``SCPO_STATS`` names every one: its meaning and its
  reduction; the shaper, the credit and the callback write them, the logger checks them here).
- ``time/`` (the slowest rank's: the iteration waits for it), ``env_failures/`` (counts add up).
- ``train/`` and the log-prob mismatch: ``update_metrics.py``, all-reduced as they are computed.

Collective where it says so: every rank calls it at the same point; no-ops on one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scpo_lightning.distributed import gather_objects, is_distributed

#: Every ``scpo/<name>`` statistic: how per-rank values combine (sum, max, mean) and what it is.
SCPO_STATS: dict[str, tuple[str, str]] = {
    "groups": ("sum", "groups in the batch"),
    "groups_with_reference": ("sum", "groups whose failed trajectories got a success reference"),
    "groups_with_buffer_reference": ("sum", "of those, groups whose reference came from the success buffer"),
    "buffer_lookups": ("sum", "groups without a successful sibling that asked the buffer"),
    "buffer_hit_rate": ("mean", "groups_with_buffer_reference / buffer_lookups"),
    "buffer_size": ("mean", "successes the buffer holds after this batch"),
    "buffer_tasks": ("mean", "distinct tasks in the buffer"),
    "failed_trajectories": ("sum", "failed trajectories in groups with a reference"),
    "pairs_requested": ("sum", "(failed step, reference step) pairs the matcher needs"),
    "pairs_distinct": ("sum", "distinct text pairs among them"),
    "pairs_scored": ("sum", "pairs the scorer scored (not from its cache)"),
    "cache_hits": ("sum", "pairs answered by the scorer's cache"),
    "credited_steps_per_failed": ("mean", "credited steps per failed trajectory"),
    "mean_aux_reward": ("mean", "mean credit r per credited step"),
    "shaped": ("mean", "1 when the batch was shaped, 0 when its scorer failed"),
    "scorer_failures": ("sum", "batches whose scorer raised or timed out"),
    "scorer_failures_total": ("sum", "the same, since the run started"),
    "scorer_s": ("max", "seconds the scorer ran"),
    "plan_s": ("max", "seconds planning the pairs took"),
    "wait_s": ("max", "seconds the update waited for the scorer"),
}

#: The other per-rank families, by key prefix.
_PREFIX_RULES = (("env_failures/", "sum"), ("val/env_failures/", "sum"), ("time/", "max"))


def reduce_rule(key: str) -> str:
    """``sum``, ``max`` or ``mean``: how a logged per-rank scalar combines over ranks."""
    if key.startswith("scpo/"):
        return SCPO_STATS[key[5:]][0]
    return next((op for prefix, op in _PREFIX_RULES if key.startswith(prefix)), "mean")


def scpo_metrics(stats: dict[str, float]) -> dict[str, float]:
    """``scpo/<name>`` for a batch's SCPO statistics; a name not in ``SCPO_STATS`` is refused."""
    unknown = sorted(set(stats) - set(SCPO_STATS))
    if unknown:
        raise KeyError(f"SCPO statistics {unknown} are not declared; add each to scpo_lightning/metrics.py "
                       "SCPO_STATS with its cross-rank reduction")
    return {f"scpo/{k}": v for k, v in stats.items()}


def reduce_scalars(local: dict[str, float]) -> dict[str, float]:
    """Combine per-rank scalars with ``reduce_rule``; keys missing on a rank count as absent there.

    Collective. Keys may differ between ranks (a rank whose scorer failed has fewer ``scpo/``
    keys), so the dicts are gathered rather than all-reduced.
    """
    if not is_distributed():
        return dict(local)
    per_rank = gather_objects(dict(local))
    out = {}
    for key in sorted({k for d in per_rank for k in d}):
        values = [float(d[key]) for d in per_rank if key in d]
        op = reduce_rule(key)
        out[key] = sum(values) if op == "sum" else max(values) if op == "max" else sum(values) / len(values)
    return out


def episode_values(traj: dict[str, Any], scored: bool) -> dict[str, float]:
    """One episode's contribution: success (overall and for its family), length and, for graded
    envs, its score in percent (an episode that never bought anything scores 0, as in WebShop's
    own evaluation)."""
    won = float(bool(traj["won"]))
    out = {"success": won, f"success/{traj['family']}": won, "episode_length": float(traj["length"])}
    if scored:
        out["score"] = 100.0 * float(traj.get("score") or 0.0)
    return out


def episode_metrics(trajectories: Sequence[dict[str, Any]], valid: Sequence[bool]) -> dict[str, float]:
    """Means of ``episode_values`` over the episodes (families: over their own episodes) and the
    valid-action ratio over the rows. Graded when any episode carries a score."""
    scored = any(t.get("score") is not None for t in trajectories)
    sums: dict[str, list[float]] = {}
    for traj in trajectories:
        for key, value in episode_values(traj, scored).items():
            sums.setdefault(key, []).append(value)
    out = {"success": 0.0, "episode_length": 0.0}
    out.update({k: sum(v) / len(v) for k, v in sorted(sums.items())})
    out["valid_action_ratio"] = sum(bool(v) for v in valid) / len(valid) if len(valid) else 0.0
    return out


def rollout_metrics(trajectories: Sequence[dict[str, Any]], valid: Sequence[bool]) -> dict[str, float]:
    """``episode_metrics`` over the trajectories and rows of all ranks (each passes its own; collective)."""
    if not is_distributed():
        return episode_metrics(trajectories, valid)
    mine = ([{k: t.get(k) for k in ("won", "length", "family", "score")} for t in trajectories],
            [bool(v) for v in valid])
    trajs: list[dict[str, Any]] = []
    rows: list[bool] = []
    for part, flags in gather_objects(mine):
        trajs.extend(part)
        rows.extend(flags)
    return episode_metrics(trajs, rows)


def batch_metrics(batch: Any) -> dict[str, float]:
    """A rollout batch's ``rollout/``, ``scpo/``, ``time/`` and ``env_failures/`` scalars over
    all ranks' batches (collective: every rank calls it)."""
    local = scpo_metrics(batch.scpo_stats)
    local.update({f"time/{k}": v for k, v in batch.timings.items()})
    local.update({f"env_failures/{k}": v for k, v in batch.env_failures.items()})
    rollout = rollout_metrics(batch.trajectories, batch.is_action_valid)
    return {f"rollout/{k}": v for k, v in rollout.items()} | reduce_scalars(local)
