"""RolloutDataModule's settings rules (``data.*``): run first thing in its ``__init__``, before anything loads.

They sit in this file beside datamodule.py, not inside it, only because datamodule.py is near the
project's 300-line limit. This file imports what the rules name (the env registry, the rollout and
dynamic-sampling settings) and never datamodule.py, so the two form no import cycle; the class
passes itself in, so each message quotes the default of its own signature. The splits are checked
once the env options are (``envs.registry.EnvSetup.check_splits``, from the DataModule).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envs.common.rules import FLAG, MAPPING, TEXT, TEXTS, Rule, check, count, instance, one_of, optional, positive
from envs.registry import SPECS
from scpo_lightning.dynamic_sampling import DynamicSampling
from scpo_lightning.rollout import RolloutConfig


def check_datamodule(cls: type, values: Mapping[str, Any]) -> None:
    """``cls`` (RolloutDataModule) is being built with ``values``, its ``__init__`` locals."""
    # Built at each call: data.env may name any env registered by then (envs.registry.SPECS).
    check("data", cls, values, {
        "env": one_of(*sorted(SPECS)), "env_options": MAPPING, "train_split": TEXT,
        "train_tasks": optional(count(1)),
        "val_split": Rule(lambda v: TEXT.ok(v) or (TEXTS.ok(v) and len(v) > 0), "a split name or a non-empty list of them"),
        "val_start_index": count(0), "groups_per_batch": count(1), "group_size": count(2),
        "val_episodes": count(0), "val_batch_episodes": count(1), "rollout": instance(RolloutConfig),
        "workers": count(0), "worker_backend": one_of("process", "ray"), "ray_address": optional(TEXT),
        "step_timeout_s": positive(), "reset_timeout_s": positive(), "seed": count(0), "progress": FLAG,
        "dynamic_sampling": instance(DynamicSampling),
    })
    spec, rollout = SPECS[values["env"]], values["rollout"]
    family = spec.prompt.name
    if rollout is not None and rollout.env not in (None, family):
        raise ValueError(f"data.rollout.env={rollout.env!r} but data.env={values['env']!r} uses the {family!r} "
                         f"prompts; set data.rollout.env: {family}")
    unknown = [e for e in (rollout.exclude_actions if rollout else ()) if spec.commands and e.split()[0] not in spec.commands]
    if unknown:
        raise ValueError(f"data.rollout.exclude_actions: {unknown} is no command of data.env={values['env']!r}, so it "
                         f"would exclude nothing; its commands are {list(spec.commands)}: fix or remove it")
    limit, options = spec.step_limit, values["env_options"] or {}
    horizon = (rollout or RolloutConfig(env=family)).max_steps
    if limit in options and options[limit] != horizon:
        raise ValueError(f"data.env_options.{limit}={options[limit]!r} contradicts data.rollout.max_steps={horizon}: "
                         f"the rollout horizon is set once, in data.rollout.max_steps (the env gets it from there); "
                         f"remove data.env_options.{limit}")
