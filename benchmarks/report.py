"""The Markdown tables of ``docs/benchmarks.md``, printed from ``benchmarks/results/*.json``.

``benchmarks.doc_tables`` registers each of them and rewrites the page (``--write``); this prints
them all, under their block names:

    python -m benchmarks.report
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envs.common.cli_args import ArgumentParser


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _machine(m: dict[str, Any]) -> str:
    return (f"{m['cores']} cores, {m['memory_gib']} GiB, torch {m['torch']} ({m['torch_threads']} threads), "
            f"load average at start {m['load_average'][0]}")


def shaper_cost(r: dict[str, Any]) -> str:
    rows = []
    for env in ("alfworld", "webshop"):
        if "summary" not in r.get(env, {}):
            rows.append([env, r.get(env, {}).get("missing", "not replayed"), *[""] * 9])
            continue
        for label, s in r[env]["summary"].items():
            if not s.get("batches"):
                continue
            rows.append([env, label.replace("_", " "), s["batches"], s["pairs_requested"], s["pairs_distinct"],
                         s["pairs_scored_ours"], f"{100 * (s['scored_share_of_requested'] or 0):.1f} %",
                         f"{s['naive_shaper_s']:.2f}", f"{s['ours_shaper_s']:.2f}",
                         f"{100 * s['naive_share_of_iteration']:.2f} %" if "iteration_s" in s else "n/a",
                         f"{100 * s['ours_share_of_iteration']:.2f} %" if "iteration_s" in s else "n/a"])
    out = _table(["env", "batches", "n", "pairs requested", "distinct", "scored (ours)", "scored / requested",
                  "naive shaper s", "ours shaper s", "naive / iteration", "ours / iteration"], rows)
    est = r["gpu_recipe_estimate"]
    gpu = [[env, f"{100 * e['scored_share_of_requested']:.1f} %", e["scorer_s_per_step"],
            f"{100 * e['share_of_step']:.2f} %", f"{100 * e['paper_share_of_step']:.1f} %"]
           for env, e in est.items() if isinstance(e, dict)]
    out += "\n\n" + _table(["GPU recipe estimate", "scored / requested", "scorer s per step", "share of step",
                            "paper"], gpu)
    for env in ("alfworld", "webshop"):
        for name, original in r.get(env, {}).get("left_out_as_duplicate_of", {}).items():
            out += f"\n\n{env}: `{name}` left out, the same rollouts as `{original}`."
    return out + f"\n\nMachine: {_machine(r['machine'])}."


def credit_math(r: dict[str, Any]) -> str:
    rows = [["ours (vectorised)", r["math_cpu_ms_median"], r["math_ms_median"], "1", "1"]]
    for name, b in r["baselines"].items():
        rows.append([name.replace("_", " "), b["cpu_ms_median"], b["wall_ms_median"], f"{b['speedup_cpu']}x",
                     f"{b['speedup_cpu_excluding_order']}x"])
    out = _table(["implementation", "CPU ms (median)", "wall ms (median)", "ours faster by (CPU)",
                  "same, balanced order excluded"], rows)
    phases = _table(["our phase", "CPU ms"], [[k.replace("_", " "), v] for k, v in r["math_cpu_ms_by_phase"].items()])
    return out + "\n\n" + phases + f"\n\nMachine: {_machine(r['machine'])}."


def env_throughput(r: dict[str, Any]) -> str:
    rows = [[x["env"], x["workers"] or "in-process", x["envs"], x["steps_per_s"], x["ms_per_lockstep_call"],
             x["startup_s"], x["reset_s"]] for x in r["runs"]]
    return _table(["env", "workers", "envs", "steps/s", "ms per lock-step call", "start-up s", "reset s"], rows) + \
        f"\n\nMachine: {_machine(r['machine'])}."


def collector(alfworld: dict[str, Any], webshop: dict[str, Any], breakdown: dict[str, Any]) -> str:
    """Rows (= env steps) per second of the whole collector with the quickstart policy."""
    rows = []
    for r in (alfworld, webshop):
        env = r["env"]
        success = 100 * sum(b["success"] for b in r["batches"]) / max(len(r["batches"]), 1)
        load = r["machine_at_start"]["load_average"][0]
        rows.append([f"{env}: benchmarks.record_batches", r["attempts"], r["batches_with_mixed_group"], f"{success:.1f} %",
                     r["collector_rows_per_s"], f"{100 * r['generate_share_of_rollout']:.1f} %", load])
    its = breakdown["iterations"]
    rollout = sum(i["rollout_s"] for i in its)
    rows.append(["alfworld: benchmarks.iteration_breakdown (training batches)", len(its),
                 sum(i["groups_with_reference"] > 0 for i in its),
                 f"{100 * sum(i['success'] for i in its) / len(its):.1f} %",
                 round(sum(i["rows"] for i in its) / rollout, 3),
                 f"{100 * sum(i['generate_s'] for i in its) / rollout:.1f} %", breakdown["machine"]["load_average"][0]])
    return _table(["collector run", "batches", "with a mixed group", "episode success", "rows (env steps) / s",
                   "generation share of rollout", "load average at start"], rows)


def iteration_breakdown(r: dict[str, Any]) -> str:
    median = next(i for i in r["iterations"] if i["iteration"] == r["median_iteration"])
    mean, share = r["train_iteration_mean"], r["share_of_iteration_wall"]
    names = {"generate_s": "rollout: generation", "env_s": "rollout: env steps", "scpo_plan_s": "SCPO plan (blocking)",
             "logprobs_s": "old + reference log-probs", "shaping_wait_s": "wait for SCPO scores (after overlap)",
             "advantage_s": "advantages", "update_s": "PPO update", "other_s": "other (logging, heatmap, checkpoint)"}
    rows = [[label, f"{median[k]:.2f}", f"{100 * share[k]:.1f} %", f"{mean[k]:.2f}"] for k, label in names.items()]
    rows.append(["**iteration (wall)**", f"{median['iteration_wall_s']:.1f}", "100 %", f"{mean['iteration_wall_s']:.1f}"])
    rows.append(["SCPO scorer, in the background", f"{median['scpo_scorer_s_background']:.2f}", "(overlapped)",
                 f"{mean['scpo_scorer_s_background']:.2f}"])
    for v in r["validation_runs"]:
        rows.append([f"validation after iteration {v['after_iteration']} (apart)", f"{v['wall_s']:.1f}", "", ""])
    header = ["phase", f"seconds (iteration {r['median_iteration']}, the median)", "share", "mean of all iterations"]
    per_it = _table(["iteration", "rows", "success", "pairs requested / scored", "generation s", "log-probs s",
                     "update s", "wall s"],
                    [[i["iteration"], i["rows"], i["success"], f"{i['pairs_requested']:.0f} / {i['pairs_scored']:.0f}",
                      i["generate_s"], i["logprobs_s"], i["update_s"], i["iteration_wall_s"]] for i in r["iterations"]])
    return _table(header, rows) + "\n\n" + per_it + f"\n\nMachine: {_machine(r['machine'])}."


def _flat(r: dict[str, Any], prefix: str = "") -> list[list[Any]]:
    """(measure, value) rows of a result's fields, nested ones as ``outer / inner``."""
    rows = []
    for k, v in r.items():
        if k in ("machine", "load_average_at_end"):
            continue
        name = f"{prefix}{k}".replace("_", " ")
        if isinstance(v, dict):
            rows += _flat(v, f"{prefix}{k} / ")
        else:
            rows.append([name, f"{v:.4g}" if isinstance(v, float) else v])
    return rows


