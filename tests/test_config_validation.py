"""Start-up validation: every bad setting fails when its class is built, before any model or env
loads, with one error that names the config field and says how to fix it."""

from __future__ import annotations

import math

import pytest
import yaml

from callbacks.scpo import SCPOCallback
from scpo_lightning.datamodule import RolloutDataModule
from scpo_lightning.module import SCPOModule
from tests.conftest import require
from tests.test_cli import quickstart_on_corridor, run_cli


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
    ("negative alpha", _scpo(alpha=-0.5), ValueError, ["SCPOCallback.alpha=-0.5", ">= 0"]),
    ("NaN alpha", _scpo(alpha=math.nan), ValueError, ["SCPOCallback.alpha=nan", ">= 0"]),
    ("theta 0", _scpo(theta=0.0), ValueError, ["SCPOCallback.theta=0.0", "in (0, 1]"]),
    ("theta > 1", _scpo(theta=1.5), ValueError, ["SCPOCallback.theta=1.5", "in (0, 1]"]),
    ("lam = theta", _scpo(theta=0.6, lam=0.6), ValueError, ["SCPOCallback.lam=0.6", "[0, theta=0.6)"]),
    ("lam > theta", _scpo(theta=0.5, lam=0.9), ValueError, ["SCPOCallback.lam=0.9", "[0, theta=0.5)"]),
    ("negative lam", _scpo(lam=-0.1), ValueError, ["SCPOCallback.lam=-0.1", "[0, theta"]),
    ("missing minilm model_dir", _scpo(scorer="minilm", scorer_options={"model_dir": "/no/such/minilm"}),
     FileNotFoundError, ["SCPOCallback.scorer_options.model_dir='/no/such/minilm'", "leave it unset"]),
    ("missing policy path", lambda tmp: SCPOModule(policy=str(tmp / "no-model")), FileNotFoundError,
     ["model.policy", "no-model", "local HF model directory"]),
    ("missing ALFWorld data_path", _alfworld(data_path=lambda tmp: str(tmp / "alfworld-data")), ValueError,
     ["data.env_options", "data_path=", "alfworld-data", "alfworld-download"]),
    ("ALFWorld real without data", _alfworld(source="real"), ValueError,
     ["data.env_options", "source='real' needs data_path or $ALFWORLD_DATA"]),
    ("data_path never read", _alfworld(source="generated", data_path="/data"), ValueError,
     ["data.env_options", "data_path='/data'", "source='generated' never reads it"]),
    ("unknown ALFWorld room size", _alfworld(size="huge"), ValueError,
     ["data.env_options", "size='huge'", "tiny, small, medium, alfred"]),
    ("misspelt env option", _alfworld(data_pth="/data"), ValueError,
     ["data.env_options", "['data_pth']", "'data_path'"]),
    ("missing WebShop checkout", _webshop(webshop_checkout=lambda tmp: str(tmp / "WebShop")), FileNotFoundError,
     ["data.env_options", "webshop_checkout=", "git clone"]),
    ("WebShop checkout without data", _webshop(webshop_checkout=_checkout_without_data), FileNotFoundError,
     ["data.env_options", "webshop_checkout=", "lacks WebShop's data", "items_human_ins.json", "setup.sh"]),
    ("WebShop catalog_dir without files", _webshop(catalog_dir=lambda tmp: str(tmp)), FileNotFoundError,
     ["data.env_options", "catalog_dir=", "items_shuffle.json", "python -m envs.webshop.generate"]),
]


@pytest.mark.parametrize("build, error, says", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_setting_fails_at_construction_naming_field_and_fix(build, error, says, tmp_path, monkeypatch):
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.cache/alfworld dataset to fall back on
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
    SCPOCallback(scorer="lexical", alpha=0.0, theta=1.0, lam=0.0)
    SCPOCallback(scorer="lexical", alpha=1.0, theta=0.6, lam=0.4)
    RolloutDataModule(env="alfworld", env_options={"source": "generated", "size": "small"}, group_size=2)
    RolloutDataModule(env="webshop", env_options={"reward_mode": "graded"})


def test_cli_stops_on_a_bad_callback_setting_before_any_model_loads(tmp_path):
    """Through train.py: jsonargparse reports a callback's error inside its own message; ours is there.
    (Data and model settings fail the same way: tests/test_cli.py.)"""
    config = quickstart_on_corridor(tmp_path)
    data = yaml.safe_load(config.read_text())
    scpo = next(cb for cb in data["trainer"]["callbacks"] if cb["class_path"].endswith("SCPOCallback"))
    scpo["init_args"].update(theta=1.5)
    config.write_text(yaml.safe_dump(data))
    proc = run_cli(config, tmp_path)
    assert proc.returncode != 0 and "SCPOCallback.theta=1.5 must be in (0, 1]" in proc.stderr, proc.stderr[-2000:]
    assert "Loading" not in proc.stdout and "[val" not in proc.stdout
