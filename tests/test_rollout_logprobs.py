"""The HF engine's per-token log-probs against the trainer's recomputation (tiny model, fp32)."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from scpo_lightning.engines.base import SamplingParams
from scpo_lightning.engines.hf import HFEngine
from scpo_lightning.logprobs import mismatch_sums, response_logprobs
from scpo_lightning.precision import fp32_output_head
from scpo_lightning.testing import build_tiny_llama

ACTIONS = [["go to desk 1", "look", "open drawer 2"], ["take apple 1 from countertop 1", "examine shelf 3", "look"]]
TEXTS = ["you are in the middle of a room", "your task is to put some apple in fridge"]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = build_tiny_llama(tmp_path_factory.mktemp("tiny"))
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    fp32_output_head(model)
    return HFEngine(model, AutoTokenizer.from_pretrained(path), generation_batch_size=4)


def recompute(engine, prompts, gens, temperature):
    lp, _, mask = response_logprobs(engine.model, prompts, [g.token_ids for g in gens], engine.pad_token_id,
                                    temperature, with_entropy=False)
    return [row[m.bool()] for row, m in zip(lp, mask)]


def prompts_of(engine):
    return [engine.tokenizer.encode(t, add_special_tokens=False) for t in TEXTS * 2]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_free_mode_rollout_logprobs_equal_the_recomputed_ones(engine, temperature):
    prompts = prompts_of(engine)
    gens = engine.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=12, seed=3))
    fresh = recompute(engine, prompts, gens, temperature)
    rollout = [torch.tensor(g.policy_logprobs) for g in gens]
    abs_sum, k3_sum, gap, tokens, largest = mismatch_sums(rollout, fresh, [torch.tensor(g.logprobs) for g in gens])
    assert tokens == sum(len(g.token_ids) for g in gens) > 0
    assert largest <= 1e-4, largest  # same policy, fp32, left- vs right-padded batches
    # Free mode, top_p 1: the sampler's distribution is the policy at the temperature.
    assert abs(gap) <= 1e-4 * tokens and k3_sum <= 1e-6 * tokens


def test_top_p_and_constrained_logprobs_are_the_renormalised_sampling_distribution(engine):
    prompts = prompts_of(engine)
    gens = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=40, seed=5), allowed=ACTIONS * 2)
    fresh = recompute(engine, prompts, gens, 1.0)
    for gen, pi in zip(gens, fresh):
        q, pi_rollout = torch.tensor(gen.logprobs), torch.tensor(gen.policy_logprobs)
        assert torch.allclose(pi_rollout, pi, atol=1e-4, rtol=0)  # π is the unconstrained policy
        assert (q >= pi_rollout - 1e-6).all() and (q <= 1e-6).all()  # q = π / Z_t with Z_t ≤ 1
        assert q[-1].item() == pytest.approx(0.0, abs=1e-6)  # EOS after a complete action is forced: q = 1
    nucleus = engine.generate(prompts, SamplingParams(temperature=1.0, top_p=0.5, max_new_tokens=8, seed=5))
    assert all((torch.tensor(g.logprobs) >= torch.tensor(g.policy_logprobs) - 1e-6).all() for g in nucleus)


def test_greedy_reports_a_deterministic_choice(engine):
    gens = engine.generate(prompts_of(engine), SamplingParams(temperature=0.0, max_new_tokens=6))
    for gen in gens:
        assert gen.logprobs == [0.0] * len(gen.token_ids)
        assert all(lp <= 0.0 and math.isfinite(lp) for lp in gen.policy_logprobs)
