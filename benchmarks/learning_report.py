"""The learning benchmark's report: per-run result files -> ``learning.json``, its PNG and the
Markdown tables of README.md and docs/learning.md (statistics: ``benchmarks/learning_stats.py``).

Only runs of one recipe are aggregated (``recipe_sha256``: the base config, schedule, panels,
overrides and versions; a run of another recipe is an error, to be re-run, never mixed in).
"""

from __future__ import annotations

import json
from itertools import combinations
from pathlib import Path
from typing import Any

from benchmarks.learning_stats import fmt_p, holm, mean_se, paired

#: Methods in the order the tables list them (others follow in name order).
ORDER = ("grpo", "gigpo", "gigpo_similarity", "scpo", "scpo_lexical")
#: The comparison the grid was built for, named before any test-panel read (issue 29: "does SCPO's
#: step credit beat GiGPO?"): tested at alpha on its own. Every other pair is secondary, and the
#: secondary pairs are one family, Holm-adjusted together.
PRIMARY = ("gigpo", "scpo")


def load_runs(runs_dir: Path) -> list[dict[str, Any]]:
    paths = sorted(p for p in runs_dir.glob("*_seed*.json") if not p.name.startswith("iteration0_"))
    if not paths:
        raise FileNotFoundError(f"no run files in {runs_dir}: run `python -m benchmarks.learning` first")
    runs = [json.loads(p.read_text()) for p in paths]
    recipes = {r["recipe_sha256"] for r in runs}
    if len(recipes) > 1:
        by = {h: [f"{r['method']}_seed{r['seed']}" for r in runs if r["recipe_sha256"] == h] for h in recipes}
        raise ValueError(f"{runs_dir} holds runs of {len(recipes)} recipes ({by}); re-run the stale ones "
                         "(python -m benchmarks.learning re-runs any whose config hash differs)")
    return sorted(runs, key=lambda r: (method_rank(r["method"]), r["seed"]))


def method_rank(method: str) -> tuple[int, str]:
    return (ORDER.index(method), "") if method in ORDER else (len(ORDER), method)


def outcomes(validation: dict[str, Any]) -> dict[str, bool]:
    return {task: bool(won) for task, won in validation["outcomes"]}


def credited(it: dict[str, Any]) -> float | None:
    return (it.get("scpo") or {}).get("credited_steps_per_failed")