def alfworld_env(r: dict[str, Any]) -> str:
    sizes = r["sizes"]
    engine = _table(["room size", "games generated / s", "reset, new game (ms)", "reset, same game (ms)", "step (ms)"],
                    [[size, round(v["generation_games_per_s"]), round(1e3 * v["reset_new_game_s"]),
                      round(1e3 * v["reset_same_game_s"]), round(1e3 * v["step_s"], 1)] for size, v in sizes.items()])
    policies = [(size, p) for size in sizes for p in ("random_policy", "weak_policy") if p in sizes[size]]
    families = list(sizes[policies[0][0]][policies[0][1]]) if policies else []
    success = _table(["family", *[f"{size} {p.split('_')[0]}" for size, p in policies]],
                     [[f, *[f"{sizes[size][p][f]['success']:.2f} ({sizes[size][p][f]['won_within_15']:.2f})"
                            for size, p in policies]] for f in families])
    return (engine + f"\n\nSuccess within {r['max_steps']} steps (within 15), 20 games per family:\n\n" + success +
            f"\n\nMachine: {_machine(r['machine'])}.")


def hf_engine(r: dict[str, Any]) -> str:
    rows = [[k.removeprefix("autocast_").replace("None", "none (fp32)"), mode.replace("_", " "), v["seconds"],
             v["generated_tokens"], v["tokens_per_s"], f"{v['finished']} / {r['batch']}"]
            for k, modes in r.items() if k.startswith("autocast_") for mode, v in modes.items()]
    head = (f"{r['batch']} prompts of {r['prompt_tokens_mean']} tokens in one micro-batch, "
            f"{r['admissible_actions_per_prompt']} admissible actions each; GGUF -> fp32 conversion "
            f"{r['convert_s']} s once, then {r['load_from_cache_s']} s from the cache.\n\n")
    return head + _table(["autocast", "mode", "seconds", "tokens generated", "tokens/s", "finished"], rows) + \
        f"\n\nMachine: {_machine(r['machine'])}."


