"""The SCPO callback: shape the collected batch's step returns before the update (SPEC §3).

The callback is the run's ``scpo_lightning.shaping.ShapingSource``. ``on_train_batch_start``
plans the batch (references, failed siblings, distinct text pairs) and hands the pairs to the
scorer in a worker thread; the module recomputes old and reference log-probs meanwhile and asks
``result(batch)`` before it computes advantages, so the update waits only if scoring is not
done. What shaping produced is the batch's ``shaping`` (``scpo_lightning.credit.ShapingResult``),
the one thing later stages read. Only the step-level advantage sees G̃ (§3.9).

With ``reference_source: buffer | both`` the callback keeps, per task, the successes of earlier
iterations (``scpo_lightning.reference_buffer``; docs/buffer_and_dynamic_sampling.md): a batch is
planned against the buffer as it stood before it, then its own successes (from every rank) are added.

A scorer that raises or runs past ``scorer_timeout_s`` costs that batch its shaping, not the run: the
batch trains as plain GiGPO (no credit), with a logged warning and the ``scpo/scorer_failures``
counters, unless ``on_scorer_error: fail``.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future, TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

import lightning as L
import numpy as np

from envs.common.rules import FLAG, MAPPING, check, count, number, one_of, optional, positive
from envs.spec import EnvSpec
from scpo_lightning import distributed
from scpo_lightning.batch import RolloutBatch
from scpo_lightning.credit import ShapingResult, apply_plan
from scpo_lightning.datamodule import RolloutDataModule
from scpo_lightning.estimators import check_reads_step_credit
from scpo_lightning.reference_buffer import BufferedReference, SuccessBuffer
from scpo_lightning.scorers import SCORERS, CachedScorer, make_scorer
from scpo_lightning.scorers.factory import check_scorer, run_options
from scpo_lightning.scpo_config import SCPOConfig, reference_kind
from scpo_lightning.shaper import ShapingPlan, plan_shaping
from scpo_lightning.shaping import ShapingSource

log = logging.getLogger(__name__)
ON_SCORER_ERROR = ("skip", "fail")


@dataclass(frozen=True)
class _Started:
    """A batch whose shaping is under way: its plan and the scorer's future."""
    batch: RolloutBatch
    plan: ShapingPlan
    future: Future
    submitted: float  # time.monotonic() at submission: scorer_timeout_s counts from here
    plan_s: float


