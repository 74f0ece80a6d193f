"""Score each distinct text pair once: exact de-duplication, a bounded LRU cache, a worker thread.

The paper's shaper overhead is nearly all cross-encoder time, and most of it repeats: 74 % of the
failed steps it credited are exact (action, observation) copies of a reference step (paper C.2),
and reference x reference (M*) pairs recur across the n-1 failed siblings. `CachedScorer` wraps any
`StepScorer`: per call it scores only the distinct pairs the cache does not hold, in one inner
call, and copies each score to every occurrence. The result is bit-identical to scoring every pair
naively whenever the inner scorer gives a pair the same score regardless of which other pairs
share its call (true of `lexical`; neural scorers differ only by float noise from padding/batching).

`submit` scores in one daemon thread, in submission order. Not a ThreadPoolExecutor: Python joins
an executor's threads at interpreter exit, so one hung model call would keep a finished training
process alive forever; a caller that gives up on a call (a timeout) cancels it if it has not started.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np

from scpo_lightning.scorers.base import StepScorer


@dataclass(frozen=True)
class ScoreStats:
    """What one scoring call cost (SPEC §3.10)."""

    requested: int  # pairs asked for, duplicates included
    distinct: int  # distinct (reference, candidate) pairs among them
    cache_hits: int  # distinct pairs answered from the cache
    scored: int  # distinct pairs sent to the inner scorer (= distinct - cache_hits)
    seconds: float  # wall time of the inner scorer call (0 when nothing was scored)


@dataclass(frozen=True)
class ScoredBatch:
    """Scores of one call, element i for pair i, and the call's statistics."""

    scores: np.ndarray
    stats: ScoreStats


class CachedScorer:
    """A `StepScorer` that de-duplicates, caches and can score in a background thread.

    Args:
        scorer: The scorer that does the work (bge, minilm, lexical, ...).
        cache_entries: Most pair scores kept across calls (least recently used dropped first);
            0 disables the cross-call cache, de-duplication within a call stays on. Each entry
            holds its two texts, so budget about (len(ref) + len(cand)) bytes per entry.
    """

    def __init__(self, scorer: StepScorer, *, cache_entries: int = 100_000) -> None:
        if cache_entries < 0:
            raise ValueError(f"scorer cache_entries must be >= 0, got {cache_entries}")
        self.scorer = scorer
        self.cache_entries = cache_entries
        self._cache: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()  # one scoring call at a time: one model, one cache
        self._jobs: queue.SimpleQueue | None = None
        self._thread: threading.Thread | None = None
        self.last_stats: ScoreStats | None = None

    def __len__(self) -> int:
        return len(self._cache)

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """The `StepScorer` call; its statistics land in ``last_stats``."""
        return self.score_batch(pairs).scores

    def score_batch(self, pairs: Sequence[tuple[str, str]]) -> ScoredBatch:
        """Score ``pairs`` (in this thread) and return the scores with the call's statistics."""
        with self._lock:
            slot: dict[tuple[str, str], int] = {}
            for pair in pairs:
                slot.setdefault((pair[0], pair[1]), len(slot))
            distinct = list(slot)
            values = np.empty(len(distinct), dtype=np.float64)
            missing: list[int] = []
            for k, key in enumerate(distinct):
                hit = self._cache.get(key)
                if hit is None:
                    missing.append(k)
                else:
                    values[k] = hit
                    self._cache.move_to_end(key)
            seconds = 0.0
            if missing:
                start = time.perf_counter()
                fresh = np.asarray(self.scorer.score([distinct[k] for k in missing]), dtype=np.float64)
                seconds = time.perf_counter() - start
                if fresh.shape != (len(missing),):
                    raise ValueError(
                        f"{type(self.scorer).__name__}.score returned shape {fresh.shape} "
                        f"for {len(missing)} pairs"
                    )
                bad = int(np.count_nonzero(~np.isfinite(fresh)))
                if bad:  # a NaN would silently give no credit, and stay in the cache
                    raise ValueError(f"{type(self.scorer).__name__}.score returned {bad} non-finite scores")
                values[missing] = fresh
                self._remember(distinct, missing, fresh)
            scores = values[[slot[(p[0], p[1])] for p in pairs]] if pairs else values
            stats = ScoreStats(
                requested=len(pairs), distinct=len(distinct),
                cache_hits=len(distinct) - len(missing), scored=len(missing), seconds=seconds,
            )
            self.last_stats = stats
            return ScoredBatch(scores=scores, stats=stats)

    def _remember(self, distinct: list[tuple[str, str]], missing: list[int], fresh: np.ndarray) -> None:
        if self.cache_entries == 0:
            return
        for k, value in zip(missing, fresh.tolist()):  # tolist: exact float64 -> float
            self._cache[distinct[k]] = value
        while len(self._cache) > self.cache_entries:
            self._cache.popitem(last=False)

    def submit(self, pairs: Sequence[tuple[str, str]]) -> Future[ScoredBatch]:
        """Start scoring ``pairs`` in the worker thread; ``.result()`` waits only if unfinished.

        The pairs are copied first, so the caller may reuse its list right away. The future holds
        the scorer's exception if it raised.
        """
        if self._thread is None:
            self._jobs = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._serve, args=(self._jobs,), name="step-scorer", daemon=True)
            self._thread.start()
        future: Future[ScoredBatch] = Future()
        self._jobs.put((future, [(p[0], p[1]) for p in pairs]))
        return future

    def _serve(self, jobs: queue.SimpleQueue) -> None:
        while (job := jobs.get()) is not None:
            future, pairs = job
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while queued
            try:
                future.set_result(self.score_batch(pairs))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)

    def clear(self) -> None:
        """Forget every cached score (e.g. after swapping the inner model)."""
        with self._lock:
            self._cache.clear()

    def close(self, timeout: float | None = None) -> None:
        """Finish pending work and stop the worker thread, waiting at most ``timeout`` seconds
        (a hung call is left behind in its daemon thread)."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout)
            self._thread = self._jobs = None
