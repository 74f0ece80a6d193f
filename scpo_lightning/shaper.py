"""The SCPO shaper for a whole rollout batch (SPEC §3.1-3.10).

Two phases, so the scorer can run while the trainer does other work: ``plan_shaping`` finds each
group's reference and failed siblings and collects every distinct text pair the batch needs;
the scorer scores them; ``apply_plan`` runs the monotonic matcher per failed sibling and returns
the credit r per row. ``scpo_shape`` does all of it and returns G̃ = G + α r.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scpo_lightning._arrays import check_lengths, factorize, to_numpy
from scpo_lightning.ordering import ORDERS, processing_order
from scpo_lightning.reference_buffer import BufferedReference
from scpo_lightning.scorers.base import StepScorer
from scpo_lightning.scpo import check_thresholds, match, semantic_prefix_table

REFERENCES = ("longest", "shortest", "random")
#: Where a group's reference comes from: ``reference_kind`` says it precisely.
REFERENCE_SOURCES = ("siblings", "buffer", "both")


@dataclass(frozen=True)
class SCPOConfig:
    """SCPO shaping settings (defaults: the ALFWorld recipe, SPEC §3 and §7).

    Args:
        alpha: Weight α of the SCPO credit added to failed siblings' step returns (ALFWorld 0.5, WebShop 1.0).
        theta: Similarity threshold θ in (0, 1] for a step to match a reference position.
        lam: Soft base λ in [0, θ): credit is max(0, M - λ) / (1 - λ).
        tau_succ: A trajectory is a success when its total env reward exceeds this (ALFWorld 0, WebShop 9.0).
        reference: Which successful sibling is the reference: longest (paper), shortest or random.
        order: Processing order of failed steps: balanced (paper), chronological or random.
        order_partitions: K, the number of partitions of the balanced order (the published runs had 4 ranks).
        monotonic: Credit each reference position at most once (False = the repeated-credit ablation).
        reference_source: siblings (paper: a successful sibling of the group), buffer (only successes of the same task from earlier iterations) or both (a sibling when the group has a success, else the buffer).
        separator: Text between action and observation in a step text (action || observation).
    """

    alpha: float = 0.5
    theta: float = 0.6
    lam: float = 0.4
    tau_succ: float = 0.0
    reference: str = "longest"
    order: str = "balanced"
    order_partitions: int = 4
    monotonic: bool = True
    reference_source: str = "siblings"
    separator: str = " || "

    def __post_init__(self) -> None:
        # Each message starts with the field name: SCPOCallback prefixes its own class to it.
        # The comparisons are written so that NaN fails them too.
        checks = [
            (self.alpha >= 0, f"alpha={self.alpha} must be >= 0 (it weighs the credit: ALFWorld 0.5, WebShop 1.0)"),
            (0 < self.theta <= 1, f"theta={self.theta} must be in (0, 1] (the similarity a step needs; paper: 0.6)"),
            (0 <= self.lam < self.theta,
             f"lam={self.lam} must be in [0, theta={self.theta}) (credit is max(0, M - lam) / (1 - lam); paper: 0.4)"),
            (self.reference in REFERENCES, f"reference={self.reference!r} must be one of {REFERENCES}"),
            (self.order in ORDERS, f"order={self.order!r} must be one of {ORDERS}"),
            (self.order_partitions >= 1, f"order_partitions={self.order_partitions} must be >= 1"),
            (self.reference_source in REFERENCE_SOURCES,
             f"reference_source={self.reference_source!r} must be one of {REFERENCE_SOURCES}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


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


def reference_kind(has_success: bool, has_buffered: bool, source: str) -> str | None:
    """Where a group's reference comes from, for ``SCPOConfig.reference_source``.

    siblings: a successful sibling, or none (the paper). buffer: a buffered success of the
    task from an earlier iteration, or none, whether or not the group has a success of its own.
    both: a successful sibling when there is one (the current policy's own success wins), else a
    buffered one. Returns "sibling", "buffer" or None (the group is left unchanged).
    """
    if has_success and source != "buffer":
        return "sibling"
    if has_buffered and source != "siblings":
        return "buffer"
    return None


def looks_in_buffer(has_success: bool, source: str) -> bool:
    """Whether the group asks the buffer (the denominator of the buffer's hit rate)."""
    return source == "buffer" or (source == "both" and not has_success)


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


def apply_plan(plan: ShapingPlan, scores: Any, config: SCPOConfig) -> tuple[np.ndarray, dict[str, float]]:
    """Run the monotonic matcher on every failed sibling; returns (credit r per row, stats).

    ``scores[i]`` scores ``plan.pairs[i]``. Rows of successful siblings, filtered rows and rows of
    groups without a reference get r = 0.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.shape != (len(plan.pairs),):
        raise ValueError(f"scorer returned {s.shape} scores for {len(plan.pairs)} pairs")
    if not (np.all(s >= 0.0) and np.all(s <= 1.0)):  # also catches NaN
        raise ValueError("scorer scores must lie in [0, 1] (normalised scorer output)")
    check_thresholds(config.theta, config.lam)
    credit = np.zeros(plan.n_rows)
    credited = 0
    tables: dict[int, np.ndarray] = {}  # the reference's prefix table, built once per group
    for b in plan.blocks:
        if b.sim_pairs.size == 0:
            continue  # a sibling with no kept steps, or a reference without any: no credit
        pi = tables.get(id(b.ref_pairs))
        if pi is None:
            pi = tables[id(b.ref_pairs)] = semantic_prefix_table(s[b.ref_pairs], config.theta)
        r, _ = match(s[b.sim_pairs], pi, config.theta, config.lam, b.order.tolist(), config.monotonic)
        credit[b.rows] = r
        credited += int(np.count_nonzero(r))
    stats = dict(plan.stats)
    n_failed = plan.stats.get("failed_trajectories", 0.0)
    stats["credited_steps_per_failed"] = credited / n_failed if n_failed else 0.0
    stats["mean_aux_reward"] = (
        float(config.alpha * credit[plan.failed_rows].mean()) if len(plan.failed_rows) else 0.0
    )
    return credit, stats


@dataclass(frozen=True)
class ShapingResult:
    shaped_returns: np.ndarray  # G̃_t = G_t + α r_t per row
    credit: np.ndarray  # r_t ∈ [0, 1] per row (0 outside failed siblings)
    stats: dict[str, float]


def scpo_shape(step_returns: Any, *, scorer: StepScorer, config: SCPOConfig, **rows: Any) -> ShapingResult:
    """Plan, score and match in one call: G̃ = G + α r (SPEC §3.8).

    ``rows`` are the keyword arguments of ``plan_shaping`` (``rng`` included). Only the
    step-level advantage may see G̃; episode scores and success labels stay unshaped (§3.9).
    """
    g = to_numpy(step_returns, "step_returns")
    plan = plan_shaping(config=config, **rows)
    if len(g) != plan.n_rows:
        raise ValueError(f"`step_returns` has {len(g)} rows; the batch has {plan.n_rows}")
    scores = scorer.score(plan.pairs) if plan.pairs else np.zeros(0)
    credit, stats = apply_plan(plan, scores, config)
    return ShapingResult(g + config.alpha * credit, credit, stats)