class SCPOCallback(L.Callback, ShapingSource):
    """Semantic credit for failed siblings (omit this callback for plain GiGPO/GRPO/RLOO runs).

    Args:
        scorer: Step scorer by name: bge (the paper's cross-encoder), minilm (offline default) or lexical.
        scorer_options: Keyword options of the scorer (e.g. model_dir, batch_size, max_length, device).
        cache_entries: Scores kept across iterations, keyed by the text pair (0 disables the cache).
        alpha: Weight α of the credit added to failed siblings' step returns (ALFWorld 0.5, WebShop 1.0).
        theta: Similarity threshold θ in (0, 1).
        lam: Soft base λ in [0, θ).
        tau_succ: Success threshold on a trajectory's total env reward (ALFWorld 0, WebShop 9.0).
        reference: Reference sibling: longest (paper), shortest or random.
        order: Processing order of failed steps: balanced (paper), chronological or random.
        order_partitions: K partitions of the balanced order (4 = the published runs' ranks).
        monotonic: Credit each reference position once (False = the repeated-credit ablation).
        reference_source: Where a group's reference comes from: siblings (the paper: a successful sibling, else no credit), buffer (only a success of the same task from an earlier iteration, even when the group has its own) or both (a successful sibling when there is one, else the buffer).
        buffer_size: Successes kept per task for reference_source buffer/both, the newest (ties of reference: longest go to the newest).
        buffer_max_age: Buffered successes older than this many iterations are dropped (null = kept until newer successes of the task replace them).
        on_scorer_error: What a scorer that raises or times out does: skip (that batch trains without SCPO shaping, as plain GiGPO; warned and counted in scpo/scorer_failures) or fail (stop the run).
        scorer_timeout_s: Seconds one batch's scoring may take, from its start in the background (it overlaps the log-prob recomputation); longer counts as a scorer failure. null = no limit.
        seed: Seed for the random reference/order ablations.
    """

    def __init__(
        self,
        scorer: str = "minilm",
        scorer_options: dict[str, Any] | None = None,
        cache_entries: int = 100_000,
        alpha: float = 0.5,
        theta: float = 0.6,
        lam: float = 0.4,
        tau_succ: float = 0.0,
        reference: str = "longest",
        order: str = "balanced",
        order_partitions: int = 4,
        monotonic: bool = True,
        reference_source: str = "siblings",
        buffer_size: int = 4,
        buffer_max_age: int | None = None,
        on_scorer_error: str = "skip",
        scorer_timeout_s: float | None = 1800.0,
        seed: int = 0,
    ):
        check("SCPOCallback", SCPOCallback, locals(), {  # its own values; SCPOConfig checks the shaping ones next
            "scorer_options": MAPPING, "cache_entries": count(0), "tau_succ": number(finite=True),
            "monotonic": FLAG, "on_scorer_error": one_of(*ON_SCORER_ERROR), "scorer_timeout_s": optional(positive()),
            "seed": count(0), "buffer_size": count(1), "buffer_max_age": optional(count(1)),
        })
        if buffer_max_age is not None and reference_source == "siblings":
            raise ValueError(f"SCPOCallback.buffer_max_age={buffer_max_age} applies to the success buffer, which "
                             "reference_source: siblings does not keep; set reference_source: both (or buffer), or remove it")
        try:
            self.config = SCPOConfig(alpha=alpha, theta=theta, lam=lam, tau_succ=tau_succ, reference=reference,
                                     order=order, order_partitions=order_partitions, monotonic=monotonic,
                                     reference_source=reference_source)
        except ValueError as exc:  # its message starts with the field name
            raise ValueError(f"SCPOCallback.{exc}") from None
        self.scorer_name, self.scorer_options = scorer, dict(scorer_options or {})
        # After the values: a dry run (train.py --dry_run) lists a missing scorer and goes on.
        if scorer not in SCORERS:
            raise ValueError(f"SCPOCallback.scorer={scorer!r}: choose one of {sorted(SCORERS)}")
        check_scorer(scorer, self.scorer_options, self.run_scorer_options(), field="SCPOCallback.scorer_options")
        self.cache_entries = cache_entries
        self.on_scorer_error, self.scorer_timeout_s = on_scorer_error, scorer_timeout_s
        self.rng = np.random.default_rng(seed)
        self.scorer: CachedScorer | None = None
        self.scorer_failures = 0
        self.buffer = SuccessBuffer(buffer_size, buffer_max_age) if reference_source != "siblings" else None
        self._epoch = 0  # the buffer's clock: the trainer's epoch, set as each one starts
        self._started: _Started | None = None

    def check_module(self, pl_module: L.LightningModule) -> None:
        """Start-up check against the module (also run by ``--dry_run``): its estimator reads the credit."""
        check_reads_step_credit(pl_module.estimator)

    def check_data(self, spec: EnvSpec | None) -> None:
        """Start-up check against the env's spec (also run by ``--dry_run``): the scorer's values as
        set-up builds it for this env (MiniLM: the env's calibration), tau_succ within its episode
        rewards (None: replayed batches of no declared env, nothing to check)."""
        tau = self.config.tau_succ
        if spec is not None:
            check_scorer(self.scorer_name, self.scorer_options, self.run_scorer_options(spec),
                         field="SCPOCallback.scorer_options")
        if spec is None or spec.reward_range[0] <= tau < spec.reward_range[1]:
            return
        low, high = spec.reward_range
        raise ValueError(f"SCPOCallback.tau_succ={tau} is outside data.env={spec.name!r}'s episode rewards [{low}, {high}]: "
                         f"an episode succeeds when its reward exceeds tau_succ, so {'none' if tau >= high else 'every one'} "
                         f"would and SCPO would never act; set it in [{low}, {high}) (ALFWorld 0, WebShop 9.0)")

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self.check_module(pl_module)  # before the scorer and the model load
        data = trainer.datamodule if trainer is not None else None  # None: shaping outside a Trainer
        spec = data.spec if isinstance(data, RolloutDataModule) else None
        self.check_data(spec)
        if self.scorer is None:
            options = self.run_scorer_options(spec)
            self.scorer = CachedScorer(make_scorer(self.scorer_name, **options), cache_entries=self.cache_entries)

    def run_scorer_options(self, spec: EnvSpec | None = None) -> dict[str, Any]:
        """``scorer_options`` as this run builds the scorer, for the trained env's ``spec``
        (``scpo_lightning.scorers.factory.run_options``: MiniLM's calibration follows θ and the env)."""
        return run_options(self.scorer_name, self.scorer_options, self.config.theta, spec,
                           field="SCPOCallback.scorer_options")

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.scorer is not None:
            # Every batch waited for its own scores; whatever is left no one needs, and a hung call
            # must not block the end of the run (it stays behind in its daemon thread).
            self.scorer.close(timeout=0)
            self.scorer = None

    @staticmethod
    def group_tasks(batch: RolloutBatch) -> dict[int, str]:
        """Group id -> task id (ALFWorld game, WebShop goal): the buffer's key."""
        return {t["group"]: t["task_id"] for t in batch.trajectories if t["task_id"]}

    def buffered_references(self, batch: RolloutBatch, iteration: int) -> dict[int, list[BufferedReference]] | None:
        """Per group, the stored successes of its task that iteration ``iteration`` may use."""
        if self.buffer is None:
            return None
        return {g: self.buffer.candidates(task, iteration) for g, task in self.group_tasks(batch).items()}

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch = trainer.current_epoch  # before the epoch's batch is collected (dynamic sampling reads it)

    def creditable_groups(self, batch: RolloutBatch) -> set[int]:
        """Groups whose failed siblings this callback will match against a reference (a sibling or a
        buffered success), before any scoring: what dynamic sampling keeps although their episode
        scores do not vary (data.dynamic_sampling; the same rule as ``plan_shaping``'s)."""
        buffered = self.buffered_references(batch, self._epoch) or {}
        trajs, first = np.unique(np.asarray(batch.traj_ids, dtype=np.int64), return_index=True)  # those with rows
        won: dict[int, list[bool]] = {}
        for traj, ret in zip(trajs.tolist(), batch.traj_returns[first]):
            won.setdefault(batch.trajectories[traj]["group"], []).append(bool(ret > self.config.tau_succ))
        return {g for g, wins in won.items()
                if not all(wins) and reference_kind(any(wins), bool(buffered.get(g)), self.config.reference_source)}

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: RolloutBatch, batch_idx: int) -> None:
        t0 = time.perf_counter()
        iteration = self._epoch
        plan = plan_shaping(
            group_ids=batch.group_ids, traj_ids=batch.traj_ids, steps=batch.steps, traj_returns=batch.traj_returns,
            actions=batch.actions, observations=batch.observations, is_action_valid=batch.is_action_valid,
            noop=batch.noop, lengths=batch.lengths, config=self.config, rng=self.rng,
            buffered=self.buffered_references(batch, iteration),
        )
        if self.buffer is not None:
            self._remember(plan, self.group_tasks(batch), iteration)
        future = self.scorer.submit(plan.pairs)
        self._started = _Started(batch, plan, future, time.monotonic(), time.perf_counter() - t0)

    def result(self, batch: RolloutBatch) -> ShapingResult:
        """``batch``'s shaping: waits for its scores (at most scorer_timeout_s from their start)."""
        started, self._started = self._started, None
        if started is None or started.batch is not batch:
            raise RuntimeError("SCPOCallback.result: no shaping was started for this batch (on_train_batch_start)")
        t1 = time.perf_counter()
        future = started.future
        wait = None if self.scorer_timeout_s is None else \
            max(0.0, started.submitted + self.scorer_timeout_s - time.monotonic())
        try:
            scored = future.result(timeout=wait)
        except Exception as exc:  # noqa: BLE001 - any scorer error: counted, then skipped or raised as configured
            if isinstance(exc, FutureTimeout) and not future.done():  # our wait ran out, not the scorer
                future.cancel()  # if still queued behind an earlier hung call; a running one cannot stop
                reason = f"no scores within SCPOCallback.scorer_timeout_s={self.scorer_timeout_s} s"
            else:
                reason = f"{type(exc).__name__}: {exc}"
            return self._failed(reason, exc)
        return apply_plan(started.plan, scored.scores, self.config, batch.step_returns).with_stats(
            shaped=1.0, scorer_failures=0.0, scorer_failures_total=float(self.scorer_failures),
            pairs_scored=float(scored.stats.scored), cache_hits=float(scored.stats.cache_hits),
            scorer_s=scored.stats.seconds, plan_s=started.plan_s, wait_s=time.perf_counter() - t1,
        )

    def _remember(self, plan: ShapingPlan, tasks: dict[int, str], iteration: int) -> None:
        """Add the batch's successes of every rank to the buffer (collective), after planning: a
        batch never uses its own successes through the buffer."""
        mine = [(tasks[g], texts, length) for g, texts, length in plan.successes if g in tasks]
        added: dict[str, list[BufferedReference]] = {}
        for part in distributed.gather_objects(mine):  # rank order: the same buffer on every rank
            for task, texts, length in part:
                added.setdefault(task, []).append(BufferedReference(texts, length, iteration))
        for task, refs in added.items():
            self.buffer.add(task, refs)
        self.buffer.prune(iteration + 1)  # what the next iteration cannot use any more
        lookups = plan.stats["buffer_lookups"]
        plan.stats.update({"buffer_size": float(len(self.buffer)), "buffer_tasks": float(self.buffer.tasks),
                           "buffer_hit_rate": plan.stats["groups_with_buffer_reference"] / lookups if lookups else 0.0})

    def _failed(self, reason: str, exc: BaseException | None = None) -> ShapingResult:
        """One batch's scoring failed: stop the run, or count it and train the batch unshaped."""
        self.scorer_failures += 1
        message = f"SCPO scorer {self.scorer_name!r} failed on this batch ({reason})"
        if self.on_scorer_error == "fail":
            raise RuntimeError(f"{message}; set SCPOCallback.on_scorer_error: skip to train such batches as "
                               "plain GiGPO instead") from exc
        log.warning("%s; the batch trains without SCPO shaping (plain GiGPO). Scorer failures so far: %d",
                    message, self.scorer_failures)
        stats = {"shaped": 0.0, "scorer_failures": 1.0, "scorer_failures_total": float(self.scorer_failures)}
        return ShapingResult(credit=None, shaped_returns=None, stats=stats, theta=self.config.theta)

    def state_dict(self) -> dict[str, Any]:
        state = {"rng": self.rng.bit_generator.state, "scorer_failures": self.scorer_failures}
        if self.buffer is not None:
            state["buffer"] = self.buffer.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state_dict["rng"]
        self.scorer_failures = state_dict["scorer_failures"]
        if self.buffer is not None:  # a checkpoint of a run without the buffer: it starts empty
            self.buffer.load_state_dict(state_dict.get("buffer", {}))
