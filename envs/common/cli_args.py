"""Argument parsing for the project's module entry points (``python -m envs.webshop.site``, the
benchmarks): a bad argument ends the command with one line and exit status 2, checked in the
parser, before anything loads or runs.

``ArgumentParser`` is argparse's, except that an error prints ``<prog>: error: <message>`` alone
(no usage block; ``--help`` shows it). ``integer`` and ``port`` are argument types that refuse
out-of-range values with the range in the message. Imports nothing from the project.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with each error on one line: the message and where the options are listed."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")


def integer(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high] (no upper bound when ``high`` is None)."""
    bounds = f">= {low}" if high is None else f"in [{low}, {high}]"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"{value} must be {bounds}")
        return value

    parse.__name__ = f"integer {bounds}"
    return parse


#: A TCP port to listen on (0: any free port, as the OS picks it).
port = integer(0, 65535)


def check_order(parser: argparse.ArgumentParser, low_name: str, low: int, high_name: str, high: int | None) -> None:
    """``--low < --high`` where both are given; else the parser's one-line error."""
    if high is not None and high <= low:
        parser.error(f"argument {high_name}: {high} must be greater than {low_name} {low}")
