"""The Markdown tables of README.md and docs/*.md that come from result files, printed from them.

A table in a doc sits between ``<!-- table: NAME -->`` and ``<!-- /table -->``; ``BLOCKS[NAME]``
says which result files it comes from and which function prints it (from those files, in order).
``--write`` rewrites every marked table from the committed results; ``tests/test_doc_tables.py``
fails on any difference.

    python -m benchmarks.doc_tables           # list the tables that differ from their result files
    python -m benchmarks.doc_tables --write   # rewrite them
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import learning_ranking, learning_report, learning_reproduction, quickstart_report, report, speed_report
from benchmarks.common import RESULTS

DOCS = (Path("README.md"), Path("docs/learning.md"), Path("docs/numerics.md"), Path("docs/quickstart.md"),
        Path("docs/benchmarks.md"))
# The body stops at the first marker: an empty block (a table not yet written) cannot swallow the next one.
BLOCK = re.compile(r"(<!-- table: (?P<name>[\w-]+) -->\n)(?P<body>(?:(?!<!-- /?table).)*?)\n?(<!-- /table -->)", re.S)

#: The rows of docs/numerics.md's one-step table: (variant, its label there).
NUMERICS_ROWS = (("bf16_tied", "tied weights, bf16 autocast, bf16 logits (the quickstart before)"),
                 ("bf16_grid", "weights snapped onto the bf16 grid, bf16 autocast, fp32 LM head"),
                 ("fp32", "fp32, full fine-tuning"),
                 ("fp32_lora16", "fp32, LoRA rank 16, weights frozen as loaded (the quickstart now)"))


def numerics_one_step(r: dict[str, Any]) -> str:
    """docs/numerics.md: k3 KL and |Δ log p| after one AdamW step per computation, advantages and lr."""
    lines = ["| computation | advantages | lr | k3 KL per token | mean \\|Δ log p\\| | max \\|Δ log p\\| |",
             "|---|---|---|---|---|---|"]
    for variant, label in NUMERICS_ROWS:
        first = True
        for key, m in r["variants"][variant].items():
            if "_advantages_lr_" in key:
                kind, lr = key.split("_advantages_lr_")
                lines.append(f"| {label if first else ''} | {kind} | {float(lr):.0e} | {m['k3_kl']:.2g} | "
                             f"{m['mean_abs_dlogp']:.2g} | {m['max_abs_dlogp']:.2g} |")
                first = False
    return "\n".join(lines)


#: name -> (result file(s) under benchmarks/results, the function printing its table from them).
BLOCKS: dict[str, tuple[str | tuple[str, ...], Callable[..., str]]] = {
    "learning-dev-3dd2314": ("learning_dev_3dd2314.json", learning_report.dev_history_table),
    "learning-runs": ("learning.json", learning_report.runs_table),
    "learning-methods": ("learning.json", learning_report.methods_table),
    "learning-pairwise": ("learning.json", learning_report.pairwise_table),
    "learning-verdict": ("learning.json", learning_report.verdict),
    "learning-ranking": ("learning.json", learning_ranking.ranking),
    "learning-iterations": ("learning.json", learning_report.iterations_table),
    "learning-reproduction-scpo-seed0": (("learning_runs/scpo_seed0.json", "learning_reproductions/scpo_seed0.json"),
                                         learning_reproduction.table),
    "learning-reproduction-scpo-seed4": (("learning_runs/scpo_seed4.json", "learning_reproductions/scpo_seed4.json"),
                                         learning_reproduction.table),
    "quickstart-room-floors": ("alfworld_env.json", quickstart_report.room_floors),
    "quickstart-iterations": ("quickstart.json", quickstart_report.iterations),
    "quickstart-validation": ("quickstart.json", quickstart_report.validation),
    "quickstart-phases": ("quickstart.json", report.iteration_breakdown),
    "quickstart-speed": ("quickstart.json", quickstart_report.speed),
    "numerics-one-step": ("numerics.json", numerics_one_step),
    "numerics-bf16-sampler": ("run_speed_bf16_train.json", speed_report.training_iterations),
    "benchmarks-numerics": ("numerics.json", report.numerics),
    "benchmarks-iteration-speed": ("iteration_speed.json", report.iteration_speed),
    "benchmarks-shaper-cost": ("shaper_cost.json", report.shaper_cost),
    "benchmarks-credit-math": ("credit_math.json", report.credit_math),
    "benchmarks-env-throughput": ("env_throughput.json", report.env_throughput),
    "benchmarks-iteration-breakdown": ("iteration_breakdown.json", report.iteration_breakdown),
    "benchmarks-hf-engine": ("hf_engine_threads2.json", report.hf_engine),
    "benchmarks-minilm-scorer": ("minilm_scorer.json", report.measures),
    "benchmarks-alfworld-env": ("alfworld_env.json", report.alfworld_env),
    "benchmarks-webshop-env": ("webshop_env.json", report.measures),
    "benchmarks-collector": (("record_batches_alfworld.json", "record_batches_webshop.json",
                              "iteration_breakdown.json"), report.collector),
    "benchmarks-roofline": ("roofline.json", speed_report.roofline),
    "benchmarks-autocast-cast": ("autocast_cast.json", speed_report.autocast_cast),
    "benchmarks-validation-speed": ("run_speed_validation.json", speed_report.validation_runs),
    "benchmarks-full-run-speed": ("run_speed_full.json", speed_report.full_runs),
    "benchmarks-trainer-floor": ("run_speed_full.json", speed_report.trainer_floor),
    "benchmarks-validation-copy": ("run_speed_val_copy.json", speed_report.copy_validations),
    "numerics-validation-copy-drift": ("run_speed_full_val_copy.json", speed_report.copy_drift),
    "benchmarks-prefix-prefill": ("prefix_prefill.json", speed_report.prefix_prefill),
    "benchmarks-scoring-prefix": ("scoring_prefix.json", speed_report.scoring_prefix),
    "benchmarks-gqa-attention": ("gqa_attention.json", speed_report.gqa_attention),
}


def result_files(name: str) -> tuple[str, ...]:
    if name not in BLOCKS:
        raise KeyError(f"table {name!r} is not in benchmarks.doc_tables.BLOCKS ({', '.join(BLOCKS)})")
    files = BLOCKS[name][0]
    return (files,) if isinstance(files, str) else files


def render(name: str, results: Path = RESULTS) -> str:
    loaded = [json.loads((results / f).read_text()) for f in result_files(name)]
    return BLOCKS[name][1](*loaded)


def blocks(text: str) -> list[tuple[str, str]]:
    """(name, body) of every marked table in a doc."""
    return [(m["name"], m["body"]) for m in BLOCK.finditer(text)]


def rewrite(text: str, results: Path = RESULTS) -> str:
    return BLOCK.sub(lambda m: m.group(1) + render(m["name"], results) + "\n" + m.group(4), text)


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="rewrite the tables that differ")
    args = parser.parse_args(argv)
    stale = []
    for doc in DOCS:
        text = doc.read_text()
        new = rewrite(text)
        if new != text:
            stale.append(str(doc))
            if args.write:
                doc.write_text(new)
    print(("rewrote " if args.write else "differ from their result files: ") + (", ".join(stale) or "none"))
    return stale


if __name__ == "__main__":
    main()
