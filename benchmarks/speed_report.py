"""The tables of issue 30's speed work (prefix sharing, roofline, whole runs, autocast's cast cost),
from their result files; ``benchmarks.doc_tables`` puts them in docs/benchmarks.md and docs/numerics.md.
"""

from __future__ import annotations

from typing import Any

from benchmarks.report import _machine, _table


def _footer(r: dict[str, Any]) -> str:
    return f"Machine: {_machine(r['machine'])}, at end {r['load_average_at_end'][0]}; {r['note']}."


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
    return out + "\n\n" + _footer(r)


def scoring_prefix(r: dict[str, Any]) -> str:
    out = _table(["env", "batches", "tokens per pass (today)", "shared", "share", "worst batch"],
                 [[env, len(c["batches"]), c["today_tokens"], c["shared_tokens"], f"{c['shared_share']:.1%}",
                   f"{c['shared_share_worst_batch']:.1%}"] for env, c in r["counts"].items()])
    if "timing" in r:
        out += "\n\n" + _table(
            ["timed (first batch)", "rows", "no-grad pass today s", "shared s", "speed-up", "update fwd + bwd today s",
             "shared s", "speed-up", "max \\|Δ log p\\|", "max relative Δ gradient"],
            [[env, t["rows"], t["logprobs_today_s"], t["logprobs_shared_s"], f"{t['logprobs_speedup']}x",
              t["update_today_s"], t["update_shared_s"], f"{t['update_speedup']}x", f"{t['max_abs_logprob_diff']:.1e}",
              f"{t['max_rel_grad_diff']:.1e}"] for env, t in r["timing"].items()])
    return out + "\n\n" + _footer(r)


def gqa_attention(r: dict[str, Any]) -> str:
    rows = [["validation-like generate", f"{r['prompts']} prompts, {r['new_tokens']} new tokens",
             r["generate_sdpa_s"], r["generate_cpu_gqa_sdpa_s"], f"{r['generate_speedup']}x", r["same_tokens"]],
            ["no-grad log-prob pass", f"{r['logprob_rows']} rows", r["logprobs_sdpa_s"],
             r["logprobs_cpu_gqa_sdpa_s"], f"{r['logprobs_speedup']}x",
             r["same_policy_logprobs"] and r["same_scoring_logprobs"]]]
    return _table(["call", "size", "HF sdpa s", "cpu_gqa_sdpa s", "speed-up", "bit-identical"], rows) \
        + "\n\n" + _footer(r)


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
                    f"{p['share_of_bf16_peak']:.1%}"] for p in r["phases"]])
    return out + "\n\n" + _footer(r)


def _overrides(run: dict[str, Any], sep: str = "<br>") -> str:
    return sep.join(f"`{o}`" for o in run["overrides"]) or "(the recipe)"


def validation_runs(r: dict[str, Any]) -> str:
    """A validate-only ``run_speed`` result: one row per variant, the whole validate call timed."""
    rows = [[x["variant"], _overrides(x), x["wall_s"], x["validation_episodes_per_s"],
             " / ".join(f"{v['successes']} of {v['episodes']}" for v in x["validations"]),
             f"{x['prefill_counts']['prefilled_tokens']} of {x['prefill_counts']['prompt_tokens']}"] for x in r["runs"]]
    return (_table(["variant", "overrides of the recipe", "wall s (model load included)", "episodes / s", "won",
                    "prompt tokens prefilled"], rows)
            + f"\n\n`{r['args']['config']}`, seed {r['args']['seed']}, {r['args']['val_episodes']} dev-panel games, "
              "each variant once, one after the other in one process. " + _footer(r))


def training_iterations(r: dict[str, Any]) -> str:
    """A training ``run_speed`` result: each iteration's phase seconds and rollout-vs-train mismatch."""
    # + 0.0: a k3 rounded to -0.0 in the file would print as "-0"
    rows = [[x["variant"], i["iteration"], i["rows"], f"{i['generate_s']:.1f}", f"{i['time/logprobs_s']:.1f}",
             f"{i['time/update_s']:.1f}", f"{i['rollout/logprob_k3'] + 0.0:.2g}",
             f"{i['rollout/logprob_diff_mean']:.2g}", f"{i['rollout/logprob_diff_max']:.2g}", f"{i['train/kl']:.2f}", f"{i['train/clip_frac']:.3f}"]
            for x in r["runs"] for i in x["iterations"]]
    variants = "; ".join(f"{x['variant']}: {_overrides(x, ', ')}" for x in r["runs"])
    return (_table(["variant", "iteration", "rows", "generation s", "log-probs s", "update s", "`rollout/logprob_k3`",
                    "`logprob_diff_mean`", "`logprob_diff_max`", "`train/kl`", "`train/clip_frac`"], rows)
            + f"\n\n`{r['args']['config']}`, seed {r['args']['seed']}, {r['args']['iterations']} iterations, no "
              f"validation; {variants}. " + _footer(r))


