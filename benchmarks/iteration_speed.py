"""Rows per second of one training iteration under several settings, on the same recorded batch.

``python -m benchmarks.iteration_breakdown --compare`` (or ``python -m benchmarks.iteration_speed``)
replays one recorded quickstart batch (``benchmarks/data/alfworld/run_00.pkl.xz``: its prompts,
its responses, its returns) through the real app once per setting, in one process on one quiet
machine, and times the three phases that touch the model:

- generation: the engine samples a response for each of the batch's prompts, constrained to the
  admissible actions listed in that prompt (what the rollout loop asks of it);
- old and reference log-probs: ``time/logprobs_s`` of the module's ``training_step``;
- the PPO update: ``time/update_s`` of the same step (one epoch of 32-row mini-batches).

Env steps (< 1 % of an iteration, ``iteration_breakdown.json``) and SCPO scoring (overlapped with
the log-probs) are left out: no setting changes them. The settings are the quickstart as issue 14
found it (bf16 autocast everywhere, old log-probs recomputed: on today's code, which already keeps
logits at response positions only, so this baseline is faster than it was), the fp32 quickstart of
the numerics fix, the quickstart now (the same with LoRA 16; ``configs/learning.yaml`` trains so
too), and bf16 with LoRA (the learning benchmark's first recipe). With ``--repeat N`` the settings
run round-robin N times and each keeps its fastest run: another process on the machine slows a
run, never speeds it up. Writes ``benchmarks/results/iteration_speed.json``.
"""

from __future__ import annotations

import argparse
import copy
import re
import time
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from benchmarks.common import load_average, machine, write_result
from benchmarks.record_batches import load_batches

#: name -> (trainer precision, model settings)
SETTINGS: dict[str, tuple[str, dict[str, Any]]] = {
    "filed: bf16 autocast, full fine-tuning, old log-probs recomputed": (
        "bf16-mixed", {"generation_autocast": "bfloat16", "old_logprobs": "recompute", "lora_rank": 0}),
    "fp32, full fine-tuning, rollout log-probs as old (the numerics fix's quickstart)": (
        "32-true", {"generation_autocast": None, "old_logprobs": "rollout", "lora_rank": 0}),
    "configs/quickstart.yaml: fp32, LoRA 16, rollout log-probs as old": (
        "32-true", {"generation_autocast": None, "old_logprobs": "rollout", "lora_rank": 16}),
    "bf16 autocast, LoRA 16, old recomputed (the first configs/learning.yaml)": (
        "bf16-mixed", {"generation_autocast": "bfloat16", "old_logprobs": "recompute", "lora_rank": 16}),
}
BASELINE = next(iter(SETTINGS))
_ACTIONS = re.compile(r"Your admissible actions now are: \[(.*)\]\.\n\n", re.DOTALL)


def admissible_in(text: str) -> list[str]:
    """The admissible actions a prompt lists (``prompts.format_admissible``: quoted, newline + space)."""
    found = _ACTIONS.search(text)
    if found is None:
        raise ValueError("a recorded prompt lists no admissible actions")
    return [a.strip()[1:-1] for a in found.group(1).split("\n ")]


def take_rows(batch: Any, n: int) -> Any:
    """The first ``n`` rows of ``batch`` (per-row fields cut; returns and scores kept as recorded)."""
    out = copy.copy(batch)
    for name, value in vars(batch).items():
        if isinstance(value, (list, np.ndarray)) and len(value) == len(batch) and name != "trajectories":
            setattr(out, name, value[:n])
    return out


class _Replay(L.LightningDataModule):
    """Yields one prepared batch for training; no validation."""

    def __init__(self, batch: Any) -> None:
        super().__init__()
        self.batch, self.env = batch, "alfworld"

    def train_dataloader(self) -> DataLoader:
        return DataLoader([self.batch], batch_size=None, collate_fn=lambda b: b)


