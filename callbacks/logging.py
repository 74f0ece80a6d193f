"""Per-iteration TensorBoard logging: scalars, validation, the credit heatmap and sample trajectories.

Everything is keyed by RL iteration: training scalars of iteration k (the k-th update) at step k,
validation after k updates at step k (step 0 = before training, from the sanity-check pass that
runs the whole validation set). The exception is ``train_step/``: the loss parts, clip fraction,
drift from π_old and grad norm of every PPO mini-batch, keyed by optimizer step since the run
began (the ratio is 1 on an iteration's first mini-batch, so its clip fraction is 0 by design). Faults are logged, never only printed: episodes lost to env
workers (per reason, per iteration and in total, training and validation) and, from the batch's
SCPO stats, scorer failures. With dynamic sampling, ``sampling/`` holds its group counts
(``rollout/`` then describes the groups that train; ``sampling/collected_success`` all collected).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import numpy as np

from callbacks.heatmap import credit_heatmap
from envs.common.rules import check, count
from envs.worker import WORKERS_RESTARTED
from scpo_lightning.batch import RolloutBatch
from scpo_lightning.metrics import batch_metrics, reduce_scalars


class RLLogger(L.Callback):
    """Writes iteration-keyed metrics to the trainer's logger and prints a one-line summary.

    Args:
        heatmap_every: Log the SCPO credit heatmap every this many iterations (0 = never).
        trajectories: Sample trajectories written as text each iteration.
        text_every: Log sample trajectories every this many iterations (0 = never).
    """

    def __init__(self, heatmap_every: int = 1, trajectories: int = 2, text_every: int = 5):
        check("RLLogger", RLLogger, locals(),
              {"heatmap_every": count(0), "trajectories": count(0), "text_every": count(0)})
        self.heatmap_every, self.trajectories, self.text_every = heatmap_every, trajectories, text_every
        self.env_failure_totals: dict[str, float] = {}  # since the run began (kept in checkpoints)
        self._val_failures: dict[str, float] = {}

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The sanity-check pass is iteration 0's validation. A resumed run did it already, and
        # Lightning repeats it unless the checkpoint was taken mid-validation: it would cost a
        # validation run and log the trained policy as iteration 0.
        if trainer.ckpt_path is not None:
            trainer.num_sanity_val_steps = 0

    @staticmethod
    def failure_counts(failures: dict[str, float]) -> dict[str, float]:
        """Per reason, plus ``episodes``: all episodes that a failure ended (0 when none did)."""
        episodes = sum(v for k, v in failures.items() if k != WORKERS_RESTARTED)
        return {**failures, "episodes": float(episodes)}

    @staticmethod
    def _log(trainer: L.Trainer, metrics: dict[str, float], step: int) -> None:
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                           batch: RolloutBatch, batch_idx: int) -> None:
        it = trainer.current_epoch + 1
        metrics = dict(outputs["metrics"])  # what SCPOModule.training_step returned
        metrics.update(batch_metrics(batch))  # each rank collected its own groups: over all ranks
        metrics.update({f"sampling/{k}": v for k, v in batch.sampling_stats.items()})  # over all ranks already
        failures = self.failure_counts({k[13:]: v for k, v in metrics.items() if k.startswith("env_failures/")})
        for key, value in failures.items():
            self.env_failure_totals[key] = self.env_failure_totals.get(key, 0.0) + value
        metrics.update({f"env_failures/{k}": v for k, v in failures.items()})
        metrics.update({f"env_failures/total_{k}": v for k, v in self.env_failure_totals.items()})
        metrics["iteration"] = float(it)
        self._log(trainer, metrics, it)
        for step in outputs["step_metrics"]:
            self._log(trainer, {f"train_step/{k}": v for k, v in step.items() if k != "step"} | {"iteration": float(it)},
                      int(step["step"]))
        trainer.print(
            f"[it {it}] success {metrics['rollout/success']:.2f} len {metrics['rollout/episode_length']:.1f} "
            f"loss {metrics.get('train/loss', float('nan')):.4f} kl {metrics.get('train/kl', float('nan')):.4f} "
            f"scpo credited/failed {batch.scpo_stats.get('credited_steps_per_failed', 0.0):.2f} "
            f"rollout {batch.timings.get('rollout_s', 0.0):.1f}s update {metrics.get('time/update_s', 0.0):.1f}s"
            + (f" | groups kept {batch.sampling_stats['groups_kept']:.0f}/{batch.sampling_stats['groups_collected']:.0f}"
               f" after {batch.sampling_stats['retries']:.0f} retries" if batch.sampling_stats else "")
            + (f" | episodes lost to env failures {failures['episodes']:.0f}: {batch.env_failures}"
               if batch.env_failures else "")
        )
        experiment = getattr(trainer.logger, "experiment", None)
        if experiment is None or not hasattr(experiment, "add_image"):
            return
        if self.heatmap_every and it % self.heatmap_every == 0:
            self._heatmap(batch, experiment, it)
        if self.text_every and it % self.text_every == 0:
            experiment.add_text("rollout/trajectories", self._trajectories_text(batch), it)

    @staticmethod
    def _heatmap(batch: RolloutBatch, experiment: Any, it: int) -> None:
        """The credit heatmap of the batch's most credited failed sibling, from SCPO's result."""
        shaping = batch.shaping
        if shaping is None or not shaping.paths:
            return  # no SCPO callback, its scorer failed on this batch, or no failed sibling had a reference
        best = max(shaping.paths, key=lambda path: path.credit)  # the most informative picture (ties: the first)
        img = credit_heatmap(best.sim, best.positions, best.order, shaping.theta)
        experiment.add_image("scpo/credit_heatmap", img, it, dataformats="HWC")

    def _trajectories_text(self, batch: RolloutBatch) -> str:
        lines = []
        for traj_id in range(min(self.trajectories, len(batch.trajectories))):
            t = batch.trajectories[traj_id]
            lines.append(f"### trajectory {traj_id} ({t['family']}, won={t['won']}, {t['length']} steps)")
            for i in np.flatnonzero(np.asarray(batch.traj_ids) == traj_id):
                lines.append(f"- step {batch.steps[i]}: `{batch.actions[i]}` -> {batch.observations[i][:200]}")
        return "\n".join(lines)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._val_failures = {}

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any,
                                batch: RolloutBatch, batch_idx: int, dataloader_idx: int = 0) -> None:
        for key, value in batch.env_failures.items():
            self._val_failures[key] = self._val_failures.get(key, 0.0) + value

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        step = 0 if trainer.sanity_checking else trainer.current_epoch + 1
        results = pl_module.val_summary()
        results.update(reduce_scalars({f"val/env_failures/{k}": v for k, v in self.failure_counts(self._val_failures).items()}))
        if trainer.is_global_zero:
            self._log(trainer, results, step)
            shown = ", ".join(f"{k[4:]} {v:.3f}" for k, v in results.items() if "/" not in k[4:] or k.startswith("val/success/"))
            trainer.print(f"[val @ it {step}] {shown}")

    def state_dict(self) -> dict[str, Any]:
        return {"env_failure_totals": dict(self.env_failure_totals)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.env_failure_totals = dict(state_dict["env_failure_totals"])
