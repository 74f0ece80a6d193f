"""The training CLI: LightningCLI plus ``--dry_run``, which builds a config's objects and stops.

``python train.py fit --config configs/alfworld_scpo.yaml --dry_run true`` parses the config and
instantiates everything a run would (module hyper-parameter checks, DataModule, callbacks,
logger, strategy, trainer) but loads no model and starts nothing. A config error (a bad value,
a data folder without a split the config uses) fails exactly as the real run would. What only
this machine lacks (the model folder, the reranker, a data folder that does not exist here, the
GPUs, an optional package a setting needs, such as vLLM for ``model.engine: vllm``: things a real
run stops at, one at a time) is listed instead, all at once, and the objects
are still checked with a stand-in: the exit status is 0 when the config itself is sound, so a
recipe can be checked on a laptop before it goes to the GPU node.
"""

from __future__ import annotations

from typing import Any

import lightning as L
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_info

from scpo_lightning.checkpoint_io import check_checkpoint
from scpo_lightning.parser_errors import OneLineParser
from scpo_lightning.shaping import shaping_source

#: Errors that mean "not available on this machine" rather than "wrong config".
MISSING = (FileNotFoundError, ImportError)


class _Unavailable(L.Callback):
    """Stands in for an object whose resources are missing, so the other objects still build."""

    def __init__(self, cls: type, reason: str):
        self.cls, self.reason = cls, reason


class _DryRunInstantiator:
    """Builds every class as usual; a missing resource is recorded and replaced by a stand-in."""

    def __init__(self) -> None:
        self.missing: list[str] = []

    def __call__(self, class_type: type, *args: Any, **kwargs: Any) -> Any:
        try:
            return class_type(*args, **kwargs)
        except MISSING as exc:  # one class may lack several things (packages.Missing): each is listed
            self.missing.extend(f"{class_type.__name__}: {p}" for p in getattr(exc, "problems", [exc]))
            return _Unavailable(class_type, str(exc))


