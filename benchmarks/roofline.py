"""This machine's matmul limit at SmolLM2's shapes, and each phase of an iteration against it.

1. Peak: fp32 and bf16 ``F.linear`` throughput at the model's projection shapes (attention q/o and
   k/v, MLP gate/up and down, the LM head) for the token counts an iteration uses (8 and 32 rows
   decoding, ~2k tokens prefilling or scoring), and at square 2048³. The peak of a dtype is its
   fastest shape.
2. Phases, on the first ``--rows`` rows of a recorded quickstart batch (SmolLM2 fp32 with LoRA 16 as
   in ``configs/quickstart.yaml``; one generate call per recorded step, as the rollout loop makes):
   prefill (today's: every prompt token; shared: ``engines.prefix``), decode (the rest of the
   generate call, constrained to the listed actions), reference log-probs (micro-batches of 8, no
   grad), the update's forward + backward (micro-batches of 8), and validation: one generate call
   over 32 prompts of distinct recorded episodes (step 1, temperature 1), today's and shared.

FLOPs are counted from the model's shapes, for the tokens each phase really computes (padding
excluded): 2 x (non-embedding weights + LoRA adapters) per token, the attention's 4 x hidden x
context per token and layer, the LM head where logits are taken; the update's backward is 1x the
forward for input gradients (the base weights are frozen) plus the adapters' weight gradients.
Writes ``benchmarks/results/roofline.json``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.common import load_average, machine, write_result
from benchmarks.iteration_speed import admissible_in
from benchmarks.prefix_prefill import today_prefill
from benchmarks.record_batches import load_batches

TOKENS = {"decode, 8 rows": 8, "decode, 32 rows": 32, "prefill / scoring, 2048 tokens": 2048}


def shapes(cfg: Any) -> dict[str, tuple[int, int]]:
    kv = cfg.num_key_value_heads * (cfg.hidden_size // cfg.num_attention_heads)
    h, i = cfg.hidden_size, cfg.intermediate_size
    return {"attn q/o": (h, h), "attn k/v": (h, kv), "mlp gate/up": (h, i), "mlp down": (i, h), "lm head": (h, cfg.vocab_size)}


def gflops(fn, flops: float, repeat: int = 5) -> float:
    fn()
    best = min(_timed(fn) for _ in range(repeat))
    return flops / best / 1e9


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def matmul_peaks(cfg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dtype in (torch.float32, torch.bfloat16):
        rows = {}
        a = torch.randn(2048, 2048, dtype=dtype)
        rows["square 2048^3"] = gflops(lambda: a @ a, 2 * 2048**3)
        for name, (k, n) in shapes(cfg).items():
            w = torch.randn(n, k, dtype=dtype)
            for label, m in TOKENS.items():
                x = torch.randn(m, k, dtype=dtype)
                rows[f"{name}, {label}"] = gflops(lambda: F.linear(x, w), 2 * m * k * n, repeat=10 if m < 100 else 5)
        name = str(dtype).removeprefix("torch.")
        out[name] = {"gflops": {k: round(v, 1) for k, v in rows.items()}, "peak_gflops": round(max(rows.values()), 1)}
    return out


class Flops:
    """FLOPs of SmolLM2-shaped work (module docstring)."""

    def __init__(self, cfg: Any, lora_rank: int):
        h = cfg.hidden_size
        self.layers, self.hidden, self.vocab = cfg.num_hidden_layers, h, cfg.vocab_size
        qo, kv, up, down = list(shapes(cfg).values())[:4]
        per_layer = [qo, kv, kv, qo, up, up, down]  # q, k, v, o, gate, up, down
        self.weights = self.layers * sum(k * n for k, n in per_layer)
        self.lora = self.layers * sum(lora_rank * (k + n) for k, n in per_layer)

    def forward(self, contexts: list[int], logits: int = 0) -> float:
        """Tokens with these context lengths (each token attends to ``context`` keys), and
        ``logits`` positions through the LM head."""
        n = len(contexts)
        return (2 * (self.weights + self.lora) * n + 4 * self.layers * self.hidden * float(sum(contexts))
                + 2 * self.hidden * self.vocab * logits)

    def prompt(self, prompts: list[list[int]]) -> float:
        return self.forward([k + 1 for p in prompts for k in range(len(p))], logits=len(prompts))

    def shared(self, prompts: list[list[int]]) -> float:
        from scpo_lightning.engines.prefix import PrefixTree

        tree = PrefixTree([p[:-1] for p in prompts])
        ctx = [n.start + k + 1 for n in tree.nodes for k in range(len(n.tokens))] + [len(p) for p in prompts]
        return self.forward(ctx, logits=len(prompts) + len(tree.nodes))

    def decode(self, prompts: list[list[int]], steps: int) -> float:
        # every row of the micro-batch runs each decode step until the longest response ends
        return self.forward([len(p) + s for p in prompts for s in range(1, steps + 1)], logits=len(prompts) * steps)


def _chunks(batch: Any, rows: int) -> list[list[int]]:
    """Row indices of the batch's first generate calls (one per step), ``rows`` rows in all."""
    steps, out, used = np.asarray(batch.steps), [], 0
    for t in sorted(set(steps.tolist())):
        take = [int(i) for i in np.flatnonzero(steps == t)][: rows - used]
        if take:
            out.append(take)
            used += len(take)
    return out


