"""FSDP2 sharding of the policy and the frozen reference (``ModelParallelStrategy``), CPU or CUDA.

``shard`` applies ``fully_shard`` to every decoder layer and then to the root, the layout FSDP2
is designed for: a layer's parameters are all-gathered just before it runs and freed after it
(the root's embeddings and head stay gathered until the backward, FSDP2's default for the root).

Generation is different from training: HF ``generate`` runs one forward per new token, and each
rank runs its own rollouts, so ranks make different numbers of forward calls. Any collective
inside generation would then pair a rank's call with another rank's unrelated one and hang.
``gathered`` therefore all-gathers every layer once (the same calls on every rank), keeps the
weights gathered while the engine generates (no collective at all until it exits), and frees
them afterwards; the HF engine also passes ``synced_gpus=False`` for the same reason.

The legacy ``FullyShardedDataParallel`` (Lightning's ``strategy: fsdp``) cannot keep weights
gathered across forwards of a FULL_SHARD module, so HF generation under it would all-gather per
token and deadlock as above; it also needs a GPU even to construct, so CI could never run it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of an HF model: instances of its ``_no_split_modules`` classes."""
    names = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(f"{type(model).__name__} declares no decoder layer class (_no_split_modules); "
                         "cannot shard it layer by layer")
    return layers


def is_sharded(model: nn.Module | None) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def shard(model: nn.Module, mesh, offload: bool = False) -> None:
    """``fully_shard`` each decoder layer, then the root, over the 1-D data-parallel ``mesh``.

    ``offload``: keep the parameter shards in CPU memory (FSDP2 ``CPUOffloadPolicy``, pinned on
    CUDA); FSDP2 copies them to the GPU for each layer's forward. Meant for the frozen reference;
    on a CPU mesh the shards are in CPU memory anyway.
    """
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    policy = CPUOffloadPolicy(pin_memory=mesh.device_type == "cuda") if offload else OffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=mesh, reshard_after_forward=True, offload_policy=policy)
    # The root keeps its weights gathered from forward to backward; a frozen model has no backward
    # that would free them, so its root is resharded right after each forward like the layers.
    frozen = not any(p.requires_grad for p in model.parameters())
    fully_shard(model, mesh=mesh, reshard_after_forward=frozen, offload_policy=policy)


@contextlib.contextmanager
def gathered(model: nn.Module) -> Iterator[None]:
    """Hold ``model``'s full weights on every rank while the block runs; no collectives inside.

    Entering is collective (one all-gather per sharded module, in module order on every rank).
    Without sharding it does nothing.
    """
    if not is_sharded(model):
        yield
        return
    from torch.distributed.fsdp import FSDPModule

    sharded = [m for m in model.modules() if isinstance(m, FSDPModule)]
    layers = [m for m in sharded if m is not model]
    for module in sharded:
        module.unshard()
    for module in layers:
        module.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for module in layers:
            module.set_reshard_after_forward(True, recurse=False)
        for module in sharded:
            module.reshard()  # frees the gathered weights; local, no collective


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The full (unsharded) state dict on CPU; collective when sharded, so call it on every rank."""
    if not is_sharded(model):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
