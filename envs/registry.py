"""Environments by config name, their task splits, and the pool that steps them."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from envs.base import TextEnv


def _corridor(**options: Any) -> TextEnv:
    from envs.toy import CorridorEnv

    return CorridorEnv(**options)


def _webshop(**options: Any) -> TextEnv:
    from envs.webshop.config import WebShopConfig
    from envs.webshop.env import make_webshop_env

    return make_webshop_env(WebShopConfig(**options))  # the real checkout when webshop_checkout is set


def _alfworld(**options: Any) -> TextEnv:
    from envs.alfworld.env import AlfworldConfig, AlfworldEnv

    return AlfworldEnv(AlfworldConfig(**options))


#: name -> factory(**options) building one env instance.
FACTORIES: dict[str, Callable[..., TextEnv]] = {"alfworld": _alfworld, "corridor": _corridor, "webshop": _webshop}
#: name -> the prompt/projection family of SPEC §6.
PROMPT_FAMILY = {"alfworld": "alfworld", "corridor": "alfworld", "webshop": "webshop"}
#: Environments whose episodes end with a graded score (``info["score"]`` at the end), logged as val/score.
SCORED = frozenset({"webshop"})


def task_families(name: str) -> tuple[str, ...]:
    """Every task family ``Reset.family`` can report for environment ``name`` (per-family metrics
    are created for all of them up front, so every rank holds the same metric keys)."""
    if name == "alfworld":
        from envs.alfworld.vocab import FAMILIES

        return FAMILIES
    if name in FACTORIES:
        return (name,)  # corridor and webshop: one family, named like the env
    raise ValueError(f"data.env: unknown environment {name!r}; expected one of {sorted(FACTORIES)}")


def make_env_factory(name: str, options: dict[str, Any] | None = None) -> Callable[[], TextEnv]:
    """A zero-argument factory (picklable arguments only, so worker processes can call it)."""
    if name not in FACTORIES:
        raise ValueError(f"data.env: unknown environment {name!r}; expected one of {sorted(FACTORIES)}")
    options = dict(options or {})
    check_options(name, options)
    return _Factory(name, options)


def check_options(name: str, options: dict[str, Any]) -> None:
    """Build the env's settings once, here: a bad option fails at start-up, naming it, before any
    model or game loads (worker processes would meet it only when they start)."""
    if name == "alfworld":
        from envs.alfworld.env import AlfworldConfig as settings
    elif name == "webshop":
        from envs.webshop.config import WebShopConfig as settings
    else:
        from envs.toy import CorridorEnv as settings  # a plain object: building it only checks
    accepted = list(inspect.signature(settings).parameters)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"data.env_options: {name} takes no option(s) {unknown}; its options are {accepted}")
    try:
        settings(**options)
    except (ValueError, FileNotFoundError) as exc:
        raise type(exc)(f"data.env_options: {exc}") from None


def check_splits(name: str, options: dict[str, Any] | None, train_split: str, val_split: str | Sequence[str],
                 val_stop: int) -> None:
    """Start-up check of the splits a run plays, before any model or game loads: each exists (on
    the real ALFWorld dataset: its folder) and the validation split holds tasks up to ``val_stop``
    (data.val_start_index + data.val_episodes, over a list of splits in order; 0 = no validation,
    its split is not checked). Logs
    which ALFWorld games the run plays and why."""
    options = dict(options or {})
    if name == "alfworld":
        from envs.alfworld.env import AlfworldConfig, announce_source

        announce_source(AlfworldConfig(**options))
    try:
        _checked_split_size(name, options, train_split, counted=False)
    except ValueError as exc:
        raise type(exc)(f"data.train_split={train_split!r}: {exc}") from None
    if not val_stop:
        return
    splits = [val_split] if isinstance(val_split, str) else list(val_split)
    sizes = []
    for k, split in enumerate(splits):
        try:
            size = _checked_split_size(name, options, split, counted=True)
        except ValueError as exc:
            raise type(exc)(f"data.val_split={val_split!r}: {exc}") from None
        if size is None and k < len(splits) - 1:  # the next split's tasks would start at an unknown index
            raise ValueError(f"data.val_split={val_split!r}: the size of {split!r} is unknown here, so only the "
                             "last split of the list may be one of unknown size; reorder the list")
        sizes.append(size)
    if None not in sizes and val_stop > sum(sizes):
        raise ValueError(f"data.val_split={val_split!r} holds {sum(sizes)} tasks, but data.val_start_index + "
                         f"data.val_episodes = {val_stop}; lower them to fit")


def _checked_split_size(name: str, options: dict[str, Any], split: str, counted: bool) -> int | None:
    """Raises for a split the env does not have; its number of tasks when ``counted`` and cheap to know."""
    if name == "alfworld":
        from envs.alfworld.env import AlfworldConfig, check_split

        return check_split(AlfworldConfig(**options), split, counted)
    if name == "webshop":
        from envs.webshop.catalog import NUM_VALID_GOALS
        from envs.webshop.env import SPLITS

        if split not in SPLITS:
            raise ValueError(f"WebShop has no split {split!r}; choose one of {SPLITS}")
        return NUM_VALID_GOALS if split == "valid" else None  # at most; the goals past them train
    return None  # corridor: every split and index is a task


class _Factory:
    def __init__(self, name: str, options: dict[str, Any]):
        self.name, self.options = name, options

    def __call__(self) -> TextEnv:
        return FACTORIES[self.name](**self.options)


def split_size(name: str, split: str, options: dict[str, Any] | None = None) -> int | None:
    """Number of addressable tasks in a split, or None when any index is valid."""
    if name == "corridor":
        return None
    if name == "alfworld":
        from envs.alfworld.env import AlfworldConfig, make_source

        return make_source(AlfworldConfig(**(options or {}))).num_games(split)
    if name == "webshop":
        from envs.webshop.config import WebShopConfig
        from envs.webshop.env import NUM_VALID_GOALS, build_shop
        from envs.webshop.real import real_goal_count

        config = WebShopConfig(**(options or {}))
        goals = real_goal_count(config) if config.webshop_checkout else len(build_shop(config).catalog.goals)
        return min(NUM_VALID_GOALS, goals) if split == "valid" else goals - NUM_VALID_GOALS
    raise ValueError(f"data.env: unknown environment {name!r}; expected one of {sorted(FACTORIES)}")


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
        n = len(groups) * group_size
        if n > len(self.envs):
            raise ValueError(f"{len(groups)} groups x {group_size} = {n} slots; the pool has {len(self.envs)}")
        return _Result([self.envs[g * group_size + j].reset(*task)
                        for g, task in enumerate(groups) for j in range(group_size)])

    def step(self, actions: Sequence[str | None]) -> _Result:
        return _Result([None if a is None else self.envs[i].step(a) for i, a in enumerate(actions)])

    def close(self) -> None:
        for env in self.envs:
            env.close()