def autocast_cast(r: dict[str, Any]) -> str:
    """µs per ``F.linear`` call per weight handling, and what autocast's re-cast of a frozen weight costs."""
    rows = [[shape, *(v[k] for k in ("fp32", "autocast_frozen", "autocast_requires_grad", "bf16_copy")),
             f"{v['autocast_frozen'] / v['autocast_requires_grad']:.1f}x"] for shape, v in r["us_per_call"].items()]
    return (_table(["shape (F.linear, rows)", "fp32 µs", "bf16 autocast, frozen weight µs",
                    "bf16 autocast, weight requires grad (cast cached) µs", "bf16 copy of the weight µs",
                    "frozen / cached"], rows) + "\n\n" + _footer(r))


def full_runs(r: dict[str, Any]) -> str:
    """A full-recipe ``run_speed`` result: each variant's fit, its validations and its iterations, summed."""
    def total(x: dict[str, Any], key: str) -> str:
        return f"{sum(i[key] for i in x['iterations']):.0f}"

    rows = [[x["variant"], _overrides(x), f"{x['wall_s']:.0f}", f"{x.get('wall_vs_today', 1.0):.3f}",
             f"{x['validation_s']:.0f}", total(x, "seconds"), total(x, "generate_s"), total(x, "time/logprobs_s"),
             total(x, "time/update_s"), " / ".join(f"{v['successes']} of {v['episodes']}" for v in x["validations"]),
             f"{max(i['rollout/logprob_diff_max'] for i in x['iterations']):.1g}"] for x in r["runs"]]
    return (_table(["variant", "overrides of the recipe", "fit wall s", "vs today", "validations s",
                    "iterations s", "of which generation s", "log-probs s", "update s", "validation won",
                    "max rollout-vs-train \\|Δ log p\\|"], rows)
            + f"\n\n`{r['args']['config']}`, seed {r['args']['seed']}, the whole recipe (training and its "
              "validations), each variant once, one after the other in one process. " + _footer(r))


def trainer_floor(r: dict[str, Any]) -> str:
    """Why a whole-run target of half the filed wall time needs another trainer: the fp32 trainer's
    own seconds (log-probs and update, whose arithmetic the recipe fixes) against what half leaves."""
    filed, now = r["runs"][0], r["runs"][-1]
    trainer = sum(i["time/logprobs_s"] + i["time/update_s"] for i in now["iterations"])
    half = filed["wall_s"] / 2
    rest = now["wall_s"] - trainer
    return (f"With `{now['variant']}`, the fp32 trainer alone (old/reference log-probs and the PPO update) took "
            f"**{trainer:.0f} s = {trainer / filed['wall_s']:.2f}×** of the filed path's {filed['wall_s']:.0f} s. "
            f"Half the filed wall time ({half:.0f} s) would leave {half - trainer:.0f} s for everything else — "
            f"set-up, every training collection and every validation — which took {rest:.0f} s here: those "
            f"would have to run {rest / (half - trainer):.1f}× faster than today's code. "
            "Faster sampling cannot get there; only a cheaper trainer (bf16 matmuls on this CPU, or fewer "
            "tokens per PPO step) can, and either changes the recipe.")


def copy_validations(r: dict[str, Any]) -> str:
    """A validate-only ``run_speed`` result with a sampler copy: speed, and the copy's distance from the policy."""
    def drift(v: dict[str, Any], key: str) -> str:
        d = v.get("sampler_vs_policy")
        return f"{d[key]:.2g}" if d else "(the policy itself)"

    rows = [[x["variant"], _overrides(x), x["wall_s"], x["validation_episodes_per_s"],
             f"{x['validations'][0]['successes']} of {x['validations'][0]['episodes']}",
             *(drift(x["validations"][0], k) for k in ("mean_abs", "k3", "max_abs"))] for x in r["runs"]]
    return (_table(["variant", "overrides of the recipe", "wall s (model load included)", "episodes / s", "won",
                    "sampler vs policy: mean \\|Δ log p\\|", "k3", "max \\|Δ log p\\|"], rows)
            + f"\n\n`{r['args']['config']}`, seed {r['args']['seed']}, {r['args']['val_episodes'] or 'the recipe'}'s "
              "dev-panel games, the untrained policy, each variant once, one after the other in one process; the "
              "distance is the fp32 policy's log-probs of the sampled tokens against the sampler's own (its "
              "time left out). " + _footer(r))


def copy_drift(r: dict[str, Any]) -> str:
    """A whole ``run_speed`` run with a sampler copy: the copy's distance from the fp32 policy at each
    validation, as the policy trains."""
    rows = [[x["variant"], i + 1, f"{v['successes']} of {v['episodes']}", v["sampler_vs_policy"]["tokens"],
             f"{v['sampler_vs_policy']['mean_abs']:.3f}", f"{v['sampler_vs_policy']['k3']:.2g}",
             f"{v['sampler_vs_policy']['max_abs']:.2f}", v["seconds"]]
            for x in r["runs"] for i, v in enumerate(x["validations"])]
    return (_table(["variant", "validation", "won", "tokens", "sampler vs policy: mean \\|Δ log p\\|", "k3",
                    "max \\|Δ log p\\|", "validation s"], rows)
            + f"\n\n`{r['args']['config']}` as recipe (seed {r['args']['seed']}, {len(r['runs'][0]['iterations'])} "
              "iterations), which validates before training and then every 6 iterations: validations 1, 2, 3 are "
              "the policy after 0, 6 and 12 updates. Distance: the fp32 policy's log-probs of the tokens the copy "
              "sampled against the copy's own (its time left out). " + _footer(r))
