"""docs/quickstart.md's tables, from ``benchmarks/results/quickstart.json``
(``python -m benchmarks.iteration_breakdown --max-epochs 4 --out quickstart``: the quickstart's
config as it is, run in-process with a phase timer); ``benchmarks.doc_tables`` puts them in the doc.
The phase table is ``benchmarks.report.iteration_breakdown``'s, from the same file.
"""

from __future__ import annotations

from typing import Any

from benchmarks.learning_stats import wilson
from benchmarks.report import _machine, _table


def _num(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def iterations(r: dict[str, Any]) -> str:
    """Per training iteration: its rows, success, SCPO's work and the PPO update's statistics."""
    groups = r["settings"]["groups_per_batch"]
    rows = []
    for it in r["iterations"]:
        s = it["stats"]
        rows.append([it["iteration"], it["rows"], f"{it['success']:.2f}", f"{it['groups_with_reference']:.0f} of {groups}",
                     _num(s["credited_steps_per_failed"], ".2f"),
                     f"{it['pairs_requested']:,.0f} / {it['pairs_scored']:,.0f}", f"{s['optimizer_steps']:.0f}",
                     f"{s['kl']:.3f}", f"{s['clip_frac']:.3f} / {s['clip_frac_last']:.3f}",
                     f"{s['logprob_diff_max']:.0e}"])
    return _table(["iteration", "rows", "train success", "groups with a reference", "credited steps per failed sibling",
                   "pairs requested / scored", "PPO steps", "KL to reference (k3)", "clip fraction (mean / last step)",
                   "rollout vs train max \\|Δ log p\\|"], rows)


def validation(r: dict[str, Any]) -> str:
    """Each validation run: its games won with the Wilson interval, per family, and its wall time."""
    rows = []
    for v in r["validation_runs"]:
        won = [w for *_, w in v["outcomes"]]
        low, high = wilson(sum(won), len(won))
        families: dict[str, list[int]] = {}
        for _, family, w in v["outcomes"]:
            families.setdefault(family, []).append(w)
        per = ", ".join(f"{f} {sum(ws)}/{len(ws)}" for f, ws in sorted(families.items()))
        rows.append([v["after_iteration"], f"{sum(won)}/{len(won)} = {v['success']:.2f} [{low:.2f}, {high:.2f}]", per,
                     f"{v['wall_s']:.1f}"])
    fit = r["fit_wall_s"]
    return (_table(["after iteration", "success [95 % Wilson]", "per family", "wall s"], rows)
            + f"\n\nWhole fit (4 iterations and the validations, in-process, without the HF export): **{fit / 60:.1f} min** "
              f"({fit:.0f} s). Machine: {_machine(r['machine'])}; load average at the end {r['load_average_at_end'][0]}.")


def room_floors(r: dict[str, Any]) -> str:
    """``benchmarks.alfworld_env``: the random and the weak policy's success within 15 steps, per
    family and room size (what chose the quickstart's rooms, families and excluded commands)."""
    sizes = [s for s in ("tiny", "small") if s in r["sizes"]]
    policies = [(s, p) for s in sizes for p in ("random_policy", "weak_policy")]
    families = list(r["sizes"][sizes[0]]["random_policy"])
    rows = [[f, *[f"{r['sizes'][s][p][f]['won_within_15']:.2f}" for s, p in policies]] for f in families]
    return _table(["family", *[f"{s}, {p.split('_')[0]}" for s, p in policies]], rows)


def speed(r: dict[str, Any]) -> str:
    """``--baseline``: the filed code path's fit against today's, same seed, same process (issue 30)."""
    base, today = r["baseline"], r
    rows = [["whole fit (s)", f"{base['fit_wall_s']:.0f}", f"{today['fit_wall_s']:.0f}",
             f"{today['fit_wall_s'] / base['fit_wall_s']:.2f}×"]]
    for key, name in (("generate_s", "generation per iteration (s, mean)"), ("logprobs_s", "log-probs per iteration (s, mean)"),
                      ("update_s", "update per iteration (s, mean)"), ("iteration_wall_s", "iteration wall (s, mean)")):
        b, t = base["train_iteration_mean"][key], today["train_iteration_mean"][key]
        rows.append([name, f"{b:.1f}", f"{t:.1f}", f"{t / b:.2f}×"])
    b, t = (sum(v["wall_s"] for v in x["validation_runs"]) for x in (base, today))
    rows.append([f"validation, {len(today['validation_runs'])} runs (s)", f"{b:.0f}", f"{t:.0f}", f"{t / b:.2f}×"])
    wins = [" / ".join(f"{sum(w for *_, w in v['outcomes'])}" for v in x["validation_runs"]) for x in (base, today)]
    rows.append(["validation games won (per run)", wins[0], wins[1], "sampled differently"])
    return (_table(["", f"filed path ({' '.join(base['cli_overrides'])})", "today's defaults", "today / filed"], rows)
            + f"\n\nBoth fits in one process, the filed path first. Machine: {_machine(r['machine'])}; "
              f"load average at the end {r['load_average_at_end'][0]}.")
