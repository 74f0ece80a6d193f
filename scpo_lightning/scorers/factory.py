"""Build a step scorer from its config name (`scorer: bge | minilm | lexical`): the one place that
knows scorers by name."""

from __future__ import annotations

import importlib
from typing import Any

from envs.common.rules import check_keywords
from envs.spec import EnvSpec
from scpo_lightning.scorers.base import StepScorer

#: Config name -> what it is; the classes are imported on demand (bge/minilm pull in torch).
SCORERS = {
    "bge": "the paper's BGE cross-encoder (needs a local model_dir; backend flagembedding: extra `bge`, or transformers)",
    "minilm": "offline all-MiniLM-L6-v2 cosine, calibrated to the BGE scale (extra `minilm`)",
    "lexical": "word-overlap Dice score; no dependencies, no model",
}


#: Config name -> (module, class); imported on demand, so an unused scorer's packages are never loaded.
_CLASSES = {"bge": ("scpo_lightning.scorers.bge", "BGEScorer"),
            "minilm": ("scpo_lightning.scorers.minilm", "MiniLMScorer"),
            "lexical": ("scpo_lightning.scorers.lexical", "LexicalScorer")}


def _scorer_class(name: str) -> type:
    # A name in SCORERS without an entry here is a KeyError, never a silent fallback to another scorer.
    module, cls = _CLASSES[name]
    return getattr(importlib.import_module(module), cls)


def make_scorer(name: str, **options: Any) -> StepScorer:
    """The scorer called ``name`` built with ``options`` (its constructor's keyword arguments).

    For ``minilm``, ``mapping`` may be a dict of `CosineMap` fields. Unknown names or options
    raise ValueError listing what is accepted.
    """
    if name not in SCORERS:
        choices = "; ".join(f"{k}: {v}" for k, v in SCORERS.items())
        raise ValueError(f"scorer={name!r} is not a known scorer. Choose one of {choices}")
    check_scorer_options(name, options)
    return _scorer_class(name)(**options)


def run_options(name: str, options: dict[str, Any], theta: float, env: EnvSpec | None,
                field: str = "scorer_options") -> dict[str, Any]:
    """``options`` as a run builds scorer ``name`` (its ``ScorerRules.run_options``: MiniLM's
    calibration follows ``theta`` and the trained env's; ``env`` None outside a Trainer)."""
    return _scorer_class(name).run_options(options, theta, env, field)


def check_scorer_options(name: str, options: dict[str, Any], field: str = "scorer_options") -> None:
    """An unknown option names the accepted ones (at start-up too, through ``check_scorer``)."""
    check_keywords(field, f"scorer={name!r}", _scorer_class(name), options)


def check_scorer(name: str, options: dict[str, Any], run: dict[str, Any], field: str = "scorer_options") -> None:
    """Start-up check of scorer ``name`` before anything loads: its option names, then its own rules
    (``ScorerRules.check_config``) of ``options`` as given and of ``run`` as the run passes them, with
    the constructor's messages. SCPOCallback runs it when built and against the env, so the dry run
    refuses what set-up would; what this machine lacks raises FileNotFoundError / ImportError (listed
    by the dry run)."""
    check_scorer_options(name, options, field)
    _scorer_class(name).check_config(options, run)
