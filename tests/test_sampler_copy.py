"""The HF engine's validation copy (``val_copy_dtype``, engines.sampler_copy) on the tiny Llama with LoRA.

Validation must sample from round_bf16(W + s·B·A), the policy as trained rounded once, built here
by hand from the adapter matrices (not by peft's merge); training collections must sample from the
policy itself, bit for bit as without the option; a weight update reaches the copy at sync_weights.
"""

from __future__ import annotations

import contextlib
import copy

import peft
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from scpo_lightning.engines.base import SamplingParams
from scpo_lightning.engines.hf import HFEngine
from scpo_lightning.model_setup import with_lora
from scpo_lightning.testing import build_tiny_llama

ACTIONS = ["go to cabinet 1", "go to cabinet 10", "take apple 1 from table 2", "look"]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=64, seed=0)


@pytest.fixture()
def lora_policy(tmp_path):
    folder = build_tiny_llama(tmp_path)
    model = with_lora(AutoModelForCausalLM.from_pretrained(folder), rank=4, seed=0)
    with torch.no_grad():  # B starts at 0 (the adapter adds nothing): give it a value to merge
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))) * 0.5)
    return model, AutoTokenizer.from_pretrained(folder)


def merged_by_hand(model: peft.PeftModel) -> torch.nn.Module:
    """A plain bf16 copy of the base model whose every adapted linear holds round(W + s·B·A)."""
    plain = copy.deepcopy(model.get_base_model())
    with torch.no_grad():
        for name, module in list(plain.named_modules()):
            if isinstance(module, peft.tuners.lora.LoraLayer):
                delta = (module.lora_B["default"].weight @ module.lora_A["default"].weight) * module.scaling["default"]
                module.base_layer.weight.copy_(module.base_layer.weight + delta)
                parent, _, child = name.rpartition(".")
                setattr(plain.get_submodule(parent), child, module.base_layer)  # drop the adapter wrapper
    return plain.to(torch.bfloat16).eval()


def generate(engine, tok, validating: bool, allowed=None):
    prompts = [tok.encode(t, add_special_tokens=False) for t in ["you see a cabinet 1", "look", "go", "your task"]]
    with engine.validating() if validating else contextlib.nullcontext():
        return engine.generate(prompts, GREEDY, allowed)


@pytest.mark.parametrize("allowed", [None, [ACTIONS, ACTIONS[:2], ACTIONS[1:], ACTIONS[::2]]])
def test_validation_samples_the_rounded_merged_policy_and_training_the_policy_itself(lora_policy, allowed):
    model, tok = lora_policy
    engine = HFEngine(model, tok, generation_batch_size=4, val_copy_dtype="bfloat16")
    by_hand = HFEngine(merged_by_hand(model), tok, generation_batch_size=4)
    plain = HFEngine(model, tok, generation_batch_size=4)
    val, expected = generate(engine, tok, True, allowed), generate(by_hand, tok, False, allowed)
    assert [g.token_ids for g in val] == [g.token_ids for g in expected]
    assert [g.policy_logprobs for g in val] == [g.policy_logprobs for g in expected]
    train, fp32 = generate(engine, tok, False, allowed), generate(plain, tok, False, allowed)
    assert [(g.token_ids, g.policy_logprobs) for g in train] == [(g.token_ids, g.policy_logprobs) for g in fp32]
    # the copy differs from the policy (else this test could not tell them apart) ...
    assert [g.policy_logprobs for g in val] != [g.policy_logprobs for g in train]
    # ... and the policy itself is untouched: fp32, its adapters trainable, the base frozen
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert all(p.requires_grad == ("lora_" in n) for n, p in model.named_parameters())


def test_a_weight_update_reaches_the_copy_at_sync_weights(lora_policy):
    model, tok = lora_policy
    engine = HFEngine(model, tok, generation_batch_size=4, val_copy_dtype="bfloat16")
    before = generate(engine, tok, True)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(-3.0)
    assert [g.policy_logprobs for g in generate(engine, tok, True)] == [g.policy_logprobs for g in before]  # stale
    engine.sync_weights()
    after, expected = generate(engine, tok, True), generate(HFEngine(merged_by_hand(model), tok, 4), tok, False)
    assert [g.policy_logprobs for g in after] == [g.policy_logprobs for g in expected] != [g.policy_logprobs for g in before]


def test_an_unknown_copy_dtype_is_refused_naming_the_option(lora_policy):
    model, tok = lora_policy
    with pytest.raises(ValueError, match=r"val_copy_dtype must be null or one of \('bfloat16', 'float16'\), got 'int8'"):
        HFEngine(model, tok, val_copy_dtype="int8")
