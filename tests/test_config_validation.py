"""Start-up validation: every bad setting fails when its class is built, before any model or env
loads, with one error that names the config field and says how to fix it."""

from __future__ import annotations

import inspect
import math
from pathlib import Path

import pytest
import yaml

from callbacks.export import HFExport
from callbacks.logging import RLLogger
from callbacks.scpo import SCPOCallback
from envs.alfworld.env import AlfworldConfig
from envs.toy import CorridorEnv
from envs.webshop.config import WebShopConfig
from scpo_lightning.datamodule import RolloutDataModule
from scpo_lightning.dynamic_sampling import DynamicSampling
from scpo_lightning.losses import RolloutCorrection
from scpo_lightning.module import SCPOModule
from scpo_lightning.rollout import RolloutConfig
from tests.conftest import require
from tests.test_cli import quickstart_on_corridor, run_cli, traceback_frames


def _data(**kw):
    return lambda tmp: RolloutDataModule(**{"env": "corridor", "workers": 0, **kw})


def _alfworld(**options):
    return lambda tmp: RolloutDataModule(env="alfworld", env_options={k: v(tmp) if callable(v) else v
                                                                      for k, v in options.items()})


def _webshop(**options):
    return lambda tmp: RolloutDataModule(env="webshop", env_options={k: v(tmp) if callable(v) else v
                                                                     for k, v in options.items()})


def _scpo(**kw):
    return lambda tmp: SCPOCallback(**{"scorer": "lexical", **kw})


def _checkout_without_data(tmp):
    (tmp / "WebShop" / "web_agent_site").mkdir(parents=True)
    return str(tmp / "WebShop")


# (case, build(tmp_path), error type, what the message must say: the field, then the fix)
CASES = [
    ("group size < 2", _data(group_size=1), ValueError, ["data.group_size", ">= 2"]),
    ("train pool larger than the split", lambda tmp: RolloutDataModule(
        env="alfworld", env_options={"size": "tiny"}, train_tasks=5000), ValueError,
     ["data.train_tasks=5000", "has 3553 tasks", "at most 3553"]),
    ("negative alpha", _scpo(alpha=-0.5), ValueError, ["SCPOCallback.alpha=-0.5", ">= 0"]),
    ("NaN alpha", _scpo(alpha=math.nan), ValueError, ["SCPOCallback.alpha=nan", ">= 0"]),
    ("theta 0", _scpo(theta=0.0), ValueError, ["SCPOCallback.theta=0.0", "in (0, 1)"]),
    ("theta 1", _scpo(theta=1.0), ValueError, ["SCPOCallback.theta=1.0", "in (0, 1)"]),
    ("theta > 1", _scpo(theta=1.5), ValueError, ["SCPOCallback.theta=1.5", "in (0, 1)"]),
    ("lam = theta", _scpo(theta=0.6, lam=0.6), ValueError, ["SCPOCallback.lam=0.6", "[0, theta=0.6)"]),
    ("lam > theta", _scpo(theta=0.5, lam=0.9), ValueError, ["SCPOCallback.lam=0.9", "[0, theta=0.5)"]),
    ("negative lam", _scpo(lam=-0.1), ValueError, ["SCPOCallback.lam=-0.1", "[0, theta"]),
    ("missing minilm model_dir", _scpo(scorer="minilm", scorer_options={"model_dir": "/no/such/minilm"}),
     FileNotFoundError, ["SCPOCallback.scorer_options.model_dir='/no/such/minilm'", "leave it unset"]),
    ("missing policy path", lambda tmp: SCPOModule(policy=str(tmp / "no-model")), FileNotFoundError,
     ["model.policy", "no-model", "local HF model directory"]),
    # A folder the user named that is not here: a wrong value (the dry run fails on it, tests/test_cli.py).
    ("missing ALFWorld data_path", _alfworld(data_path=lambda tmp: str(tmp / "alfworld-data")), ValueError,
     ["data.env_options", "data_path=", "alfworld-data", "does not exist on this machine", "alfworld-download"]),
    # No dataset named anywhere: FileNotFoundError, which a dry run lists like a missing model.
    ("ALFWorld real without data", _alfworld(source="real"), FileNotFoundError,
     ["data.env_options", "source='real' needs data_path or $ALFWORLD_DATA"]),
    ("ALFWorld data_path without json_2.1.1", _alfworld(data_path=lambda tmp: str(tmp)), ValueError,
     ["data.env_options", "data_path=", "has no json_2.1.1/", "alfworld-download"]),
    ("data_path never read", _alfworld(source="generated", data_path="/data"), ValueError,
     ["data.env_options", "data_path='/data'", "source='generated' never reads it"]),
    ("unknown ALFWorld room size", _alfworld(size="huge"), ValueError,
     ["data.env_options", "size='huge'", "tiny, small, medium, alfred"]),
    ("misspelt env option", _alfworld(data_pth="/data"), ValueError,
     ["data.env_options", "['data_pth']", "'data_path'"]),
    # A checkout or catalog folder named but absent or incomplete: a wrong value, as ALFWorld's data_path.
    ("missing WebShop checkout", _webshop(webshop_checkout=lambda tmp: str(tmp / "WebShop")), ValueError,
     ["data.env_options", "webshop_checkout=", "does not exist on this machine", "git clone"]),
    ("WebShop checkout without data", _webshop(webshop_checkout=_checkout_without_data), ValueError,
     ["data.env_options", "webshop_checkout=", "lacks WebShop's data", "items_human_ins.json", "setup.sh"]),
    ("WebShop catalog_dir without files", _webshop(catalog_dir=lambda tmp: str(tmp)), ValueError,
     ["data.env_options", "catalog_dir=", "items_shuffle.json", "python -m envs.webshop.generate"]),
]


