"""Issue 33's defects that the probe table (tests/test_reliability_probes.py) cannot show as one
command line: where a run without a logger writes its config, and what the README says the
MiniLM scorer needs on WebShop."""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L
from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser

from callbacks.scpo import SCPOCallback
from envs.registry import SPECS
from scpo_lightning.cli import RunConfigCallback

ROOT = Path(__file__).resolve().parents[1]


def _save_config(root: str | None, logger: bool) -> None:
    parser = LightningArgumentParser()
    parser.add_argument("--trainer.default_root_dir", default=None)
    trainer = L.Trainer(logger=logger, default_root_dir=root, enable_checkpointing=False, enable_model_summary=False)
    callback = RunConfigCallback(parser, Namespace(trainer=Namespace(default_root_dir=root)), overwrite=True)
    callback.setup(trainer, L.LightningModule(), "fit")


def test_a_run_without_a_logger_writes_no_config_into_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _save_config(None, logger=False)  # --trainer.logger false: Lightning's callback wrote ./config.yaml
    assert not list(tmp_path.iterdir())
    _save_config(str(tmp_path / "run"), logger=False)  # a folder named for the run: it goes there
    assert (tmp_path / "run" / "config.yaml").is_file() and os.listdir(tmp_path) == ["run"]


def test_readme_and_docs_say_what_the_code_does_about_minilm_calibration():
    """The callback takes the trained env's preset (docs/scorers.md); the README said WebShop needed
    ``calibration: webshop``."""
    assert SCPOCallback(scorer="minilm").run_scorer_options(SPECS["webshop"])["calibration"] == "webshop"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "needs `scorer_options: {calibration: webshop}`" not in readme
    assert "takes its calibration from `data.env`" in readme
    assert "picks the\ntrained env's preset" in (ROOT / "docs" / "scorers.md").read_text(encoding="utf-8")
