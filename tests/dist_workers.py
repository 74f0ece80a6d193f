"""Process bodies for the gloo tests of tests/test_data_parallel.py (kept light to import: spawn)."""

from __future__ import annotations

import datetime
from pathlib import Path
from types import SimpleNamespace

import numpy as np

FAMILIES = ("pick_and_place_simple", "look_at_obj_in_light", "pick_two_obj_and_place")


def episodes(rank: int) -> tuple[list[dict], np.ndarray]:
    """Rank 0: five episodes over three families; rank 1: two episodes of one family."""
    if rank == 0:
        trajs = [{"won": w, "length": n, "family": f} for w, n, f in
                 [(True, 3, FAMILIES[0]), (False, 9, FAMILIES[1]), (True, 4, FAMILIES[1]),
                  (False, 9, FAMILIES[2]), (True, 2, FAMILIES[0])]]
        return trajs, np.array([1, 1, 0, 1, 1, 1, 0, 0], dtype=bool)
    return [{"won": False, "length": 7, "family": FAMILIES[2]}, {"won": True, "length": 5, "family": FAMILIES[2]}], \
        np.array([1, 0, 1], dtype=bool)


def expected_metrics() -> dict[str, float]:
    """The same numbers computed directly over both ranks' episodes."""
    trajs = episodes(0)[0] + episodes(1)[0]
    valid = np.concatenate([episodes(0)[1], episodes(1)[1]])
    out = {"success": np.mean([t["won"] for t in trajs]), "episode_length": np.mean([t["length"] for t in trajs]),
           "valid_action_ratio": valid.mean()}
    out.update({f"success/{f}": np.mean([t["won"] for t in trajs if t["family"] == f]) for f in FAMILIES})
    metrics = {f"rollout/{k}": v for k, v in out.items()} | {f"val/{k}": v for k, v in out.items()}
    # Per-rank scalars: rank r reports time r+1, one env failure, 2 groups, r credited steps per failed.
    metrics.update({"time/rollout_s": 2.0, "env_failures/step_timeout": 2.0, "scpo/groups": 4.0,
                    "scpo/credited_steps_per_failed": 0.5})
    return {k: float(v) for k, v in metrics.items()}


def metrics_worker(rank: int, world: int, tmp: str, results) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{Path(tmp) / 'pg'}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    from scpo_lightning import metrics
    from scpo_lightning.module import SCPOModule

    trajs, valid = episodes(rank)
    batch = SimpleNamespace(trajectories=trajs, is_action_valid=valid, timings={"rollout_s": rank + 1.0},
                            env_failures={"step_timeout": 1.0},
                            scpo_stats={"groups": 2.0, "credited_steps_per_failed": float(rank)})
    out = metrics.batch_metrics(batch)  # what the logging callback logs for the iteration
    # The module's validation path, on a stand-in for the module (no model is needed to count).
    from envs.registry import env_spec

    module = SimpleNamespace(env_spec=env_spec("alfworld"), device="cpu")  # as SCPOModule.setup takes it
    module._val_update = lambda *a: SCPOModule._val_update(module, *a)
    SCPOModule.on_validation_epoch_start(module)
    # Two validation batches on rank 0, one on rank 1: batch counts may differ between ranks.
    halves = [(trajs[:2], valid[:3]), (trajs[2:], valid[3:])] if rank == 0 else [(trajs, valid)]
    for i, (part, v) in enumerate(halves):
        SCPOModule.validation_step(module, SimpleNamespace(trajectories=part, is_action_valid=v), i)
    out.update(SCPOModule.val_summary(module))
    results[rank] = out
    dist.destroy_process_group()
