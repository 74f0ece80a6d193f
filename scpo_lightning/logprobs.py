"""Per-token log-probs and entropies of response tokens for a micro-batch of rows."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from scpo_lightning.losses import entropy_from_logits


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


def response_logprobs(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    pad_id: int,
    temperature: float,
    with_entropy: bool,
    device: torch.device | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """log π(response token | prefix) for every response token: ([B, R], entropy [B, R] or None, mask [B, R]).

    Logits are divided by the rollout temperature (SPEC §4). The logit that predicts response
    token k of a row sits at position len(prompt) + k − 1. ``device``: where the model computes
    (default: where its first parameter is; a CPU-offloaded FSDP2 model computes on the GPU).
    """
    device = device or next(model.parameters()).device
    ids, attn, resp, resp_mask = pack_rows(prompts, responses, pad_id, device)
    logits = model(input_ids=ids, attention_mask=attn).logits
    start = torch.tensor([len(p) - 1 for p in prompts], device=device)
    pos = (start[:, None] + torch.arange(resp.shape[1], device=device)[None, :]).clamp_max(ids.shape[1] - 1)
    z = logits.gather(1, pos[..., None].expand(-1, -1, logits.shape[-1])).float() / temperature
    logp = torch.log_softmax(z, dim=-1).gather(-1, resp[..., None]).squeeze(-1)
    entropy = entropy_from_logits(z) if with_entropy else None
    return logp, entropy, resp_mask
