"""Record real rollout batches of the quickstart policy, for replaying the SCPO shaper on them.

The module, DataModule and env workers are built by the training CLI from
``configs/quickstart.yaml`` (whatever it says today: policy, env options, rollout settings,
groups × group size), and batches are collected exactly as a training iteration collects them:
the DataModule's task sampler, the module's engine, ``scpo_lightning.rollout.collect``. The
policy is not updated between batches. SCPO only has work in a group that holds a success and a
failure (a *mixed* group), so collection runs until ``--target`` batches have at least one, or
``--max-attempts`` batches were collected; every batch is kept (``benchmarks/data/<env>/``,
lzma-compressed pickles of ``RolloutBatch``) and the attempts are reported.

``--env webshop`` records on the embedded WebShop with the same policy and rollout settings,
taking the env options and the success threshold from ``configs/webshop_scpo.yaml``.

    python -m benchmarks.record_batches --env alfworld [--target 5 --max-attempts 20 --max-minutes 60]
    python -m benchmarks.record_batches --env webshop [--resume]

One quickstart batch takes 1-3 minutes on 2 quiet cores (WebShop's long pages: several times
that); the default run stops at 5 batches with a mixed group, 20 batches or 60 minutes, whichever
comes first. The summary (``benchmarks/results/record_batches_<env>.json``) is rewritten after
every batch, and ``--resume`` continues an interrupted recording.
"""

from __future__ import annotations

import argparse
import dataclasses
import lzma
import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    DATA, QUICKSTART, build_quickstart, callback_args, load_average, machine, read_yaml, write_result,
)

WEBSHOP_RECIPE = Path("configs/webshop_scpo.yaml")
SCPO_CALLBACK = "callbacks.scpo.SCPOCallback"


def env_settings(env: str) -> tuple[list[str], float]:
    """CLI overrides that switch the quickstart to ``env``, and that env's success threshold."""
    quick = read_yaml(QUICKSTART)
    if env == "alfworld":
        return [], float(callback_args(quick, SCPO_CALLBACK).get("tau_succ", 0.0))
    recipe = read_yaml(WEBSHOP_RECIPE)
    data = recipe["data"]
    options = "{" + ", ".join(f"{k}: {v}" for k, v in data["env_options"].items()) + "}"
    overrides = [
        "--data.env=webshop", f"--data.env_options={options}", f"--data.val_split={data['val_split']}",
        "--data.rollout.env=webshop", f"--data.rollout.max_steps={data['rollout']['max_steps']}",
        "--data.rollout.exclude_actions=[]",  # ALFWorld commands; WebShop offers none of them
    ]
    return overrides, float(callback_args(recipe, SCPO_CALLBACK)["tau_succ"])


def mixed_groups(batch: Any, tau_succ: float) -> int:
    """Groups with at least one success and one failure: the ones SCPO shapes."""
    won: dict[int, list[bool]] = {}
    for t in batch.trajectories:
        won.setdefault(t["group"], []).append(t["reward"] > tau_succ)
    return sum(any(w) and not all(w) for w in won.values())


