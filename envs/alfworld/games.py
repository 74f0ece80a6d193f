"""Where games come from: generated ones (cached on disk with a manifest) or the real dataset.

``GameRef`` is what the env adapter needs for one ``(split, index)``: a game file path (or the
game dict when it had to be assembled in memory), its task family and a stable id.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from envs.alfworld.errors import AlfworldDataError
from envs.alfworld.generator import GENERATOR_VERSION, SPLIT_SIZES, family_of, room_size, sample_layout
from envs.alfworld.problem import game_bytes, game_dict

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class GameRef:
    path: str  # the game.tw-pddl file
    family: str
    game_id: str  # stable across processes and machines; identical for a whole group
    data: dict[str, Any] | None = None  # set when the playable game differs from the file on disk


class GameSource(Protocol):
    kind: str  # "generated" or "real"

    def num_games(self, split: str) -> int: ...

    def game(self, split: str, index: int) -> GameRef: ...

    def families(self, split: str) -> list[str]: ...


class FamilySubset:
    """The games of ``source`` whose task family is in ``families``, re-indexed 0..n-1 per split
    in the source's order (``AlfworldConfig.families``)."""

    def __init__(self, source: GameSource, families: tuple[str, ...]):
        self.source, self.wanted, self.kind = source, frozenset(families), source.kind
        self._indices: dict[str, list[int]] = {}

    def _kept(self, split: str) -> list[int]:
        if split not in self._indices:
            self._indices[split] = [i for i, f in enumerate(self.source.families(split)) if f in self.wanted]
            if not self._indices[split]:
                raise AlfworldDataError(f"ALFWorld split {split!r} has no game of the families {sorted(self.wanted)} "
                                        "(AlfworldConfig.families); choose families the split holds")
        return self._indices[split]

    def num_games(self, split: str) -> int:
        return len(self._kept(split))

    def game(self, split: str, index: int) -> GameRef:
        kept = self._kept(split)
        if not 0 <= index < len(kept):
            raise IndexError(f"index {index} out of range for split {split!r} ({len(kept)} games of "
                             f"the families {sorted(self.wanted)})")
        return self.source.game(split, kept[index])

    def families(self, split: str) -> list[str]:
        return [self.source.families(split)[i] for i in self._kept(split)]


def default_cache_dir() -> Path:
    """``$SCPO_ALFWORLD_CACHE``, else ``~/.cache/scpo_lightning/alfworld``."""
    env = os.environ.get("SCPO_ALFWORLD_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "scpo_lightning" / "alfworld"


def _atomic_write(path: Path, data: bytes) -> None:
    """Write via a temp file + rename, so concurrent workers never read a half-written game."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


class GeneratedGames:
    """Generated games under ``<cache_dir>/gen-v<version>/<size>/<split>/<index>.tw-pddl``.

    A game is generated and written on first use; ``generate_split`` pre-generates a range and
    records every file's SHA-256 in the split's ``manifest.json``. The generator version is part
    of the path, so a cache written by another version is never read.
    """

    kind = "generated"

    def __init__(self, cache_dir: str | Path | None = None, size: str = "alfred"):
        self.size = room_size(size)
        self.root = Path(cache_dir) if cache_dir else default_cache_dir()
        self._checked: set[str] = set()

    def split_dir(self, split: str) -> Path:
        return self.root / f"gen-v{GENERATOR_VERSION}" / self.size.name / split

    def num_games(self, split: str) -> int:
        if split not in SPLIT_SIZES:
            raise ValueError(f"unknown ALFWorld split {split!r}; expected one of {', '.join(SPLIT_SIZES)}")
        return SPLIT_SIZES[split]

    def families(self, split: str) -> list[str]:
        return [family_of(i) for i in range(self.num_games(split))]

    def _header(self, split: str) -> dict:
        return {"generator_version": GENERATOR_VERSION, "size": asdict(self.size), "split": split,
                "num_games": self.num_games(split)}

    def _check_manifest(self, split: str) -> None:
        if split in self._checked:
            return
        path = self.split_dir(split) / MANIFEST
        if path.exists():
            found = json.loads(path.read_text())
            expected = self._header(split)
            if {k: found.get(k) for k in expected} != expected:
                raise AlfworldDataError(
                    f"{path} was written with other generator settings ({ {k: found.get(k) for k in expected} }); "
                    f"expected {expected}. Delete {path.parent} to regenerate it."
                )
        else:
            _atomic_write(path, json.dumps({**self._header(split), "games": {}}, indent=1).encode())
        self._checked.add(split)

    def build(self, split: str, index: int) -> bytes:
        """The game's canonical bytes, generated in memory (no cache involved)."""
        self.num_games(split)
        return game_bytes(game_dict(sample_layout(split, index, self.size), split, index, self.size.name))

    def game(self, split: str, index: int) -> GameRef:
        if not 0 <= index < self.num_games(split):
            raise IndexError(f"index {index} out of range for split {split!r} ({self.num_games(split)} games)")
        self._check_manifest(split)
        path = self.split_dir(split) / f"{index:05d}.tw-pddl"
        if not path.exists():
            _atomic_write(path, self.build(split, index))
        game_id = f"gen-v{GENERATOR_VERSION}/{self.size.name}/{split}/{index:05d}"
        return GameRef(str(path), family_of(index), game_id)

    def generate_split(self, split: str, start: int = 0, end: int | None = None,
                       progress: Callable[[int], None] | None = None) -> dict:
        """(Re)generate games ``start..end-1`` and record their hashes in the manifest."""
        end = self.num_games(split) if end is None else end
        if not 0 <= start <= end <= self.num_games(split):
            raise IndexError(f"range {start}..{end} out of bounds for {split!r} ({self.num_games(split)} games)")
        self._check_manifest(split)
        manifest_path = self.split_dir(split) / MANIFEST
        manifest = json.loads(manifest_path.read_text())
        began = time.perf_counter()
        for index in range(start, end):
            data = self.build(split, index)
            _atomic_write(self.split_dir(split) / f"{index:05d}.tw-pddl", data)
            manifest["games"][f"{index:05d}"] = {"sha256": hashlib.sha256(data).hexdigest(), "family": family_of(index)}
            if progress:
                progress(index)
        seconds = time.perf_counter() - began
        manifest["games"] = dict(sorted(manifest["games"].items()))
        _atomic_write(manifest_path, json.dumps(manifest, indent=1).encode())
        return {"games": end - start, "seconds": seconds, "games_per_s": (end - start) / max(seconds, 1e-9)}
