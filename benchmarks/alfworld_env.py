"""Measure the ALFWorld env: generation games/s, engine reset/step time, and a uniformly random
admissible policy's success per family (the floor to beat). Pool throughput with 1, 2 and 4
workers is ``benchmarks.env_throughput``.

    python -m benchmarks.alfworld_env [--sizes tiny small alfred] [--games-per-family 20]

The random policy draws uniformly from the admissible commands minus "help" (the prompt drops
it, SPEC §6) for up to ``--max-steps`` steps; the "weak" one also never picks look / inventory /
examine / close (a stand-in for a barely trained LLM). Results print as tables and are written to
``benchmarks/results/alfworld_env.json``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import random
import statistics
import tempfile
import time
from collections import defaultdict
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from benchmarks.common import RESULTS, load_average, machine, write_result
from envs.alfworld import FAMILIES, AlfworldConfig, AlfworldEnv
from envs.alfworld.games import GeneratedGames


#: Commands that never change the world; the "weak" policy (a stand-in for an untrained LLM that
#: has at least learnt to act) never picks them, the uniform one does.
PASSIVE = ("help", "look", "inventory", "examine ", "close ")


def random_action(admissible: list[str], rng: random.Random, weak: bool = False) -> str:
    skip = PASSIVE if weak else ("help",)
    choices = [a for a in admissible if not a.startswith(skip)]
    return rng.choice(choices or admissible)


def bench_generation(size: str, n: int) -> float:
    games = GeneratedGames(tempfile.mkdtemp(), size)
    games.build("train", 0)  # warm the floor-plan cache
    began = time.perf_counter()
    for i in range(1, n + 1):
        games.build("train", i)
    return n / (time.perf_counter() - began)


def bench_engine(config: AlfworldConfig, n_games: int, steps: int) -> dict:
    env, rng = AlfworldEnv(config), random.Random(0)
    new_game, same_game, step_s = [], [], []
    for i in range(n_games):
        t = time.perf_counter()
        first = env.reset("train", i)
        new_game.append(time.perf_counter() - t)
        t = time.perf_counter()
        first = env.reset("train", i)
        same_game.append(time.perf_counter() - t)
        admissible = first.admissible
        for _ in range(steps):
            t = time.perf_counter()
            tr = env.step(random_action(admissible, rng))
            step_s.append(time.perf_counter() - t)
            if tr.done:
                break
            admissible = tr.admissible
    return {"reset_new_game_s": statistics.mean(new_game), "reset_same_game_s": statistics.mean(same_game),
            "step_s": statistics.mean(step_s)}


def _episode(config: AlfworldConfig, weak: bool, job: tuple[int, int]) -> tuple[str, bool, int]:
    index, seed = job
    env, rng = AlfworldEnv(config), random.Random(seed)
    first = env.reset("train", index)
    admissible = first.admissible
    for t in range(1, config.max_steps + 1):
        tr = env.step(random_action(admissible, rng, weak))
        if tr.done:
            return first.family, tr.won, t
        admissible = tr.admissible
    return first.family, False, config.max_steps


def bench_random_policy(config: AlfworldConfig, per_family: int, processes: int, weak: bool = False) -> dict:
    jobs = [(i, i) for i in range(per_family * len(FAMILIES))]  # families cycle with the index
    wins, won_steps, total = defaultdict(int), defaultdict(list), defaultdict(int)
    with mp.get_context("spawn").Pool(processes) as pool, Progress() as progress:
        bar = progress.add_task(f"{'weak' if weak else 'uniform'} random policy ({config.size})", total=len(jobs))
        for family, won, steps in pool.imap_unordered(partial(_episode, config, weak), jobs):
            total[family] += 1
            wins[family] += won
            if won:
                won_steps[family].append(steps)
            progress.advance(bar)
    return {f: {"success": wins[f] / total[f], "games": total[f],
                "won_within_15": sum(s <= 15 for s in won_steps[f]) / total[f]} for f in FAMILIES}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small"],
                        help="room sizes to measure (the quickstart uses tiny; alfred, the full rooms, takes ~10 min more)")
    parser.add_argument("--games-per-family", type=int, default=20, help="random-policy games per family")
    parser.add_argument("--max-steps", type=int, default=50, help="episode limit for the random policy")
    parser.add_argument("--processes", type=int, default=2, help="processes for the random-policy runs")
    parser.add_argument("--skip-policy", action="store_true", help="skip the random-policy success runs")
    parser.add_argument("--out", type=Path, default=RESULTS / "alfworld_env.json", help="JSON result file")
    args = parser.parse_args(argv)
    console, results, started = Console(), {}, machine()
    for size in args.sizes:
        config = AlfworldConfig(source="generated", cache_dir=tempfile.mkdtemp(), size=size, max_steps=args.max_steps)
        r = {"generation_games_per_s": bench_generation(size, 60)}
        r.update(bench_engine(config, n_games=6, steps=20))
        if not args.skip_policy:
            r["random_policy"] = bench_random_policy(config, args.games_per_family, args.processes)
            r["weak_policy"] = bench_random_policy(config, args.games_per_family, args.processes, weak=True)
        results[size] = r
        table = Table(title=f"ALFWorld, size={size}")
        table.add_column("measure")
        table.add_column("value")
        for key, value in r.items():
            if not key.endswith("_policy"):
                table.add_row(key, f"{value:.3f}")
        for policy in ("random_policy", "weak_policy"):
            for family, v in r.get(policy, {}).items():
                table.add_row(f"{policy} success@{args.max_steps} {family}",
                              f"{v['success']:.2f} (<=15 steps {v['won_within_15']:.2f}, n={v['games']})")
        console.print(table)
    write_result("alfworld_env", {"sizes": results, "max_steps": args.max_steps, "machine": started,
                                  "load_average_at_end": load_average()}, args.out)
    return results


if __name__ == "__main__":
    main()
