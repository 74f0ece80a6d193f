"""Prefix-shared log-prob passes (logprobs.shared_prefix_logits) against the unshared layout."""

from __future__ import annotations

import copy
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from scpo_lightning.logprobs import response_logprobs
from scpo_lightning.model_setup import with_lora
from scpo_lightning.testing import build_tiny_llama


@pytest.fixture(scope="module")
def lora_model(tmp_path_factory):
    # init_std 0.4: peaked distributions, so that a wrong key or position shows in the log-probs.
    path = build_tiny_llama(tmp_path_factory.mktemp("tiny"), init_std=0.4)
    model = with_lora(AutoModelForCausalLM.from_pretrained(path), 4, seed=0)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # LoRA starts with B = 0, which zeroes A's gradient: give B values
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(0.05 * torch.randn(param.shape, generator=gen))
    return model


def _rows():
    # Siblings of one prompt, a prompt that extends another, one that shares only a template
    # token, a one-token prompt, and responses of different lengths (one empty).
    rng = np.random.default_rng(0)
    common = [int(t) for t in rng.integers(5, 60, 20)]
    prompts = [common, common, common + [7, 8, 9], common[:5] + [11, 12], [13], common[:1]]
    responses = [[21, 22, 23], [24], [25, 26], [27, 28, 29, 30], [31, 32], []]
    return prompts, responses


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_logprobs_and_entropies_match_the_unshared_pass(lora_model, temperature):
    torch.set_num_threads(1)
    prompts, responses = _rows()
    lora_model.eval()
    with torch.no_grad():
        old = response_logprobs(lora_model, prompts, responses, 0, temperature, with_entropy=True)
        new = response_logprobs(lora_model, prompts, responses, 0, temperature, with_entropy=True, prefix_sharing=True)
    assert torch.equal(old[2], new[2])  # the same response mask
    keep = old[2].bool()
    assert keep.sum() == sum(map(len, responses))
    # The random tiny model puts log-probs near -30 (at temperature 0.7 lower still), where one fp32
    # ulp is 3.8e-6: beside the 1e-5 floor allow 1e-6 of the value (8 ulp), as AVX-512 kernels sum
    # the shorter shared rows in another order than AVX2 ones (1.1e-5 seen at -31.5).
    torch.testing.assert_close(new[0][keep], old[0][keep], rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(new[1][keep], old[1][keep], rtol=1e-6, atol=1e-5)
    assert old[0][keep].std() > 0.1  # peaked, distinct log-probs: the comparison can fail


def _lora_grads(model, prefix_sharing):
    prompts, responses = _rows()
    model.train()
    model.zero_grad(set_to_none=True)
    logp, entropy, mask = response_logprobs(model, prompts, responses, 0, 1.0, with_entropy=True,
                                            prefix_sharing=prefix_sharing)
    weights = torch.linspace(-1.0, 2.0, logp.numel()).reshape(logp.shape)  # rows weigh differently
    ((logp * weights + 0.1 * entropy) * mask).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad and p.grad is not None}


def test_shared_pass_gives_the_unshared_gradient(lora_model):
    # A shared node's activations feed every row that shares it; backward sums those rows'
    # gradients into it, which is what the unshared pass computes row by row. The two passes sum
    # the same terms in another order, so they differ by rounding alone: in fp32 by up to 1.0e-5 of
    # a gradient's largest entry (84 ulp on an Intel AVX-512 CPU; less on AMD's AVX2), too close to
    # any fixed fp32 bound to be a test. The model runs in fp64 here: what is left, 2.8e-7 of the
    # scale, is the log-softmax, which both passes run in fp32 by design (logprobs.py `.float()`),
    # so 1e-5 of the scale leaves a 36x margin, while one prompt token changed in one row moves a
    # gradient by 0.13 of its scale.
    torch.set_num_threads(1)
    model = copy.deepcopy(lora_model).to(torch.float64)
    old, new = _lora_grads(model, False), _lora_grads(model, True)
    assert old.keys() == new.keys() and len(old) > 0
    for name in old:
        scale = float(old[name].abs().max())
        assert scale > 0, name
        assert float((old[name] - new[name]).abs().max()) <= 1e-5 * scale, name


def test_rows_without_a_shared_prefix_still_match(lora_model):
    torch.set_num_threads(1)
    lora_model.eval()
    prompts, responses = [[5, 6, 7], [8, 9], [10]], [[11, 12], [13], [14, 15, 16]]
    with torch.no_grad():
        old = response_logprobs(lora_model, prompts, responses, 0, 1.0, with_entropy=False)
        new = response_logprobs(lora_model, prompts, responses, 0, 1.0, with_entropy=False, prefix_sharing=True)
    keep = old[2].bool()
    assert (old[0][keep] - new[0][keep]).abs().max() <= 1e-5
