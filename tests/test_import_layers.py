"""The floors between the packages (issue 31): the import-linter contracts of pyproject.toml hold,
an upward import breaks them, the bottom layer imports nothing of the project, and no import cycle
joins more than two modules. Imports inside functions count: import-linter and grimp read them all."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("scpo_lightning", "callbacks", "envs")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` on the tree at ``root`` with its pyproject.toml (the one beside this
    interpreter, as the dev extra installs it; no cache written into the tree)."""
    require("importlinter", extra="dev")
    command = Path(sys.executable).with_name("lint-imports")
    return subprocess.run([str(command), "--no-cache"], cwd=root, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root)})


def test_lint_imports_keeps_every_contract():
    proc = lint_imports(ROOT)
    assert proc.returncode == 0 and "0 broken" in proc.stdout, proc.stdout + proc.stderr


# (code appended to files of a copy of the tree (a new module where there is none), what lint-imports reports)
UPWARD = {
    "envs -> app": ({"envs/_upward.py": "import scpo_lightning.returns\n"}, "envs._upward -> scpo_lightning.returns"),
    "app -> callbacks, in a function": ({"scpo_lightning/_upward.py": "def later():\n    from callbacks import export\n"},
                                        "scpo_lightning._upward -> callbacks.export"),
    "core math -> envs, through another module": (
        {"scpo_lightning/_upward.py": "import envs.toy\n",
         "scpo_lightning/shaper.py": "\n\ndef later():\n    from scpo_lightning import _upward\n"},
        "scpo_lightning.shaper -> scpo_lightning._upward"),
}


@pytest.mark.parametrize("added, reported", UPWARD.values(), ids=UPWARD)
def test_an_upward_import_breaks_the_contracts(added, reported, tmp_path):
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for path, code in added.items():
        with (tmp_path / path).open("a") as file:
            file.write(code)
    proc = lint_imports(tmp_path)
    assert proc.returncode != 0 and "1 broken" in proc.stdout and reported in proc.stdout, proc.stdout + proc.stderr


def _graph():
    grimp = require("grimp", extra="dev")
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def test_the_bottom_layer_imports_nothing_of_the_project():
    """envs/common: the rules, packages and argument helpers that every layer imports."""
    graph = _graph()
    leaf = {m for m in graph.modules if m == "envs.common" or m.startswith("envs.common.")}
    reached = {(m, i) for m in leaf for i in graph.find_modules_directly_imported_by(m) if i not in leaf}
    assert not reached, sorted(reached)


def import_cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted, largest first:
    every import cycle lies inside one of them."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph.find_modules_directly_imported_by(module):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while not component or component[-1] != module:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return sorted(found, key=len, reverse=True)


def test_no_import_cycle_joins_more_than_two_modules():
    cycles = import_cycles(_graph())
    assert all(len(c) <= 2 for c in cycles), cycles


def test_the_cycle_finder_finds_a_cycle_of_three():
    """So that the test above can fail: a → b → c → a is one component of three."""
    class Graph:
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
        modules = set(edges)

        def find_modules_directly_imported_by(self, module):
            return self.edges[module]

    assert import_cycles(Graph()) == [["a", "b", "c"]]
