"""FlagReranker's scores (FlagEmbedding 1.4.2, encoder-only) computed with transformers alone.

FlagEmbedding imports only with transformers < 5 and vLLM needs transformers >= 5, so the `bge`
scorer's ``backend: transformers`` reproduces ``FlagReranker.compute_score(pairs, normalize=True)``
here, with the same steps (FlagEmbedding's ``inference/reranker/encoder_only/base.py``, read for
the facts; checked equal to it in tests/test_scorers_bge.py and tests/bge_check.py):

1. each side is tokenised without special tokens, the reference cut to ``max_length * 3 // 4``
   tokens and the candidate to ``max_length``;
2. the pair is cut to ``max_length`` tokens with the special tokens counted, removing tokens from
   the candidate only; when the candidate is too short to absorb the cut, the pair stays as it is
   (transformers 4's ``only_second`` rule, which FlagReranker runs under);
3. the tokenizer's own pair template adds the special tokens (``<s> A </s></s> B </s>`` for
   XLM-RoBERTa);
4. pairs are sorted longest first, padded per batch, and the logits are read in fp32, then
   mapped through a sigmoid in float64.

Tokenisation runs on the folder's ``tokenizer.json`` read by ``tokenizers`` itself (``Encoding``
truncation and the saved post-processor), which is what transformers 4's fast tokenizer runs.
transformers 5 differs twice: it removed the id-level ``prepare_for_model`` (FlagEmbedding then
round-trips the ids through text), and it rebuilds an XLM-RoBERTa tokenizer's pipeline from its
own defaults, keeping only the vocabulary. transformers' tokenizer is used for its settings only
(pad id, padding and truncation side, whether the model takes ``token_type_ids``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


class TransformersReranker:
    """A cross-encoder folder scored as FlagReranker scores it.

    Args:
        path: Local folder of a saved sequence-classification model with its ``tokenizer.json``.
        device: Torch device string.
        batch_size: Pairs per forward pass.
        max_length: Token limit of one pair, special tokens included.
        use_fp16: Half-precision weights (the caller only sets it on CUDA, as FlagReranker does).
    """

    def __init__(self, path: Path, *, device: str, batch_size: int, max_length: int, use_fp16: bool) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from tokenizers import Tokenizer

        if not (path / "tokenizer.json").is_file():
            raise FileNotFoundError(f"scorer_options.backend=transformers needs {path / 'tokenizer.json'} (a fast "
                                    "tokenizer, as bge-reranker-v2-m3 ships); save one with "
                                    "AutoTokenizer.from_pretrained(...).save_pretrained(...), or use backend: flagembedding")
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        # fp32 as transformers 4 loads it for FlagReranker (transformers 5 would keep the saved dtype).
        model = AutoModelForSequenceClassification.from_pretrained(str(path), dtype=torch.float32, local_files_only=True)
        self.model = (model.half() if use_fp16 else model).to(device).eval()
        self.device, self.batch_size, self.max_length = device, batch_size, max_length
        self.query_max_length = max_length * 3 // 4
        self._backend = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._backend.no_truncation()
        self._backend.no_padding()
        self._n_special = self._backend.num_special_tokens_to_add(is_pair=True)
        self._side = getattr(self.tokenizer, "truncation_side", "right")
        self._with_type_ids = "token_type_ids" in self.tokenizer.model_input_names

    def _encode_pair(self, reference: str, candidate: str):
        query = self._backend.encode(reference, add_special_tokens=False)
        passage = self._backend.encode(candidate, add_special_tokens=False)
        query.truncate(self.query_max_length, direction=self._side)
        passage.truncate(self.max_length, direction=self._side)
        excess = len(query.ids) + len(passage.ids) + self._n_special - self.max_length
        if 0 < excess < len(passage.ids):
            passage.truncate(len(passage.ids) - excess, direction=self._side)
        return self._backend.post_process(query, passage, add_special_tokens=True)

    def _batch(self, encodings) -> dict:
        import torch

        width = max(len(e.ids) for e in encodings)
        pad_id, left = self.tokenizer.pad_token_id, self.tokenizer.padding_side == "left"

        def padded(rows, fill):
            return torch.tensor([[fill] * (width - len(r)) + r if left else r + [fill] * (width - len(r)) for r in rows])

        batch = {"input_ids": padded([list(e.ids) for e in encodings], pad_id),
                 "attention_mask": padded([[1] * len(e.ids) for e in encodings], 0)}
        if self._with_type_ids:
            batch["token_type_ids"] = padded([list(e.type_ids) for e in encodings], self.tokenizer.pad_token_type_id)
        return {k: v.to(self.device) for k, v in batch.items()}

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """Sigmoid of each pair's logit, in the order of ``pairs`` (float64)."""
        import torch

        encodings = [self._encode_pair(ref, cand) for ref, cand in pairs]
        order = np.argsort([-len(e.ids) for e in encodings])  # FlagReranker's call: same ties, same batches
        logits = np.empty(len(pairs), dtype=np.float64)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                out = self.model(**self._batch([encodings[i] for i in rows])).logits.view(-1).float()
                logits[rows] = out.cpu().numpy()
        return 1.0 / (1.0 + np.exp(-logits))
