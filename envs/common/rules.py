"""The small checks every config class runs on its own values: one rule per field.

Each config class checks its values first thing in ``__init__`` (or its dataclass's
``__post_init__``), with the rules it keeps beside itself, built from these: a bad value fails
when the class is built, at start-up and in ``--dry_run`` (which builds every object), before any
model, env or game loads, with one ``ValueError`` that names the field, the value, what the value
must be and the default. A leaf: it imports nothing from the project, so the envs (the lowest
layer) and the app above them use the same rules. tests/test_config_validation.py walks every
``__init__`` parameter of every config class and fails for a field that it has no case for.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rule:
    ok: Callable[[Any], bool]
    what: str  # completes "<field> must be ..."


def number(low: float | None = None, high: float | None = None, *, low_open: bool = False,
           high_open: bool = False, integer: bool = False, finite: bool = False) -> Rule:
    """A number within bounds (NaN never passes; ``finite`` also rejects ±inf)."""
    def ok(v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)) or v != v:
            return False
        if finite and not math.isfinite(v):
            return False
        if low is not None and not (v > low if low_open else v >= low):
            return False
        return high is None or (v < high if high_open else v <= high)

    kind = "an integer" if integer else "a finite number" if finite else "a number"
    if low is not None and high is not None:
        bounds = f" in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    elif low is not None:
        bounds = f" {'>' if low_open else '>='} {low}"
    else:
        bounds = "" if high is None else f" {'<' if high_open else '<='} {high}"
    return Rule(ok, kind + bounds)


def positive() -> Rule:
    return number(0, low_open=True, finite=True)


def count(low: int = 0) -> Rule:
    return number(low, integer=True)


def one_of(*choices: str) -> Rule:
    return Rule(lambda v: v in choices, f"one of {choices}")


def optional(rule: Rule) -> Rule:
    """``rule`` or null."""
    return Rule(lambda v: v is None or rule.ok(v), f"null or {rule.what}")


def pair(rule: Rule) -> Rule:
    return Rule(lambda v: isinstance(v, Sequence) and not isinstance(v, str) and len(v) == 2 and all(map(rule.ok, v)),
                f"two numbers, each {rule.what.removeprefix('a number ')}")


FLAG = Rule(lambda v: isinstance(v, bool), "true or false")
TEXT = Rule(lambda v: isinstance(v, str) and bool(v.strip()), "a non-empty string")
MAPPING = Rule(lambda v: v is None or isinstance(v, Mapping), "null or a mapping of option names to values")
TEXTS = Rule(lambda v: isinstance(v, Sequence) and not isinstance(v, str) and all(TEXT.ok(x) for x in v),
             "a list of non-empty strings")


def instance(cls: type) -> Rule:
    return Rule(lambda v: v is None or isinstance(v, cls), f"null or {cls.__name__} settings")


def check(prefix: str, cls: type, values: Mapping[str, Any], rules: Mapping[str, Rule]) -> None:
    """Every value of ``values`` that has a rule obeys it; the first that does not raises."""
    params = inspect.signature(cls).parameters
    for name, rule in rules.items():
        value = values[name]
        if not rule.ok(value):
            default = params[name].default
            hint = "" if default is inspect.Parameter.empty else f" (default: {default!r})"
            raise ValueError(f"{prefix}.{name} must be {rule.what}; got {value!r}{hint}")


def check_keywords(field: str, owner: str, target: Callable[..., Any], options: Mapping[str, Any],
                   given: Sequence[str] = ()) -> list[str]:
    """The one "unknown option" check (env, engine and scorer options): every key of ``options``
    must be a keyword argument of ``target``, less the ``given`` ones the app passes itself. An
    unknown one fails naming ``field`` and the accepted ones. Returns the accepted names."""
    accepted = [p for p in inspect.signature(target).parameters if p not in ("self", *given)]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"{field}: {owner} takes no option(s) {unknown}; it accepts {accepted or 'none'}")
    return accepted
