"""MiniLM scorer throughput on a synthetic SCPO batch of ALFWorld-style step texts (no env needed).

The batch mimics the published ALFWorld recipe: ``--groups`` groups of one reference with m steps
and n - 1 failed siblings of l steps each, half of whose steps copy a reference step exactly.
Reports texts/s (the bi-encoder's real unit of work), distinct pairs/s and requested pairs/s
(m x m + (n-1) x m x l per group, what per-sibling scoring would send), and the load average,
since other processes on the machine change the figures. Written to
``benchmarks/results/minilm_scorer.json``.

    python -m benchmarks.minilm_scorer [--groups 16] [--threads 2]
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS, load_average, machine, write_result
from scpo_lightning.scorers.minilm import MiniLMScorer

RECEPTACLES = ["countertop", "drawer", "cabinet", "fridge", "sinkbasin", "microwave", "shelf", "garbagecan"]
OBJECTS = ["apple", "mug", "potato", "knife", "bread", "spoon", "egg", "plate", "cup", "lettuce"]


def step_text(rng: random.Random) -> str:
    r, n = rng.choice(RECEPTACLES), rng.randint(1, 12)
    seen = ", ".join(f"a {rng.choice(OBJECTS)} {rng.randint(1, 3)}" for _ in range(rng.randint(0, 4)))
    kind = rng.randrange(3)
    if kind == 0:
        return f"go to {r} {n} || You arrive at {r} {n}. On the {r} {n}, you see {seen or 'nothing'}."
    if kind == 1:
        return f"open {r} {n} || You open the {r} {n}. The {r} {n} is open. In it, you see {seen or 'nothing'}."
    o = rng.choice(OBJECTS)
    return f"take {o} 1 from {r} {n} || You pick up the {o} 1 from the {r} {n}."


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int, default=16, help="groups per batch")
    p.add_argument("--group-size", type=int, default=8, help="siblings per group (1 reference + failed)")
    p.add_argument("--ref-steps", type=int, default=20, help="m, filtered reference steps")
    p.add_argument("--failed-steps", type=int, default=30, help="l, filtered steps per failed sibling")
    p.add_argument("--batch-size", type=int, default=64, help="MiniLM texts per forward pass")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch intra-op threads")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic texts")
    p.add_argument("--out", type=Path, default=RESULTS / "minilm_scorer.json", help="JSON result file")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = machine()

    rng = random.Random(args.seed)
    pairs, requested = [], 0
    for _ in range(args.groups):
        ref = [step_text(rng) for _ in range(args.ref_steps)]
        pairs += [(a, b) for a in ref for b in ref]
        requested += len(ref) ** 2
        for _ in range(args.group_size - 1):
            failed = [rng.choice(ref) if rng.random() < 0.5 else step_text(rng) for _ in range(args.failed_steps)]
            pairs += [(a, b) for a in ref for b in failed]
            requested += len(ref) * len(failed)
    distinct = list(dict.fromkeys(pairs))
    texts = {t for pair in distinct for t in pair}

    scorer = MiniLMScorer(batch_size=args.batch_size)
    scorer.score(distinct[:64])  # warm-up
    start = time.perf_counter()
    scorer.score(distinct)
    seconds = time.perf_counter() - start
    write_result("minilm_scorer", {
        "groups": args.groups, "group_size": args.group_size, "ref_steps": args.ref_steps,
        "failed_steps": args.failed_steps, "batch_size": args.batch_size, "threads": args.threads,
        "distinct_texts": len(texts), "distinct_pairs": len(distinct), "requested_pairs": requested,
        "seconds": round(seconds, 3), "texts_per_s": round(len(texts) / seconds),
        "distinct_pairs_per_s": round(len(distinct) / seconds), "requested_pairs_per_s": round(requested / seconds),
        "machine": started, "load_average_at_end": load_average(),
    }, args.out)

if __name__ == "__main__":
    main()
