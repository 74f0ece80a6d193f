"""Dynamic sampling (DAPO; verl-agent's ``filter_groups``): only groups that carry a signal train.

A group whose rows all have the same episode score has A_E = 0 on every row, in both norm modes
(SPEC §2.4), so its outcome teaches nothing. Such groups are dropped from the update, with one
exception: SCPO. An all-failed group that SCPO will match against a reference (a buffered success
of its task, SCPOCallback reference_source: buffer | both) gets step credit, so it is kept. The
rule is decided before any scoring, from the references alone (``SCPOCallback.creditable_groups``):
whether the matcher then finds a step to credit is known only after the scorer ran, and waiting
for it would serialise scoring before the update. An all-successful group has no failed sibling
to credit and is always dropped when its scores are equal.

With ``top_up`` more groups are collected (new tasks, drawn like the first) until the batch holds
the configured number of informative groups, at most ``max_retries`` times; the first informative
groups in collection order are kept, the rest are surplus. Short of the target after the retries,
the batch trains on the groups it has (possibly none: an iteration without an update).

Differences from verl-agent 796ed31 (facts from its rollout loop): it compares each trajectory's
total env reward; here the per-row episode score (R(τ) minus the row's invalid penalty) is
compared, because that is what A_E normalises: an all-failed group with invalid steps still has
an episode signal. Its last try keeps every group unfiltered; here the last try is filtered too.
Pure logic; the DataModule supplies the collections and the cross-rank agreement.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from envs.common.rules import FLAG, check, count
from scpo_lightning.batch import RolloutBatch

#: The counts a batch's ``sampling_stats`` holds (summed over ranks; ``retries`` is every rank's).
COUNTS = ("groups_collected", "groups_zero_variance", "groups_kept_for_scpo", "groups_surplus", "groups_dropped",
          "groups_kept", "groups_short", "retries", "trajectories_collected", "successes_collected")


@dataclass(frozen=True)
class DynamicSampling:
    """Drop groups whose episode scores do not vary (DAPO's dynamic sampling).

    Args:
        top_up: Collect more groups (each retry draws data.groups_per_batch new tasks) until the batch holds data.groups_per_batch informative groups; false = train on the informative groups of the one collection.
        max_retries: Extra collections at most per iteration when topping up; still short after them, the batch trains on the informative groups it has.
    """

    top_up: bool = True
    max_retries: int = 3

    def __post_init__(self) -> None:
        check("data.dynamic_sampling", DynamicSampling, vars(self), {"top_up": FLAG, "max_retries": count(1)})


def zero_variance_groups(batch: RolloutBatch) -> set[int]:
    """Groups whose rows' episode scores are all equal (A_E = 0 on each), or that have no rows."""
    groups = {int(t["group"]) for t in batch.trajectories}
    if not len(batch):
        return groups
    g = np.asarray(batch.group_ids, dtype=np.int64)
    size = int(g.max()) + 1
    low, high = np.full(size, np.inf), np.full(size, -np.inf)
    np.minimum.at(low, g, batch.episode_scores)
    np.maximum.at(high, g, batch.episode_scores)
    return groups - {int(k) for k in np.flatnonzero(high > low)}


def informative_batch(
    first: RolloutBatch,
    collect_more: Callable[[int, bool], RolloutBatch | None],
    target: int,
    config: DynamicSampling,
    creditable: Callable[[RolloutBatch], set[int]],
    any_rank: Callable[[bool], bool] = bool,
) -> tuple[RolloutBatch, dict[str, float]]:
    """This rank's informative groups of ``first`` and, topping up, of later collections.

    ``collect_more(retry, needed)`` draws the next tasks and returns their batch, or None where
    this rank has enough (``needed`` False; it still takes part in the collective steps);
    ``creditable(batch)``: the groups SCPO will credit; ``any_rank(flag)``: whether ``flag`` holds
    on some rank (all ranks retry together). Returns the batch and this rank's counts.
    """
    counts = dict.fromkeys(COUNTS, 0.0)
    parts, kept, batch, retry = [], 0, first, 0
    while True:
        if batch is not None:
            groups = sorted({int(t["group"]) for t in batch.trajectories})
            flat = zero_variance_groups(batch)
            rescued = creditable(batch) & flat
            informative = [g for g in groups if g not in flat or g in rescued]
            keep = informative[: target - kept]
            counts["groups_collected"] += len(groups)
            counts["groups_zero_variance"] += len(flat)
            counts["groups_kept_for_scpo"] += len(rescued.intersection(keep))
            counts["groups_surplus"] += len(informative) - len(keep)
            counts["trajectories_collected"] += len(batch.trajectories)
            counts["successes_collected"] += sum(bool(t["won"]) for t in batch.trajectories)
            parts.append(batch.select_groups(keep))
            kept += len(keep)
        if not config.top_up or retry == config.max_retries or not any_rank(kept < target):
            break
        retry += 1
        batch = collect_more(retry, kept < target)
    counts["groups_dropped"] = counts["groups_collected"] - kept
    counts["groups_kept"], counts["groups_short"], counts["retries"] = float(kept), float(target - kept), float(retry)
    return RolloutBatch.concat(parts), counts
