"""Karmarkar–Karp balanced processing order (SPEC §3.7 as amended in scpo_lightning/ordering.py).

The comparison with the published function reads verl-agent 796ed31's
verl/utils/seqlen_balancing.py: the path in $VERL_SEQLEN_BALANCING, else the copy in the shared
fixtures (``../shared/fixtures/verl-agent-796ed31/``, beside the checkout; benchmarks/balanced_order.py
says how to get the file). Without either those tests skip and the hand-derived cases below stand alone.
"""

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scpo_lightning.ordering import karmarkar_karp, processing_order, trajectory_major
from tests.conftest import SHARED_FIXTURES

#: verl-agent 796ed31's balancer in the shared fixtures; $VERL_SEQLEN_BALANCING overrides it.
FIXTURE = SHARED_FIXTURES / "verl-agent-796ed31" / "verl" / "utils" / "seqlen_balancing.py"

STEP_MAJOR = dict(traj_ids=[0, 1, 0, 1], steps=[0, 0, 1, 1])  # two trajectories of two steps, lock-step


def test_equal_lengths_go_to_the_later_row_first():
    # Lengths (1, 1), K = 2: one run {row0, row1}. A partition ranks by (sum, count, first row):
    # (1, 1, 0) < (1, 1, 1), and partitions are listed highest rank first -> [[1], [0]].
    assert karmarkar_karp([1, 1], 2) == [[1], [0]]


def test_hand_computed_partition():
    # Lengths (1, 2, 3, 4), K = 2. Runs of K in (length, row) order: A = {row1:2, row0:1} and
    # B = {row3:4, row2:3}, both spread 1. Equal spreads: the higher top partition, B's (4, 1, 3),
    # is merged first and absorbs A, its i-th partition joining A's i-th from the bottom:
    # {3} + {0} = (5, 2, first 3), {2} + {1} = (5, 2, first 2) -> [[0, 3], [1, 2]].
    assert karmarkar_karp([1, 2, 3, 4], 2) == [[0, 3], [1, 2]]


def test_tie_on_spread_and_sum_goes_to_the_fuller_solution():
    # Lengths (0, 1, 1, 2, 2, 2), K = 2. Runs: A = {row1:1, row0:0} spread 1, B = {row3:2, row2:1}
    # spread 1, C = {row5:2, row4:2} spread 0. B (top (2, 1, 3)) beats A (top (1, 1, 1)) and absorbs
    # it: {3} + {0} = (2, 2, 3), {2} + {1} = (2, 2, 2); BA has spread 0 and top sum 2, as C. Its
    # top partition has 2 rows to C's 1, so BA goes first (by first row alone C's 5 > 3 would):
    # {3, 0} + {4} = (4, 3, 3), {2, 1} + {5} = (4, 3, 2) -> [[0, 3, 4], [1, 2, 5]].
    assert karmarkar_karp([0, 1, 1, 2, 2, 2], 2) == [[0, 3, 4], [1, 2, 5]]


def test_merged_partition_keeps_the_first_row_of_the_absorbing_side():
    # Lengths (2, 1, 1, 2), K = 2. Runs: A = {row2:1, row1:1}, B = {row3:2, row0:2}, both spread 0;
    # B's top (2, 1, 3) beats A's (1, 1, 2): {3} + {1} = (3, 2, first 3), {0} + {2} = (3, 2, first 0).
    # Equal sums and counts: first rows 3 > 0 -> [[1, 3], [0, 2]] (the lowest row first would give
    # the reverse).
    assert karmarkar_karp([2, 1, 1, 2], 2) == [[1, 3], [0, 2]]


def test_uneven_rows_pad_with_zero_length_placeholders():
    # Lengths (5, 5, 5), K = 2: placeholder row 3 (length 0) joins. Runs: {row0:5, row3:0} (spread 5)
    # and {row2:5, row1:5} (spread 0). The first absorbs the second: {0} + {1} = (10, 2, first 0),
    # {3} + {2} = (5, 2, first 3) -> [[0, 1], [2, 3]], placeholder dropped -> [[0, 1], [2]].
    assert karmarkar_karp([5, 5, 5], 2) == [[0, 1], [2]]


