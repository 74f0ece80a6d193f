"""The scalars one PPO update logs, over all ranks: per-iteration means of the per-step values,
advantage statistics, phase times, and the rollout-vs-train log-prob mismatch.

Collective: every rank calls each function at the same point (tiny all-reduces; no-ops on one
process). The module hands over plain values; nothing here touches a model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from scpo_lightning import distributed
from scpo_lightning.logprobs import mismatch_sums

PHASES = ("time/logprobs_s", "time/shaping_wait_s", "time/advantage_s", "time/update_s")


def iteration_metrics(steps: Sequence[dict[str, float]], parts: Sequence[str], adv: torch.Tensor, marks: Sequence[float],
                      skipped_total: int, device: torch.device | str) -> dict[str, float]:
    """``train/`` and ``time/`` scalars of one iteration.

    ``steps``: per optimizer step, the global loss ``parts`` (already summed over ranks), the grad
    norm and whether the step was applied; ``marks``: the phase boundaries' clock readings, whose
    differences become ``PHASES`` (the slowest rank's). Advantage statistics cover every row.
    """
    a = adv.double()
    a_sum, a_sq, rows = distributed.all_reduce([a.sum(), (a * a).sum(), len(a)], "sum", device)
    mean = a_sum / rows if rows else 0.0
    std = math.sqrt(max(a_sq - rows * mean * mean, 0.0) / (rows - 1)) if rows > 1 else 0.0
    applied = [s for s in steps if s["applied"]]
    metrics = {f"train/{k}": sum(s[k] for s in steps) / len(steps) for k in parts} if steps else {}
    if applied:
        metrics["train/grad_norm"] = sum(s["grad_norm"] for s in applied) / len(applied)
        metrics["train/clip_frac_last"] = applied[-1]["clip_frac"]  # the most off-policy mini-batch
    times = distributed.all_reduce([b - a for a, b in zip(marks, marks[1:])], "max", device)
    metrics.update(dict(zip(PHASES, times)))
    metrics.update({
        "train/optimizer_steps": float(len(applied)), "train/skipped_steps": float(len(steps) - len(applied)),
        "train/skipped_steps_total": float(skipped_total),
        "train/advantage_mean": mean, "train/advantage_std": std, "train/rows": float(rows),
    })
    return metrics


def mismatch_metrics(rollout: Sequence[torch.Tensor], fresh: Sequence[torch.Tensor | None],
                     sampling: Sequence[Sequence[float]] | None, device: torch.device | str) -> dict[str, float]:
    """``rollout/logprob_*``: the engine's log-probs of π against the trainer's, on the rows whose
    ``fresh`` (trainer, before the update) entry is set; ``sampling`` adds the behaviour policy's gap."""
    rows = [i for i, f in enumerate(fresh) if f is not None]
    q = [torch.tensor(sampling[i]) for i in rows] if sampling is not None else []
    abs_sum, k3_sum, gap_sum, count, largest = mismatch_sums([rollout[i] for i in rows], [fresh[i] for i in rows], q)
    total = distributed.all_reduce([abs_sum, k3_sum, gap_sum, count], "sum", device)
    (largest,) = distributed.all_reduce([largest], "max", device)
    tokens = max(total[3], 1.0)
    out = {"rollout/logprob_diff_mean": total[0] / tokens, "rollout/logprob_diff_max": largest,
           "rollout/logprob_k3": total[1] / tokens}
    if sampling is not None:
        out["rollout/sampling_logprob_gap"] = total[2] / tokens  # mean log q − log π ≥ 0 (−log Z_t)
    return out
