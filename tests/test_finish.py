"""distributed.finish: the last barrier, then the registered closers (the vLLM engine's process
groups), then the default group unless a closer destroyed it."""

from __future__ import annotations

import scpo_lightning.distributed as distributed


def test_closers_run_after_the_barrier_and_before_the_default_group_goes(monkeypatch):
    calls, alive = [], [True]
    monkeypatch.setattr(distributed, "is_distributed", lambda: True)
    monkeypatch.setattr(distributed.dist, "barrier", lambda: calls.append("barrier"))
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: alive[0])
    monkeypatch.setattr(distributed.dist, "destroy_process_group", lambda: calls.append("destroy") or alive.clear()
                        or alive.append(False))
    monkeypatch.setattr(distributed, "_CLOSERS", [])
    distributed.before_finish(lambda: calls.append("engine"))
    distributed.finish()
    assert calls == ["barrier", "engine", "destroy"] and distributed._CLOSERS == []
    # A closer that destroys the default group itself (vLLM's destroy_distributed_environment): no second destroy.
    alive[:] = [True]
    calls.clear()
    distributed.before_finish(lambda: calls.append("engine") or alive.__setitem__(0, False))
    distributed.finish()
    assert calls == ["barrier", "engine"]
