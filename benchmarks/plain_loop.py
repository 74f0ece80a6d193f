"""The credit math as plain per-row Python loops: the baselines of ``benchmarks.credit_math``.

``published_shape`` is written in the shape of the published implementation (verl-agent's GiGPO
core at the commit SPEC names, and an SCPO shaper that scores per failed sibling): group and
trajectory ids are uuid strings in numpy object arrays (``with_uids``), per trajectory an
``np.where`` over the batch, returns put back row by row with another ``np.where`` lookup,
dict-of-lists groups whose statistics and per-row normalisation run on torch scalars, one uuid
per anchor-state cluster, and the matcher indexing each sibling's numpy similarity matrix element
by element. ``tidy`` is the same algorithm as a careful pure-Python loop (dicts of lists, floats in
lists, no numpy/torch per element): what a plain loop costs at best. Both return (credit per row,
advantage per row) from the same inputs as the vectorised path, so the benchmark can check all
three agree. Pair scores come in as a dict (the scorer's output; scoring itself is not timed).
"""

from __future__ import annotations

import math
import uuid
from collections import defaultdict
from typing import Any

import numpy as np
import torch

GAMMA, PENALTY, EPS = 0.95, 0.1, 1e-6


def _kmp_table(ref_sim: Any, theta: float) -> list[int]:
    m = len(ref_sim)
    pi = [0] * m
    for q in range(1, m):
        k = pi[q - 1]
        while k > 0 and ref_sim[k][q] < theta:
            k = pi[k - 1]
        if ref_sim[k][q] >= theta:
            k += 1
        pi[q] = k
    return pi


def _match(sim: Any, ref_sim: Any, order: list[int], theta: float, lam: float) -> list[float]:
    """Paper Algorithm 2 (SPEC §3.6) on an m×ℓ matrix (nested lists or a numpy array)."""
    m, ell = len(sim), len(order)
    r = [0.0] * ell
    if m == 0 or ell == 0:
        return r
    pi = _kmp_table(ref_sim, theta)
    j = j_max = -1
    for v in order:
        while j >= 0 and sim[j + 1][v] < theta:
            j = pi[j] - 1
        if sim[j + 1][v] >= theta:
            j += 1
            if j > j_max:
                r[v] = max(0.0, (float(sim[j][v]) - lam) / (1.0 - lam))
                j_max = j
        if j == m - 1:
            break
    return r


def _shape(batch: dict, rank: list[int], score_of: dict, cfg: Any, matrix: Any) -> list[float]:
    """SCPO credit per row; ``matrix(rows)`` turns nested lists of scores into the matcher's input."""
    rewards, traj_ids, acts, obs = batch["rewards"], batch["traj_ids"], batch["actions"], batch["observations"]
    total: dict[Any, float] = defaultdict(float)
    rows_of: dict[Any, list[tuple[int, int]]] = defaultdict(list)
    trajs_of: dict[Any, list[Any]] = defaultdict(list)
    for i, (g, traj, t) in enumerate(zip(batch["group_ids"], traj_ids, batch["steps"])):
        total[traj] += rewards[i]
        if not rows_of[traj]:
            trajs_of[g].append(traj)
        rows_of[traj].append((t, i))
    credit = [0.0] * len(rewards)
    for members in trajs_of.values():
        winners = [traj for traj in members if total[traj] > cfg.tau_succ]
        if not winners:
            continue
        ref = winners[0]  # the longest success; ties: the first
        for traj in winners[1:]:
            if len(rows_of[traj]) > len(rows_of[ref]):
                ref = traj
        kept = {traj: [i for _, i in sorted(rows_of[traj]) if batch["is_action_valid"][i] and not batch["noop"][i]]
                for traj in members}
        ref_text = [f"{acts[i]}{cfg.separator}{obs[i]}" for i in kept[ref]]
        ref_sim = matrix([[score_of[(a, b)] for b in ref_text] for a in ref_text])
        for traj in members:
            if total[traj] > cfg.tau_succ:
                continue
            rows = kept[traj]
            text = [f"{acts[i]}{cfg.separator}{obs[i]}" for i in rows]
            sim = matrix([[score_of[(a, b)] for b in text] for a in ref_text])
            order = sorted(range(len(rows)), key=lambda v: rank[rows[v]])
            for v, r in enumerate(_match(sim, ref_sim, order, cfg.theta, cfg.lam)):
                credit[rows[v]] = r
    return credit


# ------------------------------------------------------------------ the published shape
def with_uids(batch: dict) -> dict:
    """The batch with group and trajectory ids as uuid strings in object arrays, as the published
    rollout loop stores them (made at rollout time, so not part of the timed math)."""
    out = dict(batch)
    for key, salt in (("group_ids", 1 << 64), ("traj_ids", 2 << 64)):
        names = {k: str(uuid.UUID(int=salt + k)) for k in set(batch[key])}
        out[key] = np.array([names[k] for k in batch[key]], dtype=object)
    return out