def generation(prompts: list[list[int]], model: Any, tok: Any, fl: Flops, label: str, out: dict) -> None:
    """Prefill alone (today's, shared) and the whole generate call (today's, shared) of one call;
    decode = today's generate minus today's prefill."""
    from scpo_lightning.engines.base import SamplingParams
    from scpo_lightning.engines.hf import HFEngine
    from scpo_lightning.engines.prefix import shared_prefill

    allowed = [admissible_in(tok.decode(p)) for p in prompts]
    with torch.no_grad():
        today = _timed(lambda: today_prefill(model, prompts, tok.pad_token_id))
        shared = _timed(lambda: shared_prefill(model, prompts, tok.pad_token_id, torch.device("cpu"), 32))
    runs = {}
    for share in (False, True):
        engine = HFEngine(model, tok, generation_batch_size=32, prefix_sharing=share)
        start = time.perf_counter()
        gens = engine.generate(prompts, SamplingParams(1.0, 1.0, 48, seed=0), allowed)
        runs[share] = time.perf_counter() - start
    decode = fl.decode(prompts, max(len(g.token_ids) for g in gens) - 1)
    for name, seconds, flops in ((f"{label}prefill, today", today, fl.prompt(prompts)),
                                 (f"{label}prefill, shared", shared, fl.shared(prompts)),
                                 (f"{label}decode", runs[False] - today, decode),
                                 (f"{label}generate, today", runs[False], fl.prompt(prompts) + decode),
                                 (f"{label}generate, shared", runs[True], fl.shared(prompts) + decode)):
        entry = out.setdefault(name, {"seconds": 0.0, "gflop": 0.0})
        entry["seconds"] += seconds
        entry["gflop"] += flops / 1e9