def aggregate(runs_dir: Path, planned: dict[str, int]) -> dict[str, Any]:
    """The report of every run in ``runs_dir`` (module docstring); ``planned``: the seeds the grid
    plans per method (a comparison on fewer is an interim look)."""
    runs = load_runs(runs_dir)
    methods: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        methods.setdefault(r["method"], []).append(r)
    per_method, vs_zero = {}, {}
    for m, rs in methods.items():
        points = [(v["iteration"], v["panel"]) for v in rs[0]["validations"]]
        per_method[m] = {"seeds": [r["seed"] for r in rs], "checkpoints": [
            {"iteration": i, "panel": p, **mean_se([r["validations"][k]["success"] for r in rs])}
            for k, (i, p) in enumerate(points)], "iterations": [
            {"iteration": k + 1, "groups_with_success": mean_se([r["iterations"][k]["groups_with_success"] for r in rs]),
             "credited_steps_per_failed": mean_se([credited(r["iterations"][k]) for r in rs])
             if credited(rs[0]["iterations"][k]) is not None else None}
            for k in range(len(rs[0]["iterations"]))]}
        vs_zero[m] = paired([outcomes(r["validations"][0]) for r in rs], [outcomes(r["validations"][-1]) for r in rs])
    pairwise = {}
    for a, b in combinations(sorted(methods, key=method_rank), 2):
        seeds = sorted(set(per_method[a]["seeds"]) & set(per_method[b]["seeds"]))
        if seeds:
            pick = {m: {r["seed"]: r for r in methods[m]} for m in (a, b)}
            pairwise[f"{b} vs {a}"] = {"a": a, "b": b, "seeds_paired": seeds, **paired(
                [outcomes(pick[a][s]["validations"][-1]) for s in seeds],
                [outcomes(pick[b][s]["validations"][-1]) for s in seeds])}
    # The secondary pairs: Holm over all of them, so that "a difference" anywhere among them is
    # wrong with probability <= alpha (the family grows as methods land).
    # The same for the test across seeds, over the secondary pairs that have one.
    secondary = [t for t in pairwise.values() if (t["a"], t["b"]) != PRIMARY]
    for t, p in zip(secondary, holm([t["p_cmh"] for t in secondary])):
        t.update(family=f"secondary, Holm over {_pairs(len(secondary))}", p_adjusted=p, p_seeds_adjusted=None)
    tested = [t for t in secondary if t["across_seeds"] and t["across_seeds"]["p"] is not None]
    for t, p in zip(tested, holm([t["across_seeds"]["p"] for t in tested])):
        t["p_seeds_adjusted"] = p
    for t in pairwise.values():
        if (t["a"], t["b"]) == PRIMARY:
            t.update(family="primary, unadjusted", p_adjusted=t["p_cmh"],
                     p_seeds_adjusted=t["across_seeds"]["p"] if t["across_seeds"] else None)
    first = runs[0]
    return {
        "what": "validation success of the methods seed by seed on the same frozen test panel; paired tests",
        "recipe_sha256": first["recipe_sha256"], "config": first["config"], "iterations": first["iterations_planned"],
        "val_every": first["val_every"], "dev_only": first["dev_only"], "panels": first["panels"],
        "runs": {f"{r['method']}_seed{r['seed']}": {
            "method": r["method"], "seed": r["seed"], "config_sha256": r["config_sha256"],
            "validations": [{k: v[k] for k in ("iteration", "panel", "episodes", "successes", "success", "ci95")}
                            for v in r["validations"]],
            "iterations": [{"iteration": it["iteration"], "tasks": it["tasks"], "success": it["success"],
                            "groups_with_success": it["groups_with_success"], "credited_steps_per_failed": credited(it)}
                           for it in r["iterations"]], "fit_s": r["timing"]["fit_s"]} for r in runs},
        "planned_seeds": dict(planned), "methods": per_method, "vs_iteration_0": vs_zero, "pairwise": pairwise,
        "statistics": "benchmarks/learning_stats.py (statsmodels, scipy)",
    }


def _mse(x: dict[str, Any], digits: int = 3) -> str:
    return f"{x['mean']:.{digits}f}" + (f" ± {x['se']:.{digits}f}" if x["se"] is not None else "")


def runs_table(result: dict[str, Any]) -> str:
    """Per run: success at each checkpoint with its Wilson interval."""
    first = next(iter(result["runs"].values()))
    head = [f"iteration {v['iteration']} ({v['panel']})" for v in first["validations"]]
    lines = ["| run | " + " | ".join(head) + " | fit wall time |", "|---" * (len(head) + 2) + "|"]
    for name, run in result["runs"].items():
        cells = [f"{v['successes']}/{v['episodes']} = {v['success']:.3f} [{v['ci95'][0]:.2f}, {v['ci95'][1]:.2f}]"
                 for v in run["validations"]]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {run['fit_s'] / 60:.1f} min |")
    return "\n".join(lines)


def methods_table(result: dict[str, Any]) -> str:
    """Per method: mean ± SE over seeds per checkpoint; final vs iteration 0, paired on the test games."""
    some = next(iter(result["methods"].values()))
    head = [f"iteration {c['iteration']} ({c['panel']})" for c in some["checkpoints"]]
    lines = ["| method | seeds | " + " | ".join(head) + " | change [95 % CI] | only final / only it. 0 "
             "| p (CMH, pooled) | p (exact McNemar, per seed) | p (t across seeds) |", "|---" * (len(head) + 7) + "|"]
    for m, x in result["methods"].items():
        t = result["vs_iteration_0"][m]
        lines.append(f"| {m} | {len(x['seeds'])} | " + " | ".join(_mse(c) for c in x["checkpoints"])
                     + f" | {t['difference']:+.3f} [{t['difference_ci95'][0]:+.3f}, {t['difference_ci95'][1]:+.3f}]"
                     f" | {t['only_b']} / {t['only_a']} | {fmt_p(t['p_cmh'])} | "
                     + ", ".join(fmt_p(s["p_exact"]) for s in t["per_seed"]) + f" | {_seeds_p(t['across_seeds'])} |")
    return "\n".join(lines)


