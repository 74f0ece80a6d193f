"""Environments by config name, their task splits, and the pool that steps them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from envs.alfworld.spec import SPEC as ALFWORLD
from envs.base import TextEnv, group_slots
from envs.common.rules import check_keywords
from envs.spec import EnvSpec, PromptStyle
from envs.toy import SPEC as CORRIDOR
from envs.webshop.spec import SPEC as WEBSHOP

#: Every environment ``data.env`` can name: adding one is its module (envs/spec.py) plus a line here.
SPECS: dict[str, EnvSpec] = {spec.name: spec for spec in (ALFWORLD, CORRIDOR, WEBSHOP)}


def env_spec(name: str) -> EnvSpec:
    """The spec of ``data.env`` = ``name``; an unknown name is an error, never another env's spec."""
    if name not in SPECS:
        raise ValueError(f"data.env: unknown environment {name!r}; expected one of {sorted(SPECS)}")
    return SPECS[name]


def prompt_styles() -> dict[str, PromptStyle]:
    """The ``data.rollout.env`` choices: each prompt style some registered env declares."""
    return {spec.prompt.name: spec.prompt for spec in SPECS.values()}


@dataclass(frozen=True)
class EnvSetup:
    """``data.env`` and ``data.env_options`` resolved once, at start-up: the spec, the options and
    the settings built from them. The DataModule holds one and asks it for the factory and the splits."""

    spec: EnvSpec
    options: dict[str, Any]
    settings: Any

    def factory(self) -> Callable[[], TextEnv]:
        """A zero-argument factory (picklable arguments only, so worker processes can call it)."""
        return _Factory(self.spec.make, self.options)

    def split_size(self, split: str) -> int | None:
        """Number of addressable tasks in a split, or None when any index is valid."""
        return self.spec.split_size(self.settings, split)

    def check_splits(self, train_split: str, val_split: str | Sequence[str], val_stop: int) -> None:
        """Start-up check of the splits a run plays, before any model or game loads: each exists (on
        the real ALFWorld dataset: its folder) and the validation split holds tasks up to ``val_stop``
        (data.val_start_index + data.val_episodes, over a list of splits in order; 0 = no validation,
        its split is not checked). Logs which data the run plays and why (``EnvSpec.announce``)."""
        spec, settings = self.spec, self.settings
        if spec.announce is not None:
            spec.announce(settings)
        try:
            spec.check_split(settings, train_split, False)
        except ValueError as exc:
            raise type(exc)(f"data.train_split={train_split!r}: {exc}") from None
        if not val_stop:
            return
        splits = [val_split] if isinstance(val_split, str) else list(val_split)
        sizes = []
        for k, split in enumerate(splits):
            try:
                size = spec.check_split(settings, split, True)
            except ValueError as exc:
                raise type(exc)(f"data.val_split={val_split!r}: {exc}") from None
            if size is None and k < len(splits) - 1:  # the next split's tasks would start at an unknown index
                raise ValueError(f"data.val_split={val_split!r}: the size of {split!r} is unknown here, so only the "
                                 "last split of the list may be one of unknown size; reorder the list")
            sizes.append(size)
        if None not in sizes and val_stop > sum(sizes):
            raise ValueError(f"data.val_split={val_split!r} holds {sum(sizes)} tasks, but data.val_start_index + "
                             f"data.val_episodes = {val_stop}; lower them to fit")


def resolve_env(name: str, options: dict[str, Any] | None = None) -> EnvSetup:
    """The env ``name`` with ``options``, checked: a bad option fails at start-up, naming it, before
    any model or game loads (worker processes would meet it only when they start)."""
    options = dict(options or {})
    return EnvSetup(env_spec(name), options, check_options(name, options))


def make_env_factory(name: str, options: dict[str, Any] | None = None) -> Callable[[], TextEnv]:
    """``resolve_env(name, options).factory()``: one env by name, for scripts and tests."""
    return resolve_env(name, options).factory()


def split_size(name: str, split: str, options: dict[str, Any] | None = None) -> int | None:
    """``resolve_env(name, options).split_size(split)``, for scripts and tests."""
    return resolve_env(name, options).split_size(split)


def check_options(name: str, options: dict[str, Any]) -> Any:
    """Build the env's settings from ``data.env_options`` (unknown names and bad values name the field)."""
    settings = env_spec(name).settings
    check_keywords("data.env_options", f"the {name} env", settings, options)
    try:
        return settings(**options)
    except (ValueError, FileNotFoundError) as exc:
        raise type(exc)(f"data.env_options: {exc}") from None


class _Factory:
    def __init__(self, make: Callable[..., TextEnv], options: dict[str, Any]):
        self.make, self.options = make, options

    def __call__(self) -> TextEnv:
        return self.make(**self.options)


@dataclass
class _Result:
    results: list[Any]
    stats: dict[str, int] = field(default_factory=dict)


class SequentialPool:
    """All envs in this process, stepped one after another (``data.workers: 0``): for tests and
    debugging. Same interface as ``envs.workers.EnvPool``; an env that raises fails the run here."""

    def __init__(self, factory: Callable[[], TextEnv], size: int):
        self.envs = [factory() for _ in range(size)]

    def reset(self, groups: Sequence[tuple[str, int]], group_size: int) -> _Result:
        slots = group_slots(groups, group_size, len(self.envs))
        return _Result([self.envs[slot].reset(*task) for slot, task in slots.items()])

    def step(self, actions: Sequence[str | None]) -> _Result:
        return _Result([None if a is None else self.envs[i].step(a) for i, a in enumerate(actions)])

    def close(self) -> None:
        for env in self.envs:
            env.close()


def make_pool(factory: Callable[[], TextEnv], size: int, *, workers: int, backend: str = "process",
              step_timeout_s: float | None = None, reset_timeout_s: float | None = None,
              address: str | None = None) -> Any:
    """The pool that steps ``size`` envs: in this process (``workers`` 0), in local worker
    processes (``envs.workers.EnvPool``) or in Ray actors (``envs.ray_pool.RayEnvPool``)."""
    if workers == 0:
        return SequentialPool(factory, size)
    if backend == "ray":
        from envs.ray_pool import RayEnvPool

        return RayEnvPool(factory, size, num_workers=workers, timeout_s=step_timeout_s,
                          reset_timeout_s=reset_timeout_s, address=address)
    from envs.workers import EnvPool

    return EnvPool(factory, size, num_workers=workers, timeout_s=step_timeout_s, reset_timeout_s=reset_timeout_s)
