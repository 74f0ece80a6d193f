"""The command line's own errors (a value of the wrong type, an unknown key, malformed inline YAML)
in one line: the field, the value and what was expected, instead of jsonargparse's usage block and
its nested dump of every union member it tried.

``OneLineParser`` is LightningCLI's parser with that ``error``; ``SCPO_DEBUG=1`` (or jsonargparse's
own debug switch) keeps the full message. ``summarize`` reads jsonargparse 4.x's message layout;
a message it does not recognise is shown by its first line.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
import sys
from typing import NoReturn

import yaml
from lightning.pytorch.cli import LightningArgumentParser

DEBUG_ENV = "SCPO_DEBUG"
_KEY = re.compile(r'^\s*Parser key "([^"]+)":\s*$')
_CLASS = re.compile(r"Problem with given class_path '([^']+)':")
_EXPECTED = re.compile(r"Expected a <class '(\w+)'>\. Got value: (.*)$")
_NOT_ACCEPTED = re.compile(r"Option '([^']+)' is not accepted")


def _kind(text: str) -> str:
    """``<class 'float'>`` -> float; ``typing.Literal['a', 'b']`` -> 'a' | 'b'; modules dropped."""
    text = re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", text)
    text = re.sub(r"typing\.Literal\[([^\]]*)\]", lambda m: m.group(1).replace(", ", " | "), text)
    return re.sub(r"\b(?:[a-z_]\w*\.)+(\w)", r"\1", text)


def _a(kind: str, value: str) -> str:
    """``must be <this>; got <value>`` for jsonargparse's ``Expected a <class 'kind'>``."""
    name = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}.get(kind, f"a {kind}")
    spelt = " (YAML writes them .nan, .inf, -.inf)" if value.strip().lower().lstrip("+-") in ("nan", "inf", "infinity") else ""
    return f"must be {name}; got {_value(value)!r}{spelt}"


def _value(text: str) -> str:
    text = text.strip()
    return text if len(text) <= 80 else text[:77] + "..."


def _accepted(class_path: str, option: str) -> str:
    """What ``class_path`` accepts instead of ``option``: the closest name, else all of them."""
    module, _, name = class_path.rpartition(".")
    try:
        names = [p for p in inspect.signature(getattr(importlib.import_module(module), name)).parameters if p != "self"]
    except (ImportError, AttributeError, ValueError, TypeError):
        return ""
    close = difflib.get_close_matches(option, names, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f"; it accepts {names}"


def _inner(lines: list[str], key: str) -> str | None:
    """A class's own complaint (``Problem with given class_path``), as ``key: Class.field ...``."""
    for i, line in enumerate(lines):
        found = _CLASS.search(line)
        if not found:
            continue
        class_path, rest = found.group(1), [x.strip() for x in lines[i + 1:i + 3]]
        owner = class_path.rpartition(".")[2]
        field = _KEY.match(rest[0]) if rest else None
        if field and len(rest) > 1 and (expected := _EXPECTED.search(rest[1])):
            return f"{key}: {owner}.{field.group(1)} {_a(*expected.groups())}"
        if rest and (option := _NOT_ACCEPTED.search(rest[0])):
            return f"{key}: {owner} takes no option {option.group(1)!r}{_accepted(class_path, option.group(1))}"
        return f"{key}: class_path {class_path!r}: {rest[0] if rest else 'cannot be used'}"
    return None


def summarize(message: str) -> str:
    """jsonargparse's error message in one line."""
    lines = [x for x in message.splitlines() if x.strip()]
    top = _KEY.match(lines[0]) if lines else None
    if top is None:
        return lines[0] if lines else message
    key = top.group(1)
    if (inner := _inner(lines, key)) is not None:
        return inner
    if len(lines) > 1 and (expected := _EXPECTED.search(lines[1])):
        return f"{key} {_a(*expected.groups())}"
    given = next((x.split(":", 1)[1] for x in lines if x.strip().startswith("Given value:")), None)
    subtypes = next((x.split(":", 1)[1] for x in lines if x.strip().startswith("Subtypes:")), None)
    if given is not None and given.strip()[:1] in "{[":
        try:
            yaml.safe_load(given.strip())
        except yaml.YAMLError as exc:
            problem = str(exc).splitlines()[0]
            return f"{key}: {_value(given)!r} is not valid inline YAML ({problem}); write it as {{name: value, ...}}"
    if given is not None:
        expected = f"; expected {_kind(subtypes.strip())}" if subtypes else ""
        return f"{key}: got {_value(given)!r}{expected}"
    return f"{key}: " + " ".join(x.strip() for x in lines[1:3])


class OneLineParser(LightningArgumentParser):
    """LightningCLI's parser; an error is printed as one line (``summarize``), exit status 2."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or os.environ.get(DEBUG_ENV, "0") != "0" or os.environ.get("JSONARGPARSE_DEBUG"):
            super().error(message, ex)
        prog = self.prog.replace(" [options]", "")
        sys.stderr.write(f"error: {summarize(message)}\n(the options: {prog} --help; the parser's whole message: "
                         f"{DEBUG_ENV}=1)\n")
        sys.exit(2)