def pairwise_table(result: dict[str, Any]) -> str:
    """Every pair of methods at the final checkpoint, paired on the same seeds and test games."""
    lines = ["| b vs a | seeds | success a | success b | b - a [95 % CI] | only b / only a | odds ratio [95 % CI] "
             "| p (CMH) | p (t across seeds) | family | p adjusted (CMH / seeds) |", "|---" * 11 + "|"]
    for name, t in result["pairwise"].items():
        ratio = (f"{t['odds_ratio']:.2f} [{t['odds_ratio_ci95'][0]:.2f}, {t['odds_ratio_ci95'][1]:.2f}]"
                 if t["odds_ratio"] is not None else "–")
        lines.append(f"| {name} | {t['seeds']} | {t['success_a']:.3f} | {t['success_b']:.3f} | {t['difference']:+.3f} "
                     f"[{t['difference_ci95'][0]:+.3f}, {t['difference_ci95'][1]:+.3f}] | {t['only_b']} / "
                     f"{t['only_a']} | {ratio} | {fmt_p(t['p_cmh'])} | {_seeds_p(t['across_seeds'])} | {t['family']} | "
                     f"{fmt_p(t['p_adjusted'])} / {_opt_p(t['p_seeds_adjusted'])} |")
    return "\n".join(lines)


def _opt_p(p: float | None) -> str:
    return "–" if p is None else fmt_p(p)


def _seeds_p(seeds: dict[str, Any] | None) -> str:
    """The across-seeds test as a cell: its mean difference's interval and p."""
    if seeds is None:
        return "– (1 seed)"
    return f"{_opt_p(seeds['p'])} ({seeds['df']} df)"


def _pairs(n: int) -> str:
    return f"{n} pair" + ("" if n == 1 else "s")


def _p(p: float) -> str:
    text = fmt_p(p)
    return text if text.startswith("<") else "= " + text


def _effect(t: dict[str, Any]) -> str:
    seeds = t["across_seeds"]
    across = "" if seeds is None or seeds["p"] is None else f"; across seeds p {_p(seeds['p'])} ({seeds['df']} df)"
    return (f"{t['difference']:+.3f} [{t['difference_ci95'][0]:+.3f}, {t['difference_ci95'][1]:+.3f}] in test "
            f"success, CMH p {_p(t['p_cmh'])}{across}")


def change_word(game_p: float, seeds_p: float | None, one_seed: bool, diff: float, alpha: float,
          up: str, down: str, none: str) -> str:
    """A change is stated only when the game-level test and the test across seeds both find it."""
    if game_p >= alpha:
        return none
    direction = up if diff > 0 else down
    if one_seed:
        return f"{direction} on one seed's games (no test across seeds)"
    if seeds_p is None or seeds_p >= alpha:
        return f"{direction} on these runs' test games, not established across seeds"
    return direction


def _seeds(n: int, planned: int) -> str:
    if not planned:
        return f"{n} seeds; not a method of the grid"
    return f"{n} seeds, as planned" if n >= planned else f"{n} of {planned} planned seeds: an interim look"


def verdict(result: dict[str, Any], alpha: float = 0.05) -> str:
    """README's answer in words: each method's final test success against its iteration 0, then each
    pair of methods at the final checkpoint (the primary pair on its own, the secondary ones after
    Holm's adjustment over them), and the seeds each rests on. A change is stated at ``alpha`` only
    where the CMH test on the games and the t test across seeds both find it (``change_word``)."""
    planned, last = result["planned_seeds"], result["iterations"]
    lines = []
    for m, t in result["vs_iteration_0"].items():
        seeds = t["across_seeds"]
        word = change_word(t["p_cmh"], seeds and seeds["p"], seeds is None, t["difference"], alpha,
                     "improved", "got worse", "no detectable change")
        lines.append(f"- **{m}** at iteration {last} against its iteration 0: {word}, {_effect(t)} "
                     f"({_seeds(t['seeds'], planned.get(m, 0))}).")
    for t in result["pairwise"].values():
        a, b = t["a"], t["b"]
        word = change_word(t["p_adjusted"], t["p_seeds_adjusted"], t["across_seeds"] is None, t["difference"], alpha,
                     f"{b} ahead of {a}", f"{a} ahead of {b}", f"no detectable difference between {b} and {a}")
        primary = t["family"].startswith("primary")
        adjusted = "" if primary else (f"; Holm-adjusted CMH p {_p(t['p_adjusted'])}" + (
            "" if t["p_seeds_adjusted"] is None else f", across seeds p {_p(t['p_seeds_adjusted'])}"))
        family = "the primary comparison, unadjusted" if primary else t["family"]
        lines.append(f"- **{b} against {a}** at iteration {last}: {word}, {b} - {a} = {_effect(t)}{adjusted} "
                     f"({family}; {_seeds(t['seeds'], min(planned.get(a, 0), planned.get(b, 0)))}).")
    return "\n".join(lines)


