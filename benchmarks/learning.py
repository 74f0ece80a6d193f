"""Does training make the agent better? GRPO, GiGPO and SCPO trained side by side on CPU.

Every method starts from the same policy (``configs/learning.yaml``: SmolLM2-135M with LoRA, fp32),
with the same seed, the same stream of training tasks and the same held-out validation games
(generated tiny ALFWorld rooms, both validation splits), validated before training and every
``--val-every`` iterations. The methods differ only in the advantage: GRPO (``model.estimator:
grpo``), GiGPO (``gigpo``) and SCPO (GiGPO plus the SCPO callback's step credit); beyond the paper
(docs/buffer_and_dynamic_sampling.md), ``scpo_buffer`` (SCPO with ``reference_source: both``),
and dynamic sampling on GiGPO or on SCPO with the buffer (``gigpo_dynamic``, ``scpo_buffer_dynamic``).

    python -m benchmarks.learning            # 12 iterations per method: ~30 min for the first, ~22 for each other, 2 cores
    python -m benchmarks.learning --methods gigpo scpo scpo_buffer scpo_buffer_dynamic
    python -m benchmarks.learning --smoke    # a tiny random model on the corridor world: seconds

Writes ``benchmarks/results/learning.json`` (per validation: successes of the same games, the
95 % Wilson interval; per iteration: train success, advantage and loss statistics, KL, clip
fraction, SCPO's groups with a reference and credited steps; the change from iteration 0 with its
95 % Newcombe interval), ``learning.png`` (success vs iteration with the intervals), and the
TensorBoard runs under ``runs/learning/<method>_seed<seed>``.

Iteration 0 is the same untrained policy playing the same games with the same sampling seed
for every method, so it is measured once per seed (by the first method) and shared: that saves
one validation per method, and the smoke test checks that the runs would agree.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning as L

from benchmarks.common import RESULTS, load_average, machine, write_result
from benchmarks.learning_report import plot, summarise, table, wilson

CONFIG = Path("configs/learning.yaml")
LOG_DIR = Path("runs/learning")
#: Per method: the estimator, the SCPO callback's settings over the config's (None: no SCPO
#: callback) and data settings over the config's. Validation is the same for all of them.
DYNAMIC = {"dynamic_sampling": {"top_up": True, "max_retries": 2}}
METHODS: dict[str, tuple[str, dict[str, Any] | None, dict[str, Any]]] = {
    "grpo": ("grpo", None, {}), "gigpo": ("gigpo", None, {}), "scpo": ("gigpo", {}, {}),
    "scpo_buffer": ("gigpo", {"reference_source": "both"}, {}),
    "gigpo_dynamic": ("gigpo", None, DYNAMIC), "scpo_buffer_dynamic": ("gigpo", {"reference_source": "both"}, DYNAMIC),
}
DEFAULT_METHODS = ("grpo", "gigpo", "scpo")
#: Per-iteration scalars kept in the JSON (the module's and the SCPO callback's names).
TRAIN_KEYS = ("train/loss", "train/pg_loss", "train/kl", "train/entropy", "train/clip_frac", "train/approx_kl_old",
              "train/advantage_std", "train/grad_norm", "train/optimizer_steps", "rollout/logprob_diff_max")
SCPO_KEYS = ("groups_with_reference", "failed_trajectories", "credited_steps_per_failed", "mean_aux_reward",
             "pairs_requested", "pairs_scored", "groups_with_buffer_reference", "buffer_size", "buffer_hit_rate")
class Recorder(L.Callback):
    """Per validation run: each episode's task and outcome; per training iteration: its scalars."""

    def __init__(self) -> None:
        self.validations: list[dict[str, Any]] = []
        self.iterations: list[dict[str, Any]] = []
        self._episodes: list[dict[str, Any]] = []
        self._start = time.perf_counter()
        self.fit_s = 0.0  # the whole fit: model load, validations, iterations

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        self._episodes += [{"task": t["task_id"], "family": t["family"], "won": bool(t["won"])}
                           for t in batch.trajectories]

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        iteration = 0 if trainer.sanity_checking else trainer.current_epoch + 1
        self.validations.append(validation_record(iteration, self._episodes, time.perf_counter() - self._start))
        self._episodes = []

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        m, episodes = pl_module.last_metrics, batch.episode_metrics()
        stats = batch.scpo_stats
        record = {"iteration": trainer.current_epoch + 1, "rows": len(batch), "success": episodes["success"],
                  "valid_action_ratio": episodes["valid_action_ratio"],
                  "wall_s": round(time.perf_counter() - self._start, 1),
                  **{k.split("/", 1)[1]: round(m[k], 6) for k in TRAIN_KEYS if k in m}}
        if stats:
            record["scpo"] = {k: stats[k] for k in SCPO_KEYS if k in stats}
        if batch.sampling_stats:
            record["sampling"] = dict(batch.sampling_stats)
        self.iterations.append(record)


