"""Train an LLM agent with GiGPO or SCPO: ``python train.py fit --config configs/quickstart.yaml``.

LightningCLI wires ``SCPOModule`` (policy, reference, PPO update) and ``RolloutDataModule``
(environments, rollout loop); SCPO, logging, checkpointing and export are callbacks named in the
YAML. ``python train.py validate --config <config> --ckpt_path <ckpt>`` plays the validation
episodes once with a checkpoint's policy (without ``--ckpt_path``: ``model.policy`` as loaded);
there is no ``test`` or ``predict``. Resume a killed run with ``--ckpt_path last``: checkpoints are written by
``AtomicCheckpointIO`` (write-then-rename), so a run killed mid-write keeps its previous one.
A bad setting or missing data ends the command with its message and exit status 1, no traceback
(``SCPO_DEBUG=1`` shows it: ``scpo_lightning/cli_errors.py``).
"""

from __future__ import annotations

import sys

from scpo_lightning import distributed
from scpo_lightning.cli import SCPOCLI
from scpo_lightning.cli_errors import run_reporting_errors, show_project_logs
from scpo_lightning.datamodule import RolloutDataModule
from scpo_lightning.module import SCPOModule


def main(args: list[str] | None = None) -> None:
    """``args``: the command line (default ``sys.argv[1:]``); ``--dry_run true`` builds and stops.
    Errors are raised (for callers in Python); the command line reports them (below)."""
    show_project_logs()
    SCPOCLI(
        SCPOModule,
        RolloutDataModule,
        save_config_kwargs={"overwrite": True},  # a resumed run rewrites its config.yaml
        # The default for every config; a config that sets trainer.plugins replaces it.
        trainer_defaults={"plugins": [{"class_path": "scpo_lightning.checkpoint_io.AtomicCheckpointIO"}]},
        parser_kwargs={"fit": {"default_config_files": []}},
        args=args,
    )
    distributed.finish()  # several ranks: they end together


if __name__ == "__main__":
    sys.exit(run_reporting_errors(main))
