"""The ALFWorld ``TextEnv``: TextWorld's real ``PddlEnv`` behind alfworld's own wrappers.

Exactly the engine stack alfworld's ``AlfredTWEnv`` builds (``PddlEnv`` + ``AlfredDemangler``
+ ``AlfredInfos``), so observations, admissible commands, rules, "Nothing happens." for a
command that is not admissible and the ``won`` signal are the engine's own; this file only maps
them onto ``envs.base.TextEnv`` and adds the step limit and the reward of 10 on the winning step.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from envs.alfworld.errors import AlfworldDataError, import_alfworld
from envs.alfworld.games import FamilySubset, GameRef, GameSource, GeneratedGames
from envs.alfworld.generator import SIZES
from envs.alfworld.vocab import FAMILIES
from envs.alfworld.real_data import LAYOUT_HINT, RealGames
from envs.base import Reset, TextEnv, Transition

NOTHING_HAPPENS = "Nothing happens."
TASK_MARKER = "Your task is to: "
WIN_REWARD = 10.0


@dataclass(frozen=True)
class AlfworldConfig:
    """Which ALFWorld games to play and how.

    Args:
        source: "auto" plays the real dataset when one is found (``data_path``, else
            ``$ALFWORLD_DATA``, else alfworld's default ``~/.cache/alfworld``) and generated
            games otherwise; "real" requires the dataset; "generated" never looks for it.
        data_path: Folder holding ``json_2.1.1/<split>/...`` (the alfworld-download layout).
        cache_dir: Where generated games are cached (default ``$SCPO_ALFWORLD_CACHE`` or
            ``~/.cache/scpo_lightning/alfworld``).
        size: Generated room size: "alfred" (ALFRED scale, the default), "medium", "small" or "tiny"
            (a handful of receptacles: a weak policy sometimes wins within 10-15 steps).
        max_steps: Episode step limit; the step that reaches it returns ``done=True``.
        families: Play only games of these task families (e.g. [pick_and_place_simple,
            look_at_obj_in_light]), re-indexed within each split; null = all six.
    """

    source: str = "auto"
    data_path: str | None = None
    cache_dir: str | None = None
    size: str = "alfred"
    max_steps: int = 50
    families: tuple[str, ...] | None = None

    def __post_init__(self):
        # Cheap checks only (paths, names), run wherever a config is built: at start-up in the main
        # process (envs.registry) before any model or game loads, and again in every worker.
        if self.source not in ("auto", "real", "generated"):
            raise ValueError(f"AlfworldConfig.source={self.source!r}; expected 'auto', 'real' or 'generated'")
        if self.max_steps < 1:
            raise ValueError(f"AlfworldConfig.max_steps={self.max_steps}; must be >= 1")
        if self.families is not None:
            object.__setattr__(self, "families", tuple(self.families))  # a YAML list; hashable here
            unknown = sorted(set(self.families) - set(FAMILIES))
            if unknown or not self.families:
                raise ValueError(f"AlfworldConfig.families={list(self.families)}: unknown or empty; choose from "
                                 f"{list(FAMILIES)}, or null for all")
        if self.size not in SIZES:
            raise ValueError(f"AlfworldConfig.size={self.size!r}: expected one of {', '.join(SIZES)}")
        if self.data_path is not None:
            if self.source == "generated":
                raise ValueError(f"AlfworldConfig.data_path={self.data_path!r} is set but source='generated' never "
                                 "reads it; remove data_path, or set source: real to play the dataset")
            if not (Path(self.data_path).expanduser() / "json_2.1.1").is_dir():
                raise AlfworldDataError(f"AlfworldConfig.data_path={self.data_path!r} has no json_2.1.1/ folder "
                                        f"({LAYOUT_HINT}); point it at the folder alfworld-download filled")
        elif self.source == "real" and _default_data_dir() is None:
            raise ValueError("AlfworldConfig.source='real' needs data_path or $ALFWORLD_DATA pointing at the dataset "
                             f"({LAYOUT_HINT}), or source: generated")


def _default_data_dir() -> Path | None:
    """$ALFWORLD_DATA or alfworld's default folder, when it holds the dataset.

    ``import alfworld`` itself sets $ALFWORLD_DATA to its (usually empty) default, and worker
    processes inherit that, so a folder without ``json_2.1.1/`` does not count as data here;
    ``source: real`` still reports it as an error.
    """
    env = os.environ.get("ALFWORLD_DATA")
    default = Path.home() / ".cache" / "alfworld"
    for candidate in ([Path(env)] if env else []) + [default]:
        if (candidate / "json_2.1.1").is_dir():
            return candidate
    if env and Path(env) != default:  # a folder the user named, not alfworld's own default
        warnings.warn(f"$ALFWORLD_DATA={env} has no json_2.1.1/; playing generated games (source: auto)")
    return None


def make_source(config: AlfworldConfig) -> GameSource:
    """Resolve ``config.source`` to the real dataset or the generator."""
    data_dir = Path(config.data_path) if config.data_path else None
    if config.source == "real" or (config.source == "auto" and (data_dir or _default_data_dir())):
        data_dir = data_dir or _default_data_dir()
        if data_dir is None:
            raise ValueError("AlfworldConfig.source='real' needs data_path or $ALFWORLD_DATA pointing at the dataset")
        source: GameSource = RealGames(data_dir)
    else:
        source = GeneratedGames(config.cache_dir, config.size)
    return FamilySubset(source, config.families) if config.families else source


class AlfworldEnv(TextEnv):
    """One ALFWorld game at a time on the real engine."""

    def __init__(self, config: AlfworldConfig | None = None):
        self.config = config or AlfworldConfig()
        self.max_steps = self.config.max_steps
        self._source: GameSource | None = None
        self._engine = None
        self._loaded: str | None = None  # game id currently loaded in the engine
        self._steps = 0
        self._done = True
        self._won = False

    @property
    def source(self) -> GameSource:
        if self._source is None:
            self._source = make_source(self.config)
        return self._source

    def _make_engine(self):
        import_alfworld()
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.envs.pddl import PddlEnv

        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        # One engine per env for its whole life: each PddlEnv loads its own copy of fast-downward.
        return AlfredInfos(AlfredDemangler(shuffle=False)(PddlEnv(infos)))

    def _load(self, ref: GameRef) -> None:
        if self._engine is None:
            self._engine = self._make_engine()
        if self._loaded != ref.game_id:  # a group plays one game: reload only when it changes
            self._engine.load(ref.data if ref.data is not None else ref.path)
            self._loaded = ref.game_id

    def reset(self, split: str, index: int) -> Reset:
        ref = self.source.game(split, index)
        self._load(ref)
        state = self._engine.reset()
        self._steps, self._done, self._won = 0, False, False
        intro = state.feedback
        if TASK_MARKER not in intro:
            raise ValueError(f"game {ref.game_id}: intro has no {TASK_MARKER!r}; is its grammar alfworld's?")
        task = intro.split(TASK_MARKER, 1)[1].strip()
        # The game file's own walkthrough (asking the engine for one would run its planner).
        walkthrough = list(getattr(self._engine, "walkthrough", None) or [])
        info = {"gamefile": ref.path, "source": self.source.kind, "walkthrough": walkthrough}
        return Reset(intro, list(state["admissible_commands"]), task, ref.family, ref.game_id, info)

    def step(self, action: str) -> Transition:
        if self._done:
            raise RuntimeError("AlfworldEnv.step called after the episode ended; call reset first")
        state, _score, _engine_done = self._engine.step(action)
        self._steps += 1
        won = bool(state["won"])
        reward = WIN_REWARD if won and not self._won else 0.0
        self._won = won
        truncated = not won and self._steps >= self.max_steps
        self._done = won or truncated
        feedback = state.feedback
        return Transition(feedback, list(state["admissible_commands"]), reward, self._done, won,
                          noop=feedback.strip() == NOTHING_HAPPENS, info={"steps": self._steps, "truncated": truncated})

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine, self._loaded = None, None
