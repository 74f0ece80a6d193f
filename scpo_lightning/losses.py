"""The policy loss: PPO clip with dual clip, entropy bonus and k3 KL to the reference (SPEC §4),
and the optional rollout correction for a sampler whose log-probs differ from the trainer's.

All per-token tensors have shape [batch, response_len]; ``mask`` is 1 on response tokens that
count (EOS included) and 0 on padding. Aggregation is ``token-mean`` over the micro-batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# exp() of a log-ratio beyond ±20 changes no clipped loss value (the clip or the dual clip binds,
# and k3 exceeds its ±10 clamp), but could overflow to inf and make the gradient NaN.
_LOG_RATIO_LIMIT = 20.0


def token_log_probs(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log π(token) under ``logits / temperature`` (the rollout temperature, SPEC §4)."""
    if temperature <= 0:
        raise ValueError(f"`temperature` must be > 0; got {temperature}")
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


def entropy_from_logits(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Per-token entropy H = logsumexp(z) - Σ softmax(z) z of the temperature-scaled logits z."""
    z = logits.float() / temperature
    return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(-1)


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """token-mean: the mean over the tokens where ``mask`` is 1."""
    return (x * mask).sum() / mask.sum().clamp_min(1)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor, clamp: float = 10.0) -> torch.Tensor:
    """Low-variance KL estimate per token: kl = ref − logp; k3 = exp(kl) − kl − 1, clamped to ±clamp."""
    kl = (ref_logp - logp).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    return (torch.exp(kl) - kl - 1.0).clamp(-clamp, clamp)


def ppo_dual_clip(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_eps: float = 0.2,
    dual_clip: float = 3.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO loss with dual clip; returns (loss, 1.0 where the ε-clip was active).

    L = max(−A·ρ, −A·clip(ρ, 1−ε, 1+ε)); for A < 0 additionally min(L, −A·c), which bounds the
    loss of a very large ratio on a negative advantage (dual clip, c > 1).
    """
    if dual_clip <= 1.0:
        raise ValueError(f"`dual_clip` must be > 1; got {dual_clip}")
    ratio = torch.exp((logp - old_logp).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT))
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps)
    loss = torch.maximum(unclipped, clipped)
    loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * dual_clip), loss)
    return loss, (clipped > unclipped).float()


CORRECTIONS = ("none", "tis", "mask")


@dataclass(frozen=True)
class RolloutCorrection:
    """model.rollout_correction: how the PPO term corrects for rollout-vs-train log-prob mismatch.

    Args:
        mode: none (the published recipe), tis (truncated importance sampling: weight min(ρ, cap)) or mask (drop tokens whose ρ leaves [1/cap, cap]); ρ = π_old / π_rollout per token.
        cap: Truncation / mask bound C of ρ (> 1).
    """

    mode: str = "none"
    cap: float = 2.0

    def __post_init__(self) -> None:
        if self.mode not in CORRECTIONS:
            raise ValueError(f"model.rollout_correction.mode must be one of {CORRECTIONS}; got {self.mode!r}")
        if not 1.0 < self.cap < math.inf:
            raise ValueError(f"model.rollout_correction.cap must be a finite number > 1; got {self.cap}")


def rollout_correction(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, mode: str, cap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token importance weights for the PPO term, and the mask of tokens it keeps.

    The rollouts were sampled by the engine's π_rollout, the PPO ratio is taken against the
    trainer's recomputed π_old; where their numerics differ (bf16 sampler, vLLM kernels), the
    samples are slightly off-policy for π_old. With ρ_t = π_old(y_t) / π_rollout(y_t) (no
    gradient):

    - ``tis``, truncated importance sampling (F. Yao, L. Liu et al., "Your Efficient RL Framework
      Secretly Brings You Off-Policy RL Training", 2025): the per-token PPO loss is multiplied by
      w_t = min(ρ_t, cap); every token stays in the token-mean.
    - ``mask``, masked importance sampling (the token-level variant of J. Liu et al., "When Speed
      Kills Stability: Demystifying RL Collapse from the Training-Inference Mismatch", 2025): a
      token whose ρ_t leaves [1/cap, cap] is dropped from the PPO term, numerator *and*
      denominator of its token-mean (rejected tokens must not dilute the rest); kept tokens get
      w_t = ρ_t, which is inside the bounds.
    - ``none``: w_t = 1, all tokens kept (the published recipe).

    The entropy and KL terms are not reweighted: they are regularisers of π_θ itself.
    """
    if mode not in CORRECTIONS:
        raise ValueError(f"rollout correction mode must be one of {CORRECTIONS}; got {mode!r}")
    if cap <= 1.0:
        raise ValueError(f"rollout correction cap must be > 1; got {cap}")
    keep = mask.to(old_logp.dtype)
    if mode == "none":
        return torch.ones_like(old_logp), keep
    rho = torch.exp((old_logp - rollout_logp).detach().clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT))
    if mode == "tis":
        return rho.clamp(max=cap), keep
    inside = (rho >= 1.0 / cap) & (rho <= cap)
    return torch.where(inside, rho, torch.zeros_like(rho)), keep * inside.to(keep.dtype)


@dataclass(frozen=True)
class LossOutput:
    loss: torch.Tensor  # the scalar to backpropagate
    pg_loss: torch.Tensor
    entropy: torch.Tensor
    kl: torch.Tensor
    clip_frac: torch.Tensor
    approx_kl_old: torch.Tensor  # token-mean of (old_logp − logp): drift since the rollout
    kept_frac: torch.Tensor  # share of response tokens the rollout correction kept in the PPO term


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    entropy: torch.Tensor,
    clip_eps: float = 0.2,
    dual_clip: float = 3.0,
    entropy_coef: float = 0.001,
    kl_coef: float = 0.01,
    kl_clamp: float = 10.0,
    is_weights: torch.Tensor | None = None,
    pg_mask: torch.Tensor | None = None,
) -> LossOutput:
    """loss = token-mean(w · PPO) − entropy_coef · token-mean(H) + kl_coef · token-mean(k3).

    ``advantages`` is per token ([batch, len], the row's A repeated on every response token) or per
    row ([batch], broadcast here). ``is_weights`` (w, default 1) and ``pg_mask`` (the tokens the
    PPO term averages over, default ``mask``) come from ``rollout_correction``.
    """
    mask = mask.to(logp.dtype)
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)
    pg_mask = mask if pg_mask is None else pg_mask.to(logp.dtype) * mask
    pg, clipped = ppo_dual_clip(logp, old_logp, advantages, clip_eps, dual_clip)
    if is_weights is not None:
        pg = pg * is_weights.detach()
    pg_loss = masked_mean(pg, pg_mask)
    ent = masked_mean(entropy, mask)
    kl = masked_mean(k3_kl(logp, ref_logp, kl_clamp), mask)
    return LossOutput(
        loss=pg_loss - entropy_coef * ent + kl_coef * kl,
        pg_loss=pg_loss.detach(),
        entropy=ent.detach(),
        kl=kl.detach(),
        clip_frac=masked_mean(clipped, mask).detach(),
        approx_kl_old=masked_mean((old_logp - logp).detach(), mask),
        kept_frac=pg_mask.sum().detach() / mask.sum().clamp_min(1),
    )
