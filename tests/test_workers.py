"""EnvPool: group-identical resets, parallel steps, dead and hung workers replaced and counted."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

# Worker processes import this module to unpickle the env classes: heavy imports (Lightning, the
# rollout loop) stay inside the tests that need them.
from envs.base import Reset, TextEnv, Transition
from envs.toy import CorridorEnv
from envs.worker import ENV_ERROR, WORKER_DIED, WORKER_TIMEOUT, WORKERS_RESTARTED
from envs.workers import EnvPool
from scpo_lightning.engines.base import Generation, RolloutEngine, SamplingParams


class EchoEnv(TextEnv):
    """A tiny deterministic env; special actions crash, hang or raise inside the worker."""

    max_steps = 5

    def reset(self, split: str, index: int) -> Reset:
        if split.startswith("crash_once:"):  # dies the first time only: the marker file remembers
            marker = Path(split.split(":", 1)[1])
            try:  # O_EXCL: exactly one of the workers racing here creates it and dies
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                os._exit(4)
        if split == "always_crash":
            os._exit(5)
        if split == "missing":
            raise FileNotFoundError("no such game")
        self.game, self.t = f"{split}/{index}", 0
        return Reset(f"game {self.game} pid-free", [f"go {index}", "look"], "task", "echo", self.game,
                     {"pid": os.getpid()})

    def step(self, action: str) -> Transition:
        if action == "crash":
            os._exit(3)
        if action == "hang":
            time.sleep(600)
        if action == "raise":
            raise RuntimeError("engine bug")
        self.t += 1
        won = action == "win"
        return Transition(f"{self.game}: {action}", ["look"], 10.0 if won else 0.0, won or self.t >= 5, won,
                          noop=action == "noop", info={"pid": os.getpid()})


class FaultyCorridor(CorridorEnv):
    """The corridor world, whose step crashes its worker, hangs or raises on command."""

    def step(self, action: str) -> Transition:
        if action == "crash":
            os._exit(3)
        if action == "hang":
            time.sleep(600)
        if action == "raise":
            raise RuntimeError("engine bug")
        return super().step(action)


def zombie_children() -> list[int]:
    """Child processes of this one that exited but were never reaped."""
    me, out = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # exited while we looked
            continue
        if int(fields[1]) == me and fields[0] == "Z":
            out.append(int(stat.parent.name))
    return out


def assert_whole(pool: EnvPool, replaced: list[int] = ()) -> None:
    """Every worker slot holds a live process, the replaced ones are reaped, nothing is a zombie."""
    assert len(pool.workers) == pool.num_workers
    assert all(w.process.is_alive() for w in pool.workers)
    for pid in replaced:
        assert pid not in pool.worker_pids() and not Path(f"/proc/{pid}").exists(), pid
    assert zombie_children() == []


@pytest.fixture
def pool():
    with EnvPool(EchoEnv, num_envs=8, num_workers=2, timeout_s=10.0) as p:
        yield p


def test_groups_get_identical_resets_across_workers(pool):
    out = pool.reset([("train", 3), ("valid_seen", 7)], group_size=4)
    assert out.stats == {}
    first, second = out.results[:4], out.results[4:]
    for group, game in ((first, "train/3"), (second, "valid_seen/7")):
        assert {r.task_id for r in group} == {game}
        assert len({r.observation for r in group}) == 1
        assert len({tuple(r.admissible) for r in group}) == 1
    # each group is spread over both worker processes, so identity is by value, not by sharing
    assert len({r.info["pid"] for r in first}) == 2


def test_steps_run_per_slot_and_skip_finished(pool):
    pool.reset([("train", 1)], group_size=4)
    out = pool.step(["look", None, "win", "noop"])
    assert out.results[1] is None
    assert out.results[0].observation == "train/1: look" and not out.results[0].done
    assert out.results[2].won and out.results[2].reward == 10.0 and out.results[2].done
    assert out.results[3].noop


def test_killed_worker_ends_its_episodes_with_a_reason_and_is_replaced(pool):
    pool.reset([("train", 2)], group_size=4)
    victim = pool.worker_pids()[1]
    os.kill(victim, signal.SIGKILL)
    out = pool.step(["look"] * 4)
    # slots 1 and 3 live on worker 1
    for slot in (1, 3):
        assert out.results[slot].done and not out.results[slot].won
        assert out.results[slot].info["failure"] == WORKER_DIED
    for slot in (0, 2):
        assert out.results[slot].observation == "train/2: look"
    assert out.stats == {WORKER_DIED: 2, "workers_restarted": 1}
    assert_whole(pool, replaced=[victim])
    with pytest.raises(ValueError, match="already ended"):
        pool.step(["look"] * 4)
    again = pool.reset([("train", 2)], group_size=4)
    assert all(r is not None for r in again.results)
    assert pool.totals[WORKER_DIED] == 2


def test_crash_and_hang_inside_a_step_are_detected(pool):
    pool.reset([("train", 0)], group_size=2)
    out = pool.step(["crash", "look"])
    assert out.results[0].info["failure"] == WORKER_DIED
    assert out.results[1].observation == "train/0: look"
    pool.reset([("train", 0)], group_size=2)
    pool.timeout_s = 2.0
    hung = pool.worker_pids()[1]
    began = time.monotonic()
    out = pool.step(["look", "hang"])
    assert time.monotonic() - began < 30
    assert out.results[1].info["failure"] == WORKER_TIMEOUT
    assert out.results[0].observation == "train/0: look"
    assert out.stats[WORKER_TIMEOUT] == 1
    assert_whole(pool, replaced=[hung])  # the hung process was killed and reaped, not left behind


def test_env_exception_ends_only_that_episode(pool):
    pool.reset([("train", 0)], group_size=4)
    out = pool.step(["raise", "look", "look", "look"])
    assert out.results[0].info["failure"] == ENV_ERROR and "engine bug" in out.results[0].info["detail"]
    assert out.stats == {ENV_ERROR: 1}
    assert [r.observation for r in out.results[1:]] == ["train/0: look"] * 3


def test_too_many_slots_is_a_clear_error(pool):
    with pytest.raises(ValueError, match="pool has 8"):
        pool.reset([("train", 0)] * 3, group_size=4)


def test_reset_lost_to_a_dying_worker_is_retried_once(pool, tmp_path):
    split = f"crash_once:{tmp_path / 'marker'}"
    out = pool.reset([(split, 1)], group_size=2)
    assert [r.task_id for r in out.results] == [f"{split}/1"] * 2
    assert out.stats == {"workers_restarted": 1}


def test_reset_that_keeps_killing_its_worker_ends_those_slots(pool):
    out = pool.reset([("always_crash", 0)], group_size=2)
    assert out.results == [None, None]
    assert out.stats == {WORKER_DIED: 2, "workers_restarted": 4}  # two workers, two attempts
    with pytest.raises(ValueError, match="already ended"):
        pool.step(["look", "look"])
    assert all(r is not None for r in pool.reset([("train", 0)], group_size=8).results)


def test_reset_error_inside_the_env_is_raised_as_itself_with_its_traceback_as_a_note(pool):
    with pytest.raises(FileNotFoundError) as info:
        pool.reset([("missing", 0)], group_size=2)
    assert str(info.value) == "no such game"  # the message as the env raised it; no wrapping
    note = "".join(info.value.__notes__)
    assert "resetting it to ('missing', 0)" in note and "in reset" in note and "Traceback" in note


class UnbuildableEnv(EchoEnv):
    """An env whose settings fail in the worker, as a bad data folder does."""

    def __init__(self):
        raise ValueError("data.env_options: no split 'valid_seen' under /data/json_2.1.1")


class UnpicklableError(Exception):
    def __init__(self, code: int, text: str):  # pickle rebuilds it with one argument: it fails
        super().__init__(f"{code}: {text}")


class EnvWithUnpicklableError(EchoEnv):
    def __init__(self):
        raise UnpicklableError(7, "engine refused")


def test_env_that_cannot_be_built_fails_the_pool_with_the_workers_own_message():
    with pytest.raises(ValueError) as info:
        EnvPool(UnbuildableEnv, num_envs=2, num_workers=1)
    assert str(info.value) == "data.env_options: no split 'valid_seen' under /data/json_2.1.1"
    assert "while it built its envs" in info.value.__notes__[0] and "in __init__" in info.value.__notes__[0]
    # An exception that does not survive pickling still arrives with its type and message.
    with pytest.raises(RuntimeError) as info:
        EnvPool(EnvWithUnpicklableError, num_envs=2, num_workers=1)
    assert str(info.value) == "UnpicklableError: 7: engine refused"


class FakeTokenizer:
    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return [1, 2, 3]


class Scripted(RolloutEngine):
    """Answers call k's prompt i with ``script[k][i]`` (default ``look``), in constrained format."""

    def __init__(self, script: dict[int, dict[int, str]]):
        self.script, self.calls = script, 0

    def generate(self, prompts, params, allowed=None):
        plan, self.calls = self.script.get(self.calls, {}), self.calls + 1
        return [Generation([7], f"<action>{plan.get(i, 'look')}</action>", True) for i in range(len(prompts))]


