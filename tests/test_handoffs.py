"""The stages hand over declared results and import only what they are allowed to (issue 16).

SCPO's shaping reaches later stages as one typed ``ShapingResult`` on the batch: the logger draws
the credit heatmap from the matcher's own paths, without the SCPO callback and without
recomputing the credit. It arrives through one protocol (``scpo_lightning.shaping.ShapingSource``),
which the stages take once in ``setup`` (issue 31). Static checks keep the boundaries: no callback
imports another callback, the module and the rest of the core import no env internals (only the
spec table), the DataModule and the module reach the trainer only while they set up.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from callbacks.logging import RLLogger
from scpo_lightning.scorers.lexical import LexicalScorer
from scpo_lightning.scpo import credit_path
from scpo_lightning.shaper import plan_shaping
from scpo_lightning.shaping import shaping_source
from tests.test_scorer_faults import callback_with, shape, two_sibling_batch

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at any depth (function-level imports too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return out


def test_the_shaping_result_records_the_matchers_own_path_and_the_logger_draws_it():
    callback = callback_with(LexicalScorer())
    batch = two_sibling_batch()
    shape(callback, batch)
    result = batch.shaping
    assert result.stats["shaped"] == 1.0 and len(result.paths) == 1
    (path,) = result.paths
    # The failed sibling's rows are 2 and 3 ("go east", then "look"); the reference is rows 0-1.
    np.testing.assert_array_equal(path.rows, [2, 3])
    # Recomputed from scratch by the standalone matcher, the path and credit must be the same.
    plan = plan_shaping(group_ids=batch.group_ids, traj_ids=batch.traj_ids, steps=batch.steps,
                        traj_returns=batch.traj_returns, actions=batch.actions, observations=batch.observations,
                        is_action_valid=batch.is_action_valid, noop=batch.noop, lengths=batch.lengths,
                        config=callback.config)
    sim, ref_sim = plan.matrices(LexicalScorer().score(plan.pairs), 0)
    r, positions = credit_path(sim, ref_sim, callback.config.theta, callback.config.lam, plan.blocks[0].order)
    np.testing.assert_array_equal(path.sim, sim)
    np.testing.assert_array_equal(path.positions, positions)
    np.testing.assert_array_equal(batch.scpo_credit[path.rows], r)
    assert path.credit == float(r.sum()) > 0  # step 0 repeats reference step 0: credited
    np.testing.assert_array_equal(batch.shaped_returns, batch.step_returns + callback.config.alpha * batch.scpo_credit)

    images = []
    experiment = SimpleNamespace(add_image=lambda tag, img, step, dataformats: images.append((tag, img.shape, step)))
    RLLogger._heatmap(batch, experiment, 3)
    cell = 12  # credit_heatmap's default cell size: an m×ℓ matrix of 2×2 steps
    assert images == [("scpo/credit_heatmap", (2 * cell, 2 * cell, 3), 3)]


def test_without_a_result_the_logger_draws_nothing():
    images = []
    experiment = SimpleNamespace(add_image=lambda *a, **k: images.append(a))
    RLLogger._heatmap(two_sibling_batch(), experiment, 1)  # no SCPO callback ran
    assert images == []


def test_the_trainer_has_at_most_one_shaping_source_and_it_answers_only_for_the_batch_it_started():
    first, second = callback_with(LexicalScorer()), callback_with(LexicalScorer())
    assert shaping_source([object()]) is None  # no SCPO: plain GiGPO
    assert shaping_source([object(), first]) is first
    with pytest.raises(ValueError, match=r"2 shaping callbacks \(SCPOCallback, SCPOCallback\); keep one"):
        shaping_source([first, second])
    started, other = two_sibling_batch(), two_sibling_batch()
    first.on_train_batch_start(None, None, started, 0)
    with pytest.raises(RuntimeError, match="no shaping was started for this batch"):
        first.result(other)


def test_the_datamodule_and_the_module_reach_the_trainer_only_while_setting_up():
    # setup takes the other stages' hand-offs; configure_model reads the trainer's own strategy and
    # precision, which decide how the model loads. Every other hook uses what they took.
    allowed = {"setup", "configure_model"}
    for name in ("datamodule.py", "module.py"):
        for fn in ast.walk(ast.parse((ROOT / "scpo_lightning" / name).read_text())):
            if not isinstance(fn, ast.FunctionDef) or fn.name in allowed:
                continue
            reaches = [node.lineno for node in ast.walk(fn) if isinstance(node, ast.Attribute)
                       and node.attr in ("trainer", "_trainer") and isinstance(node.value, ast.Name)
                       and node.value.id == "self"]
            assert not reaches, f"{name}: {fn.name} reads self.trainer (line {reaches[0]})"


def test_no_callback_imports_another_callback():
    for path in sorted((ROOT / "callbacks").glob("*.py")):
        others = {f"callbacks.{p.stem}" for p in (ROOT / "callbacks").glob("*.py")
                  if p.stem not in ("__init__", "heatmap", path.stem)}  # heatmap.py is a drawing function
        assert not imported_modules(path) & others, f"{path.name} imports another callback"


def env_imports(path: Path) -> set[str]:
    """The envs modules a file imports; envs/common is no env but the project's bottom layer (config
    rules, package checks) that every layer imports."""
    return {m for m in imported_modules(path) if m.split(".")[0] == "envs" and not m.startswith("envs.common")}


def test_the_core_imports_no_env_internals_and_the_module_no_envs_at_all():
    allowed = {"envs.registry", "envs.spec"}
    for path in sorted((ROOT / "scpo_lightning").rglob("*.py")):
        envs = env_imports(path)
        assert envs <= allowed, f"{path.relative_to(ROOT)} imports {sorted(envs - allowed)}"
    for name in ("module.py", "ppo_epoch.py"):
        assert not env_imports(ROOT / "scpo_lightning" / name), name


def test_the_corridor_world_stands_alone():
    # A test world that imported ALFWorld would load it (and depend on it) wherever the corridor runs.
    assert not any(m.startswith("envs.alfworld") for m in imported_modules(ROOT / "envs" / "toy.py"))
