"""The data-parallel layout: which tasks each rank collects, and metrics reduced over ranks.

The DataModule runs here as rank r of W with the rollout loop stubbed (it records the tasks it is
asked to collect), so every layout is checked without processes; the cross-rank reductions run
in two real gloo processes.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch.multiprocessing as mp

import scpo_lightning.datamodule as datamodule_module
from scpo_lightning.datamodule import RolloutDataModule
from scpo_lightning.rollout import RolloutConfig, RolloutPolicy, SamplingSettings
from tests import dist_workers


class FakeModule:
    """What ``rollout_batches`` needs of the module (its rollout policy); counts entries into the
    generation context."""

    def __init__(self):
        self.contexts = 0

    @contextlib.contextmanager
    def generation_context(self, validation: bool = False):
        self.contexts += 1  # collective in real runs: every rank must enter it equally often
        yield

    def rollout_policy(self) -> RolloutPolicy:
        return RolloutPolicy(None, None, self.generation_context, "cpu", SamplingSettings(1.0, 1.0, 512, 0.4))


def as_rank(rank: int, world: int, monkeypatch, **kw) -> tuple[RolloutDataModule, FakeModule, list]:
    collected: list = []
    monkeypatch.setattr(datamodule_module, "collect", lambda pool, engine, tok, tasks, *a, **k: collected.append(tasks) or tasks)
    # truncation left: no tokenizer is needed for the start-up prompt-length check
    dm = RolloutDataModule(env="corridor", workers=0, progress=False, rollout=RolloutConfig(truncation="left"), **kw)
    module = FakeModule()
    dm.trainer = SimpleNamespace(global_rank=rank, world_size=world, lightning_module=module, callbacks=[])
    dm.setup("fit")
    return dm, module, collected


@pytest.mark.parametrize("episodes, batch, world", [(128, 32, 4), (7, 2, 3), (3, 1, 2), (1, 4, 2), (5, 8, 1)])
def test_validation_episodes_are_split_without_duplicates_or_gaps(monkeypatch, episodes, batch, world):
    per_rank, contexts = [], []
    for rank in range(world):
        dm, module, collected = as_rank(rank, world, monkeypatch, val_episodes=episodes, val_batch_episodes=batch,
                                        val_start_index=10, groups_per_batch=world)
        yielded = list(dm.rollout_batches("val"))
        assert yielded == collected and all(0 < len(c) <= batch for c in collected)
        per_rank.append([i for chunk in collected for _, i in chunk])
        contexts.append(module.contexts)
    everything = [i for r in per_rank for i in r]
    assert sorted(everything) == list(range(10, 10 + episodes))  # union = the range, no duplicates
    assert len(set(contexts)) == 1, f"ranks entered the generation context {contexts} times"


def test_each_rank_collects_its_own_whole_groups_of_the_common_draw(monkeypatch):
    single, _, got = as_rank(0, 1, monkeypatch, groups_per_batch=8, group_size=2, seed=3)
    draws = [list(single.rollout_batches("train"))[0] for _ in range(2)]  # two iterations on one device
    for world in (2, 4):
        shares = []
        for rank in range(world):
            dm, _, _ = as_rank(rank, world, monkeypatch, groups_per_batch=8, group_size=2, seed=3)
            shares.append([list(dm.rollout_batches("train"))[0] for _ in range(2)])
            assert dm.state_dict()["rng"] == single.state_dict()["rng"]  # same resume state on every rank
        for it in range(2):
            assert all(len(s[it]) == 8 // world for s in shares)
            assert [t for s in shares for t in s[it]] == draws[it]  # disjoint, and the one-device tasks


def test_resumed_rank_continues_with_its_share(monkeypatch):
    rank1, _, _ = as_rank(1, 2, monkeypatch, groups_per_batch=4, seed=5)
    list(rank1.rollout_batches("train"))
    expected = list(rank1.rollout_batches("train"))[0]
    # A checkpoint holds rank 0's DataModule state; rank 1 restores it and must go on alike.
    rank0, _, _ = as_rank(0, 2, monkeypatch, groups_per_batch=4, seed=5)
    list(rank0.rollout_batches("train"))
    resumed, _, _ = as_rank(1, 2, monkeypatch, groups_per_batch=4, seed=5)
    resumed.load_state_dict(rank0.state_dict())
    assert list(resumed.rollout_batches("train"))[0] == expected


def test_groups_must_divide_among_ranks(monkeypatch):
    with pytest.raises(ValueError, match=r"data.groups_per_batch=6 .* multiple of the number of ranks \(4"):
        as_rank(0, 4, monkeypatch, groups_per_batch=6)


def test_metrics_are_reduced_over_two_processes(tmp_path):
    """Rollout metrics, per-rank scalars and validation metrics over 2 gloo ranks equal the
    values over all episodes; rank 1 lacks most ALFWorld families and must not hang the sync."""
    ctx = mp.get_context("spawn")
    results = ctx.Manager().dict()
    mp.start_processes(dist_workers.metrics_worker, args=(2, str(tmp_path), results), nprocs=2,
                       start_method="spawn", join=True)
    expected = dist_workers.expected_metrics()
    for rank in range(2):
        got = results[rank]
        for key, value in expected.items():
            assert got[key] == pytest.approx(value), (rank, key)
        assert set(got) == set(expected)
    assert np.isfinite(list(results[0].values())).all()
