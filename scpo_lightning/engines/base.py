"""The interface between the rollout loop and a generation engine."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings for one generate call (SPEC §1: training 1.0 / 1.0 / 512; validation 0.4)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: int | None = None  # per-call seed; None = the engine's running generator

    def at_step(self, t: int) -> SamplingParams:
        """These settings for step ``t`` of an episode: a seed of its own, drawn from (seed, t).

        Engines reseed their generator from ``seed`` on every call, so one seed for every step of
        a rollout would repeat the same random draws at each step: a row would sample every action
        at the same quantiles of its distribution, not independently. ``None`` stays ``None``.
        """
        if self.seed is None:
            return self
        mixed = int(np.random.SeedSequence([self.seed, t]).generate_state(1, np.uint64)[0] >> np.uint64(1))
        return replace(self, seed=mixed)


@dataclass(frozen=True)
class Generation:
    """One response: its token ids (EOS included when generated), decoded text and per-token log-probs.

    ``logprobs[k]``: log-prob of token k under the distribution it was *sampled* from, the
    behaviour policy: the policy's logits at the rollout temperature, after the constrained-mode
    mask and top-p, renormalised (0.0 for greedy decoding, which is deterministic).
    ``policy_logprobs[k]``: log-prob of token k under the policy itself at the rollout
    temperature, over the whole vocabulary (no mask, no top-p), as the engine computed it: the
    quantity the trainer recomputes for the PPO ratio, so the two differ only by numerics. In free
    mode with top_p 1 (the paper's training setting) both lists are the same distribution.
    """

    token_ids: list[int]
    text: str
    finished: bool  # True when EOS ended it, False when max_new_tokens cut it
    logprobs: list[float] | None = None
    policy_logprobs: list[float] | None = None


class RolloutEngine(abc.ABC):
    """Generates responses for a batch of tokenised prompts with the policy's current weights.

    Everything the module calls on an engine is declared here: ``generate`` around each rollout
    step, ``autocast`` and ``validating`` around validation collections, ``release_memory`` / ``sync_weights``
    around the update, ``state_dict`` / ``load_state_dict`` at checkpoints.
    """

    #: Generates with the training module's own parameters (not a copy): the module gathers
    #: sharded weights around each collection so the engine sees whole tensors.
    shares_policy_weights: bool = False

    @abc.abstractmethod
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams,
        allowed: Sequence[Sequence[str]] | None = None,
    ) -> list[Generation]:
        """One response per prompt.

        ``allowed`` (constrained action mode): per prompt, the admissible actions; the response
        is then forced to be ``<action>`` + exactly one of them + ``</action>`` + EOS.
        """

    def sync_weights(self) -> None:  # noqa: B027 - engines sharing the module's weights need nothing
        """Make the next ``generate`` use the training policy's current weights."""

    def release_memory(self) -> None:  # noqa: B027 - engines without memory of their own have none to free
        """Between rollouts and the update: free what the engine holds until the next ``sync_weights``."""

    @contextlib.contextmanager
    def autocast(self, dtype: str | None) -> Iterator[None]:
        """Within the block, generate under ``torch.autocast`` in ``dtype`` (model.val_generation_autocast);
        None = as configured. Engines whose compute dtype is fixed when they load accept only None
        (SCPOModule refuses val_generation_autocast for them at start-up: module_rules.py)."""
        if dtype is not None:
            raise ValueError(f"{type(self).__name__} cannot switch to autocast {dtype!r} per collection")
        yield

    @contextlib.contextmanager
    def validating(self) -> Iterator[None]:
        """Within the block, collections are validation ones, which never enter a loss: an engine may
        sample them from a cheaper copy of the policy (the HF engine's ``val_copy_dtype``)."""
        yield

    def state_dict(self) -> dict:
        """What a resume needs to continue bit for bit (e.g. the sampling generator); {} = nothing."""
        return {}

    def load_state_dict(self, state: dict) -> None:  # noqa: B027 - an engine without state has nothing to restore
        """Restore ``state_dict``'s result."""


def check_generate_args(prompts: Sequence[Sequence[int]], params: SamplingParams,
                        allowed: Sequence[Sequence[str]] | None) -> None:
    """The argument checks every engine's ``generate`` starts with."""
    if params.temperature < 0:
        raise ValueError(f"SamplingParams.temperature must be >= 0 (0 = greedy), got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {params.top_p}")
    if params.max_new_tokens < 1:
        raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {params.max_new_tokens}")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token; got an empty prompt")
    if allowed is not None and len(allowed) != len(prompts):
        raise ValueError(f"allowed has {len(allowed)} entries for {len(prompts)} prompts; give one list per prompt")
