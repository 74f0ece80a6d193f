"""The LightningModule: the policy, its frozen reference, and the PPO update on rollout rows (SPEC §4).

One training "epoch" is one RL iteration: the DataModule yields one collected batch, the SCPO
callback shapes its step returns, and ``training_step`` computes advantages, recomputes old and
reference log-probs, and runs one PPO epoch of sequential mini-batches (one optimizer step each,
gradient accumulation over micro-batches) with manual optimisation. Old and reference log-probs
are computed micro-batch by micro-batch in exactly the grouping the update uses, so before the
first optimizer step the ratio is exactly 1 (docs/numerics.md).
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
import warnings
from collections.abc import Iterator
from typing import Any

import lightning as L
import numpy as np
import torch
import torchmetrics
from torch.distributed.tensor import DTensor

from scpo_lightning import distributed
from scpo_lightning.batch import RolloutBatch
from scpo_lightning.config_checks import check_module
from scpo_lightning.distributed import Plan
from scpo_lightning.engines.factory import make_engine
from scpo_lightning.engines.hf import HFEngine
from scpo_lightning.estimators import estimator_class
from scpo_lightning.logprobs import response_logprobs
from scpo_lightning.losses import RolloutCorrection, policy_loss, rollout_correction
from scpo_lightning.model_setup import bf16_compute, data_parallel_mesh, with_lora
from scpo_lightning.policy import check_model_source
from scpo_lightning.precision import prepare_weights
from scpo_lightning.sharding import gathered, is_sharded, shard
from scpo_lightning.update_metrics import iteration_metrics, mismatch_metrics

#: The loss terms logged as train/<name> (fields of losses.policy_loss's result).
LOSS_PARTS = ("loss", "pg_loss", "entropy", "kl", "clip_frac", "approx_kl_old", "kept_frac")

# The frozen reference model is in eval mode on purpose; Lightning warns about any such module.
warnings.filterwarnings("ignore", message=r".*module\(s\) in eval mode at the start of training.*")
# Validation creates a metric per task family up front; a family without episodes computes NaN, left out.
warnings.filterwarnings("ignore", message=r".*MeanMetric was called before the ``update`` method.*")


class SCPOModule(L.LightningModule):
    """Policy optimisation with GiGPO/GRPO/RLOO advantages (SCPO shaping arrives via the callback).

    Args:
        policy: HF causal-LM directory or hub-style path, or "smollm2-gguf" for the offline SmolLM2-135M-Instruct.
        torch_dtype: Parameter dtype of the policy: float32, bfloat16 or float16.
        estimator: Advantage estimator: gigpo (SPEC §2), grpo, rloo, or the import path (package.module.Class) of an Estimator subclass of your own (scpo_lightning/estimators.py).
        norm_mode: Group normalisation: mean_std_norm (ALFWorld recipe) or mean_norm (WebShop recipe).
        omega: Weight ω of the step-level advantage in A = A_E + ω A_S (grpo/rloo: of the SCPO credit term).
        lr: AdamW learning rate (constant).
        weight_decay: AdamW weight decay.
        betas: AdamW betas.
        grad_clip: Gradient-norm clip; a step whose loss or gradient norm is not finite is skipped and counted.
        clip_eps: PPO clip ε (both sides).
        dual_clip: Dual-clip constant c for negative advantages.
        entropy_coef: Entropy bonus coefficient.
        kl_coef: Coefficient of the k3 KL to the frozen initial policy in the loss (0 disables the reference model).
        kl_clamp: Clamp of the per-token k3 estimate.
        mini_batch_rows: Rows per PPO mini-batch (one optimizer step each): ALFWorld 256, WebShop 64.
        micro_batch_rows: Rows per forward/backward pass (gradient accumulation inside a mini-batch).
        temperature: Rollout temperature; logits are divided by it when log-probs are recomputed.
        generation_batch_size: Prompts per generate call of the HF engine.
        generation_autocast: Run generation under torch.autocast with this dtype (e.g. bfloat16: ~3.5x faster prompt processing on CPUs with AMX/AVX512-BF16); null = the weights' dtype.
        val_generation_autocast: The same for validation rollouts only (HF engine), which never enter a loss: bfloat16 makes held-out evaluation ~2.5x faster on CPU, faithful where updates are far larger than bf16 rounding (LoRA at lr 1e-4, not full fine-tuning at 1e-6: docs/numerics.md); null = as generation_autocast.
        engine: Rollout engine: hf (HF generate on the policy itself) or vllm (vLLM in this process, weights synced after every update; docs/vllm.md).
        engine_options: Keyword arguments of the engine (scpo_lightning.engines.vllm.VLLMEngine for vllm, e.g. gpu_memory_utilization; for hf they override generation_batch_size/generation_autocast).
        gradient_checkpointing: Recompute activations in the backward pass to save memory.
        reference_offload: Keep the frozen reference's shards in CPU memory and copy each layer to the GPU for its one forward per iteration (FSDP2 CPUOffloadPolicy; needs trainer.strategy ModelParallelStrategy; on CPU it changes nothing).
        lora_rank: LoRA rank for parameter-efficient training (0 = full fine-tuning; needs the lora extra).
        cache_dir: Where converted models are cached (default: ~/.cache/scpo_lightning).
        bf16_grid: auto (round fp32 weights onto the bf16 grid once at load when bf16 compute is configured: trainer.precision bf16-*, generation_autocast bfloat16 or a bf16 vLLM copy, so that an update moves the bf16 model by what it accumulated, not by flipping tied weights), snap (always) or keep (never; warns on tied weights). docs/numerics.md.
        old_logprobs: recompute (the trainer recomputes π_old, SPEC §4) or rollout (use the engine's own log-probs of π as π_old, one forward pass fewer; only where rollout/logprob_diff_* is measured small).
        rollout_correction: Correction for rollout-vs-train log-prob mismatch: mode none (the published recipe), tis (truncated importance sampling, weight min(ρ, cap)) or mask (drop tokens with ρ outside [1/cap, cap]); ρ = π_old / π_rollout per token (scpo_lightning.losses.rollout_correction).
        trust_remote_code: Run Python code shipped inside the policy's model folder (its config's auto_map) when loading it; off unless set, since that code runs with this process's rights.
    """

    def __init__(
        self,
        policy: str = "smollm2-gguf",
        torch_dtype: str = "float32",
        estimator: str = "gigpo",
        norm_mode: str = "mean_std_norm",
        omega: float = 1.0,
        lr: float = 1e-6,
        weight_decay: float = 0.01,
        betas: tuple[float, float] = (0.9, 0.999),
        grad_clip: float = 1.0,
        clip_eps: float = 0.2,
        dual_clip: float = 3.0,
        entropy_coef: float = 0.001,
        kl_coef: float = 0.01,
        kl_clamp: float = 10.0,
        mini_batch_rows: int = 256,
        micro_batch_rows: int = 8,
        temperature: float = 1.0,
        generation_batch_size: int = 64,
        generation_autocast: str | None = None,
        val_generation_autocast: str | None = None,
        engine: str = "hf",
        engine_options: dict[str, Any] | None = None,
        gradient_checkpointing: bool = False,
        reference_offload: bool = False,
        lora_rank: int = 0,
        cache_dir: str | None = None,
        bf16_grid: str = "auto",
        old_logprobs: str = "recompute",
        rollout_correction: RolloutCorrection | None = None,
        trust_remote_code: bool = False,
    ):
        super().__init__()
        check_module(locals())  # every value, before anything loads (scpo_lightning/config_checks.py)
        try:
            check_model_source(policy)  # fail before anything loads
        except (FileNotFoundError, ImportError) as exc:
            raise type(exc)(f"model.policy: {exc}") from None
        self.save_hyperparameters()
        self.estimator = estimator_class(estimator)()
        self.automatic_optimization = False
        self.policy: torch.nn.Module | None = None
        # The frozen reference is the initial policy, not training state: it is held outside the
        # module tree, so it is in no state dict and no checkpoint (half the size, and a sharded
        # checkpoint's keys match the sharded policy exactly), and the strategy never wraps it.
        self._reference: tuple[torch.nn.Module, ...] = ()
        self.tokenizer: Any = None
        self.engine: Any = None
        self.correction = rollout_correction or RolloutCorrection()
        self.skipped_steps = 0
        self.update_steps = 0  # optimizer steps attempted since the run began: the x axis of train_step/
        self.last_metrics: dict[str, float] = {}
        self.step_metrics: list[dict[str, float]] = []
        self.val_metrics: dict[str, torchmetrics.MeanMetric] = {}

    # ----------------------------------------------------------------- model
    @property
    def reference(self) -> torch.nn.Module | None:
        """The frozen initial policy of the KL term (None when model.kl_coef is 0)."""
        return self._reference[0] if self._reference else None

    def configure_model(self) -> None:
        """Load the policy (and the frozen reference copy) once; shard both under ModelParallelStrategy."""
        if self.policy is not None:
            return
        from scpo_lightning.policy import load_policy

        hp = self.hparams
        strategy = self._trainer.strategy if self._trainer is not None else None
        mesh = data_parallel_mesh(strategy, self.device_mesh, hp.lora_rank,
                                  hp.reference_offload)  # checks the strategy before anything loads
        if self.global_rank == 0:
            print(f"Loading the policy {hp.policy} ({hp.torch_dtype})", flush=True)
        policy, self.tokenizer = load_policy(hp.policy, torch_dtype=hp.torch_dtype, cache_dir=hp.cache_dir,
                                             trust_remote_code=hp.trust_remote_code)
        precision = str(self._trainer.precision) if self._trainer is not None else "32-true"
        bf16 = bf16_compute(precision, hp.torch_dtype, hp.engine, hp.generation_autocast, hp.engine_options,
                            hp.get("val_generation_autocast"))
        done = prepare_weights(policy, bf16, hp.bf16_grid)  # before the reference copy: both the same
        if self.global_rank == 0:
            print(f"Policy precision: {done}; LM head in fp32", flush=True)
        reference = copy.deepcopy(policy).eval().requires_grad_(False) if hp.kl_coef > 0 else None
        if hp.lora_rank > 0:
            policy = with_lora(policy, hp.lora_rank)
        if hp.gradient_checkpointing:
            # Non-reentrant checkpointing: the kind FSDP2 supports (it re-runs the layer's hooks in backward).
            policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if mesh is not None:
            shard(policy, mesh)
            if reference is not None:
                shard(reference, mesh, offload=hp.reference_offload)
        self._reference = (reference,) if reference is not None else ()
        self.policy = policy.train()
        options = dict(generation_batch_size=hp.generation_batch_size, autocast_dtype=hp.generation_autocast) \
            if hp.engine == "hf" else {}
        self.engine = make_engine(hp.engine, self.policy, self.tokenizer, **{**options, **(hp.engine_options or {})})

    def on_fit_start(self) -> None:
        # The unsharded reference is outside the module tree, so the strategy did not move or cast it.
        ref = self.reference
        if ref is not None and not is_sharded(ref):
            ref.to(device=self.device, dtype=next(self.policy.parameters()).dtype)
        # vLLM reports π itself only where it samples from π (engines/vllm.py): say so before any rollout.
        data = getattr(self.trainer, "datamodule", None)
        needs_pi = self.hparams.old_logprobs == "rollout" or self.correction.mode != "none"
        if needs_pi and self.hparams.engine == "vllm" and data is not None and \
                (data.rollout.action_mode == "constrained" or data.top_p < 1.0):
            raise ValueError("model.old_logprobs: rollout / model.rollout_correction need the policy's own log-probs, "
                             "which the vllm engine reports only in free mode with data.top_p 1; use "
                             "old_logprobs: recompute and rollout_correction mode: none, or model.engine: hf")

    @contextlib.contextmanager
    def generation_context(self, validation: bool = False) -> Iterator[None]:
        """Around a rollout collection: sharded weights are gathered for the HF engine (collective);
        a validation collection samples under ``val_generation_autocast`` when it is set."""
        hf, autocast = isinstance(self.engine, HFEngine), self.hparams.get("val_generation_autocast")
        before = self.engine.autocast_dtype if hf else None
        with gathered(self.policy) if hf else contextlib.nullcontext():
            try:
                if hf and validation and autocast:
                    self.engine.autocast_dtype = autocast
                yield
            finally:
                if hf:
                    self.engine.autocast_dtype = before

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        params = [p for p in self.policy.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=hp.lr, betas=tuple(hp.betas), weight_decay=hp.weight_decay)

    # ------------------------------------------------------------ advantages
    def advantages(self, batch: RolloutBatch) -> np.ndarray:
        """Per-row A from the batch by ``model.estimator`` (scpo_lightning/estimators.py); each of
        the shipped ones reads SCPO's credit when the callback shaped the batch."""
        return self.estimator(batch, self.hparams.norm_mode, self.hparams.omega)

    # -------------------------------------------------------------- training
    # Under FSDP every forward all-gathers parameters and every backward reduce-scatters gradients,
    # and the collectives of all ranks pair up call by call. Ranks hold different numbers of rows,
    # so a rank with fewer micro-batches runs idle passes (one pad token, zero loss) until the
    # counts agree. On one process all of this reduces to the plain loops.
    def _idle_pass(self, model: torch.nn.Module, backward: bool) -> None:
        ids = torch.full((1, 1), self.tokenizer.pad_token_id, dtype=torch.long, device=self.device)
        if backward:
            self.manual_backward(model(input_ids=ids).logits.sum() * 0.0)
        else:
            with torch.no_grad():
                model(input_ids=ids)

    @torch.no_grad()
    def _logprobs(self, model: torch.nn.Module, batch: RolloutBatch, plan: Plan) -> list[torch.Tensor | None]:
        """Per-row response log-probs (1-D tensors), no grad, micro-batch by micro-batch in the
        update's own grouping: the same rows in the same padded shapes give the same numbers
        (under bf16 autocast a row's log-probs depend on the batch it is computed in)."""
        out: list[torch.Tensor | None] = [None] * len(batch)
        for micros, _ in plan:
            for micro in micros:
                if micro is None:
                    self._idle_pass(model, backward=False)
                    continue
                logp, _, mask = response_logprobs(model, [batch.prompt_ids[i] for i in micro],
                                                  [batch.response_ids[i] for i in micro], self.tokenizer.pad_token_id,
                                                  self.hparams.temperature, with_entropy=False, device=self.device)
                for i, lp, m in zip(micro, logp, mask):
                    out[i] = lp[m.bool()]
        return out

    def _rollout_logprobs(self, batch: RolloutBatch) -> list[torch.Tensor] | None:
        """The engine's log-probs of π per row (1-D float32 tensors), or None when it reported none."""
        hp = self.hparams
        rows = batch.rollout_logprobs
        if rows is None:
            if hp.old_logprobs == "rollout" or self.correction.mode != "none":
                raise ValueError("model.old_logprobs: rollout and model.rollout_correction need the engine's log-probs of "
                                 "the policy, which this batch lacks; use old_logprobs: recompute and "
                                 "rollout_correction mode: none")
            return None
        return [torch.tensor(r, dtype=torch.float32, device=self.device) for r in rows]

    def _clip_gradients(self) -> float:
        """Clip to model.grad_clip; the norm before clipping, over the whole model on every rank."""
        norm = torch.nn.utils.clip_grad_norm_([p for p in self.policy.parameters() if p.requires_grad], self.hparams.grad_clip)
        # Over FSDP2's DTensor gradients the norm is a replicated DTensor: already the global norm.
        return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)

    @staticmethod
    def _pad(rows: list[torch.Tensor], width: int) -> torch.Tensor:
        return torch.stack([torch.nn.functional.pad(r, (0, width - len(r))) for r in rows])

    def training_step(self, batch: RolloutBatch, batch_idx: int) -> None:
        hp = self.hparams
        n = len(batch)
        t0 = time.perf_counter()
        self.engine.release_memory()  # rollouts are done: e.g. vLLM's sleep mode frees its memory for the update
        plan = distributed.update_plan(n, hp.mini_batch_rows, hp.micro_batch_rows, self.device)
        rollout = self._rollout_logprobs(batch)
        self.policy.eval()  # no dropout while recomputing old log-probs (SPEC §4)
        recomputed = hp.old_logprobs == "recompute"
        old = self._logprobs(self.policy, batch, plan) if recomputed else rollout
        # Without a reference model (kl_coef 0) the KL term has weight 0; its logged value is then
        # the drift from the rollout policy.
        ref = self._logprobs(self.reference, batch, plan) if self.reference is not None else old
        self.policy.train()
        t1 = time.perf_counter()
        batch.wait_shaping()  # the scorer ran while the log-probs were recomputed
        t2 = time.perf_counter()
        adv = torch.as_tensor(self.advantages(batch), dtype=torch.float32, device=self.device)
        t3 = time.perf_counter()
        opt = self.optimizers()
        fresh: list[torch.Tensor | None] = list(old) if recomputed else [None] * n  # π_old as the trainer computes it
        self.step_metrics = []
        skipped = bad_loss_steps = 0
        for k, (micros, real) in enumerate(plan):
            # Real micro-batches of all ranks weigh equally (SPEC §4); FSDP averages gradients over ranks.
            weight = distributed.world_size() / real
            opt.zero_grad(set_to_none=True)
            loss_finite = True
            sums = dict.fromkeys(LOSS_PARTS, 0.0)
            for micro in micros:
                if micro is None:
                    self._idle_pass(self.policy, backward=True)
                    continue
                logp, entropy, mask = response_logprobs(
                    self.policy, [batch.prompt_ids[i] for i in micro], [batch.response_ids[i] for i in micro],
                    self.tokenizer.pad_token_id, hp.temperature, with_entropy=True)
                width = logp.shape[1]
                old_t = self._pad([old[i] for i in micro], width)
                if k == 0 and not recomputed:  # the policy has not moved yet: this is π_old, recomputed
                    for i, lp, m in zip(micro, logp.detach(), mask):
                        fresh[i] = lp[m.bool()]
                is_weights = pg_mask = None
                if self.correction.mode != "none":
                    is_weights, pg_mask = rollout_correction(old_t, self._pad([rollout[i] for i in micro], width), mask,
                                                             self.correction.mode, self.correction.cap)
                out = policy_loss(logp, old_t, self._pad([ref[i] for i in micro], width), adv[micro], mask, entropy,
                                  hp.clip_eps, hp.dual_clip, hp.entropy_coef, hp.kl_coef, hp.kl_clamp,
                                  is_weights=is_weights, pg_mask=pg_mask)
                # Checked before backward: a non-finite loss skips this mini-batch's step below even
                # when its gradient comes out finite. The backward still runs, because every rank must
                # run the same passes (FSDP pairs their collectives); its gradient is thrown away.
                finite = bool(torch.isfinite(out.loss.detach()))
                loss_finite &= finite
                self.manual_backward(out.loss * weight)
                for key in LOSS_PARTS:  # a non-finite loss is counted below, not averaged in as NaN
                    sums[key] += float(getattr(out, key).detach()) / real if finite else 0.0
            grad_norm = self._clip_gradients()
            # One rank's non-finite loss skips the step on every rank (the grad norm is global already).
            reduced = distributed.all_reduce([sums[key] for key in LOSS_PARTS] + [0.0 if loss_finite else 1.0], "sum",
                                             self.device)
            bad_loss = reduced[-1] > 0
            applied = not bad_loss and math.isfinite(grad_norm)
            if applied:
                opt.step()
            else:
                opt.zero_grad(set_to_none=True)  # reaches neither the weights nor AdamW's moments
                skipped += 1
                bad_loss_steps += bad_loss
            self.update_steps += 1
            self.step_metrics.append({**dict(zip(LOSS_PARTS, reduced)), "grad_norm": grad_norm, "applied": float(applied),
                                      "mini_batch": float(k), "step": float(self.update_steps)})
        self.skipped_steps += skipped
        self.engine.sync_weights()  # the next rollouts use the updated weights (vLLM copies them in)
        self.last_metrics = iteration_metrics(self.step_metrics, LOSS_PARTS, adv, [t0, t1, t2, t3, time.perf_counter()],
                                              self.skipped_steps, self.device)
        self.last_metrics.update({"train/skipped_nonfinite_loss": float(bad_loss_steps),
                                  "train/skipped_nonfinite_grad": float(skipped - bad_loss_steps)})
        if rollout is not None:  # recompute: every row; rollout: the first mini-batch's rows
            self.last_metrics.update(mismatch_metrics(rollout, fresh, batch.sampling_logprobs, self.device))

    # ------------------------------------------------------------ validation
    # torchmetrics syncs metric by metric, in key order, so every rank must hold the same keys even
    # when its share of episodes lacks a family: all keys are created when validation starts.
    def on_validation_epoch_start(self) -> None:
        spec = self.trainer.datamodule.spec  # the env's declared families and score (envs/spec.py)
        keys = ["valid_action_ratio", "success", "episode_length", "success/unknown"]  # unknown: reset failed
        keys += [f"success/{f}" for f in spec.families] + (["score"] if spec.scored else [])
        self.val_metrics = {k: torchmetrics.MeanMetric().to(self.device) for k in keys}

    def validation_step(self, batch: RolloutBatch, batch_idx: int) -> None:
        """Validation rollouts arrive collected; accumulate per-episode metrics (synced across ranks)."""
        valid = batch.is_action_valid.astype(np.float64)
        self._val_update("valid_action_ratio", valid.mean() if len(valid) else 0.0, len(valid))
        for traj in batch.trajectories:
            self._val_update("success", float(traj["won"]))
            self._val_update(f"success/{traj['family']}", float(traj["won"]))
            self._val_update("episode_length", float(traj["length"]))
            if "score" in self.val_metrics:  # an episode that never bought anything scores 0 (WebShop's evaluation)
                self._val_update("score", 100.0 * float(traj.get("score", 0.0)))

    def _val_update(self, key: str, value: float, weight: float = 1.0) -> None:
        if key not in self.val_metrics:
            raise KeyError(f"validation metric {key!r} was not created up front; the env's EnvSpec.families "
                           "must list every family it reports")
        self.val_metrics[key].update(torch.tensor(value, dtype=torch.float32), weight)

    def val_summary(self) -> dict[str, float]:
        """This validation run's metrics over all ranks (collective); families no episode had are left out."""
        values = {f"val/{k}": float(m.compute()) for k, m in sorted(self.val_metrics.items())}
        return {k: v for k, v in values.items() if not math.isnan(v)}

    # ---------------------------------------------------------- checkpoints
    # The frozen reference is the initial policy, rebuilt from ``policy`` by configure_model; it is
    # outside the module tree (see __init__), so no checkpoint holds it. What else a resume needs to
    # continue bit for bit: the torch RNG, the skip counter, the engine's generator.
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["scpo_state"] = {"torch_rng": torch.get_rng_state(), "skipped_steps": self.skipped_steps,
                                    "update_steps": self.update_steps, "engine": self.engine.state_dict()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint["scpo_state"]
        torch.set_rng_state(state["torch_rng"])
        self.skipped_steps = state["skipped_steps"]
        self.update_steps = state.get("update_steps", 0)  # absent in checkpoints written before it was kept
        self.engine.load_state_dict(state["engine"])
