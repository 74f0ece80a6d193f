"""Rollout generation with HF ``generate`` on the training module's own policy (CPU and GPU).

The engine holds a reference to the policy ``nn.Module`` that is being trained, so every call
generates with the current weights (validation may sample from a low-precision copy instead,
``val_copy_dtype``, which ``sync_weights`` marks stale). During a call the model
is in eval mode (no dropout) under ``torch.no_grad``; its previous train/eval mode is restored
afterwards, also when generation fails.

Sampling is exactly ``SamplingParams``: temperature (0 means greedy), nucleus ``top_p``, no top-k,
no repetition penalty; the model's own ``generation_config`` defaults (e.g. Qwen's top_k=20,
temperature 0.7) are ignored on purpose so that rollouts sample from the policy the loss assumes.
Randomness comes from a per-call seed (``params.seed``, or the next draw of the engine's own
generator) applied inside ``torch.random.fork_rng``, so generation neither consumes nor perturbs
the training RNG, and the engine's generator state can be checkpointed (``state_dict``).

Constrained action mode and log-probs
-------------------------------------
With ``allowed``, the response is forced to ``<action>`` + one admissible action +
``</action>`` + EOS: a prefix-trie mask (``engines.constrained``) sets every other token's logit to
``-inf`` *before* temperature and top-p, so each token is drawn from the policy's probabilities
(at the rollout temperature) renormalised over the allowed continuations, ``q(y_t) = pi(y_t) / Z_t``
with ``Z_t`` the policy's mass on the allowed set (top-p then trims the tail of ``q``, not of
``pi``). Tokens with a single allowed continuation (the tags, the tail of a unique action, EOS)
are forced: ``q = 1``.

Each ``Generation`` carries two per-token log-probs (``engines.base.Generation``), recorded
while sampling from the very logits the sampler used: ``logprobs`` under ``q`` (the behaviour
policy: mask, temperature, top-p) and ``policy_logprobs`` under ``pi`` at the rollout temperature
(before the mask). Training recomputes the old log-probs (SPEC §4) of the sampled tokens under the
*unconstrained* policy ``pi``, and the PPO ratio, KL and entropy are all computed on ``pi``;
``policy_logprobs`` is what the rollout-vs-train mismatch and the rollout correction compare with.
What that implies in constrained mode, where ``log q - log pi = -log Z_t >= 0``:

- ``grad log pi(y_t) = grad log q(y_t) + grad log Z_t``: the update is the policy gradient of the
  constrained sampler plus a term that, with a positive advantage, raises the policy's mass on
  the allowed set (format and admissible actions) and, with a negative one, lowers it.
- Forced tokens carry only that second term: rows with positive advantage teach the
  ``<action>…</action>`` format (like behaviour cloning of the format), negative ones push it
  down. Neither changes what the sampler emits at those positions (it is forced either way);
  they act on the rest of the policy only through the shared weights.
- The samples are off-policy for ``pi`` (they come from ``q``) and the ratio does not correct
  for it: the objective is a heuristic, not an unbiased estimator of the free-mode objective. The
  KL term measures ``pi`` against the reference, not ``q``. The rollout correction
  (``model.rollout_correction``) corrects numerics (``pi`` as sampled vs ``pi`` as trained),
  not this: weighting by ``pi / q = Z_t`` would all but erase the forced tokens.

It is a convenience for small models that never write the paper's format zero-shot (e.g.
SmolLM2-135M on CPU); results comparable to the paper use free mode. Prompt prefixes that rows
share are encoded once (``prefix_sharing``, ``engines.prefix``); constrained responses decode a
forward per branch point of the candidates, not per token (``jump_forward``, ``engines.jump``).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence

import torch
from transformers import (
    GenerationConfig,
    LogitsProcessorList,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)
from transformers.generation.utils import GenerationMixin

# transformers 5 (the vLLM environment, .venv-vllm) dropped the `use_model_defaults` argument.
_NO_MODEL_DEFAULTS = (
    {"use_model_defaults": False} if "use_model_defaults" in inspect.signature(GenerationMixin.generate).parameters else {}
)

from scpo_lightning.engines.base import Generation, RolloutEngine, SamplingParams, check_generate_args
from scpo_lightning.engines.constrained import TokenTrie, TrieLogitsProcessor, candidate_token_ids
from scpo_lightning.engines.jump import jump_decode, padded_prefill
from scpo_lightning.engines.prefix import shared_prefill
from scpo_lightning.engines.recorder import TokenLogprobRecorder
from scpo_lightning.engines.sampler_copy import check_copy_dtype, low_precision_copy


def _as_id_list(value: int | Sequence[int] | None) -> list[int]:
    return [] if value is None else [int(value)] if isinstance(value, int) else [int(v) for v in value]


class HFEngine(RolloutEngine):
    """Batched HF ``generate`` on ``model`` (left padding, micro-batches of ``generation_batch_size``).

    Args:
        model: the policy being trained (an HF causal LM); training collections use it itself.
        tokenizer: its tokenizer; needs an EOS token. Pad falls back to EOS when absent.
        generation_batch_size: prompts per ``generate`` call; bounds the KV-cache memory.
        seed: seeds the engine's generator, which draws a seed for calls without ``params.seed``.
        autocast_dtype: run generation under ``torch.autocast`` in this dtype (``"bfloat16"``),
            leaving the weights as they are. On CPUs with AMX/AVX512-BF16 it makes the prompt
            prefill of an fp32 policy ~3.5x faster; the sampler's probabilities then differ
            slightly from the fp32 ones training recomputes (as with bf16 vLLM rollouts).
            ``None``: the model's own dtype.
        prefix_sharing: encode each distinct prompt prefix of a micro-batch once and copy its
            keys and values into every row that shares it (``engines.prefix``); the same
            log-probs up to float noise. False: every row's whole prompt, as one padded batch.
        jump_forward: constrained mode encodes each row's forced tokens in one forward and draws
            only where the candidates branch (``engines.jump``): the same distribution, log-probs
            up to float noise, another random stream. False: HF ``generate``, a forward per token.
        val_copy_dtype: validation collections (``validating``) sample from a copy of the policy
            in this dtype, adapters merged, rebuilt after each ``sync_weights``
            (``engines.sampler_copy``); training collections always use the policy itself.
    """

    shares_policy_weights = True  # training rollouts generate with the policy itself

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        generation_batch_size: int = 16,
        seed: int = 0,
        autocast_dtype: str | None = None,
        prefix_sharing: bool = True,
        jump_forward: bool = True,
        val_copy_dtype: str | None = None,
    ):
        if generation_batch_size < 1:
            raise ValueError(f"generation_batch_size must be >= 1, got {generation_batch_size}")
        if tokenizer.eos_token_id is None:
            raise ValueError("the tokenizer has no eos_token; set one (tokenizer.eos_token = ...)")
        self.model = model
        self.tokenizer = tokenizer
        self.generation_batch_size = generation_batch_size
        self.eos_token_id = int(tokenizer.eos_token_id)
        pad = tokenizer.pad_token_id
        self.pad_token_id = self.eos_token_id if pad is None else int(pad)
        # Any of these ends a response: chat models often list several (Qwen: <|im_end|>, <|endoftext|>).
        model_eos = _as_id_list(getattr(getattr(model, "generation_config", None), "eos_token_id", None))
        self.stop_token_ids = sorted({self.eos_token_id, *model_eos})
        self._generator = torch.Generator().manual_seed(seed)
        if autocast_dtype not in (None, "bfloat16", "float16"):
            raise ValueError(f"autocast_dtype must be None, 'bfloat16' or 'float16', got {autocast_dtype!r}")
        self.autocast_dtype = autocast_dtype
        self.prefix_sharing = prefix_sharing
        self.jump_forward = jump_forward
        check_copy_dtype("val_copy_dtype", val_copy_dtype)
        self.val_copy_dtype = val_copy_dtype
        self._copy: torch.nn.Module | None = None  # built at the first validation after the weights moved
        self._validating = False
        #: Prompt tokens asked for, and prefilled (real, and with padding), over every call.
        self.prefill_counts = dict.fromkeys(("prompt_tokens", "prefilled_tokens", "padded_tokens"), 0)

    @contextlib.contextmanager
    def autocast(self, dtype: str | None) -> Iterator[None]:
        before = self.autocast_dtype
        try:
            if dtype is not None:
                self.autocast_dtype = dtype
            yield
        finally:
            self.autocast_dtype = before  # restored, also after a failed collection

    @contextlib.contextmanager
    def validating(self) -> Iterator[None]:
        before = self._validating
        self._validating = True
        try:
            yield
        finally:
            self._validating = before

    def sync_weights(self) -> None:
        self._copy = None  # the weights moved: the validation copy is rebuilt when next needed

    def _sampler(self) -> torch.nn.Module:
        if not (self._validating and self.val_copy_dtype):
            return self.model
        if self._copy is None:
            self._copy = low_precision_copy(self.model, self.val_copy_dtype)
        return self._copy

    def state_dict(self) -> dict:
        """The engine's generator state, for exact resumption from a checkpoint."""
        return {"generator": self._generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self._generator.set_state(state["generator"])
        self._copy = None  # a checkpoint's weights follow: no copy of the ones before

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        allowed: Sequence[Sequence[str]] | None = None,
    ) -> list[Generation]:
        check_generate_args(prompts, params, allowed)
        seed = params.seed
        if seed is None:
            seed = int(torch.randint(2**62, (1,), generator=self._generator))
        # Prompts of similar length share a micro-batch (less padding); results keep the input order.
        # The order is the same with and without prefix sharing, so both draw the same random numbers.
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        results: list[Generation | None] = [None] * len(prompts)
        model = self._sampler()
        device = _device_of(model)
        was_training = model.training
        model.eval()
        try:
            devices = [] if device.type == "cpu" else [device]  # the CPU state is always forked
            autocast = (
                torch.autocast(device.type, dtype=getattr(torch, self.autocast_dtype))
                if self.autocast_dtype
                else contextlib.nullcontext()
            )
            with torch.no_grad(), autocast, torch.random.fork_rng(devices=devices, device_type=device.type):
                torch.manual_seed(seed)
                for start in range(0, len(order), self.generation_batch_size):
                    chunk = order[start : start + self.generation_batch_size]
                    chunk_allowed = None if allowed is None else [allowed[i] for i in chunk]
                    generations = self._generate_chunk(model, [prompts[i] for i in chunk], params, chunk_allowed,
                                                       device)
                    for i, generation in zip(chunk, generations):
                        results[i] = generation
        finally:
            model.train(was_training)
        return results  # type: ignore[return-value]  # every slot was filled above

    def _generate_chunk(
        self,
        model: torch.nn.Module,
        prompts: list[Sequence[int]],
        params: SamplingParams,
        allowed: list[Sequence[str]] | None,
        device: torch.device,
    ) -> list[Generation]:
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_token_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):  # left padding: every response starts at column `width`
            input_ids[row, width - len(prompt) :] = torch.as_tensor(list(prompt), dtype=torch.long)
            attention_mask[row, width - len(prompt) :] = 1

        greedy = params.temperature == 0
        # First: pi at the rollout temperature, from the logits as the model gave them.
        policy_recorder = TokenLogprobRecorder(1.0 if greedy else params.temperature)
        processors = LogitsProcessorList([policy_recorder])
        max_new_tokens = params.max_new_tokens
        if allowed is not None:
            candidates = [candidate_token_ids(self.tokenizer, a, self.eos_token_id, self.stop_token_ids) for a in allowed]
            longest = max(len(c) for row in candidates for c in row)
            if longest > params.max_new_tokens:
                raise ValueError(f"constrained mode: an admissible action needs {longest} response tokens but "
                                 f"SamplingParams.max_new_tokens is {params.max_new_tokens}; raise the max response length")
            max_new_tokens = longest  # every candidate fits, nothing is cut
            tries = [TokenTrie(c) for c in candidates]
            processors.append(TrieLogitsProcessor(tries, width, self.eos_token_id))
        # The warpers come after the trie mask, so temperature and top-p act on the allowed tokens only.
        if not greedy and params.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(params.temperature))
        if not greedy and params.top_p < 1.0:
            processors.append(TopPLogitsWarper(params.top_p))
        # Last: q, the distribution the token is drawn from (HF samples softmax of these scores).
        sampler_recorder = TokenLogprobRecorder(1.0)
        processors.append(sampler_recorder)
        config = GenerationConfig(do_sample=not greedy, max_new_tokens=max_new_tokens, eos_token_id=self.stop_token_ids,
                                  pad_token_id=self.pad_token_id, use_cache=True,
                                  **({} if greedy else {"top_k": 0}))  # HF's default top_k=50 would truncate sampling
        cache, real, padded = {}, sum(len(p) for p in prompts), width * len(prompts)
        if self.prefix_sharing and width > 1:  # generate then encodes each prompt's last token only
            cache["past_key_values"], shared = shared_prefill(model, prompts, self.pad_token_id, device,
                                                              self.generation_batch_size)
            real, padded = shared["tree_tokens"] + len(prompts), shared["padded_tokens"] + len(prompts)
        for key, value in zip(self.prefill_counts, (sum(len(p) for p in prompts), real, padded)):
            self.prefill_counts[key] += value
        if allowed is not None and self.jump_forward:
            past = cache["past_key_values"] if cache else padded_prefill(model, prompts, self.pad_token_id, device)
            rows = jump_decode(model, past, prompts, tries, params.temperature, params.top_p, self.pad_token_id,
                               device)
            return [self._to_generation(*row) for row in rows]
        # synced_gpus=False: each rank generates for its own envs, never in lock-step; HF would
        # otherwise sync every token of an FSDP2 model (whose weights the module has gathered).
        out = model.generate(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                  generation_config=config, logits_processor=processors, synced_gpus=False,
                                  **cache, **_NO_MODEL_DEFAULTS)
        policy_logp = policy_recorder.finish(out).tolist()
        sampler_logp = sampler_recorder.finish(out).tolist()
        sampler_logp = [[0.0] * len(row) for row in sampler_logp] if greedy else sampler_logp
        return [self._to_generation(row, lp, sp)
                for row, lp, sp in zip(out[:, width:].tolist(), policy_logp, sampler_logp)]

    def _to_generation(self, new_tokens: list[int], policy_logp: list[float], sampler_logp: list[float]) -> Generation:
        stops = set(self.stop_token_ids)
        end = next((k for k, tok in enumerate(new_tokens) if tok in stops), None)
        # After a row's EOS, HF fills the rest of the batch width with padding: cut it off.
        n = len(new_tokens) if end is None else end + 1
        text = self.tokenizer.decode(new_tokens[:n], skip_special_tokens=True)
        return Generation(token_ids=new_tokens[:n], text=text, finished=end is not None,
                          logprobs=sampler_logp[:n], policy_logprobs=policy_logp[:n])


def _device_of(model: torch.nn.Module) -> torch.device:
    device = getattr(model, "device", None)
    return device if isinstance(device, torch.device) else next(model.parameters()).device
