"""SCPOModule's settings rules (``model.*``): run first thing in its ``__init__``, before anything loads,
and, for the rules that need the trainer's strategy and the data's action mode, in its ``setup``
(``check_trainer``, which ``--dry_run`` calls too).

They sit in this file beside module.py, not inside it, only because module.py is near the project's
300-line limit. This file imports what the rules name (engines, estimators, normalisation modes,
rollout correction, bf16 grid choices) and never module.py, so the two form no import cycle; the
class passes itself in, so each message quotes the default of its own signature.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envs.common.rules import (FLAG, MAPPING, TEXT, Rule, check, count, instance, number, one_of, optional, pair,
                               positive)
from scpo_lightning.engines.factory import ENGINES, EngineKind, check_engine_options, engine_kind
from scpo_lightning.engines.sampler_copy import check_copy_dtype
from scpo_lightning.estimators import ESTIMATORS, estimator_class
from scpo_lightning.gigpo import MODES
from scpo_lightning.losses import RolloutCorrection
from scpo_lightning.model_setup import check_strategy, is_model_parallel
from scpo_lightning.policy import check_model_source
from scpo_lightning.precision import BF16_GRID

#: model.old_logprobs choices.
OLD_LOGPROBS = ("recompute", "rollout")


def _names_estimator(name: Any) -> bool:  # a mapping is checked when it is built (estimators.build_estimator)
    try:
        return isinstance(name, Mapping) or (isinstance(name, str) and estimator_class(name) is not None)
    except ValueError:
        return False


def check_module(cls: type, values: Mapping[str, Any]) -> None:
    """``cls`` (SCPOModule) is being built with ``values``, its ``__init__`` locals."""
    # Built at each call, as the estimator's message lists the estimators registered at that moment.
    check("model", cls, values, {
        "policy": TEXT, "torch_dtype": one_of("float32", "bfloat16", "float16"),
        "estimator": Rule(_names_estimator, f"one of {tuple(ESTIMATORS)}, the import path of an Estimator subclass or "
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
        "rollout_correction": instance(RolloutCorrection), "logprob_prefix_sharing": FLAG, "trust_remote_code": FLAG,
    })
    if values["micro_batch_rows"] > values["mini_batch_rows"]:
        raise ValueError(f"model.micro_batch_rows={values['micro_batch_rows']} is more than model.mini_batch_rows="
                         f"{values['mini_batch_rows']}: a micro-batch is a slice of a mini-batch; set micro_batch_rows "
                         "<= mini_batch_rows")
    if values["logprob_prefix_sharing"] and values["gradient_checkpointing"]:
        # HF layers drop past_key_values under gradient checkpointing in training (modeling_layers.py).
        raise ValueError("model.logprob_prefix_sharing hands each row's shared prefix to the model as a KV cache, "
                         "which model.gradient_checkpointing drops in training: set one of them to false")
    correction = values["rollout_correction"]
    if values["old_logprobs"] == "rollout" and correction is not None and correction.mode != "none":
        raise ValueError("model.rollout_correction corrects π_old against the rollout log-probs; with model.old_logprobs: "
                         "rollout they are the same (ρ = 1): set one of them back (mode: none or old_logprobs: recompute)")
    # only an engine that generates with the policy itself (hf) runs under the module's autocast
    if values["val_generation_autocast"] is not None and not engine_kind(values["engine"]).generation_settings:
        raise ValueError(f"model.val_generation_autocast={values['val_generation_autocast']!r} applies to the hf "
                         f"engine only; with engine {values['engine']!r} set the copy's dtype in engine_options")
    check_engine_options(values["engine"], dict(values["engine_options"] or {}))
    check_copy_dtype("model.engine_options.val_copy_dtype", dict(values["engine_options"] or {}).get("val_copy_dtype"))


def check_policy(policy: str) -> None:
    """model.policy: what this machine lacks (a model folder, the GGUF package) names the field."""
    try:
        check_model_source(policy)
    except (FileNotFoundError, ImportError) as exc:
        raise type(exc)(f"model.policy: {exc}") from None


def check_trainer(hp: Mapping[str, Any], correction: RolloutCorrection, engine: EngineKind, strategy: Any,
                  action_mode: str | None, fitting: bool) -> None:
    """The rules that need the trainer's strategy and the data's action mode, before anything loads:
    ``SCPOModule.check_trainer`` (its ``setup``, and ``--dry_run``, which so refuses what a run does)."""
    check_strategy(strategy, hp["lora_rank"], hp["reference_offload"])
    if hp["logprob_prefix_sharing"] and is_model_parallel(strategy):
        # Under FSDP every forward is a collective, and a micro-batch's prefix tree sets how many
        # forwards it takes: ranks holding other rows would run other counts and hang.
        raise ValueError("model.logprob_prefix_sharing runs a number of forwards that depends on the rows, which "
                         "FSDP's paired collectives cannot follow: set it to false under ModelParallelStrategy")
    if dict(hp["engine_options"] or {}).get("val_copy_dtype") and is_model_parallel(strategy):
        raise ValueError("model.engine_options.val_copy_dtype copies the whole policy, which FSDP holds only in "
                         "shards: leave it out under ModelParallelStrategy (validation then samples the policy itself)")
    # These settings read the engine's own log-probs of π: refused where it reports none.
    if fitting and (hp["old_logprobs"] == "rollout" or correction.mode != "none"):
        engine.check_policy_logprobs(hp["top_p"], action_mode == "constrained")
