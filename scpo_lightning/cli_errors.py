"""How ``python train.py`` ends on a bad setting or missing data: the message, not a traceback.

The project's checks raise ``ValueError``, ``OSError`` (``FileNotFoundError``) or ``ImportError``
with one message that names the field, the value and the fix; Lightning raises
``MisconfigurationException`` for its own settings. Such an error, raised at start-up, in the
dry run, in setup or in an env worker (``envs.worker.raise_remote`` re-raises it here as
itself), ends the command with its message on stderr and exit status 1. ``SCPO_DEBUG=1`` shows
the full traceback instead, with an env worker's own traceback. Any other exception, and one of
these types raised outside the project's code (inside torch, say), is a bug and keeps its
traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from lightning.fabric.utilities.exceptions import MisconfigurationException

DEBUG_ENV = "SCPO_DEBUG"
USER_ERRORS = (ValueError, OSError, ImportError)
ROOT = Path(__file__).resolve().parents[1]
#: The project's top-level packages, whose loggers ``show_project_logs`` connects to stderr.
PACKAGES = ("envs", "callbacks", "scpo_lightning")


def _raised_in_project(exc: BaseException) -> bool:
    """The innermost frame of ``exc``'s traceback is a file of this checkout (not of a library)."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = Path(tb.tb_frame.f_code.co_filename).resolve()
    return path.is_relative_to(ROOT) and not {"site-packages", ".venv"} & set(path.relative_to(ROOT).parts)


def config_error(exc: BaseException) -> BaseException | None:
    """The configuration or data error behind ``exc``: itself or one of its causes (jsonargparse
    raises its own error with a callback constructor's error as the cause), or None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, MisconfigurationException) or (isinstance(seen, USER_ERRORS) and _raised_in_project(seen)):
            return seen
        seen = seen.__cause__ or (None if seen.__suppress_context__ else seen.__context__)
    return None


def run_reporting_errors(main: Callable[[], None]) -> int:
    """Run ``main``; the exit status. A configuration or data error prints its message in place of
    the traceback (unless $SCPO_DEBUG is set to anything but 0) and gives status 1."""
    try:
        main()
    except Exception as exc:  # noqa: BLE001 - sorted below: only config/data errors are reported here
        error = None if os.environ.get(DEBUG_ENV, "0") != "0" else config_error(exc)
        if error is None:
            raise
        print(f"error: {error}\n(the full traceback: {DEBUG_ENV}=1)", file=sys.stderr)
        return 1
    return 0


def show_project_logs() -> None:
    """The project's INFO messages (e.g. which ALFWorld games a run plays) on stderr, as Lightning
    shows its own: only where no one configured logging (a root handler, e.g. pytest's, gets them)."""
    if logging.getLogger().hasHandlers():
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
    for name in PACKAGES:
        logger = logging.getLogger(name)
        if not logger.handlers:
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
            logger.propagate = False
