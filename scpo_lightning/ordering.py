"""Processing orders for the SCPO credit matcher (SPEC §3.7).

``balanced`` is the row order a data-parallel batch balancer produces: the batch's rows are split
into K partitions of equal count by the Karmarkar–Karp largest-differencing method on their token
lengths, each partition's row indices are sorted ascending and the partitions are concatenated.
SCPO reuses that permutation as its allocation order (paper §3.4, App. B.2).
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

import numpy as np

from scpo_lightning._arrays import to_numpy

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
    """Split row indices 0..N-1 into ``k`` partitions of equal count (±1) with balanced sums.

    Largest differencing with equal sizes: the rows, sorted by length, are dealt in consecutive
    runs of k into partial solutions of k one-row partitions each; repeatedly the two partial
    solutions with the largest spread (max sum - min sum) are merged by joining the largest
    partition of one with the smallest of the other, second largest with second smallest, and so
    on, until one solution remains. When k does not divide N, zero-length placeholder rows fill
    the last run and are dropped at the end, so partition counts differ by at most one.
    Returns the partitions in decreasing order of token sum, each sorted ascending.
    """
    if k < 1:
        raise ValueError(f"`order_partitions` must be >= 1; got {k}")
    lens = to_numpy(lengths, "lengths", dtype=np.int64)
    n = len(lens)
    if n and lens.min() < 0:
        raise ValueError("token `lengths` must be >= 0")
    padded = n + (-n) % k
    # Sort by (length, index); placeholders (index >= n, length 0) sort first.
    all_lens = np.concatenate([lens, np.zeros(padded - n, dtype=np.int64)])
    by_len = np.lexsort((np.arange(padded), all_lens)).tolist()
    len_of = all_lens.tolist()
    tie = itertools.count()
    heap: list[tuple[Any, ...]] = []

    # A partition under construction is a tuple (token sum, row count, -first row, rows), so that
    # plain tuple order sorts it: ties on the sum go to the fuller partition, then to the lower
    # first row (deterministic; first rows are distinct, so ``rows`` is never compared). ``rows``
    # is a tree of nested pairs with row indices at the leaves: a merge links two trees in O(1)
    # instead of copying rows, so a whole run costs O(N log N).
    def push(parts: list[tuple[int, int, int, Any]]) -> None:
        parts.sort(reverse=True)
        spread = parts[0][0] - parts[-1][0]
        # heapq is a min-heap: negate so the largest spread (then largest top sum) pops first.
        heapq.heappush(heap, (-spread, -parts[0][0], next(tie), parts))

    for start in range(0, padded, k):
        push([(len_of[i], 1, -i, i) for i in by_len[start : start + k]])
    while len(heap) > 1:
        a = heapq.heappop(heap)[3]
        b = heapq.heappop(heap)[3]
        # Largest of one with smallest of the other; -min(first) = max(-first).
        push([(x[0] + y[0], x[1] + y[1], max(x[2], y[2]), (x[3], y[3])) for x, y in zip(a, reversed(b))])
    parts = heap[0][3] if heap else []
    return [sorted(i for i in _flatten(p[3]) if i < n) for p in parts]


def processing_order(
    order: str,
    lengths: Any = None,
    n_rows: int | None = None,
    order_partitions: int = 4,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """The batch-level permutation of row indices: position -> row.

    ``balanced`` needs the rows' token ``lengths`` (prompt + response); with
    ``order_partitions = 1`` it equals ``chronological`` (rows in batch order). ``random`` needs
    ``rng``.
    """
    if order == "balanced":
        if lengths is None:
            raise ValueError("order 'balanced' needs the rows' token `lengths` (prompt + response)")
        return np.fromiter(
            itertools.chain.from_iterable(karmarkar_karp(lengths, order_partitions)), dtype=np.int64
        )
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
