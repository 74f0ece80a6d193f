"""ALFRED's household vocabulary, read from the installed ``alfworld`` package.

The package ships what the generator needs and nothing has to be downloaded: the 120 ALFRED
floor plans (``alfworld/gen/layouts/FloorPlan*-objects.json``: which object and receptacle types
a room holds; ``*-openable.json``: some of its receptacle instances, with their real ids and agent
poses; ``alfred_rooms`` adds how many instances of each type the real games hold),
ALFRED's affordance tables (``alfworld.gen.constants``: what each receptacle type can contain,
which objects are heatable/coolable/cleanable, which rooms host which task family) and the goal
library (PDDL goals and task sentences per family).
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from dataclasses import dataclass
from importlib import resources

from envs.alfworld.alfred_rooms import RECEPTACLE_COUNTS
from envs.alfworld.errors import import_alfworld

#: The six ALFWorld task families, in alfworld's TASK_TYPES order (1..6).
FAMILIES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

#: The appliance a family's state change needs (the domain hard-codes these receptacle types).
APPLIANCE = {
    "pick_clean_then_place_in_recep": ("SinkBasin", "Cleanable", "clean"),
    "pick_heat_then_place_in_recep": ("Microwave", "Heatable", "heat"),
    "pick_cool_then_place_in_recep": ("Fridge", "Coolable", "cool"),
}

LAMPS = ("DeskLamp", "FloorLamp")
#: Where a lamp stands. ALFRED's affordance table has no receptacle for lamps (they are not
#: pickupable), but the look_at_obj_in_light goal needs the lamp `inReceptacle` some furniture.
LAMP_RECEPTACLES = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable", "Sofa", "ArmChair")

#: For floor plans without real counts (``alfred_rooms``): instances of a receptacle type that
#: objects.json names but openable.json omits entirely; typical ALFRED counts.
DEFAULT_INSTANCES = {"StoveBurner": 4, "Drawer": 3, "Shelf": 2, "Cabinet": 4}


@dataclass(frozen=True)
class Receptacle:
    """One static receptacle instance of a floor plan."""

    rtype: str  # e.g. "Cabinet", "SinkBasin"
    uid: str  # ALFRED id, e.g. "Cabinet|+01.66|+02.05|+00.67" or "Sink|+01.10|+00.91|-01.60|SinkBasin"
    pose: tuple[int, int, int, int]  # grid x, grid z, rotation/90, horizon: ALFRED's "loc|x|z|r|h"


@dataclass(frozen=True)
class Scene:
    """One ALFRED floor plan: its room type, object types and receptacle instances."""

    number: int
    room: str  # Kitchen / LivingRoom / Bedroom / Bathroom
    object_types: tuple[str, ...]  # pickupable object types present (sorted)
    lamps: tuple[str, ...]  # lamp types present (sorted)
    receptacles: tuple[Receptacle, ...]  # sorted by uid


@functools.lru_cache(maxsize=1)
def constants():
    """``alfworld.gen.constants`` (ALFRED's affordance tables)."""
    import_alfworld()
    import alfworld.gen.constants as c

    return c


@functools.lru_cache(maxsize=1)
def goal_library() -> dict:
    """``alfworld.gen.goal_library.gdict``: PDDL goal and task templates per family."""
    import_alfworld()
    from alfworld.gen import goal_library

    return goal_library.gdict


@functools.lru_cache(maxsize=1)
def static_receptacle_types() -> tuple[str, ...]:
    c = constants()
    return tuple(sorted(set(c.RECEPTACLES) - set(c.MOVABLE_RECEPTACLES)))


@functools.lru_cache(maxsize=1)
def object_types() -> tuple[str, ...]:
    """Every ALFRED object type that is not a static receptacle (declared as ``otype``)."""
    return tuple(sorted(set(constants().OBJECTS) - set(static_receptacle_types())))


@functools.lru_cache(maxsize=1)
def can_contain() -> dict[str, tuple[str, ...]]:
    """Static receptacle type -> object types it can hold (no sliced variants)."""
    table = constants().VAL_RECEPTACLE_OBJECTS
    return {
        rtype: tuple(sorted(o for o in table[rtype] if not o.endswith("Sliced")))
        for rtype in static_receptacle_types()
        if rtype in table
    }


@functools.lru_cache(maxsize=1)
def pickupable_types() -> tuple[str, ...]:
    return tuple(sorted({o for objs in can_contain().values() for o in objs}))


def affordance(kind: str) -> frozenset[str]:
    """Object types with an ALFRED affordance: "Heatable", "Coolable", "Cleanable", ..."""
    return frozenset(constants().VAL_ACTION_OBJECTS[kind])


def _room_of(number: int) -> str:
    for room, numbers in constants().SCENE_TYPE.items():
        if number in numbers:
            return room
    raise ValueError(f"floor plan {number} is in no ALFRED room type")


def _receptacle_type(uid: str) -> str:
    parts = uid.split("|")
    return parts[-1] if parts[-1] in ("SinkBasin", "BathtubBasin") else parts[0]


def _pose(values) -> tuple[int, int, int, int]:
    x, z, rotation, horizon = values
    return (round(x / 0.25), round(z / 0.25), round(rotation / 90) % 4, int(horizon))


@functools.lru_cache(maxsize=None)
def _layout(number: int) -> tuple[frozenset[str], tuple[Receptacle, ...]]:
    """Floor plan ``number``'s layout data: the types objects.json names, and the receptacle
    instances openable.json lists (static ones the affordance table knows, sorted by id)."""
    layouts = resources.files("alfworld.gen") / "layouts"
    present = frozenset(json.loads((layouts / f"FloorPlan{number}-objects.json").read_text()))
    openable = json.loads((layouts / f"FloorPlan{number}-openable.json").read_text())
    static = set(static_receptacle_types())
    listed = [Receptacle(_receptacle_type(uid), uid, _pose(pose)) for uid, pose in openable.items()]
    listed = sorted((r for r in listed if r.rtype in static and r.rtype in can_contain()), key=lambda r: r.uid)
    return present, tuple(listed)


def layout_counts(number: int) -> dict[str, int]:
    """Receptacle type -> instances from the layout data alone: openable.json's instances, plus
    ``DEFAULT_INSTANCES`` of each type objects.json names and openable.json omits."""
    present, listed = _layout(number)
    counts = Counter(r.rtype for r in listed)
    for rtype in present & set(static_receptacle_types()) - set(counts):
        if rtype in can_contain():
            counts[rtype] = DEFAULT_INSTANCES.get(rtype, 1)
    return dict(sorted(counts.items()))


def receptacle_counts(number: int) -> dict[str, int]:
    """Receptacle type -> instances a generated room of floor plan ``number`` holds: its real
    games' counts where ``alfred_rooms`` knows them, else ``layout_counts``."""
    return dict(sorted(RECEPTACLE_COUNTS[number].items())) if number in RECEPTACLE_COUNTS else layout_counts(number)


def _synthesized(rtype: str, number: int, k: int) -> Receptacle:
    """Instance k of a type beyond those openable.json lists: an ALFRED-shaped id, unique per type
    and instance, outside every room (z = -9.99), so it never equals a real one."""
    coords = f"+{k:02d}.{number % 100:02d}|+00.00|-09.99"
    uid = f"{rtype[:-5]}|{coords}|{rtype}" if rtype.endswith("Basin") else f"{rtype}|{coords}"
    return Receptacle(rtype, uid, (k - 4, number % 7 - 3, k % 4, 30))


@functools.lru_cache(maxsize=None)
def scene(number: int) -> Scene:
    """Floor plan ``number`` with ``receptacle_counts`` instances of each receptacle type (cached)."""
    present, listed = _layout(number)
    receptacles = []
    for rtype, count in receptacle_counts(number).items():
        real = [r for r in listed if r.rtype == rtype][:count]  # their ids and poses are ALFRED's own
        receptacles += real + [_synthesized(rtype, number, k) for k in range(count - len(real))]
    objects = sorted(present & set(pickupable_types()))
    lamps = sorted(present & set(LAMPS))
    receptacles.sort(key=lambda r: r.uid)
    return Scene(number, _room_of(number), tuple(objects), tuple(lamps), tuple(receptacles))


def scene_numbers(split: str) -> tuple[int, ...]:
    """ALFRED's seen (train) floor plans for train/valid_seen, held-out ones for valid_unseen."""
    c = constants()
    if split == "valid_unseen":
        return tuple(c.TEST_SCENE_NUMBERS)
    return tuple(c.TRAIN_SCENE_NUMBERS)
