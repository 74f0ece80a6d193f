"""A frozen low-precision copy of the policy that validation samples from (the HF engine's ``val_copy_dtype``).

Why a copy and not ``torch.autocast``: under autocast a frozen weight is cast to bf16 again at
every call, which at a decode step's shapes costs more than the fp32 matmul it replaces
(``benchmarks/results/autocast_cast.json``), so a validation under autocast sampled no faster
than fp32. A copy pays the cast once per weight update, as a vLLM weight sync does, and every
matmul after it runs on the CPU's bf16 instructions.

Why validation only: a validation rollout never enters a loss, so sampling it from a rounded
policy changes what is measured (by the rounding of the weights, docs/numerics.md) but not what
is trained. Training rollouts stay on the policy itself, whose fp32 log-probs are the PPO ratio's
old ones (``model.old_logprobs: rollout``).
"""

from __future__ import annotations

import copy

import torch
from torch.distributed.tensor import DTensor

COPY_DTYPES = ("bfloat16", "float16")


def check_copy_dtype(field: str, dtype: str | None) -> None:
    """``dtype`` is None or one of ``COPY_DTYPES``."""
    if dtype is not None and dtype not in COPY_DTYPES:
        raise ValueError(f"{field} must be null or one of {COPY_DTYPES}, got {dtype!r}")


def low_precision_copy(model: torch.nn.Module, dtype: str) -> torch.nn.Module:
    """An eval-mode, gradient-free copy of ``model`` in ``dtype`` with its LoRA adapters merged.

    The merge happens in the copy, in the weights' own precision, before the cast: the copy is
    round(W + ΔW), the policy as trained, rounded once. ``model`` itself is left untouched (its
    adapters, dtype, mode and ``requires_grad``). A sharded (FSDP2) policy has no whole weights
    to copy outside a gather: it is refused.
    """
    if any(isinstance(p, DTensor) for p in model.parameters()):
        raise ValueError("model.engine_options.val_copy_dtype needs an unsharded policy (trainer.devices: 1); "
                         "a sharded run validates on the policy itself: leave val_copy_dtype out")
    twin = copy.deepcopy(model)
    if hasattr(twin, "merge_and_unload"):  # a PEFT model: fold each adapter into its base weight
        twin = twin.merge_and_unload()
    return twin.to(getattr(torch, dtype)).eval().requires_grad_(False)
