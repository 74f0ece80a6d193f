"""Prefix-shared prefill (engines.prefix): the radix tree, and generation with it against without it."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from scpo_lightning.engines.base import SamplingParams
from scpo_lightning.engines.hf import HFEngine
from scpo_lightning.engines.prefix import PAD_SLACK, PrefixTree, buckets
from scpo_lightning.testing import build_tiny_llama


def test_tree_of_hand_made_prompts():
    # [1 2 3 4], [1 2 3 5], [1 2 3 4] (a duplicate), [1 2] (ends inside the shared run), [] and [7].
    # The shared run 1 2 splits at 2 (where [1 2] ends), then 3, then 4 | 5: tokens 2 + 1 + 1 + 1 + 1 = 6.
    tree = PrefixTree([[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3, 4], [1, 2], [], [7]])
    assert tree.tokens == 6
    assert tree.ends[0] == tree.ends[2] and tree.ends[4] == -1
    assert [tree.nodes[n].tokens for n in tree.path(tree.ends[1])] == [(1, 2), (3,), (5,)]
    assert [tree.nodes[n].start for n in tree.path(tree.ends[1])] == [0, 2, 3]
    assert tree.nodes[tree.ends[3]].tokens == (1, 2)


@pytest.mark.parametrize("seed", range(5))
def test_tree_rebuilds_every_sequence_and_counts_each_distinct_prefix_once(seed):
    rng = random.Random(seed)
    base = [rng.randrange(4) for _ in range(12)]
    seqs = [base[: rng.randrange(13)] + [rng.randrange(4) for _ in range(rng.randrange(6))] for _ in range(20)]
    tree = PrefixTree(seqs)
    for s, end in zip(seqs, tree.ends):
        rebuilt = [t for n in (tree.path(end) if end >= 0 else []) for t in tree.nodes[n].tokens]
        assert rebuilt == s
    # An uncompressed trie has one node per distinct non-empty prefix; the radix tree the same tokens.
    assert tree.tokens == len({tuple(s[:k]) for s in seqs for k in range(1, len(s) + 1)})
    for n in tree.nodes:  # depth and start agree with the parent chain
        parent = tree.nodes[n.parent] if n.parent >= 0 else None
        assert n.start == (parent.start + len(parent.tokens) if parent else 0)
        assert n.depth == (parent.depth + 1 if parent else 1)


def test_buckets_cover_every_index_once_within_the_padding_bound():
    lengths = [300, 5, 7, 290, 40, 41, 39, 1, 1, 2]
    groups = buckets(lengths, max_rows=3)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) <= 3
        assert len(g) == 1 or max(lengths[i] for i in g) * len(g) <= PAD_SLACK * sum(lengths[i] for i in g)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = build_tiny_llama(tmp_path_factory.mktemp("tiny"))
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def _pair(model, tok, prompts, params, allowed=None, batch=4):
    torch.set_num_threads(1)
    old = HFEngine(model, tok, generation_batch_size=batch, prefix_sharing=False)
    new = HFEngine(model, tok, generation_batch_size=batch, prefix_sharing=True)
    return old.generate(prompts, params, allowed), new.generate(prompts, params, allowed), old, new


def _max_diff(a, b, field="policy_logprobs"):
    return max(abs(x - y) for g, h in zip(a, b) for x, y in zip(getattr(g, field), getattr(h, field)))


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0, max_new_tokens=8, seed=3),
                                    SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=8, seed=5),
                                    SamplingParams(temperature=0.0, max_new_tokens=8)])
def test_shared_prefill_samples_the_same_tokens_with_the_same_logprobs(tiny, params):
    model, tok = tiny
    texts = ["you are in the middle of a room looking quickly around you", "you are in the middle of a room",
             "you are in the middle of a room", "open fridge 1 and go to", "you are in the", "x"]
    prompts = [tok.encode(t, add_special_tokens=False) for t in texts]
    prompts += [p + [5, 6] for p in prompts]  # a prompt that extends another one
    old, new, e_old, e_new = _pair(model, tok, prompts, params)
    assert [g.token_ids for g in new] == [g.token_ids for g in old]
    assert _max_diff(old, new) <= 1e-5 and _max_diff(old, new, "logprobs") <= 1e-5
    assert e_old.prefill_counts["prefilled_tokens"] == e_old.prefill_counts["prompt_tokens"] == sum(map(len, prompts))
    assert e_new.prefill_counts["prefilled_tokens"] < 0.7 * e_new.prefill_counts["prompt_tokens"]


def test_shared_prefill_in_constrained_mode(tiny):
    model, tok = tiny
    prompts = [tok.encode("you are in the middle of a room " + w, add_special_tokens=False)
               for w in ("cabinet", "fridge", "fridge", "desk", "sofa bed")]
    allowed = [["go to cabinet 1", "open fridge 1"], ["look", "go to desk 2"], ["look", "go to desk 2"],
               ["take apple from desk 1", "examine desk 1", "look"], ["go to sofa 1"]]
    old, new, _, _ = _pair(model, tok, prompts, SamplingParams(temperature=1.0, max_new_tokens=40, seed=11), allowed)
    assert [g.token_ids for g in new] == [g.token_ids for g in old]
    assert [g.text for g in new] == [g.text for g in old]
    assert _max_diff(old, new) <= 1e-5 and _max_diff(old, new, "logprobs") <= 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("env", ["alfworld", "webshop"])
def test_recorded_batches_with_smollm2(env):
    """Every recorded batch: the prompts of its step 1 (the first 4: one group's siblings, which
    diverged after one action), constrained to the actions each prompt lists. The same tokens, and
    log-probs within fp32 noise: today's path itself moves them by up to ~2e-5 when only the batch
    around a row changes (a row alone vs in its batch), so the bound on the largest difference is
    1e-4 and the mean difference must stay below 1e-5."""
    from benchmarks.iteration_speed import admissible_in
    from benchmarks.record_batches import load_batches
    from scpo_lightning.policy import load_policy

    model, tok = load_policy("smollm2-gguf")
    params = SamplingParams(temperature=1.0, max_new_tokens=48, seed=0)
    for name, batch in load_batches(env):
        rows = [i for i, t in enumerate(batch.steps) if t == 1][:4]
        prompts = [batch.prompt_ids[i] for i in rows]
        allowed = [admissible_in(tok.decode(p)) for p in prompts]
        old, new, _, e_new = _pair(model, tok, prompts, params, allowed, batch=32)
        assert [g.token_ids for g in new] == [g.token_ids for g in old], name
        diffs = np.abs(np.concatenate([np.subtract(g.policy_logprobs, h.policy_logprobs) for g, h in zip(old, new)]))
        assert diffs.max() <= 1e-4 and diffs.mean() <= 1e-5, (name, diffs.max(), diffs.mean())
        assert e_new.prefill_counts["prefilled_tokens"] < e_new.prefill_counts["prompt_tokens"], name


def test_benchmark_counts_a_call_as_the_engine_prefills_it():
    from benchmarks.prefix_prefill import call_counts

    # Two identical prompts and one sharing their first two tokens, one micro-batch: the tree over
    # all but the last tokens is [1 2] + [3] + [9] = 4 tokens, plus one last token per row = 7.
    counts = call_counts([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 9, 8]], size=32)
    assert counts == {"prompt_tokens": 12, "today_padded": 12, "shared_tokens": 7, "shared_padded": 7}
    # Micro-batches of 1 share nothing: every prompt is its own tree.
    assert call_counts([[1, 2, 3, 4], [1, 2, 3, 4]], size=1)["shared_tokens"] == 8


def test_prefix_sharing_is_an_engine_option_of_the_config(tiny):
    from scpo_lightning.engines.factory import make_engine

    model, tok = tiny
    assert make_engine("hf", model, tok, prefix_sharing=False).prefix_sharing is False
    assert make_engine("hf", model, tok).prefix_sharing is True