def test_balanced_order_partitions_the_trajectory_major_layout():
    # Step-major rows r0 = (τ0, t0), r1 = (τ1, t0), r2 = (τ0, t1), r3 = (τ1, t1). The published layout
    # lists τ0's steps, then τ1's: positions 0..3 = rows 0, 2, 1, 3. Equal lengths: as in
    # test_hand_computed_partition's merge, the positions split [[0, 3], [1, 2]] -> positions
    # 0, 3, 1, 2 -> rows 0, 3, 2, 1. (On the step-major rows themselves it would be rows 0, 3, 1, 2.)
    assert trajectory_major(**STEP_MAJOR).tolist() == [0, 2, 1, 3]
    assert karmarkar_karp([5, 5, 5, 5], 2) == [[0, 3], [1, 2]]
    assert processing_order("balanced", [5, 5, 5, 5], 4, 2, **STEP_MAJOR).tolist() == [0, 3, 2, 1]


def test_trajectories_in_order_of_first_appearance():
    # Trajectory "b" appears first (row 0), so its rows come first; steps sort inside each.
    assert trajectory_major(["b", "a", "a", "b"], [0, 1, 0, 1]).tolist() == [0, 3, 2, 1]


def test_one_partition_keeps_each_trajectory_chronological():
    rng = np.random.default_rng(1)
    traj = rng.integers(0, 6, 37)
    steps = np.zeros(37, dtype=np.int64)
    for t in range(6):
        steps[traj == t] = np.arange(np.count_nonzero(traj == t))
    perm = processing_order("balanced", rng.integers(10, 500, 37), 37, 1, traj_ids=traj, steps=steps)
    np.testing.assert_array_equal(perm, trajectory_major(traj, steps))
    for t in range(6):
        np.testing.assert_array_equal(steps[perm[traj[perm] == t]], np.arange(np.count_nonzero(traj == t)))
    np.testing.assert_array_equal(processing_order("chronological", n_rows=37), np.arange(37))


def test_random_order_needs_rng_and_balanced_needs_lengths_and_layout():
    with pytest.raises(ValueError, match="rng"):
        processing_order("random", n_rows=3)
    with pytest.raises(ValueError, match="lengths"):
        processing_order("balanced", n_rows=3)
    with pytest.raises(ValueError, match="traj_ids"):
        processing_order("balanced", [1, 2, 3], 3)
    with pytest.raises(ValueError, match="same length"):
        processing_order("balanced", [1, 2, 3], 3, traj_ids=[0, 0], steps=[0, 1])
    with pytest.raises(ValueError, match="order"):
        processing_order("sorted", n_rows=3)
    assert sorted(processing_order("random", n_rows=5, rng=np.random.default_rng(0))) == list(range(5))


@settings(max_examples=100, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 2000), min_size=0, max_size=120),
    k=st.integers(1, 8),
)
def test_partition_properties(lengths, k):
    parts = karmarkar_karp(lengths, k)
    flat = [i for p in parts for i in p]
    assert sorted(flat) == list(range(len(lengths)))  # a permutation: no row lost or repeated
    assert all(p == sorted(p) for p in parts)  # each partition ascending
    counts = [len(p) for p in parts]
    assert len(parts) == (k if lengths else 0)
    if lengths:
        assert max(counts) - min(counts) <= 1  # equal count (±1 when K does not divide N)
    sums = [sum(lengths[i] for i in p) for p in parts]
    assert sums == sorted(sums, reverse=True)  # partitions listed by decreasing token sum
    assert karmarkar_karp(lengths, k) == parts  # deterministic


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=12), st.integers(1, 5), st.integers(0, 2**31 - 1))
def test_step_major_batch_gets_the_order_of_its_trajectory_major_twin(traj_lengths, k, seed):
    # The same rows listed trajectory-major (as the published trainer does) and step-major (as our
    # collector does): the balanced order picks the same rows in the same sequence.
    traj = np.repeat(np.arange(len(traj_lengths)), traj_lengths)
    steps = np.concatenate([np.arange(n) for n in traj_lengths])
    lengths = np.random.default_rng(seed).integers(1, 30, len(traj))
    expected = np.concatenate(karmarkar_karp(lengths, k))  # rows 0..N-1 are already trajectory-major
    step_major = np.lexsort((traj, steps))  # step_major[j] = the twin's row at step-major row j
    perm = processing_order("balanced", lengths[step_major], len(traj), k,
                            traj_ids=traj[step_major], steps=steps[step_major])
    np.testing.assert_array_equal(step_major[perm], expected)


