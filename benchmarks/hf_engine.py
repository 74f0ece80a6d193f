"""Time the offline SmolLM2 policy: GGUF conversion, load from cache, HF-engine generation.

Generation: 16 ALFWorld-like chat prompts of ~600 tokens in one micro-batch, free mode (64 new
tokens, temperature 1.0) and constrained mode (~30 admissible actions per prompt), with the fp32
weights as they are and under bf16 autocast (``HFEngine(autocast_dtype="bfloat16")``).

    python -m benchmarks.hf_engine [--threads 2] [--out benchmarks/results/hf_engine_threads2.json]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.common import RESULTS, load_average, machine, write_result
from scpo_lightning.engines.base import SamplingParams
from scpo_lightning.engines.hf import HFEngine
from scpo_lightning.policy import SMOLLM2_GGUF, load_policy, resolve_model_dir

PLACES = [f"{p} {k}" for p in ("cabinet", "countertop", "drawer", "shelf", "fridge") for k in range(1, 7)]


def make_prompts(tokenizer, n: int, target_tokens: int) -> tuple[list[list[int]], list[list[str]]]:
    """n chat prompts of about ``target_tokens`` tokens each, and ~30 admissible actions per prompt."""
    prompts, allowed = [], []
    for i in range(n):
        actions = [f"go to {p}" for p in PLACES[i % 3 :][:27]] + ["look", "inventory", f"open drawer {i % 6 + 1}"]
        history = "".join(
            f"[Observation {k}: 'You arrive at {PLACES[(i + k) % 30]}. On it, you see a mug {k}, "
            f"a pen {i}, and a spatula 2.', Action {k}: 'go to {PLACES[(i * k) % 30]}']\n"
            for k in range(1, 200)
        )
        admissible = "\n ".join(f"'{a}'" for a in actions)
        body = f"You are an expert agent in ALFWorld. Your task is to: put a clean mug in {PLACES[i]}.\n"
        content = body + history + f"\nYour admissible actions of the current situation are: [{admissible}]."
        ids = tokenizer.apply_chat_template([{"role": "user", "content": content}], add_generation_prompt=True)
        if len(ids) > target_tokens:  # cut the history part to reach the target length
            ids = ids[: target_tokens - 30 - i] + ids[-30:]
        prompts.append(ids)
        allowed.append(actions)
    return prompts, allowed


def time_generation(engine: HFEngine, prompts, params, allowed=None) -> dict:
    start = time.perf_counter()
    gens = engine.generate(prompts, params, allowed)
    seconds = time.perf_counter() - start
    tokens = sum(len(g.token_ids) for g in gens)
    return {
        "seconds": round(seconds, 2),
        "generated_tokens": tokens,
        "tokens_per_s": round(tokens / seconds, 1),
        "max_response_tokens": max(len(g.token_ids) for g in gens),
        "finished": sum(g.finished for g in gens),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--prompts", type=int, default=16, help="prompts in the batch")
    parser.add_argument("--prompt-tokens", type=int, default=600, help="approximate prompt length in tokens")
    parser.add_argument("--out", type=Path, help="JSON result file (default: results/hf_engine_threads<N>.json)")
    args = parser.parse_args()
    args.out = args.out or RESULTS / f"hf_engine_threads{args.threads}.json"
    torch.set_num_threads(args.threads)
    started = machine()

    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        resolve_model_dir(SMOLLM2_GGUF, cache)
        convert_s = time.perf_counter() - start
        start = time.perf_counter()
        model, tokenizer = load_policy(SMOLLM2_GGUF, cache_dir=cache)
        load_s = time.perf_counter() - start

    prompts, allowed = make_prompts(tokenizer, args.prompts, args.prompt_tokens)
    params = SamplingParams(temperature=1.0, max_new_tokens=64, seed=0)
    timings = {}
    for autocast in (None, "bfloat16"):
        engine = HFEngine(model, tokenizer, generation_batch_size=args.prompts, autocast_dtype=autocast)
        timings[f"autocast_{autocast}"] = {
            "free_64_new_tokens": time_generation(engine, prompts, params),
            "constrained": time_generation(engine, prompts, params, allowed),
        }
    result = {
        "model": SMOLLM2_GGUF,
        "threads": args.threads,
        "convert_s": round(convert_s, 1),
        "load_from_cache_s": round(load_s, 2),
        "batch": args.prompts,
        "prompt_tokens_mean": round(sum(map(len, prompts)) / len(prompts)),
        "admissible_actions_per_prompt": len(allowed[0]),
        **timings,
        "machine": started,
        "load_average_at_end": load_average(),
    }
    write_result(args.out.stem, result, args.out)


if __name__ == "__main__":
    main()
