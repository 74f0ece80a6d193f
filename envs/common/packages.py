"""Optional packages a config can name, checked when the class that needs them is built.

A setting that needs an optional package (``model.engine: vllm``, ``scorer_options.backend:
flagembedding``, ``data.worker_backend: ray``, ``model.lora_rank > 0``, an environment's own
packages, a WebShop checkout's) checks it in its class's ``__init__`` with ``require``, before any
model loads: a real run stops at start-up with the install command instead of after loading the
model, and ``--dry_run`` (scpo_lightning/cli.py) lists it with the rest of what this machine lacks.
A class that needs several resources runs every check through ``check_all``, which raises them
together (``Missing``), so the dry run lists each one and not only the first. Only
``importlib.util.find_spec`` is asked (nothing is imported), so the checks are cheap. Nothing here
imports the project, so ``envs`` can use it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence

#: What this machine lacks rather than what the config gets wrong.
ABSENT = (FileNotFoundError, ImportError)


class Missing(ImportError):
    """Several things this machine lacks, found by one class's checks (``problems``: each error)."""

    def __init__(self, problems: Sequence[Exception]):
        self.problems = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems))


def installed(module: str) -> bool:
    """``module`` can be imported here (looked up, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is absent, or a module without a spec
        return False


def require(field: str, modules: str | Sequence[str], install: str) -> None:
    """``field`` (the setting, as "model.engine=vllm") needs ``modules``: ImportError naming the
    ones this environment lacks and ``install`` (the command that installs them)."""
    absent = [m for m in ([modules] if isinstance(modules, str) else modules) if not installed(m)]
    if absent:
        raise ImportError(f"{field} needs {', '.join(f'`{m}`' for m in absent)}, which this environment lacks: "
                          f"{install}")


def check_all(*checks: Callable[[], None]) -> None:
    """Run every check; what this machine lacks (``ABSENT``) is collected and raised at the end: the
    one error itself, or ``Missing`` with all of them. A config error (ValueError) is raised at once."""
    problems: list[Exception] = []
    for check in checks:
        try:
            check()
        except ABSENT as exc:
            problems.extend(exc.problems if isinstance(exc, Missing) else [exc])
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise Missing(problems)