def test_balances_token_sums():
    rng = np.random.default_rng(0)
    lengths = rng.integers(100, 2000, 6400)
    sums = [int(lengths[p].sum()) for p in karmarkar_karp(lengths, 4)]
    # Largest differencing balances 6400 rows almost perfectly; contiguous chunks do not.
    assert max(sums) - min(sums) <= 2000
    chunk_sums = [int(c.sum()) for c in np.array_split(lengths, 4)]
    assert max(chunk_sums) - min(chunk_sums) > max(sums) - min(sums)


def published_source() -> Path | None:
    """$VERL_SEQLEN_BALANCING when set (a path that is not there fails), else the fixture if present."""
    path = os.environ.get("VERL_SEQLEN_BALANCING")
    if path:
        assert Path(path).is_file(), f"VERL_SEQLEN_BALANCING={path} is not a file"
        return Path(path)
    return FIXTURE if FIXTURE.is_file() else None


@pytest.fixture(scope="module")
def published():
    path = published_source()
    if path is None:
        pytest.skip(f"verl-agent 796ed31's seqlen_balancing.py is neither at {FIXTURE} nor in $VERL_SEQLEN_BALANCING")
    from benchmarks.balanced_order import load_published

    return load_published(path)


def test_published_function_on_hand_built_ties(published):
    assert published([1, 1], 2) == karmarkar_karp([1, 1], 2) == [[1], [0]]
    for lengths, k in (([1, 2, 3, 4], 2), ([0, 1, 1, 2, 2, 2], 2), ([2, 1, 1, 2], 2), ([7] * 12, 4), ([3] * 8, 8)):
        assert karmarkar_karp(lengths, k) == published(lengths, k)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 8), st.integers(1, 40), st.sampled_from([2, 5, 50, 4000]), st.integers(0, 2**31 - 1))
def test_equals_published_function_on_random_inputs(published, k, runs, spread, seed):
    # Small length ranges force ties on sums, counts and spreads; large ones exercise plain balancing.
    lengths = np.random.default_rng(seed).integers(0, spread, k * runs).tolist()
    assert karmarkar_karp(lengths, k) == published(lengths, k)


def test_shaper_takes_failed_steps_in_the_published_order_on_recorded_batches(published):
    # Every failed sibling's steps, on the recorded ALFWorld batches, in the sequence the published
    # balancer puts them (its function over the trajectory-major layout), for K = 1..8.
    from benchmarks.balanced_order import published_order
    from benchmarks.record_batches import load_batches
    from scpo_lightning.scpo_config import SCPOConfig
    from scpo_lightning.shaper import plan_shaping

    try:
        batches = load_batches("alfworld")
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    checked = 0
    for _, b in batches:
        layout = trajectory_major(b.traj_ids, b.steps)
        for k in range(1, 9):
            plan = plan_shaping(group_ids=b.group_ids, traj_ids=b.traj_ids, steps=b.steps, traj_returns=b.traj_returns,
                                actions=b.actions, observations=b.observations, is_action_valid=b.is_action_valid,
                                noop=b.noop, lengths=b.lengths, config=SCPOConfig(order_partitions=k))
            rank = np.argsort(published_order(published, b.lengths, k, layout))
            for block in plan.blocks:
                np.testing.assert_array_equal(block.rows[block.order], block.rows[np.argsort(rank[block.rows])])
                checked += 1
    assert checked > 0


def test_the_published_file_is_the_shared_fixture_unless_the_variable_names_another(monkeypatch, tmp_path):
    monkeypatch.delenv("VERL_SEQLEN_BALANCING", raising=False)
    assert published_source() == (FIXTURE if FIXTURE.is_file() else None)
    other = tmp_path / "seqlen_balancing.py"
    other.write_text("")
    monkeypatch.setenv("VERL_SEQLEN_BALANCING", str(other))
    assert published_source() == other
