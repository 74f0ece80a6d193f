"""Parallel environment workers: a pool of processes, each holding several ``TextEnv``s.

The pool knows nothing about any particular environment: it is built from a picklable factory
that returns an ``envs.base.TextEnv`` (ALFWorld and WebShop both use it). A batch of
``len(groups) * group_size`` env *slots* is spread round-robin over the workers; ``reset(groups,
group_size)`` puts the n slots of group g on the identical ``(split, index)`` (the same game,
by value, in whichever process holds them), and ``step(actions)`` steps every active slot, the
workers in parallel.

Failure handling: every call has a timeout. A worker that dies (pipe closed, process gone) or
does not answer in time is killed and replaced by a fresh one; the episodes it held end with a
``Transition`` whose ``done`` is True and whose ``info["failure"]`` names the reason, and the
reason is counted in the call's ``stats`` (and in ``EnvPool.totals``), so it reaches the
metrics: never a hang, never a silent drop. A reset lost that way is retried once on the
replacement (resets are idempotent by address).

Backends: ``envs.worker.Worker`` is the seam. ``ProcessWorker`` (multiprocessing, one machine) is
the default; ``envs.ray_pool.RayWorker`` implements the same methods with a Ray actor for
multi-node runs (``envs.ray_pool.RayEnvPool``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Sequence, TypeVar

from envs.base import Reset, Transition, group_slots
from envs.worker import ENV_ERROR, WORKERS_RESTARTED, EnvFactory, ProcessWorker, Worker, WorkerFailed, raise_remote

T = TypeVar("T")

@dataclass
class PoolResult(Generic[T]):
    """One call's per-slot results and what went wrong in it."""

    results: list[T]
    stats: dict[str, int] = field(default_factory=dict)  # episodes ended per failure reason, restarts


def failed_transition(reason: str, detail: str) -> Transition:
    """How a lost episode ends: done, not won, no reward, the reason recorded."""
    return Transition("", [], 0.0, done=True, won=False, noop=False, info={"failure": reason, "detail": detail})


