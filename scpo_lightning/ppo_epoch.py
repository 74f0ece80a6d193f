"""The PPO epoch of one RL iteration: old and reference log-probs, then sequential mini-batches (SPEC §4).

The analogue of Lightning's ``loops/optimization``: ``SCPOModule.training_step`` calls
``run_epoch`` with what it trains (``Learner``), its settings (``PPOSettings``), the batch and the
run's ``ShapingSource``, and keeps the ``EpochResult``. Advantages come from the module's
estimator once shaping is done; the update runs one optimizer step per mini-batch, gradient
accumulation over micro-batches, with manual optimisation. Old and reference log-probs are
computed micro-batch by micro-batch in exactly the grouping the update uses, so before the first
optimizer step the ratio is exactly 1 (docs/numerics.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.distributed.tensor import DTensor

from scpo_lightning import distributed
from scpo_lightning.batch import RolloutBatch
from scpo_lightning.distributed import Plan
from scpo_lightning.engines.base import RolloutEngine
from scpo_lightning.logprobs import response_logprobs
from scpo_lightning.losses import RolloutCorrection, policy_loss, rollout_correction
from scpo_lightning.shaping import ShapingSource
from scpo_lightning.update_metrics import iteration_metrics, mismatch_metrics

#: The loss terms logged as train/<name> (fields of losses.policy_loss's result).
LOSS_PARTS = ("loss", "pg_loss", "entropy", "kl", "clip_frac", "approx_kl_old", "kept_frac")


@dataclass(frozen=True)
class PPOSettings:
    """The update's settings: the module's ``model.*`` values of the same names (SPEC §4)."""

    mini_batch_rows: int
    micro_batch_rows: int
    temperature: float
    old_logprobs: str
    grad_clip: float
    clip_eps: float
    dual_clip: float
    entropy_coef: float
    kl_coef: float
    kl_clamp: float
    correction: RolloutCorrection
    prefix_sharing: bool = False  # model.logprob_prefix_sharing: every log-prob pass encodes shared prefixes once


@dataclass(frozen=True)
class Learner:
    """What one epoch updates and with what, handed over by ``SCPOModule.training_step``.

    Args:
        policy: The trained model.
        reference: The frozen initial policy of the KL term (None when model.kl_coef is 0).
        engine: The rollout engine, told when rollouts are over and when the weights moved.
        optimizer: The policy's optimizer (Lightning's wrapper).
        backward: Lightning's ``manual_backward`` (its precision and strategy hooks).
        advantages: Per-row advantages of a shaped batch (the module's estimator).
        pad_token_id: The tokenizer's pad token.
        device: Where tensors and the cross-rank reductions live.
    """

    policy: torch.nn.Module
    reference: torch.nn.Module | None
    engine: RolloutEngine
    optimizer: Any
    backward: Callable[[torch.Tensor], None]
    advantages: Callable[[RolloutBatch], np.ndarray]
    pad_token_id: int
    device: torch.device


@dataclass(frozen=True)
class EpochResult:
    """What one epoch did: per optimizer step its metrics, the iteration's scalars, the counts."""

    step_metrics: list[dict[str, float]]
    metrics: dict[str, float]
    steps: int  # optimizer steps attempted
    skipped: int  # of them, skipped for a non-finite loss or gradient


# Under FSDP every forward all-gathers parameters and every backward reduce-scatters gradients,
# and the collectives of all ranks pair up call by call. Ranks hold different numbers of rows,
# so a rank with fewer micro-batches runs idle passes (one pad token, zero loss) until the
# counts agree. On one process all of this reduces to the plain loops.
def idle_pass(learner: Learner, model: torch.nn.Module, backward: bool) -> None:
    ids = torch.full((1, 1), learner.pad_token_id, dtype=torch.long, device=learner.device)
    if backward:
        learner.backward(model(input_ids=ids).logits.sum() * 0.0)
    else:
        with torch.no_grad():
            model(input_ids=ids)


@torch.no_grad()
def planned_logprobs(learner: Learner, settings: PPOSettings, model: torch.nn.Module, batch: RolloutBatch,
                     plan: Plan) -> list[torch.Tensor | None]:
    """Per-row response log-probs (1-D tensors), no grad, micro-batch by micro-batch in the
    update's own grouping: the same rows in the same padded shapes give the same numbers
    (under bf16 autocast a row's log-probs depend on the batch it is computed in)."""
    out: list[torch.Tensor | None] = [None] * len(batch)
    for micros, _ in plan:
        for micro in micros:
            if micro is None:
                idle_pass(learner, model, backward=False)
                continue
            logp, _, mask = response_logprobs(model, [batch.prompt_ids[i] for i in micro],
                                              [batch.response_ids[i] for i in micro], learner.pad_token_id,
                                              settings.temperature, with_entropy=False, device=learner.device,
                                              prefix_sharing=settings.prefix_sharing)
            for i, lp, m in zip(micro, logp, mask):
                out[i] = lp[m.bool()]
    return out


def rollout_logprobs(settings: PPOSettings, batch: RolloutBatch, device: torch.device) -> list[torch.Tensor] | None:
    """The engine's log-probs of π per row (1-D float32 tensors), or None when it reported none."""
    rows = batch.rollout_logprobs
    if rows is None:
        if settings.old_logprobs == "rollout" or settings.correction.mode != "none":
            raise ValueError("model.old_logprobs: rollout and model.rollout_correction need the engine's log-probs of "
                             "the policy, which this batch lacks; use old_logprobs: recompute and "
                             "rollout_correction mode: none")
        return None
    return [torch.tensor(r, dtype=torch.float32, device=device) for r in rows]


def clip_gradients(policy: torch.nn.Module, grad_clip: float) -> float:
    """Clip to model.grad_clip; the norm before clipping, over the whole model on every rank."""
    params = [p for p in policy.parameters() if p.requires_grad]
    norm = torch.nn.utils.clip_grad_norm_(params, grad_clip)
    # Over FSDP2's DTensor gradients the norm is a replicated DTensor: already the global norm.
    return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)


