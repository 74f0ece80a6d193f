"""The scorer interface the SCPO shaper calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class StepScorer(Protocol):
    """Scores (reference text, candidate text) pairs.

    ``score`` receives every pair one shaping pass needs in one call (so an implementation can
    de-duplicate and batch across the whole rollout batch) and returns a float array of the same
    length with values in [0, 1], element i scoring ``pairs[i]``. The pair order matters: the
    first text is the reference-side (earlier, for M*) step, as in SPEC §3.4-3.5.
    """

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray: ...


def check_batching(batch_size: int, max_length: int) -> None:
    """``scorer_options.batch_size`` and ``max_length`` of a model scorer (bge, minilm): checked by the
    scorer before it loads and, through ``factory.check_scorer_values``, at start-up and in the dry run."""
    if batch_size < 1:
        raise ValueError(f"scorer_options.batch_size must be >= 1, got {batch_size}")
    if max_length < 8:
        raise ValueError(f"scorer_options.max_length must be >= 8 tokens, got {max_length}")
