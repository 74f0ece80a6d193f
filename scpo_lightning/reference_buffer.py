"""Successful trajectories of earlier iterations, per task: SCPO references for groups without a success.

The paper's Conclusion proposes drawing references "from a buffer of past successes" so that a
group whose n rollouts all failed still gets step credit. A buffered reference is stored as what
the shaper compares, nothing more: its filtered step texts x*_0..x*_{m-1} (action || observation,
invalid and no-op steps removed, exactly as a sibling reference's texts are built) and its step
count (what ``reference: longest | shortest`` compares). No token ids or log-probs are kept: the
reference is a similarity template for the matcher, never a row of the update, so its age does
not make the loss off-policy (docs/buffer_and_dynamic_sampling.md: staleness).

Pure bookkeeping (no Lightning): the SCPO callback fills it after each batch's plan and puts its
state in checkpoints.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BufferedReference:
    """One stored success: its filtered step texts, its length in steps, and when it was collected."""

    texts: tuple[str, ...]
    length: int  # all steps of the trajectory, filtered ones included (the sibling rule's length)
    iteration: int  # RL iteration (trainer epoch) whose rollouts produced it


class SuccessBuffer:
    """Per task id, the newest ``per_task`` successes, newest first; entries older than ``max_age``
    iterations are dropped (None = kept until newer successes push them out)."""

    def __init__(self, per_task: int, max_age: int | None = None):
        if per_task < 1:
            raise ValueError(f"per_task={per_task} must be >= 1")
        if max_age is not None and max_age < 1:
            raise ValueError(f"max_age={max_age} must be null or >= 1")
        self.per_task, self.max_age = per_task, max_age
        self._entries: dict[str, list[BufferedReference]] = {}

    def __len__(self) -> int:
        return sum(map(len, self._entries.values()))

    @property
    def tasks(self) -> int:
        return len(self._entries)

    def add(self, task: str, refs: Iterable[BufferedReference]) -> None:
        """One batch's successes of ``task``, in batch order: they go in front (newest first)."""
        merged = [*refs, *self._entries.get(task, ())][: self.per_task]
        if merged:
            self._entries[task] = merged

    def candidates(self, task: str, iteration: int) -> list[BufferedReference]:
        """The references iteration ``iteration`` may use for ``task``: collected before it and at
        most ``max_age`` iterations before it, newest first (so "ties: the first" is the newest)."""
        return [r for r in self._entries.get(task, ()) if r.iteration < iteration and self._fresh(r, iteration)]

    def prune(self, iteration: int) -> None:
        """Drop what iteration ``iteration`` and every later one can no longer use (too old)."""
        for task in list(self._entries):
            kept = [r for r in self._entries[task] if self._fresh(r, iteration)]
            if kept:
                self._entries[task] = kept
            else:
                del self._entries[task]

    def _fresh(self, ref: BufferedReference, iteration: int) -> bool:
        return self.max_age is None or iteration - ref.iteration <= self.max_age

    def state_dict(self) -> dict[str, Any]:
        """Plain lists, strings and ints (a checkpoint loads them with ``weights_only``)."""
        return {task: [[list(r.texts), r.length, r.iteration] for r in refs] for task, refs in self._entries.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._entries = {task: [BufferedReference(tuple(texts), int(length), int(it)) for texts, length, it in refs]
                         for task, refs in state.items()}
