"""The SCPO shaper's first phase for a whole rollout batch (SPEC §3.1-3.4): the plan.

Two phases, so the scorer can run while the trainer does other work: ``plan_shaping`` finds each
group's reference and failed siblings and collects every distinct text pair the batch needs;
the scorer scores them; ``scpo_lightning.credit.apply_plan`` runs the monotonic matcher per
failed sibling and returns the credit r per row (``credit.scpo_shape`` does all of it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scpo_lightning._arrays import check_lengths, factorize, to_numpy
from scpo_lightning.ordering import processing_order
from scpo_lightning.reference_buffer import BufferedReference
from scpo_lightning.scpo_config import SCPOConfig, looks_in_buffer, reference_kind


@dataclass(frozen=True)
class SiblingBlock:
    """One failed sibling against its group's reference: rows and where its pair scores sit."""

    group: Any
    ref_rows: np.ndarray  # batch row indices of the filtered reference steps, chronological (m; none when from_buffer)
    rows: np.ndarray  # batch row indices of the failed sibling's filtered steps, chronological (ℓ)
    order: np.ndarray  # processing order: a permutation of range(ℓ)
    sim_pairs: np.ndarray  # m×ℓ indices into ShapingPlan.pairs
    ref_pairs: np.ndarray  # m×m indices into ShapingPlan.pairs (one array shared by the group's blocks)
    from_buffer: bool = False  # the reference is a buffered success of an earlier iteration


