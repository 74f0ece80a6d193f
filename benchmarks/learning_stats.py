"""The learning benchmark's statistics, from maintained libraries (statsmodels, scipy): no
hand-written test statistic or interval.

- ``wilson``: the Wilson score interval of one checkpoint's success (k of n games);
- ``mean_se``: the mean over seeds and its standard error (scipy's ``sem``, n - 1);
- ``paired``: two checkpoints (or two methods) on the same games. Per seed, the exact McNemar test
  on the games only one of them won. Pooled over seeds: the Cochran-Mantel-Haenszel test with one
  stratum per (seed, game), each a 2 x 2 table of (which checkpoint) x (won or not) holding one
  episode per row; concordant games carry no information and drop out, so on one seed it is
  McNemar's chi-square test without continuity correction. The effect is the difference in
  success over all (seed, game) pairs with its t interval (statsmodels ``DescrStatsW``), and the
  Mantel-Haenszel pooled odds ratio with its interval. The CMH test treats a seed's games as
  independent, yet they share one trained policy: seeds differ more than games. So the effect is
  also tested across seeds: each seed's difference in success, a one-sample t test on them
  (scipy ``ttest_1samp``, seeds - 1 degrees of freedom) with its t interval;
- ``holm``: p-values of a family of comparisons (every pair of methods) adjusted by Holm's
  step-down method (statsmodels ``multipletests``), which bounds the chance of any false
  "difference" in the family at alpha.

Outcomes are ``{task_id: won}`` mappings; a pair is compared on the tasks both played.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def wilson(successes: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """The Wilson score interval of ``successes`` of ``n`` (statsmodels ``proportion_confint``)."""
    from statsmodels.stats.proportion import proportion_confint

    if n == 0:
        return 0.0, 1.0
    low, high = proportion_confint(successes, n, alpha=alpha, method="wilson")
    return float(low), float(high)


def mean_se(values: Sequence[float]) -> dict[str, Any]:
    """Mean over seeds and its standard error (None for a single seed: nothing to estimate it from)."""
    from scipy.stats import sem

    x = np.asarray(values, dtype=np.float64)
    return {"n": len(x), "mean": float(x.mean()) if len(x) else None,
            "se": float(sem(x, ddof=1)) if len(x) > 1 else None}


def _pairs(a: Mapping[str, bool], b: Mapping[str, bool]) -> list[tuple[int, int]]:
    common = [task for task in a if task in b]
    if not common:
        raise ValueError("paired test: the two outcome sets share no task")
    return [(int(a[t]), int(b[t])) for t in common]


def mcnemar_exact(a: Mapping[str, bool], b: Mapping[str, bool]) -> dict[str, Any]:
    """Exact McNemar test of ``b`` against ``a`` on their common games (statsmodels ``mcnemar``)."""
    from statsmodels.stats.contingency_tables import mcnemar

    pairs = _pairs(a, b)
    only_a = sum(x == 1 and y == 0 for x, y in pairs)
    only_b = sum(x == 0 and y == 1 for x, y in pairs)
    both = sum(x == y == 1 for x, y in pairs)
    table = [[both, only_a], [only_b, len(pairs) - both - only_a - only_b]]
    p = float(mcnemar(table, exact=True).pvalue) if only_a + only_b else 1.0
    return {"games": len(pairs), "won_a": both + only_a, "won_b": both + only_b, "only_a": only_a,
            "only_b": only_b, "p_exact": p}


def paired(a_runs: Sequence[Mapping[str, bool]], b_runs: Sequence[Mapping[str, bool]],
           alpha: float = 0.05) -> dict[str, Any]:
    """``b`` against ``a``, seed by seed (``a_runs[k]`` and ``b_runs[k]`` are one seed's outcomes):
    exact McNemar per seed; pooled, the CMH test over (seed, game) strata, the difference in
    success with its interval and the pooled odds ratio (module docstring)."""
    from statsmodels.stats.contingency_tables import StratifiedTable
    from statsmodels.stats.weightstats import DescrStatsW

    if len(a_runs) != len(b_runs) or not a_runs:
        raise ValueError(f"paired test: {len(a_runs)} and {len(b_runs)} seeds; give one outcome set per seed to both")
    per_seed = [mcnemar_exact(a, b) for a, b in zip(a_runs, b_runs)]
    pairs = [pair for a, b in zip(a_runs, b_runs) for pair in _pairs(a, b)]
    diff = np.array([y - x for x, y in pairs], dtype=np.float64)
    out: dict[str, Any] = {
        "seeds": len(per_seed), "games": len(pairs), "success_a": float(np.mean([x for x, _ in pairs])),
        "success_b": float(np.mean([y for _, y in pairs])), "difference": float(diff.mean()),
        "only_a": sum(s["only_a"] for s in per_seed), "only_b": sum(s["only_b"] for s in per_seed),
        "per_seed": per_seed}
    out["across_seeds"] = across_seeds([s["won_b"] / s["games"] - s["won_a"] / s["games"] for s in per_seed], alpha)
    discordant = [(x, y) for x, y in pairs if x != y]
    if not discordant:  # the same outcome on every game: no evidence either way, no interval
        return {**out, "difference_ci95": [0.0, 0.0], "p_cmh": 1.0, "odds_ratio": None, "odds_ratio_ci95": None}
    low, high = DescrStatsW(diff).tconfint_mean(alpha=alpha)
    # One stratum per discordant (seed, game): rows a, b; columns won, lost (concordant ones add
    # nothing to the statistic or its variance).
    tables = np.array([[[x, 1 - x], [y, 1 - y]] for x, y in discordant], dtype=np.float64)
    strat = StratifiedTable(np.moveaxis(tables, 0, -1))
    p = float(strat.test_null_odds(correction=False).pvalue)
    # The pooled odds ratio is only/only; it is 0 or infinite when one side never wins alone.
    finite = out["only_a"] > 0 and out["only_b"] > 0
    ratio = float(strat.oddsratio_pooled) if finite else None
    ci = [float(v) for v in strat.oddsratio_pooled_confint(alpha=alpha)] if finite else None
    return {**out, "difference_ci95": [float(low), float(high)], "p_cmh": p,
            # b's odds of winning over a's on the same game (MH estimate); > 1: b wins more.
            "odds_ratio": None if ratio is None else 1.0 / ratio,
            "odds_ratio_ci95": None if ci is None else [1.0 / ci[1], 1.0 / ci[0]]}


def across_seeds(differences: Sequence[float], alpha: float = 0.05) -> dict[str, Any] | None:
    """The per-seed differences in success, tested against 0 (scipy ``ttest_1samp``): None for one
    seed; p None when every seed differs by the same nonzero amount (no spread to test with)."""
    from scipy.stats import ttest_1samp

    d = np.asarray(differences, dtype=np.float64)
    if len(d) < 2:
        return None
    out = {"differences": d.tolist(), "mean": float(d.mean()), "df": len(d) - 1}
    if np.ptp(d) == 0:
        return {**out, "ci95": [float(d[0])] * 2, "p": 1.0 if d[0] == 0 else None}
    test = ttest_1samp(d, 0.0)
    low, high = test.confidence_interval(1 - alpha)
    return {**out, "ci95": [float(low), float(high)], "p": float(test.pvalue)}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given (statsmodels ``multipletests``, method ``holm``)."""
    from statsmodels.stats.multitest import multipletests

    if not p_values:
        return []
    return [float(p) for p in multipletests(list(p_values), method="holm")[1]]


def fmt_p(p: float) -> str:
    """A p-value as the tables print it: two significant digits, ``< 1e-4`` below that."""
    return "< 1e-4" if p < 1e-4 else f"{p:.2g}" if p < 0.01 else f"{p:.2f}"
