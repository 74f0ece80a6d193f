"""scpo_lightning.attention: grouped-query SDPA on CPU gives HF sdpa's numbers bit for bit."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from scpo_lightning.attention import NAME, use_cpu_gqa
from scpo_lightning.engines.base import SamplingParams
from scpo_lightning.engines.hf import HFEngine
from scpo_lightning.logprobs import response_logprobs
from scpo_lightning.testing import build_tiny_llama


@pytest.fixture(scope="module")
def gqa_path(tmp_path_factory):
    # 4 query heads sharing 2 key/value heads; peaked distributions, so that a wrong head shows.
    return build_tiny_llama(tmp_path_factory.mktemp("gqa"), hidden_size=256, num_heads=4, num_kv_heads=2,
                            init_std=0.4)


def _pair(path):
    hf = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
    ours = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
    assert use_cpu_gqa(ours) and ours.config._attn_implementation == NAME
    assert hf.config._attn_implementation == "sdpa"
    return hf, ours, AutoTokenizer.from_pretrained(path)


PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [5, 6, 7], [12, 13, 14, 15, 16, 17, 18, 19, 20], [21]]  # padded batches


def test_generation_and_logprobs_are_bit_identical(gqa_path):
    torch.set_num_threads(1)
    hf, ours, tok = _pair(gqa_path)
    params = SamplingParams(temperature=1.0, max_new_tokens=10, seed=4)
    for share in (False, True):  # the left-padded prefill and the prefix-shared one: masks either way
        a = HFEngine(hf, tok, generation_batch_size=4, prefix_sharing=share).generate(PROMPTS, params)
        b = HFEngine(ours, tok, generation_batch_size=4, prefix_sharing=share).generate(PROMPTS, params)
        assert [g.token_ids for g in a] == [g.token_ids for g in b]
        assert [g.policy_logprobs for g in a] == [g.policy_logprobs for g in b]
    responses = [[30, 31, 32], [33], [34, 35], [36, 37, 38, 39]]
    with torch.no_grad():
        for share in (False, True):
            x = response_logprobs(hf, PROMPTS, responses, 0, 1.0, True, prefix_sharing=share)
            y = response_logprobs(ours, PROMPTS, responses, 0, 1.0, True, prefix_sharing=share)
            assert torch.equal(x[0], y[0]) and torch.equal(x[1], y[1])
            assert x[0][x[2].bool()].std() > 0.1  # distinct log-probs: a wrong head would show


def test_with_gradients_the_update_runs_hf_sdpa_itself(gqa_path, monkeypatch):
    import scpo_lightning.attention as attention

    torch.set_num_threads(1)
    hf, ours, _ = _pair(gqa_path)
    calls = []
    real = attention.sdpa_attention_forward
    monkeypatch.setattr(attention, "sdpa_attention_forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    grads = []
    for model in (hf, ours):
        model.train()
        logp, _, mask = response_logprobs(model, PROMPTS, [[30, 31], [32], [33, 34], [35]], 0, 1.0, False)
        (logp * mask).sum().backward()
        grads.append([p.grad for p in model.parameters()])
    assert calls  # the grad path went to HF's function ...
    assert all(torch.equal(a, b) for a, b in zip(*grads))  # ... so the gradients are the same bits


def test_models_without_grouped_heads_or_sdpa_are_left_alone(tmp_path, gqa_path):
    plain = AutoModelForCausalLM.from_pretrained(build_tiny_llama(tmp_path / "mha"), attn_implementation="sdpa")
    assert not use_cpu_gqa(plain) and plain.config._attn_implementation == "sdpa"
    eager = AutoModelForCausalLM.from_pretrained(gqa_path, attn_implementation="eager")
    assert not use_cpu_gqa(eager) and eager.config._attn_implementation == "eager"
