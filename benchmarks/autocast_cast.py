"""What bf16 autocast costs per ``F.linear`` call when the weight is frozen, as LoRA's base weights are.

torch's autocast caches the bf16 cast of a weight only for leaf tensors that require grad; LoRA
freezes the base weights, so a bf16 autocast sampler re-casts every frozen projection at every
call. At SmolLM2-135M's projection shapes, 8 and 32 decode rows, under ``torch.no_grad``: µs per
call with an fp32 weight, autocast on a frozen fp32 weight, autocast on a weight that requires
grad (cast once, then cached for the autocast region), and a persistent bf16 copy of the weight.

    python -m benchmarks.autocast_cast --note "quiet machine"   # -> benchmarks/results/autocast_cast.json
"""

from __future__ import annotations

import argparse
import contextlib
import time
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.common import load_average, machine, write_result
from benchmarks.roofline import shapes

#: SmolLM2-135M's config.json (hidden 576, intermediate 1536, 9 heads of 64, 3 kv heads: kv 192),
#: stated here so that no model is loaded; roofline.shapes turns it into (in, out) per projection.
SMOLLM2 = SimpleNamespace(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
                          vocab_size=49152)
ROWS = (8, 32)  # the decode rows of roofline.TOKENS
PROJECTIONS = ("attn q/o", "attn k/v", "mlp gate/up", "mlp down")  # the head stays fp32 (fp32 LM head), not timed


def us_per_call(x: torch.Tensor, w: torch.Tensor, autocast: bool, calls: int = 50) -> float:
    """Mean µs per call; the autocast region spans all calls, as it spans one generate."""
    region = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with torch.no_grad(), region:
        F.linear(x, w)  # warm-up, and the cached variant's one cast
        start = time.perf_counter()
        for _ in range(calls):
            F.linear(x, w)
        return (time.perf_counter() - start) / calls * 1e6


def measure(rounds: int) -> dict[str, dict[str, float]]:
    """Variants interleaved round by round, so other work's load hits them alike; each keeps its fastest round."""
    out = {}
    for name, (k, n) in shapes(SMOLLM2).items():
        if name not in PROJECTIONS:
            continue
        w = torch.randn(n, k)  # requires_grad False: frozen, as LoRA's base weights
        for m in ROWS:
            x = torch.randn(m, k)
            variants = {"fp32": (x, w, False), "autocast_frozen": (x, w, True),
                        "autocast_requires_grad": (x, w.detach().requires_grad_(True), True),
                        "bf16_copy": (x.bfloat16(), w.bfloat16(), False)}
            times: dict[str, list[float]] = {v: [] for v in variants}
            for _ in range(rounds):
                for v, args in variants.items():
                    times[v].append(us_per_call(*args))
            out[f"{name} {k}->{n}, {m} rows"] = {v: round(min(t), 1) for v, t in times.items()}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds of 50 calls per variant")
    parser.add_argument("--note", default="", help="what the machine was doing (stored in the result)")
    args = parser.parse_args(argv)
    started = machine()
    result = {"what": "µs per F.linear call at SmolLM2-135M's projection shapes, decode rows, torch.no_grad, "
                      "per weight handling under bf16 autocast", "rounds": args.rounds,
              "us_per_call": measure(args.rounds), "machine": started, "load_average_at_end": load_average(),
              "note": args.note}
    write_result("autocast_cast", result)
    return result


if __name__ == "__main__":
    main()
