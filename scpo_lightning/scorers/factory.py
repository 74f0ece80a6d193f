"""Build a step scorer from its config name (`scorer: bge | minilm | lexical`): the one place that
knows scorers by name."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

from envs.common.rules import check_keywords
from envs.spec import EnvSpec
from scpo_lightning.scorers.base import StepScorer, check_batching

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
    """``options`` as a run builds scorer ``name``: MiniLM's calibration follows SCPO's ``theta`` and,
    unless named, the trained env's (``env``: its spec; None outside a Trainer: the options as given)."""
    options = dict(options)
    if name == "minilm":
        options["theta"] = theta
        if env is not None and "calibration" not in options and "mapping" not in options:
            if env.minilm_knots is None:
                raise ValueError(f"{field}: data.env={env.name!r} declares no MiniLM calibration "
                                 "(EnvSpec.minilm_knots); name one (calibration: alfworld|webshop) or give a mapping")
            options["calibration"] = env.name
    return options


def check_scorer_options(name: str, options: dict[str, Any], field: str = "scorer_options") -> None:
    """An unknown option names the accepted ones (at start-up too: ``callbacks.scpo.check_scorer``)."""
    check_keywords(field, f"scorer={name!r}", _scorer_class(name), options)


def check_scorer_values(name: str, options: dict[str, Any]) -> None:
    """The checks scorer ``name``'s constructor makes of ``options`` (as the run passes them, θ
    included) before it loads anything, with its messages: SCPOCallback runs them when it is built
    and against the env, so the dry run refuses what set-up would. A model folder that is not here
    is checked apart (it is listed by the dry run, not refused)."""
    if name not in ("bge", "minilm"):
        return
    defaults = inspect.signature(_scorer_class(name)).parameters

    def value(key: str) -> Any:
        return options.get(key, defaults[key].default)

    if name == "minilm":
        from scpo_lightning.scorers.minilm import cosine_map

        cosine_map(value("calibration"), value("mapping"), value("theta"))
    model_dir = options.get("model_dir")
    if name == "bge" and model_dir and (Path(model_dir).expanduser() / "config.json").is_file():
        from scpo_lightning.scorers.bge import check_max_length

        check_max_length(Path(model_dir).expanduser(), value("max_length"))
    check_batching(value("batch_size"), value("max_length"))

