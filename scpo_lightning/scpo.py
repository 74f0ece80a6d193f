"""SCPO's matcher: the semantic prefix table and the monotonic credit rule (SPEC §3.5-3.6).

The batch-level shaper that calls it lives in ``scpo_lightning.shaper`` (plan) and ``scpo_lightning.credit`` (match).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: θ's one rule (SPEC §3.4-3.5): scores lie in [0, 1] and a pair matches when its score is >= θ.
#: θ <= 0 would match every pair. θ = 1 would match only a perfect score, which the paper's
#: normalised cross-encoder (a sigmoid) reaches only when float32 rounds a logit above ~17 up to 1:
#: whether a step earns credit would hang on rounding, so θ must be below 1. SCPOConfig (and so the
#: dry run), this matcher and MiniLM's calibrated map, whose knot ``at_theta`` maps onto θ, all
#: check θ with ``theta_in_range``.
THETA_RANGE = "(0, 1)"


def theta_in_range(theta: float) -> bool:
    return 0.0 < theta < 1.0  # NaN fails


def semantic_prefix_table(ref_sim: np.ndarray, theta: float) -> np.ndarray:
    """KMP prefix function over the reference, "a matches b" meaning ref_sim[a, b] >= θ (SPEC §3.5).

    pi[q] is the length of the longest proper prefix of the reference that semantically matches
    a suffix ending at q; the matcher falls back with next(j) = pi[j] - 1.
    """
    m = len(ref_sim)
    sim = ref_sim.tolist()  # python floats: scalar indexing of lists is ~5x faster than numpy
    pi = [0] * m
    for q in range(1, m):
        k = pi[q - 1]
        while k > 0 and sim[k][q] < theta:
            k = pi[k - 1]
        if sim[k][q] >= theta:
            k += 1
        pi[q] = k
    return np.asarray(pi, dtype=np.int64)


def _check_matrix(name: str, x: Any, shape: tuple[int, int] | None = None) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2 or (shape is not None and arr.shape != shape):
        want = f"shape {shape}" if shape else "a 2-D matrix"
        raise ValueError(f"`{name}` must be {want}; got shape {arr.shape}")
    if arr.size and not (np.all(arr >= 0.0) and np.all(arr <= 1.0)):  # also catches NaN
        raise ValueError(f"`{name}` scores must lie in [0, 1] (normalised scorer output)")
    return arr


def monotonic_credit(
    sim: Any,
    ref_sim: Any,
    theta: float,
    lam: float,
    order: Sequence[int] | None = None,
    monotonic: bool = True,
) -> np.ndarray:
    """SCPO credit r ∈ [0, 1]^ℓ of one failed sibling (paper Algorithm 2, SPEC §3.6).

    ``sim``: m×ℓ, sim[u, v] = f(reference step u, failed step v); ``ref_sim``: m×m reference
    self-similarity; ``order``: a permutation of range(ℓ), the processing order (None =
    chronological). A step earns (sim[j, v] - λ) / (1 - λ), floored at 0, when its match advances
    the matched position j beyond every position credited before; ``monotonic=False`` (the
    ablation) credits every advance of j, already-credited positions too.
    """
    return credit_path(sim, ref_sim, theta, lam, order, monotonic)[0]


def credit_path(
    sim: Any,
    ref_sim: Any,
    theta: float,
    lam: float,
    order: Sequence[int] | None = None,
    monotonic: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """``monotonic_credit`` plus, per failed step, the reference position it was credited at (-1: none).

    The positions draw the monotone path of the credit heatmap (SPEC §3.10).
    """
    check_thresholds(theta, lam)
    M = _check_matrix("sim", sim)
    m, ell = M.shape
    M_star = _check_matrix("ref_sim", ref_sim, (m, m))
    if order is None:
        order = range(ell)
    else:
        order = [int(v) for v in order]
        if sorted(order) != list(range(ell)):
            raise ValueError(f"`order` must be a permutation of range({ell}); got {order}")
    if m == 0 or ell == 0:
        return np.zeros(ell), np.full(ell, -1, dtype=np.int64)
    return match(M, semantic_prefix_table(M_star, theta), theta, lam, order, monotonic)


def check_thresholds(theta: float, lam: float) -> None:
    if not theta_in_range(theta):
        raise ValueError(f"`theta` must be in {THETA_RANGE}; got {theta}")
    if not 0.0 <= lam < 1.0:
        raise ValueError(f"`lam` must be in [0, 1); got {lam}")


def match(
    sim: np.ndarray, pi: np.ndarray, theta: float, lam: float, order: Sequence[int], monotonic: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """The matcher of ``credit_path`` on checked inputs: a non-empty m×ℓ ``sim`` with scores in
    [0, 1], ``pi = semantic_prefix_table(ref_sim, theta)`` and a permutation ``order`` of range(ℓ).

    The batch shaper calls it directly so that a reference's table is built once for all its
    failed siblings.
    """
    ell = sim.shape[1]
    r, position = [0.0] * ell, [-1] * ell
    pi = pi.tolist()
    rows = sim.tolist()
    m = len(rows)
    j, j_max = -1, -1
    for v in order:
        while j >= 0 and rows[j + 1][v] < theta:
            j = pi[j] - 1  # next(j): fall back to the longest matching prefix
        if rows[j + 1][v] >= theta:
            j += 1
            if j > j_max or not monotonic:
                r[v] = max(0.0, (rows[j][v] - lam) / (1.0 - lam))
                position[v] = j
                j_max = max(j_max, j)
        if j == m - 1:
            break
    return np.asarray(r), np.asarray(position, dtype=np.int64)
