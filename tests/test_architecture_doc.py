"""docs/architecture.md matches the code (issue 31): every repository path it writes in backticks
exists, and every name written in backticks right after a ``.py`` path (`file.py` `Name`, or
`file.py` `Class.method`) is defined in that file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PATH = re.compile(r"`([\w./-]+(?:\.(?:py|toml|md|yaml)|/))`")
PAIR = re.compile(r"`([\w./-]+\.py)`\s+`([A-Za-z_][\w.]*)`")


def names(node: ast.stmt) -> list[str]:
    """What a top-level statement defines: a def's or class's name, an assignment's targets."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return [t.id for t in targets if isinstance(t, ast.Name)]


def defined(source: str, name: str) -> bool:
    """``name`` (``Name`` or ``Class.attr``) is defined at the top level of ``source`` (then in that class)."""
    body = ast.parse(source).body
    for part in name.split("."):
        found = [node for node in body if part in names(node)]
        if not found:
            return False
        body = getattr(found[-1], "body", [])
    return True


def problems(text: str) -> list[str]:
    missing = [f"no such path: {p}" for p in sorted(set(PATH.findall(text))) if not (ROOT / p).exists()]
    for path, name in sorted(set(PAIR.findall(text))):
        if (ROOT / path).is_file() and not defined((ROOT / path).read_text(), name):
            missing.append(f"{path} defines no {name}")
    return missing


def test_every_path_and_name_in_the_architecture_doc_exists():
    text = DOC.read_text()
    assert len(PAIR.findall(text)) > 20  # the pattern still matches the doc's way of naming things
    assert problems(text) == []


def test_a_wrong_path_or_name_is_found():
    assert problems("`scpo_lightning/shaping.py` `ShapingSource` `envs/registry.py` `SPECS`") == []
    assert problems("`scpo_lightning/shaping.py` `NoSuchThing` `envs/nowhere.py`") == [
        "no such path: envs/nowhere.py", "scpo_lightning/shaping.py defines no NoSuchThing"]
    assert problems("`callbacks/scpo.py` `SCPOCallback.result` `callbacks/scpo.py` `SCPOCallback.nothing`") == [
        "callbacks/scpo.py defines no SCPOCallback.nothing"]
