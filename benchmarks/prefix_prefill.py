"""Prompt tokens prefilled, and seconds, with and without prefix sharing, on the recorded batches.

Counts (no model): every generate call the rollout loop made for every recorded batch of
``benchmarks/data/<env>/`` (one call per step: the prompts of that step's active rows, cut into
micro-batches of ``--generation-batch-size`` in the engine's length order), tokens encoded by
today's prefill (each row's whole prompt; with padding: rows x width) against the prefix-shared
one (the radix tree of each micro-batch's prompts but their last tokens, plus one last token per
row; with padding: the buckets' widths). ``engines.prefix`` explains the mechanism.

Timing (SmolLM2, fp32, 2 threads): the first ``--time-batches`` batches per env, each step's call
twice per round (today's path, then the shared one; ``--repeat`` rounds, each path keeps its
fastest), (a) the prefill alone: one forward of the left-padded prompts building the cache, against
``shared_prefill``; (b) the whole ``HFEngine.generate`` call, constrained to the actions each
prompt lists, same seed, recording whether the same tokens came out and the largest log-prob
difference. Writes ``benchmarks/results/prefix_prefill.json``.

    python -m benchmarks.prefix_prefill [--time-batches 1] [--calls 3] [--repeat 1]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch

from benchmarks.common import load_average, machine, write_result
from benchmarks.iteration_speed import admissible_in
from benchmarks.record_batches import load_batches
from scpo_lightning.engines.prefix import PrefixTree, buckets

ENVS = ("alfworld", "webshop")


def step_calls(batch: Any) -> list[list[list[int]]]:
    """The prompts of each generate call the rollout loop made for ``batch``: one per step."""
    steps = np.asarray(batch.steps)
    return [[list(batch.prompt_ids[i]) for i in np.flatnonzero(steps == t)] for t in sorted(set(steps.tolist()))]


def chunks(prompts: list[list[int]], size: int) -> list[list[list[int]]]:
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # HFEngine.generate's order
    return [[prompts[i] for i in order[k:k + size]] for k in range(0, len(order), size)]


def call_counts(prompts: list[list[int]], size: int) -> dict[str, int]:
    """Today's and the shared prefill's tokens for one generate call (no model)."""
    out = dict.fromkeys(("prompt_tokens", "today_padded", "shared_tokens", "shared_padded"), 0)
    for chunk in chunks(prompts, size):
        heads = [p[:-1] for p in chunk]
        tree = PrefixTree(heads)
        out["prompt_tokens"] += sum(map(len, chunk))
        out["today_padded"] += len(chunk) * max(map(len, chunk))
        out["shared_tokens"] += tree.tokens + len(chunk)
        padded = len(chunk)
        for depth in range(1, 1 + max((n.depth for n in tree.nodes), default=0)):
            level = [len(n.tokens) for n in tree.nodes if n.depth == depth]
            padded += sum(len(g) * max(level[i] for i in g) for g in buckets(level, size))
        out["shared_padded"] += padded
    return out


def counts(env: str, size: int) -> dict[str, Any]:
    per_batch = {}
    for name, batch in load_batches(env):
        calls = [call_counts(p, size) for p in step_calls(batch)]
        per_batch[name] = {k: sum(c[k] for c in calls) for k in calls[0]}
    total = {k: sum(b[k] for b in per_batch.values()) for k in next(iter(per_batch.values()))}
    ratios = [b["shared_tokens"] / b["prompt_tokens"] for b in per_batch.values()]
    return {"batches": per_batch, "total": total, "shared_share": round(total["shared_tokens"] / total["prompt_tokens"], 4),
            "shared_share_worst_batch": round(max(ratios), 4),
            "shared_padded_share": round(total["shared_padded"] / total["today_padded"], 4)}


def today_prefill(model: torch.nn.Module, prompts: list[list[int]], pad_id: int) -> None:
    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p):] = torch.as_tensor(p)
        mask[row, width - len(p):] = 1
    model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)


def timing(env: str, batches: int, repeat: int, model: Any, tok: Any, size: int, calls_per_batch: int | None
           ) -> dict[str, Any]:
    from scpo_lightning.engines.base import SamplingParams
    from scpo_lightning.engines.hf import HFEngine
    from scpo_lightning.engines.prefix import shared_prefill

    engines = {share: HFEngine(model, tok, generation_batch_size=size, prefix_sharing=share) for share in (False, True)}
    best = {k: 0.0 for k in ("prefill_today_s", "prefill_shared_s", "generate_today_s", "generate_shared_s")}
    same = calls = 0
    largest = 0.0
    for name, batch in load_batches(env)[:batches]:
        for t, prompts in enumerate(step_calls(batch)[:calls_per_batch]):
            allowed = [admissible_in(tok.decode(p)) for p in prompts]
            params = SamplingParams(1.0, 1.0, 48, seed=t)
            runs: dict[str, list[float]] = {k: [] for k in best}
            for _ in range(repeat):
                with torch.no_grad():
                    for chunk in chunks(prompts, size):
                        start = time.perf_counter()
                        today_prefill(model, chunk, engines[False].pad_token_id)
                        runs["prefill_today_s"].append(time.perf_counter() - start)
                        start = time.perf_counter()
                        shared_prefill(model, chunk, engines[True].pad_token_id, torch.device("cpu"), size)
                        runs["prefill_shared_s"].append(time.perf_counter() - start)
                gens = {}
                for share, key in ((False, "generate_today_s"), (True, "generate_shared_s")):
                    start = time.perf_counter()
                    gens[share] = engines[share].generate(prompts, params, allowed)
                    runs[key].append(time.perf_counter() - start)
            n_chunks = len(chunks(prompts, size))
            for k, v in runs.items():  # fastest round; prefill rounds hold one entry per chunk
                per_round = [sum(v[r * n_chunks:(r + 1) * n_chunks]) for r in range(repeat)] if k.startswith("prefill") else v
                best[k] += min(per_round)
            calls += 1
            same += [g.token_ids for g in gens[False]] == [g.token_ids for g in gens[True]]
            largest = max([largest] + [abs(a - b) for g, h in zip(gens[False], gens[True]) if g.token_ids == h.token_ids
                                       for a, b in zip(g.policy_logprobs, h.policy_logprobs)])
        print(env, name, {k: round(v, 1) for k, v in best.items()}, flush=True)
    return {"batches_timed": batches, "calls_per_batch": calls_per_batch or "all", "calls": calls, "calls_with_the_same_tokens": same,
            "max_abs_logprob_diff": largest, **{k: round(v, 2) for k, v in best.items()},
            "prefill_speedup": round(best["prefill_today_s"] / best["prefill_shared_s"], 3),
            "generate_speedup": round(best["generate_today_s"] / best["generate_shared_s"], 3),
            "engine_counts_shared": engines[True].prefill_counts}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--time-batches", type=int, default=1, help="recorded batches per env to time (0: counts only)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds per call; each path keeps its fastest")
    parser.add_argument("--calls", type=int, default=None, help="time only each batch's first CALLS steps (default: all)")
    parser.add_argument("--generation-batch-size", type=int, default=32, help="prompts per micro-batch (the recipes: 32)")
    args = parser.parse_args(argv)
    started = machine()
    result: dict[str, Any] = {"what": "prompt tokens prefilled per recorded batch, today's prefill vs prefix-shared; "
                                      "seconds of prefill and of generate on the first batches, interleaved",
                              "generation_batch_size": args.generation_batch_size,
                              "counts": {env: counts(env, args.generation_batch_size) for env in ENVS}}
    if args.time_batches:
        from scpo_lightning.policy import load_policy

        model, tok = load_policy("smollm2-gguf")
        model.eval()
        result["timing"] = {env: timing(env, args.time_batches, args.repeat, model, tok, args.generation_batch_size,
                                        args.calls) for env in ENVS}
    result.update(machine=started, load_average_at_end=load_average(),
                  note="shared machine (other sessions running): read the timings as ratios within this run")
    write_result("prefix_prefill", result)
    return result


if __name__ == "__main__":
    main()
