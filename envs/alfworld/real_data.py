"""The downloaded ALFWorld dataset (``alfworld-download`` layout), played with no code change.

Layout: ``<data>/json_2.1.1/<split>/<family>-<Obj>-<MRecep>-<Recep>-<scene>/trial_*/`` with
``game.tw-pddl`` (or ``initial_state.pddl`` + ``traj_data.json``, which we assemble like
alfworld's ``AlfredTWEnv`` does). Like alfworld we leave out movable-receptacle and sliced
trials and games marked unsolvable; unlike it we say so (``skipped``), never silently.
"""

from __future__ import annotations

import json
import logging
import os
import random
from collections import Counter
from pathlib import Path

from envs.alfworld.errors import AlfworldDataError, check_family
from envs.alfworld.games import GameRef
from envs.alfworld.problem import domain_and_grammar, grammar_with_task
from envs.alfworld.vocab import goal_library

log = logging.getLogger(__name__)

LAYOUT_HINT = ("expected <data>/json_2.1.1/<split>/<family>-<Obj>-<MRecep>-<Recep>-<scene>/trial_*/game.tw-pddl "
               "(or initial_state.pddl + traj_data.json), the layout alfworld-download writes")


def family_of_path(trial_dir: Path) -> str:
    """Task family from the game path: the task folder name up to its first '-'."""
    return check_family(trial_dir.parent.name.split("-", 1)[0])


class RealGames:
    """Games of ``<data_dir>/json_2.1.1/<split>``, indexed in sorted path order."""

    kind = "real"

    def __init__(self, data_dir: str | Path):
        self.data_dir = Path(data_dir).expanduser()
        self.root = self.data_dir / "json_2.1.1"
        if not self.root.is_dir():
            found = sorted(p.name for p in self.data_dir.iterdir())[:10] if self.data_dir.is_dir() else "nothing"
            raise AlfworldDataError(
                f"ALFWorld data dir {self.data_dir} has no json_2.1.1/ ({LAYOUT_HINT}); found: {found}")
        self._trials: dict[str, list[Path]] = {}
        self.skipped: dict[str, Counter] = {}

    def _list(self, split: str) -> list[Path]:
        if split in self._trials:
            return self._trials[split]
        split_dir = self.root / split
        if not split_dir.is_dir():
            have = sorted(p.name for p in self.root.iterdir() if p.is_dir())
            raise AlfworldDataError(f"no split {split!r} under {self.root} (have {have}); {LAYOUT_HINT}")
        trials, skipped = [], Counter()
        for root, dirs, files in os.walk(split_dir):
            dirs.sort()
            has_game = "game.tw-pddl" in files or {"initial_state.pddl", "traj_data.json"} <= set(files)
            if not has_game:
                continue
            if "movable" in root or "Sliced" in root:  # alfworld's AlfredTWEnv leaves these out too
                skipped["movable_or_sliced"] += 1
                continue
            game_file = Path(root) / "game.tw-pddl"
            if game_file.exists() and not json.loads(game_file.read_text()).get("solvable", True):
                skipped["unsolvable"] += 1
                continue
            trials.append(Path(root))
        if not trials:
            why = dict(skipped) or "no game files"
            raise AlfworldDataError(f"no playable games under {split_dir} ({why}); {LAYOUT_HINT}")
        if skipped:
            log.warning("ALFWorld %s: left out %s (as alfworld does); %d games remain",
                        split, dict(skipped), len(trials))
        self._trials[split], self.skipped[split] = trials, skipped
        return trials

    def num_games(self, split: str) -> int:
        return len(self._list(split))

    def families(self, split: str) -> list[str]:
        return [family_of_path(trial) for trial in self._list(split)]

    def game(self, split: str, index: int) -> GameRef:
        trials = self._list(split)
        if not 0 <= index < len(trials):
            raise IndexError(
                f"index {index} out of range for split {split!r} ({len(trials)} games in {self.root / split})")
        trial = trials[index]
        game_id = str(trial.relative_to(self.data_dir))
        family = family_of_path(trial)
        game_file = trial / "game.tw-pddl"
        data = json.loads(game_file.read_text()) if game_file.exists() else None
        if data is not None and "UNKNOWN GOAL" not in data["grammar"]:
            return GameRef(str(game_file), family, game_id)
        # The task sentence is not in the file: fill it like alfworld's add_task_to_grammar, with
        # a template drawn from a seed of the game id so every group member reads the same task.
        traj = json.loads((trial / "traj_data.json").read_text())
        params = traj["pddl_params"]
        templates = goal_library()[traj["task_type"] + ("_slice" if params["object_sliced"] else "")]["templates"]
        task = random.Random(game_id).choice(templates).format(
            obj=params["object_target"].lower(), recep=params["parent_target"].lower(),
            toggle=params["toggle_target"].lower(), mrecep=params["mrecep_target"].lower())
        if data is None:
            data = {"pddl_domain": domain_and_grammar()[0], "pddl_problem": (trial / "initial_state.pddl").read_text(),
                    "solvable": True}
        return GameRef(str(game_file), family, game_id, data={**data, "grammar": grammar_with_task(task)})
