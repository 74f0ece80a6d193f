"""One (method, seed) run of the learning benchmark: its config, its panels, its result file.

A run's seed is the only seed it has: it is written into ``seed_everything`` (which seeds the LoRA
initialisation, scpo_lightning/model_setup.py), ``data.seed`` (the training task stream and the
sampling seed of every rollout, validation included) and the SCPO callback's ``seed``. The
panels do not depend on it: the training pool is the first ``data.train_tasks`` games of
``data.train_split``; the dev panel is the config's own validation (``data.val_split``,
``val_start_index``, ``val_episodes``); the test panel is ``TEST_PANELS[data.env]``. They are
checked disjoint by their task ids before anything trains.

Validations: iteration 0 and the final one on the test panel, those in between on the dev panel
(``--dev``: every one on the dev panel, for choosing the recipe without reading the test panel).
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import lightning as L

from benchmarks.learning_stats import wilson

#: Per method: the estimator (``model.estimator``), the SCPO callback's settings over the config's
#: (None: no SCPO callback) and data settings over the config's.
DYNAMIC = {"dynamic_sampling": {"top_up": True, "max_retries": 2}}
SIMILARITY = {"class_path": "scpo_lightning.estimators.GiGPO", "init_args": {"similarity_thresh": 0.95}}
METHODS: dict[str, tuple[Any, dict[str, Any] | None, dict[str, Any]]] = {
    "grpo": ("grpo", None, {}), "gigpo": ("gigpo", None, {}), "scpo": ("gigpo", {}, {}),
    "gigpo_similarity": (SIMILARITY, None, {}), "scpo_lexical": ("gigpo", {"scorer": "lexical"}, {}),
    "scpo_buffer": ("gigpo", {"reference_source": "both"}, {}),
    "gigpo_dynamic": ("gigpo", None, DYNAMIC), "scpo_buffer_dynamic": ("gigpo", {"reference_source": "both"}, DYNAMIC),
}
#: The grid the issue asks for: seeds per method.
GRID = {"gigpo": 5, "scpo": 5, "grpo": 3, "gigpo_similarity": 3, "scpo_lexical": 3}
#: The frozen test panel per environment: splits played as one, first task index, games.
#: ALFWorld: the last 128 generated tiny games of the two families in `train` (seen floor plans,
#: like valid_seen), far from the training pool (its first games) and outside the dev panel's splits.
TEST_PANELS = {"alfworld": {"splits": ["train"], "start": 1057, "episodes": 128},
               "corridor": {"splits": ["test"], "start": 0, "episodes": 4}}
#: Per-iteration scalars kept in the JSON (the module's and the SCPO callback's names).
TRAIN_KEYS = ("train/loss", "train/pg_loss", "train/kl", "train/entropy", "train/clip_frac", "train/approx_kl_old",
              "train/advantage_std", "train/grad_norm", "train/optimizer_steps", "rollout/logprob_diff_max")
SCPO_KEYS = ("groups_with_reference", "failed_trajectories", "credited_steps_per_failed", "mean_aux_reward",
             "pairs_requested", "pairs_scored", "groups_with_buffer_reference", "buffer_size", "buffer_hit_rate")


def sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def run_config(method: str, seed: int, base: dict[str, Any]) -> dict[str, Any]:
    """``base`` (the recipe) with ``method``'s estimator, SCPO and data settings and the run's seed."""
    estimator, scpo, data = METHODS[method]
    cfg = copy.deepcopy(base)
    cfg["seed_everything"] = seed
    cfg["model"]["estimator"] = estimator
    cfg["data"].update(data, seed=seed)
    callbacks = cfg["trainer"].get("callbacks") or []
    has_scpo = any(cb["class_path"].endswith("SCPOCallback") for cb in callbacks)
    if scpo is not None and not has_scpo:
        raise ValueError(f"benchmarks.learning: the config has no SCPOCallback, so `{method}` would train without SCPO")
    cfg["trainer"]["callbacks"] = [
        {**cb, "init_args": {**(cb.get("init_args") or {}), **(scpo or {}), "seed": seed}}
        if cb["class_path"].endswith("SCPOCallback") else cb
        for cb in callbacks if scpo is not None or not cb["class_path"].endswith("SCPOCallback")]
    return cfg


def panel_specs(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    data = cfg["data"]
    if data.get("train_tasks") is None:
        raise ValueError("benchmarks.learning needs data.train_tasks (a training pool of known games)")
    val = data.get("val_split", "valid_seen")
    return {"train": {"splits": [data.get("train_split", "train")], "start": 0, "episodes": data["train_tasks"]},
            "dev": {"splits": [val] if isinstance(val, str) else list(val), "start": data.get("val_start_index", 0),
                    "episodes": data["val_episodes"]},
            "test": TEST_PANELS[data["env"]]}


def task_ids(cfg: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """The task ids of a panel's games, in play order (ALFWorld: its game source; else a reset)."""
    from envs.registry import make_env_factory, split_size

    data = cfg["data"]
    env = make_env_factory(data["env"], data.get("env_options"))()
    ids, index = [], spec["start"]
    for split in spec["splits"]:
        size = split_size(data["env"], split, data.get("env_options"))
        while len(ids) < spec["episodes"] and (size is None or index < size):
            source = getattr(env, "source", None)
            ids.append(source.game(split, index).game_id if source is not None else env.reset(split, index).task_id)
            index += 1
        index -= size if size is not None else 0
    env.close()
    if len(ids) < spec["episodes"]:
        raise ValueError(f"panel {spec} holds only {len(ids)} games")
    return ids