def _published_returns(rewards: np.ndarray, traj_ids: np.ndarray, valid: np.ndarray) -> np.ndarray:
    by_traj = {}
    for uid in np.unique(traj_ids):
        idx = np.where(traj_ids == uid)[0]  # rows arrive step-major, so idx is in step order
        out, running = np.zeros(len(idx)), 0.0
        for t in reversed(range(len(idx))):
            running = rewards[idx[t]] + GAMMA * running
            out[t] = running
        by_traj[uid] = out
    returns = np.zeros(len(rewards))
    for i, uid in enumerate(traj_ids):  # back into batch order, one lookup per row
        idx = np.where(traj_ids == uid)[0]
        returns[i] = by_traj[uid][np.where(idx == i)[0][0]] - (0.0 if valid[i] else PENALTY)
    return returns


def _published_norm(scores: torch.Tensor, index: Any, singleton_zero: bool) -> torch.Tensor:
    id2score: dict[Any, list] = defaultdict(list)
    for i in range(len(scores)):
        id2score[index[i]].append(scores[i])
    id2mean, id2std = {}, {}
    for key, values in id2score.items():
        if len(values) == 1:
            id2mean[key] = values[0] if singleton_zero else torch.tensor(0.0, dtype=scores.dtype)
            id2std[key] = torch.tensor(1.0, dtype=scores.dtype)
        else:
            id2mean[key] = torch.mean(torch.stack(values))
            id2std[key] = torch.std(torch.stack(values))
    out = scores.clone()
    for i in range(len(scores)):
        out[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + EPS)
    return out


def _published_step_groups(anchors: np.ndarray, index: np.ndarray) -> np.ndarray:
    uids = np.empty(len(anchors), dtype=object)
    for idx in np.unique(index):
        members = np.where(index == idx)[0]
        clusters: dict[str, list[int]] = defaultdict(list)
        for i in members:
            clusters[anchors[i]].append(i)
        for rows in clusters.values():
            uid = str(uuid.uuid4())
            for i in rows:
                uids[i] = uid
    return uids


def published_shape(batch: dict, rank: list[int], score_of: dict, cfg: Any) -> tuple[np.ndarray, np.ndarray]:
    """(credit, advantage) per row, the published implementation's way (see the module doc)."""
    rewards = np.asarray(batch["rewards"], dtype=np.float64)
    traj_ids, group_ids = np.asarray(batch["traj_ids"]), np.asarray(batch["group_ids"])
    valid = np.asarray(batch["is_action_valid"])
    returns = _published_returns(rewards, traj_ids, valid)
    credit = _shape(batch, rank, score_of, cfg, np.asarray)
    shaped = torch.tensor(returns + cfg.alpha * np.asarray(credit))
    totals = {uid: rewards[np.where(traj_ids == uid)[0]].sum() for uid in np.unique(traj_ids)}
    scores = torch.tensor([totals[u] - (0.0 if ok else PENALTY) for u, ok in zip(traj_ids, valid)])
    a_e = _published_norm(scores, group_ids, singleton_zero=False)
    step_groups = _published_step_groups(np.asarray(batch["anchors"], dtype=object), group_ids)
    a_s = _published_norm(shaped, step_groups, singleton_zero=True)  # singleton: (x - x) / (1 + eps) = 0
    return np.asarray(credit), (a_e + a_s).numpy()


# ---------------------------------------------------------------------- the tidy loop
def _tidy_norm(values: list[float], members: list[int], singleton_zero: bool, out: list[float]) -> None:
    if len(members) == 1:
        out[members[0]] = 0.0 if singleton_zero else values[members[0]] / (1.0 + EPS)
        return
    xs = [values[i] for i in members]
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
    for i in members:
        out[i] = (values[i] - mean) / (std + EPS)


def tidy(batch: dict, rank: list[int], score_of: dict, cfg: Any) -> tuple[np.ndarray, np.ndarray]:
    """(credit, advantage) per row as a careful pure-Python loop."""
    rewards, traj_ids, valid = batch["rewards"], batch["traj_ids"], batch["is_action_valid"]
    rows_of: dict[Any, list[tuple[int, int]]] = defaultdict(list)
    total: dict[Any, float] = defaultdict(float)
    for i, (traj, t) in enumerate(zip(traj_ids, batch["steps"])):
        rows_of[traj].append((t, i))
        total[traj] += rewards[i]
    returns = [0.0] * len(rewards)
    for rows in rows_of.values():
        running = 0.0
        for _, i in sorted(rows, reverse=True):
            running = rewards[i] + GAMMA * running
            returns[i] = running - (0.0 if valid[i] else PENALTY)
    credit = _shape(batch, rank, score_of, cfg, lambda rows: rows)
    shaped = [g + cfg.alpha * c for g, c in zip(returns, credit)]
    scores = [total[traj] - (0.0 if ok else PENALTY) for traj, ok in zip(traj_ids, valid)]
    by_group: dict[Any, list[int]] = defaultdict(list)
    by_anchor: dict[tuple[Any, str], list[int]] = defaultdict(list)
    for i, (g, a) in enumerate(zip(batch["group_ids"], batch["anchors"])):
        by_group[g].append(i)
        by_anchor[(g, a)].append(i)
    a_e, a_s = [0.0] * len(scores), [0.0] * len(scores)
    for members in by_group.values():
        _tidy_norm(scores, members, False, a_e)
    for members in by_anchor.values():
        _tidy_norm(shaped, members, True, a_s)
    return np.asarray(credit), np.asarray([e + s for e, s in zip(a_e, a_s)])