def numerics(r: dict[str, Any]) -> str:
    """Log-prob change after one AdamW step per precision, learning rate and advantages, and speed."""
    names = {"bf16_tied": "tied weights, bf16 autocast, bf16 logits", "bf16_grid": "bf16 grid, bf16 autocast, fp32 head",
             "fp32": "fp32"}
    rows = []
    for name, v in r["variants"].items():
        for key, m in v.items():
            if "_advantages_lr_" in key:
                kind, lr = key.split("_advantages_lr_")
                rows.append([names.get(name, name), kind, lr, f"{m['k3_kl']:.2e}", f"{m['mean_abs_dlogp']:.4f}",
                             f"{m['max_abs_dlogp']:.3f}", f"{m['update_s_per_row']:.2f}"])
    steps = _table(["computation", "advantages", "lr", "k3 KL / token", "mean \\|Δ log p\\|", "max \\|Δ log p\\|",
                    "update s/row"], rows)
    other = [[names.get(n, n), f"{v['batching_8_vs_5']['mean_abs_dlogp']:.2e}",
              f"{v['vs_fp32_same_weights']['k3_kl']:.2e}" if "vs_fp32_same_weights" in v else "-",
              f"{v['forward_s_per_row']:.3f}"] for n, v in r["variants"].items()]
    head = (f"{r['rows']} recorded quickstart rows ({r['response_tokens']} response tokens, prompts of "
            f"{r['prompt_tokens_mean']:.0f} tokens), micro-batches of {r['micro_batch_rows']}; "
            f"{r['bf16_tie_fraction_as_loaded']:.1%} of the parameters are bf16 ties as loaded.\n\n")
    rest = _table(["computation", "mean \\|Δ\\| micro-batches 8 vs 5", "k3 vs fp32, same weights", "no-grad forward s/row"], other)
    return head + steps + "\n\n" + rest + f"\n\nMachine: {_machine(r['machine'])}."


def measures(r: dict[str, Any]) -> str:
    """A result of the smaller component benchmarks as a measure/value table."""
    return _table(["measure", "value"], _flat(r)) + f"\n\nMachine: {_machine(r['machine'])}."


def iteration_speed(r: dict[str, Any]) -> str:
    """Seconds per phase and rows/s of one recorded batch per setting (each setting's fastest run)."""
    s0 = r["settings"][0]
    rows = [[s["setting"], s["generate_s"], s["logprobs_s"], s["update_s"], " / ".join(map(str, s["runs_model_s"])),
             round(s["rows_per_s"], 2), f"{s['speedup_vs_filed']:.2f}"] for s in r["settings"]]
    return (_table(["setting", "generation s", "old + ref log-probs s", "update s", "model s of each run", "rows/s",
                    "vs the filed quickstart"], rows)
            + f"\n\n{s0['rows']} rows ({s0['tokens']} tokens) of `{r['batch']}`, {r['repeat']} runs per setting "
              f"round-robin, the fastest kept. Machine: {_machine(r['machine'])}, "
              f"at end {r['load_average_at_end'][0]}.")


def main(argv: list[str] | None = None) -> None:
    ArgumentParser(description=__doc__.split("\n")[0]).parse_args(argv)  # takes no options: --help, or refuses
    # imported here: doc_tables imports this module's render functions
    from benchmarks.doc_tables import blocks, render

    for name, _ in blocks(Path("docs/benchmarks.md").read_text()):
        print(f"### {name}\n\n{render(name)}\n")


if __name__ == "__main__":
    main()
