"""Jump-forward constrained decoding (engines.jump) against HF generate and against exact q.

The jump path must sample from the same constrained distribution as the HF path and record the
same per-token log-probs; only the random stream differs. Checked three ways on the tiny Llama:
greedy (no randomness) gives HF's tokens and log-probs; every sampled row's log-probs equal the
ones computed independently by a teacher-forced forward and HF's own logits warpers; and the
draws follow those exact probabilities (chi-square). Plus the point of it: one forward per
branch point of the candidates, not per token.
"""

from __future__ import annotations

import math

import pytest
import torch
from scipy.stats import chisquare
from transformers import AutoModelForCausalLM, AutoTokenizer, TopPLogitsWarper

from scpo_lightning.engines.base import SamplingParams
from scpo_lightning.engines.constrained import TokenTrie, candidate_token_ids
from scpo_lightning.engines.hf import HFEngine
from scpo_lightning.engines.jump import top_p_keep
from scpo_lightning.testing import build_tiny_llama

ACTIONS = ["go to cabinet 1", "go to cabinet 10", "go to cabinet 1 now", "take apple 1 from table 2", "look"]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    folder = build_tiny_llama(tmp_path_factory.mktemp("tiny"))
    return AutoModelForCausalLM.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


def prompts_of(tok, texts):
    return [tok.encode(t, add_special_tokens=False) for t in texts]


@pytest.mark.parametrize("prefix_sharing", [True, False])
def test_greedy_jump_forward_gives_hf_generates_tokens_and_log_probs(policy, prefix_sharing):
    model, tok = policy
    prompts = prompts_of(tok, ["you see a cabinet 1, a cabinet 10", "look", "your task is to put", "go"] * 2)
    allowed = [ACTIONS, ACTIONS[:1], ACTIONS[1:4], ACTIONS[3:], ACTIONS[::2], ACTIONS[:3], ACTIONS[2:], ACTIONS]
    params = SamplingParams(temperature=0.0, max_new_tokens=64, seed=0)
    hf, jump = (HFEngine(model, tok, generation_batch_size=8, prefix_sharing=prefix_sharing, jump_forward=j).generate(
        prompts, params, allowed) for j in (False, True))
    for a, b in zip(hf, jump):
        assert b.token_ids == a.token_ids and b.text == a.text and b.finished
        assert b.logprobs == [0.0] * len(b.token_ids)  # greedy: HF's engine records no q either
        assert max(abs(x - y) for x, y in zip(a.policy_logprobs, b.policy_logprobs)) <= 1e-5


def exact(model, tok, prompt, actions, temperature, top_p):
    """Per candidate: log q of the whole response and log π per token, by a teacher-forced forward
    of prompt + candidate and HF's own warpers on the trie-masked logits (not the jump code)."""
    cands = candidate_token_ids(tok, actions, tok.eos_token_id, [tok.eos_token_id])
    trie, warp, out = TokenTrie(cands), TopPLogitsWarper(top_p), {}
    with torch.no_grad():
        for cand in cands:
            logits = model(torch.tensor([prompt + cand[:-1]])).logits[0, len(prompt) - 1:]
            node, log_q, log_pi = trie.root, 0.0, []
            for z, token in zip(logits, cand):
                log_pi.append(float(torch.log_softmax(z / temperature, -1)[token]))
                masked = torch.full_like(z, float("-inf"))
                masked[sorted(node)] = z[sorted(node)] / temperature
                log_q += float(torch.log_softmax(warp(None, masked[None])[0], -1)[token])
                node = node[token]
            out[tuple(cand)] = (log_q, log_pi)
    return out


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.8)])
def test_sampled_rows_carry_exact_log_probs_and_follow_q(policy, temperature, top_p):
    model, tok = policy
    prompt = prompts_of(tok, ["you see a cabinet 1, a cabinet 10"])[0]
    truth = exact(model, tok, prompt, ACTIONS, temperature, top_p)
    engine = HFEngine(model, tok, generation_batch_size=64)
    counts = dict.fromkeys(truth, 0)
    for seed in range(8):
        for gen in engine.generate([prompt] * 64, SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=64, seed=seed), [ACTIONS] * 64):
            log_q, log_pi = truth[tuple(gen.token_ids)]
            assert math.isclose(sum(gen.logprobs), log_q, abs_tol=1e-5)
            assert max(abs(x - y) for x, y in zip(gen.policy_logprobs, log_pi)) <= 1e-5
            counts[tuple(gen.token_ids)] += 1
    q = {c: math.exp(lq) for c, (lq, _) in truth.items()}
    assert all(counts[c] == 0 for c in q if q[c] == 0.0)  # top-p's trimmed tail is never drawn
    live = [c for c in q if q[c] > 0]
    expected = [q[c] / sum(q[k] for k in live) * sum(counts.values()) for c in live]
    assert chisquare([counts[c] for c in live], expected).pvalue > 1e-3, (counts, expected)


def test_top_p_keep_is_hf_top_p_warpers_kept_set():
    gen = torch.Generator().manual_seed(0)
    for top_p in (0.05, 0.3, 0.8, 0.95, 0.999):
        for _ in range(50):
            scores = torch.randn(7, generator=gen) * 3
            hf = torch.isfinite(TopPLogitsWarper(top_p)(None, scores[None].clone())[0])
            assert torch.equal(top_p_keep(scores, top_p), hf)


def test_a_response_costs_one_forward_per_branch_point(policy):
    """Prefill (one padded forward without prefix sharing), then one forward per branch point plus
    one: a single candidate decodes in one forward, "cabinet 1" | "cabinet 10" in about three."""
    model, tok = policy
    calls = []
    hook = model.register_forward_hook(lambda *_: calls.append(1))
    engine = HFEngine(model, tok, prefix_sharing=False)
    prompt = prompts_of(tok, ["look around"])
    try:
        gen = engine.generate(prompt, SamplingParams(temperature=1.0, max_new_tokens=64, seed=0), [ACTIONS[:1]])[0]
        assert len(calls) == 2 and len(gen.token_ids) > 5
        calls.clear()
        gen = engine.generate(prompt, SamplingParams(temperature=0.0, max_new_tokens=64), [ACTIONS[:3]])[0]
        node, branches = TokenTrie(candidate_token_ids(tok, ACTIONS[:3], tok.eos_token_id, [tok.eos_token_id])).root, 0
        for token in gen.token_ids:
            branches += len(node) > 1
            node = node[token]
        assert branches >= 1 and len(calls) == 1 + branches + 1 < len(gen.token_ids)
    finally:
        hook.remove()
