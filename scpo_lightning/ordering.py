"""Processing orders for the SCPO credit matcher (SPEC §3.7, as amended below).

``balanced`` is the row order the published trainer's batch balancer (verl-agent 796ed31,
``balance_batch``) gives the batch, which SCPO reuses as its allocation order (paper §3.4,
App. B.2). Amendment to SPEC §3.7, which only says "Karmarkar–Karp on the token lengths, each
partition sorted ascending": two details decide which steps get credit and are now fixed to the
published code's:

1. **Row layout.** The balancer numbers the rows as that trainer lists them: each trajectory's
   steps together, in step order, trajectories in order of first appearance (``trajectory_major``).
   Our collector lists rows step-major; the order is computed on that layout and mapped back.
2. **Tie-breaks** (``karmarkar_karp``): a partial partition compares by (token sum, row count,
   first row it received); the partial solution with the largest spread, then with the larger
   top partition, is merged first.

With K = 1 every trajectory's steps come in step order, so for each failed sibling ``balanced``
takes the steps exactly as ``chronological`` does.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

import numpy as np

from scpo_lightning._arrays import check_lengths, factorize, to_numpy

ORDERS = ("balanced", "chronological", "random")


def _flatten(tree: Any) -> list[int]:
    """The row indices at the leaves of a tree of nested pairs."""
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, tuple):
            stack.extend(node)
        else:
            out.append(node)
    return out


def karmarkar_karp(lengths: Any, k: int) -> list[list[int]]:
    """Split row indices 0..N-1 into ``k`` partitions of equal count with balanced token sums.

    Largest differencing with equal sizes, tie-breaks as in verl-agent 796ed31's
    ``get_seqlen_balanced_partitions(lengths, k, equal_size=True)``, which this equals wherever
    that is defined (N a multiple of k, N >= k):

    - rows sorted by (length, index) are dealt in consecutive runs of k into partial solutions of
      k one-row partitions each;
    - a partition ranks by (token sum, row count, first row): its first row is the one it started
      with, kept through merges by the side that is merged into. A solution keeps its partitions
      in decreasing rank; its spread is top sum - bottom sum;
    - repeatedly the solution with the largest spread (ties: the higher-ranked top partition)
      absorbs the next one: its i-th partition joins the other's i-th from the bottom;
    - the result: the partitions in decreasing rank, each sorted ascending.

    The published trainer pads every batch to a multiple of k with duplicated random rows (SPEC
    §2.9); we do not: when k does not divide N, zero-length placeholder rows N, N+1, ... join the
    deal as ordinary rows and are dropped from the result, so partition counts differ by at most
    one (and partitions are empty when N < k).
    """
    if k < 1:
        raise ValueError(f"`order_partitions` must be >= 1; got {k}")
    lens = to_numpy(lengths, "lengths", dtype=np.int64)
    n = len(lens)
    if n and lens.min() < 0:
        raise ValueError("token `lengths` must be >= 0")
    padded = n + (-n) % k
    all_lens = np.concatenate([lens, np.zeros(padded - n, dtype=np.int64)])
    by_len = np.lexsort((np.arange(padded), all_lens)).tolist()
    len_of = all_lens.tolist()
    heap: list[tuple[Any, ...]] = []

    # A partition is a tuple (sum, count, first row, rows), so plain tuple order is its rank; first
    # rows are distinct, so ``rows`` is never compared. ``rows`` is a tree of nested pairs with row
    # indices at the leaves: a merge links two trees in O(1) instead of copying rows, so a whole
    # run costs O(N log N).
    def push(parts: list[tuple[int, int, int, Any]]) -> None:
        parts.sort(reverse=True)
        top = parts[0]
        # heapq pops the smallest: negate so the largest spread, then the highest top rank, pops
        # first. Live solutions hold disjoint rows, so their top first rows differ: the key is unique.
        heapq.heappush(heap, (parts[-1][0] - top[0], -top[0], -top[1], -top[2], parts))

    for start in range(0, padded, k):
        push([(len_of[i], 1, i, i) for i in by_len[start : start + k]])
    while len(heap) > 1:
        a = heapq.heappop(heap)[-1]
        b = heapq.heappop(heap)[-1]
        push([(x[0] + y[0], x[1] + y[1], x[2], (x[3], y[3])) for x, y in zip(a, reversed(b))])
    parts = heap[0][-1] if heap else []
    return [sorted(i for i in _flatten(p[3]) if i < n) for p in parts]


def trajectory_major(traj_ids: Any, steps: Any) -> np.ndarray:
    """The published trainer's row layout: position -> batch row.

    Each trajectory's rows together in step order, trajectories in order of first appearance
    (for our collector: env slot order, the published trainer's env index order).
    """
    check_lengths(traj_ids=traj_ids, steps=steps)
    codes, _ = factorize(traj_ids, "traj_ids")
    return np.lexsort((to_numpy(steps, "steps", dtype=np.int64), codes)).astype(np.int64)


def processing_order(
    order: str,
    lengths: Any = None,
    n_rows: int | None = None,
    order_partitions: int = 4,
    rng: np.random.Generator | None = None,
    *,
    traj_ids: Any = None,
    steps: Any = None,
) -> np.ndarray:
    """The batch-level permutation of row indices: position -> row.

    ``balanced`` needs the rows' token ``lengths`` (prompt + response), ``traj_ids`` and
    ``steps``: Karmarkar–Karp runs over the rows in ``trajectory_major`` layout and the result is
    mapped back to batch rows. ``random`` needs ``rng``.
    """
    if order == "balanced":
        if lengths is None or traj_ids is None or steps is None:
            raise ValueError("order 'balanced' needs the rows' token `lengths` (prompt + response), `traj_ids` "
                             "and `steps` (it partitions the rows as the published trainer lays them out)")
        check_lengths(lengths=lengths, traj_ids=traj_ids, steps=steps)
        layout = trajectory_major(traj_ids, steps)
        lens = to_numpy(lengths, "lengths", dtype=np.int64)[layout]
        positions = np.fromiter(itertools.chain.from_iterable(karmarkar_karp(lens, order_partitions)),
                                dtype=np.int64, count=len(layout))
        return layout[positions]
    if n_rows is None:
        n_rows = len(lengths) if lengths is not None else None
    if n_rows is None:
        raise ValueError(f"order {order!r} needs `n_rows`")
    if order == "chronological":
        return np.arange(n_rows, dtype=np.int64)
    if order == "random":
        if rng is None:
            raise ValueError("order 'random' needs a numpy `rng` (seeded for reproducibility)")
        return rng.permutation(n_rows).astype(np.int64)
    raise ValueError(f"`order` must be one of {ORDERS}; got {order!r}")
