"""rollout.exclude_actions: which admissible actions a constrained-mode policy is offered."""

from __future__ import annotations

import pytest

from scpo_lightning.rollout import RolloutConfig, offered_actions

ADMISSIBLE = ["go to cabinet 1", "examine cabinet 1", "examine", "look", "lookout post", "inventory",
              "take cup 1 from cabinet 1", "close cabinet 1"]


def test_exclusion_removes_whole_commands_only():
    kept = offered_actions(ADMISSIBLE, ("look", "inventory", "examine", "close"))
    # "examine" removes "examine" and "examine cabinet 1"; "look" does not remove "lookout post".
    assert kept == ["go to cabinet 1", "lookout post", "take cup 1 from cabinet 1"]
    assert offered_actions(ADMISSIBLE, ()) == ADMISSIBLE


def test_excluding_every_action_is_a_named_error():
    with pytest.raises(ValueError, match=r"rollout\.exclude_actions=\['look'\] removes every admissible action"):
        offered_actions(["look"], ("look",))


def test_exclusion_needs_constrained_mode():
    with pytest.raises(ValueError, match=r"rollout\.exclude_actions only applies to action_mode: constrained"):
        RolloutConfig(action_mode="free", exclude_actions=("look",))
    assert RolloutConfig(action_mode="constrained", exclude_actions=("look",)).exclude_actions == ("look",)


def _tiny_rooms(**kw):
    from scpo_lightning.datamodule import RolloutDataModule

    options = {"source": "generated", "size": "tiny", "families": ["pick_and_place_simple", "look_at_obj_in_light"]}
    return RolloutDataModule(env="alfworld", env_options=options, workers=0, **kw)


def test_a_list_of_validation_splits_is_played_as_their_concatenation():
    data = _tiny_rooms(val_split=["valid_seen", "valid_unseen"], val_episodes=60, val_start_index=30)
    seen = data.env.split_size("valid_seen")  # 48 games of the two families
    tasks = data.val_tasks()
    assert len(tasks) == 60 and len(set(tasks)) == 60
    assert tasks[: seen - 30] == [("valid_seen", i) for i in range(30, seen)]
    assert tasks[seen - 30 :] == [("valid_unseen", i) for i in range(60 - (seen - 30))]
    with pytest.raises(ValueError, match=r"data\.val_split=\['valid_seen', 'valid_unseen'\] holds \d+ tasks"):
        _tiny_rooms(val_split=["valid_seen", "valid_unseen"], val_episodes=1000)
    with pytest.raises(ValueError, match=r"data\.val_split must be a split name or a non-empty list"):
        _tiny_rooms(val_split=[])


def test_a_training_pool_draws_only_its_first_tasks_so_they_recur():
    # 6 draws of 2 groups from a pool of 3: only tasks 0-2, so some task must come back (pigeonhole),
    # which is what a success-reference buffer needs; without the pool the same draws never repeat.
    pooled = _tiny_rooms(groups_per_batch=2, train_tasks=3, val_episodes=8)
    whole = _tiny_rooms(groups_per_batch=2, val_episodes=8)
    drawn = [task for _ in range(3) for task in pooled._sample_tasks()]
    assert {i for _, i in drawn} <= {0, 1, 2} and len(set(drawn)) < len(drawn)
    assert len({task for _ in range(3) for task in whole._sample_tasks()}) == 6


def test_the_training_split_is_listed_once_not_every_iteration(monkeypatch):
    # On the real ALFWorld dataset listing a split reads every game file; the draws only need its size.
    import dataclasses

    data, listed = _tiny_rooms(groups_per_batch=2, val_episodes=8), []
    real = data.env.spec.split_size
    spec = dataclasses.replace(data.env.spec, split_size=lambda *args: listed.append(args[1:]) or real(*args))
    monkeypatch.setattr(data, "env", dataclasses.replace(data.env, spec=spec))
    drawn = [data._sample_tasks() for _ in range(3)]
    assert listed == [("train",)]
    assert all(0 <= i < real(data.env.settings, "train") for tasks in drawn for _, i in tasks)


def test_validation_autocast_applies_to_validation_collections_only(tmp_path):
    from scpo_lightning.module import SCPOModule
    from scpo_lightning.testing import build_tiny_llama

    module = SCPOModule(policy=str(build_tiny_llama(tmp_path / "tiny")), kl_coef=0.0,
                        val_generation_autocast="bfloat16")
    module.configure_model()
    assert module.engine.autocast_dtype is None
    with module.generation_context():
        assert module.engine.autocast_dtype is None  # training rollouts: the policy's own dtype
    with module.generation_context(validation=True):
        assert module.engine.autocast_dtype == "bfloat16"
    with pytest.raises(RuntimeError), module.generation_context(validation=True):
        raise RuntimeError("a failed validation rollout")
    assert module.engine.autocast_dtype is None  # restored, also after a failure


def test_each_step_of_a_rollout_samples_with_a_seed_of_its_own():
    """The engines reseed from ``params.seed`` on every call: one seed for all steps would replay
    the same random draws at every step (each row acting at fixed quantiles of its distribution)."""
    from envs.toy import ACTIONS, CorridorEnv
    from envs.registry import SequentialPool
    from scpo_lightning.engines.base import Generation, RolloutEngine, SamplingParams
    from scpo_lightning.rollout import collect

    class Recording(RolloutEngine):
        def __init__(self):
            self.seeds = []

        def generate(self, prompts, params, allowed=None):
            self.seeds.append(params.seed)
            return [Generation([7], f"<action>{ACTIONS[0]}</action>", True) for _ in prompts]

    class Tokenizer:
        def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
            return [1, 2, 3]

    def run(seed):
        engine = Recording()
        collect(SequentialPool(CorridorEnv, 2), engine, Tokenizer(), [("train", 0)], 2, SamplingParams(seed=seed),
                RolloutConfig(env="alfworld", max_steps=5), progress=False)
        return engine.seeds

    seeds = run(11)
    assert len(seeds) == 5 and len(set(seeds)) == 5 and 11 not in seeds
    assert run(11) == seeds and set(run(12)).isdisjoint(seeds)  # reproducible, and per call seed
    assert all(0 <= s < 2**63 for s in seeds)
    assert SamplingParams(seed=None).at_step(3).seed is None  # the engine's running generator
    assert SamplingParams(seed=11).at_step(2) == SamplingParams(seed=11).at_step(2)
