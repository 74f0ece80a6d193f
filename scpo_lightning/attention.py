"""Grouped-query attention on CPU without copying the keys and values once per query-head group.

Why. HF's ``sdpa`` attention lets torch's SDPA share each key/value head across its group of query
heads (``enable_gqa``) only when there is no attention mask; with one (every padded batch: all of
ours) it first copies keys and values ``num_key_value_groups`` times (``repeat_kv``). For SmolLM2
(9 query heads, 3 key/value heads) that is a copy of the whole KV cache, three times over, in
every layer of every decode step: the largest non-matmul cost of generation here (``aten::copy_``,
13 % of a validation call's CPU time). torch's CPU flash kernel takes ``enable_gqa`` together with
a mask and gives the same numbers bit for bit (``tests/test_attention.py``), 4-6x faster at decode
shapes. HF's restriction is there for CUDA, where a mask with ``enable_gqa`` falls back to the math
kernel; on any other device, and wherever gradients flow (the PPO update: the backward of the two
paths sums a shared head's gradient in different orders, ~1e-6 apart), this module hands the call
back to HF's own ``sdpa`` function. Generation, validation and the no-grad log-prob passes so give
exactly what they gave before, and the update is untouched.

``use_cpu_gqa(model)`` switches a model whose config uses ``sdpa`` and has fewer key/value heads
than query heads to the ``cpu_gqa_sdpa`` attention registered here (and the same masks as
``sdpa``); other models are left as they are.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "cpu_gqa_sdpa"


def cpu_gqa_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                 is_causal: bool | None = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """HF's attention-function signature: [B, heads, q, d] query, [B, kv heads, k, d] keys and values."""
    # With gradients, HF's path: its backward sums a shared head's gradient over the copies, SDPA's
    # in another order, and the update's gradients should not move even by float noise.
    grad = torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad)
    if grad or query.device.type != "cpu" or kwargs.get("output_attentions") or kwargs.get("head_mask") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    if attention_mask is not None and attention_mask.ndim == 4:
        attention_mask = attention_mask[..., : key.shape[-2]]  # a mask built for a longer (static) cache
    if is_causal is None:  # the mask carries causality when there is one
        is_causal = attention_mask is None and query.shape[2] > 1 and getattr(module, "is_causal", True)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=is_causal,
        enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(NAME, cpu_gqa_sdpa)
AttentionMaskInterface.register(NAME, sdpa_mask)


def use_cpu_gqa(model: torch.nn.Module) -> bool:
    """Switch ``model`` (an HF causal LM) to ``cpu_gqa_sdpa`` where it applies; whether it did."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    kv_heads = getattr(config, "num_key_value_heads", None)
    if kv_heads is None or kv_heads >= config.num_attention_heads:
        return False
    config._attn_implementation = NAME
    return True
