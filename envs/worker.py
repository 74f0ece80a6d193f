"""One worker: the seam between the env pool and where its envs run.

``Worker`` holds ``n_envs`` ``envs.base.TextEnv``s somewhere else (another process, a Ray actor)
and runs submit-then-result calls on them; ``ProcessWorker`` is the ``multiprocessing`` backend,
``envs.ray_pool.RayWorker`` the Ray one. Every backend applies a call with ``run_op`` and sends an
env's exception back as a ``RemoteError``, so a failure reads the same whichever process ran it;
a dead or hung worker raises ``WorkerFailed`` with one of the reasons below (``envs.workers``
counts them and replaces the worker).
"""

from __future__ import annotations

import abc
import copy
import multiprocessing as mp
import pickle
import traceback
from typing import Any, Callable, NoReturn

from envs.base import TextEnv

EnvFactory = Callable[[], TextEnv]

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
