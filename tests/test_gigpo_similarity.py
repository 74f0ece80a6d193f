"""GiGPO with similarity step groups (``GiGPO(similarity_thresh=...)``, scpo_lightning/gigpo.py):
a hand-computed case, and equality with verl-agent 796ed31 ``gigpo/core_gigpo.py``
``build_step_group(..., enable_similarity=True)`` on random batches.

The equality test reads verl-agent's file from ``$SCPO_VERL_CORE_GIGPO`` (a path to that
``core_gigpo.py``, e.g. ``git -C <verl-agent> show 796ed31:gigpo/core_gigpo.py > /tmp/core_gigpo.py``)
and skips when the variable is unset; the file is loaded with a stand-in ``verl`` package (it
imports ``verl.DataProto``, which ``build_step_group`` does not use). Nothing of it is copied here.
"""

from __future__ import annotations

import importlib.util
import os
import random
import sys
import types

import numpy as np
import pytest

from scpo_lightning._arrays import factorize
from scpo_lightning.estimators import GiGPO, build_estimator
from scpo_lightning.gigpo import gigpo_advantage, similar_step_groups, step_advantage


def test_hand_computed_first_fit_groups_and_their_advantage():
    # difflib ratio = 2M / (len a + len b), M the matched characters:
    #   "abxy" vs "abcd": "ab"        -> 2*2/8 = 0.50 < 0.75: a step group of its own;
    #   "abcy" vs "abcd": "abc"       -> 2*3/8 = 0.75 >= 0.75: joins the first group ...
    #   "abcy" vs "abxy": "ab" + "y"  -> 0.75 too, but first fit takes the first group that fits;
    #   "zzzz" vs both: 0 -> a new group. Episode group 1's "abcd" is another step group (ids differ).
    group_ids = [0, 0, 0, 0, 1]
    anchors = ["abcd", "abxy", "abcy", "zzzz", "abcd"]
    assert similar_step_groups(group_ids, anchors, 0.75).tolist() == [0, 1, 0, 2, 3]
    # Just above 0.75 nothing merges: every anchor of the group differs.
    assert similar_step_groups(group_ids, anchors, 0.76).tolist() == [0, 1, 2, 3, 4]
    # mean_norm A_S: the group {rows 0, 2} has returns 1 and 3 -> mean 2 -> -1, +1; lone rows get 0.
    returns = [1.0, 5.0, 3.0, 7.0, 2.0]
    a_s = step_advantage(returns, group_ids, anchors, mode="mean_norm", similarity_thresh=0.75)
    assert a_s.tolist() == [-1.0, 0.0, 1.0, 0.0, 0.0]
    # Identical anchors only (the paper): every step group here is a lone row.
    assert step_advantage(returns, group_ids, anchors, mode="mean_norm").tolist() == [0.0] * 5


def test_the_new_rows_anchor_is_difflibs_first_string_as_in_verl_agent():
    # difflib's ratio is not symmetric: it takes the longest match (earliest in the first string),
    # then recurses on both sides of it.
    #   new "b " vs first " ba  ": "b" (a[0] = b[1]), then " " right of it (a[1] = b[3]): M = 2,
    #     2*2/7 = 0.571 >= 0.5 -> the row joins the group (verl-agent: are_similar(obs, rep));
    #   " ba  " vs "b ": " " (a[0] = b[1]), nothing left of it in "b ": M = 1, 2/7 = 0.286 < 0.5.
    assert similar_step_groups([0, 0], [" ba  ", "b "], 0.5).tolist() == [0, 0]
    assert similar_step_groups([0, 0], ["b ", " ba  "], 0.5).tolist() == [0, 1]


def test_the_estimator_option_and_its_bounds():
    est = build_estimator({"class_path": "scpo_lightning.estimators.GiGPO", "init_args": {"similarity_thresh": 0.95}})
    assert isinstance(est, GiGPO) and est.similarity_thresh == 0.95
    assert GiGPO().similarity_thresh is None
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match=r"similarity_thresh=.* must lie strictly between 0 and 1"):
            GiGPO(similarity_thresh=bad)
    with pytest.raises(ValueError, match="compare text"):
        similar_step_groups([0], [3], 0.9)


def test_anchors_that_are_identical_group_alike_at_any_threshold():
    rng = random.Random(0)
    group_ids = [rng.randrange(3) for _ in range(40)]
    anchors = [rng.choice(["you see a mug", "you see a cup", "nothing happens"]) for _ in group_ids]
    exact, _ = factorize(list(zip(group_ids, anchors)), "anchors")
    # Distinct anchors here are < 0.99 similar, so 0.99 merges identical ones only.
    assert similar_step_groups(group_ids, anchors, 0.99).tolist() == exact.tolist()
    x = np.arange(40.0)
    assert np.array_equal(gigpo_advantage(x, x, group_ids, anchors, similarity_thresh=0.99),
                          gigpo_advantage(x, x, group_ids, anchors))


def _verl_core_gigpo():
    path = os.environ.get("SCPO_VERL_CORE_GIGPO")
    if not path:
        pytest.skip("set $SCPO_VERL_CORE_GIGPO to verl-agent 796ed31's gigpo/core_gigpo.py to compare with it")
    pytest.importorskip("torch")
    stub = types.ModuleType("verl")
    stub.DataProto = object
    saved = sys.modules.get("verl")
    sys.modules["verl"] = stub
    try:
        spec = importlib.util.spec_from_file_location("verl_core_gigpo", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            sys.modules.pop("verl", None)
        else:
            sys.modules["verl"] = saved
    return module


def _near_duplicates(rng: random.Random, n: int) -> list[str]:
    """Observations that differ from a few bases by a few characters: all sides of the threshold."""
    bases = ["You arrive at countertop 1. On the countertop 1, you see a mug 2 and a knife 1.",
             "You open the fridge 1. The fridge 1 is open. In it, you see an apple 3.",
             "Nothing happens."]
    out = []
    for _ in range(n):
        text = list(rng.choice(bases))
        for _ in range(rng.randrange(6)):
            text[rng.randrange(len(text))] = rng.choice("abc 123")
        out.append("".join(text))
    return out


def test_equal_to_verl_agent_build_step_group_with_similarity_on_random_batches(capsys):
    verl = _verl_core_gigpo()
    rng = random.Random(1)
    for _ in range(30):
        rows = rng.randrange(1, 60)
        index = np.array([f"uid-{rng.randrange(4)}" for _ in range(rows)], dtype=object)
        anchors = np.array(_near_duplicates(rng, rows), dtype=object)
        thresh = rng.choice([0.5, 0.8, 0.9, 0.95, 0.97, 0.99])
        theirs = verl.build_step_group(anchors, index, enable_similarity=True, similarity_thresh=thresh)
        want, _ = factorize(list(theirs), "uids")  # their UUIDs as codes in order of first appearance
        assert similar_step_groups(list(index), list(anchors), thresh).tolist() == want.tolist()
    capsys.readouterr()  # verl-agent prints the mean step-group size