class RunConfigCallback(SaveConfigCallback):
    """Writes the run's ``config.yaml`` into its log folder, as LightningCLI does, and nowhere when
    there is none (``--trainer.logger false`` and no ``trainer.default_root_dir``): Lightning would
    write it into the working directory, e.g. the checkout's root."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if trainer.logger is None and not self.config.get("trainer", {}).get("default_root_dir"):
            rank_zero_info("config.yaml is not saved: trainer.logger is false, so the run has no log folder; set "
                           "trainer.default_root_dir to save it there")
            return
        super().setup(trainer, pl_module, stage)


class SCPOCLI(LightningCLI):
    """LightningCLI with a ``--dry_run`` flag for every subcommand; config.yaml goes to the run's folder.

    Subcommands: ``fit`` (train) and ``validate`` (the validation rollouts once, on the policy of
    ``--ckpt_path`` or, without it, on ``model.policy`` as loaded). ``test`` and ``predict`` are
    not offered: the app has no test split or prediction data beyond the validation episodes."""

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {name: args for name, args in LightningCLI.subcommands().items() if name in ("fit", "validate")}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("save_config_callback", RunConfigCallback)
        super().__init__(*args, **kwargs)

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """Parser errors in one line (scpo_lightning/parser_errors.py)."""
        if self.parser_class is LightningArgumentParser:
            self.parser_class = OneLineParser
        return super().init_parser(**kwargs)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument("--dry_run", type=bool, default=False,
                            help="Build every object of the config without loading the model or running; list what "
                                 "this machine lacks (model, data, devices) and exit 0 if the config is valid.")

    def _parse_ckpt_path(self) -> None:
        """A ``--ckpt_path`` file is checked before anything is built (dry run included): it exists
        and torch's restricted unpickler reads it (``checkpoint_io.check_checkpoint``)."""
        if self.config.get("subcommand"):
            check_checkpoint(self.config[self.config.subcommand].get("ckpt_path"))
        super()._parse_ckpt_path()

    def _dry_run(self) -> bool:
        return bool(self.subcommand and self.config[self.subcommand].get("dry_run"))

    def before_instantiate_classes(self) -> None:
        if self.subcommand and self.config[self.subcommand].get("weights_only") is False:
            # LightningCLI itself pre-reads a --ckpt_path file with weights_only=True whatever this
            # flag says, so the flag could not do what it says; our checkpoints never need it.
            raise ValueError(f"--weights_only false: {self.subcommand} loads checkpoints only with torch's restricted "
                             "unpickler (tensors and plain containers: all that this project's checkpoints hold); "
                             "remove --weights_only")
        self._dry = _DryRunInstantiator() if self._dry_run() else None
        if self._dry is not None:
            self.parser.add_instantiator(self._dry, object, subclasses=True, prepend=True)

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        if self._dry is None:
            return super().instantiate_trainer(**kwargs)
        config = self._get(self.config_init, "trainer", default={})
        callbacks = list(config.get("callbacks") or [])  # the attempt below appends to this list
        try:
            return super().instantiate_trainer(**kwargs)
        except MisconfigurationException as exc:
            # No such device here (e.g. "No supported gpu backend found!"): the rest of the trainer
            # is checked on the CPU; an error that remains there is a config error and is raised.
            config["callbacks"] = callbacks
            trainer = super().instantiate_trainer(**{**kwargs, "accelerator": "cpu"})
            self._dry.missing.append(f"trainer.accelerator: {exc} (the trainer was checked on the CPU instead)")
            return trainer

    def after_instantiate_classes(self) -> None:
        if self._dry is None:
            return
        trainer = self.trainer
        data = None if isinstance(self.datamodule, _Unavailable) else self.datamodule
        if data is not None:
            data.check_world_size(trainer.world_size)  # a real run checks it in setup
        if not isinstance(self.model, _Unavailable):  # the strategy and engine rules of the module's setup
            self.model.check_trainer(trainer.strategy, data.rollout.action_mode if data else None, self.subcommand)
        source = shaping_source(trainer.callbacks)  # its start-up checks (run in its setup too)
        if source is not None and not isinstance(self.model, _Unavailable):
            source.check_module(self.model)
        if source is not None and data is not None:
            source.check_data(data.spec)
        callbacks = [type(c).__name__ if not isinstance(c, _Unavailable) else f"{c.cls.__name__} (stand-in)"
                     for c in trainer.callbacks]
        print(f"[dry run] config valid. model: {self._describe(self.model)}; data: {self._describe(self.datamodule)}; "
              f"trainer: {type(trainer.strategy).__name__} on {trainer.num_devices} {self._accelerator()} device(s), "
              f"{trainer.world_size} rank(s), "
              f"precision {trainer.precision}, max_epochs {trainer.max_epochs}; callbacks: {', '.join(callbacks)}")
        if self._dry.missing:
            print(f"[dry run] {len(self._dry.missing)} thing(s) this machine lacks; a real run stops at the first:")
            for line in self._dry.missing:
                print(f"  - {line}")
        else:
            print("[dry run] nothing missing: `fit` without --dry_run would start loading the model now")
        self.subcommand = None  # built and checked: nothing is run

    def before_fit(self) -> None:
        """Checkpoints load with torch's restricted unpickler (tensors and plain containers, all that
        ours hold), so a tampered ``--ckpt_path`` file cannot run code, even where
        $TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set; ``--weights_only false`` is refused at start-up."""
        config = self.config_init[self.subcommand]
        if config.get("weights_only") is None:
            config["weights_only"] = True

    before_validate = before_fit

    def _accelerator(self) -> str:
        requested = self.config[self.subcommand]["trainer"].get("accelerator")
        return str(requested) if requested else type(self.trainer.accelerator).__name__

    @staticmethod
    def _describe(obj: Any) -> str:
        return f"{obj.cls.__name__} (stand-in)" if isinstance(obj, _Unavailable) else type(obj).__name__