@dataclass
class ShapingPlan:
    """Everything the matcher needs except the scores of ``pairs``."""

    n_rows: int
    pairs: list[tuple[str, str]]  # distinct (reference text, candidate text) pairs to score
    blocks: list[SiblingBlock]
    pairs_requested: int  # pairs the paper's per-sibling scoring would request (M* once per group)
    failed_rows: np.ndarray  # rows of failed siblings in groups with a reference
    stats: dict[str, float] = field(default_factory=dict)
    #: Per successful trajectory, in batch order: (group id, filtered step texts, steps): what a
    #: success buffer stores, so that a buffered reference is compared by the very same texts.
    successes: list[tuple[Any, tuple[str, ...], int]] = field(default_factory=list)

    def matrices(self, scores: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
        """(M, M*) of one failed sibling, e.g. for the credit heatmap."""
        b = self.blocks[block]
        return scores[b.sim_pairs], scores[b.ref_pairs]


def step_texts(actions: Sequence[str], observations: Sequence[str], separator: str = " || ") -> list[str]:
    """x_t = action || observation: the projected action and the observation it produced."""
    return [f"{a}{separator}{o}" for a, o in zip(actions, observations)]


def _pick_reference(members: list[int], traj_len: np.ndarray, how: str, rng) -> int:
    """τ*: the longest successful sibling (ties: the first), or the shortest, or a random one."""
    lengths = traj_len[members]
    if how == "longest":
        return members[int(np.argmax(lengths))]  # argmax returns the first maximum
    if how == "shortest":
        return members[int(np.argmin(lengths))]
    if rng is None:
        raise ValueError("SCPO config reference='random' needs a numpy `rng`")
    return members[int(rng.integers(len(members)))]


def plan_shaping(
    *,
    group_ids: Sequence[Any],
    traj_ids: Sequence[Any],
    steps: Any,
    traj_returns: Any,
    actions: Sequence[str],
    observations: Sequence[str],
    is_action_valid: Any,
    noop: Any,
    lengths: Any = None,
    config: SCPOConfig,
    rng: np.random.Generator | None = None,
    buffered: Mapping[Any, Sequence[BufferedReference]] | None = None,
) -> ShapingPlan:
    """Find references and failed siblings and collect the distinct text pairs to score.

    Per row: its group and trajectory, step index, R(τ) of its trajectory, the projected action,
    the observation the step returned, validity and no-op flags, and (for ``order='balanced'``)
    its token length. Rows of a trajectory are expected in step order in the batch, as the
    collector produces them.

    ``buffered`` maps a group id to the stored successes of its task (newest first), used as
    ``reference_kind`` says; among them the reference is picked by ``config.reference`` exactly as
    among successful siblings. A buffered reference is not in the batch: it takes no part in the
    balanced order, which comes from this batch's rows alone.
    """
    n = check_lengths(
        group_ids=group_ids, traj_ids=traj_ids, steps=steps, traj_returns=traj_returns,
        actions=actions, observations=observations, is_action_valid=is_action_valid, noop=noop,
    )
    t = to_numpy(steps, "steps", dtype=np.int64)
    ret = to_numpy(traj_returns, "traj_returns")
    keep = to_numpy(is_action_valid, "is_action_valid", dtype=bool) & ~to_numpy(noop, "noop", dtype=bool)
    g_codes, _ = factorize(group_ids, "group_ids")
    first_row = np.unique(g_codes, return_index=True)[1]
    t_codes, n_traj = factorize(traj_ids, "traj_ids")
    traj_group = np.empty(n_traj, dtype=np.int64)
    traj_group[t_codes] = g_codes
    traj_ret = np.empty(n_traj)
    traj_ret[t_codes] = ret
    if np.any(traj_group[t_codes] != g_codes) or np.any(traj_ret[t_codes] != ret):
        raise ValueError("rows of one trajectory carry different `group_ids` or `traj_returns`")
    traj_len = np.bincount(t_codes, minlength=n_traj)
    success = traj_ret > config.tau_succ

    perm = processing_order(config.order, lengths, n, config.order_partitions, rng, traj_ids=traj_ids, steps=t)
    rank = np.empty(n, dtype=np.int64)
    rank[perm] = np.arange(n)

    # Filtered rows of each trajectory, chronological; texts of kept rows as integer ids.
    by_traj = np.lexsort((t, t_codes))
    by_traj = by_traj[keep[by_traj]]
    bounds = np.searchsorted(t_codes[by_traj], np.arange(n_traj + 1))
    kept = [by_traj[bounds[i] : bounds[i + 1]] for i in range(n_traj)]
    members_of: dict[int, list[int]] = {}
    for traj in range(n_traj):  # trajectory codes follow first appearance: "the first" is stable
        members_of.setdefault(int(traj_group[traj]), []).append(traj)

    # Each group's reference, in group order (reference='random' draws from rng group by group):
    # a successful sibling (its trajectory code) or a buffered success of the group's task.
    chosen: dict[int, tuple[str, Any]] = {}
    lookups = 0
    for group, members in members_of.items():
        winners = [i for i in members if success[i]]
        stored = (buffered or {}).get(group_ids[int(first_row[group])], ())
        lookups += looks_in_buffer(bool(winners), config.reference_source)
        kind = reference_kind(bool(winners), bool(stored), config.reference_source)
        if kind == "sibling":
            chosen[group] = (kind, _pick_reference(winners, traj_len, config.reference, rng))
        elif kind == "buffer":
            stored_len = np.array([r.length for r in stored], dtype=np.int64)
            chosen[group] = (kind, stored[_pick_reference(list(range(len(stored))), stored_len, config.reference, rng)])

    # Texts of kept rows, then of the buffered references, as integer ids: a buffered text equal
    # to a batch text gets its id, so the scorer sees the very pairs a sibling reference would give.
    texts = step_texts([actions[i] for i in by_traj], [observations[i] for i in by_traj], config.separator)
    extra = [x for kind, ref in chosen.values() if kind == "buffer" for x in ref.texts]
    codes, n_texts = factorize(texts + extra, "step texts")
    text_id = np.full(n, -1, dtype=np.int64)
    text_id[by_traj] = codes[: len(texts)]
    distinct_texts = list(dict.fromkeys(texts + extra))
    extra_codes, extra_at = codes[len(texts) :], 0

    keys, blocks_raw, requested, n_failed, from_buffer = [], [], 0, 0, 0
    failed = np.zeros(n_traj, dtype=bool)  # failed siblings in groups with a reference
    for group, (kind, ref) in chosen.items():
        if kind == "sibling":
            ref_rows = kept[ref]
            ref_tid = text_id[ref_rows]
        else:
            from_buffer += 1
            ref_rows = np.zeros(0, dtype=np.int64)  # not in this batch
            ref_tid, extra_at = extra_codes[extra_at : extra_at + len(ref.texts)], extra_at + len(ref.texts)
        losers = [i for i in members_of[group] if not success[i]]
        n_failed += len(losers)
        failed[losers] = True
        if not losers or len(ref_tid) == 0:
            continue
        keys.append((ref_tid[:, None] * n_texts + ref_tid[None, :]).ravel())
        requested += ref_tid.size**2
        ref_key = len(keys) - 1
        for w in losers:
            rows = kept[w]
            keys.append((ref_tid[:, None] * n_texts + text_id[rows][None, :]).ravel())
            requested += keys[-1].size
            order = np.argsort(rank[rows], kind="stable")
            blocks_raw.append((group, ref_rows, len(ref_tid), rows, order, len(keys) - 1, ref_key, kind == "buffer"))

    flat = np.concatenate(keys) if keys else np.zeros(0, dtype=np.int64)
    distinct, inverse = _distinct(flat, n_texts * n_texts)
    offsets = np.concatenate([[0], np.cumsum([k.size for k in keys])]).astype(np.int64)

    def block_pairs(key: int, shape: tuple[int, int]) -> np.ndarray:
        return inverse[offsets[key] : offsets[key + 1]].reshape(shape)

    ref_pairs = {raw[6]: block_pairs(raw[6], (raw[2], raw[2])) for raw in blocks_raw}
    blocks = [
        SiblingBlock(
            group=group_ids[int(first_row[group])],
            ref_rows=ref_rows, rows=rows, order=order,
            sim_pairs=block_pairs(key, (m, len(rows))), ref_pairs=ref_pairs[ref_key], from_buffer=buf,
        )
        for group, ref_rows, m, rows, order, key, ref_key, buf in blocks_raw
    ]
    pairs = [(distinct_texts[k // n_texts], distinct_texts[k % n_texts]) for k in distinct.tolist()]
    successes = [(group_ids[int(first_row[traj_group[i]])], tuple(distinct_texts[c] for c in text_id[kept[i]]),
                  int(traj_len[i])) for i in np.flatnonzero(success)]
    stats = {
        "groups": float(len(members_of)),
        "groups_with_reference": float(len(chosen)),
        "groups_with_buffer_reference": float(from_buffer),
        "buffer_lookups": float(lookups),
        "failed_trajectories": float(n_failed),
        "pairs_requested": float(requested),
        "pairs_distinct": float(len(pairs)),
    }
    return ShapingPlan(n, pairs, blocks, requested, np.flatnonzero(failed[t_codes]), stats, successes)


def _distinct(keys: np.ndarray, space: int) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, index of each key in them): ``np.unique(keys, return_inverse=True)``.

    Keys lie in [0, space). A batch requests far more pairs than it has distinct texts squared,
    so below a few million a lookup table does in O(keys + space) what sorting does in
    O(keys log keys).
    """
    if space > max(1 << 22, 4 * keys.size):
        return np.unique(keys, return_inverse=True)
    seen = np.zeros(space, dtype=bool)
    seen[keys] = True
    distinct = np.flatnonzero(seen)
    index = np.cumsum(seen) - 1  # key -> its position among the distinct keys
    return distinct, index[keys]
