"""Time the credit math for one 128-trajectory × 50-step batch on one CPU core, against plain loops.

Returns, episode scores, the SCPO shaper (plan + matcher; the scorer's own time is measured
separately and excluded, as the foundation issue asks) and the GiGPO advantage; then the same
math as plain per-row Python loops on the same batch and pair scores (``benchmarks.plain_loop``):
``published_shape``, the shape of the published implementation (target: ours >= 20x faster), and
``tidy_loop``, a careful pure-Python loop. All must give the same credit and advantages (checked
with ``np.allclose``). Headline numbers are CPU time (``time.process_time``, one thread), which a
shared machine disturbs far less than wall time (also reported); ``math_cpu_ms_by_phase`` says
where our time goes.

    python -m benchmarks.credit_math [--repeats 20] [--plain-repeats 5] [--out benchmarks/results/credit_math.json]
"""

from __future__ import annotations

import os

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")  # one core, before numpy/torch load their thread pools

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks import plain_loop  # noqa: E402
from benchmarks.common import RESULTS, load_average, machine, write_result  # noqa: E402
from envs.common.cli_args import ArgumentParser, integer  # noqa: E402
from scpo_lightning.gigpo import gigpo_advantage  # noqa: E402
from scpo_lightning.ordering import processing_order  # noqa: E402
from scpo_lightning.returns import episode_scores, step_returns, trajectory_returns  # noqa: E402
from scpo_lightning.scorers import LexicalScorer  # noqa: E402
from scpo_lightning.credit import apply_plan  # noqa: E402
from scpo_lightning.scpo_config import SCPOConfig  # noqa: E402
from scpo_lightning.shaper import plan_shaping  # noqa: E402

torch.set_num_threads(1)


def make_batch(groups: int = 16, group_size: int = 8, steps: int = 50, seed: int = 0) -> dict:
    """A lock-step batch shaped like ALFWorld rollouts: navigation text repeats a lot."""
    rng = np.random.default_rng(seed)
    places = [f"{p} {k}" for p in ("cabinet", "countertop", "fridge", "drawer", "shelf") for k in range(1, 6)]
    rows: dict[str, list] = {k: [] for k in (
        "group_ids", "traj_ids", "steps", "actions", "observations", "anchors", "rewards",
        "is_action_valid", "noop", "lengths")}
    for g in range(groups):
        for i in range(group_size):
            won = rng.random() < 0.4
            for t in range(steps):
                place = places[rng.integers(len(places))]
                noop = rng.random() < 0.1
                rows["group_ids"].append(g)
                rows["traj_ids"].append(g * group_size + i)
                rows["steps"].append(t)
                rows["actions"].append(f"go to {place}")
                rows["observations"].append("Nothing happens." if noop else f"You arrive at {place}. On the {place}, you see a mug {rng.integers(3)}.")
                rows["anchors"].append(f"task {g} state {rng.integers(20)}")
                rows["rewards"].append(10.0 if (won and t == steps - 1) else 0.0)
                rows["is_action_valid"].append(rng.random() > 0.05)
                rows["noop"].append(noop)
                rows["lengths"].append(int(rng.integers(300, 1500)))
    # Lock-step collectors emit rows step-major.
    order = np.argsort(np.asarray(rows["steps"]), kind="stable")
    return {k: [v[i] for i in order] for k, v in rows.items()}


def _clock() -> tuple[float, float]:
    """(wall, CPU) seconds: on a loaded machine the process's CPU time is the steadier measure."""
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    wall, cpu = _clock()
    return wall - start[0], cpu - start[1]


def run_once(batch: dict, config: SCPOConfig, scorer: LexicalScorer):
    """(wall, CPU) seconds of the math, wall seconds of the scorer, and the (credit, advantage)."""
    start = _clock()
    g = step_returns(batch["rewards"], batch["traj_ids"], batch["steps"], batch["is_action_valid"])
    scores_e = episode_scores(batch["rewards"], batch["traj_ids"], batch["is_action_valid"])
    plan = plan_shaping(
        group_ids=batch["group_ids"], traj_ids=batch["traj_ids"], steps=batch["steps"],
        traj_returns=trajectory_returns(batch["rewards"], batch["traj_ids"]),
        actions=batch["actions"], observations=batch["observations"],
        is_action_valid=batch["is_action_valid"], noop=batch["noop"], lengths=batch["lengths"],
        config=config,
    )
    planned = _since(start)
    t1 = time.perf_counter()
    pair_scores = scorer.score(plan.pairs)
    scorer_s = time.perf_counter() - t1
    start = _clock()
    credit = apply_plan(plan, pair_scores, config).credit
    adv = gigpo_advantage(scores_e, g + config.alpha * credit, batch["group_ids"], batch["anchors"])
    applied = _since(start)
    return (planned[0] + applied[0], planned[1] + applied[1]), scorer_s, credit, adv


def run_plain(fn, batch: dict, config: SCPOConfig, score_of: dict):
    """(wall, CPU) seconds of a plain-loop baseline (``benchmarks.plain_loop``) and its (credit,
    advantage). The processing order comes from the same Karmarkar-Karp function (the published
    pipeline gets it from its batch balancer) and is timed here too."""
    start = _clock()
    rows = len(batch["steps"])
    perm = processing_order(config.order, batch["lengths"], rows, config.order_partitions,
                            traj_ids=batch["traj_ids"], steps=batch["steps"])
    rank = [0] * rows
    for pos, row in enumerate(perm.tolist()):
        rank[row] = pos
    credit, adv = fn(batch, rank, score_of, config)
    return _since(start), credit, adv


