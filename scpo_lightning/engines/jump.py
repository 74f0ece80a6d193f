"""Jump-forward constrained decoding: forced tokens in one forward, a draw only where the trie branches.

Why. In constrained mode a response is one candidate ``<action>{a}</action>`` + EOS, and most of
its tokens are forced: the tags, the tail of an action once it is unique, EOS. HF ``generate``
still runs one forward per token for the whole batch, and decode is bound by per-step overhead
on CPU (8 % of the fp32 peak, ``benchmarks/results/roofline.json``). Here each forward feeds,
per row, the token just drawn plus every forced token after it, so a response costs one forward
per branch point (plus one), and the forced tokens are computed at prefill efficiency.

What it computes is what the HF path computes (``engines.hf``): per response token the policy's
log-prob ``log_softmax(logits / T)`` (``policy_logprobs``; T = 1 when greedy) and the sampler's
``log q``, q being the policy renormalised over the allowed tokens, at temperature T, then
nucleus-trimmed as HF's ``TopPLogitsWarper`` does; forced tokens have q = 1. Draws use the
global RNG (``torch.multinomial``), greedy takes the allowed token with the largest logit (the
lowest id on ties), as HF does. The arithmetic differs from the HF path by float noise (other
matmul shapes), and the random numbers are drawn at branch points only, so under the same seed
the samples follow the same distribution but not the same stream.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from scpo_lightning.engines.constrained import TokenTrie


@dataclass
class _Row:
    node: dict[int, dict]  # the trie node after the response so far
    position: int  # the position of the next token fed
    feed: list[int]  # tokens this forward encodes: the last drawn one, then forced ones
    final: int | None = None  # a forced token that completes the candidate (scored, not fed)
    tokens: list[int] = field(default_factory=list)
    policy_logprobs: list[float] = field(default_factory=list)
    sampler_logprobs: list[float] = field(default_factory=list)
    done: bool = False

    def advance(self, token: int) -> None:
        """Take ``token``, then every forced token after it: the next forward's feed."""
        self.feed, self.final = [token], None
        self.node = self.node[token]
        while len(self.node) == 1:
            (forced,) = self.node
            self.node = self.node[forced]
            if self.node:
                self.feed.append(forced)
            else:
                self.final = forced
        self.done = not self.node and self.final is None


def top_p_keep(scores: torch.Tensor, top_p: float) -> torch.Tensor:
    """HF ``TopPLogitsWarper``'s kept set on one row of scores: the smallest tail, by ascending
    probability, whose cumulative mass stays within ``1 - top_p`` is dropped; the top token stays."""
    ordered, index = torch.sort(scores)
    drop = ordered.softmax(-1).cumsum(-1) <= 1 - top_p
    drop[-1] = False
    keep = torch.ones_like(scores, dtype=torch.bool)
    keep[index[drop]] = False
    return keep


def _draw(scores: torch.Tensor, temperature: float, top_p: float) -> tuple[int, float]:
    """An index into ``scores`` (the allowed tokens' logits) and its log q."""
    if temperature == 0:
        return int(torch.argmax(scores)), 0.0
    q_logits = scores / temperature
    if top_p < 1.0:
        q_logits = q_logits.masked_fill(~top_p_keep(q_logits, top_p), float("-inf"))
    log_q = torch.log_softmax(q_logits, -1)
    pick = int(torch.multinomial(log_q.exp(), 1))
    return pick, float(log_q[pick])


def jump_decode(model: torch.nn.Module, cache: DynamicCache, prompts: Sequence[Sequence[int]],
                tries: Sequence[TokenTrie], temperature: float, top_p: float, pad_id: int,
                device: torch.device) -> list[tuple[list[int], list[float], list[float]]]:
    """(tokens, policy log-probs, sampler log-probs) per prompt, given ``cache``: every prompt but
    its last token, left-padded to ``max(len(p)) - 1`` columns (``engines.prefix.shared_prefill``).
    Call under ``torch.no_grad``."""
    width = max(len(p) for p in prompts) - 1
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    rows = []
    for r, (prompt, trie) in enumerate(zip(prompts, tries)):
        mask[r, width - (len(prompt) - 1):] = 1
        row = _Row(node={int(prompt[-1]): trie.root}, position=len(prompt) - 1, feed=[])
        row.advance(int(prompt[-1]))
        rows.append(row)
    policy_t = 1.0 if temperature == 0 else temperature
    while any(not row.done for row in rows):
        live = [r for r, row in enumerate(rows) if not row.done]
        k = max(len(rows[r].feed) for r in live)
        ids = torch.full((len(rows), k), pad_id, dtype=torch.long)
        new = torch.zeros((len(rows), k), dtype=torch.long)
        positions = torch.zeros((len(rows), k), dtype=torch.long)
        for r in live:
            row = rows[r]
            ids[r, : len(row.feed)] = torch.as_tensor(row.feed)
            new[r, : len(row.feed)] = 1
            positions[r] = row.position + torch.arange(k)
        mask = torch.cat([mask, new], dim=1)
        out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                    past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        logits = out.logits.float()
        for r in live:
            _take(rows[r], logits[r, : len(rows[r].feed)], policy_t, temperature, top_p)
    return [(row.tokens, row.policy_logprobs, row.sampler_logprobs) for row in rows]


def _take(row: _Row, logits: torch.Tensor, policy_t: float, temperature: float, top_p: float) -> None:
    """Score the forced tokens this forward encoded, then draw the next token where the trie branches."""
    log_pi = torch.log_softmax(logits / policy_t, dim=-1)
    forced = row.feed[1:] + ([row.final] if row.final is not None else [])
    for i, token in enumerate(forced):
        row.tokens.append(token)
        row.policy_logprobs.append(float(log_pi[i, token]))
        row.sampler_logprobs.append(0.0)
    row.position += len(row.feed)
    if row.final is not None:
        row.done = True
        return
    allowed = sorted(row.node)
    pick, log_q = _draw(logits[-1, allowed], temperature, top_p)
    token = allowed[pick]
    row.tokens.append(token)
    row.policy_logprobs.append(float(log_pi[-1, token]))
    row.sampler_logprobs.append(log_q)
    row.advance(token)


def padded_prefill(model: torch.nn.Module, prompts: Sequence[Sequence[int]], pad_id: int,
                   device: torch.device) -> DynamicCache:
    """The cache ``jump_decode`` takes, without prefix sharing: every prompt but its last token as
    one left-padded batch (what HF ``generate``'s prefill encodes, less the last column)."""
    width = max(len(p) for p in prompts) - 1
    if width == 0:
        return DynamicCache()
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for r, prompt in enumerate(prompts):
        if len(prompt) > 1:
            ids[r, width - len(prompt) + 1:] = torch.as_tensor(list(prompt[:-1]))
            mask[r, width - len(prompt) + 1:] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                use_cache=True)
    return out.past_key_values