def save_batch(batch: Any, path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(path, "wb") as f:
        pickle.dump(batch, f, protocol=pickle.HIGHEST_PROTOCOL)
    return path.stat().st_size


def load_batches(env: str, data_dir: Path = DATA, pattern: str = "*.pkl.xz") -> list[tuple[str, Any]]:
    """(file name, RolloutBatch) of the saved batches of ``env``, in name order: this script's
    ``batch_XX`` in recording order, then ``run_XX`` from ``benchmarks.iteration_breakdown``."""
    paths = sorted((data_dir / env).glob(pattern))
    if not paths:
        raise FileNotFoundError(f"no recorded batches in {data_dir / env}; run "
                                f"`python -m benchmarks.record_batches --env {env}` first")
    out = []
    for p in paths:
        with lzma.open(p, "rb") as f:
            out.append((p.name, with_new_fields(pickle.load(f))))
    return out


def with_new_fields(batch: Any) -> Any:
    """``batch`` with the defaults of RolloutBatch fields added after it was recorded (unpickling
    restores only the fields the recording had)."""
    for f in dataclasses.fields(batch):
        if f.name not in vars(batch):
            setattr(batch, f.name, f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)
    return batch


def batch_info(batch: Any, tau_succ: float, file: str, size: int, load: list[float] | None) -> dict[str, Any]:
    """What the summary says about one recorded batch."""
    return {
        "file": file, "rows": len(batch), "tasks": sorted({t["task_id"] for t in batch.trajectories}),
        "success": float(np.mean([t["won"] for t in batch.trajectories])), "mixed_groups": mixed_groups(batch, tau_succ),
        "env_failures": batch.env_failures, "bytes": size, "load_average": load,
        **{k: round(v, 2) for k, v in batch.timings.items()},
    }


def summary(args: argparse.Namespace, overrides: list[str], tau_succ: float, dm: Any, batches: list[dict[str, Any]],
            started: dict[str, Any], setup_s: float) -> dict[str, Any]:
    rows = sum(b["rows"] for b in batches)
    rollout_s = sum(b["rollout_s"] for b in batches)
    n_mixed = sum(b["mixed_groups"] > 0 for b in batches)
    return {
        "env": args.env, "config": str(QUICKSTART), "overrides": overrides, "tau_succ": tau_succ,
        "groups_per_batch": dm.groups_per_batch, "group_size": dm.group_size, "env_options": dm.env.options,
        "rollout": {k: getattr(dm.rollout, k) for k in ("max_steps", "history_length", "action_mode", "exclude_actions")},
        "attempts": len(batches), "batches_with_mixed_group": n_mixed, "target": args.target,
        "reached_target": n_mixed >= args.target, "setup_s": round(setup_s, 1),
        "collector_rows_per_s": round(rows / rollout_s, 3) if rollout_s else None,
        "generate_share_of_rollout": round(sum(b["generate_s"] for b in batches) / rollout_s, 3) if rollout_s else None,
        "batches": batches, "machine_at_start": started, "load_average_at_end": load_average(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", choices=("alfworld", "webshop"), default="alfworld", help="environment to record")
    parser.add_argument("--target", type=int, default=5, help="stop after this many batches with a mixed group")
    parser.add_argument("--max-attempts", type=int, default=20, help="collect at most this many batches in all")
    parser.add_argument("--max-minutes", type=float, default=60.0, help="start no new batch after this many minutes")
    parser.add_argument("--resume", action="store_true",
                        help="keep the batches already recorded (same config) and continue after them")
    parser.add_argument("--out-dir", type=Path, default=DATA, help="batches go to <out-dir>/<env>/")
    args = parser.parse_args(argv)

    overrides, tau_succ = env_settings(args.env)
    started = machine()
    t0 = time.perf_counter()
    module, dm, _ = build_quickstart(overrides=overrides)
    module.configure_model()
    dm.setup("fit")
    setup_s = time.perf_counter() - t0
    from scpo_lightning.rollout import collect

    folder = args.out_dir / args.env
    batches = []
    if args.resume and folder.is_dir():
        for name, batch in load_batches(args.env, args.out_dir, "batch_*.pkl.xz"):
            batches.append(batch_info(batch, tau_succ, name, (folder / name).stat().st_size, None))
            dm._sample_tasks()  # advance the sampler past the tasks those batches drew
    else:
        for old in folder.glob("batch_*.pkl.xz"):
            old.unlink()  # a new recording replaces the old one as a whole
    began = time.monotonic()
    try:
        for attempt in range(len(batches), args.max_attempts):
            if sum(b["mixed_groups"] > 0 for b in batches) >= args.target or time.monotonic() - began > 60 * args.max_minutes:
                break
            tasks = dm._sample_tasks()  # the DataModule's own sampler: the tasks an iteration would draw
            params = module.rollout_policy().sampling.params(validation=False, seed=dm.seed + attempt)
            with module.generation_context():
                batch = collect(dm.pool, module.engine, module.tokenizer, tasks, dm.group_size, params,
                                dm.rollout, progress=False)
            name = f"batch_{attempt:02d}.pkl.xz"
            size = save_batch(batch, folder / name)
            batches.append(info := batch_info(batch, tau_succ, name, size, load_average()))
            n_mixed = sum(b["mixed_groups"] > 0 for b in batches)
            print(f"[{args.env} batch {attempt}] rows {info['rows']} success {info['success']:.2f} mixed groups "
                  f"{info['mixed_groups']} rollout {info['rollout_s']:.0f}s ({n_mixed}/{args.target} with a mixed group)",
                  flush=True)
            # Written after every batch: an interrupted recording keeps its summary (and --resume continues it).
            write_result(f"record_batches_{args.env}", summary(args, overrides, tau_succ, dm, batches, started, setup_s))
    finally:
        dm.teardown("fit")
    write_result(f"record_batches_{args.env}", summary(args, overrides, tau_succ, dm, batches, started, setup_s))


if __name__ == "__main__":
    main()
