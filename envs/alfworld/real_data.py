"""The downloaded ALFWorld dataset (``alfworld-download`` layout), played with no code change.

Layout: ``<data>/json_2.1.1/<split>/<family>-<Obj>-<MRecep>-<Recep>-<scene>/trial_*/`` holding
``traj_data.json`` and ``game.tw-pddl``. A split's games are the ones alfworld 0.4.2's
``AlfredTWEnv.collect_game_files`` keeps, tested in its order: every folder with a
``traj_data.json`` is a trial; it is left out when its path names a movable-receptacle or sliced
task, when its ``task_type`` is not one of the six families, when it has no ``game.tw-pddl``,
when that file has no ``solvable`` key, or when it is marked unsolvable. alfworld says so only
in verbose mode; we count every reason (``skipped``) and log it.

Order: alfworld walks the split bottom-up (``os.walk(topdown=False)``), and lists a folder's
entries in the file system's order, which can differ between machines; we walk bottom-up with
entries sorted by name, so index i is the same game in every process and on every machine.

One difference, deliberate: a game file whose task sentence is still alfworld's ``UNKNOWN
GOAL`` placeholder is played with the sentence filled in from ``traj_data.json`` (as
alfworld-generate fills it); ``AlfredTWEnv`` would play it with the placeholder. Downloaded
games always carry their sentence.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from envs.alfworld.errors import AlfworldDataError
from envs.alfworld.games import GameRef
from envs.alfworld.problem import grammar_with_task
from envs.alfworld.vocab import FAMILIES, goal_library

log = logging.getLogger(__name__)

LAYOUT_HINT = ("expected <data>/json_2.1.1/<split>/<family>-<Obj>-<MRecep>-<Recep>-<scene>/trial_*/ holding "
               "traj_data.json and game.tw-pddl, the layout alfworld-download writes")
TRAJ, GAME = "traj_data.json", "game.tw-pddl"


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise AlfworldDataError(f"cannot read {path} as JSON ({exc}); re-download the dataset "
                                "(alfworld-download) or delete that trial folder") from exc


def trial_dirs(split_dir: Path) -> Iterator[Path]:
    """Folders holding ``traj_data.json``, in ``os.walk(topdown=False)`` order with sorted entries.

    Like ``os.walk``: unreadable folders are passed over, and symlinked folders are listed but not
    entered.
    """
    try:
        entries = sorted(os.scandir(split_dir), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            yield from trial_dirs(Path(entry.path))
    if any(entry.name == TRAJ and not entry.is_dir() for entry in entries):
        yield split_dir


def collect_trials(split_dir: Path) -> tuple[list[tuple[Path, str]], Counter]:
    """(trial folder, family) of every game alfworld's ``AlfredTWEnv`` plays, and what it skips."""
    kept, skipped = [], Counter()
    for trial in trial_dirs(split_dir):
        # alfworld tests the whole path string, its data folder's own name included.
        if "movable" in str(trial) or "Sliced" in str(trial):
            skipped["movable_or_sliced"] += 1
            continue
        traj = _read_json(trial / TRAJ)
        if "task_type" not in traj:
            raise AlfworldDataError(f"{trial / TRAJ} has no 'task_type' (alfworld's AlfredTWEnv fails on it too); "
                                    "re-download the dataset or delete that trial folder")
        if traj["task_type"] not in FAMILIES:
            skipped["task_type"] += 1
            continue
        if not (trial / GAME).exists():
            skipped["no_game_file"] += 1
            continue
        game = _read_json(trial / GAME)
        if "solvable" not in game:
            skipped["no_solvable_key"] += 1
            continue
        if not game["solvable"]:
            skipped["unsolvable"] += 1
            continue
        kept.append((trial, traj["task_type"]))
    return kept, skipped


class RealGames:
    """Games of ``<data_dir>/json_2.1.1/<split>``, indexed in alfworld's order (module docstring)."""

    kind = "real"

    def __init__(self, data_dir: str | Path):
        self.data_dir = Path(data_dir).expanduser()
        self.root = self.data_dir / "json_2.1.1"
        if not self.root.is_dir():
            found = sorted(p.name for p in self.data_dir.iterdir())[:10] if self.data_dir.is_dir() else "nothing"
            raise AlfworldDataError(
                f"ALFWorld data dir {self.data_dir} has no json_2.1.1/ ({LAYOUT_HINT}); found: {found}")
        self._trials: dict[str, list[tuple[Path, str]]] = {}
        self.skipped: dict[str, Counter] = {}

    def split_dir(self, split: str) -> Path:
        """The split's folder; a clear error naming the path and the splits present when it is missing."""
        path = self.root / split
        if not path.is_dir():
            have = sorted(p.name for p in self.root.iterdir() if p.is_dir())
            raise AlfworldDataError(f"no split {split!r} under {self.root} (have {have}); {LAYOUT_HINT}")
        return path

    def _list(self, split: str) -> list[tuple[Path, str]]:
        if split not in self._trials:
            split_dir = self.split_dir(split)
            trials, skipped = collect_trials(split_dir)
            if not trials:
                why = dict(sorted(skipped.items())) or f"no trial folder with {TRAJ}"
                raise AlfworldDataError(f"no playable games under {split_dir} ({why}); {LAYOUT_HINT}")
            if skipped:
                log.info("ALFWorld %s: left out %s, as alfworld's AlfredTWEnv does; %d games remain",
                         split, dict(sorted(skipped.items())), len(trials))
            self._trials[split], self.skipped[split] = trials, skipped
        return self._trials[split]

    def num_games(self, split: str) -> int:
        return len(self._list(split))

    def families(self, split: str) -> list[str]:
        return [family for _, family in self._list(split)]

    def game(self, split: str, index: int) -> GameRef:
        trials = self._list(split)
        if not 0 <= index < len(trials):
            raise IndexError(
                f"index {index} out of range for split {split!r} ({len(trials)} games in {self.root / split})")
        trial, family = trials[index]
        game_id = str(trial.relative_to(self.data_dir))
        game_file = trial / GAME
        data = _read_json(game_file)
        if "UNKNOWN GOAL" not in data["grammar"]:
            return GameRef(str(game_file), family, game_id)
        # Filled like alfworld-generate's add_task_to_grammar, with a template drawn from a seed of
        # the game id so that every member of a group reads the same task.
        params = _read_json(trial / TRAJ)["pddl_params"]
        templates = goal_library()[family + ("_slice" if params["object_sliced"] else "")]["templates"]
        task = random.Random(game_id).choice(templates).format(
            obj=params["object_target"].lower(), recep=params["parent_target"].lower(),
            toggle=params["toggle_target"].lower(), mrecep=params["mrecep_target"].lower())
        return GameRef(str(game_file), family, game_id, data={**data, "grammar": grammar_with_task(task)})
