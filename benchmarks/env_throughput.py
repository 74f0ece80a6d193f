"""Environment throughput: env steps/s of ``envs.workers.EnvPool`` with 1, 2 and 4 worker processes.

ALFWorld with the quickstart's env options (``configs/quickstart.yaml``) and the embedded WebShop
with the WebShop recipe's (``configs/webshop_scpo.yaml``); ``workers 0`` is the in-process
``SequentialPool`` (no process boundary) for reference. Each measurement resets
``--groups`` × ``--group-size`` env slots (a group's members on one task, as in training) and
steps them in lock-step for ``--steps`` steps with a seeded random admissible policy (``help``
dropped, WebShop's search bar given the task sentence, as constrained decoding does), so the
env work matches what the collector asks of the pool minus the policy. Worker start-up (process
spawn, game / shop loading) and resets are timed separately from steps.

The rollout throughput of the whole collector with the quickstart policy is measured where the
batches are recorded (``benchmarks.record_batches``: ``collector_rows_per_s``).

    python -m benchmarks.env_throughput [--envs alfworld webshop] [--workers 0 1 2 4] [--groups 8]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from benchmarks.common import QUICKSTART, load_average, machine, read_yaml, write_result
from envs.registry import SequentialPool, env_spec, make_env_factory
from scpo_lightning.rollout import constrained_choices, offered_actions

WEBSHOP_RECIPE = "configs/webshop_scpo.yaml"


def env_config(env: str) -> tuple[dict[str, Any], str, tuple[str, ...]]:
    """(env options, training split, excluded commands) as the configs give them."""
    if env == "alfworld":
        data = read_yaml(QUICKSTART)["data"]
    else:
        data = read_yaml(WEBSHOP_RECIPE)["data"]
    excluded = tuple((data.get("rollout") or {}).get("exclude_actions") or ()) if env == "alfworld" else ()
    return dict(data.get("env_options") or {}), data.get("train_split", "train"), excluded


def measure(env: str, workers: int, groups: int, group_size: int, steps: int, seed: int) -> dict[str, Any]:
    options, split, excluded = env_config(env)
    factory = make_env_factory(env, options)
    placeholder = env_spec(env).prompt.search_placeholder
    n = groups * group_size
    t0 = time.perf_counter()
    if workers == 0:
        pool = SequentialPool(factory, n)
    else:
        from envs.workers import EnvPool

        pool = EnvPool(factory, n, num_workers=workers)
    startup_s = time.perf_counter() - t0
    rng = random.Random(seed)
    try:
        t0 = time.perf_counter()
        starts = pool.reset([(split, 1000 + g) for g in range(groups)], group_size).results
        reset_s = time.perf_counter() - t0
        state = [(r.admissible, r.task) for r in starts]
        active = [True] * n
        env_steps, step_s, failures = 0, 0.0, 0
        for _ in range(steps):
            actions = [rng.choice(constrained_choices(offered_actions(adm, excluded), task, placeholder)) if on else None
                       for (adm, task), on in zip(state, active)]
            t0 = time.perf_counter()
            result = pool.step(actions)
            step_s += time.perf_counter() - t0
            failures += sum(result.stats.values()) if result.stats else 0
            for s, tr in enumerate(result.results):
                if tr is not None:
                    env_steps += 1
                    state[s] = (tr.admissible, state[s][1])
                    active[s] = not tr.done
            if not any(active):
                break
    finally:
        pool.close()
    return {
        "env": env, "workers": workers, "envs": n, "env_steps": env_steps,
        "steps_per_s": round(env_steps / step_s, 1), "ms_per_lockstep_call": round(1e3 * step_s / steps, 1),
        "startup_s": round(startup_s, 2), "reset_s": round(reset_s, 2), "failures": failures,
        "load_average": load_average(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["alfworld", "webshop"], choices=["alfworld", "webshop"])
    parser.add_argument("--workers", nargs="+", type=int, default=[0, 1, 2, 4], help="pool sizes (0 = in-process)")
    parser.add_argument("--groups", type=int, default=8, help="tasks per measurement")
    parser.add_argument("--group-size", type=int, default=4, help="env slots per task")
    parser.add_argument("--steps", type=int, default=15, help="lock-step calls per measurement")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random policy")
    args = parser.parse_args(argv)
    started = machine()
    runs = []
    for env in args.envs:
        for workers in args.workers:
            runs.append(measure(env, workers, args.groups, args.group_size, args.steps, args.seed))
            print(runs[-1], flush=True)
    result = {
        "what": "env steps/s of the pool under a random admissible policy (no LLM); startup and reset timed apart",
        "env_options": {env: env_config(env)[0] for env in args.envs},
        "groups": args.groups, "group_size": args.group_size, "steps": args.steps,
        "runs": runs, "machine": started, "load_average_at_end": load_average(),
    }
    write_result("env_throughput", result)


if __name__ == "__main__":
    main()
