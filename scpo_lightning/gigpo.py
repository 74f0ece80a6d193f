"""GiGPO's two-level group advantage, and the GRPO and RLOO baselines (SPEC §2).

All functions work on rows given as parallel sequences and return one advantage per row, as a
numpy array, or as a tensor when the scores came in as one.

SCPO on GRPO and RLOO (beyond the SPEC, which defines it for GiGPO only). GiGPO reads SCPO through
its step level: A = A_E + ω A_S(G̃) (§2.7, §3.9). GRPO and RLOO have no step level, so one is added
for the SCPO credit alone, built with the estimator's own baseline rule:

    Δ_t = G̃_t - G_t      (= α r_t on credited failed-sibling rows, 0 elsewhere, §3.8)
    GRPO:  A = A_E(x) + ω A_E(Δ)        A_E(·): §2.4 over all rows of the group, same mode and ε
    RLOO:  A = L(x; R) + ω L(Δ; Δ̄)      L(v; V): a row's v minus the mean V of the other
                                         trajectories of its group (each counted once, 0 if none)

x is the row's episode score, R(τ) the trajectory return, Δ̄(τ) the mean Δ over τ's rows. As in
GiGPO the outcome term stays unshaped (§3.9: SCPO cannot turn a failure into a success), the
credit term is weighed by ω, and it sums to zero over a group (GRPO: over its rows, given two or
more; RLOO: over its trajectories' means per row, given two or more trajectories), so SCPO moves
advantage from uncredited rows to credited ones rather than adding any. Under mean_std_norm the
GRPO term is scale-free, as GiGPO's A_S is: a lone credited row in a large group gets several
units. Δ ≡ 0 gives back the plain estimator exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from difflib import SequenceMatcher
from typing import Any

import numpy as np

from scpo_lightning._arrays import check_lengths, factorize, like_input, to_numpy

MODES = ("mean_std_norm", "mean_norm")


def _group_stats(x: np.ndarray, codes: np.ndarray, n_groups: int) -> tuple[np.ndarray, ...]:
    """Per-group count, mean and unbiased std (std of a one-member group is left at 0)."""
    count = np.bincount(codes, minlength=n_groups)
    mean = np.bincount(codes, weights=x, minlength=n_groups) / np.maximum(count, 1)
    # Two-pass variance (deviations from the mean) keeps precision for large equal values.
    sq_dev = np.bincount(codes, weights=(x - mean[codes]) ** 2, minlength=n_groups)
    std = np.sqrt(sq_dev / np.maximum(count - 1, 1))
    return count, mean, std


def group_normalize(
    values: np.ndarray,
    codes: np.ndarray,
    n_groups: int,
    mode: str,
    eps: float,
    singleton: str,
) -> np.ndarray:
    """Normalise ``values`` inside the groups given by ``codes``.

    ``mean_std_norm``: (x - mean) / (std + eps); ``mean_norm``: x - mean; std unbiased.
    ``singleton`` says what a one-member group gets: ``"identity"`` uses mean 0 and std 1
    (episode level, SPEC §2.4), ``"zero"`` gives 0 (step level, SPEC §2.6).
    """
    if mode not in MODES:
        raise ValueError(f"`mode` must be one of {MODES}; got {mode!r}")
    count, mean, std = _group_stats(values, codes, n_groups)
    single = count == 1
    if singleton == "identity":
        mean[single], std[single] = 0.0, 1.0
    elif singleton != "zero":
        raise ValueError(f"`singleton` must be 'identity' or 'zero'; got {singleton!r}")
    centred = values - mean[codes]
    out = centred / (std[codes] + eps) if mode == "mean_std_norm" else centred
    if singleton == "zero":
        out[single[codes]] = 0.0
    return out


def episode_advantage(
    episode_scores: Any, group_ids: Sequence[Any], mode: str = "mean_std_norm", eps: float = 1e-6
) -> np.ndarray:
    """A_E: episode scores normalised over all rows of each group (SPEC §2.4)."""
    x = to_numpy(episode_scores, "episode_scores")
    check_lengths(episode_scores=x, group_ids=group_ids)
    codes, n = factorize(group_ids, "group_ids")
    return group_normalize(x, codes, n, mode, eps, singleton="identity")


def check_similarity_thresh(similarity_thresh: float | None, field: str = "similarity_thresh") -> None:
    if similarity_thresh is not None and not 0.0 < similarity_thresh < 1.0:
        raise ValueError(f"{field}={similarity_thresh!r} must lie strictly between 0 and 1 (null: identical "
                         "anchors only, the paper's GiGPO)")


def similar_step_groups(group_ids: Sequence[Any], anchors: Sequence[str], similarity_thresh: float) -> np.ndarray:
    """Step-group codes that merge *similar* anchors of one episode group (verl-agent's similarity GiGPO).

    Inside each episode group, rows are taken in row order; a row joins the first step group whose
    first row's anchor ``first`` has ``SequenceMatcher(None, anchor, first).ratio() >= similarity_thresh``
    (difflib's ratio 2M/T: M matched characters, T both lengths), else it opens a new step group.
    The new row's anchor comes first, as in verl-agent's ``are_similar(obs, rep)``: the ratio is
    not symmetric (difflib matches greedily from the first string).
    Merging compares with a group's first anchor only, so it is not transitive. Codes are 0..k-1
    in order of first appearance.
    """
    check_similarity_thresh(similarity_thresh)
    check_lengths(group_ids=group_ids, anchors=anchors)
    episode_codes, _ = factorize(group_ids, "group_ids")
    firsts: dict[int, list[tuple[str, int]]] = {}  # episode group -> (first anchor, code) per step group
    codes = np.empty(len(episode_codes), dtype=np.int64)
    n = 0
    for row, (g, anchor) in enumerate(zip(episode_codes.tolist(), anchors)):
        if not isinstance(anchor, str):
            raise ValueError(f"similarity step groups compare text: anchor of row {row} is {type(anchor).__name__}")
        clusters = firsts.setdefault(g, [])
        code = next((c for first, c in clusters if SequenceMatcher(None, anchor, first).ratio() >= similarity_thresh),
                    None)
        if code is None:
            code, n = n, n + 1
            clusters.append((anchor, code))
        codes[row] = code
    return codes


def step_advantage(
    step_returns: Any,
    group_ids: Sequence[Any],
    anchors: Sequence[str],
    mode: str = "mean_std_norm",
    eps: float = 1e-6,
    similarity_thresh: float | None = None,
) -> np.ndarray:
    """A_S: step returns normalised inside step groups (same group id, identical anchor text; with
    ``similarity_thresh``, anchors at least that similar: ``similar_step_groups``)."""
    g = to_numpy(step_returns, "step_returns")
    check_lengths(step_returns=g, group_ids=group_ids, anchors=anchors)
    if similarity_thresh is None:
        codes, n = factorize(zip(group_ids, anchors), "anchors")
    else:
        codes = similar_step_groups(group_ids, anchors, similarity_thresh)
        n = int(codes.max()) + 1 if len(codes) else 0
    return group_normalize(g, codes, n, mode, eps, singleton="zero")


def gigpo_advantage(
    episode_scores: Any,
    step_returns: Any,
    group_ids: Sequence[Any],
    anchors: Sequence[str],
    mode: str = "mean_std_norm",
    omega: float = 1.0,
    eps: float = 1e-6,
    similarity_thresh: float | None = None,
) -> Any:
    """A = A_E + ω A_S per row (SPEC §2.7).

    ``episode_scores``: R(τ) minus the row's invalid penalty; ``step_returns``: G_t (or the SCPO
    shaped G̃_t). ``anchors``: the raw env observation each row's prompt was built from.
    ``similarity_thresh``: step groups of similar anchors (``similar_step_groups``); None: identical.
    """
    a_e = episode_advantage(episode_scores, group_ids, mode, eps)
    a_s = step_advantage(step_returns, group_ids, anchors, mode, eps, similarity_thresh)
    return like_input(a_e + omega * a_s, episode_scores)


def scpo_credit(shaped_returns: Any, step_returns: Any) -> np.ndarray:
    """Δ_t = G̃_t - G_t per row: the SCPO credit in SCPO-shaped step returns (SPEC §3.8)."""
    shaped = to_numpy(shaped_returns, "shaped_returns")
    g = to_numpy(step_returns, "step_returns")
    check_lengths(shaped_returns=shaped, step_returns=g)
    return shaped - g


def grpo_advantage(
    episode_scores: Any,
    group_ids: Sequence[Any],
    mode: str = "mean_std_norm",
    eps: float = 1e-6,
    *,
    shaped_returns: Any = None,
    step_returns: Any = None,
    omega: float = 1.0,
) -> Any:
    """GRPO baseline: A = A_E; with SCPO's ``shaped_returns`` G̃ (and the ``step_returns`` G they
    were shaped from) A = A_E(x) + ω A_E(G̃ - G), as the module docstring derives."""
    a = episode_advantage(episode_scores, group_ids, mode, eps)
    if shaped_returns is not None:
        if step_returns is None:
            raise ValueError("grpo_advantage: `shaped_returns` needs the `step_returns` G_t they were shaped from")
        a = a + omega * episode_advantage(scpo_credit(shaped_returns, step_returns), group_ids, mode, eps)
    return like_input(a, episode_scores)


def _leave_one_out(values: np.ndarray, traj_values: np.ndarray, traj_ids: Sequence[Any], group_ids: Sequence[Any],
                   name: str) -> np.ndarray:
    """Per row: ``values`` minus the mean ``traj_values`` of the other trajectories of its group."""
    t_codes, n_traj = factorize(traj_ids, "traj_ids")
    g_codes, n_groups = factorize(group_ids, "group_ids")
    per_traj = np.empty(n_traj)
    per_traj[t_codes] = traj_values
    traj_group = np.empty(n_traj, dtype=np.int64)
    traj_group[t_codes] = g_codes
    if np.any(per_traj[t_codes] != traj_values) or np.any(traj_group[t_codes] != g_codes):
        raise ValueError(f"rows of one trajectory carry different `{name}` or `group_ids`")
    n_in_group = np.bincount(traj_group, minlength=n_groups)
    total = np.bincount(traj_group, weights=per_traj, minlength=n_groups)
    others = n_in_group[traj_group] - 1
    baseline = np.where(others > 0, (total[traj_group] - per_traj) / np.maximum(others, 1), 0.0)
    return values - baseline[t_codes]


def rloo_advantage(
    episode_scores: Any,
    traj_returns: Any,
    traj_ids: Sequence[Any],
    group_ids: Sequence[Any],
    *,
    shaped_returns: Any = None,
    step_returns: Any = None,
    omega: float = 1.0,
) -> Any:
    """RLOO baseline: a row's episode score minus the mean return of the *other* trajectories.

    ``traj_returns`` is R(τ) per row (``returns.trajectory_returns``); each trajectory counts
    once in its siblings' baseline. A trajectory alone in its group has baseline 0. With SCPO's
    ``shaped_returns`` G̃ (and the ``step_returns`` G they were shaped from) the credit
    Δ = G̃ - G gets the same leave-one-out baseline, each trajectory counted by its mean Δ per
    row, weighed by ω (module docstring).
    """
    x = to_numpy(episode_scores, "episode_scores")
    r = to_numpy(traj_returns, "traj_returns")
    check_lengths(episode_scores=x, traj_returns=r, traj_ids=traj_ids, group_ids=group_ids)
    a = _leave_one_out(x, r, traj_ids, group_ids, "traj_returns")
    if shaped_returns is not None:
        if step_returns is None:
            raise ValueError("rloo_advantage: `shaped_returns` needs the `step_returns` G_t they were shaped from")
        delta = scpo_credit(shaped_returns, step_returns)
        check_lengths(episode_scores=x, shaped_returns=delta)
        t_codes, n_traj = factorize(traj_ids, "traj_ids")
        mean_delta = np.bincount(t_codes, weights=delta, minlength=n_traj) / np.bincount(t_codes, minlength=n_traj)
        a = a + omega * _leave_one_out(delta, mean_delta[t_codes], traj_ids, group_ids, "mean credit")
    return like_input(a, episode_scores)
