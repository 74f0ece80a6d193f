"""End to end: a tiny random Llama trains on the corridor world with SCPO, validates, logs, resumes."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger

from callbacks.logging import RLLogger
from callbacks.scpo import SCPOCallback
from scpo_lightning.datamodule import RolloutDataModule
from scpo_lightning.module import SCPOModule
from scpo_lightning.rollout import RolloutConfig
from scpo_lightning.testing import build_tiny_llama


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> str:
    return str(build_tiny_llama(tmp_path_factory.mktemp("tiny")))


def make(tiny_model: str, **module_kw):
    module = SCPOModule(policy=tiny_model, lr=1e-3, mini_batch_rows=12, micro_batch_rows=6,
                        generation_batch_size=16, max_new_tokens=12, **module_kw)
    data = RolloutDataModule(
        env="corridor", env_options={"rooms": 3, "max_steps": 4}, groups_per_batch=3, group_size=4, workers=0,
        val_episodes=4, val_batch_episodes=4, progress=False,
        rollout=RolloutConfig(env="alfworld", max_steps=4, action_mode="constrained", max_prompt_tokens=4096),
    )
    return module, data


class Record(L.Callback):
    """Keeps each training batch and the parameters before the first update."""

    def __init__(self):
        self.batches, self.first_params = [], None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.first_params is None:
            self.first_params = [p.detach().clone() for p in pl_module.policy.parameters()]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.batches.append((trainer.current_epoch, batch, dict(outputs["metrics"])))


def read_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[int, float]]] = {}
    for events in log_dir.rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0, "images": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.step, e.value) for e in acc.Scalars(tag))
        for tag in acc.Tags()["images"]:
            out.setdefault(f"image:{tag}", []).extend((e.step, 0.0) for e in acc.Images(tag))
    return out


def test_two_iterations_with_scpo_train_validate_and_log(tiny_model, tmp_path):
    torch.manual_seed(0)
    module, data = make(tiny_model)
    record = Record()
    trainer = L.Trainer(
        max_epochs=2, check_val_every_n_epoch=2, num_sanity_val_steps=-1, accelerator="cpu", devices=1,
        logger=TensorBoardLogger(tmp_path, name="", version=""), enable_progress_bar=False,
        enable_checkpointing=False, callbacks=[SCPOCallback(scorer="lexical", order="chronological"), RLLogger(), record],
    )
    trainer.fit(module, data)
    assert len(record.batches) == 2
    for _, batch, metrics in record.batches:
        assert np.isfinite(metrics["train/loss"])
        # SCPO credit lands on failed siblings' rows only; successful rows keep G exactly.
        won = np.array([batch.trajectories[t]["won"] for t in batch.traj_ids])
        assert batch.shaped_returns is not None
        assert np.all(batch.scpo_credit[won] == 0)
        np.testing.assert_array_equal(batch.shaped_returns[won], batch.step_returns[won])
    assert any(b.scpo_credit.sum() > 0 for _, b, _ in record.batches), "SCPO never credited a failed step"
    changed = any(not torch.equal(a, b.detach()) for a, b in zip(record.first_params, module.policy.parameters()))
    assert changed, "parameters did not change"
    scalars = read_scalars(tmp_path)
    assert [s for s, _ in scalars["val/success"]] == [0, 2]  # before training and after iteration 2
    assert "val/success/corridor" in scalars and "scpo/credited_steps_per_failed" in scalars
    assert "time/rollout_s" in scalars and "image:scpo/credit_heatmap" in scalars


class Kill(L.Callback):
    def __init__(self, at_epoch: int):
        self.at_epoch = at_epoch

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch == self.at_epoch:
            raise RuntimeError("killed")  # the run dies here, after iteration k's checkpoint


def test_killed_run_resumes_at_the_next_iteration(tiny_model, tmp_path):
    record = Record()

    def run(callbacks, ckpt_path=None):
        module, data = make(tiny_model, kl_coef=0.0)
        trainer = L.Trainer(
            max_epochs=3, num_sanity_val_steps=0, limit_val_batches=0, accelerator="cpu", devices=1,
            logger=False, enable_progress_bar=False, default_root_dir=tmp_path,
            callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last="link", save_top_k=1, save_on_train_epoch_end=True),
                       record, *callbacks],
        )
        trainer.fit(module, data, ckpt_path=ckpt_path)
        return trainer, record, data

    with pytest.raises(RuntimeError, match="killed"):
        run([Kill(at_epoch=2)])
    assert [e for e, _, _ in record.batches] == [0, 1] and (tmp_path / "ckpt" / "last.ckpt").exists()
    trainer, _, data = run([], ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    assert [e for e, _, _ in record.batches] == [0, 1, 2]  # continues at iteration 3, not from scratch
    assert trainer.current_epoch == 3 and data.iteration == 3
