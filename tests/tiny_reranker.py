"""A tiny random XLM-RoBERTa cross-encoder saved like a bge-reranker-v2-m3 folder (nothing is fetched).

Shared by tests/test_scorers_bge.py (in .venv) and tests/vllm_bge_check.py (in .venv-vllm), so
both environments score the very same folder. Works with transformers 4 and 5.
"""

from __future__ import annotations

from pathlib import Path

WORDS = "go to countertop fridge 1 2 open you see a apple nothing happens the is on in arrive at".split()
PAIRS = [
    ("go to fridge 1 || you arrive at fridge 1", "go to fridge 1 || you arrive at fridge 1"),
    ("open fridge 1 || you see a apple 1", "open fridge 1 || nothing happens"),
    ("go to countertop 2", "the apple is on the countertop 1 you see a apple 2 in fridge 1"),
    ("nothing happens", "go"),
    ("you see", "arrive at countertop 1 || on the countertop 1 you see a apple 1"),
]
#: Longer pairs (and unknown words) for the truncation rules: reference cut to 3/4 of max_length,
#: candidate cut so that the pair fits, or left whole when it is too short to absorb the cut.
LONG_PAIRS = [
    (" ".join(WORDS * 3), " ".join(reversed(WORDS * 2))),
    ("open the fridge 1 then heat a tomato in microwave 1", " ".join(WORDS[::-1])),
    (" ".join(WORDS[:5]), " ".join(WORDS * 4)),
    (" ".join(WORDS * 4), "go"),
]


def build_tiny_reranker(directory: str | Path) -> Path:
    """Save a 1-layer XLM-RoBERTa sequence classifier (1 label) and an XLM-R-style fast tokenizer.

    The tokenizer is built like bge-reranker-v2-m3's: a Unigram model over ``▁``-prefixed pieces
    (the words above, plus single letters and digits, so unknown words split into pieces), the
    Metaspace pre-tokenizer and the ``<s> A </s></s> B </s>`` pair template. transformers 5 loads an
    XLM-RoBERTa tokenizer only from a Unigram vocabulary.
    """
    import string

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import XLMRobertaConfig, XLMRobertaForSequenceClassification, XLMRobertaTokenizerFast

    directory = Path(directory)
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    pieces = [f"▁{w}" for w in dict.fromkeys(WORDS + ["||"])] + list(string.ascii_lowercase + string.digits)
    pieces += ["▁"] + [f"▁{c}" for c in string.ascii_lowercase if f"▁{c}" not in pieces]
    vocab = [(t, 0.0) for t in specials] + [(t, -1.0 if len(t) > 2 else -8.0) for t in pieces]
    backend = Tokenizer(models.Unigram(vocab, unk_id=3, byte_fallback=False))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tokenizer = XLMRobertaTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", sep_token="</s>",
        cls_token="<s>", unk_token="<unk>", pad_token="<pad>", mask_token="<mask>",
    )
    torch.manual_seed(0)
    config = XLMRobertaConfig(
        vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=80, num_labels=1, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, initializer_range=0.5,  # wide init: scores spread out
    )
    XLMRobertaForSequenceClassification(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
