"""Generated ALFRED-scale rooms against the real ALFWorld games, floor plan by floor plan.

    python -m benchmarks.alfworld_rooms [--data-path DIR] [--games-per-plan 4] [--print-table]

For each of ALFRED's 120 floor plans:

* layout: receptacle instances from ALFRED's layout data alone (alfworld's ``*-openable.json``
  plus ``vocab.DEFAULT_INSTANCES``: what generated rooms held before the real counts);
* generated (``size: alfred``): receptacle instances of the room; pickupable objects per game,
  the mean over the generated train and valid_unseen games on that floor plan; on the engine,
  the admissible commands at reset of the first such game, and whether its walkthrough wins;
* real: receptacle instances of its real games (``envs.alfworld.alfred_rooms``); with
  ``--data-path``, also up to ``--games-per-plan`` real games of that folder per floor plan:
  receptacles and pickupable objects from their PDDL problems, admissible commands at reset.

"Δ" is generated against real, in percent; the check is |Δ| <= 10 % for receptacles, objects and
admissible commands wherever both are known. ``--print-table`` prints the real counts measured
under ``--data-path`` in ``alfred_rooms.RECEPTACLE_COUNTS``'s form. The markdown table prints to
stdout; the numbers go to ``benchmarks/results/alfworld_rooms.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from benchmarks.common import write_result
from envs.alfworld import AlfworldConfig, AlfworldEnv, vocab
from envs.alfworld.alfred_rooms import RECEPTACLE_COUNTS
from envs.alfworld.generator import SPLIT_SIZES, room_size, sample_layout
from envs.alfworld.real_data import RealGames

TOLERANCE = 0.10
#: The real FloorPlan14 game next to the checkout (../shared/fixtures, as the tests use it).
FIXTURE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "alfworld"


def receptacle_types(problem: str) -> Counter:
    """Receptacle instances per type in a PDDL problem (its facts, not the goal's ``?r`` variables)."""
    return Counter(dict(re.findall(r"\(receptacleType ([^?\s]\S*) (\w+)Type\)", problem)).values())


def pickupables(problem: str) -> int:
    return len(re.findall(r"\(pickupable \S+\)", problem))


def generated_rooms(cache_dir: str) -> dict[int, dict]:
    """Per floor plan: objects per game over every generated train / valid_unseen game on it, and the
    first game's admissible commands at reset and walkthrough result on the engine."""
    size, toggleable = room_size("alfred"), vocab.affordance("Toggleable")
    games: dict[int, list[tuple[str, int, int]]] = defaultdict(list)
    for split in ("train", "valid_unseen"):  # valid_seen draws from train's floor plans
        for index in range(SPLIT_SIZES[split]):
            layout = sample_layout(split, index, size)
            n_objects = sum(uid.split("|", 1)[0] not in toggleable for uid, _ in layout.objects)
            games[layout.scene.number].append((split, index, n_objects))
    env, rooms = AlfworldEnv(AlfworldConfig(source="generated", cache_dir=cache_dir, size="alfred")), {}
    for number, played in sorted(games.items()):
        split, index, _ = played[0]
        first = env.reset(split, index)
        for action in first.info["walkthrough"]:
            last = env.step(action)
        rooms[number] = {"games": len(played), "objects": sum(n for *_, n in played) / len(played),
                         "admissible": len(first.admissible), "walkthrough_wins": last.won}
    env.close()
    return rooms


def real_rooms(data_path: Path, games_per_plan: int) -> dict[int, dict]:
    """Per floor plan: receptacle counts, mean pickupable objects and mean admissible commands at
    reset over up to ``games_per_plan`` real games of every split under ``data_path``."""
    games = RealGames(data_path)
    seen: dict[int, list[tuple[Counter, int, int]]] = defaultdict(list)
    env = AlfworldEnv(AlfworldConfig(source="real", data_path=str(data_path)))
    for split in sorted(p.name for p in games.root.iterdir() if p.is_dir()):
        for index in range(games.num_games(split)):
            ref = games.game(split, index)
            number = int(Path(ref.path).parent.parent.name.rsplit("-", 1)[1])  # <task>-<floor plan>/trial_*
            if len(seen[number]) >= games_per_plan:
                continue
            problem = json.loads(Path(ref.path).read_text())["pddl_problem"]
            admissible = len(env.reset(split, index).admissible)
            seen[number].append((receptacle_types(problem), pickupables(problem), admissible))
    env.close()
    return {number: {"games": len(found), "receptacles": dict(sorted(found[0][0].items())),
                     "objects": sum(o for _, o, _ in found) / len(found),
                     "admissible": sum(a for *_, a in found) / len(found)}
            for number, found in sorted(seen.items())}


def _delta(generated: float | None, real: float | None) -> float | None:
    return None if generated is None or real is None else round(100 * (generated - real) / real, 1)


def compare(generated: dict[int, dict], real_games: dict[int, dict]) -> dict[int, dict]:
    rows = {}
    for number in sorted(set(vocab.constants().TRAIN_SCENE_NUMBERS) | set(vocab.constants().TEST_SCENE_NUMBERS)):
        gen, measured = generated.get(number, {}), real_games.get(number, {})
        real_counts = measured.get("receptacles") or RECEPTACLE_COUNTS.get(number)
        row = {"room": vocab.scene(number).room, "layout": sum(vocab.layout_counts(number).values()),
               "generated": len(vocab.scene(number).receptacles),
               "real": sum(real_counts.values()) if real_counts else None,
               "objects": gen.get("objects"), "real_objects": measured.get("objects"),
               "admissible": gen.get("admissible"), "real_admissible": measured.get("admissible"),
               "walkthrough_wins": gen.get("walkthrough_wins"), "real_games": measured.get("games", 0)}
        row["delta"] = {key: _delta(row[g], row[r]) for key, g, r in (
            ("receptacles", "generated", "real"), ("objects", "objects", "real_objects"),
            ("admissible", "admissible", "real_admissible"))}
        row["layout_delta"] = _delta(row["layout"], row["real"])
        rows[number] = row
    return rows


def _num(value, digits: int = 0) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _pct(value) -> str:
    return "—" if value is None else f"{value:+.1f} %"


def markdown(rows: dict[int, dict]) -> str:
    head = ("| floor plan | room | layout data | generated | real | Δ | objects (gen) | objects (real) | Δ "
            "| admissible (gen) | admissible (real) | Δ | walkthrough |\n" + "|---" * 13 + "|")
    lines = [head]
    for number, r in rows.items():
        d = r["delta"]
        lines.append(" | ".join([
            f"| FloorPlan{number}", r["room"], str(r["layout"]), str(r["generated"]), _num(r["real"]),
            _pct(d["receptacles"]), _num(r["objects"], 1), _num(r["real_objects"], 1), _pct(d["objects"]),
            _num(r["admissible"]), _num(r["real_admissible"], 1), _pct(d["admissible"]),
            {True: "wins", False: "LOST", None: "—"}[r["walkthrough_wins"]]]) + " |")
    return "\n".join(lines)


def summary(rows: dict[int, dict]) -> dict:
    deltas = [abs(v) for r in rows.values() for v in r["delta"].values() if v is not None]
    with_real = [n for n, r in rows.items() if r["real"] is not None]
    return {"floor_plans": len(rows), "with_real_counts": len(with_real),
            "with_real_games": sum(r["real_games"] > 0 for r in rows.values()),
            "max_abs_delta_pct": max(deltas, default=None),
            "all_within_10pct": all(d <= 100 * TOLERANCE for d in deltas),
            "layout_only_max_abs_delta_pct": max((abs(rows[n]["layout_delta"]) for n in with_real), default=None),
            "walkthroughs_won": sum(bool(r["walkthrough_wins"]) for r in rows.values())}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = str(FIXTURE) if (FIXTURE / "json_2.1.1").is_dir() else None
    parser.add_argument("--data-path", default=default,
                        help=f"alfworld-download folder to measure real games in (default: {default})")
    parser.add_argument("--games-per-plan", type=int, default=4, help="real games measured per floor plan")
    parser.add_argument("--print-table", action="store_true",
                        help="print the real receptacle counts found under --data-path as RECEPTACLE_COUNTS entries")
    args = parser.parse_args(argv)
    real_games = real_rooms(Path(args.data_path), args.games_per_plan) if args.data_path else {}
    if args.print_table:
        for number, room in real_games.items():
            print(f"    {number}: {room['receptacles']},")
    with tempfile.TemporaryDirectory() as cache:
        rows = compare(generated_rooms(cache), real_games)
    print(markdown(rows))
    result = {"summary": summary(rows), "data_path": args.data_path, "floor_plans": rows}
    write_result("alfworld_rooms", result)
    return result


if __name__ == "__main__":
    main()