def scoring(batch: Any, rows: list[int], model: Any, tok: Any, fl: Flops, out: dict) -> None:
    """Reference log-probs (adapters off, no grad) and the update's forward + backward, 8 rows a pass."""
    from scpo_lightning.logprobs import response_logprobs

    for k in range(0, len(rows), 8):
        micro = rows[k:k + 8]
        prompts, responses = [batch.prompt_ids[i] for i in micro], [batch.response_ids[i] for i in micro]
        ctx = [j + 1 for p, r in zip(prompts, responses) for j in range(len(p) + len(r))]
        lo = min(len(p) for p in prompts) - 1
        logits = len(micro) * (max(len(p) + len(r) for p, r in zip(prompts, responses)) - 1 - lo)
        forward = fl.forward(ctx, logits)
        start = time.perf_counter()
        with torch.no_grad(), model.disable_adapter():
            response_logprobs(model, prompts, responses, tok.pad_token_id, 1.0, False)
        ref = time.perf_counter() - start
        model.train()
        start = time.perf_counter()
        logp, entropy, mask = response_logprobs(model, prompts, responses, tok.pad_token_id, 1.0, True)
        (-(logp * mask).sum() - entropy.sum() * 1e-3).backward()
        update = time.perf_counter() - start
        model.eval()
        model.zero_grad(set_to_none=True)
        attention = 4 * fl.layers * fl.hidden * float(sum(ctx))
        for name, seconds, flops in (("reference log-probs", ref, fl.forward(ctx, logits) - 2 * fl.lora * len(ctx)),
                                     ("update forward + backward", update, 2 * forward + attention)):
            entry = out.setdefault(name, {"seconds": 0.0, "gflop": 0.0})
            entry["seconds"] += seconds
            entry["gflop"] += flops / 1e9


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", default="run_00.pkl.xz", help="recorded batch under benchmarks/data/alfworld")
    parser.add_argument("--rows", type=int, default=16, help="rows of the batch to time (its first steps)")
    parser.add_argument("--note", default="the load averages at start and end say how quiet the machine was",
                        help="how the machine was used while this ran (stored in the result)")
    parser.add_argument("--val-prompts", type=int, default=32, help="prompts of the validation call (val_batch_episodes)")
    args = parser.parse_args(argv)
    from scpo_lightning.model_setup import with_lora
    from scpo_lightning.policy import load_policy

    started = machine()
    base, tok = load_policy("smollm2-gguf")
    model = with_lora(base, 16, 0).eval()  # seed 0: the adapters' A matrices, as in a run of seed 0
    fl = Flops(base.config, 16)
    peaks = matmul_peaks(base.config)
    batches = load_batches("alfworld")
    (_, batch), = [b for b in batches if b[0] == args.batch]
    out: dict[str, dict[str, float]] = {}
    chunks = _chunks(batch, args.rows)
    for rows in chunks:
        generation([list(batch.prompt_ids[i]) for i in rows], model, tok, fl, "", out)
    scoring(batch, [i for c in chunks for i in c], model, tok, fl, out)
    # validation: one episode per task, so one prompt per recorded trajectory's step 1, distinct batches first
    seen, val = set(), []
    for _, b in batches:
        for i in np.flatnonzero(np.asarray(b.steps) == 1):
            if tuple(b.prompt_ids[i]) not in seen and len(val) < args.val_prompts:
                seen.add(tuple(b.prompt_ids[i]))
                val.append(list(b.prompt_ids[i]))
    generation(val, model, tok, fl, "validation ", out)
    fp32, bf16 = peaks["float32"]["peak_gflops"], peaks["bfloat16"]["peak_gflops"]
    table = [{"phase": name, "seconds": round(e["seconds"], 2), "gflop": round(e["gflop"], 1),
              "gflops_per_s": round(e["gflop"] / e["seconds"], 1),
              "share_of_fp32_peak": round(e["gflop"] / e["seconds"] / fp32, 3),
              "share_of_bf16_peak": round(e["gflop"] / e["seconds"] / bf16, 3)} for name, e in out.items()]
    result = {"what": "matmul GFLOP/s at SmolLM2's shapes (fp32, bf16), and each phase's GFLOP done, GFLOP/s and "
                      "share of the measured fp32 peak, on recorded ALFWorld quickstart rows (fp32, LoRA 16)",
              "batch": args.batch, "rows": sum(map(len, chunks)), "generate_calls": len(chunks),
              "validation_prompts": len(val), "weights_non_embedding": fl.weights, "lora_weights": fl.lora,
              "matmul": peaks, "phases": table, "machine": started, "load_average_at_end": load_average(),
              "note": args.note}
    write_result("roofline", result)
    return result


if __name__ == "__main__":
    main()
