"""What ``SCPOModule.configure_model`` decides before and around loading the policy: which device
mesh to shard over, whether any computation reads the weights in bf16, and the LoRA wrapper.

Each check fails before anything loads, naming the config field and the fix.
"""

from __future__ import annotations

from typing import Any

import torch


def check_strategy(strategy: Any, lora_rank: int, reference_offload: bool) -> None:
    """The strategy rules, before any device mesh exists: ``SCPOModule.setup`` and ``--dry_run`` run them."""
    from lightning.pytorch.strategies import ModelParallelStrategy, SingleDeviceStrategy

    if isinstance(strategy, ModelParallelStrategy):
        # As configured; "auto" is what Lightning's setup_environment makes of it: every device of the node.
        tensor_parallel = strategy._tensor_parallel_size
        if (strategy.num_processes if tensor_parallel == "auto" else tensor_parallel) != 1:
            raise ValueError("trainer.strategy: ModelParallelStrategy needs tensor_parallel_size: 1 (HF models "
                             "have no tensor-parallel plan here); set data_parallel_size to the device count")
        if lora_rank > 0:
            raise ValueError("model.lora_rank > 0 is not supported with ModelParallelStrategy (LoRA under "
                             "FSDP2 is untested); train LoRA on one device or set lora_rank: 0")
        return
    if strategy is not None and not isinstance(strategy, SingleDeviceStrategy):
        # DDP/FSDP1/DeepSpeed: several backward passes and optimizer steps per training_step break
        # DDP's reducer, and FSDP1 cannot keep weights gathered for generation (scpo_lightning.sharding).
        raise ValueError(
            f"trainer.strategy: {type(strategy).__name__} is not supported; for several devices use "
            "ModelParallelStrategy (FSDP2) with data_parallel_size: <devices> and tensor_parallel_size: 1 "
            "(docs/scaling.md)")
    if reference_offload:
        raise ValueError("model.reference_offload offloads the sharded reference: it needs trainer.strategy "
                         "ModelParallelStrategy; set it to false on one device")


def is_model_parallel(strategy: Any) -> bool:
    """Whether ``strategy`` is ModelParallelStrategy (FSDP2), the one multi-device strategy supported."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    return isinstance(strategy, ModelParallelStrategy)


def data_parallel_mesh(strategy: Any, device_mesh: Any) -> Any:
    """The data-parallel device mesh under ModelParallelStrategy (``check_strategy`` passed); None on a single device."""
    from lightning.pytorch.strategies import ModelParallelStrategy

    return device_mesh["data_parallel"] if isinstance(strategy, ModelParallelStrategy) else None


def bf16_compute(trainer_precision: str, torch_dtype: str, generation_dtype: str | None,
                 val_generation_autocast: str | None = None) -> bool:
    """Whether any configured computation reads the weights in bf16 (what model.bf16_grid: auto asks):
    the trainer's autocast, the engine's generation dtype (``EngineKind.generation_dtype``: the HF
    engine's autocast, a bf16 vLLM copy), validation's generation autocast, or bf16 weights."""
    return (trainer_precision.startswith("bf16") or "bfloat16" in (generation_dtype, val_generation_autocast)
            or torch_dtype == "bfloat16")


LORA_INSTALL = "pip install -e '.[lora]'"


def with_lora(policy: torch.nn.Module, rank: int, seed: int) -> torch.nn.Module:
    """``policy`` wrapped with LoRA adapters of ``rank`` on every linear layer (peft).

    The adapters' A matrices are drawn at random: from a generator seeded with ``seed`` alone (the
    global one is left as it was), so the initialisation is the seed's, whatever ran before.
    """
    try:
        import peft
    except ImportError as exc:
        raise ImportError(f"model.lora_rank > 0 needs peft: {LORA_INSTALL}") from exc
    config = peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return peft.get_peft_model(policy, config)
