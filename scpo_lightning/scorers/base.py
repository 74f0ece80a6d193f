"""The scorer interface the SCPO shaper calls."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

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


class ScorerRules:
    """What the factory (``scorers/factory.py``) asks of a scorer class before anything loads; each
    scorer states its own rules here, beside its constructor, and the factory never names one.

    ``run_options`` is ``scorer_options`` as a run passes them to the constructor (SCPO's ``theta``
    and the trained env's ``envs.spec.EnvSpec`` are offered, None outside a Trainer: a scorer takes
    what it needs; the core math imports this module, so it names no env type). ``check_config`` makes
    the constructor's checks of them, with its messages, at start-up and in the dry run (a
    resource this machine lacks raises FileNotFoundError or ImportError, which the dry run lists).
    """

    @classmethod
    def run_options(cls, options: Mapping[str, Any], theta: float, env: Any, field: str) -> dict[str, Any]:
        return dict(options)

    @classmethod
    def check_config(cls, options: Mapping[str, Any], run: Mapping[str, Any]) -> None:
        """``options`` as configured, ``run`` as ``run_options`` makes them (for the trained env)."""


def option_value(cls: type, options: Mapping[str, Any]) -> Callable[[str], Any]:
    """``key`` -> its value in ``options``, else the default of ``cls``'s constructor."""
    defaults = inspect.signature(cls).parameters
    return lambda key: options.get(key, defaults[key].default)


def check_batching(batch_size: int, max_length: int) -> None:
    """``scorer_options.batch_size`` and ``max_length`` of a model scorer (bge, minilm): checked by the
    scorer before it loads and, through its ``ScorerRules.check_config``, at start-up and in the dry run."""
    if batch_size < 1:
        raise ValueError(f"scorer_options.batch_size must be >= 1, got {batch_size}")
    if max_length < 8:
        raise ValueError(f"scorer_options.max_length must be >= 8 tokens, got {max_length}")
