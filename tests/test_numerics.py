"""A non-finite loss or gradient skips its optimizer step, is counted and logged, and training goes on."""

from __future__ import annotations

import csv
import dataclasses
import math

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger

import scpo_lightning.ppo_epoch as ppo_epoch
from callbacks.logging import RLLogger
from scpo_lightning.datamodule import RolloutDataModule
from scpo_lightning.module import SCPOModule
from scpo_lightning.rollout import RolloutConfig
from scpo_lightning.testing import build_tiny_llama


class NanGrad(torch.autograd.Function):
    """Identity forward, NaN gradient: a finite loss whose backward blows up."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("nan")


class Watch(L.Callback):
    """Weights at the start of iteration 1 and at its first applied optimizer step."""

    def __init__(self):
        self.start = self.first_step = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.current_epoch == 0:
            self.start = [p.detach().clone() for p in pl_module.policy.parameters()]

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if trainer.current_epoch == 0 and self.first_step is None:
            self.first_step = [p.detach().clone() for p in pl_module.policy.parameters()]


def test_nonfinite_loss_and_gradient_skip_their_steps_and_training_continues(tmp_path, monkeypatch):
    # Iteration 1's first mini-batch gets an infinite loss whose gradient is finite (an added
    # constant): only the loss check can catch it. Its second gets a finite loss with NaN gradients.
    real_loss, calls = ppo_epoch.policy_loss, []

    def faulty_loss(*args, **kwargs):
        out = real_loss(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            return dataclasses.replace(out, loss=out.loss + torch.tensor(math.inf))
        if len(calls) == 2:
            return dataclasses.replace(out, loss=NanGrad.apply(out.loss))
        return out

    monkeypatch.setattr(ppo_epoch, "policy_loss", faulty_loss)
    torch.manual_seed(0)
    module = SCPOModule(max_new_tokens=12, policy=str(build_tiny_llama(tmp_path / "tiny")), lr=1e-3, kl_coef=0.0,
                        mini_batch_rows=1, micro_batch_rows=1, generation_batch_size=8)
    data = RolloutDataModule(
        env="corridor", env_options={"rooms": 3, "max_steps": 3}, groups_per_batch=2, group_size=2, workers=0,
        val_episodes=0, progress=False,
        rollout=RolloutConfig(env="alfworld", max_steps=3, action_mode="constrained", max_prompt_tokens=4096))
    watch = Watch()
    trainer = L.Trainer(max_epochs=2, num_sanity_val_steps=0, limit_val_batches=0, accelerator="cpu", devices=1,
                        logger=CSVLogger(tmp_path / "logs", name="", version=""), enable_progress_bar=False,
                        enable_checkpointing=False, callbacks=[RLLogger(), watch])
    trainer.fit(module, data)

    rows = {int(float(r["step"])): r for r in csv.DictReader((tmp_path / "logs" / "metrics.csv").open()) if r.get("train/loss")}
    first, second = rows[1], rows[2]
    assert float(first["train/skipped_steps"]) == 2
    assert float(first["train/skipped_nonfinite_loss"]) == 1 and float(first["train/skipped_nonfinite_grad"]) == 1
    assert math.isfinite(float(first["train/loss"]))  # the infinite loss is counted, not averaged in
    assert float(second["train/skipped_steps"]) == 0 and float(second["train/skipped_steps_total"]) == 2
    applied = float(first["train/optimizer_steps"]) + float(second["train/optimizer_steps"])
    assert applied >= 3 and trainer.global_step == applied  # skipped steps never called the optimizer
    # The two skipped steps changed nothing: the first applied step starts from the iteration's weights.
    assert watch.first_step is not None
    assert all(torch.equal(a, b) for a, b in zip(watch.start, watch.first_step))
    params = [p for p in module.policy.parameters() if p.requires_grad]
    assert all(torch.isfinite(p).all() for p in params)
    adam = trainer.optimizers[0].state[params[0]]
    assert float(adam["step"]) == applied and torch.isfinite(adam["exp_avg_sq"]).all()
    assert module.skipped_steps == 2

