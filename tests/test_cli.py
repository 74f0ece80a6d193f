"""train.py through LightningCLI: the quickstart config's structure runs, bad configs fail early."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import train
from scpo_lightning.cli_errors import run_reporting_errors
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


def run_cli(config: Path, cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "train.py"), "fit", "--config", str(config), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})


def traceback_frames(output: str) -> int:
    """Frames of a printed Python traceback (``  File "...", line N``)."""
    return len(re.findall(r'^\s*File ".*", line \d+', output, flags=re.MULTILINE))


def with_data(config: Path, **data) -> Path:
    """``config`` with ``data`` (the DataModule's settings) updated in place."""
    loaded = yaml.safe_load(config.read_text())
    loaded["data"].update(data)
    config.write_text(yaml.safe_dump(loaded))
    return config


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
    assert traceback_frames(proc.stderr) == 0, proc.stderr[-3000:]


def test_missing_model_path_is_named(tmp_path):
    config = quickstart_on_corridor(tmp_path)
    data = yaml.safe_load(config.read_text())
    data["model"]["policy"] = str(tmp_path / "no-such-model")
    config.write_text(yaml.safe_dump(data))
    proc = run_cli(config, tmp_path)
    assert proc.returncode != 0 and "model.policy" in proc.stderr and "no-such-model" in proc.stderr
    assert traceback_frames(proc.stderr) == 0, proc.stderr[-3000:]


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
    assert traceback_frames(proc.stderr) == 0, proc.stderr[-3000:]


# --------------------------------------------------------------------- errors: one message, no traceback
BAD_NUMBERS = [("--model.lr", "-1", "model.lr"), ("--model.top_p", "1.5", "model.top_p"),
               ("--model.max_new_tokens", "0", "model.max_new_tokens"), ("--data.step_timeout_s", "0", "data.step_timeout_s")]


@pytest.mark.parametrize("flag, value, field", BAD_NUMBERS, ids=[b[0] for b in BAD_NUMBERS])
def test_bad_number_fails_at_start_up_and_in_the_dry_run_naming_the_field(tmp_path, monkeypatch, flag, value, field):
    config = quickstart_on_corridor(tmp_path)
    proc = run_cli(config, tmp_path, flag, value)
    assert proc.returncode == 1 and re.search(f"error: {re.escape(field)} must be .*; got -?[0-9.]+ ", proc.stderr), \
        proc.stderr[-3000:]
    assert traceback_frames(proc.stderr) == 0 and "Loading" not in proc.stdout, proc.stderr[-3000:]
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(ValueError, match=f"^{re.escape(field)} must be"):
        train.main(["fit", "--config", str(config), "--dry_run", "true", flag, value])


STRATEGY_RULES = [
    (["--trainer.strategy.class_path", "lightning.pytorch.strategies.ModelParallelStrategy", "--model.lora_rank", "4"],
     "model.lora_rank > 0 is not supported with ModelParallelStrategy"),
    (["--trainer.strategy", "ddp"], "trainer.strategy"),
    (["--model.reference_offload", "true"], "model.reference_offload offloads the sharded reference"),
    (["--trainer.strategy.class_path", "lightning.pytorch.strategies.ModelParallelStrategy", "--model.lora_rank", "0",
      "--model.logprob_prefix_sharing", "true"], "model.logprob_prefix_sharing runs a number of forwards"),
]


@pytest.mark.parametrize("args, message", STRATEGY_RULES,
                         ids=["fsdp2-lora", "ddp", "offload-one-device", "fsdp2-prefix-sharing"])
def test_strategy_rules_fail_the_dry_run_as_they_fail_a_run(tmp_path, monkeypatch, args, message):
    """The rules that need the trainer's strategy (module_rules.check_trainer) run in the module's
    setup, before the model loads, and in the dry run: neither path lets such a config through."""
    config = quickstart_on_corridor(tmp_path)
    proc = run_cli(config, tmp_path, *args)
    assert proc.returncode == 1 and message in proc.stderr, proc.stderr[-3000:]
    assert "Loading" not in proc.stdout and traceback_frames(proc.stderr) == 0, proc.stderr[-3000:]
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(ValueError, match=re.escape(message)):
        train.main(["fit", "--config", str(config), "--dry_run", "true", *args])


def test_a_named_data_folder_that_is_not_here_fails_the_dry_run_and_a_real_run_in_one_message(tmp_path):
    """The issue's command: ``data_path`` names a folder that is not on this machine. A wrong value
    the user typed, so the dry run fails on it (exit 1, field and fix, no traceback)."""
    dry = run_cli(ROOT / "configs" / "alfworld_scpo.yaml", tmp_path, "--data.env_options.data_path", "/nonexistent/alf",
                  "--dry_run", "true")
    assert dry.returncode == 1 and "[dry run] config valid" not in dry.stdout, dry.stdout[-3000:]
    assert traceback_frames(dry.stdout + dry.stderr) == 0, dry.stderr[-3000:]
    errors = [line for line in dry.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "AlfworldConfig.data_path='/nonexistent/alf' does not exist on this machine" in errors[0]
    assert "point it at the folder alfworld-download filled, or remove data_path" in errors[0]
    config = with_data(quickstart_on_corridor(tmp_path), env="alfworld", env_options={"data_path": "/nonexistent/alf"})
    real = run_cli(config, tmp_path)
    assert real.returncode == 1 and traceback_frames(real.stderr) == 0, real.stderr[-3000:]
    lines = [line for line in real.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "data.env_options: AlfworldConfig.data_path='/nonexistent/alf'" in lines[0]
    assert "(the full traceback: SCPO_DEBUG=1)" in real.stderr and "Loading" not in real.stdout
    debug = run_cli(config, tmp_path, env={"SCPO_DEBUG": "1"})
    assert debug.returncode != 0 and "Traceback (most recent call last)" in debug.stderr
    assert "AlfworldDataError: data.env_options: AlfworldConfig.data_path='/nonexistent/alf'" in debug.stderr


def test_a_dataset_nobody_named_is_listed_by_the_dry_run_like_a_missing_model(tmp_path):
    """``source: real`` with no path anywhere: the dataset is not downloaded yet, as a model folder
    may not be; the dry run lists it and exits 0, a real run stops on it."""
    config = with_data(quickstart_on_corridor(tmp_path), env="alfworld", env_options={"source": "real"})
    env = {"ALFWORLD_DATA": "", "HOME": str(tmp_path / "home")}
    dry = run_cli(config, tmp_path, "--dry_run", "true", env=env)
    assert dry.returncode == 0 and "[dry run] config valid" in dry.stdout, dry.stderr[-3000:]
    assert "AlfworldConfig.source='real' needs data_path or $ALFWORLD_DATA" in dry.stdout
    assert traceback_frames(dry.stdout + dry.stderr) == 0
    real = run_cli(config, tmp_path, env=env)
    assert real.returncode == 1 and traceback_frames(real.stderr) == 0, real.stderr[-3000:]


def test_dry_run_fails_on_a_data_folder_without_the_validation_split(tmp_path):
    (tmp_path / "alf" / "json_2.1.1" / "train").mkdir(parents=True)
    config = with_data(quickstart_on_corridor(tmp_path), env="alfworld", env_options={"data_path": str(tmp_path / "alf")})
    proc = run_cli(config, tmp_path, "--dry_run", "true")
    assert proc.returncode == 1 and traceback_frames(proc.stderr) == 0, proc.stderr[-3000:]
    assert f"data.val_split='valid_seen': no split 'valid_seen' under {tmp_path / 'alf' / 'json_2.1.1'}" in proc.stderr
    assert f"INFO: ALFWorld plays the real games in {tmp_path / 'alf'} (data_path)" in proc.stderr
    assert "[dry run] config valid" not in proc.stdout


def test_weights_only_false_is_refused_since_lightning_would_ignore_it(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["train.py"])
    with pytest.raises(ValueError, match="--weights_only false: fit loads checkpoints only with torch's restricted"):
        train.main(["fit", "--config", str(quickstart_on_corridor(tmp_path)), "--weights_only", "false", "--dry_run", "true"])


def _ours() -> None:
    raise ValueError("model.top_p must be a number in (0, 1]; got 1.5")


def _libraries() -> None:
    json.loads("{")  # raises inside the json package: a bug, not a setting


def test_config_errors_print_their_message_and_exit_1(capsys, monkeypatch):
    """(Through jsonargparse, which wraps a callback's error: tests/test_config_validation.py.)"""
    monkeypatch.delenv("SCPO_DEBUG", raising=False)
    assert run_reporting_errors(_ours) == 1
    assert capsys.readouterr().err == "error: model.top_p must be a number in (0, 1]; got 1.5\n(the full traceback: SCPO_DEBUG=1)\n"


def test_other_errors_and_debug_mode_keep_the_traceback(monkeypatch):
    monkeypatch.delenv("SCPO_DEBUG", raising=False)
    with pytest.raises(json.JSONDecodeError):
        run_reporting_errors(_libraries)
    monkeypatch.setenv("SCPO_DEBUG", "1")
    with pytest.raises(ValueError, match="model.top_p"):
        run_reporting_errors(_ours)
