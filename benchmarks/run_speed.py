"""Wall time of a whole (method, seed) run, today's code path against the faster ones, same seed.

Runs ``train.py fit --config configs/learning.yaml`` (SCPO, as it stands) in-process once per
variant, in one process, one after the other (``--repeat`` rounds alternate them), and records
the wall time of the fit, of each validation and each iteration, every validation episode's
outcome, and the rollout-vs-train mismatch of every iteration. Variants (CLI overrides of the
recipe):

- ``today``: the engine without prefix sharing (``model.engine_options: {prefix_sharing: false}``);
- ``shared``: prefix-shared prefill, HF ``generate``'s decode: float noise only, so the same seed
  should give the same validation outcomes as ``today`` (``same_outcomes_as_today``);
- ``jump``: plus jump-forward constrained decoding (the defaults now, ``engines.jump``): the same
  distribution, but random numbers drawn at branch points only, so outcomes differ by sampling;
- ``jump_scoring``: plus the trainer's log-prob passes prefix-shared (``model.logprob_prefix_sharing``);
- ``val_copy``: plus validation sampled from a bf16 copy of the policy (the hf engine's
  ``val_copy_dtype``, ``engines.sampler_copy``): training is unchanged, the validations sample
  from the rounded policy, so their outcomes differ by that rounding and by sampling;
- ``shared_val64``: plus the whole 64-game validation panel in one collection and one generate
  micro-batch (``data.val_batch_episodes: 64``, ``model.generation_batch_size: 64``): other
  micro-batches draw other random numbers, so outcomes differ by sampling, not by arithmetic;
- ``shared_val64_bf16``: plus validation sampled under bf16 autocast (``model.val_generation_autocast``;
  training stays fp32, but ``bf16_grid: auto`` snaps the weights onto the bf16 grid at load);
- ``bf16_recompute`` / ``bf16_tis``: plus a bf16 sampler (``model.generation_autocast`` and
  ``val_generation_autocast: bfloat16``; the fp32 weights are snapped onto the bf16 grid,
  ``model.bf16_grid: auto``) with the old log-probs recomputed in fp32, or the sampler's own with
  the truncated importance weight (``model.rollout_correction: {mode: tis, cap: 2.0}``).

    python -m benchmarks.run_speed --variants today jump_scoring --out run_speed_full   # full recipe (~45 min, 2 cores)
    python -m benchmarks.run_speed --variants today shared_val64 --validate-only --val-episodes 32
    python -m benchmarks.run_speed --variants bf16_recompute bf16_tis --iterations 2 --no-validation

Writes ``benchmarks/results/run_speed.json`` (``--out`` for another name).
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch

from benchmarks.common import RESULTS, load_average, machine, write_result
from scpo_lightning.logprobs import mismatch_sums, response_logprobs

CONFIG = Path("configs/learning.yaml")
_BF16 = ["--model.generation_autocast=bfloat16", "--model.val_generation_autocast=bfloat16"]
VARIANTS: dict[str, list[str]] = {
    "today": ["--model.engine_options={prefix_sharing: false, jump_forward: false}"],
    "shared": ["--model.engine_options={jump_forward: false}"],
    "jump": [],
    "jump_scoring": ["--model.logprob_prefix_sharing=true"],
    "val_copy": ["--model.logprob_prefix_sharing=true", "--model.engine_options={val_copy_dtype: bfloat16}"],
    "shared_val64": ["--data.val_batch_episodes=64", "--model.generation_batch_size=64"],
    "shared_val64_bf16": ["--data.val_batch_episodes=64", "--model.generation_batch_size=64",
                          "--model.val_generation_autocast=bfloat16"],
    "bf16_recompute": [*_BF16, "--model.old_logprobs=recompute"],
    "bf16_tis": [*_BF16, "--model.old_logprobs=recompute", "--model.rollout_correction={mode: tis, cap: 2.0}"],
}
SAMPLER_COPIES = ("val_copy",)  # validation samples from a copy: measure its distance from the policy
MISMATCH = ("rollout/logprob_diff_mean", "rollout/logprob_diff_max", "rollout/logprob_k3", "train/kl",
            "train/kept_frac", "train/clip_frac", "time/logprobs_s", "time/update_s")


class Clock(L.Callback):
    """Wall time of each validation and iteration; validation outcomes; per-iteration mismatch."""

    def __init__(self, val_mismatch: bool = False) -> None:
        self.val_mismatch = val_mismatch
        self._mismatch: dict[str, float] = {}
        self._excluded = 0.0
        self.start = time.perf_counter()
        self.validations: list[dict[str, Any]] = []
        self.iterations: list[dict[str, Any]] = []
        self._episodes: list[list[Any]] = []
        self._mark = self.start

    # Lightning fetches a loop's first batch (a whole collection here) before its on_*_start hooks:
    # a validation is timed from the end of what ran before it (the fit's start, the sanity check's
    # start or the iteration's update), an iteration from its epoch's start to its update's end.
    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._mark = time.perf_counter()

    def on_validation_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        self._episodes += [[t["task_id"], int(bool(t["won"]))] for t in batch.trajectories]
        if self.val_mismatch and batch.rollout_logprobs is not None:
            self._check_sampler(pl_module, batch)

    @torch.no_grad()
    def _check_sampler(self, pl_module: Any, batch: Any) -> None:
        """The fp32 policy's log-probs of the tokens validation sampled, against the sampler's own
        (a bf16 copy's): its distance from the policy as trained. Not counted in the validation's time."""
        started = time.perf_counter()
        pad, temperature = pl_module.engine.pad_token_id, pl_module.hparams.val_temperature or 1.0
        ours, was_training = [], pl_module.policy.training
        for lo in range(0, len(batch), 8):
            rows = range(lo, min(lo + 8, len(batch)))
            logp, _, mask = response_logprobs(pl_module.policy.eval(), [batch.prompt_ids[i] for i in rows],
                                              [batch.response_ids[i] for i in rows], pad, temperature, False)
            ours += [lp[m.bool()] for lp, m in zip(logp, mask)]
        pl_module.policy.train(was_training)
        sampled = [torch.tensor(r, dtype=torch.float32) for r in batch.rollout_logprobs]
        for key, value in zip(("abs_sum", "k3_sum", "gap", "tokens", "max_abs"), mismatch_sums(sampled, ours)):
            self._mismatch[key] = max(self._mismatch.get(key, 0.0), value) if key == "max_abs" else \
                self._mismatch.get(key, 0.0) + value
        self._excluded += time.perf_counter() - started

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        seconds = time.perf_counter() - self._mark - self._excluded
        m, tokens = self._mismatch, self._mismatch.get("tokens", 0.0)
        drift = {"sampler_vs_policy": {"tokens": int(tokens), "mean_abs": m["abs_sum"] / tokens, "k3": m["k3_sum"] / tokens,
                                       "max_abs": m["max_abs"]}, "check_s": round(self._excluded, 1)} if tokens else {}
        self.validations.append({"episodes": len(self._episodes), "successes": sum(w for _, w in self._episodes),
                                 "seconds": round(seconds, 1), **drift, "outcomes": self._episodes})
        self._episodes, self._mark, self._mismatch, self._excluded = [], time.perf_counter(), {}, 0.0

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._mark = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        m = outputs["metrics"]
        self.iterations.append({"iteration": trainer.current_epoch + 1, "rows": len(batch),
                                "generate_s": round(batch.timings["generate_s"], 2),
                                **{k: round(float(m[k]), 6) for k in MISMATCH if k in m},
                                "seconds": round(time.perf_counter() - self._mark, 1)})
        self._mark = time.perf_counter()


def run(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    from scpo_lightning.cli import SCPOCLI
    from scpo_lightning.datamodule import RolloutDataModule
    from scpo_lightning.module import SCPOModule

    overrides = ["--config", str(args.config), f"--seed_everything={args.seed}", "--trainer.logger=false",
                 *([f"--trainer.max_epochs={args.iterations}"] if args.iterations else []),
                 *([f"--data.val_episodes={args.val_episodes}"] if args.val_episodes else []),
                 *(["--trainer.num_sanity_val_steps=0", "--trainer.limit_val_batches=0"] if args.no_validation else []),
                 *VARIANTS[variant]]
    cli = SCPOCLI(SCPOModule, RolloutDataModule, run=False, args=overrides, save_config_callback=None)
    clock = Clock(val_mismatch=variant in SAMPLER_COPIES)
    cli.trainer.callbacks.insert(0, clock)
    start = time.perf_counter()
    if args.validate_only:
        cli.trainer.validate(cli.model, datamodule=cli.datamodule)
    else:
        cli.trainer.fit(cli.model, datamodule=cli.datamodule)
    # the sampler check (val_copy) is not the run's: its seconds are left out of every time reported
    wall = time.perf_counter() - start - sum(v.get("check_s", 0.0) for v in clock.validations)
    counts = getattr(cli.model.engine, "prefill_counts", None)
    del cli
    gc.collect()
    episodes = sum(v["episodes"] for v in clock.validations)
    # validate-only: Lightning collects the first validation batch before on_validation_start, so a
    # one-batch panel would time ~0 s there: take the whole call (model load included, ~10 s)
    val_s = wall if args.validate_only else sum(v["seconds"] for v in clock.validations)
    return {"variant": variant, "overrides": VARIANTS[variant], "wall_s": round(wall, 1),
            "validation_s": round(val_s, 1), "validation_episodes_per_s": round(episodes / val_s, 4) if val_s else None,
            "prefill_counts": counts, "validations": clock.validations, "iterations": clock.iterations}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=["today", "shared"], help="what to run")
    parser.add_argument("--config", type=Path, default=CONFIG, help="the recipe")
    parser.add_argument("--seed", type=int, default=0, help="seed_everything of every run")
    parser.add_argument("--iterations", type=int, default=None, help="trainer.max_epochs (default: the recipe's)")
    parser.add_argument("--val-episodes", type=int, default=None, help="data.val_episodes (default: the recipe's)")
    parser.add_argument("--no-validation", action="store_true", help="train only")
    parser.add_argument("--validate-only", action="store_true", help="one validation run, no training")
    parser.add_argument("--repeat", type=int, default=1, help="rounds over the variants")
    parser.add_argument("--out", default="run_speed", help="result name under benchmarks/results/")
    args = parser.parse_args(argv)
    started = machine()
    runs = [run(v, args) for _ in range(args.repeat) for v in args.variants]
    today = next((r for r in runs if r["variant"] == "today"), None)
    for r in runs:
        if today is not None:
            r["wall_vs_today"] = round(r["wall_s"] / today["wall_s"], 3)
            r["same_outcomes_as_today"] = [v["outcomes"] for v in r["validations"]] == \
                                          [v["outcomes"] for v in today["validations"]]
    result = {"what": f"wall time of {args.config} runs per code path, same seed", "args": {
                  k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
              "runs": runs, "machine": started, "load_average_at_end": load_average(),
              "note": "shared machine unless the load averages say otherwise: compare variants within this file"}
    write_result(args.out, result, RESULTS / f"{args.out}.json")
    return result


if __name__ == "__main__":
    main()