def iterations_table(result: dict[str, Any]) -> str:
    """Per method and iteration (mean over seeds): groups with >= 1 success; SCPO's credited steps."""
    lines = ["| method | groups with a success, per iteration | SCPO credited steps / failed sibling |",
             "|---|---|---|"]
    for m, x in result["methods"].items():
        share = " / ".join(f"{it['groups_with_success']['mean']:.2f}" for it in x["iterations"])
        credit = " / ".join(f"{it['credited_steps_per_failed']['mean']:.2f}" for it in x["iterations"]
                            if it["credited_steps_per_failed"] is not None) or "–"
        lines.append(f"| {m} | {share} | {credit} |")
    return "\n".join(lines)


def dev_history_table(old: dict[str, Any]) -> str:
    """The one-seed dev run that chose the recipe (benchmarks/results/learning_dev_3dd2314.json):
    per run, success at each checkpoint, and exact McNemar against iteration 0 and between runs."""
    runs = old["runs"]
    head = [f"iteration {v['iteration']}" for v in next(iter(runs.values()))["validations"]]
    lines = ["| run | " + " | ".join(head) + " | final vs iteration 0: only final / only it. 0, exact p |",
             "|---" * (len(head) + 2) + "|"]
    for name, run in runs.items():
        v = run["validations"]
        t = paired([outcomes(v[0])], [outcomes(v[-1])])["per_seed"][0]
        lines.append(f"| {name} | " + " | ".join(f"{x['successes']}/{x['episodes']}" for x in v)
                     + f" | {t['only_b']} / {t['only_a']}, p = {fmt_p(t['p_exact'])} |")
    for a, b in combinations(runs, 2):
        t = paired([outcomes(runs[a]["validations"][-1])], [outcomes(runs[b]["validations"][-1])])["per_seed"][0]
        lines.append(f"| {b} vs {a}, final | | | | only {b} / only {a}: {t['only_b']} / {t['only_a']}, "
                     f"p = {fmt_p(t['p_exact'])} |")
    return "\n".join(lines)


def print_tables(result: dict[str, Any]) -> None:
    for table in (runs_table, methods_table, pairwise_table, iterations_table, verdict):
        print(table(result), end="\n\n")


def plot(result: dict[str, Any], path: Path) -> None:
    """Mean success over seeds per method and checkpoint, ± 1 SE band; test-panel points filled."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for m, x in result["methods"].items():
        cps = x["checkpoints"]
        it = [c["iteration"] for c in cps]
        mean = [c["mean"] for c in cps]
        se = [c["se"] or 0.0 for c in cps]
        line, = ax.plot(it, mean, label=f"{m} ({len(x['seeds'])} seeds)")
        ax.fill_between(it, [a - b for a, b in zip(mean, se)], [a + b for a, b in zip(mean, se)],
                        color=line.get_color(), alpha=0.15)
        for c in cps:
            ax.plot(c["iteration"], c["mean"], "o", color=line.get_color(),
                    fillstyle="full" if c["panel"] == "test" else "none")
    test = len(result["panels"]["test"])
    ax.set_xlabel("iteration")
    ax.set_ylabel("validation success (mean over seeds ± SE)")
    ax.set_ylim(0, 1)
    ax.set_title(f"filled: test panel ({test} games), open: dev panel ({len(result['panels']['dev'])} games)",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
