"""The ALFWorld ``TextEnv``: TextWorld's real ``PddlEnv`` behind alfworld's own wrappers.

Exactly the engine stack alfworld's ``AlfredTWEnv`` builds (``PddlEnv`` + ``AlfredDemangler``
+ ``AlfredInfos``), so observations, admissible commands, rules, "Nothing happens." for a
command that is not admissible and the ``won`` signal are the engine's own; this file only maps
them onto ``envs.base.TextEnv`` and adds the step limit and the reward of 10 on the winning step.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from envs.alfworld.errors import ENGINE_PACKAGES, AlfworldDataError, AlfworldDataMissing, import_alfworld
from envs.alfworld.games import FamilySubset, GameRef, GameSource, GeneratedGames
from envs.alfworld.generator import SIZES
from envs.alfworld.vocab import FAMILIES
from envs.alfworld.real_data import LAYOUT_HINT, RealGames
from envs.base import Reset, TextEnv, Transition
from envs.common.packages import check_all, require
from envs.common.rules import TEXT, check, count, optional

NOTHING_HAPPENS = "Nothing happens."
TASK_MARKER = "Your task is to: "
WIN_REWARD = 10.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AlfworldConfig:
    """Which ALFWorld games to play and how.

    Args:
        source: "auto" plays the real dataset when one is found (``data_path``, else
            ``$ALFWORLD_DATA``, else alfworld's default ``~/.cache/alfworld``) and generated
            games otherwise, and logs which and why; a data_path or $ALFWORLD_DATA without the
            dataset is an error, never a switch to generated games. "real" requires the dataset;
            "generated" never looks for it.
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
        check("AlfworldConfig", AlfworldConfig, vars(self),
              {"data_path": optional(TEXT), "cache_dir": optional(TEXT), "max_steps": count(1)})
        if self.families is not None:
            object.__setattr__(self, "families", tuple(self.families))  # a YAML list; hashable here
            unknown = sorted(set(self.families) - set(FAMILIES))
            if unknown or not self.families:
                raise ValueError(f"AlfworldConfig.families={list(self.families)}: unknown or empty; choose from "
                                 f"{list(FAMILIES)}, or null for all")
        if self.size not in SIZES:
            raise ValueError(f"AlfworldConfig.size={self.size!r}: expected one of {', '.join(SIZES)}")
        if self.data_path is not None and self.source == "generated":
            raise ValueError(f"AlfworldConfig.data_path={self.data_path!r} is set but source='generated' never "
                             "reads it; remove data_path, or set source: real to play the dataset")
        # The engine's packages and a dataset folder that is missing or wrong fail here, at start-up,
        # together (--dry_run lists each).
        check_all(lambda: require("data.env=alfworld", ENGINE_PACKAGES, "pip install -e '.[alfworld]'"),
                  lambda: self.source == "generated" or choose_source(self))


def check_data_dir(path: Path, field: str, fix: str) -> Path:
    """``path``, which the user named, holds the dataset. A named folder that is absent or lacks
    ``json_2.1.1/`` is a wrong value (``AlfworldDataError``), which fails the dry run too: only a
    dataset nobody pointed at (``source: real`` with no path) is merely missing, as a model is."""
    fix = f"point it at the folder alfworld-download filled, or {fix}"
    if not path.exists():
        raise AlfworldDataError(f"{field}={str(path)!r} does not exist on this machine ({LAYOUT_HINT}); {fix}")
    if not (path / "json_2.1.1").is_dir():
        raise AlfworldDataError(f"{field}={str(path)!r} has no json_2.1.1/ folder ({LAYOUT_HINT}); {fix}")
    return path


def choose_source(config: AlfworldConfig) -> tuple[Path | None, str]:
    """The dataset folder that ``config`` plays (None: generated games) and why that one.

    An explicit ``data_path`` or ``$ALFWORLD_DATA`` must hold the dataset: a wrong one is an error,
    never a silent switch to generated games. ``import alfworld`` itself sets $ALFWORLD_DATA to its
    default folder (and worker processes inherit that), so that folder counts as named by no one.
    """
    if config.source == "generated":
        return None, "source: generated"
    if config.data_path is not None:
        return check_data_dir(Path(config.data_path).expanduser(), "AlfworldConfig.data_path",
                              "remove data_path to play generated games"), "data_path"
    named = os.environ.get("ALFWORLD_DATA")
    default = Path.home() / ".cache" / "alfworld"
    if named and Path(named).expanduser() != default:
        return check_data_dir(Path(named).expanduser(), "$ALFWORLD_DATA",
                              "unset it, or set data.env_options.source: generated"), "$ALFWORLD_DATA"
    if (default / "json_2.1.1").is_dir():
        return default, f"alfworld's default folder {default}"
    if config.source == "real":
        raise AlfworldDataMissing("AlfworldConfig.source='real' needs data_path or $ALFWORLD_DATA pointing at the "
                                  f"dataset ({LAYOUT_HINT}), or source: generated")
    return None, f"source: auto and no dataset here (no data_path, no $ALFWORLD_DATA, nothing in {default})"


def make_source(config: AlfworldConfig) -> GameSource:
    """Resolve ``config.source`` to the real dataset or the generator."""
    data_dir, _ = choose_source(config)
    source: GameSource = RealGames(data_dir) if data_dir else GeneratedGames(config.cache_dir, config.size)
    return FamilySubset(source, config.families) if config.families else source


def check_split(config: AlfworldConfig, split: str, counted: bool) -> int | None:
    """Start-up check that ``split`` exists where ``config`` plays: the real dataset's folder, or a
    generated split's name. With ``counted``, its number of games (on the real dataset that lists the
    split: done only for the validation split, whose size the run needs)."""
    source = make_source(config)
    games = source.source if isinstance(source, FamilySubset) else source
    if isinstance(games, RealGames):
        games.split_dir(split)
    else:
        games.num_games(split)
    return source.num_games(split) if counted else None


def announce_source(config: AlfworldConfig) -> None:
    """Say at start-up which games the run plays and why (INFO)."""
    data_dir, why = choose_source(config)
    played = f"the real games in {data_dir}" if data_dir else f"generated {config.size!r} rooms"
    log.info("ALFWorld plays %s (%s)", played, why)


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
