"""Deterministic ALFRED problem generator: ``(split, index, size)`` -> one solvable game.

A game is a real ALFRED floor plan (its receptacle instances, ids and object types, see
``vocab``) filled with a task of one of the six families, its target object(s), distractor
objects and closed openable receptacles. The task is drawn *first* and the room is built around
it (sources that can hold the object and differ from the goal receptacle type, the appliance the
family needs, a lamp on furniture), so every game is solvable by construction and its walkthrough
is written from the layout directly (``problem.walkthrough``): no planner search per game.

Determinism: one ``random.Random`` seeded from a SHA-256 of the game's address; every collection
is iterated in sorted order, never as a set, so the bytes do not depend on ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from envs.alfworld import vocab
from envs.alfworld.errors import check_family

#: Bump when the bytes of any generated game change; it is part of the cache path and the seed.
GENERATOR_VERSION = 2

#: Addressable games per split (ALFWorld's own counts: 3553 train, 140 valid_seen, 134 valid_unseen).
SPLIT_SIZES = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}


@dataclass(frozen=True)
class RoomSize:
    """How big a generated room is (the knob between ALFRED scale and CPU-quickstart rooms)."""

    name: str
    max_receptacles: int | None  # receptacle instances kept (task ones first); None = whole floor plan
    distractors: int | None  # distractor object instances; None = ALFRED scale (1-3 of every type present)
    extra_targets: bool  # ALFRED scale: 1-3 instances of the target type (4 for pick_two), not the minimum
    start_open: bool  # openable receptacles start open (ALFRED: closed); shortens small-room episodes


SIZES = {
    # tiny: only the receptacles the task needs and no distractor objects: the CPU quickstart's
    # rooms, where a small model acting at random among world-changing commands wins ~20 % in 15 steps.
    "tiny": RoomSize("tiny", max_receptacles=2, distractors=0, extra_targets=False, start_open=True),
    "small": RoomSize("small", max_receptacles=3, distractors=1, extra_targets=False, start_open=True),
    "medium": RoomSize("medium", max_receptacles=10, distractors=12, extra_targets=False, start_open=False),
    "alfred": RoomSize("alfred", max_receptacles=None, distractors=None, extra_targets=True, start_open=False),
}


def room_size(name: str) -> RoomSize:
    if name not in SIZES:
        raise ValueError(f"unknown ALFWorld room size {name!r}; expected one of {', '.join(SIZES)}")
    return SIZES[name]


@dataclass
class Layout:
    """A sampled game before it is written as PDDL: everything ``problem`` needs."""

    family: str
    scene: vocab.Scene
    obj_type: str  # target object type, e.g. "Potato"
    recep_type: str  # goal receptacle type ("" for look_at_obj_in_light)
    toggle_type: str  # lamp type for look_at_obj_in_light, else ""
    receptacles: list[vocab.Receptacle]  # kept receptacle instances
    objects: list[tuple[str, str]]  # (uid, receptacle uid) for every placed object, lamps included
    targets: list[str]  # uids of the target object(s), in walkthrough order
    target_recep: str  # receptacle uid the walkthrough puts things in ("" for look)
    appliance: str  # microwave/fridge/sinkbasin uid, or ""
    lamp: str  # lamp uid, or ""
    template: str  # task sentence template from alfworld's goal library
    start_open: bool = False  # openable receptacles start open


def seed_of(split: str, index: int, size: str) -> int:
    digest = hashlib.sha256(f"scpo-alfworld/v{GENERATOR_VERSION}/{size}/{split}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def family_of(index: int) -> str:
    """Families cycle with the index, so every split is balanced across the six."""
    return vocab.FAMILIES[index % len(vocab.FAMILIES)]


def _holders(scene_receps, obj_type, exclude_types=()):
    table = vocab.can_contain()
    return [r for r in scene_receps if obj_type in table.get(r.rtype, ()) and r.rtype not in exclude_types]


def _task_options(family: str, scene: vocab.Scene):
    """(obj_type, recep_type, toggle_type) triples the scene can host, sorted."""
    receps = scene.receptacles
    rtypes = sorted({r.rtype for r in receps})
    options = []
    if family == "look_at_obj_in_light":
        if not any(r.rtype in vocab.LAMP_RECEPTACLES for r in receps):
            return []
        for lamp in scene.lamps:
            options += [(o, "", lamp) for o in scene.object_types if _holders(receps, o)]
        return options
    appliance, kind, _ = vocab.APPLIANCE.get(family, ("", "", ""))
    if appliance and appliance not in rtypes:
        return []
    allowed = vocab.affordance(kind) if kind else None
    for obj in scene.object_types:
        if allowed is not None and obj not in allowed:
            continue
        for rtype in rtypes:
            if rtype == appliance or obj not in vocab.can_contain().get(rtype, ()):
                continue
            if _holders(receps, obj, exclude_types=(rtype,)):
                options.append((obj, rtype, ""))
    return options


def sample_layout(split: str, index: int, size: RoomSize) -> Layout:
    if split not in SPLIT_SIZES:
        raise ValueError(f"unknown ALFWorld split {split!r}; expected one of {', '.join(SPLIT_SIZES)}")
    if not 0 <= index < SPLIT_SIZES[split]:
        raise IndexError(f"index {index} out of range for split {split!r} ({SPLIT_SIZES[split]} games)")
    rng = random.Random(seed_of(split, index, size.name))
    family = check_family(family_of(index))
    valid_rooms = vocab.constants().GOALS_VALID[family]
    numbers = [n for n in vocab.scene_numbers(split) if vocab.scene(n).room in valid_rooms]
    for _ in range(200):
        scene = vocab.scene(rng.choice(numbers))
        options = _task_options(family, scene)
        if options:
            break
    else:
        raise RuntimeError(f"no floor plan of {split} can host {family}; alfworld's layouts changed?")
    obj_type, recep_type, toggle_type = rng.choice(options)
    return _build(rng, family, scene, obj_type, recep_type, toggle_type, size)


def _build(rng, family, scene, obj_type, recep_type, toggle_type, size: RoomSize) -> Layout:
    receps = list(scene.receptacles)
    two = family == "pick_two_obj_and_place"
    sources = _holders(receps, obj_type, exclude_types=(recep_type,))
    n_targets = 2 if two else 1
    picked_sources = [rng.choice(sources) for _ in range(n_targets)]
    required = list(picked_sources)
    target_recep = appliance = lamp_recep = None
    if recep_type:
        target_recep = rng.choice([r for r in receps if r.rtype == recep_type])
        required.append(target_recep)
    if family in vocab.APPLIANCE:
        appliance = rng.choice([r for r in receps if r.rtype == vocab.APPLIANCE[family][0]])
        required.append(appliance)
    if toggle_type:
        lamp_recep = rng.choice([r for r in receps if r.rtype in vocab.LAMP_RECEPTACLES])
        required.append(lamp_recep)
    required = sorted(set(required), key=lambda r: r.uid)
    kept = required
    if size.max_receptacles is None:
        kept = receps
    elif len(required) < size.max_receptacles:
        others = [r for r in receps if r not in required]
        kept = required + rng.sample(others, min(len(others), size.max_receptacles - len(required)))
    kept = sorted(kept, key=lambda r: r.uid)

    ids = _IdMaker(rng, {r.uid for r in kept})
    targets = [ids.make(obj_type) for _ in range(n_targets)]
    objects = list(zip(targets, (s.uid for s in picked_sources)))
    avoid = (recep_type,) if family in ("pick_and_place_simple", "pick_two_obj_and_place") else ()
    if size.extra_targets:
        for _ in range(rng.randint(1, 3) + (1 if two else 0) - n_targets):
            holders = _holders(kept, obj_type, exclude_types=avoid)
            objects.append((ids.make(obj_type), rng.choice(holders).uid))
    lamp = ""
    if toggle_type:
        lamp = ids.make(toggle_type)
        objects.append((lamp, lamp_recep.uid))
    placeable = [o for o in scene.object_types if o != obj_type and _holders(kept, o)]
    if size.distractors is None:
        counts = [(o, rng.randint(1, 3)) for o in placeable]
    else:
        counts = [(rng.choice(placeable), 1) for _ in range(size.distractors)] if placeable else []
    for o, n in counts:
        for _ in range(n):
            objects.append((ids.make(o), rng.choice(_holders(kept, o)).uid))
    templates = vocab.goal_library()[family]["templates"]
    return Layout(
        family=family,
        scene=scene,
        obj_type=obj_type,
        recep_type=recep_type,
        toggle_type=toggle_type,
        receptacles=kept,
        objects=objects,
        targets=targets,
        target_recep=target_recep.uid if target_recep else "",
        appliance=appliance.uid if appliance else "",
        lamp=lamp,
        template=rng.choice(templates),
        start_open=size.start_open,
    )


class _IdMaker:
    """ALFRED-shaped object ids ("Apple|+01.59|+00.97|-01.29"), unique within a game."""

    def __init__(self, rng: random.Random, taken: set[str]):
        self.rng, self.taken = rng, set(taken)

    def make(self, otype: str) -> str:
        while True:
            x, y, z = (self.rng.uniform(-3.0, 3.0) for _ in range(3))
            uid = f"{otype}|{x:+06.2f}|{abs(y):+06.2f}|{z:+06.2f}"
            if uid not in self.taken:
                self.taken.add(uid)
                return uid
