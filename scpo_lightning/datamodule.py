"""The rollout DataModule: each training batch is one iteration's freshly collected rollouts.

The train dataloader yields one ``RolloutBatch`` per epoch (one epoch = one RL iteration), made by
the module's engine with its current weights; the val dataloader yields validation rollouts on
the held-out split at the validation temperature.

Data parallel (several ranks): every rank draws the same ``groups_per_batch`` tasks from the
same seeded sampler and collects its contiguous share of them, whole groups only, so group
statistics, GiGPO and SCPO stay rank-local; the iteration's tasks are those of a one-device run
with the same seed, and the sampler state (the resume state) is the same on every rank.
Validation episodes are cut into one contiguous block per rank: no duplicates, no gaps.

With ``dynamic_sampling`` the training batch keeps only groups whose episode scores vary (and
those SCPO will credit; scpo_lightning.dynamic_sampling), topping up from further draws; the
ranks agree on every retry, and the counts in ``batch.sampling_stats`` cover all ranks.

``setup`` takes, once, what it collects with: the module's ``PolicySource`` and, for dynamic
sampling, the trainer's ``ShapingSource`` (scpo_lightning/shaping.py).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import lightning as L
import numpy as np
from torch.utils.data import DataLoader, IterableDataset

from envs.common.packages import check_all, require
from envs.registry import env_spec, make_pool, resolve_env
from scpo_lightning import distributed
from scpo_lightning.batch import RolloutBatch
from scpo_lightning.datamodule_rules import check_datamodule
from scpo_lightning.distributed import shard_bounds
from scpo_lightning.dynamic_sampling import COUNTS, DynamicSampling, informative_batch
from scpo_lightning.rollout import PolicySource, RolloutConfig, RolloutPolicy, collect
from scpo_lightning.shaping import ShapingSource, shaping_source


def check_worker_backend(backend: str, address: str | None, workers: int) -> None:
    """data.worker_backend / data.ray_address together: fail at start-up, naming the field, not in setup."""
    if backend == "process" and address is not None:
        raise ValueError(f"data.ray_address={address!r} is set but data.worker_backend is 'process'; "
                         "set data.worker_backend: ray or remove data.ray_address")
    if backend == "ray" and workers < 1:
        raise ValueError("data.worker_backend: ray needs data.workers >= 1 (0 steps all envs in this process)")


class _Rollouts(IterableDataset):
    """Iterating collects rollouts now, with the policy as it is now."""

    def __init__(self, dm: RolloutDataModule, stage: str):
        self.dm, self.stage = dm, stage

    def __iter__(self):
        yield from self.dm.rollout_batches(self.stage)


class RolloutDataModule(L.LightningDataModule):
    """Environments, task sampling and the rollout loop.

    Args:
        env: Environment name: alfworld, webshop or corridor (a tiny test world); envs/registry.py lists them.
        env_options: Keyword options of the environment (e.g. data paths, room size, reward_mode); its step limit comes from rollout.max_steps.
        train_split: Split that training tasks are drawn from.
        train_tasks: Draw training tasks from the split's first this many only (null: the whole split); a small pool makes tasks recur across iterations, as a success-reference buffer needs (docs/buffer_and_dynamic_sampling.md).
        val_split: Held-out split for validation (ALFWorld valid_seen), or a list of splits played as one (e.g. [valid_seen, valid_unseen]: validation episode k is task k of their concatenation, from val_start_index).
        val_start_index: First task index of the validation split used.
        groups_per_batch: Tasks per iteration over all ranks (16 in the paper recipes); a multiple of the number of ranks, each collecting its share.
        group_size: Rollouts per task, n (8 in the paper recipes); must be >= 2.
        val_episodes: Validation episodes per validation run over all ranks (128 in the paper; WebShop 256).
        val_batch_episodes: Validation episodes collected per validation batch (per rank).
        rollout: The rollout loop settings (prompting, projection, returns).
        workers: Env worker processes per rank (0 = step all envs in this process, for debugging).
        worker_backend: Where the env workers run: process (local processes) or ray (Ray actors, also on other nodes of a Ray cluster; needs the ray extra).
        ray_address: worker_backend ray only: None starts a local Ray runtime; auto joins the cluster started with `ray start` on this node; ray://host:port joins through Ray Client.
        step_timeout_s: A worker that takes longer for one step call is killed and replaced; its episodes end with a recorded reason.
        reset_timeout_s: The same limit for loading new games at reset.
        seed: Seed of the task sampler and of generation.
        progress: Show rich progress bars for rollout steps.
        dynamic_sampling: Drop groups whose episode scores do not vary from the update, optionally topping up with more groups (DAPO's dynamic sampling; docs/buffer_and_dynamic_sampling.md); null = every collected group trains (the paper).
    """

    def __init__(
        self,
        env: str = "alfworld",
        env_options: dict[str, Any] | None = None,
        train_split: str = "train",
        train_tasks: int | None = None,
        val_split: str | list[str] = "valid_seen",
        val_start_index: int = 0,
        groups_per_batch: int = 16,
        group_size: int = 8,
        val_episodes: int = 128,
        val_batch_episodes: int = 32,
        rollout: RolloutConfig | None = None,
        workers: int = 2,
        worker_backend: str = "process",
        ray_address: str | None = None,
        step_timeout_s: float = 120.0,
        reset_timeout_s: float = 900.0,
        seed: int = 0,
        progress: bool = True,
        dynamic_sampling: DynamicSampling | None = None,
    ):
        super().__init__()
        check_datamodule(RolloutDataModule, locals())  # every value, before anything loads (datamodule_rules.py)
        check_worker_backend(worker_backend, ray_address, workers)
        self.spec = env_spec(env)
        self.rollout = dataclasses.replace(rollout or RolloutConfig(), env=self.spec.prompt.name)
        # One horizon: the env's own step limit is data.rollout.max_steps (check_datamodule refused a
        # contradicting data.env_options value).
        env_options = dict(env_options or {})
        if self.spec.step_limit is not None:
            env_options[self.spec.step_limit] = self.rollout.max_steps
        # The env's own options, then the splits this run plays (a missing dataset: listed by --dry_run),
        # and Ray's package: everything this machine lacks is raised together (packages.check_all).
        def env_checks() -> None:
            self.env = resolve_env(env, env_options)
            self.env.check_splits(train_split, val_split, val_start_index + val_episodes if val_episodes else 0)

        check_all(env_checks, lambda: worker_backend != "ray" or require("data.worker_backend=ray", "ray",
                                                                          "pip install -e '.[ray]'"))
        self.groups_per_batch, self.group_size = groups_per_batch, group_size
        self.train_split, self.val_start_index = train_split, val_start_index
        self.train_tasks = train_tasks
        size = self.env.split_size(train_split) if train_tasks is not None else None
        if size is not None and train_tasks > size:
            raise ValueError(f"data.train_tasks={train_tasks} but split {train_split!r} has {size} tasks; "
                             f"set data.train_tasks to at most {size}, or null for the whole split")
        self.val_splits = [val_split] if isinstance(val_split, str) else list(val_split)
        self._val_sizes: list[int] | None = None
        self.val_episodes, self.val_batch_episodes = val_episodes, val_batch_episodes
        self.workers, self.seed, self.progress = workers, seed, progress
        self.dynamic_sampling = dynamic_sampling
        self.worker_backend, self.ray_address = worker_backend, ray_address
        self.step_timeout_s, self.reset_timeout_s = step_timeout_s, reset_timeout_s
        self.rng = np.random.default_rng(seed)
        self.iteration = 0
        self.pool: Any = None
        self.rank, self.world_size = 0, 1
        self.policy: PolicySource | None = None  # from setup; None outside a Trainer (nothing collects)
        self.shaping: ShapingSource | None = None

    def setup(self, stage: str) -> None:
        if self.trainer is not None:
            trainer = self.trainer
            self.rank, self.world_size = trainer.global_rank, trainer.world_size
            self.policy, self.shaping = trainer.lightning_module, shaping_source(trainer.callbacks)
        self.check_world_size(self.world_size)
        if self.pool is None:
            val_share = math.ceil(self.val_episodes / self.world_size)
            size = max(self.groups_per_batch // self.world_size * self.group_size, min(self.val_batch_episodes, val_share))
            self.pool = make_pool(self.env.factory(), size, workers=self.workers, backend=self.worker_backend,
                                  step_timeout_s=self.step_timeout_s, reset_timeout_s=self.reset_timeout_s,
                                  address=self.ray_address)
            self._check_first_prompts()

    def _check_first_prompts(self) -> None:
        """A first prompt over rollout.max_prompt_tokens fails here, before any model loads.

        Lightning runs ``setup`` before ``configure_model``: the tokenizer alone (no weights) counts
        the step-0 prompt of the first training and validation task. Later prompts grow with
        history and are checked as they are built, with the same message.
        """
        if self.policy is None or self.rollout.truncation != "error":
            return
        from scpo_lightning.prompts import build_prompt
        from scpo_lightning.rollout import offered_actions, tokenize_prompt

        tokenizer = self.policy.prompt_tokenizer()
        for task in ((self.train_split, 0), self._val_task(self.val_start_index)):
            first = self.pool.reset([task], 1).results[0]
            if first is not None:
                actions = offered_actions(first.admissible, self.rollout.exclude_actions)
                text = build_prompt(self.spec.prompt, first.task, first.observation, actions, [], 0,
                                    self.rollout.history_length)
                tokenize_prompt(tokenizer, text, self.rollout)

    def check_world_size(self, world_size: int) -> None:
        if self.groups_per_batch % world_size:
            raise ValueError(f"data.groups_per_batch={self.groups_per_batch} must be a multiple of the number of "
                             f"ranks ({world_size}: trainer.devices x trainer.num_nodes) so that every rank "
                             "collects whole groups of the same count")

    def teardown(self, stage: str) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None

    @functools.cached_property
    def _train_size(self) -> int | None:
        """Tasks training draws from (None: any index); listing a real split reads every game file: once."""
        return self.train_tasks if self.train_tasks is not None else self.env.split_size(self.train_split)

    def _sample_tasks(self) -> list[tuple[str, int]]:
        """This rank's groups of the iteration: its share of the draw every rank makes alike."""
        size = self._train_size
        high = size if size is not None else 2**31 - 1
        replace = size is not None and size < self.groups_per_batch
        drawn = self.rng.choice(high, self.groups_per_batch, replace=replace)
        start, stop = shard_bounds(self.groups_per_batch, self.world_size, self.rank)
        return [(self.train_split, int(i)) for i in drawn[start:stop]]

    def val_tasks(self) -> list[tuple[str, int]]:
        """This rank's contiguous block of the validation episodes."""
        start, stop = shard_bounds(self.val_episodes, self.world_size, self.rank)
        return [self._val_task(self.val_start_index + i) for i in range(start, stop)]

    def _val_task(self, index: int) -> tuple[str, int]:
        """Task ``index`` of the validation splits' concatenation (start-up checked that it exists)."""
        if self._val_sizes is None:  # listing a real split reads every game file: once
            self._val_sizes = [self.env.split_size(split) for split in self.val_splits[:-1]]
        for split, size in zip(self.val_splits, self._val_sizes):
            if index < size:
                return split, index
            index -= size
        return self.val_splits[-1], index

    def rollout_batches(self, stage: str):
        policy = self.policy.rollout_policy()
        # Each rank samples its own responses; a per-rank offset keeps them independent.
        seed = self.seed + 1_000_003 * self.rank
        if stage == "train":
            batch = self._collect_train(policy, seed, 0, True)
            if self.dynamic_sampling is not None:
                batch = self._informative(policy, seed, batch)
            self.iteration += 1
            yield batch
            return
        params = policy.sampling.params(validation=True, seed=seed)
        tasks = self.val_tasks()
        # Entering the generation context is collective, so every rank enters it equally often:
        # its block is cut into as many batches as the largest block needs (an empty one, only at
        # the end of a block one episode short, is entered but not collected).
        batches = math.ceil(math.ceil(self.val_episodes / self.world_size) / self.val_batch_episodes)
        for b in range(batches):
            start, stop = shard_bounds(len(tasks), batches, b)
            with policy.context(True):
                batch = collect(self.pool, policy.engine, policy.tokenizer, tasks[start:stop], 1, params,
                                self.rollout, self.progress, f"validation {start}/{len(tasks)}") if stop > start else None
            if batch is not None:
                yield batch

    def _collect_train(self, policy: RolloutPolicy, seed: int, retry: int, needed: bool) -> RolloutBatch | None:
        """One draw of training tasks, collected (every rank draws and enters the generation
        context; a rank that needs no more groups collects nothing). Retry k of an iteration
        samples with a seed of its own."""
        base = seed + self.iteration
        params = policy.sampling.params(validation=False, seed=base if retry == 0 else
                                        int(np.random.SeedSequence([base, retry]).generate_state(1)[0]))
        tasks = self._sample_tasks()
        label = f"rollout it {self.iteration}" + (f" top-up {retry}" if retry else "")
        with policy.context(False):
            if not needed:
                return None
            return collect(self.pool, policy.engine, policy.tokenizer, tasks, self.group_size, params, self.rollout,
                           self.progress, label)

    def _informative(self, policy: RolloutPolicy, seed: int, first: RolloutBatch) -> RolloutBatch:
        """Dynamic sampling: this rank's informative groups; the counts of all ranks on the batch."""
        creditable = self.shaping.creditable_groups if self.shaping is not None else lambda batch: set()

        def any_rank(flag: bool) -> bool:
            return distributed.all_reduce([float(flag)], "max", policy.device)[0] > 0

        batch, counts = informative_batch(first, lambda retry, needed: self._collect_train(policy, seed, retry, needed),
                                          self.groups_per_batch // self.world_size, self.dynamic_sampling, creditable,
                                          any_rank)
        total = dict(zip(COUNTS, distributed.all_reduce([counts[k] for k in COUNTS], "sum", policy.device)))
        total["retries"] = counts["retries"]  # the same on every rank
        trajectories = total.pop("trajectories_collected")
        total["collected_success"] = total.pop("successes_collected") / trajectories if trajectories else 0.0
        batch.sampling_stats = total
        return batch

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_Rollouts(self, "train"), batch_size=None, collate_fn=lambda b: b)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(_Rollouts(self, "val"), batch_size=None, collate_fn=lambda b: b)

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "iteration": self.iteration}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.iteration = state["iteration"]
