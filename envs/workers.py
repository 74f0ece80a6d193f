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

Backends: ``Worker`` is the seam. ``ProcessWorker`` (multiprocessing, one machine) is the default;
``envs.ray_pool.RayWorker`` implements the same methods with a Ray actor for multi-node runs
(``envs.ray_pool.RayEnvPool``).
"""

from __future__ import annotations

import abc
import copy
import multiprocessing as mp
import pickle
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, NoReturn, Sequence, TypeVar

from envs.base import Reset, TextEnv, Transition

EnvFactory = Callable[[], TextEnv]
T = TypeVar("T")

WORKER_DIED, WORKER_TIMEOUT, ENV_ERROR = "worker_died", "worker_timeout", "env_error"
#: Stats key: workers killed and replaced in the call (not an episode count).
WORKERS_RESTARTED = "workers_restarted"


class WorkerFailed(Exception):
    """A worker died or timed out; ``reason`` is WORKER_DIED or WORKER_TIMEOUT."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


class Worker(abc.ABC):
    """One remote holder of ``n_envs`` envs. Calls are submit-then-result, so many run at once."""

    @abc.abstractmethod
    def __init__(self, factory: EnvFactory, n_envs: int): ...

    @abc.abstractmethod
    def submit(self, op: str, payload: list) -> None:
        """Start ``op`` ("reset" / "step") on the worker without waiting."""

    @abc.abstractmethod
    def result(self, timeout: float) -> list:
        """The submitted op's per-env results; raises ``WorkerFailed`` on death or timeout."""

    @abc.abstractmethod
    def kill(self) -> None:
        """Stop the worker now (it may be hung)."""

    def wait_ready(self) -> None:  # noqa: B027 - backends without a startup handshake need nothing
        """Block until the worker has built its envs; raise if it could not."""

    def close(self) -> None:
        """Stop the worker politely (default: kill)."""
        self.kill()


#: An exception raised in a worker as the parent receives it: the exception and its traceback text.
RemoteError = tuple[BaseException, str]


def remote_error(exc: BaseException) -> RemoteError:
    """What a worker sends back for ``exc``: the exception itself (or, when it does not survive
    pickling, a RuntimeError with its type and message) and the traceback it had there."""
    text = "".join(traceback.format_exception(exc))
    try:
        # dumps: every attribute pickles; deepcopy rebuilds it as unpickling would (cls(*args)),
        # without calling pickle.loads in a process that handles model text (tests/test_security.py).
        pickle.dumps(exc)
        copy.deepcopy(exc)
    except Exception:  # noqa: BLE001 - any exception type: only its message must cross
        exc = RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc, text


def raise_remote(error: RemoteError, where: str) -> NoReturn:
    """Raise a worker's exception in this process as itself, so a setup error (a missing split, a
    bad game file) reads as its own message; the worker's traceback is kept as a note, printed
    with the traceback (train.py prints it under SCPO_DEBUG=1)."""
    exc, text = error
    exc.add_note(f"raised {where}; its traceback there:\n{text}")
    raise exc


def run_op(envs: list[TextEnv], op: str, payload: list) -> list[tuple[str, Any]]:
    """Apply ``op`` to the addressed envs: per env ("ok", value) or ("error", RemoteError). Shared
    by every backend, so one env's failure is reported the same way whichever process ran it."""
    out = []
    for slot, *args in payload:
        try:
            value = envs[slot].reset(*args) if op == "reset" else envs[slot].step(*args)
            out.append(("ok", value))
        except Exception as exc:  # noqa: BLE001 - one env's failure must not take the others down
            out.append(("error", remote_error(exc)))
    return out


def _serve(conn, factory: EnvFactory, n_envs: int) -> None:
    """Worker process main loop: build the envs, then answer (op, payload) messages."""
    try:
        envs = [factory() for _ in range(n_envs)]
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", remote_error(exc)))
        return
    conn.send(("ready", None))
    while True:
        op, payload = conn.recv()
        if op == "close":
            for env in envs:
                env.close()
            return
        conn.send(run_op(envs, op, payload))


class ProcessWorker(Worker):
    """A ``multiprocessing`` process talking over a pipe ("spawn": safe next to torch threads)."""

    start_method = "spawn"
    startup_timeout_s = 300.0

    def __init__(self, factory: EnvFactory, n_envs: int):
        ctx = mp.get_context(self.start_method)
        self._conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, factory, n_envs), daemon=True)
        self.process.start()
        child.close()  # so a dead worker shows up as EOF on our end
        self._ready = False

    def _recv(self, timeout: float):
        if not self._conn.poll(max(timeout, 0.0)):
            raise WorkerFailed(WORKER_TIMEOUT, f"pid {self.process.pid} gave no answer within {timeout:.1f} s")
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            self.process.join(timeout=1.0)
            detail = f"pid {self.process.pid} exited with code {self.process.exitcode}"
            raise WorkerFailed(WORKER_DIED, detail) from None

    def wait_ready(self) -> None:
        if not self._ready:
            status, detail = self._recv(self.startup_timeout_s)
            if status != "ready":
                raise_remote(detail, f"in env worker pid {self.process.pid} while it built its envs")
            self._ready = True

    def submit(self, op: str, payload: list) -> None:
        self.wait_ready()
        try:
            self._conn.send((op, payload))
        except (BrokenPipeError, OSError):
            pass  # the worker is dead; result() reports it

    def result(self, timeout: float) -> list:
        return self._recv(timeout)

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5.0)
        self._conn.close()

    def close(self) -> None:
        try:
            self._conn.send(("close", None))
            self.process.join(timeout=5.0)
        except (BrokenPipeError, OSError):
            pass
        self.kill()


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
        """Slot ``g * group_size + j`` plays ``groups[g]`` = (split, index), for every member j."""
        n = len(groups) * group_size
        if not 0 < n <= self.num_envs:
            raise ValueError(f"{len(groups)} groups x {group_size} = {n} slots; the pool has {self.num_envs}")
        items = {g * group_size + j: tuple(task) for g, task in enumerate(groups) for j in range(group_size)}
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
