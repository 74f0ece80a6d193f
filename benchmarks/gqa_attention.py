"""HF ``sdpa`` against ``scpo_lightning.attention``'s grouped-query SDPA on CPU, same calls, interleaved.

Validation-like generation (one prompt per recorded trajectory's step 1 across the ALFWorld
batches, distinct prompts first, constrained to each prompt's actions, max 48 new tokens, the HF
engine with prefix sharing, 32-row micro-batches) and a no-grad log-prob pass over the first
recorded batch in the update's micro-batches (the reference's pass), SmolLM2 fp32 + LoRA 16 on
2 threads. Each round runs today's attention, then the new one, on the same model (the attention
function is looked up per call); each keeps its fastest of ``--repeat``. Records whether the
tokens and every log-prob came out bit-identical. Writes ``benchmarks/results/gqa_attention.json``.

    python -m benchmarks.gqa_attention [--prompts 32] [--repeat 2]
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
from scpo_lightning.attention import NAME
from scpo_lightning.distributed import update_plan
from scpo_lightning.engines.base import SamplingParams
from scpo_lightning.engines.hf import HFEngine
from scpo_lightning.logprobs import response_logprobs


def validation_prompts(count: int) -> list[list[int]]:
    seen: set[tuple[int, ...]] = set()
    out: list[list[int]] = []
    for _, batch in load_batches("alfworld"):
        for i in np.flatnonzero(np.asarray(batch.steps) == 1):
            if tuple(batch.prompt_ids[i]) not in seen and len(out) < count:
                seen.add(tuple(batch.prompt_ids[i]))
                out.append(list(batch.prompt_ids[i]))
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=32, help="validation prompts in the generate call")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; each path keeps its fastest")
    parser.add_argument("--note", default="run alone on the machine", help="what else ran on the machine meanwhile")
    args = parser.parse_args(argv)
    from scpo_lightning.model_setup import with_lora
    from scpo_lightning.policy import load_policy

    torch.set_num_threads(2)
    started = machine()
    base, tok = load_policy("smollm2-gguf")
    assert base.config._attn_implementation == NAME, base.config._attn_implementation
    model = with_lora(base, 16, 0).eval()
    prompts = validation_prompts(args.prompts)
    allowed = [admissible_in(tok.decode(p)) for p in prompts]
    _, batch = load_batches("alfworld")[0]
    micros = [m for ms, _ in update_plan(len(batch), 32, 8) for m in ms]
    engine = HFEngine(model, tok, generation_batch_size=32)
    best: dict[str, float] = {}
    outputs: dict[str, Any] = {}
    for _ in range(args.repeat):
        for impl in ("sdpa", NAME):
            base.config._attn_implementation = impl
            start = time.perf_counter()
            gens = engine.generate(prompts, SamplingParams(1.0, 1.0, 48, seed=0), allowed)
            mid = time.perf_counter()
            with torch.no_grad():
                logps = [response_logprobs(model, [batch.prompt_ids[i] for i in m], [batch.response_ids[i] for i in m],
                                           tok.pad_token_id, 1.0, False)[0] for m in micros]
            end = time.perf_counter()
            best[f"generate_{impl}_s"] = min(best.get(f"generate_{impl}_s", float("inf")), mid - start)
            best[f"logprobs_{impl}_s"] = min(best.get(f"logprobs_{impl}_s", float("inf")), end - mid)
            outputs[impl] = ([g.token_ids for g in gens], [g.policy_logprobs for g in gens], logps)
            print(impl, {k: round(v, 2) for k, v in best.items()}, flush=True)
    a, b = outputs["sdpa"], outputs[NAME]
    result = {"what": "seconds of a validation-like generate call and a no-grad log-prob pass, HF sdpa vs "
                      f"{NAME} (scpo_lightning/attention.py), SmolLM2 fp32 + LoRA 16, interleaved",
              "prompts": len(prompts), "new_tokens": int(sum(map(len, a[0]))), "logprob_rows": len(batch),
              **{k: round(v, 2) for k, v in best.items()},
              "generate_speedup": round(best["generate_sdpa_s"] / best[f"generate_{NAME}_s"], 3),
              "logprobs_speedup": round(best["logprobs_sdpa_s"] / best[f"logprobs_{NAME}_s"], 3),
              "same_tokens": a[0] == b[0], "same_policy_logprobs": a[1] == b[1],
              "same_scoring_logprobs": all(torch.equal(x, y) for x, y in zip(a[2], b[2])),
              "machine": started, "load_average_at_end": load_average(), "note": args.note}
    write_result("gqa_attention", result)
    return result


if __name__ == "__main__":
    main()
