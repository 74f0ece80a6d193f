"""One SCPO training iteration on recorded rollout batches, on one process or on two FSDP2 ranks.

Used by tests/test_fsdp2.py: ``python tests/fsdp2_worker.py <model> <batches.pkl> <out dir> dp``
trains with ``ModelParallelStrategy(data_parallel_size=2)`` on CPU/gloo (Lightning relaunches this
script for rank 1), rank r training on recorded batch r; ``train(..., "single")`` trains one
process on both batches merged. Each rank saves its metrics, its gathered full parameters and
the SCPO-shaped returns to ``<out dir>/rank<r>.pt``.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
from datetime import timedelta
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from callbacks.scpo import SCPOCallback  # noqa: E402
from scpo_lightning import distributed  # noqa: E402
from scpo_lightning.batch import RolloutBatch  # noqa: E402
from scpo_lightning.module import SCPOModule  # noqa: E402


def merge(a: RolloutBatch, b: RolloutBatch) -> RolloutBatch:
    """``a``'s rows then ``b``'s, as if one collection had run both (group and trajectory ids offset)."""
    offsets = {"group_ids": len({*a.group_ids}), "traj_ids": len(a.trajectories)}
    out = {}
    for f in dataclasses.fields(RolloutBatch):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            out[f.name] = np.concatenate([x, y])
        elif isinstance(x, list):
            out[f.name] = x + ([v + offsets[f.name] for v in y] if f.name in offsets else y)
        else:
            out[f.name] = None if x is None else type(x)()
    return RolloutBatch(**out)


class _Fixed(IterableDataset):
    def __init__(self, dm: L.LightningDataModule):
        self.dm = dm

    def __iter__(self):
        batches = pickle.loads(self.dm.payload)  # a fresh copy: the SCPO callback writes into it
        yield merge(*batches) if self.dm.mode == "single" else batches[self.dm.trainer.global_rank]


class FixedBatches(L.LightningDataModule):
    """Yields the recorded batch of this rank (``dp``) or both merged (``single``)."""

    env = "corridor"

    def __init__(self, payload: bytes, mode: str):
        super().__init__()
        self.payload, self.mode = payload, mode

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_Fixed(self), batch_size=None, collate_fn=lambda b: b)


def train(model_dir: str, batches_path: str, out_dir: str, mode: str) -> None:
    from lightning.pytorch.strategies import ModelParallelStrategy
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    torch.manual_seed(0)
    dp = mode == "dp"
    # One optimizer step over all rows, one row per micro-batch: the single-process gradient is the
    # mean over rows, which the two ranks must reproduce although they hold different row counts.
    module = SCPOModule(policy=model_dir, lr=1e-3, mini_batch_rows=10_000, micro_batch_rows=1, kl_coef=0.01,
                        gradient_checkpointing=dp)  # recomputation must not change the numbers
    strategy = (ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1, timeout=timedelta(seconds=90))
                if dp else "auto")
    trainer = L.Trainer(accelerator="cpu", devices=2 if dp else 1, strategy=strategy, max_epochs=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, limit_val_batches=0,
                        callbacks=[SCPOCallback(scorer="lexical", order="chronological")])
    seen: list[RolloutBatch] = []

    class Keep(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            seen.append(batch)

    trainer.callbacks.append(Keep())
    trainer.fit(module, FixedBatches(Path(batches_path).read_bytes(), mode))
    # Full parameters on every rank (collective), to compare the ranks with each other.
    params = get_model_state_dict(module.policy, options=StateDictOptions(full_state_dict=True))
    torch.save({"metrics": module.last_metrics, "params": {k: v.detach().cpu() for k, v in params.items()},
                "shaped": seen[0].shaped_returns, "rows": len(seen[0])},
               Path(out_dir) / f"rank{trainer.global_rank}.pt")
    distributed.finish()


if __name__ == "__main__":
    train(*sys.argv[1:5])