def panels(cfg: dict[str, Any]) -> dict[str, Any]:
    """Every panel's ids, checked disjoint, and the test ids' hash."""
    specs = panel_specs(cfg)
    ids = {name: task_ids(cfg, spec) for name, spec in specs.items()}
    for a, b in (("train", "dev"), ("train", "test"), ("dev", "test")):
        shared = sorted(set(ids[a]) & set(ids[b]))
        if shared:
            raise ValueError(f"benchmarks.learning: panels {a} and {b} share {len(shared)} games ({shared[:3]} ...)")
    return {"specs": specs, "ids": ids, "test_sha256": sha256(ids["test"])}


def use_panel(dm: Any, spec: dict[str, Any]) -> None:
    """Point the DataModule's next validation at a panel (read when the validation starts)."""
    dm.val_splits, dm.val_start_index, dm.val_episodes = list(spec["splits"]), spec["start"], spec["episodes"]
    dm._val_sizes = None  # the split sizes it caches belong to the previous panel's splits


def actions_sha256(batch: Any) -> str:
    return sha256([batch.traj_ids, batch.actions])


class Recorder(L.Callback):
    """Chooses each validation's panel; records per validation each episode's task and outcome, per
    training iteration its task ids, scalars and groups with a success."""

    def __init__(self, specs: dict[str, dict[str, Any]], dev_only: bool) -> None:
        self.specs, self.dev_only = specs, dev_only
        self.validations: list[dict[str, Any]] = []
        self.iterations: list[dict[str, Any]] = []
        self.wall: dict[str, list[float]] = {"validations": [], "iterations": []}
        self._episodes: list[dict[str, Any]] = []
        self._actions: list[str] = []
        self._panel = "dev" if dev_only else "test"
        self._start = time.perf_counter()

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        use_panel(trainer.datamodule, self.specs[self._panel])  # the sanity check = iteration 0

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        self._episodes += [{"task": t["task_id"], "won": bool(t["won"])} for t in batch.trajectories]
        self._actions.append(actions_sha256(batch))

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        iteration = 0 if trainer.sanity_checking else trainer.current_epoch + 1
        self.validations.append(validation_record(iteration, self._panel, self._episodes, sha256(self._actions)))
        self.wall["validations"].append(round(time.perf_counter() - self._start, 1))
        self._episodes, self._actions = [], []

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        m, episodes, stats = outputs["metrics"], batch.episode_metrics(), batch.scpo_stats
        groups: dict[int, list[dict[str, Any]]] = {}
        for t in batch.trajectories:
            groups.setdefault(t["group"], []).append(t)
        record = {"iteration": trainer.current_epoch + 1, "tasks": [g[0]["task_id"] for g in groups.values()],
                  "rows": len(batch), "success": episodes["success"],
                  "groups_with_success": sum(any(t["won"] for t in g) for g in groups.values()) / len(groups),
                  "valid_action_ratio": episodes["valid_action_ratio"], "actions_sha256": actions_sha256(batch),
                  **{k.split("/", 1)[1]: round(m[k], 6) for k in TRAIN_KEYS if k in m}}
        if stats:
            record["scpo"] = {k: stats[k] for k in SCPO_KEYS if k in stats}
        if batch.sampling_stats:
            record["sampling"] = dict(batch.sampling_stats)
        self.iterations.append(record)
        self.wall["iterations"].append(round(time.perf_counter() - self._start, 1))
        final = trainer.current_epoch + 1 == trainer.max_epochs
        self._panel = "test" if final and not self.dev_only else "dev"
        use_panel(trainer.datamodule, self.specs[self._panel])  # the validation after this iteration


def validation_record(iteration: int, panel: str, episodes: list[dict[str, Any]], actions: str) -> dict[str, Any]:
    wins = sum(e["won"] for e in episodes)
    low, high = wilson(wins, len(episodes))
    return {"iteration": iteration, "panel": panel, "episodes": len(episodes), "successes": wins,
            "success": wins / len(episodes) if episodes else 0.0, "ci95": [round(low, 4), round(high, 4)],
            "actions_sha256": actions, "outcomes": [[e["task"], int(e["won"])] for e in episodes]}


def train_one(config: Path, args: list[str], recorder: Recorder) -> float:
    """One run through the app's own CLI; returns the fit's wall time."""
    import gc

    from scpo_lightning.cli import SCPOCLI
    from scpo_lightning.datamodule import RolloutDataModule
    from scpo_lightning.module import SCPOModule

    cli = SCPOCLI(SCPOModule, RolloutDataModule, run=False, args=["--config", str(config), *args],
                  save_config_callback=None,
                  trainer_defaults={"plugins": [{"class_path": "scpo_lightning.checkpoint_io.AtomicCheckpointIO"}]})
    cli.trainer.callbacks.insert(0, recorder)
    start = time.perf_counter()
    cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    wall = time.perf_counter() - start
    del cli
    gc.collect()
    return wall