def pad(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    return torch.stack([torch.nn.functional.pad(r, (0, width - len(r))) for r in rows])


def run_epoch(learner: Learner, settings: PPOSettings, batch: RolloutBatch, shaping: ShapingSource | None,
              steps_before: int, skipped_before: int) -> EpochResult:
    """One PPO epoch of ``batch`` on ``learner``'s policy (module docstring), shaped by ``shaping``
    (None: no SCPO). ``steps_before``, ``skipped_before``: the run's optimizer steps attempted and
    skipped so far (the steps' numbers continue from them; the logged skip total includes them)."""
    s = settings
    n = len(batch)
    t0 = time.perf_counter()
    learner.engine.release_memory()  # rollouts are done: e.g. vLLM's sleep mode frees its memory for the update
    plan = distributed.update_plan(n, s.mini_batch_rows, s.micro_batch_rows, learner.device)
    rollout = rollout_logprobs(s, batch, learner.device)
    learner.policy.eval()  # no dropout while recomputing old log-probs (SPEC §4)
    recomputed = s.old_logprobs == "recompute"
    old = planned_logprobs(learner, s, learner.policy, batch, plan) if recomputed else rollout
    # Without a reference model (kl_coef 0) the KL term has weight 0; its logged value is then
    # the drift from the rollout policy.
    ref = planned_logprobs(learner, s, learner.reference, batch, plan) \
        if learner.reference is not None else old
    learner.policy.train()
    t1 = time.perf_counter()
    if shaping is not None:
        batch.shaping = shaping.result(batch)  # the scorer ran while the log-probs were recomputed
    t2 = time.perf_counter()
    adv = torch.as_tensor(learner.advantages(batch), dtype=torch.float32, device=learner.device)
    t3 = time.perf_counter()
    opt = learner.optimizer
    fresh: list[torch.Tensor | None] = list(old) if recomputed else [None] * n  # π_old as the trainer computes it
    step_metrics: list[dict[str, float]] = []
    skipped = bad_loss_steps = 0
    for k, (micros, real) in enumerate(plan):
        # Real micro-batches of all ranks weigh equally (SPEC §4); FSDP averages gradients over ranks.
        weight = distributed.world_size() / real
        opt.zero_grad(set_to_none=True)
        loss_finite = True
        sums = dict.fromkeys(LOSS_PARTS, 0.0)
        for micro in micros:
            if micro is None:
                idle_pass(learner, learner.policy, backward=True)
                continue
            logp, entropy, mask = response_logprobs(
                learner.policy, [batch.prompt_ids[i] for i in micro], [batch.response_ids[i] for i in micro],
                learner.pad_token_id, s.temperature, with_entropy=True, prefix_sharing=s.prefix_sharing)
            width = logp.shape[1]
            old_t = pad([old[i] for i in micro], width)
            if k == 0 and not recomputed:  # the policy has not moved yet: this is π_old, recomputed
                for i, lp, m in zip(micro, logp.detach(), mask):
                    fresh[i] = lp[m.bool()]
            is_weights = pg_mask = None
            if s.correction.mode != "none":
                is_weights, pg_mask = rollout_correction(old_t, pad([rollout[i] for i in micro], width), mask,
                                                         s.correction.mode, s.correction.cap)
            out = policy_loss(logp, old_t, pad([ref[i] for i in micro], width), adv[micro], mask, entropy,
                              s.clip_eps, s.dual_clip, s.entropy_coef, s.kl_coef, s.kl_clamp,
                              is_weights=is_weights, pg_mask=pg_mask)
            # Checked before backward: a non-finite loss skips this mini-batch's step below even
            # when its gradient comes out finite. The backward still runs, because every rank must
            # run the same passes (FSDP pairs their collectives); its gradient is thrown away.
            finite = bool(torch.isfinite(out.loss.detach()))
            loss_finite &= finite
            learner.backward(out.loss * weight)
            for key in LOSS_PARTS:  # a non-finite loss is counted below, not averaged in as NaN
                sums[key] += float(getattr(out, key).detach()) / real if finite else 0.0
        grad_norm = clip_gradients(learner.policy, s.grad_clip)
        # One rank's non-finite loss skips the step on every rank (the grad norm is global already).
        reduced = distributed.all_reduce([sums[key] for key in LOSS_PARTS] + [0.0 if loss_finite else 1.0], "sum",
                                         learner.device)
        bad_loss = reduced[-1] > 0
        applied = not bad_loss and math.isfinite(grad_norm)
        if applied:
            opt.step()
        else:
            opt.zero_grad(set_to_none=True)  # reaches neither the weights nor AdamW's moments
            skipped += 1
            bad_loss_steps += bad_loss
        step_metrics.append({**dict(zip(LOSS_PARTS, reduced)), "grad_norm": grad_norm,
                             "applied": float(applied), "mini_batch": float(k),
                             "step": float(steps_before + k + 1)})
    learner.engine.sync_weights()  # the next rollouts use the updated weights (vLLM copies them in)
    metrics = iteration_metrics(step_metrics, LOSS_PARTS, adv, [t0, t1, t2, t3, time.perf_counter()],
                                skipped_before + skipped, learner.device)
    metrics.update({"train/skipped_nonfinite_loss": float(bad_loss_steps),
                    "train/skipped_nonfinite_grad": float(skipped - bad_loss_steps)})
    if rollout is not None:  # recompute: every row; rollout: the first mini-batch's rows
        metrics.update(mismatch_metrics(rollout, fresh, batch.sampling_logprobs, learner.device))
    return EpochResult(step_metrics, metrics, len(step_metrics), skipped)
