"""The tables of issue 30's speed work (prefix sharing, roofline, whole runs), from their result files.

    python -m benchmarks.speed_report      # also printed by python -m benchmarks.report
"""

from __future__ import annotations

from typing import Any

from benchmarks.report import _load, _machine, _table


def prefix_prefill(r: dict[str, Any]) -> str:
    rows = []
    for env, c in r["counts"].items():
        t = c["total"]
        rows.append([env, len(c["batches"]), t["prompt_tokens"], t["shared_tokens"], f"{c['shared_share']:.1%}",
                     f"{c['shared_share_worst_batch']:.1%}", t["today_padded"], t["shared_padded"],
                     f"{c['shared_padded_share']:.1%}"])
    out = _table(["env", "batches", "prompt tokens (today)", "prefilled, shared", "share", "worst batch",
                  "today with padding", "shared with padding", "share"], rows)
    if "timing" in r:
        rows = [[f"{env} (first batch, steps: {t.get('calls_per_batch', 'all')})", t["calls"], t["prefill_today_s"],
                 t["prefill_shared_s"], f"{t['prefill_speedup']}x",
                 t["generate_today_s"], t["generate_shared_s"], f"{t['generate_speedup']}x",
                 f"{t['calls_with_the_same_tokens']} / {t['calls']}", f"{t['max_abs_logprob_diff']:.1e}"]
                for env, t in r["timing"].items()]
        out += "\n\n" + _table(["timed", "generate calls", "prefill today s", "prefill shared s", "speed-up",
                                "generate today s", "generate shared s", "speed-up", "same tokens",
                                "max \\|Δ log p\\|"], rows)
    return out + f"\n\nMachine: {_machine(r['machine'])}, at end {r['load_average_at_end'][0]}; {r['note']}."


def roofline(r: dict[str, Any]) -> str:
    m = r["matmul"]
    shapes = list(m["float32"]["gflops"])
    out = _table(["shape (F.linear, tokens)", "fp32 GFLOP/s", "bf16 GFLOP/s", "bf16 / fp32"],
                 [[s, m["float32"]["gflops"][s], m["bfloat16"]["gflops"][s],
                   f"{m['bfloat16']['gflops'][s] / m['float32']['gflops'][s]:.1f}x"] for s in shapes])
    out += (f"\n\nPeak (fastest shape): fp32 {m['float32']['peak_gflops']} GFLOP/s, bf16 {m['bfloat16']['peak_gflops']}"
            f" GFLOP/s. Phases on {r['rows']} rows of `{r['batch']}` ({r['generate_calls']} generate calls) and a "
            f"{r['validation_prompts']}-prompt validation call, fp32 with LoRA 16:\n\n")
    out += _table(["phase", "seconds", "GFLOP done", "GFLOP/s", "share of fp32 peak", "share of bf16 peak"],
                  [[p["phase"], p["seconds"], p["gflop"], p["gflops_per_s"], f"{p['share_of_fp32_peak']:.0%}",
                    f"{p['share_of_bf16_peak']:.0%}"] for p in r["phases"]])
    return out + f"\n\nMachine: {_machine(r['machine'])}, at end {r['load_average_at_end'][0]}; {r['note']}."


def run_speed(r: dict[str, Any]) -> str:
    rows = [[x["variant"], x["wall_s"], x.get("wall_vs_today", ""), x["validation_s"],
             x["validation_episodes_per_s"], " / ".join(f"{v['successes']}/{v['episodes']}" for v in x["validations"]),
             x.get("same_outcomes_as_today", "")] for x in r["runs"]]
    return (_table(["variant", "wall s", "vs today", "validation s", "validation episodes/s", "successes",
                    "same outcomes as today"], rows)
            + f"\n\nArguments: {r['args']}. Machine: {_machine(r['machine'])}, at end {r['load_average_at_end'][0]}.")


SECTIONS = [("Prefix-shared prefill", "prefix_prefill", prefix_prefill), ("Roofline", "roofline", roofline),
            ("Whole runs, per code path", "run_speed", run_speed),
            ("Validation, per code path", "validation_speed", run_speed)]


def main() -> None:
    for title, name, render in SECTIONS:
        result = _load(name)
        print(f"### {title}\n\n" + (render(result) if result else f"(no results/{name}.json yet)") + "\n")


if __name__ == "__main__":
    main()
