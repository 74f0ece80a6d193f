"""Clear errors for the ALFWorld package: missing extra, bad data folder, unknown names."""

from __future__ import annotations

import importlib

#: The real engine's packages (the `alfworld` extra), checked at start-up by AlfworldConfig.
ENGINE_PACKAGES = ("alfworld", "textworld", "fast_downward")


class AlfworldNotInstalled(ImportError):
    """alfworld / textworld (the real engine) are not importable."""


class AlfworldDataError(ValueError):
    """A data folder or cache folder does not hold what the loader expects."""


def import_alfworld():
    """Import ``alfworld`` and TextWorld's PDDL engine, or say which extra installs them."""
    try:
        importlib.import_module("textworld.envs.pddl")
        importlib.import_module("fast_downward")
        return importlib.import_module("alfworld")
    except ImportError as exc:
        raise AlfworldNotInstalled(
            "ALFWorld needs the real engine (alfworld==0.4.2 with TextWorld's PddlEnv and "
            f"fast-downward): pip install -e '.[alfworld]'  (import failed: {exc})"
        ) from exc


def check_family(family: str) -> str:
    from envs.alfworld.vocab import FAMILIES

    if family not in FAMILIES:
        raise ValueError(f"unknown ALFWorld task family {family!r}; expected one of {', '.join(FAMILIES)}")
    return family


class AlfworldDataMissing(AlfworldDataError, FileNotFoundError):
    """``source: real`` and no dataset named (no ``data_path``, no ``$ALFWORLD_DATA``, nothing in
    alfworld's default folder): a data error like any other, and a missing file too, so
    ``--dry_run`` lists it (as it lists a missing model) and goes on. A folder the user named that
    is not there is a wrong value instead (``AlfworldDataError``)."""
