"""What every benchmark shares: the machine description, result files, and the quickstart objects.

Numbers on a shared machine are noisy, so each result records the load average at start and
end next to cores, memory and library versions; each script compares its variants within one run.
"""

from __future__ import annotations

import json
import os
import platform
import warnings
from pathlib import Path
from typing import Any

RESULTS = Path("benchmarks/results")
DATA = Path("benchmarks/data")
QUICKSTART = Path("configs/quickstart.yaml")


def cpu_model() -> str:
    """The processor's marketing name from /proc/cpuinfo ("" where there is none, e.g. macOS)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "")


def machine() -> dict[str, Any]:
    """Cores, memory, versions and the current load average (1, 5, 15 min).

    The CPU model and the instruction set torch dispatches to (AVX2, AVX512, ...) are recorded
    because they change float rounding: the same seed gives other samples on another ISA.
    """
    import torch

    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cores": os.cpu_count(),
        "memory_gib": round(mem_gib, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def write_result(name: str, result: dict[str, Any], out: Path | None = None) -> Path:
    """Write ``benchmarks/results/<name>.json`` (or ``out``) and print it."""
    path = out or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"wrote {path}")
    return path


def read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(Path(path).read_text())


def callback_args(config: dict[str, Any], class_path: str) -> dict[str, Any]:
    """The init_args of the callback ``class_path`` in a config's trainer.callbacks."""
    for cb in config["trainer"].get("callbacks") or []:
        if cb.get("class_path") == class_path:
            return dict(cb.get("init_args") or {})
    raise KeyError(f"no {class_path} in trainer.callbacks")


def build_quickstart(config: Path = QUICKSTART, overrides: list[str] | None = None):
    """(module, datamodule, trainer) exactly as ``train.py fit --config <config>`` builds them.

    The training CLI parses the YAML (plus ``overrides``, in command-line syntax) and
    instantiates everything; nothing runs. The logger is switched off: benchmarks write JSON.
    """
    from scpo_lightning.cli import SCPOCLI
    from scpo_lightning.datamodule import RolloutDataModule
    from scpo_lightning.module import SCPOModule

    args = ["--config", str(config), "--trainer.logger=false", *(overrides or [])]
    with warnings.catch_warnings():
        # The benchmark's own flags are in sys.argv; the CLI reads only ``args``, as intended.
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        cli = SCPOCLI(SCPOModule, RolloutDataModule, run=False, args=args, save_config_callback=None)
    return cli.model, cli.datamodule, cli.trainer
