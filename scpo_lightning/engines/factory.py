"""Build the rollout engine named in the config (``model.engine``) around the training policy."""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from envs.common.packages import require
from envs.common.rules import check_keywords
from scpo_lightning.engines.base import RolloutEngine

ENGINES = ("hf", "vllm")


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
