"""Log-prob noise vs update size, and speed, for the quickstart policy under each precision.

On recorded quickstart rows (``benchmarks/data/alfworld``, SmolLM2-135M-Instruct from its GGUF),
for each way of computing:

- ``bf16_tied``: the fp32 weights as dequantised (9.6 % of them bf16 ties), bf16 autocast for
  everything, bf16 logits: the quickstart before this benchmark;
- ``bf16_grid``: weights snapped onto the bf16 grid once, bf16 autocast, fp32 LM head (the default
  now, ``model.bf16_grid: auto``);
- ``fp32``: no autocast at all;
- ``fp32_lora16``: no autocast, LoRA adapters of rank 16 on every linear layer (``model.lora_rank:
  16``, the frozen weights as loaded): only the adapters take the step.

it takes ONE AdamW step (the quickstart's loss: PPO clip, entropy, k3 KL) at lr 1e-6 and at lr
1e-7 (``--lrs``), with random ±1-sized advantages and with zero advantages (the entropy term alone), and reports, against the weights before the step, the mean
k3 KL per response token and the mean |Δ log-prob|: an update should move them by what the
learning rate says (with the noise floor gone a 10x smaller step gives ~10x less change, ~100x less KL). It
also reports what depends on batching alone (the same rows, micro-batches of 8 vs 5), how far
bf16 sampling is from fp32 training on the same weights, seconds per row of the update's
forward+backward and of a no-grad forward (the log-prob passes; prefill-like), and how much of a
LoRA adapter's contribution a bf16 forward shows, by its size (``lora_visibility``).

    python -m benchmarks.numerics [--rows 32] [--threads 2] [--variants fp32_lora16 --lrs 1e-6 1e-7 1e-8]
"""

from __future__ import annotations

import contextlib
import copy
import json
import time

import torch

from benchmarks.common import RESULTS, load_average, machine, write_result
from benchmarks.record_batches import load_batches
from envs.common.cli_args import ArgumentParser, integer
from scpo_lightning.logprobs import response_logprobs
from scpo_lightning.model_setup import with_lora
from scpo_lightning.losses import k3_kl, policy_loss
from scpo_lightning.policy import SMOLLM2_GGUF, load_policy
from scpo_lightning.precision import bf16_tie_fraction, fp32_output_head, off_bf16_grid_fraction, snap_to_bf16_grid_

VARIANTS = {  # name: (snap weights onto the bf16 grid, fp32 LM head, autocast dtype, LoRA rank)
    "bf16_tied": (False, False, torch.bfloat16, 0),
    "bf16_grid": (True, True, torch.bfloat16, 0),
    "fp32": (False, True, None, 0),
    "fp32_lora16": (False, True, None, 16),
}
LRS = (1e-6, 1e-7)
ADVANTAGES = ("random", "zero")


def autocast(dtype: torch.dtype | None):
    return torch.autocast("cpu", dtype=dtype) if dtype is not None else contextlib.nullcontext()


def logprobs(model, rows, micro: int, dtype, pad_id: int) -> list[torch.Tensor]:
    """Per-row response log-probs, no grad, in micro-batches of ``micro`` rows."""
    out = []
    with torch.no_grad(), autocast(dtype):
        for s in range(0, len(rows), micro):
            chunk = rows[s : s + micro]
            lp, _, mask = response_logprobs(model, [p for p, _ in chunk], [r for _, r in chunk], pad_id, 1.0, False)
            out.extend(x[m.bool()] for x, m in zip(lp, mask))
    return out


def compare(a: list[torch.Tensor], b: list[torch.Tensor]) -> dict[str, float]:
    """Mean k3 KL (samples: the rows' tokens, b as the reference), mean and max |Δ log-prob|."""
    x, y = torch.cat(a), torch.cat(b)
    d = (x - y).abs()
    # k3 in float64: exp(x) - x - 1 in float32 cancels to noise of ~1e-8 per token (even < 0), which
    # is the size of the KL of a 1e-7 step; the log-probs themselves stay as the model computed them.
    return {"k3_kl": float(k3_kl(x.double(), y.double(), clamp=1e9).mean()), "mean_abs_dlogp": float(d.mean()), "max_abs_dlogp": float(d.max())}