class _Timer(L.Callback):
    """Times generation of the batch's prompts before the step; reads the step's own phase times."""

    def __init__(self, allowed: list[list[str]], temperature: float) -> None:
        self.allowed, self.temperature = allowed, temperature
        self.result: dict[str, float] = {}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        from scpo_lightning.engines.base import SamplingParams
        from scpo_lightning.logprobs import response_logprobs

        batch = trainer.datamodule.batch
        params = SamplingParams(self.temperature, 1.0, 48, seed=0)
        start = time.perf_counter()
        with pl_module.generation_context():
            pl_module.engine.generate(batch.prompt_ids, params, allowed=self.allowed)
        self.result["generate_s"] = time.perf_counter() - start
        if pl_module.hparams.old_logprobs == "rollout":  # the log-probs the sampler would have reported (untimed)
            with torch.no_grad():
                batch.rollout_logprobs = [
                    row[m.bool()].tolist() for k in range(0, len(batch), 8)
                    for row, m in zip(*response_logprobs(pl_module.policy, batch.prompt_ids[k:k + 8],
                                                         batch.response_ids[k:k + 8], pl_module.tokenizer.pad_token_id,
                                                         1.0, False)[::2])]

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        m = outputs["metrics"]
        self.result.update(logprobs_s=m["time/logprobs_s"], update_s=m["time/update_s"])


def measure(name: str, batch: Any, allowed: list[list[str]]) -> dict[str, Any]:
    from scpo_lightning.module import SCPOModule

    precision, model_settings = SETTINGS[name]
    replay = copy.copy(batch)
    module = SCPOModule(policy="smollm2-gguf", torch_dtype="float32", lr=1e-6, kl_coef=0.01, mini_batch_rows=32,
                        micro_batch_rows=8, generation_batch_size=32, **model_settings)
    timer = _Timer(allowed, module.hparams.temperature)
    trainer = L.Trainer(accelerator="cpu", devices=1, precision=precision, max_epochs=1, logger=False,
                        enable_checkpointing=False, num_sanity_val_steps=0, limit_val_batches=0,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[timer])
    trainer.fit(module, datamodule=_Replay(replay))
    r = timer.result
    total = r["generate_s"] + r["logprobs_s"] + r["update_s"]
    tokens = int(batch.lengths.sum())
    return {"setting": name, "precision": precision, **model_settings,
            "rows": len(batch), "tokens": tokens, **{k: round(v, 2) for k, v in r.items()},
            "model_s": round(total, 2), "rows_per_s": round(len(batch) / total, 4)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", default="run_00.pkl.xz", help="recorded batch under benchmarks/data/alfworld")
    parser.add_argument("--rows", type=int, default=None, help="time only the batch's first ROWS rows (default: all)")
    parser.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS), help="settings to run")
    parser.add_argument("--repeat", type=int, default=1, help="round-robin passes over the settings; each keeps its fastest")
    args = parser.parse_args(argv)
    from scpo_lightning.policy import load_tokenizer

    (_, batch), = load_batches("alfworld", pattern=args.batch)
    if args.rows is not None:
        batch = take_rows(batch, args.rows)
    tokenizer = load_tokenizer("smollm2-gguf")
    allowed = [admissible_in(tokenizer.decode(ids)) for ids in batch.prompt_ids]
    started = machine()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.settings}
    for _ in range(args.repeat):
        for name in args.settings:
            runs[name].append(measure(name, batch, allowed))
    rows = [{**min(done, key=lambda r: r["model_s"]), "runs_model_s": [r["model_s"] for r in done]}
            for done in runs.values()]
    base = next((r for r in rows if r["setting"] == BASELINE), rows[0])
    for r in rows:
        r["speedup_vs_filed"] = round(r["rows_per_s"] / base["rows_per_s"], 3)
    result = {"what": "rows/s of generation + old/ref log-probs + PPO update on one recorded batch, per setting",
              "batch": args.batch, "repeat": args.repeat, "settings": rows, "machine": started, "load_average_at_end": load_average()}
    write_result("iteration_speed", result)
    return result


if __name__ == "__main__":
    main()
