"""docs/quickstart.md's tables, printed from ``benchmarks/results/quickstart.json``: the quickstart
as it runs (``python -m benchmarks.iteration_breakdown --max-epochs 4 --out quickstart``).

    python -m benchmarks.doc_tables --write   # rewrites them with every other doc table
"""

from __future__ import annotations

from typing import Any

from benchmarks.report import _machine, _table

#: Phase seconds per iteration, in the order an iteration runs them: (result key, label).
PHASES = (("generate_s", "rollout: generation (constrained, fp32, LoRA adapters unmerged)"),
          ("env_s", "rollout: env steps (worker processes)"),
          ("logprobs_s", "reference log-probs (no grad; the old log-probs are the sampler's own)"),
          ("scpo_plan_s", "SCPO: planning (scoring runs in the background, overlapped with the log-probs)"),
          ("shaping_wait_s", "waiting for SCPO's scores"),
          ("advantage_s", "advantages"),
          ("update_s", "PPO update (forward + backward of the adapters)"),
          ("iteration_wall_s", "the whole iteration (wall clock, validation apart)"))


def _num(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def iterations(r: dict[str, Any]) -> str:
    """Per training iteration: rows, success, SCPO's work and the update's size."""
    groups = r["settings"]["groups_per_batch"]
    rows = []
    for it in r["iterations"]:
        s = it["stats"]
        rows.append([it["iteration"], it["rows"], f"{it['success']:.2f}", f"{it['groups_with_reference']:g} of {groups}",
                     _num(s["credited_steps_per_failed"], ".2f"),
                     f"{it['pairs_requested']:,.0f} / {it['pairs_scored']:,.0f}", _num(s["optimizer_steps"], ".0f"),
                     _num(s["kl"], ".3f"), f"{_num(s['clip_frac'], '.3f')} / {_num(s['clip_frac_last'], '.3f')}",
                     _num(s["logprob_diff_max"], ".0e")])
    return _table(["iteration", "rows", "train success", "groups with a reference",
                   "credited steps per failed sibling", "pairs requested / scored", "PPO steps", "KL to reference",
                   "clip fraction (mean / last step)", "rollout vs train max \\|Δ log p\\|"], rows)


def phases(r: dict[str, Any]) -> str:
    """Each phase's seconds, lowest and highest over the run's iterations."""
    its = r["iterations"]
    rows = [[label, f"{min(it[key] for it in its):.3g} – {max(it[key] for it in its):.3g}"] for key, label in PHASES]
    first, last = its[0]["iteration"], its[-1]["iteration"]
    return _table(["phase", f"seconds (iterations {first}–{last}, {min(it['rows'] for it in its)}–"
                            f"{max(it['rows'] for it in its)} rows)"], rows)


def run(r: dict[str, Any]) -> str:
    """The run in one paragraph: wall time, validation success per checkpoint, the machine."""
    vals = r["validation_runs"]
    games = len(vals[0]["outcomes"])
    success = " → ".join(f"{v['success']:.3g} (iteration {v['after_iteration']})" for v in vals)
    minutes, seconds = divmod(round(r["fit_wall_s"]), 60)
    return (f"Fit wall time **{minutes} min {seconds} s** ({r['settings']['max_epochs']} iterations, "
            f"{len(vals)} validations). Validation success on its {games} games: {success}. "
            f"Machine: {_machine(r['machine'])}, at end {r['load_average_at_end'][0]}.")