def one_step(model, rows, adv, lr: float, micro: int, dtype, pad_id: int, old, ref) -> float:
    """One AdamW step of the quickstart loss over all ``rows`` (one mini-batch); returns its seconds."""
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    model.train()
    start = time.perf_counter()
    chunks = range(0, len(rows), micro)
    for s in chunks:
        chunk = rows[s : s + micro]
        with autocast(dtype):
            lp, ent, mask = response_logprobs(model, [p for p, _ in chunk], [r for _, r in chunk], pad_id, 1.0, True)
        width = lp.shape[1]
        pad = lambda xs: torch.stack([torch.nn.functional.pad(t, (0, width - len(t))) for t in xs])  # noqa: E731
        out = policy_loss(lp, pad(old[s : s + micro]), pad(ref[s : s + micro]), adv[s : s + micro], mask, ent,
                          0.2, 3.0, 0.001, 0.01, 10.0)
        (out.loss / len(chunks)).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    model.eval()
    return time.perf_counter() - start


def decade_ratios(entry: dict, kind: str, lrs: list[float]) -> dict[str, dict[str, float]]:
    """For each pair of learning rates 10x apart: how many times smaller the mean |Δ log p| and the
    KL are at the smaller one. A step that moves log-probs linearly gives 10 and 100; rounding noise
    (a floor) gives less, and less again at each smaller rate; curvature of the log-prob in the
    step gives a ratio off 10 by an amount that shrinks 10x with each decade."""
    out = {}
    for lr in lrs:
        small = lr / 10
        match = [x for x in lrs if x > 0 and abs(x - small) <= 1e-6 * small]
        if lr > 0 and match:
            big, low = entry[f"{kind}_advantages_lr_{lr:g}"], entry[f"{kind}_advantages_lr_{match[0]:g}"]
            out[f"{lr:g}/{match[0]:g}"] = {
                "mean_abs_dlogp": big["mean_abs_dlogp"] / low["mean_abs_dlogp"] if low["mean_abs_dlogp"] else None,
                "k3_kl": big["k3_kl"] / low["k3_kl"] if low["k3_kl"] > 0 else None}
    return out


def lora_visibility(scales=(1e-5, 1e-4, 2e-4, 1e-3, 1e-2), width: int = 576, rows: int = 64) -> list[dict[str, float]]:
    """How much of a LoRA adapter's contribution a bf16-autocast forward shows, by its size.

    One SmolLM2-wide linear layer (N(0, 0.04) weights) with a rank-16 adapter whose B is N(0, 1)·scale:
    the change of the output under bf16 autocast (adapter on vs off) against the exact fp32 change
    s·x·(BA)ᵀ. peft adds the adapter's output to the layer's in bf16, so a change below half a bf16
    step of the output (~0.2 % of it) is rounded away.
    """
    import peft

    gen = torch.Generator().manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(width, width, bias=False))
    layer[0].weight.data = torch.randn(width, width, generator=gen) * 0.04
    model = peft.get_peft_model(layer, peft.LoraConfig(r=16, lora_alpha=32, target_modules=["0"]))
    lora = model.base_model.model[0]
    x = torch.randn(rows, width, generator=gen)
    out = []
    for scale in scales:
        lora.lora_B["default"].weight.data.zero_()
        with torch.no_grad(), autocast(torch.bfloat16):
            off = model(x).float()
        lora.lora_B["default"].weight.data = torch.randn(width, 16, generator=gen) * scale
        with torch.no_grad(), autocast(torch.bfloat16):
            on = model(x).float()
        with torch.no_grad():
            exact = x @ (lora.lora_B["default"].weight @ lora.lora_A["default"].weight).T * lora.scaling["default"]
        out.append({"relative_change": float(exact.abs().mean() / off.abs().mean()),
                    "seen_fraction": float((on - off).abs().mean() / exact.abs().mean()),
                    "outputs_unchanged": float(((on - off) == 0).float().mean())})
    return out


