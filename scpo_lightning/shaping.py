"""The one hand-off from step shaping to the update: a ``ShapingSource``.

SCPO's callback (``callbacks.scpo.SCPOCallback``) is the shipped source. It starts shaping a
training batch in ``on_train_batch_start``, scoring in a worker thread; the PPO epoch recomputes
log-probs meanwhile and asks ``result(batch)`` just before the advantages, so the update waits
only if scoring is not done. Dynamic sampling asks ``creditable_groups`` while it collects.

The module and the DataModule each take the trainer's source once, in their ``setup``
(``shaping_source``); nothing here knows the callback, which sits above this package.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable
from typing import Any

from envs.spec import EnvSpec
from scpo_lightning.batch import RolloutBatch
from scpo_lightning.credit import ShapingResult


class ShapingSource(abc.ABC):
    """Shapes the step returns of each training batch (SPEC §3)."""

    @abc.abstractmethod
    def check_module(self, pl_module: Any) -> None:
        """Start-up check against the module (in ``setup`` and in the dry run, before any model
        loads): raises ValueError, naming the field, when the module cannot use this shaping."""

    @abc.abstractmethod
    def check_data(self, spec: EnvSpec | None) -> None:
        """Start-up check against the trained env's spec (None: replayed batches of no declared
        env), in ``setup`` and in the dry run: raises ValueError naming the field."""

    @abc.abstractmethod
    def creditable_groups(self, batch: RolloutBatch) -> set[int]:
        """Groups of a just-collected ``batch`` whose failed siblings it will credit, decided before
        any scoring: dynamic sampling keeps them although their episode scores do not vary."""

    @abc.abstractmethod
    def result(self, batch: RolloutBatch) -> ShapingResult:
        """The shaping of ``batch``, started when its training step began; blocks until it is done.
        A scorer failure gives a result without credit (the batch trains unshaped) or raises, as
        the source is configured."""


def shaping_source(callbacks: Iterable[object]) -> ShapingSource | None:
    """The trainer's one shaping callback, or None (plain GiGPO/GRPO/RLOO)."""
    sources = [cb for cb in callbacks if isinstance(cb, ShapingSource)]
    if len(sources) > 1:
        # Each would shape the same batch and only one result could train: refuse, naming them.
        raise ValueError(f"trainer.callbacks: {len(sources)} shaping callbacks "
                         f"({', '.join(type(s).__name__ for s in sources)}); keep one")
    return sources[0] if sources else None
