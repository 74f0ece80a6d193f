"""Env workers on Ray actors: the ``EnvPool`` of ``envs.workers`` spread over a Ray cluster.

``RayEnvPool`` is ``EnvPool`` with ``RayWorker`` as its backend: each actor holds a slice of the
env slots, built by the same picklable factory, and answers the same ("reset" / "step", payload)
calls through ``envs.worker.run_op``. The failure semantics are ``EnvPool``'s: an actor that dies
(``RayActorError``) or does not answer in time (``ray.get`` timeout) is killed with ``ray.kill``
and replaced, and the episodes it held end with ``info["failure"]`` = ``worker_died`` /
``worker_timeout``, counted in the call's stats.

Ray is imported only here (the ``ray`` extra); the default process pool does not need it.
Every node of a cluster needs the same checkout and environment (the actors import ``envs``).
"""

from __future__ import annotations

import os
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from envs.base import TextEnv
from envs.worker import (WORKER_DIED, WORKER_TIMEOUT, EnvFactory, RemoteError, Worker, WorkerFailed, raise_remote,
                         remote_error, run_op)
from envs.workers import EnvPool


class _EnvActor:
    """The remote side: ``n_envs`` envs in one Ray worker process."""

    def __init__(self, factory: EnvFactory, n_envs: int):
        self.envs: list[TextEnv] = []
        self.error: RemoteError | None = None  # reported by RayWorker.wait_ready as the env's own error
        try:
            self.envs = [factory() for _ in range(n_envs)]
        except Exception as exc:  # noqa: BLE001 - any setup error: only its message must cross
            self.error = remote_error(exc)

    def pid(self) -> int:
        return os.getpid()

    def started(self) -> tuple[int, RemoteError | None]:
        """The actor's pid and what went wrong while it built its envs (None: nothing)."""
        return os.getpid(), self.error

    def run(self, op: str, payload: list) -> list[tuple[str, Any]]:
        return run_op(self.envs, op, payload)

    def close(self) -> None:
        for env in self.envs:
            env.close()


# SPREAD: actors of one pool go to different nodes where there are several (the point of Ray here).
# max_restarts=0: the pool, not Ray, replaces a dead actor, so its episodes are ended and counted.
_RemoteEnvActor = ray.remote(max_restarts=0, scheduling_strategy="SPREAD")(_EnvActor)


class RayWorker(Worker):
    """One Ray actor holding ``n_envs`` envs; calls are ``actor.run.remote`` + ``ray.get(timeout)``."""

    startup_timeout_s = 300.0

    def __init__(self, factory: EnvFactory, n_envs: int):
        self.actor = _RemoteEnvActor.remote(factory, n_envs)
        self._started_ref = self.actor.started.remote()  # answers once the envs are built (or failed to be)
        self.pid: int | None = None
        self._ref: Any = None

    def wait_ready(self) -> None:
        if self.pid is None:
            try:
                pid, error = ray.get(self._started_ref, timeout=self.startup_timeout_s)
            except (RayActorError, GetTimeoutError) as exc:
                raise RuntimeError(f"env actor could not build its envs:\n{exc}") from None
            if error is not None:
                raise_remote(error, f"in env actor pid {pid} while it built its envs")
            self.pid = pid

    def submit(self, op: str, payload: list) -> None:
        self.wait_ready()
        self._ref = self.actor.run.remote(op, payload)

    def result(self, timeout: float) -> list:
        try:
            return ray.get(self._ref, timeout=max(timeout, 0.0))
        except GetTimeoutError:
            raise WorkerFailed(WORKER_TIMEOUT, f"actor pid {self.pid} gave no answer within {timeout:.1f} s") from None
        except RayActorError as exc:
            raise WorkerFailed(WORKER_DIED, f"actor pid {self.pid} died: {str(exc).splitlines()[0]}") from None

    def kill(self) -> None:
        ray.kill(self.actor, no_restart=True)

    def close(self) -> None:
        try:
            ray.get(self.actor.close.remote(), timeout=5.0)
        except (RayActorError, GetTimeoutError):
            pass  # dead or hung: kill() below is all that is left to do
        self.kill()


def connect(address: str | None, num_cpus: int) -> None:
    """Join Ray: ``None`` starts a local runtime with ``num_cpus`` CPUs (or reuses the one this
    process already started); ``"auto"`` or ``"ray://host:port"`` joins an existing cluster."""
    if ray.is_initialized():
        return
    if address is None:
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)


class RayEnvPool(EnvPool):
    """``EnvPool`` whose ``num_workers`` workers are Ray actors (slot s on actor s % num_workers)."""

    def __init__(self, factory: EnvFactory, num_envs: int, num_workers: int = 2, timeout_s: float = 120.0,
                 reset_timeout_s: float = 900.0, address: str | None = None):
        """
        Args:
            factory: picklable callable returning a fresh ``TextEnv`` (``envs.registry.EnvSetup.factory``).
            num_envs: env slots in all.
            num_workers: Ray actors; a local runtime (``address=None``) gets this many CPUs.
            timeout_s: limit for one ``step`` call before an actor counts as hung.
            reset_timeout_s: limit for one ``reset`` call.
            address: None (start a local Ray runtime), "auto" (the cluster of ``ray start`` on this
                node) or "ray://host:port" (Ray Client).
        """
        connect(address, num_workers)
        super().__init__(factory, num_envs, num_workers, timeout_s, reset_timeout_s, worker_cls=RayWorker)

    def worker_pids(self) -> list[int | None]:
        return [w.pid for w in self.workers]
