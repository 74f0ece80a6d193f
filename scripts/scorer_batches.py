"""Scorer workload on rollout batches recorded from an embedded env: de-dup ratio, cache hits, speed.

Each iteration samples ``--groups`` tasks and plays ``--group-size`` siblings per task from the
same start: sibling 0 replays the env's scripted solution (the success SCPO needs), every other
sibling replays a random-length prefix of it and then acts at random (failures that share the
reference's first steps, as partly trained policies do). The rows go through the real SCPO
planner (`plan_shaping`), and its pairs through `CachedScorer` over consecutive iterations.
Prints per iteration: pairs the paper's per-sibling scoring requests, distinct pairs, cache hits,
pairs scored and scorer seconds, then the totals and the scorer's pairs/s.

    .venv/bin/python scripts/scorer_batches.py --env alfworld --iterations 4 --scorer minilm
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import numpy as np
from rich.progress import Progress

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from calibrate_minilm import expert_actions, load_env, random_action  # noqa: E402

from scpo_lightning.scorers import CachedScorer, make_scorer  # noqa: E402
from scpo_lightning.scpo_config import SCPOConfig  # noqa: E402
from scpo_lightning.shaper import plan_shaping  # noqa: E402


def play_group(env, name: str, split: str, index: int, group: int, n: int, max_steps: int,
               rng: random.Random, rows: dict) -> None:
    script = expert_actions(name, env, split, index)
    for member in range(n):
        prefix = len(script) if member == 0 else rng.randrange(len(script) or 1)
        reset = env.reset(split, index)
        admissible, total, start = reset.admissible, 0.0, len(rows["steps"])
        for t in range(max_steps):
            action = script[t] if t < prefix else random_action(name, admissible, reset.task, rng)
            tr = env.step(action)
            total += tr.reward
            for key, value in (("group_ids", group), ("traj_ids", group * n + member), ("steps", t),
                               ("actions", action), ("observations", tr.observation),
                               ("is_action_valid", True), ("noop", tr.noop)):
                rows[key].append(value)
            admissible = tr.admissible
            if tr.done or not admissible:
                break
        rows["traj_returns"] += [total] * (len(rows["steps"]) - start)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env", choices=["alfworld", "webshop"], default="alfworld", help="embedded env to play")
    p.add_argument("--split", default="train", help="split to sample tasks from")
    p.add_argument("--tasks", type=int, default=64, help="task pool size the iterations sample from")
    p.add_argument("--iterations", type=int, default=4, help="consecutive training iterations to simulate")
    p.add_argument("--groups", type=int, default=16, help="groups (tasks) per iteration (groups_per_batch)")
    p.add_argument("--group-size", type=int, default=8, help="siblings per group (n)")
    p.add_argument("--max-steps", type=int, default=None, help="episode step limit (default: the env's)")
    p.add_argument("--scorer", default="minilm", choices=["minilm", "lexical", "bge"], help="scorer to time")
    p.add_argument("--model-dir", default=None, help="bge only: local bge-reranker-v2-m3 folder")
    p.add_argument("--cache-entries", type=int, default=100_000, help="CachedScorer bound")
    p.add_argument("--seed", type=int, default=0, help="seed of task sampling and the random policy")
    args = p.parse_args(argv)

    env = load_env(args.env)
    max_steps = args.max_steps or env.max_steps
    options = {"model_dir": args.model_dir} if args.scorer == "bge" else {}
    scorer = CachedScorer(make_scorer(args.scorer, **options), cache_entries=args.cache_entries)
    config = SCPOConfig(order="chronological", tau_succ=0.0 if args.env == "alfworld" else 9.0)
    rng = random.Random(args.seed)
    totals = np.zeros(5)
    print("iter | requested | distinct | distinct/requested | cache hits | scored | scorer s | pairs/s")
    for it in range(args.iterations):
        rows = {k: [] for k in ("group_ids", "traj_ids", "steps", "traj_returns", "actions",
                                "observations", "is_action_valid", "noop")}
        with Progress(transient=True) as progress:
            job = progress.add_task(f"iteration {it}: playing", total=args.groups)
            for g, index in enumerate(rng.sample(range(args.tasks), args.groups)):
                play_group(env, args.env, args.split, index, g, args.group_size, max_steps, rng, rows)
                progress.advance(job)
        plan = plan_shaping(config=config, **rows)
        stats = scorer.score_batch(plan.pairs).stats
        # The planner already de-duplicates within the batch; requested counts what per-sibling
        # scoring (the paper's) would send, M* once per group.
        row = [plan.pairs_requested, stats.distinct, stats.cache_hits, stats.scored, stats.seconds]
        totals += row
        rate = stats.scored / stats.seconds if stats.seconds else float("nan")
        print(f"{it:4d} | {row[0]:9d} | {row[1]:8d} | {row[1] / max(row[0], 1):18.3f} | {row[2]:10d} | "
              f"{row[3]:6d} | {row[4]:8.2f} | {rate:7.1f}")
    req, dist, hits, scored, secs = totals
    print(f"total: requested {req:.0f}, distinct {dist:.0f} ({dist / max(req, 1):.3f}), cache hits "
          f"{hits:.0f} ({hits / max(dist, 1):.1%} of distinct), scored {scored:.0f} in {secs:.1f} s "
          f"({scored / secs if secs else float('nan'):.1f} distinct pairs/s, "
          f"{req / secs if secs else float('nan'):.1f} requested pairs/s)")
    env.close()


if __name__ == "__main__":
    main()