def test_faults_inside_a_rollout_end_only_their_episodes_and_the_iteration_completes():
    from scpo_lightning.gigpo import gigpo_advantage
    from scpo_lightning.rollout import RolloutConfig, collect

    # 2 groups x 3 on 3 workers: slot s on worker s % 3, so worker 0 holds slots 0 and 3, worker 1
    # slots 1 and 4, worker 2 slots 2 and 5. At step 1 slot 0 raises, slot 1 kills its worker, slot
    # 2 hangs its worker: every episode on workers 1 and 2 is lost, slot 3 plays on.
    cfg = RolloutConfig(env="alfworld", max_steps=3, action_mode="constrained")
    engine = Scripted({1: {0: "raise", 1: "crash", 2: "hang"}})
    with EnvPool(FaultyCorridor, num_envs=6, num_workers=3, timeout_s=2.0) as pool:
        pids = pool.worker_pids()
        batch = collect(pool, engine, FakeTokenizer(), [("train", 0), ("train", 1)], 3, SamplingParams(),
                        cfg, progress=False)
        assert [t["end"] for t in batch.trajectories] == [
            ENV_ERROR, WORKER_DIED, WORKER_TIMEOUT, "max_steps", WORKER_DIED, WORKER_TIMEOUT]
        assert batch.env_failures == {ENV_ERROR: 1, WORKER_DIED: 2, WORKER_TIMEOUT: 2, WORKERS_RESTARTED: 2}
        # the iteration completed: every episode's step 0, slot 3's three steps, and their advantages
        assert sorted(zip(batch.traj_ids, batch.steps)) == sorted([(i, 0) for i in range(6)] + [(3, 1), (3, 2)])
        adv = gigpo_advantage(batch.episode_scores, batch.step_returns, batch.group_ids, batch.anchors)
        assert adv.shape == (8,) and np.isfinite(adv).all()
        assert_whole(pool, replaced=pids[1:])
        assert pool.worker_pids()[0] == pids[0]  # the worker whose env raised was not restarted
        # the next iteration has the whole pool again: all six episodes play to the step limit
        again = collect(pool, Scripted({}), FakeTokenizer(), [("train", 2), ("train", 3)], 3, SamplingParams(),
                        cfg, progress=False)
        assert [t["end"] for t in again.trajectories] == ["max_steps"] * 6 and again.env_failures == {}
    assert zombie_children() == []


