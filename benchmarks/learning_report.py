"""The learning benchmark's statistics, plot and table (``benchmarks/learning.py`` writes the
JSON they read): Wilson intervals per validation, Newcombe's interval of the change from
iteration 0, the PNG of success vs iteration and the Markdown table of docs/learning.md.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

Z95 = 1.959963984540054




def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (it stays inside [0, 1], unlike the Wald one)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def newcombe(s1: int, n1: int, s2: int, n2: int, z: float = Z95) -> tuple[float, float]:
    """Newcombe's hybrid score interval of p2 - p1 from two Wilson intervals (his method 10).

    It treats the two runs as independent samples; the games are the same ones, whose outcomes
    correlate positively, so this interval is wider than a paired one would be (conservative).
    """
    p1, p2 = s1 / n1, s2 / n2
    l1, u1 = wilson(s1, n1, z)
    l2, u2 = wilson(s2, n2, z)
    d = p2 - p1
    return d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2), d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)


def summarise(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per method and seed: success at iteration 0 and at the last validation, and the change with
    its 95 % interval; ``improved`` when the whole interval lies above 0."""
    out = {}
    for name, run in runs.items():
        first, last = run["validations"][0], run["validations"][-1]
        low, high = newcombe(first["successes"], first["episodes"], last["successes"], last["episodes"])
        out[name] = {"iteration_0": first["success"], f"iteration_{last['iteration']}": last["success"],
                     "change": round(last["success"] - first["success"], 4), "change_ci95": [round(low, 4), round(high, 4)],
                     "improved": low > 0, "fit_wall_s": run["wall_s"]}
    return out


def plot(runs: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for k, (name, run) in enumerate(runs.items()):
        vals = run["validations"]
        x = [v["iteration"] + 0.12 * (k - (len(runs) - 1) / 2) for v in vals]  # side by side, not on top
        y = [v["success"] for v in vals]
        err = [[v["success"] - v["ci95"][0] for v in vals], [v["ci95"][1] - v["success"] for v in vals]]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=name)
    ax.set_xlabel("iteration")
    ax.set_ylabel("validation success (95 % Wilson interval)")
    ax.set_ylim(0, 1)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def table(result: dict[str, Any]) -> str:
    """The Markdown table docs/learning.md shows: per run, success at each validation with its
    Wilson interval, the change with Newcombe's, training success and SCPO credit per iteration."""
    head = [f"iteration {v['iteration']}" for v in next(iter(result["runs"].values()))["validations"]]
    lines = ["| run | " + " | ".join(head) + " | change [95 % CI] | train success per iteration "
             "| SCPO credited steps / failed sibling | buffer references | fit wall time |",
             "|---" * (len(head) + 6) + "|"]
    for name, run in result["runs"].items():
        cells = [f"{v['successes']}/{v['episodes']} = {v['success']:.3f} [{v['ci95'][0]:.2f}, {v['ci95'][1]:.2f}]"
                 for v in run["validations"]]
        s = result["summary"][name]
        its = run["iterations"]
        scpo = [it.get("scpo") or {} for it in its]
        credit = " / ".join(f"{x.get('credited_steps_per_failed', 0.0):.2f}" for x in scpo) if any(scpo) else "–"
        buffered = (" / ".join(f"{x.get('groups_with_buffer_reference', 0.0):.0f}" for x in scpo)
                    if any("groups_with_buffer_reference" in x for x in scpo) else "–")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {s['change']:+.3f} [{s['change_ci95'][0]:+.2f}, "
                     f"{s['change_ci95'][1]:+.2f}] | " + " / ".join(f"{it['success']:.2f}" for it in its)
                     + f" | {credit} | {buffered} | {run['wall_s'] / 60:.1f} min |")
    return "\n".join(lines)
