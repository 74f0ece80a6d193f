"""README's ranking in one paragraph: the methods ordered by mean test success at the final
checkpoint, and which gains and differences the report's tests establish.

An order of means is not a ranking the data support, so the paragraph names what is established
by the verdict's own rule (``learning_report.change_word``: the CMH test on the games and the t test
across seeds both at ``alpha``, Holm-adjusted for the secondary pairs) and gives the primary pair's
numbers whatever they are.
"""

from __future__ import annotations

from typing import Any

from benchmarks.learning_report import PRIMARY, change_word, method_rank
from benchmarks.learning_stats import fmt_p


def _established(t: dict[str, Any], game_p: float, seeds_p: float | None, alpha: float) -> bool:
    # change_word returns the bare direction only when both tests find the change.
    return change_word(game_p, seeds_p, t["across_seeds"] is None, t["difference"], alpha,
                       "up", "down", "none") in ("up", "down")


def ranking(result: dict[str, Any], alpha: float = 0.05) -> str:
    final = {m: x["checkpoints"][-1] for m, x in result["methods"].items()}
    order = sorted(final, key=lambda m: (-final[m]["mean"], method_rank(m)))
    means = ", ".join(f"{m} {final[m]['mean']:.3f}" + (f" ± {final[m]['se']:.3f}" if final[m]["se"] is not None else "")
                      + f" ({final[m]['n']} seed{'s' if final[m]['n'] != 1 else ''})" for m in order)
    gains = [m for m, t in result["vs_iteration_0"].items()
             if _established(t, t["p_cmh"], t["across_seeds"] and t["across_seeds"]["p"], alpha) and t["difference"] > 0]
    pairs = []
    for t in result["pairwise"].values():
        if _established(t, t["p_adjusted"], t["p_seeds_adjusted"], alpha):
            hi, lo = (t["b"], t["a"]) if t["difference"] > 0 else (t["a"], t["b"])
            pairs.append(f"{hi} ahead of {lo} ({abs(t['difference']):+.3f})")
    a, b = PRIMARY
    primary = result["pairwise"].get(f"{b} vs {a}")
    said = "" if primary is None else (
        f" The primary comparison, {b} against {a}: {primary['difference']:+.3f} "
        f"[{primary['difference_ci95'][0]:+.3f}, {primary['difference_ci95'][1]:+.3f}], CMH p {fmt_p(primary['p_cmh'])}"
        + ("" if primary["p_seeds_adjusted"] is None else f", across seeds p {fmt_p(primary['p_seeds_adjusted'])}") + ".")
    planned = result["planned_seeds"]
    done = sum(min(len(result["methods"][m]["seeds"]), n) for m, n in planned.items() if m in result["methods"])
    look = "the grid is complete" if done == sum(planned.values()) else "an interim look"
    return (f"**Ranking** ({done} of {sum(planned.values())} planned runs: {look}) by mean test success at "
            f"iteration {result['iterations']} (± SE over each method's seeds; "
            f"pairs are tested on the seeds they share): {means}. "
            f"Established at α = {alpha} by both tests (Holm-adjusted for the secondary pairs): a gain over "
            f"iteration 0 for {', '.join(gains) or 'no method'}; between methods, "
            f"{'; '.join(pairs) or 'no difference'}.{said} "
            + ("No other step" if pairs else "No step") + " of this order is established at this α.")