def validation_record(iteration: int, episodes: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    wins = sum(e["won"] for e in episodes)
    low, high = wilson(wins, len(episodes))
    return {"iteration": iteration, "episodes": len(episodes), "successes": wins,
            "success": wins / len(episodes) if episodes else 0.0, "ci95": [round(low, 4), round(high, 4)],
            "wall_s": round(wall_s, 1), "outcomes": [[e["task"], int(e["won"])] for e in episodes]}


def method_config(method: str, config: Path, folder: Path) -> Path:
    """``config`` with ``method``'s SCPO and data settings written in (``config`` itself when it has none)."""
    import yaml

    _, scpo, data = METHODS[method]
    if not scpo and not data:
        return config
    cfg = yaml.safe_load(config.read_text())
    callbacks = [cb for cb in cfg["trainer"].get("callbacks") or [] if cb["class_path"].endswith("SCPOCallback")]
    if scpo is not None and not callbacks:
        raise ValueError(f"benchmarks.learning: {config} has no SCPOCallback, so `{method}` would train without SCPO")
    for cb in callbacks:
        cb["init_args"] = {**(cb.get("init_args") or {}), **(scpo or {})}
    cfg["data"].update(data)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{config.stem}_{method}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def cli_args(method: str, seed: int, iterations: int, val_every: int, shared_zero: bool, config: Path,
             extra: list[str], log_dir: Path = LOG_DIR) -> list[str]:
    return ["--config", str(config), f"--seed_everything={seed}", f"--trainer.max_epochs={iterations}",
            f"--trainer.check_val_every_n_epoch={val_every}",
            f"--trainer.num_sanity_val_steps={0 if shared_zero else -1}",
            f"--trainer.logger.init_args.save_dir={log_dir.parent}", f"--trainer.logger.init_args.name={log_dir.name}",
            f"--trainer.logger.init_args.version={method}_seed{seed}",
            f"--model.estimator={METHODS[method][0]}", *extra]


def train_one(method: str, args: list[str]) -> Recorder:
    """One method's run through the app's own CLI; SCPO's callback is dropped for methods without SCPO."""
    from callbacks.scpo import SCPOCallback
    from scpo_lightning.cli import SCPOCLI
    from scpo_lightning.datamodule import RolloutDataModule
    from scpo_lightning.module import SCPOModule

    cli = SCPOCLI(SCPOModule, RolloutDataModule, run=False, args=args, save_config_callback=None,
                  trainer_defaults={"plugins": [{"class_path": "scpo_lightning.checkpoint_io.AtomicCheckpointIO"}]})
    trainer = cli.trainer
    scpo = [cb for cb in trainer.callbacks if isinstance(cb, SCPOCallback)]
    with_scpo = METHODS[method][1] is not None
    if with_scpo and not scpo:
        raise ValueError(f"benchmarks.learning: the config has no SCPOCallback, so `{method}` would train plain GiGPO")
    if not with_scpo:
        trainer.callbacks = [cb for cb in trainer.callbacks if not isinstance(cb, SCPOCallback)]
    recorder = Recorder()
    trainer.callbacks.insert(0, recorder)
    start = time.perf_counter()
    trainer.fit(cli.model, datamodule=cli.datamodule)
    recorder.fit_s = time.perf_counter() - start
    del cli, trainer
    gc.collect()
    return recorder


def smoke_config(tmp: Path, config: Path = CONFIG) -> Path:
    """``config`` on the tiny random model, the corridor world and the lexical scorer (seconds a run)."""
    import yaml

    from scpo_lightning.testing import build_tiny_llama

    cfg = yaml.safe_load(config.read_text())
    for cb in cfg["trainer"]["callbacks"]:
        if cb["class_path"].endswith("SCPOCallback"):
            cb["init_args"]["scorer"] = "lexical"
    cfg["model"].update(policy=str(build_tiny_llama(tmp / "tiny")), lora_rank=4)
    cfg["data"].update(env="corridor", env_options={"rooms": 3, "max_steps": 4}, workers=1, val_split="valid",
                       val_episodes=4, val_batch_episodes=4, progress=False)
    cfg["data"]["rollout"].update(max_steps=4)
    path = tmp / "learning_smoke.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(DEFAULT_METHODS),
                        help="methods to train, in order")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0], help="seeds (each: every method from the same start)")
    parser.add_argument("--iterations", type=int, default=None, help="training iterations per run (default 12)")
    parser.add_argument("--val-every", type=int, default=6, help="validate every this many iterations (and at 0)")
    parser.add_argument("--config", type=Path, default=CONFIG, help="the LightningCLI config all methods share")
    parser.add_argument("--out", type=Path, default=RESULTS / "learning.json", help="the result file (the PNG beside it)")
    parser.add_argument("--no-shared-zero", action="store_true",
                        help="validate every method at iteration 0 instead of once per seed")
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny random model on the corridor world, 2 iterations: checks the pipeline, not learning")
    parser.add_argument("--table", type=Path, metavar="JSON",
                        help="print the Markdown table of a result file (docs/learning.md) and exit; trains nothing")
    args, extra = parser.parse_known_args(argv)  # the rest goes to the training CLI, e.g. --model.lr=5e-5
    if args.smoke and args.iterations is not None:
        parser.error(f"argument --iterations: --smoke runs 2 iterations; remove --iterations {args.iterations} or --smoke")
    args.iterations = 12 if args.iterations is None else args.iterations
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return {}
    log_dir = LOG_DIR
    if args.smoke:
        tmp = Path(tempfile.mkdtemp(prefix="learning_smoke_"))
        args.config, args.iterations, args.val_every = smoke_config(tmp, args.config), 2, 1
        log_dir = tmp / "runs" / "learning"
        if args.out == RESULTS / "learning.json":  # never overwrite the published result with a smoke run
            args.out = tmp / "learning.json"
    if args.iterations % args.val_every:
        raise ValueError(f"--iterations {args.iterations} must be a multiple of --val-every {args.val_every}, "
                         "so that the last iteration is validated")
    variants = Path(tempfile.mkdtemp(prefix="learning_methods_"))  # each method's config, as it ran
    configs = {m: method_config(m, args.config, variants) for m in args.methods}
    started, t0 = machine(), time.perf_counter()
    runs: dict[str, dict[str, Any]] = {}
    result: dict[str, Any] = {}
    for seed in args.seeds:
        zero = None
        for method in args.methods:
            shared = zero is not None and not args.no_shared_zero
            rec = train_one(method, cli_args(method, seed, args.iterations, args.val_every, shared, configs[method],
                                             extra, log_dir))
            validations = ([zero] if shared else []) + rec.validations
            zero = zero or rec.validations[0]
            runs[f"{method}_seed{seed}"] = {"method": method, "seed": seed, "validations": validations,
                                            "iterations": rec.iterations, "wall_s": round(rec.fit_s, 1),
                                            "iteration_0_shared": shared}
            print(f"[learning] {method} seed {seed}: " + ", ".join(
                f"it {v['iteration']}: {v['successes']}/{v['episodes']}" for v in validations), flush=True)
            # Written after every run, so a stopped benchmark keeps what it finished (`runs` says which).
            result = {
                "what": "validation success of the methods trained from the same policy, seeds and tasks",
                "config": str(args.config), "cli_overrides": extra,
                "method_settings": {m: {"estimator": METHODS[m][0], "scpo": METHODS[m][1], "data": METHODS[m][2]}
                                    for m in args.methods}, "iterations": args.iterations,
                "val_every": args.val_every, "methods_requested": args.methods, "seeds_requested": args.seeds,
                "summary": summarise(runs), "runs": runs, "wall_s": round(time.perf_counter() - t0, 1),
                "machine": started, "load_average_at_end": load_average(),
            }
            write_result("learning", result, args.out)
            n = validations[0]["episodes"]
            plot(runs, args.out.with_suffix(".png"), f"{args.config.name}: {n} held-out games per point, "
                                                     f"seeds {args.seeds}{' (smoke)' if args.smoke else ''}")
    return result


if __name__ == "__main__":
    main()