class EnvPool:
    """``num_workers`` workers holding ``num_envs`` env slots in all (slot s on worker s % W)."""

    def __init__(self, factory: EnvFactory, num_envs: int, num_workers: int = 2, timeout_s: float = 120.0,
                 reset_timeout_s: float = 900.0, worker_cls: Callable[[EnvFactory, int], Worker] = ProcessWorker):
        """
        Args:
            factory: picklable callable returning a fresh ``TextEnv`` (e.g. ``partial(AlfworldEnv, cfg)``).
            num_envs: env slots in all (groups x group size of the largest batch).
            num_workers: worker processes; slot s lives on worker s % num_workers.
            timeout_s: limit for one ``step`` call (all workers together) before a worker counts as hung.
            reset_timeout_s: limit for one ``reset`` call (loading new games is much slower than a step).
            worker_cls: the backend (``ProcessWorker``; a Ray-actor ``Worker`` for multi-node runs).
        """
        if num_envs < 1 or num_workers < 1:
            raise ValueError(f"EnvPool needs num_envs >= 1 and num_workers >= 1, got {num_envs}, {num_workers}")
        self.factory, self.num_envs = factory, num_envs
        self.timeout_s, self.reset_timeout_s = timeout_s, reset_timeout_s
        self.num_workers = min(num_workers, num_envs)
        self.worker_cls = worker_cls
        self.workers = [worker_cls(factory, self._envs_on(w)) for w in range(self.num_workers)]
        try:
            for worker in self.workers:
                worker.wait_ready()
        except BaseException:
            for worker in self.workers:  # a pool that cannot start leaves no worker behind
                worker.kill()
            raise
        self.totals: dict[str, int] = {}
        self._ended: dict[int, str] = {}  # slot -> failure reason, until its next reset
        self._batch = 0  # slots in play since the last reset

    def _envs_on(self, w: int) -> int:
        return len(range(w, self.num_envs, self.num_workers))

    def _restart(self, w: int) -> None:
        self.workers[w].kill()
        self.workers[w] = self.worker_cls(self.factory, self._envs_on(w))
        self.workers[w].wait_ready()

    def _call(self, op: str, jobs: dict[int, list[tuple[int, Any]]]) -> tuple[dict[int, Any], dict[int, WorkerFailed]]:
        """Run ``jobs`` (worker -> [(slot, arg)]) in parallel; restart the workers that fail."""
        for w, items in jobs.items():
            self.workers[w].submit(op, [(s // self.num_workers, *arg) for s, arg in items])
        deadline = time.monotonic() + (self.reset_timeout_s if op == "reset" else self.timeout_s)
        done, failed = {}, {}
        for w in jobs:
            try:
                done[w] = self.workers[w].result(deadline - time.monotonic())
            except WorkerFailed as exc:
                failed[w] = exc
        for w in failed:
            self._restart(w)
        return done, failed

    def _jobs(self, items: dict[int, Any]) -> dict[int, list]:
        jobs: dict[int, list] = {}
        for slot, arg in sorted(items.items()):
            jobs.setdefault(slot % self.num_workers, []).append((slot, arg))
        return jobs

    def _count(self, stats: dict[str, int], key: str, n: int = 1) -> None:
        stats[key] = stats.get(key, 0) + n
        self.totals[key] = self.totals.get(key, 0) + n

    def reset(self, groups: Sequence[tuple[str, int]], group_size: int) -> PoolResult[Reset | None]:
        """Put the slots on their games (``envs.base.group_slots``: slot g * group_size + j plays groups[g])."""
        items = group_slots(groups, group_size, self.num_envs)
        n = len(items)
        results: list[Reset | None] = [None] * n
        stats: dict[str, int] = {}
        self._ended.clear()
        self._batch = n
        for attempt in range(2):
            jobs = self._jobs(items)
            done, failed = self._call("reset", jobs)
            for w, outs in done.items():
                for (slot, _), (status, value) in zip(jobs[w], outs):
                    if status != "ok":  # a reset that raises is a setup error (bad data, bad index)
                        raise_remote(value, f"in the worker of slot {slot}, resetting it to {items[slot]}")
                    results[slot] = value
            for w, exc in failed.items():
                self._count(stats, WORKERS_RESTARTED)
                if attempt == 1:
                    for slot, _ in jobs[w]:
                        self._ended[slot] = exc.reason
                        self._count(stats, exc.reason)
            items = {slot: arg for w in failed for slot, arg in jobs[w]}
            if not items:
                break
        return PoolResult(results, stats)

    def step(self, actions: Sequence[str | None]) -> PoolResult[Transition | None]:
        """Step every slot whose action is not None; None slots (finished episodes) are skipped."""
        if len(actions) != self._batch:
            raise ValueError(f"{len(actions)} actions, but the last reset put {self._batch} envs in play")
        items = {s: (a,) for s, a in enumerate(actions) if a is not None}
        lost = sorted(s for s in items if s in self._ended)
        if lost:
            raise ValueError(f"slots {lost} already ended ({self._ended[lost[0]]}); reset them before stepping")
        results: list[Transition | None] = [None] * len(actions)
        stats: dict[str, int] = {}
        jobs = self._jobs(items)
        done, failed = self._call("step", jobs)
        for w, outs in done.items():
            for (slot, _), (status, value) in zip(jobs[w], outs):
                if status != "ok":
                    value = failed_transition(ENV_ERROR, value[1])  # the traceback: the detail
                    self._ended[slot] = ENV_ERROR
                    self._count(stats, ENV_ERROR)
                results[slot] = value
        for w, exc in failed.items():
            self._count(stats, WORKERS_RESTARTED)
            for slot, _ in jobs[w]:
                results[slot] = failed_transition(exc.reason, exc.detail)
                self._ended[slot] = exc.reason
                self._count(stats, exc.reason)
        return PoolResult(results, stats)

    def worker_pids(self) -> list[int | None]:
        return [getattr(getattr(w, "process", None), "pid", None) for w in self.workers]

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.workers = []

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
