"""Per-token log-probs and entropies of response tokens for a micro-batch of rows."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch

from scpo_lightning.engines.prefix import shared_prefill
from scpo_lightning.losses import entropy_from_logits, k3_kl


def pack_rows(
    prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded prompt+response ids, attention mask, response token ids and response mask."""
    seqs = [list(p) + list(r) for p, r in zip(prompts, responses)]
    width = max(len(s) for s in seqs)
    resp_width = max(max(len(r) for r in responses), 1)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    resp = torch.full((len(seqs), resp_width), pad_id, dtype=torch.long)
    resp_mask = torch.zeros((len(seqs), resp_width), dtype=torch.long)
    for i, (s, r) in enumerate(zip(seqs, responses)):
        ids[i, : len(s)] = torch.tensor(s)
        attn[i, : len(s)] = 1
        resp[i, : len(r)] = torch.tensor(list(r), dtype=torch.long)
        resp_mask[i, : len(r)] = 1
    return ids.to(device), attn.to(device), resp.to(device), resp_mask.to(device)


def accepts_logits_to_keep(model: torch.nn.Module) -> bool:
    """Whether ``model``'s forward takes ``logits_to_keep`` (HF causal LMs since 4.50; PEFT passes it on)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def shared_prefix_logits(
    model: torch.nn.Module, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]], pad_id: int,
    device: torch.device,
) -> torch.Tensor:
    """Logits [B, S, V] of each row's last prompt token and response tokens (position k predicts
    response token k), every prompt prefix the rows share encoded once (``engines.prefix``).

    ``shared_prefill`` builds the left-padded cache of all but each prompt's last token; one more
    forward encodes that token and the response, right-padded, at their true positions. Each token
    attends to the same keys at the same positions as in ``pack_rows``' layout, so the log-probs
    move by float noise only; with gradients on, a shared node's activations receive the sum of
    its rows' gradients, which is the gradient of the unshared pass (``tests/test_logprob_prefix.py``).
    """
    cache, _ = shared_prefill(model, prompts, pad_id, device, max_rows=len(prompts))
    width = max(len(p) for p in prompts) - 1  # the cache's columns
    segments = [[p[-1], *r] for p, r in zip(prompts, responses)]
    seg = max(len(s) for s in segments)
    ids = torch.full((len(segments), seg), pad_id, dtype=torch.long)
    mask = torch.zeros((len(segments), width + seg), dtype=torch.long)
    for i, (p, s) in enumerate(zip(prompts, segments)):
        ids[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
        mask[i, width - (len(p) - 1) : width + len(s)] = 1
    positions = torch.stack([len(p) - 1 + torch.arange(seg) for p in prompts])
    return model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                 past_key_values=cache, use_cache=True).logits


def response_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float,
    with_entropy: bool,
    device: torch.device | None = None,
    prefix_sharing: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """log π(response token | prefix) for every response token: ([B, R], entropy [B, R] or None, mask [B, R]).

    Logits are divided by the rollout temperature (SPEC §4). The logit that predicts response
    token k of a row sits at position len(prompt) + k − 1. Only the positions from the shortest
    prompt's last token to the longest row's second-to-last token go through the LM head
    (``logits_to_keep``): the head over the prompt tokens would be pure cost (for SmolLM2 a fifth
    of the forward and a [B, L, 49152] fp32 tensor). ``device``: where the model computes (default:
    where its first parameter is; a CPU-offloaded FSDP2 model computes on the GPU).
    ``prefix_sharing``: encode the prompt prefixes the rows share once (``shared_prefix_logits``).
    """
    device = device or next(model.parameters()).device
    ids, attn, resp, resp_mask = pack_rows(prompts, responses, pad_id, device)
    if prefix_sharing and max(len(p) for p in prompts) > 1:
        z = shared_prefix_logits(model, prompts, responses, pad_id, device)[:, : resp.shape[1]].float() / temperature
    else:
        start = torch.tensor([len(p) - 1 for p in prompts], device=device)
        lo = int(start.min())
        hi = max(lo + 1, max(len(p) + len(r) - 1 for p, r in zip(prompts, responses)))
        if accepts_logits_to_keep(model):
            logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=torch.arange(lo, hi, device=device)).logits
        else:  # a model without the argument (remote code): every position, then the same window
            logits = model(input_ids=ids, attention_mask=attn).logits[:, lo:hi]
        pos = (start[:, None] - lo + torch.arange(resp.shape[1], device=device)[None, :]).clamp_max(hi - lo - 1)
        z = logits.gather(1, pos[..., None].expand(-1, -1, logits.shape[-1])).float() / temperature
    logp = torch.log_softmax(z, dim=-1).gather(-1, resp[..., None]).squeeze(-1)
    entropy = entropy_from_logits(z) if with_entropy else None
    return logp, entropy, resp_mask


def mismatch_sums(
    rollout: Sequence[torch.Tensor], recomputed: Sequence[torch.Tensor], sampling: Sequence[torch.Tensor] = ()
) -> tuple[float, float, float, float, float]:
    """Rollout vs recomputed log-probs of the same tokens (1-D tensors per row), summed over tokens.

    Returns (Σ|Δ|, Σ k3, Σ (log q − log π_rollout), tokens, max|Δ|) with Δ = recomputed − rollout;
    k3 = e^Δ − Δ − 1 estimates KL(π_rollout ‖ π_train) per token from the rollout's own samples,
    and the gap (0 in free mode with top_p 1) is −log Z_t of the constrained mode's renormalisation.
    """
    if not rollout:
        return 0.0, 0.0, 0.0, 0.0, 0.0
    a = torch.cat([r.detach().float().cpu() for r in rollout])
    b = torch.cat([r.detach().float().cpu() for r in recomputed])
    if a.shape != b.shape:
        raise ValueError(f"rollout log-probs cover {a.numel()} tokens, recomputed ones {b.numel()}")
    d = b - a
    gap = float((torch.cat([s.float() for s in sampling]) - a).sum()) if sampling else 0.0
    largest = float(d.abs().max()) if d.numel() else 0.0
    return float(d.abs().sum()), float(k3_kl(a, b, clamp=1e9).sum()), gap, float(d.numel()), largest