def test_worker_failures_reach_the_logged_metrics_per_iteration_and_in_total():
    from callbacks.logging import RLLogger

    logged: list[tuple[int, dict]] = []
    logger = SimpleNamespace(log_metrics=lambda metrics, step: logged.append((step, metrics)))
    trainer = SimpleNamespace(current_epoch=0, loggers=[logger], logger=None, print=lambda *a: None,
                              sanity_checking=False, is_global_zero=True)
    module = SimpleNamespace(last_metrics={"train/loss": 0.5}, val_summary=dict)
    callback = RLLogger()
    for failures in ({WORKER_DIED: 2.0, WORKER_TIMEOUT: 1.0, WORKERS_RESTARTED: 2.0}, {}):
        batch = SimpleNamespace(trajectories=[{"won": False, "length": 1, "family": "x"}], is_action_valid=[True], scpo_stats={},
                                timings={}, env_failures=failures, sampling_stats={})
        callback.on_train_batch_end(trainer, module, {"metrics": module.last_metrics, "step_metrics": []}, batch, 0)
        trainer.current_epoch += 1
    (_, first), (_, second) = logged
    assert first["env_failures/worker_died"] == 2 and first["env_failures/worker_timeout"] == 1
    assert first["env_failures/episodes"] == 3 and first["env_failures/workers_restarted"] == 2
    assert second["env_failures/episodes"] == 0  # logged as 0, not missing, in a clean iteration
    assert second["env_failures/total_episodes"] == 3 and second["env_failures/total_worker_died"] == 2
    restored = RLLogger()
    restored.load_state_dict(callback.state_dict())  # totals survive a resume
    assert restored.env_failure_totals == callback.env_failure_totals
    # validation: failures summed over its batches, logged under val/
    callback.on_validation_epoch_start(trainer, module)
    for _ in range(2):
        callback.on_validation_batch_end(trainer, module, None, SimpleNamespace(env_failures={ENV_ERROR: 1.0}), 0)
    callback.on_validation_epoch_end(trainer, module)
    assert logged[-1][1]["val/env_failures/env_error"] == 2 and logged[-1][1]["val/env_failures/episodes"] == 2
