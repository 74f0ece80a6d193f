"""Start-up checks of every numeric and choice setting: one rule per config field.

Each config class checks its values first thing in ``__init__`` (the classes of this package with
a ``check_*`` function below, the env option classes with ``check`` and their own rules), so a bad
value fails when the class is built: at start-up and in ``--dry_run`` (which builds every object),
before any model, env or game loads, with one ``ValueError`` that names the field, the value, what
the value must be and the default. Nothing here imports the project at import time, so ``envs``
can use it. tests/test_config_validation.py walks every ``__init__`` parameter of every config
class and fails for a field that it has no case for.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: model.old_logprobs choices.
OLD_LOGPROBS = ("recompute", "rollout")


@dataclass(frozen=True)
class Rule:
    ok: Callable[[Any], bool]
    what: str  # completes "<field> must be ..."


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           high_open: bool = False, integer: bool = False, finite: bool = False) -> Rule:
    """A number within bounds (NaN never passes; ``finite`` also rejects ±inf)."""
    def ok(v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)) or v != v:
            return False
        if finite and not math.isfinite(v):
            return False
        if low is not None and not (v > low if low_open else v >= low):
            return False
        return high is None or (v < high if high_open else v <= high)

    kind = "an integer" if integer else "a finite number" if finite else "a number"
    if low is not None and high is not None:
        bounds = f" in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    elif low is not None:
        bounds = f" {'>' if low_open else '>='} {low}"
    else:
        bounds = "" if high is None else f" {'<' if high_open else '<='} {high}"
    return Rule(ok, kind + bounds)


def positive() -> Rule:
    return number(0, low_open=True, finite=True)


def count(low: int = 0) -> Rule:
    return number(low, integer=True)


def one_of(*choices: str) -> Rule:
    return Rule(lambda v: v in choices, f"one of {choices}")


def optional(rule: Rule) -> Rule:
    """``rule`` or null."""
    return Rule(lambda v: v is None or rule.ok(v), f"null or {rule.what}")


def pair(rule: Rule) -> Rule:
    return Rule(lambda v: isinstance(v, Sequence) and not isinstance(v, str) and len(v) == 2 and all(map(rule.ok, v)),
                f"two numbers, each {rule.what.removeprefix('a number ')}")


FLAG = Rule(lambda v: isinstance(v, bool), "true or false")
TEXT = Rule(lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string")
MAPPING = Rule(lambda v: v is None or isinstance(v, Mapping), "null or a mapping of option names to values")
TEXTS = Rule(lambda v: isinstance(v, Sequence) and not isinstance(v, str) and all(TEXT.ok(x) for x in v),
             "a list of non-empty strings")


def instance(cls: type) -> Rule:
    return Rule(lambda v: v is None or isinstance(v, cls), f"null or {cls.__name__} settings")


def check(prefix: str, cls: type, values: Mapping[str, Any], rules: Mapping[str, Rule]) -> None:
    """Every value of ``values`` that has a rule obeys it; the first that does not raises."""
    params = inspect.signature(cls).parameters
    for name, rule in rules.items():
        value = values[name]
        if not rule.ok(value):
            default = params[name].default
            hint = "" if default is inspect.Parameter.empty else f" (default: {default!r})"
            raise ValueError(f"{prefix}.{name} must be {rule.what}; got {value!r}{hint}")


def check_keywords(field: str, owner: str, target: Callable[..., Any], options: Mapping[str, Any],
                   given: Sequence[str] = ()) -> list[str]:
    """The one "unknown option" check (env, engine and scorer options): every key of ``options``
    must be a keyword argument of ``target``, less the ``given`` ones the app passes itself. An
    unknown one fails naming ``field`` and the accepted ones. Returns the accepted names."""
    accepted = [p for p in inspect.signature(target).parameters if p not in ("self", *given)]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"{field}: {owner} takes no option(s) {unknown}; it accepts {accepted or 'none'}")
    return accepted


# ------------------------------------------------------------------------ the config classes
# Imports inside the functions: the modules that define the classes and their choices import this one.

def check_module(values: Mapping[str, Any]) -> None:
    """SCPOModule (``model.*``): its ``__init__`` locals."""
    from scpo_lightning.engines.factory import ENGINES, check_engine_options
    from scpo_lightning.estimators import ESTIMATORS, estimator_class
    from scpo_lightning.gigpo import MODES
    from scpo_lightning.losses import RolloutCorrection
    from scpo_lightning.module import SCPOModule
    from scpo_lightning.precision import BF16_GRID

    def names_estimator(name: Any) -> bool:  # a mapping is checked when it is built (estimators.build_estimator)
        try:
            return isinstance(name, Mapping) or (isinstance(name, str) and estimator_class(name) is not None)
        except ValueError:
            return False

    check("model", SCPOModule, values, {
        "policy": TEXT, "torch_dtype": one_of("float32", "bfloat16", "float16"),
        "estimator": Rule(names_estimator, f"one of {tuple(ESTIMATORS)}, the import path of an Estimator subclass or "
                          "{class_path: ..., init_args: ...}"),
        "norm_mode": one_of(*MODES), "omega": number(0, finite=True), "lr": positive(),
        "weight_decay": number(0, finite=True), "betas": pair(number(0, 1, high_open=True)),
        "grad_clip": positive(),  # finite, as every float setting: a huge value clips nothing
        "clip_eps": number(0, 1, low_open=True, high_open=True),
        "dual_clip": number(1, low_open=True, finite=True),
        "entropy_coef": number(0, finite=True), "kl_coef": number(0, finite=True), "kl_clamp": positive(),
        "mini_batch_rows": count(1), "micro_batch_rows": count(1), "temperature": positive(),
        "top_p": number(0, 1, low_open=True), "max_new_tokens": count(1),
        "val_temperature": number(0, finite=True),  # 0: greedy
        "generation_batch_size": count(1), "generation_autocast": optional(one_of("bfloat16", "float16")),
        "val_generation_autocast": optional(one_of("bfloat16", "float16")),
        "engine": one_of(*ENGINES), "engine_options": MAPPING, "gradient_checkpointing": FLAG,
        "reference_offload": FLAG, "lora_rank": count(0), "cache_dir": optional(TEXT),
        "bf16_grid": one_of(*BF16_GRID), "old_logprobs": one_of(*OLD_LOGPROBS),
        "rollout_correction": instance(RolloutCorrection), "trust_remote_code": FLAG,
    })
    if values["micro_batch_rows"] > values["mini_batch_rows"]:
        raise ValueError(f"model.micro_batch_rows={values['micro_batch_rows']} is more than model.mini_batch_rows="
                         f"{values['mini_batch_rows']}: a micro-batch is a slice of a mini-batch; set micro_batch_rows "
                         "<= mini_batch_rows")
    correction = values["rollout_correction"]
    if values["old_logprobs"] == "rollout" and correction is not None and correction.mode != "none":
        raise ValueError("model.rollout_correction corrects π_old against the rollout log-probs; with model.old_logprobs: "
                         "rollout they are the same (ρ = 1): set one of them back (mode: none or old_logprobs: recompute)")
    if values["val_generation_autocast"] is not None and values["engine"] != "hf":
        raise ValueError(f"model.val_generation_autocast={values['val_generation_autocast']!r} applies to the hf "
                         f"engine only; with engine {values['engine']!r} set the copy's dtype in engine_options")
    check_engine_options(values["engine"], dict(values["engine_options"] or {}))


def check_datamodule(values: Mapping[str, Any]) -> None:
    """RolloutDataModule (``data.*``): its ``__init__`` locals; the splits are checked once the env
    options are (``envs.registry.check_splits``)."""
    from envs.registry import SPECS
    from scpo_lightning.datamodule import RolloutDataModule
    from scpo_lightning.dynamic_sampling import DynamicSampling
    from scpo_lightning.rollout import RolloutConfig

    check("data", RolloutDataModule, values, {
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


def check_rollout(config: Any) -> None:
    """RolloutConfig (``data.rollout.*``)."""
    from envs.registry import prompt_styles
    from scpo_lightning.rollout import ACTION_MODES, TRUNCATION

    values = vars(config)
    check("data.rollout", type(config), values, {
        "env": optional(one_of(*sorted(prompt_styles()))), "max_steps": count(1), "history_length": count(0),
        "max_prompt_tokens": count(1), "truncation": one_of(*TRUNCATION), "action_mode": one_of(*ACTION_MODES),
        "gamma": number(0, 1), "invalid_penalty": number(0, finite=True), "exclude_actions": TEXTS,
        "system_prompt": Rule(lambda v: v is None or isinstance(v, str), "null or a string"),
    })
    if config.exclude_actions and config.action_mode != "constrained":
        raise ValueError("data.rollout.exclude_actions only applies to action_mode: constrained (a free-text "
                         "model can write any command); remove it or set action_mode: constrained")


def check_dynamic_sampling(config: Any) -> None:
    """DynamicSampling (``data.dynamic_sampling.*``)."""
    check("data.dynamic_sampling", type(config), vars(config), {"top_up": FLAG, "max_retries": count(1)})


def check_scpo_callback(values: Mapping[str, Any]) -> None:
    """SCPOCallback's own fields; SCPOConfig checks the shaping ones (alpha, theta, ...)."""
    from callbacks.scpo import ON_SCORER_ERROR, SCPOCallback

    check("SCPOCallback", SCPOCallback, values, {
        "scorer_options": MAPPING, "cache_entries": count(0), "tau_succ": number(finite=True),
        "monotonic": FLAG, "on_scorer_error": one_of(*ON_SCORER_ERROR),
        "scorer_timeout_s": optional(positive()), "seed": count(0),
        "buffer_size": count(1), "buffer_max_age": optional(count(1)),
    })
    if values["buffer_max_age"] is not None and values["reference_source"] == "siblings":
        raise ValueError(f"SCPOCallback.buffer_max_age={values['buffer_max_age']} applies to the success buffer, which "
                         "reference_source: siblings does not keep; set reference_source: both (or buffer), or remove it")


def check_rl_logger(values: Mapping[str, Any]) -> None:
    from callbacks.logging import RLLogger

    check("RLLogger", RLLogger, values, {"heatmap_every": count(0), "trajectories": count(0), "text_every": count(0)})


def check_hf_export(values: Mapping[str, Any]) -> None:
    from callbacks.export import HFExport

    check("HFExport", HFExport, values, {"dirpath": optional(TEXT), "merge_lora": FLAG})
