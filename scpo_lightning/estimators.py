"""Advantage estimators as components: ``model.estimator`` names one (SPEC §2; scpo_lightning/gigpo.py).

An estimator maps one iteration's rows to one advantage per row. It declares whether it reads the
step credit SCPO writes (``batch.shaped_returns``, G̃): SCPO refuses at start-up one that does not,
since it would score every pair and train on nothing of it. Pure: numpy only, no Lightning.

``model.estimator`` is ``gigpo``, ``grpo``, ``rloo``, the import path of an ``Estimator``
subclass (``package.module.Class``) for one of your own, or, as LightningCLI writes components,
``{class_path: scpo_lightning.estimators.GiGPO, init_args: {...}}``. The setting stays plain
data (a name or a mapping), so checkpoints hold no objects (weights-only loading).
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from envs.common.rules import check_keywords
from scpo_lightning.gigpo import check_similarity_thresh, gigpo_advantage, grpo_advantage, rloo_advantage


class Estimator(abc.ABC):
    """Rows -> advantages. ``rows`` has the ``RolloutBatch`` fields the estimator reads."""

    #: Reads SCPO's credit (``shaped_returns`` G̃, against ``step_returns`` G) when it is there.
    reads_step_credit: ClassVar[bool]

    @abc.abstractmethod
    def __call__(self, rows: Any, mode: str, omega: float) -> np.ndarray:
        """Per-row A with group normalisation ``mode`` (model.norm_mode) and weight ω (model.omega)."""


class GiGPO(Estimator):
    """A = A_E + ω A_S, the step level over G̃ when SCPO shaped the batch (SPEC §2.7, §3.9).

    Args:
        similarity_thresh: null (the paper): a step group is the rows of an episode group with the
            identical anchor; a value in (0, 1) merges anchors whose difflib ratio reaches it, first
            fit in row order (verl-agent's ``enable_similarity``, 0.95 in its recipes; gigpo.py).
    """

    reads_step_credit = True
    similarity_thresh: float | None = None

    def __init__(self, similarity_thresh: float | None = None):
        check_similarity_thresh(similarity_thresh, "model.estimator.init_args.similarity_thresh")
        self.similarity_thresh = similarity_thresh

    def __call__(self, rows: Any, mode: str, omega: float) -> np.ndarray:
        returns = rows.shaped_returns if rows.shaped_returns is not None else rows.step_returns
        return gigpo_advantage(rows.episode_scores, returns, rows.group_ids, rows.anchors, mode, omega,
                               similarity_thresh=self.similarity_thresh)


class GRPO(Estimator):
    """A = A_E(x) + ω A_E(G̃ - G): SCPO's credit through a step term of its own (gigpo.py)."""

    reads_step_credit = True

    def __call__(self, rows: Any, mode: str, omega: float) -> np.ndarray:
        return grpo_advantage(rows.episode_scores, rows.group_ids, mode, shaped_returns=rows.shaped_returns,
                              step_returns=rows.step_returns, omega=omega)


class RLOO(Estimator):
    """Leave-one-out baseline on x, and on SCPO's credit G̃ - G weighed by ω (gigpo.py); no ``mode``."""

    reads_step_credit = True

    def __call__(self, rows: Any, mode: str, omega: float) -> np.ndarray:
        return rloo_advantage(rows.episode_scores, rows.traj_returns, rows.traj_ids, rows.group_ids,
                              shaped_returns=rows.shaped_returns, step_returns=rows.step_returns, omega=omega)


#: The short names of ``model.estimator``.
ESTIMATORS: dict[str, type[Estimator]] = {"gigpo": GiGPO, "grpo": GRPO, "rloo": RLOO}


def estimator_class(name: str) -> type[Estimator]:
    """The class ``model.estimator`` names: a short name, or ``package.module.Class``."""
    if name in ESTIMATORS:
        return ESTIMATORS[name]
    fix = f"use one of {tuple(ESTIMATORS)} or the import path of an Estimator subclass (package.module.Class)"
    module, _, attr = name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), attr) if module else None
    except (ImportError, AttributeError):
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, Estimator)):
        raise ValueError(f"model.estimator={name!r} names no estimator; {fix}")
    return cls


def build_estimator(spec: str | Mapping[str, Any]) -> Estimator:
    """The estimator ``model.estimator`` describes: a name or import path, or a mapping with
    ``class_path`` and optional ``init_args`` (the class's keyword arguments)."""
    if isinstance(spec, str):
        return estimator_class(spec)()
    if not isinstance(spec, Mapping) or "class_path" not in spec or set(spec) - {"class_path", "init_args"}:
        raise ValueError(f"model.estimator={spec!r}: give a name ({', '.join(ESTIMATORS)}), an import path, or "
                         "{class_path: package.module.Class, init_args: {...}}")
    cls = estimator_class(str(spec["class_path"]))
    init_args = dict(spec.get("init_args") or {})
    check_keywords("model.estimator.init_args", cls.__name__, cls, init_args)
    return cls(**init_args)


def check_reads_step_credit(estimator: Estimator) -> None:
    """SCPO's start-up check: its credit reaches the update only through an estimator that reads it."""
    if not type(estimator).reads_step_credit:
        raise ValueError(f"SCPOCallback needs an estimator that reads its step credit, but model.estimator "
                         f"({type(estimator).__name__}) declares reads_step_credit = False: SCPO would score every "
                         "pair and train on none of it; set model.estimator: gigpo (or grpo, rloo), or remove "
                         "the SCPOCallback")
