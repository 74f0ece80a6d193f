"""Every shipped config parses (--print_config) and builds all its objects without loading a model
(--dry_run): here, on a CPU machine without the Qwen weights or the reranker, the dry run names
what is missing and still checks everything else; a bad value fails as in a real run."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

import scpo_lightning.policy
import train

@pytest.fixture(autouse=True)
def _no_pytest_argv(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py"])  # train.main gets its command line as args


CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
RECIPES = [c for c in CONFIGS if c.stem not in ("quickstart", "learning")]  # CPU configs: the rest are the paper's


def test_there_are_seven_paper_recipes_and_the_buffer_variants():
    assert {c.stem for c in RECIPES} == {f"{e}_{a}" for e in ("alfworld", "webshop") for a in ("scpo", "gigpo", "grpo")} | {
        "alfworld_scpo_7b", "alfworld_scpo_buffer", "alfworld_scpo_buffer_dynamic"}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.stem)
def test_config_parses_and_prints(config, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        train.main(["fit", "--config", str(config), "--print_config"])
    assert exit_.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["policy"] == yaml.safe_load(config.read_text())["model"]["policy"]
    if config in RECIPES:  # the paper's layout: 4 GPUs, FSDP2, bf16 autocast, checkpointed layers, offloaded reference
        trainer = printed["trainer"]
        assert trainer["devices"] == 4 and trainer["precision"] == "bf16-mixed"
        assert trainer["strategy"]["class_path"].endswith("ModelParallelStrategy")
        assert trainer["strategy"]["init_args"]["data_parallel_size"] == 4
        assert printed["model"]["gradient_checkpointing"] and printed["model"]["reference_offload"]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.stem)
def test_dry_run_builds_everything_but_the_model(config, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the recipes' relative model paths do not exist here
    monkeypatch.setattr(scpo_lightning.policy, "load_policy", lambda *a, **k: pytest.fail("a dry run loaded a model"))
    train.main(["fit", "--config", str(config), "--dry_run", "true"])
    out = capsys.readouterr().out
    assert "[dry run] config valid" in out and "RolloutDataModule" in out
    if config in RECIPES:
        assert "ModelParallelStrategy on 4 gpu device(s), 4 rank(s)" in out
        assert "model.policy: model path models/Qwen2.5-" in out  # named, not a crash
        assert "SCPOModule (stand-in)" in out
    else:
        assert "nothing missing" in out
    assert not list(tmp_path.iterdir()), "a dry run wrote files"


@pytest.mark.parametrize("override, message", [
    (["--data.group_size", "1"], "data.group_size"),
    (["--data.groups_per_batch", "6"], r"data.groups_per_batch=6 must be a multiple of the number of ranks \(4"),
    (["--model.temperature", "0"], "model.temperature"),
    # A setting written twice, differently: the horizon lives in data.rollout.max_steps only.
    (["--data.env_options", "{size: alfred, max_steps: 30}"],
     r"data.env_options.max_steps=30 contradicts data.rollout.max_steps=50: .* remove data.env_options.max_steps"),
    (["--data.rollout.env", "webshop"], r"data.rollout.env='webshop' but data.env='alfworld' uses the 'alfworld' prompts"),
])
def test_dry_run_fails_on_a_bad_value(override, message, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=message):
        train.main(["fit", "--config", str(RECIPES[0]), "--dry_run", "true", *override])


@pytest.mark.parametrize("config, extra, expected", [
    # docs/scaling.md: the quickstart on two CPU ranks (run under torchrun --nproc_per_node 2)
    ("quickstart", ["--trainer.devices", "2", "--trainer.strategy", "ModelParallelStrategy",
                    "--trainer.strategy.data_parallel_size", "2", "--trainer.strategy.tensor_parallel_size", "1",
                    "--model.lora_rank", "0"],
     "ModelParallelStrategy on 2 cpu device(s)"),
    # docs/scaling.md: two nodes of 4 GPUs (16 groups: 2 per rank)
    ("alfworld_scpo", ["--trainer.num_nodes", "2", "--trainer.strategy.data_parallel_size", "8"],
     "ModelParallelStrategy on 4 gpu device(s), 8 rank(s)"),
    # docs/scaling.md: a paper recipe on one GPU
    ("alfworld_scpo", ["--trainer.devices", "1", "--trainer.strategy", "auto", "--model.reference_offload", "false"],
     "SingleDeviceStrategy on 1 gpu device(s)"),
])
def test_documented_overrides_build(config, extra, expected, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    train.main(["fit", "--config", str(CONFIGS[[c.stem for c in CONFIGS].index(config)]), *extra, "--dry_run", "true"])
    assert expected in capsys.readouterr().out


def test_dry_run_checks_scpo_values_although_the_reranker_is_missing(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    config = yaml.safe_load((CONFIGS[[c.stem for c in CONFIGS].index("alfworld_scpo")]).read_text())
    scpo = next(c for c in config["trainer"]["callbacks"] if c["class_path"].endswith("SCPOCallback"))
    scpo["init_args"]["theta"] = 1.5  # the bge model_dir does not exist here either
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(config))
    with pytest.raises(ValueError, match="SCPOCallback.theta"):
        train.main(["fit", "--config", str(tmp_path / "bad.yaml"), "--dry_run", "true"])


TIS_LINE = "  # rollout_correction: {mode: tis, cap: 2.0}"


@pytest.mark.parametrize("config", RECIPES, ids=lambda c: c.stem)
def test_gpu_recipes_ship_the_tis_setting_commented_and_it_builds(config, capsys, monkeypatch, tmp_path):
    """Off as published (docs/numerics.md, "When to turn TIS on"); uncommented, the recipe is valid."""
    monkeypatch.chdir(tmp_path)
    text = config.read_text()
    assert yaml.safe_load(text)["model"]["engine"] == "vllm" and "rollout_correction" not in yaml.safe_load(text)["model"]
    assert text.count(TIS_LINE + "\n") == 1
    (tmp_path / "tis.yaml").write_text(text.replace(TIS_LINE, TIS_LINE.replace("# ", "", 1)))
    train.main(["fit", "--config", str(tmp_path / "tis.yaml"), "--dry_run", "true"])
    assert "[dry run] config valid" in capsys.readouterr().out
    assert yaml.safe_load((tmp_path / "tis.yaml").read_text())["model"]["rollout_correction"] == {"mode": "tis", "cap": 2.0}
