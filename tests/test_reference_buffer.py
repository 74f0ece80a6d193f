"""The success-reference buffer (SCPOCallback reference_source: buffer | both): a group without a
successful sibling is credited against a stored success of its task exactly as if that success
were a sibling reference; without the buffer it gets nothing; resume restores the buffer exactly."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from callbacks.scpo import SCPOCallback
from scpo_lightning.batch import RolloutBatch
from scpo_lightning.reference_buffer import BufferedReference, SuccessBuffer
from scpo_lightning.returns import episode_scores, step_returns, trajectory_returns
from scpo_lightning.scorers import CachedScorer, LexicalScorer
from scpo_lightning.credit import scpo_shape
from scpo_lightning.scpo_config import SCPOConfig
from scpo_lightning.shaper import plan_shaping

X0 = ("go to fridge 1", "You arrive at fridge 1.")
X1 = ("open fridge 1", "You open the fridge 1.")
X2 = ("take apple 1 from fridge 1", "You pick up the apple 1.")
B2 = ("open fridge 1", "The fridge 1 is open.")
NOOP = ("look", "Nothing happens.", 1, 1)  # valid, no-op
SEP = " || "


class TableScorer:
    """1.0 for identical texts, a listed score for listed pairs, else 0.0; records what it scored."""

    def __init__(self, table=None):
        self.table, self.pairs = table or {}, []

    def score(self, pairs):
        self.pairs.append(set(pairs))
        return np.array([1.0 if a == b else self.table.get((a, b), 0.0) for a, b in pairs])


def make_batch(trajs):
    """``trajs``: (group, task id, won, steps), a step = (action, observation[, valid[, noop]]).
    Rows come trajectory by trajectory; a won trajectory gets reward 10 on its last step."""
    cols = {k: [] for k in ("group_ids", "traj_ids", "steps", "actions", "observations", "rewards", "valid", "noop")}
    meta = []
    for traj, (group, task, won, steps) in enumerate(trajs):
        for t, step in enumerate(steps):
            action, obs, valid, noop = (*step, 1, 0)[:4]
            for key, value in zip(cols, (group, traj, t, action, obs, 10.0 * (won and t == len(steps) - 1), valid, noop)):
                cols[key].append(value)
        meta.append({"won": won, "length": len(steps), "family": "f", "task_id": task, "group": group})
    n = len(cols["steps"])
    rewards, valid = np.array(cols["rewards"], dtype=float), np.array(cols["valid"], dtype=bool)
    batch = RolloutBatch(
        group_ids=cols["group_ids"], traj_ids=cols["traj_ids"], steps=cols["steps"], prompt_ids=[[1, 2]] * n,
        response_ids=[[3]] * n, anchors=cols["observations"], actions=cols["actions"],
        observations=cols["observations"], responses=cols["actions"], rewards=rewards, dones=np.zeros(n, dtype=bool),
        is_action_valid=valid, noop=np.array(cols["noop"], dtype=bool), families=["f"] * n, trajectories=meta)
    batch.step_returns = step_returns(rewards, batch.traj_ids, batch.steps, valid)
    batch.episode_scores = episode_scores(rewards, batch.traj_ids, valid)
    batch.traj_returns = trajectory_returns(rewards, batch.traj_ids)
    return batch


def callback(scorer=None, **kw) -> SCPOCallback:
    cb = SCPOCallback(**{"scorer": "lexical", "order": "chronological", "alpha": 0.5, **kw})
    cb.scorer = CachedScorer(scorer or TableScorer({(SEP.join(X1), SEP.join(B2)): 0.7}), cache_entries=0)
    return cb


def shape(cb: SCPOCallback, batch: RolloutBatch, iteration: int) -> RolloutBatch:
    trainer = SimpleNamespace(current_epoch=iteration)
    cb.on_train_epoch_start(trainer, None)  # the buffer's clock
    cb.on_train_batch_start(trainer, None, batch, 0)
    batch.shaping = cb.result(batch)
    return batch


EARLIER = [(0, "game/A", True, [X0, X1, X2]), (0, "game/A", False, [X1])]  # iteration 0: a success of game A
FAILED = [(0, "game/A", False, [X0, NOOP, B2, (*X2, 0)]), (0, "game/A", False, [X2]),  # iteration 1: no success
          (1, "game/B", False, [X0]), (1, "game/B", False, [X1])]  # a task never won: nothing to borrow


def test_a_group_without_success_is_credited_as_if_the_buffered_success_were_its_sibling():
    cb = callback(reference_source="both")
    shape(cb, make_batch(EARLIER), 0)
    now = shape(cb, make_batch(FAILED), 1)
    # The buffered reference (x0, x1, x2). Failed b, filtered (b0 = x0, b2 = paraphrase of x1):
    # b0 matches position 0, r = (1 - 0.4)/0.6 = 1; b2 matches position 1 at 0.7, r = (0.7 - 0.4)/0.6 = 0.5;
    # the no-op b1 and the invalid b3 are filtered. c0 = x2 cannot jump to position 2: r = 0.
    expected = np.zeros(len(now))
    expected[[0, 2]] = 1.0, 0.5
    np.testing.assert_allclose(now.scpo_credit, expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(now.shaped_returns, now.step_returns + 0.5 * now.scpo_credit)
    # The same batch with the stored success as a sibling of group 0 (rows appended, so the
    # chronological order of the failed siblings is unchanged): the same credit on every row, and
    # the scorer saw the same pairs.
    sibling = callback(reference_source="siblings")
    as_sibling = shape(sibling, make_batch([*FAILED, EARLIER[0]]), 1)
    np.testing.assert_array_equal(now.scpo_credit, as_sibling.scpo_credit[: len(now)])
    assert cb.scorer.scorer.pairs[-1] == sibling.scorer.scorer.pairs[-1]
    stats = now.scpo_stats
    assert stats["groups_with_buffer_reference"] == 1 and stats["groups_with_reference"] == 1
    assert stats["buffer_lookups"] == 2 and stats["buffer_hit_rate"] == 0.5  # game B has no stored success
    assert stats["buffer_size"] == 1 and stats["buffer_tasks"] == 1  # iteration 1 added no success


def test_without_the_buffer_the_same_group_gets_no_credit():
    cb = callback()  # reference_source: siblings, the paper
    shape(cb, make_batch(EARLIER), 0)
    now = shape(cb, make_batch(FAILED), 1)
    assert cb.buffer is None and not now.scpo_credit.any()
    assert now.scpo_stats["groups_with_reference"] == 0 and now.scpo_stats["groups_with_buffer_reference"] == 0


def test_a_batch_never_uses_its_own_successes_through_the_buffer():
    # Two groups of game A in one batch: the success of group 0 is not group 1's reference.
    cb = callback(reference_source="both")
    now = shape(cb, make_batch([*EARLIER, (1, "game/A", False, [X0])]), 0)
    assert now.scpo_stats["groups_with_buffer_reference"] == 0 and now.scpo_credit[-1] == 0
    assert len(cb.buffer) == 1  # ... but it is stored for the next iteration


@pytest.mark.parametrize("source, credited", [
    # Group 0 has its own success d = (x0, x2) and the buffer a longer one (x0, x1, x2).
    # both: the sibling d wins; b0 = x0 -> position 0 (r 1); b2 (paraphrase of x1) scores 0 against x2.
    ("both", [1.0, 0.0]),
    # buffer: the stored a is the reference even so: b0 -> position 0 (r 1), b2 -> position 1 (r 0.5).
    ("buffer", [1.0, 0.5]),
])
def test_successful_siblings_win_over_the_buffer_unless_the_source_is_buffer(source, credited):
    cb = callback(reference_source=source)
    shape(cb, make_batch(EARLIER), 0)
    now = shape(cb, make_batch([(0, "game/A", True, [X0, X2]), (0, "game/A", False, [X0, B2])]), 1)
    np.testing.assert_allclose(now.scpo_credit, [0, 0, *credited], rtol=0, atol=1e-12)
    assert now.scpo_stats["groups_with_buffer_reference"] == (source == "buffer")


def test_resume_restores_the_buffer_bit_for_bit():
    first = callback(reference_source="both", reference="random", buffer_size=2, seed=3)
    shape(first, make_batch(EARLIER), 0)
    shape(first, make_batch([(0, "game/A", True, [X0, X2]), (1, "game/B", True, [X1])]), 1)
    saved = io.BytesIO()
    torch.save(first.state_dict(), saved)  # as Lightning writes a checkpoint, and reads it back
    saved.seek(0)
    resumed = callback(reference_source="both", reference="random", buffer_size=2, seed=99)
    resumed.load_state_dict(torch.load(saved, weights_only=True))
    assert resumed.state_dict() == first.state_dict()
    assert resumed.buffer.candidates("game/A", 2) == first.buffer.candidates("game/A", 2) == [
        BufferedReference((SEP.join(X0), SEP.join(X2)), 2, 1), BufferedReference(tuple(map(SEP.join, EARLIER[0][3])), 3, 0)]
    # The next iteration shapes identically: the same random pick among the stored successes.
    a, b = (shape(cb, make_batch(FAILED), 2) for cb in (first, resumed))
    np.testing.assert_array_equal(a.scpo_credit, b.scpo_credit)
    assert resumed.state_dict() == first.state_dict()


def test_buffer_keeps_the_newest_per_task_and_drops_what_is_too_old():
    buf = SuccessBuffer(per_task=2, max_age=2)
    for it in range(3):
        buf.add("t", [BufferedReference((f"s{it}",), 1, it)])
    assert [r.iteration for r in buf.candidates("t", 3)] == [2, 1]  # newest first, 2 kept
    assert buf.candidates("t", 2) == [BufferedReference(("s1",), 1, 1)]  # never this iteration's own
    buf.prune(4)  # age 4 - 1 = 3 > 2: gone; age 2 kept
    assert len(buf) == 1 and buf.candidates("t", 4) == [BufferedReference(("s2",), 1, 2)]
    buf.prune(5)
    assert len(buf) == 0 and buf.tasks == 0


def test_longest_buffered_success_is_the_reference_ties_to_the_newest():
    cfg = SCPOConfig(order="chronological", reference_source="both")
    old, new = (BufferedReference((SEP.join(x),), 3, it) for x, it in ((X0, 0), (X1, 1)))
    batch = make_batch([(0, "t", False, [X0]), (0, "t", False, [X1])])
    plan = plan_shaping(group_ids=batch.group_ids, traj_ids=batch.traj_ids, steps=batch.steps,
                        traj_returns=batch.traj_returns, actions=batch.actions, observations=batch.observations,
                        is_action_valid=batch.is_action_valid, noop=batch.noop, config=cfg, buffered={0: [new, old]})
    assert [plan.pairs[i] for i in plan.blocks[0].ref_pairs.ravel()] == [(SEP.join(X1), SEP.join(X1))]


def test_creditable_groups_are_those_the_plan_gives_a_reference():
    cb = callback(reference_source="both")
    shape(cb, make_batch(EARLIER), 0)
    batch = make_batch([*FAILED, (2, "game/B", True, [X0]), (2, "game/B", False, [X1]),  # mixed: its sibling
                        (3, "game/B", True, [X0]), (3, "game/B", True, [X1])])  # all won: nobody to credit
    # Dynamic sampling asks mid-collection: the buffer's clock is the epoch, taken as it starts.
    cb.on_train_epoch_start(SimpleNamespace(current_epoch=1), None)
    assert cb.creditable_groups(batch) == {0, 2}
    assert callback().creditable_groups(batch) == {2}


@pytest.mark.parametrize("kw, says", [
    ({"reference_source": "pool"}, "SCPOCallback.reference_source='pool'"),
    ({"buffer_max_age": 3}, "SCPOCallback.buffer_max_age=3 applies to the success buffer"),
    ({"reference_source": "both", "buffer_size": 0}, "SCPOCallback.buffer_size must be an integer >= 1"),
])
def test_bad_buffer_settings_fail_naming_the_field(kw, says):
    with pytest.raises(ValueError, match=says.replace("(", r"\(")):
        SCPOCallback(scorer="lexical", **kw)


WORDS = st.sampled_from(["go", "open", "take", "fridge", "drawer", "apple", "1", "2"])
STEP = st.tuples(st.lists(WORDS, min_size=1, max_size=3).map(" ".join), st.lists(WORDS, max_size=3).map(" ".join),
                 st.integers(0, 1), st.integers(0, 1))


@settings(max_examples=60, deadline=None)
@given(ref=st.lists(STEP, min_size=1, max_size=5), failed=st.lists(st.lists(STEP, min_size=1, max_size=5), min_size=1,
                                                                  max_size=3),
       reference=st.sampled_from(["longest", "shortest"]))
def test_buffered_reference_equals_the_same_success_as_sibling_on_random_batches(ref, failed, reference):
    cfg = SCPOConfig(order="chronological", reference=reference, reference_source="both", theta=0.5, lam=0.2)
    rows = [(0, "t", False, steps) for steps in failed]
    stored = plan_shaping(**_columns(make_batch([(0, "t", True, ref)])), config=cfg).successes
    (_, texts, length), = stored
    batch = make_batch(rows)
    shaped = scpo_shape(batch.step_returns, scorer=LexicalScorer(), config=cfg, **_columns(batch),
                        buffered={0: [BufferedReference(texts, length, 0)]})
    both = make_batch([*rows, (0, "t", True, ref)])
    as_sibling = scpo_shape(both.step_returns, scorer=LexicalScorer(), config=cfg, **_columns(both))
    np.testing.assert_array_equal(shaped.credit, as_sibling.credit[: len(batch)])


def _columns(batch):
    return dict(group_ids=batch.group_ids, traj_ids=batch.traj_ids, steps=batch.steps, traj_returns=batch.traj_returns,
                actions=batch.actions, observations=batch.observations, is_action_valid=batch.is_action_valid,
                noop=batch.noop)
