"""Tokens and seconds of the trainer's log-prob passes with and without ``model.logprob_prefix_sharing``.

Counts (no model): every recorded batch of ``benchmarks/data/<env>/`` cut into the update's
micro-batches (``distributed.update_plan`` with the recipes' 32-row mini-batches and 8-row
micro-batches), tokens one pass encodes today (each row's prompt and response) against the
prefix-shared pass (the radix tree of each micro-batch's prompts but their last tokens, plus each
row's last prompt token and response: ``logprobs.shared_prefix_logits``).

Timing (SmolLM2, fp32 + LoRA 16 in train mode, as the recipes): the first ``--micro-batches`` of
the first recorded batch per env, a no-grad pass over them (what the reference and a recomputed π_old cost) and the
update's forward and backward, today's path then the shared one in each round, each keeping its
fastest of ``--repeat``; with the largest log-prob difference and the largest gradient difference
relative to the gradient's own largest entry. Writes ``benchmarks/results/scoring_prefix.json``.

    python -m benchmarks.scoring_prefix [--repeat 2] [--time-batches 1] [--micro-batches 4] [--time-envs alfworld]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from benchmarks.common import load_average, machine, write_result
from benchmarks.record_batches import load_batches
from scpo_lightning.distributed import update_plan
from scpo_lightning.engines.prefix import PrefixTree
from scpo_lightning.logprobs import response_logprobs

ENVS = ("alfworld", "webshop")
MINI_BATCH_ROWS, MICRO_BATCH_ROWS = 32, 8  # configs/quickstart.yaml and configs/learning.yaml


def micro_batches(batch: Any) -> list[list[int]]:
    return [m for micros, _ in update_plan(len(batch), MINI_BATCH_ROWS, MICRO_BATCH_ROWS) for m in micros]


def tokens(batch: Any, micros: list[list[int]]) -> tuple[int, int]:
    """Tokens one pass over ``micros`` encodes: today, and with prefix sharing."""
    today = shared = 0
    for micro in micros:
        prompts = [list(batch.prompt_ids[i]) for i in micro]
        responses = sum(len(batch.response_ids[i]) for i in micro)
        today += sum(map(len, prompts)) + responses
        shared += PrefixTree([p[:-1] for p in prompts]).tokens + len(micro) + responses
    return today, shared


def counts(env: str) -> dict[str, Any]:
    per_batch = {}
    for name, batch in load_batches(env):
        today, shared = tokens(batch, micro_batches(batch))
        per_batch[name] = {"today_tokens": today, "shared_tokens": shared}
    today = sum(b["today_tokens"] for b in per_batch.values())
    shared = sum(b["shared_tokens"] for b in per_batch.values())
    return {"batches": per_batch, "today_tokens": today, "shared_tokens": shared,
            "shared_share": round(shared / today, 4),
            "shared_share_worst_batch": round(max(b["shared_tokens"] / b["today_tokens"] for b in per_batch.values()), 4)}


def one_round(model: torch.nn.Module, rows: list[tuple[list, list]], pad_id: int, share: bool
              ) -> tuple[float, float, list[torch.Tensor], list[torch.Tensor]]:
    """Seconds of the no-grad pass and of the update's forward + backward; the log-probs and gradients."""
    start = time.perf_counter()
    with torch.no_grad():
        passes = [response_logprobs(model, p, r, pad_id, 1.0, False, prefix_sharing=share) for p, r in rows]
    mid = time.perf_counter()
    model.zero_grad(set_to_none=True)
    for p, r in rows:
        logp, entropy, mask = response_logprobs(model, p, r, pad_id, 1.0, True, prefix_sharing=share)
        ((logp + 0.01 * entropy) * mask).sum().backward()
    end = time.perf_counter()
    grads = [q.grad.clone() for q in model.parameters() if q.grad is not None]
    model.zero_grad(set_to_none=True)
    return mid - start, end - mid, [lp[m.bool()] for lp, _, m in passes], grads


def timing(env: str, model: torch.nn.Module, pad_id: int, repeat: int, first: int) -> dict[str, Any]:
    _, batch = load_batches(env)[0]
    micros = micro_batches(batch)[:first]
    rows = [([batch.prompt_ids[i] for i in m], [batch.response_ids[i] for i in m]) for m in micros]
    best = {key: float("inf") for key in ("logprobs_today_s", "logprobs_shared_s", "update_today_s", "update_shared_s")}
    out = {}
    for _ in range(repeat):
        for share, name in ((False, "today"), (True, "shared")):
            passes, update, logps, grads = one_round(model, rows, pad_id, share)
            best[f"logprobs_{name}_s"] = min(best[f"logprobs_{name}_s"], passes)
            best[f"update_{name}_s"] = min(best[f"update_{name}_s"], update)
            out[share] = (logps, grads)
        print(env, {k: round(v, 2) for k, v in best.items()}, flush=True)
    # LoRA's B starts at zero, so A's gradient is zero at the start: compared where it is not.
    rel = [float((a - b).abs().max() / a.abs().max()) for a, b in zip(out[False][1], out[True][1]) if a.abs().max() > 0]
    today, shared = tokens(batch, micros)
    return {"rows": sum(map(len, micros)), "micro_batches": len(micros), "today_tokens": today, "shared_tokens": shared, **{k: round(v, 2) for k, v in best.items()},
            "logprobs_speedup": round(best["logprobs_today_s"] / best["logprobs_shared_s"], 3),
            "update_speedup": round(best["update_today_s"] / best["update_shared_s"], 3),
            "max_abs_logprob_diff": max(float((a - b).abs().max()) for a, b in zip(*(out[s][0] for s in (False, True)))
                                        if a.numel()),
            "max_rel_grad_diff": max(rel), "gradients_compared": len(rel)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=2, help="rounds; each path keeps its fastest")
    parser.add_argument("--time-batches", type=int, default=1, choices=(0, 1), help="1: time the first batch per env; 0: counts only")
    parser.add_argument("--micro-batches", type=int, default=4, help="time the first MICRO_BATCHES micro-batches of the batch")
    parser.add_argument("--time-envs", nargs="+", choices=ENVS, default=list(ENVS),
                        help="envs whose first batch is timed (WebShop's 8-row micro-batches of ~1400 tokens "
                             "need more than 23 GiB for the update without gradient checkpointing)")
    parser.add_argument("--note", default="run alone on the machine", help="what else ran on the machine meanwhile")
    args = parser.parse_args(argv)
    started = machine()
    result: dict[str, Any] = {"what": "tokens per log-prob pass over every recorded batch in the update's micro-batches, "
                                      "today vs model.logprob_prefix_sharing; seconds on the first batch per env",
                              "mini_batch_rows": MINI_BATCH_ROWS, "micro_batch_rows": MICRO_BATCH_ROWS,
                              "counts": {env: counts(env) for env in ENVS}}
    if args.time_batches:
        from scpo_lightning.model_setup import with_lora
        from scpo_lightning.policy import load_policy

        torch.set_num_threads(2)
        base, tok = load_policy("smollm2-gguf")
        model = with_lora(base, 16, 0).train()
        result["timing"] = {env: timing(env, model, tok.pad_token_id, args.repeat, args.micro_batches) for env in args.time_envs}
    result.update(machine=started, load_average_at_end=load_average(), note=args.note)
    write_result("scoring_prefix", result)
    return result


if __name__ == "__main__":
    main()
