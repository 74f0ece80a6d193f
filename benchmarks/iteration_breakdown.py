"""Where a quickstart iteration's time goes, from a real training run.

Runs ``train.py fit --config configs/quickstart.yaml`` in-process (the same CLI, the config as it
is today) with ``--max-epochs`` iterations, logs and checkpoints under ``runs/benchmark_breakdown``,
and one extra callback that reads the phase times the application measures itself (the batch's
``timings``: generation and env steps of the rollout; the module's ``time/`` metrics: old and
reference log-probs, the wait for SCPO shaping, advantages, the PPO update; SCPO's plan and
scorer seconds) and adds wall clocks around each training iteration and each validation run.
What no phase accounts for inside an iteration (logging, the credit heatmap, checkpointing) is
reported as ``other_s``; validation is reported per run, apart from the iterations.

    python -m benchmarks.iteration_breakdown [--max-epochs 3] [--save-batches] [training CLI overrides, e.g. --data.workers=4]
    python -m benchmarks.iteration_breakdown --max-epochs 4 --out quickstart   # the quickstart as it runs: docs/quickstart.md
    python -m benchmarks.iteration_breakdown --max-epochs 4 --baseline --out quickstart   # and first the filed code path, same process
    python -m benchmarks.iteration_breakdown --compare [--rows 32]   # rows/s per setting, same batch (benchmarks.iteration_speed)

With the quickstart's settings (validation before training and every 2 iterations) the default
run collects 3 training batches and 2 validation runs: about 10 minutes on 2 quiet cores, several
times that on a shared machine.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import lightning as L

from benchmarks.common import DATA, QUICKSTART, load_average, machine, write_result
from benchmarks.record_batches import save_batch

LOG_DIR = Path("runs/benchmark_breakdown")
#: ``--baseline``: the hf engine's code path before issue 30 (every prompt prefilled whole, a forward
#: per decoded token), run first in the same process so that the two fits share the machine's state.
BASELINE = ("--model.engine_options={prefix_sharing: false, jump_forward: false}",)
#: Per-iteration values of the module's metrics kept beside the phase times.
STATS = ("train/kl", "train/clip_frac", "train/clip_frac_last", "train/optimizer_steps", "rollout/logprob_diff_max")
PHASES = ("generate_s", "env_s", "rollout_s", "scpo_plan_s", "logprobs_s", "shaping_wait_s", "advantage_s", "update_s")


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of (start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


class PhaseTimer(L.Callback):
    """Collects per-iteration phase times and wall clocks (inserted first among the callbacks).

    Lightning fetches a loop's first batch before that loop's start hooks (and each next batch
    during the previous step), so wall clocks come from two places: ``track`` wraps the
    DataModule's batch generator to time every collection, and the hooks time the rest. A
    validation run is the union of its collections and its hooks' span. An iteration is its
    collection plus the time from its training step's start to the next iteration's start (or the
    end of training: logging and checkpointing included), minus validation in between.
    """

    def __init__(self, save_to: Path | None = None) -> None:
        self.save_to = save_to  # where to keep each training batch (benchmarks.shaper_cost replays them)
        self.iterations: list[dict[str, Any]] = []
        self.validations: list[dict[str, Any]] = []
        self._val: list[tuple[float, float]] = []  # the current validation run's intervals
        self._val_since_step: list[tuple[float, float]] = []
        self._step_start: float | None = None
        self._val_start = self._val_rollout = 0.0
        self._val_outcomes: list[list[Any]] = []  # [task id, family, won] of the current validation run

    def track(self, datamodule: Any) -> None:
        """Time every batch the DataModule collects (an instance attribute shadows the method)."""
        collect = datamodule.rollout_batches

        def timed(stage: str):
            batches = collect(stage)
            while True:
                start = time.perf_counter()
                batch = next(batches, None)
                if stage != "train":
                    self._val.append((start, time.perf_counter()))
                if batch is None:
                    return
                yield batch

        datamodule.rollout_batches = timed

    def _close_iteration(self) -> None:
        if self._step_start is None:
            return
        it = self.iterations[-1]
        it["validation_after_s"] = union_seconds(self._val_since_step)
        after_step = time.perf_counter() - self._step_start - it["validation_after_s"]
        it["iteration_wall_s"] = it["rollout_s"] + after_step
        it["other_s"] = it["iteration_wall_s"] - sum(it[k] for k in PHASES if k not in ("generate_s", "env_s"))
        self._step_start = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close_iteration()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._close_iteration()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        self._step_start, self._val_since_step = time.perf_counter(), []

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        m, s = outputs["metrics"], batch.scpo_stats
        self.iterations.append({
            "iteration": trainer.current_epoch + 1, "rows": len(batch), "row_tokens": int(batch.lengths.sum()),
            "success": batch.episode_metrics()["success"],
            "groups_with_reference": s.get("groups_with_reference", 0.0),
            **{k: batch.timings[k] for k in ("generate_s", "env_s", "rollout_s")},
            "scpo_plan_s": s.get("plan_s", 0.0), "scpo_scorer_s_background": s.get("scorer_s", 0.0),
            "pairs_requested": s.get("pairs_requested", 0.0), "pairs_scored": s.get("pairs_scored", 0.0),
            **{k: m[f"time/{k}"] for k in ("logprobs_s", "shaping_wait_s", "advantage_s", "update_s")},
            "train_step_wall_s": time.perf_counter() - self._step_start,
            # what the quickstart's page reports per iteration (docs/quickstart.md); nested, so not a phase
            "stats": {"credited_steps_per_failed": s.get("credited_steps_per_failed"),
                      **{k.split("/", 1)[1]: m.get(k) for k in STATS}},
        })
        if self.save_to is not None:
            save_batch(batch, self.save_to / f"run_{trainer.current_epoch:02d}.pkl.xz")

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._val_start = time.perf_counter()

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        self._val_rollout += batch.timings["rollout_s"]
        self._val_outcomes += [[t["task_id"], t["family"], int(bool(t["won"]))] for t in batch.trajectories]

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        intervals = [*self._val, (self._val_start, time.perf_counter())]
        self._val_since_step += intervals
        wins = [won for *_, won in self._val_outcomes]
        self.validations.append({"after_iteration": 0 if trainer.sanity_checking else trainer.current_epoch + 1,
                                 "wall_s": union_seconds(intervals), "rollout_s": self._val_rollout,
                                 "success": sum(wins) / len(wins) if wins else None, "outcomes": self._val_outcomes})
        self._val, self._val_rollout, self._val_outcomes = [], 0.0, []


def run(max_epochs: int, extra: list[str], save_batches: bool) -> tuple[PhaseTimer, float, dict[str, Any]]:
    from lightning.pytorch.callbacks import ModelCheckpoint

    from scpo_lightning.cli import SCPOCLI
    from scpo_lightning.datamodule import RolloutDataModule
    from scpo_lightning.module import SCPOModule

    shutil.rmtree(LOG_DIR, ignore_errors=True)
    args = ["--config", str(QUICKSTART), f"--trainer.max_epochs={max_epochs}",
            f"--trainer.logger.init_args.save_dir={LOG_DIR}", *extra]
    cli = SCPOCLI(SCPOModule, RolloutDataModule, run=False, args=args, save_config_callback=None,
                  trainer_defaults={"plugins": [{"class_path": "scpo_lightning.checkpoint_io.AtomicCheckpointIO"}]})
    trainer = cli.trainer
    for cb in trainer.callbacks:
        if isinstance(cb, ModelCheckpoint):
            cb.dirpath = str(LOG_DIR / "checkpoints")  # not the quickstart's own runs/quickstart
    save_to = DATA / cli.datamodule.spec.name if save_batches else None
    for old in save_to.glob("run_*.pkl.xz") if save_to else ():
        old.unlink()  # the batches of an earlier run
    timer = PhaseTimer(save_to)
    timer.track(cli.datamodule)
    trainer.callbacks.insert(0, timer)
    settings = {"max_epochs": max_epochs, "check_val_every_n_epoch": trainer.check_val_every_n_epoch,
                "groups_per_batch": cli.datamodule.groups_per_batch, "group_size": cli.datamodule.group_size,
                "val_episodes": cli.datamodule.val_episodes, "env_options": cli.datamodule.env.options,
                "rollout": {k: getattr(cli.datamodule.rollout, k) for k in ("max_steps", "action_mode", "exclude_actions")}}
    start = time.perf_counter()
    trainer.fit(cli.model, datamodule=cli.datamodule)
    return timer, time.perf_counter() - start, settings


def summarise(iterations: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean over iterations, and the iteration with the median wall time as the coherent
    representative (its phases add up; on a shared machine single iterations can be far off)."""
    keys = [k for k in iterations[0] if isinstance(iterations[0][k], (int, float)) and k != "iteration"]
    mean = {k: round(statistics.mean(it[k] for it in iterations), 3) for k in keys}
    median = sorted(iterations, key=lambda it: it["iteration_wall_s"])[(len(iterations) - 1) // 2]
    wall = median["iteration_wall_s"]
    return {
        "train_iteration_mean": mean,
        "median_iteration": median["iteration"],
        "share_of_iteration_wall": {k: round(median[k] / wall, 4) for k in (*PHASES, "other_s")},
        "largest_phase": max((k for k in PHASES if k != "rollout_s"), key=lambda k: median[k]),
    }


def main(argv: list[str] | None = None) -> None:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if "--compare" in argv:  # old vs new settings on one recorded batch
        from benchmarks import iteration_speed

        iteration_speed.main([a for a in argv if a != "--compare"])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-epochs", type=int, default=3, help="training iterations to run")
    parser.add_argument("--save-batches", action="store_true",
                        help="keep each training batch as benchmarks/data/<env>/run_XX.pkl.xz for benchmarks.shaper_cost")
    parser.add_argument("--out", default="iteration_breakdown",
                        help="result name under benchmarks/results/ (the full quickstart: --max-epochs 4 --out quickstart)")
    parser.add_argument("--baseline", action="store_true",
                        help="first run the same fit on the filed code path (BASELINE) and keep its wall times beside")
    args, extra = parser.parse_known_args(argv)  # the rest goes to the training CLI, e.g. --data.group_size=8
    started = machine()
    baseline = fit_result([*BASELINE, *extra], args.max_epochs, save_batches=False) if args.baseline else None
    result = {"what": "phase seconds of real quickstart iterations (time/ metrics + wall clocks); validation apart",
              "config": str(QUICKSTART), **fit_result(extra, args.max_epochs, args.save_batches)}
    if baseline is not None:
        result["baseline"] = baseline
    write_result(args.out, {**result, "machine": started, "load_average_at_end": load_average()})


def fit_result(extra: list[str], max_epochs: int, save_batches: bool) -> dict[str, Any]:
    """One timed fit: its overrides, settings, wall time, phase summary, validations, iterations."""
    timer, fit_s, settings = run(max_epochs, extra, save_batches)
    iterations = [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in it.items()} for it in timer.iterations]
    return {
        "cli_overrides": extra, "settings": settings, "fit_wall_s": round(fit_s, 1),
        **summarise(iterations),
        "validation_runs": [{k: round(v, 2) if isinstance(v, float) else v for k, v in val.items()}
                            for val in timer.validations],
        "iterations": iterations,
    }

if __name__ == "__main__":
    main()