def earlier_variants(names: set[str]) -> dict[str, dict]:
    """The entries of ``names`` in the committed result (a run of some variants keeps the others)."""
    path = RESULTS / "numerics.json"
    kept = json.loads(path.read_text())["variants"] if names and path.exists() else {}
    return {name: kept[name] for name in VARIANTS if name in names and name in kept}


def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=integer(1), default=32, help="recorded rows to use (from batch_00 on)")
    parser.add_argument("--micro", type=integer(1), default=8, help="rows per micro-batch (the quickstart's)")
    parser.add_argument("--threads", type=integer(1), default=2, help="torch threads")
    parser.add_argument("--lrs", nargs="+", type=float, default=list(LRS),
                        help="learning rates of the one step; add 1e-8 to tell curvature (|Δ| ratio nears 10 per decade) from a floor (it falls)")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS),
                        help="variants to run; the others are kept from an earlier benchmarks/results/numerics.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    started = machine()
    batch = load_batches("alfworld", pattern="batch_00.pkl.xz")[0][1]
    rows = list(zip(batch.prompt_ids, batch.response_ids))[: args.rows]
    base, tokenizer = load_policy(SMOLLM2_GGUF, torch_dtype="float32")
    base.eval()
    pad_id = tokenizer.pad_token_id
    gen = torch.Generator().manual_seed(0)
    advantages = {"random": torch.randn(len(rows), generator=gen), "zero": torch.zeros(len(rows))}
    result = {"benchmark": "numerics", "rows": len(rows), "micro_batch_rows": args.micro,
              "response_tokens": sum(len(r) for _, r in rows), "prompt_tokens_mean": sum(len(p) for p, _ in rows) / len(rows),
              "bf16_tie_fraction_as_loaded": bf16_tie_fraction(base), "variants": {}}
    result["variants"] = earlier_variants(set(VARIANTS) - set(args.variants))
    for name in args.variants:
        snap, head32, dtype, lora_rank = VARIANTS[name]
        model = copy.deepcopy(base)
        if snap:
            snap_to_bf16_grid_(model)
        if head32:
            fp32_output_head(model)
        if lora_rank:
            torch.manual_seed(0)  # the adapters' A is drawn at random: the same A in every run
            model = with_lora(model, lora_rank, 0)
        t0 = time.perf_counter()
        before = logprobs(model, rows, args.micro, dtype, pad_id)
        forward_s = time.perf_counter() - t0
        other = logprobs(model, rows, 5, dtype, pad_id)
        entry = {"off_bf16_grid_fraction": off_bf16_grid_fraction(model), "forward_s_per_row": forward_s / len(rows),
                 "batching_8_vs_5": compare(other, before)}
        if dtype is not None:  # the same weights without autocast: what a bf16 sampler differs from fp32 training by
            entry["vs_fp32_same_weights"] = compare(before, logprobs(model, rows, args.micro, None, pad_id))
        for kind in ADVANTAGES:
            for lr in args.lrs:
                stepped = copy.deepcopy(model)
                seconds = one_step(stepped, rows, advantages[kind], lr, args.micro, dtype, pad_id, before, before)
                after = logprobs(stepped, rows, args.micro, dtype, pad_id)
                entry[f"{kind}_advantages_lr_{lr:g}"] = {**compare(after, before), "update_s_per_row": seconds / len(rows)}
                del stepped
            entry[f"{kind}_advantages_decade_ratios"] = decade_ratios(entry, kind, args.lrs)
        result["variants"][name] = entry
        print(name, entry, flush=True)
    result["lora_delta_under_bf16"] = lora_visibility()
    print("lora_delta_under_bf16", result["lora_delta_under_bf16"], flush=True)
    result["machine"] = started
    result["load_average_end"] = load_average()
    write_result("numerics", result)


if __name__ == "__main__":
    main()
