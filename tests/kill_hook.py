"""Test-only callback that SIGKILLs its own training process at a chosen phase of one iteration.

Used by tests/test_killed_runs.py through the CLI (``trainer.callbacks`` in the YAML), so the run
dies as it would under the OOM killer or a preemption: no exception handlers, no teardown.
"""

from __future__ import annotations

import io
import json
import os
import signal
from pathlib import Path

import lightning as L
import torch

PHASES = ("rollout", "update", "checkpoint")


def _die(record: Path, **info) -> None:
    record.write_text(json.dumps(info))
    os.kill(os.getpid(), signal.SIGKILL)


class KillAt(L.Callback):
    """SIGKILL the process during ``phase`` of RL iteration ``iteration`` (1-based).

    Args:
        phase: rollout (after the 2nd env step call), update (before the 2nd optimizer step) or
            checkpoint (halfway through writing the iteration's checkpoint file).
        iteration: The RL iteration to die in.
        record: JSON file written just before dying: the phase, the env worker pids, the file being written.
    """

    def __init__(self, phase: str, iteration: int, record: str):
        if phase not in PHASES:
            raise ValueError(f"KillAt.phase must be one of {PHASES}; got {phase!r}")
        self.phase, self.iteration, self.record = phase, iteration, Path(record)
        self.optimizer_steps = 0

    def _now(self, trainer: L.Trainer) -> bool:
        return trainer.current_epoch + 1 == self.iteration

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.phase != "rollout" or not self._now(trainer):
            return
        pool = trainer.datamodule.pool
        step, calls = pool.step, []

        def step_then_die(actions):
            calls.append(1)
            if len(calls) == 2:  # mid-episode: one step done, envs busy in their workers
                _die(self.record, phase=self.phase, workers=pool.worker_pids())
            return step(actions)

        pool.step = step_then_die

    def on_before_optimizer_step(self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer) -> None:
        if self.phase != "update" or not self._now(trainer):
            return
        self.optimizer_steps += 1
        if self.optimizer_steps == 2:  # the first mini-batch's step is already in the weights and Adam's moments
            _die(self.record, phase=self.phase)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint) -> None:
        if self.phase != "checkpoint" or not self._now(trainer):
            return
        real_save, record = torch.save, self.record

        def save_half_then_die(obj, f, *args, **kwargs):
            buffer = io.BytesIO()
            real_save(obj, buffer, *args, **kwargs)
            data = buffer.getvalue()
            out = open(f, "wb") if isinstance(f, (str, os.PathLike)) else f  # noqa: SIM115 - we die holding it
            out.write(data[: len(data) // 2])
            out.flush()
            os.fsync(out.fileno())
            _die(record, phase="checkpoint", file=str(getattr(out, "name", "?")), size=len(data))

        torch.save = save_half_then_die  # called right after this hook, by the CheckpointIO