@pytest.mark.parametrize("build, error, says", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_setting_fails_at_construction_naming_field_and_fix(build, error, says, tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.cache/alfworld dataset to fall back on
    import envs.webshop.config  # a checkout's own packages: tests/test_optional_packages.py

    monkeypatch.setattr(envs.webshop.config, "CHECKOUT_PACKAGES", ())
    with pytest.raises(error) as info:
        build(tmp_path)
    message = str(info.value)
    for part in says:
        assert part in message, f"{part!r} missing from: {message}"


def test_missing_bge_model_dir_is_named(tmp_path):
    require("FlagEmbedding", extra="bge")
    with pytest.raises(FileNotFoundError, match=r"SCPOCallback.scorer_options.model_dir=.*bge-reranker-v2-m3"):
        SCPOCallback(scorer="bge", scorer_options={"model_dir": str(tmp_path / "bge")})


def test_good_settings_pass(tmp_path):
    """The checks reject only bad values: the recipes' values and the edges of each range pass."""
    SCPOCallback(scorer="lexical", alpha=0.0, theta=0.999, lam=0.0)
    SCPOCallback(scorer="lexical", alpha=1.0, theta=0.6, lam=0.4)
    RolloutDataModule(env="alfworld", env_options={"source": "generated", "size": "small"}, group_size=2)
    RolloutDataModule(env="webshop", env_options={"reward_mode": "graded"}, val_split="valid")


def test_cli_stops_on_a_bad_callback_setting_before_any_model_loads(tmp_path):
    """Through train.py: jsonargparse wraps a callback's error in its own; train.py prints ours alone.
    (Data and model settings fail the same way: tests/test_cli.py.)"""
    config = quickstart_on_corridor(tmp_path)
    data = yaml.safe_load(config.read_text())
    scpo = next(cb for cb in data["trainer"]["callbacks"] if cb["class_path"].endswith("SCPOCallback"))
    scpo["init_args"].update(theta=1.5)
    config.write_text(yaml.safe_dump(data))
    proc = run_cli(config, tmp_path)
    assert proc.returncode == 1 and "\nerror: SCPOCallback.theta=1.5 must be in (0, 1)" in proc.stderr, proc.stderr[-2000:]
    assert "Loading" not in proc.stdout and "[val" not in proc.stdout
    assert traceback_frames(proc.stderr) == 0 and "Union subtypes" not in proc.stderr, proc.stderr[-2000:]


# ------------------------------------------------------------------ every field of every config class
# Each class's builder fills in what it needs to build on any machine; the prefix is how its
# messages name a field. Sub-options (scorer_options, engine_options) are checked by name at
# start-up and by value when the scorer or engine is built; SCPOConfig's fields are SCPOCallback's.
def _policy(tmp: Path) -> str:
    (tmp / "policy").mkdir(exist_ok=True)
    (tmp / "policy" / "config.json").write_text("{}")  # all the start-up check looks at
    return str(tmp / "policy")


BUILD = {
    SCPOModule: ("model", lambda tmp, kw: SCPOModule(**{"policy": _policy(tmp), **kw})),
    RolloutCorrection: ("model.rollout_correction", lambda tmp, kw: RolloutCorrection(**kw)),
    RolloutDataModule: ("data", lambda tmp, kw: RolloutDataModule(**{"env": "corridor", "workers": 0, **kw})),
    RolloutConfig: ("data.rollout", lambda tmp, kw: RolloutConfig(**kw)),
    DynamicSampling: ("data.dynamic_sampling", lambda tmp, kw: DynamicSampling(**kw)),
    SCPOCallback: ("SCPOCallback", lambda tmp, kw: SCPOCallback(**{"scorer": "lexical", **kw})),
    RLLogger: ("RLLogger", lambda tmp, kw: RLLogger(**kw)),
    HFExport: ("HFExport", lambda tmp, kw: HFExport(**kw)),
    AlfworldConfig: ("AlfworldConfig", lambda tmp, kw: AlfworldConfig(**{"cache_dir": str(tmp / "games"), **kw})),
    WebShopConfig: ("WebShopConfig", lambda tmp, kw: WebShopConfig(**kw)),
    CorridorEnv: ("CorridorEnv", lambda tmp, kw: CorridorEnv(**kw)),
}
NAN, INF = math.nan, math.inf


def _bad(cls, field, *values, error=ValueError, shows=None, **others):
    """Cases: ``field`` set to each of ``values`` (with ``others`` set too) fails with ``error``,
    naming the field and showing the value (``shows``: what the message shows of it instead)."""
    return [(cls, field, value, others, error, shows or repr(value)) for value in values]


FIELDS = [
    *_bad(SCPOModule, "policy", ""), *_bad(SCPOModule, "policy", "/no/such/model", error=FileNotFoundError,
                                           shows="/no/such/model"),
    *_bad(SCPOModule, "torch_dtype", "float64"), *_bad(SCPOModule, "estimator", "ppo"),
    *_bad(SCPOModule, "norm_mode", "z_score"), *_bad(SCPOModule, "omega", -1.0, NAN),
    *_bad(SCPOModule, "lr", -1.0, 0.0, NAN, INF), *_bad(SCPOModule, "weight_decay", -0.01),
    *_bad(SCPOModule, "betas", (0.9, 1.0), (-0.1, 0.999), (0.9,)), *_bad(SCPOModule, "grad_clip", 0.0, NAN, INF),
    *_bad(SCPOModule, "clip_eps", 0.0, 1.0), *_bad(SCPOModule, "dual_clip", 1.0, INF),
    *_bad(SCPOModule, "entropy_coef", -0.001), *_bad(SCPOModule, "kl_coef", -0.01, NAN),
    *_bad(SCPOModule, "kl_clamp", 0.0), *_bad(SCPOModule, "mini_batch_rows", 0),
    *_bad(SCPOModule, "micro_batch_rows", 0, 2.5), *_bad(SCPOModule, "temperature", 0.0, -1.0),
    *_bad(SCPOModule, "generation_batch_size", 0), *_bad(SCPOModule, "generation_autocast", "float32"),
    *_bad(SCPOModule, "val_generation_autocast", "float32"),
    *_bad(SCPOModule, "val_generation_autocast", "bfloat16", engine="vllm"),
    *_bad(SCPOModule, "engine", "sglang"), *_bad(SCPOModule, "engine_options", {"no_such": 1}, shows="'no_such'"),
    *_bad(SCPOModule, "engine_options", {"val_copy_dtype": "int8"}, shows="val_copy_dtype must be null or one of"),
    *_bad(SCPOModule, "gradient_checkpointing", "yes"), *_bad(SCPOModule, "reference_offload", "yes"),
    *_bad(SCPOModule, "lora_rank", -1), *_bad(SCPOModule, "cache_dir", ""), *_bad(SCPOModule, "bf16_grid", "round"),
    *_bad(SCPOModule, "old_logprobs", "engine"), *_bad(SCPOModule, "rollout_correction", "tis"),
    *_bad(SCPOModule, "trust_remote_code", "yes"), *_bad(SCPOModule, "logprob_prefix_sharing", "yes"),
    *_bad(SCPOModule, "logprob_prefix_sharing", True, gradient_checkpointing=True, shows="model.gradient_checkpointing"),
    *_bad(RolloutCorrection, "mode", "clip"), *_bad(RolloutCorrection, "cap", 1.0, NAN, INF),
    *_bad(RolloutDataModule, "env", "minecraft"),
    *_bad(RolloutDataModule, "env_options", {"no_such": 1}, shows="'no_such'"), *_bad(RolloutDataModule, "env_options", ["rooms"]),
    *_bad(RolloutDataModule, "train_split", ""), *_bad(RolloutDataModule, "train_tasks", 0, 1.5), *_bad(RolloutDataModule, "val_split", ""),
    *_bad(RolloutDataModule, "val_start_index", -1), *_bad(RolloutDataModule, "groups_per_batch", 0),
    *_bad(RolloutDataModule, "group_size", 1), *_bad(RolloutDataModule, "val_episodes", -1),
    *_bad(RolloutDataModule, "val_batch_episodes", 0), 
    *_bad(SCPOModule, "top_p", 0.0, 1.5), *_bad(SCPOModule, "max_new_tokens", 0),
    *_bad(SCPOModule, "val_temperature", -0.1, NAN),
    *_bad(RolloutDataModule, "rollout", {"max_steps": 3}), *_bad(RolloutDataModule, "workers", -1),
    *_bad(RolloutDataModule, "worker_backend", "dask"), *_bad(RolloutDataModule, "ray_address", "", "auto"),
    *_bad(RolloutDataModule, "step_timeout_s", 0.0, -1.0, INF), *_bad(RolloutDataModule, "reset_timeout_s", 0.0),
    *_bad(RolloutDataModule, "seed", -1), *_bad(RolloutDataModule, "progress", "no"),
    *_bad(RolloutDataModule, "dynamic_sampling", {"top_up": True}),
    *_bad(DynamicSampling, "top_up", "yes"), *_bad(DynamicSampling, "max_retries", 0, 1.5),
    *_bad(RolloutConfig, "env", "sciworld"), *_bad(RolloutConfig, "max_steps", 0),
    *_bad(RolloutConfig, "history_length", -1), *_bad(RolloutConfig, "max_prompt_tokens", 0),
    *_bad(RolloutConfig, "truncation", "right"), *_bad(RolloutConfig, "action_mode", "json"),
    *_bad(RolloutConfig, "gamma", 1.5, -0.1), *_bad(RolloutConfig, "invalid_penalty", -0.1),
    *_bad(RolloutConfig, "exclude_actions", ("",)),
    *_bad(RolloutConfig, "system_prompt", 3),
    *_bad(SCPOCallback, "scorer", "cosine"), *_bad(SCPOCallback, "scorer_options", {"batch_sz": 2}, shows="'batch_sz'"),
    *_bad(SCPOCallback, "cache_entries", -1), *_bad(SCPOCallback, "alpha", -0.5, NAN, INF),
    *_bad(SCPOCallback, "theta", 0.0, 1.0, 1.5), *_bad(SCPOCallback, "lam", 0.6, -0.1),
    *_bad(SCPOCallback, "tau_succ", NAN, INF, -INF), *_bad(SCPOCallback, "reference", "middle"),
    *_bad(SCPOCallback, "order", "backwards"), *_bad(SCPOCallback, "order_partitions", 0),
    *_bad(SCPOCallback, "monotonic", "yes"), *_bad(SCPOCallback, "on_scorer_error", "retry"),
    *_bad(SCPOCallback, "scorer_timeout_s", 0.0), *_bad(SCPOCallback, "seed", -1),
    *_bad(SCPOCallback, "reference_source", "pool"), *_bad(SCPOCallback, "buffer_size", 0, 2.5),
    *_bad(SCPOCallback, "buffer_max_age", 0, reference_source="both"), *_bad(SCPOCallback, "buffer_max_age", 5),
    *_bad(RLLogger, "heatmap_every", -1), *_bad(RLLogger, "trajectories", -1), *_bad(RLLogger, "text_every", -1),
    *_bad(HFExport, "dirpath", ""), *_bad(HFExport, "merge_lora", "yes"),
    *_bad(AlfworldConfig, "source", "cloud"), *_bad(AlfworldConfig, "data_path", ""),
    *_bad(AlfworldConfig, "data_path", "/no/such/alfworld"),
    *_bad(AlfworldConfig, "cache_dir", ""), *_bad(AlfworldConfig, "size", "huge"),
    *_bad(AlfworldConfig, "max_steps", 0, "50"), *_bad(AlfworldConfig, "families", ["pick_and_eat"], []),
    *_bad(WebShopConfig, "catalog_dir", ""), *_bad(WebShopConfig, "catalog_seed", 1.5),
    *_bad(WebShopConfig, "num_products", 0), *_bad(WebShopConfig, "goal_seed", "233"),
    *_bad(WebShopConfig, "reward_mode", "sparse"), *_bad(WebShopConfig, "max_steps", 0),
    *_bad(WebShopConfig, "search_backend", "lucene"), *_bad(WebShopConfig, "pyserini_index", ""),
    *_bad(WebShopConfig, "webshop_checkout", ""), *_bad(WebShopConfig, "webshop_num_products", 0, 1000),
    *_bad(WebShopConfig, "webshop_human_goals", "yes"),
    *_bad(CorridorEnv, "rooms", 1), *_bad(CorridorEnv, "max_steps", 0),
]


@pytest.mark.parametrize("cls", list(BUILD), ids=lambda c: c.__name__)
def test_every_field_of_every_config_class_has_a_case(cls):
    """A new setting without a case here fails: add the values it must refuse (and the check)."""
    assert set(inspect.signature(cls).parameters) == {field for c, field, *_ in FIELDS if c is cls}


@pytest.mark.parametrize("cls", list(BUILD), ids=lambda c: c.__name__)
def test_every_config_class_builds_with_its_defaults(cls, tmp_path, monkeypatch):
    """So that each case below fails because of its own value."""
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    BUILD[cls][1](tmp_path, {})


@pytest.mark.parametrize("cls, field, value, others, error, shows", FIELDS,
                         ids=[f"{c.__name__}.{f}={v!r}" for c, f, v, *_ in FIELDS])
def test_bad_value_of_each_field_fails_at_construction(cls, field, value, others, error, shows, tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    prefix, build = BUILD[cls]
    with pytest.raises(error) as info:
        build(tmp_path, {**others, field: value})
    message = str(info.value)
    assert f"{prefix}.{field}" in message and shows in message, message
