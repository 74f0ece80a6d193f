"""Receptacle instances per type of ALFRED floor plans, as their real ALFWorld games hold them.

alfworld 0.4.2 ships no complete receptacle list per floor plan: ``FloorPlan*-objects.json``
names the types a room holds, ``*-openable.json`` only the instances its layout pre-computation
could reach (4 of FloorPlan14's 8 cabinets), ``*-layout.npy`` the reachable grid points. A real
game's opening observation lists every receptacle of its room ("you see a cabinet 8, ...,
a cabinet 1, a coffeemachine 1, ..."), and that is where these counts come from: FloorPlan14
from the real game in the shared fixture, the others from the opening observations of real
alfworld-download games in public evaluation logs. Every room's type set here equals the one
``objects.json`` gives.

Floor plans missing here fall back to the layout data plus ``vocab.DEFAULT_INSTANCES``. To fill
the table from a full download: ``python -m benchmarks.alfworld_rooms --data-path
$ALFWORLD_DATA --print-table`` prints it for every floor plan the download plays.
"""

from __future__ import annotations

#: floor plan number -> receptacle type -> instances in its real games
RECEPTACLE_COUNTS: dict[int, dict[str, int]] = {
    1: {"Cabinet": 9, "CoffeeMachine": 1, "CounterTop": 3, "Drawer": 9, "Fridge": 1, "GarbageCan": 1,
        "Microwave": 1, "Shelf": 3, "SinkBasin": 1, "StoveBurner": 4, "Toaster": 1},
    7: {"Cabinet": 13, "CoffeeMachine": 1, "CounterTop": 2, "DiningTable": 1, "Drawer": 4, "Fridge": 1,
        "GarbageCan": 1, "Microwave": 1, "Shelf": 3, "SinkBasin": 1, "StoveBurner": 4, "Toaster": 1},
    10: {"Cabinet": 6, "CoffeeMachine": 1, "CounterTop": 3, "Drawer": 3, "Fridge": 1, "GarbageCan": 1,
         "Microwave": 1, "Shelf": 3, "SinkBasin": 1, "StoveBurner": 4, "Toaster": 1},
    14: {"Cabinet": 8, "CoffeeMachine": 1, "CounterTop": 2, "Fridge": 1, "GarbageCan": 1, "Microwave": 1,
         "SinkBasin": 1, "StoveBurner": 4, "Toaster": 1},
    17: {"Cabinet": 20, "CoffeeMachine": 1, "CounterTop": 2, "DiningTable": 2, "Drawer": 6, "Fridge": 1,
         "GarbageCan": 1, "Microwave": 1, "SinkBasin": 1, "StoveBurner": 4, "Toaster": 1},
    213: {"ArmChair": 2, "CoffeeTable": 1, "DiningTable": 1, "Drawer": 12, "Dresser": 1, "GarbageCan": 1,
          "SideTable": 3, "Sofa": 1},
    230: {"ArmChair": 2, "CoffeeTable": 2, "DiningTable": 1, "GarbageCan": 1, "SideTable": 2, "Sofa": 1},
    305: {"Bed": 1, "Desk": 1, "Drawer": 5, "Dresser": 1, "GarbageCan": 1, "LaundryHamper": 1, "Shelf": 1},
    308: {"Bed": 1, "Desk": 2, "Drawer": 6, "GarbageCan": 1, "LaundryHamper": 1, "Safe": 1, "Shelf": 6},
    401: {"BathtubBasin": 1, "Cart": 1, "GarbageCan": 1, "HandTowelHolder": 2, "Shelf": 4, "SinkBasin": 1,
          "Toilet": 1, "ToiletPaperHanger": 1, "TowelHolder": 2},
    405: {"BathtubBasin": 1, "Cabinet": 5, "CounterTop": 1, "GarbageCan": 1, "HandTowelHolder": 2, "SinkBasin": 1,
          "Toilet": 1, "ToiletPaperHanger": 1, "TowelHolder": 1},
    428: {"Cabinet": 4, "CounterTop": 1, "GarbageCan": 1, "HandTowelHolder": 1, "SinkBasin": 2, "Toilet": 1,
          "ToiletPaperHanger": 1, "TowelHolder": 1},
}
