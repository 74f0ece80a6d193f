"""train.py through LightningCLI: the quickstart config's structure runs, bad configs fail early."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scpo_lightning.testing import build_tiny_llama

ROOT = Path(__file__).resolve().parents[1]


def quickstart_on_corridor(tmp_path: Path, **data_overrides) -> Path:
    """configs/quickstart.yaml with the tiny model, the corridor world and the lexical scorer."""
    config = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    config["trainer"].update(max_epochs=1, check_val_every_n_epoch=1)
    config["trainer"]["logger"]["init_args"]["save_dir"] = str(tmp_path / "runs")
    for cb in config["trainer"]["callbacks"]:
        if cb["class_path"].endswith("SCPOCallback"):
            cb["init_args"]["scorer"] = "lexical"
        if cb["class_path"].endswith("ModelCheckpoint"):
            cb["init_args"]["dirpath"] = str(tmp_path / "ckpt")
        if cb["class_path"].endswith("HFExport"):
            cb["init_args"] = {"dirpath": str(tmp_path / "hf")}
    config["model"].update(policy=str(build_tiny_llama(tmp_path / "tiny")), generation_autocast=None)
    config["data"].update(env="corridor", env_options={"rooms": 3, "max_steps": 4}, workers=1,
                          val_episodes=2, val_batch_episodes=2, progress=False, **data_overrides)
    config["data"]["rollout"].update(max_steps=4)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_cli(config: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), "fit", "--config", str(config)],
                          cwd=cwd, capture_output=True, text=True, timeout=600)


def test_quickstart_config_runs_one_iteration_and_exports(tmp_path):
    proc = run_cli(quickstart_on_corridor(tmp_path), tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[val @ it 0]" in proc.stdout and "[it 1]" in proc.stdout
    assert (tmp_path / "ckpt" / "last.ckpt").exists()
    assert (tmp_path / "hf" / "config.json").exists()


@pytest.mark.parametrize("override, message", [({"group_size": 1}, "data.group_size"),
                                                ({"env": "minecraft"}, "data.env")])
def test_bad_config_fails_before_any_model_loads(tmp_path, override, message):
    config = quickstart_on_corridor(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["data"].update(override)
    config.write_text(yaml.safe_dump(data))
    proc = run_cli(config, tmp_path)
    assert proc.returncode != 0 and message in proc.stderr
    assert "Loading" not in proc.stdout and "[val" not in proc.stdout


def test_missing_model_path_is_named(tmp_path):
    config = quickstart_on_corridor(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["model"]["policy"] = str(tmp_path / "no-such-model")
    config.write_text(yaml.safe_dump(data))
    proc = run_cli(config, tmp_path)
    assert proc.returncode != 0 and "model.policy" in proc.stderr and "no-such-model" in proc.stderr


def test_first_prompt_over_the_limit_fails_before_the_model_loads(tmp_path):
    # The corridor's first prompt (chat template + instruction + observation) is well over 20
    # tokens, so with truncation 'error' the datamodule's setup stops the run; the module's
    # configure_model (which prints "Loading") never runs.
    config = quickstart_on_corridor(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["data"]["rollout"].update(max_prompt_tokens=20, truncation="error")
    config.write_text(yaml.safe_dump(data))
    proc = run_cli(config, tmp_path)
    assert proc.returncode != 0 and "rollout.max_prompt_tokens=20" in proc.stderr
    assert "Loading" not in proc.stdout and "[val" not in proc.stdout