def phases(batch: dict, config: SCPOConfig, pair_scores: np.ndarray, repeats: int) -> dict[str, float]:
    """Median CPU ms of each part of our math: where the time goes."""
    parts: dict[str, list[float]] = {}

    def timed(name: str, fn):
        t = time.process_time()
        out = fn()
        parts.setdefault(name, []).append(1e3 * (time.process_time() - t))
        return out

    rows = dict(group_ids=batch["group_ids"], traj_ids=batch["traj_ids"], steps=batch["steps"],
                actions=batch["actions"], observations=batch["observations"],
                is_action_valid=batch["is_action_valid"], noop=batch["noop"], lengths=batch["lengths"])
    for _ in range(repeats):
        g = timed("returns_and_episode_scores", lambda: (
            step_returns(batch["rewards"], batch["traj_ids"], batch["steps"], batch["is_action_valid"]),
            episode_scores(batch["rewards"], batch["traj_ids"], batch["is_action_valid"]),
            trajectory_returns(batch["rewards"], batch["traj_ids"])))
        timed("balanced_order_alone", lambda: processing_order(
            config.order, batch["lengths"], len(batch["steps"]), config.order_partitions,
            traj_ids=batch["traj_ids"], steps=batch["steps"]))
        plan = timed("plan_shaping_incl_order", lambda: plan_shaping(traj_returns=g[2], config=config, **rows))
        credit = timed("apply_plan_matcher", lambda: apply_plan(plan, pair_scores, config)).credit
        timed("gigpo_advantage", lambda: gigpo_advantage(
            g[1], g[0] + config.alpha * credit, batch["group_ids"], batch["anchors"]))
    return {k: round(statistics.median(v), 2) for k, v in parts.items()}


def _median_ms(times: list[tuple[float, float]], k: int) -> float:
    return round(1e3 * statistics.median(t[k] for t in times), 2)


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=integer(1), default=20, help="timed repetitions of ours (after one warm-up)")
    parser.add_argument("--plain-repeats", type=integer(1), default=5, help="timed repetitions of each plain-loop baseline")
    parser.add_argument("--out", type=Path, default=RESULTS / "credit_math.json", help="JSON result file")
    args = parser.parse_args()
    batch = make_batch()
    config, scorer = SCPOConfig(), LexicalScorer()
    started = machine()
    _, _, credit, adv = run_once(batch, config, scorer)  # warm-up: imports, allocator, caches
    runs = [run_once(batch, config, scorer) for _ in range(args.repeats)]
    ours = [r[0] for r in runs]

    # The baselines read the scores of exactly the pairs the shaper asked for.
    plan = plan_shaping(
        group_ids=batch["group_ids"], traj_ids=batch["traj_ids"], steps=batch["steps"],
        traj_returns=trajectory_returns(batch["rewards"], batch["traj_ids"]), actions=batch["actions"],
        observations=batch["observations"], is_action_valid=batch["is_action_valid"], noop=batch["noop"],
        lengths=batch["lengths"], config=config)
    score_of = dict(zip(plan.pairs, scorer.score(plan.pairs).tolist()))
    assert np.count_nonzero(credit) > 0, "the benchmark batch must give some SCPO credit"
    by_phase = phases(batch, config, scorer.score(plan.pairs), args.repeats)
    # Both sides compute the balanced order with the same function; the published pipeline gets
    # it from its batch balancer, outside the shaper (paper App. B.2), hence the second ratio.
    order_ms = by_phase["balanced_order_alone"]
    baselines = {}
    for name, fn, rows in (("published_shape", plain_loop.published_shape, plain_loop.with_uids(batch)),
                           ("tidy_loop", plain_loop.tidy, batch)):
        timed = [run_plain(fn, rows, config, score_of) for _ in range(args.plain_repeats)]
        _, their_credit, their_adv = timed[0]
        # Same numbers, or the ratio means nothing.
        assert np.allclose(credit, their_credit, rtol=1e-9, atol=1e-12), f"credit differs from {name}"
        assert np.allclose(adv, their_adv, rtol=1e-7, atol=1e-9), f"advantages differ from {name}"
        times = [t[0] for t in timed]
        baselines[name] = {
            "wall_ms_median": _median_ms(times, 0), "cpu_ms_median": _median_ms(times, 1),
            "speedup_cpu": round(_median_ms(times, 1) / _median_ms(ours, 1), 1),
            "speedup_wall": round(_median_ms(times, 0) / _median_ms(ours, 0), 1),
            "speedup_cpu_excluding_order": round((_median_ms(times, 1) - order_ms) / (_median_ms(ours, 1) - order_ms), 1),
            "same_numbers": True,
        }

    result = {
        "rows": len(batch["steps"]),
        "what": "CPU time (process_time) is the headline: the machine is shared, wall time includes waiting",
        "groups_x_group_size_x_steps": [16, 8, 50],
        "pairs_requested": plan.pairs_requested,
        "pairs_distinct": len(plan.pairs),
        "credited_rows": int(np.count_nonzero(credit)),
        "math_ms_median": _median_ms(ours, 0),
        "math_ms_max": round(1e3 * max(t[0] for t in ours), 2),
        "math_cpu_ms_median": _median_ms(ours, 1),
        "math_cpu_ms_by_phase": by_phase,
        "baselines": baselines,
        "lexical_scorer_ms_median": round(1e3 * statistics.median(r[1] for r in runs), 2),
        "repeats": args.repeats,
        "plain_repeats": args.plain_repeats,
        "machine": started,
        "load_average_at_end": load_average(),
    }
    write_result("credit_math", result, args.out)


if __name__ == "__main__":
    main()
