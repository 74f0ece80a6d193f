"""Build the rollout engine named in the config (``model.engine``) around the training policy.

The one place that knows engines by name: the module resolves ``model.engine`` once to an
``EngineKind`` and asks it, never the name, what differs between engines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from envs.common.packages import require
from envs.common.rules import check_keywords
from scpo_lightning.engines.base import RolloutEngine


@dataclass(frozen=True)
class EngineKind:
    """What the module needs to know of an engine around building it (``engine_kind``).

    Args:
        name: The ``model.engine`` value.
        generation_settings: Takes model.generation_batch_size and model.generation_autocast as its
            defaults (the HF engine generates with the policy itself).
        dtype_option: The ``model.engine_options`` key of the dtype it generates in.
        policy_logprobs_free_only: Reports the policy's own log-probs only where it samples from
            the policy: free action mode at top_p 1 (vLLM's are those of what it sampled from).
    """

    name: str
    generation_settings: bool
    dtype_option: str
    policy_logprobs_free_only: bool

    def options(self, generation_batch_size: int, generation_autocast: str | None,
                engine_options: dict[str, Any] | None) -> dict[str, Any]:
        """Its keyword arguments: model.engine_options over the model's generation settings it takes."""
        defaults = dict(generation_batch_size=generation_batch_size, autocast_dtype=generation_autocast) \
            if self.generation_settings else {}
        return {**defaults, **(engine_options or {})}

    def generation_dtype(self, generation_autocast: str | None, engine_options: dict[str, Any] | None) -> str | None:
        """The dtype it is configured to generate in (None: the weights' own)."""
        default = generation_autocast if self.generation_settings else None
        return (engine_options or {}).get(self.dtype_option, default)

    def check_policy_logprobs(self, top_p: float, constrained: bool) -> None:
        """model.old_logprobs: rollout and model.rollout_correction read the policy's own log-probs
        as the engine reports them: refuse settings under which it reports none."""
        if self.policy_logprobs_free_only and (top_p < 1.0 or constrained):
            raise ValueError("model.old_logprobs: rollout / model.rollout_correction need the policy's own log-probs, "
                             f"which the {self.name} engine reports only in free mode with model.top_p 1; use "
                             "old_logprobs: recompute and rollout_correction mode: none, or model.engine: hf")


_KINDS = {"hf": EngineKind("hf", generation_settings=True, dtype_option="autocast_dtype", policy_logprobs_free_only=False),
          "vllm": EngineKind("vllm", generation_settings=False, dtype_option="dtype", policy_logprobs_free_only=True)}
ENGINES = tuple(_KINDS)


def engine_kind(name: str) -> EngineKind:
    """``model.engine`` = ``name``, resolved."""
    if name not in _KINDS:
        raise ValueError(f"model.engine must be one of {ENGINES}; got {name!r}")
    return _KINDS[name]


def _engine_class(name: str) -> type[RolloutEngine]:
    # Imported on demand: the vLLM engine module is cheap, but vLLM itself is optional.
    if name == "hf":
        from scpo_lightning.engines.hf import HFEngine

        return HFEngine
    if name == "vllm":
        from scpo_lightning.engines.vllm import VLLMEngine

        return VLLMEngine
    raise ValueError(f"model.engine must be one of {ENGINES}; got {name!r}")


def make_engine(
    name: str, policy: torch.nn.Module, tokenizer: PreTrainedTokenizerBase, **options: Any
) -> RolloutEngine:
    """``name`` is "hf" (HF ``generate`` on the policy itself) or "vllm" (``engines.vllm``).

    ``options`` are the engine's keyword arguments (``model.engine_options`` in the config);
    an unknown one is an error that lists the accepted ones.
    """
    check_engine_options(name, options)
    return _engine_class(name)(policy, tokenizer, **options)


def check_engine_options(name: str, options: dict[str, Any]) -> None:
    """An unknown option names the accepted ones (at start-up too: ``module_rules.check_module``)."""
    # the policy and tokenizer are given by the module, not by the config
    check_keywords("model.engine_options", f"the {name} engine", _engine_class(name), options,
                   given=("model", "policy", "tokenizer"))


def check_engine_installed(name: str) -> None:
    """The engine's own package is here (``model.engine: vllm`` needs vLLM): checked when the module
    is built, before any model loads, so a run without it stops at start-up and --dry_run lists it."""
    if name == "vllm":
        from scpo_lightning.engines.vllm import VLLM_INSTALL

        require("model.engine=vllm", "vllm", VLLM_INSTALL)
