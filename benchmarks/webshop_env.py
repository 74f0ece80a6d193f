"""Measure the embedded WebShop: catalog generation, search latency, env steps/s, policy floors.

    python -m benchmarks.webshop_env [--products 1000] [--episodes 500] [--record DIR]

Reports the oracle's success on the first 200 validation goals (the acceptance bar is 95 %)
and the uniformly random admissible policy's mean score and success rate (the floor).
``--record DIR`` writes a few oracle and random episodes for ``python -m envs.webshop.site
--replay-dir DIR``. Results print as a table and are written to ``benchmarks/results/webshop_env.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import track
from rich.table import Table

from benchmarks.common import RESULTS, load_average, machine, write_result
from envs.webshop.catalog import load_catalog
from envs.webshop.config import WebShopConfig
from envs.webshop.env import WebShopEnv, build_shop
from envs.webshop.generate import generate_catalog, write_catalog
from envs.webshop.policies import goal_query, run_oracle, run_random


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--products", type=int, default=1000, help="catalog size")
    parser.add_argument("--episodes", type=int, default=500, help="random-policy episodes (valid goals)")
    parser.add_argument("--seed", type=int, default=0, help="catalog and random-policy seed")
    parser.add_argument("--record", default=None, help="folder to write replayable episodes into")
    parser.add_argument("--out", type=Path, default=RESULTS / "webshop_env.json", help="JSON result file")
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []
    values: dict[str, float] = {}
    started = machine()

    t = time.perf_counter()
    generate_catalog(args.products, args.seed)
    rows.append(("catalog generation (in memory)", f"{time.perf_counter() - t:.3f} s"))
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        write_catalog(tmp, args.products, args.seed)
        rows.append(("catalog generation + write 3 files", f"{time.perf_counter() - t:.3f} s"))
        t = time.perf_counter()
        load_catalog(tmp)
        rows.append(("catalog load", f"{time.perf_counter() - t:.3f} s"))
    values["catalog_load_s"] = time.perf_counter() - t
    config = WebShopConfig(num_products=args.products, catalog_seed=args.seed)
    t = time.perf_counter()
    shop = build_shop(config)
    values["shop_build_s"] = time.perf_counter() - t
    rows.append(("shop build (generate + load + Lucene BM25 index)", f"{values['shop_build_s']:.3f} s"))

    queries = [goal_query(g.instruction_text) for g in shop.catalog.goals[:500]]
    latencies = []
    for q in queries:  # the engine directly: no result cache
        t = time.perf_counter()
        shop.engine.search(q)
        latencies.append((time.perf_counter() - t) * 1000)
    latencies.sort()
    values.update(search_ms_mean=statistics.mean(latencies), search_ms_p50=latencies[249], search_ms_p95=latencies[474])
    rows.append(("search latency mean / p50 / p95 (500 goal queries)",
                 f"{statistics.mean(latencies):.2f} / {latencies[249]:.2f} / {latencies[474]:.2f} ms"))

    env = WebShopEnv(config, shop=shop)
    oracle = [run_oracle(env, "valid", i) for i in track(range(200), description="oracle")]
    values["oracle_success"] = sum(e.score == 1.0 for e in oracle) / 200
    rows.append(("oracle success (200 valid goals)", f"{sum(e.score == 1.0 for e in oracle) / 200:.1%}"))

    rng = random.Random(args.seed)
    shop.clear_cache()
    n = min(args.episodes, 500)
    t = time.perf_counter()
    randoms = [run_random(env, "valid", i, rng) for i in track(range(n), description="random policy")]
    elapsed = time.perf_counter() - t
    steps = sum(len(e.actions) for e in randoms)
    values.update(random_policy_steps_per_s=steps / elapsed,
                  random_policy_mean_score=statistics.mean(e.score for e in randoms),
                  random_policy_success=sum(e.won for e in randoms) / n)
    rows.append(("env steps/s (random policy incl. reset, cold search cache)", f"{steps / elapsed:.0f}"))
    rows.append((f"random admissible policy mean score ({n} valid goals)",
                 f"{statistics.mean(e.score for e in randoms):.3f}"))
    rows.append(("random admissible policy success rate", f"{sum(e.won for e in randoms) / n:.1%}"))

    if args.record:
        out = Path(args.record)
        out.mkdir(parents=True, exist_ok=True)
        for name, episodes in (("oracle", oracle[:5]), ("random", randoms[:5])):
            for i, e in enumerate(episodes):
                record = {"split": "valid", "index": i, "actions": e.actions}
                (out / f"{name}_valid_{i}.json").write_text(json.dumps(record, indent=1))
        rows.append(("recorded episodes", str(out)))

    table = Table(title=f"Embedded WebShop ({args.products} products, {len(shop.catalog.goals)} goals)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    write_result("webshop_env", {"products": args.products, "random_episodes": n,
                                 **{k: round(v, 4) for k, v in values.items()},
                                 "machine": started, "load_average_at_end": load_average()}, args.out)


if __name__ == "__main__":
    main()
