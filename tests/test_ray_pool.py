"""RayEnvPool: the process pool's rollouts on Ray actors; dead and hung actors ended, counted, replaced."""

from __future__ import annotations

import os
import random
import time

import pytest

from envs.toy import ACTIONS, CorridorEnv
from envs.worker import WORKER_DIED, WORKER_TIMEOUT, WORKERS_RESTARTED
from envs.workers import EnvPool
from scpo_lightning.engines.base import Generation, RolloutEngine, SamplingParams
from scpo_lightning.rollout import RolloutConfig, collect
from tests.conftest import require

CFG = RolloutConfig(env="alfworld", max_steps=6, action_mode="constrained")
TASKS = [("train", 0), ("train", 1), ("train", 2)]


@pytest.fixture(scope="module")
def ray():
    ray = require("ray", extra="ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


class FakeTokenizer:
    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return [1, 2, 3]


class Seeded(RolloutEngine):
    """Seeded random admissible actions (the same sequence for the same prompts); ``hooks[k]()`` runs at call k."""

    def __init__(self, hooks=None):
        self.rng, self.calls, self.hooks = random.Random(0), 0, hooks or {}

    def generate(self, prompts, params, allowed=None):
        self.hooks.get(self.calls, lambda: None)()
        self.calls += 1
        choices = allowed or [ACTIONS] * len(prompts)
        return [Generation([7], f"<action>{self.rng.choice(c)}</action>", True) for c in choices]


class HangingCorridor(CorridorEnv):
    def step(self, action: str):
        if action == "hang":
            time.sleep(600)
        return super().step(action)


def kill_and_wait(ray, actor):
    """``ray.kill`` only asks for the kill: calls submitted after it can still be answered. Call the
    actor until it refuses, so the pool's next step meets a dead actor every time."""
    from ray.exceptions import GetTimeoutError, RayActorError

    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ray.get(actor.pid.remote(), timeout=5)
        except RayActorError:
            return
        except GetTimeoutError:
            pass  # dying: ask again
        time.sleep(0.05)
    raise AssertionError("the actor still answers 30 s after ray.kill")


def rollout(pool, engine=None):
    return collect(pool, engine or Seeded(), FakeTokenizer(), TASKS, 2, SamplingParams(), CFG, progress=False)


def assert_whole(ray, pool, replaced=()):
    """Every actor slot holds a live actor that answers; the replaced actors are gone (not left hung)."""
    assert len(pool.workers) == pool.num_workers
    pids = ray.get([w.actor.pid.remote() for w in pool.workers], timeout=30)
    assert pids == pool.worker_pids() and not {w.pid for w in replaced} & set(pids)
    for old in replaced:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(old.actor.pid.remote(), timeout=30)


def test_rollout_on_ray_actors_matches_the_process_pool(ray):
    from envs.ray_pool import RayEnvPool
    from envs.registry import make_env_factory

    factory = make_env_factory("corridor", {"rooms": 5})
    with EnvPool(factory, num_envs=6, num_workers=2, timeout_s=30.0) as local:
        expected = rollout(local)
    with RayEnvPool(factory, num_envs=6, num_workers=2, timeout_s=30.0) as pool:
        got = rollout(pool)
        assert len(set(pool.worker_pids()) - {os.getpid(), None}) == 2  # two actor processes did the work
    assert got.observations == expected.observations and got.anchors == expected.anchors
    assert (got.rewards == expected.rewards).all() and (got.dones == expected.dones).all()
    assert got.trajectories == expected.trajectories and got.env_failures == {}
    # the scripted walk is not trivial: several steps, some episodes won, some not
    assert len(got.observations) > 12 and 0 < sum(t["won"] for t in got.trajectories) < 6


def test_killed_actor_ends_its_episodes_and_is_replaced(ray):
    from envs.ray_pool import RayEnvPool

    always_look = RolloutConfig(env="alfworld", max_steps=4, action_mode="constrained", exclude_actions=("go",))
    with RayEnvPool(CorridorEnv, num_envs=6, num_workers=2, timeout_s=30.0) as pool:
        victim = pool.workers[1]
        engine = Seeded({2: lambda: kill_and_wait(ray, victim.actor)})  # dead before the pool steps step 2
        batch = collect(pool, engine, FakeTokenizer(), TASKS, 2, SamplingParams(), always_look, progress=False)
        # slot s lives on actor s % 2: the odd slots were on the killed one
        assert [t["end"] for t in batch.trajectories] == ["max_steps", WORKER_DIED] * 3
        assert batch.env_failures == {WORKER_DIED: 3, WORKERS_RESTARTED: 1}
        assert sorted(batch.steps[i] for i in range(len(batch.steps)) if batch.traj_ids[i] % 2) == [0, 0, 0, 1, 1, 1]
        assert_whole(ray, pool, replaced=[victim])
        again = collect(pool, Seeded(), FakeTokenizer(), TASKS, 2, SamplingParams(), always_look, progress=False)
        assert [t["end"] for t in again.trajectories] == ["max_steps"] * 6 and again.env_failures == {}
        assert pool.totals == {WORKER_DIED: 3, WORKERS_RESTARTED: 1}


def test_hung_actor_times_out_and_is_replaced(ray):
    from envs.ray_pool import RayEnvPool

    with RayEnvPool(HangingCorridor, num_envs=2, num_workers=2, timeout_s=2.0) as pool:
        hung = pool.workers[1]
        pool.reset([("train", 0)], group_size=2)
        began = time.monotonic()
        out = pool.step(["look", "hang"])
        assert time.monotonic() - began < 20
        assert out.results[1].done and out.results[1].info["failure"] == WORKER_TIMEOUT
        assert out.results[0].observation.startswith("You are in room")
        assert out.stats == {WORKER_TIMEOUT: 1, WORKERS_RESTARTED: 1}
        assert_whole(ray, pool, replaced=[hung])


class UnbuildableCorridor(CorridorEnv):
    def __init__(self):
        raise ValueError("data.env_options: no split 'valid_seen' under /data/json_2.1.1")


def test_actor_that_cannot_build_its_envs_fails_the_pool_with_the_envs_own_message(ray):
    from envs.ray_pool import RayEnvPool

    with pytest.raises(ValueError) as info:
        RayEnvPool(UnbuildableCorridor, num_envs=2, num_workers=1)
    assert str(info.value) == "data.env_options: no split 'valid_seen' under /data/json_2.1.1"
    assert "env actor pid" in info.value.__notes__[0] and "in __init__" in info.value.__notes__[0]


def test_datamodule_builds_the_ray_pool(ray):
    from envs.ray_pool import RayEnvPool
    from scpo_lightning.datamodule import RolloutDataModule

    dm = RolloutDataModule(env="corridor", groups_per_batch=2, group_size=2, val_episodes=2, workers=2,
                           worker_backend="ray", progress=False)
    dm.setup("fit")
    try:
        assert isinstance(dm.pool, RayEnvPool) and len(dm.pool.workers) == 2
    finally:
        dm.teardown("fit")


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    ({"worker_backend": "dask"}, ValueError, r"data.worker_backend must be one of \('process', 'ray'\)"),
    ({"ray_address": "auto"}, ValueError, "data.ray_address='auto' is set but data.worker_backend is 'process'"),
    ({"worker_backend": "ray", "workers": 0}, ValueError, "data.workers >= 1"),
])
def test_bad_backend_settings_name_the_field(kwargs, error, match):
    from scpo_lightning.datamodule import RolloutDataModule

    with pytest.raises(error, match=match):
        RolloutDataModule(env="corridor", **kwargs)


def test_missing_ray_says_how_to_install_it(monkeypatch):
    import importlib.util

    from scpo_lightning.datamodule import RolloutDataModule

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ImportError, match=r"pip install -e '\.\[ray\]'"):
        RolloutDataModule(env="corridor", worker_backend="ray")
