"""Weights that bf16 compute sees exactly as they are, and an LM head that never rounds its logits.

Why. Under bf16 autocast (``trainer.precision: bf16-mixed``, ``model.generation_autocast:
bfloat16``) every matmul reads the fp32 master weights rounded to bf16 (round to nearest, ties to
even). A weight whose fp32 value lies exactly halfway between two bf16 values (low 16 bits
``0x8000``) is a tie: the smallest update of either sign sends it to one neighbour or the other,
a jump of half a bf16 step (~0.2 % of the weight) whatever the learning rate. Weights dequantised
from a 4-bit GGUF have many ties (SmolLM2-135M Q4_1: 9.6 % of the linear weights), so one AdamW
step at lr 1e-6 moved the bf16 policy ~100x more than the step itself (docs/numerics.md).

``snap_to_bf16_grid_`` rounds fp32 weights onto bf16 values once, at load: the fp32 master then
*is* the bf16 model that autocast computes with, and an update changes a bf16 weight only when it
carries the fp32 value past the midpoint to the next bf16 value, by as much as the update
accumulated (the usual fp32-master / bf16-compute behaviour). ``bf16_tie_fraction`` finds models
that need it.

``fp32_output_head`` makes the LM head compute its logits in fp32 even under autocast: bf16 logits
are rounded to 1/16 to 1/8 nat at magnitudes 8 to 32, noise of the size of a PPO clip range, and
whether a logit rounds up or down then depends on the batch it was computed in. The head is cheap
where it matters (the module computes logits at response positions only, generation at the last
position), so both the sampler and the loss get unrounded logits from the bf16 body.
"""

from __future__ import annotations

import types

import torch
from torch import nn

#: Low 16 bits of an fp32 value exactly halfway between two bf16 values.
_TIE_BITS = 0x8000


def bf16_tie_fraction(model: nn.Module) -> float:
    """Share of the fp32 parameter elements that sit exactly halfway between two bf16 values."""
    ties = total = 0
    for p in model.parameters():
        if p.dtype != torch.float32:
            continue
        bits = p.detach().reshape(-1).view(torch.int32) & 0xFFFF
        ties += int((bits == _TIE_BITS).sum())
        total += p.numel()
    return ties / total if total else 0.0


def off_bf16_grid_fraction(model: nn.Module) -> float:
    """Share of the fp32 parameter elements that bf16 cannot hold exactly (0 after snapping)."""
    off = total = 0
    for p in model.parameters():
        if p.dtype != torch.float32:
            continue
        w = p.detach()
        off += int((w.to(torch.bfloat16).to(torch.float32) != w).sum())
        total += p.numel()
    return off / total if total else 0.0


@torch.no_grad()
def snap_to_bf16_grid_(model: nn.Module) -> int:
    """Round every fp32 parameter onto the nearest bf16 value in place; returns the elements changed.

    Each weight moves by at most half a bf16 step, to exactly the value bf16 autocast computed with
    before (ties go to the even neighbour, as autocast rounds them), so the bf16 model is unchanged.
    Tied parameters (shared embedding and head) are one tensor and are rounded once.
    """
    changed = 0
    for p in model.parameters():
        if p.dtype != torch.float32:
            continue
        snapped = p.to(torch.bfloat16).to(torch.float32)
        changed += int((snapped != p).sum())
        p.copy_(snapped)
    return changed


def _fp32_forward(self: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    with torch.autocast(hidden.device.type, enabled=False):
        return self._scpo_bf16_forward(hidden.to(self.weight.dtype))


def fp32_output_head(model: nn.Module) -> None:
    """Make ``model``'s output embedding (LM head) run outside autocast, in its weights' dtype.

    With fp32 weights the logits are then fp32 whatever autocast is active; with bf16 weights
    nothing changes. The forward is replaced on the instance (a bound method, so ``deepcopy``
    rebinds it to the copy); parameter names, state dict and tied weights stay as they are.
    Idempotent.
    """
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise ValueError(f"{type(model).__name__} has no output embedding with a weight; cannot keep its logits in fp32")
    if "_scpo_bf16_forward" in head.__dict__:
        return
    head._scpo_bf16_forward = head.forward
    head.forward = types.MethodType(_fp32_forward, head)


#: model.bf16_grid choices.
BF16_GRID = ("auto", "snap", "keep")
#: Above this share of tied weights, keeping them under bf16 compute is warned about.
TIE_WARN_FRACTION = 1e-3


def prepare_weights(model: nn.Module, bf16_compute: bool, mode: str) -> str:
    """Apply ``model.bf16_grid`` to freshly loaded weights; returns what was done, for the log.

    ``auto`` snaps fp32 weights onto the bf16 grid when bf16 compute is configured (training
    autocast, generation autocast or a bf16 vLLM copy) and leaves them alone otherwise; ``snap``
    always snaps; ``keep`` never does, and warns when bf16 compute meets tied weights. The LM head
    computes in fp32 in every mode (``fp32_output_head``).
    """
    if mode not in BF16_GRID:
        raise ValueError(f"model.bf16_grid must be one of {BF16_GRID}; got {mode!r}")
    fp32_output_head(model)
    ties = bf16_tie_fraction(model)
    if mode == "snap" or (mode == "auto" and bf16_compute):
        changed = snap_to_bf16_grid_(model)
        return f"weights rounded onto the bf16 grid ({changed} elements moved, {ties:.2%} had been ties)"
    if bf16_compute and ties > TIE_WARN_FRACTION:
        import warnings

        warnings.warn(f"{ties:.2%} of the policy's fp32 weights sit exactly between two bf16 values while bf16 "
                      "compute is configured: any update flips them by half a bf16 step, whatever the learning "
                      "rate (docs/numerics.md); set model.bf16_grid: auto or snap", stacklevel=2)
    return f"weights kept as loaded ({ties:.2%} bf16 ties)"
