"""The LightningModule: the policy, its frozen reference, the estimator and validation metrics.

One training "epoch" is one RL iteration: the DataModule yields one collected batch, the SCPO
callback shapes its step returns, and ``training_step`` runs one PPO epoch on it
(scpo_lightning/ppo_epoch.py: old and reference log-probs, advantages by ``model.estimator``,
sequential mini-batches with manual optimisation). ``setup`` takes, once, what the other stages
hand over: the DataModule's env and the trainer's shaping callback (scpo_lightning/shaping.py).
"""

from __future__ import annotations

import contextlib
import copy
import math
import warnings
from collections.abc import Iterator
from typing import Any

import lightning as L
import numpy as np
import torch
import torchmetrics

from envs.common.packages import check_all, require
from scpo_lightning.batch import RolloutBatch
from scpo_lightning.datamodule import RolloutDataModule
from scpo_lightning.engines.factory import EngineKind, check_engine_installed, engine_kind, make_engine
from scpo_lightning.estimators import build_estimator
from scpo_lightning.losses import RolloutCorrection
from scpo_lightning.metrics import episode_values
from scpo_lightning.model_setup import LORA_INSTALL, bf16_compute, data_parallel_mesh, with_lora
from scpo_lightning.module_rules import check_module, check_policy, check_trainer
from scpo_lightning.ppo_epoch import Learner, PPOSettings, run_epoch
from scpo_lightning.precision import prepare_weights
from scpo_lightning.rollout import RolloutPolicy, SamplingSettings
from scpo_lightning.shaping import ShapingSource, shaping_source
from scpo_lightning.sharding import gathered, is_sharded, shard

# The frozen reference model is in eval mode on purpose; Lightning warns about any such module.
warnings.filterwarnings("ignore", message=r".*module\(s\) in eval mode at the start of training.*")
# Validation creates a metric per task family up front; a family without episodes computes NaN, left out.
warnings.filterwarnings("ignore", message=r".*MeanMetric was called before the ``update`` method.*")


class SCPOModule(L.LightningModule):
    """Policy optimisation with GiGPO/GRPO/RLOO advantages (SCPO shaping arrives via the callback).

    Args:
        policy: HF causal-LM directory or hub-style path, or "smollm2-gguf" for the offline SmolLM2-135M-Instruct.
        torch_dtype: Parameter dtype of the policy: float32, bfloat16 or float16.
        estimator: Advantage estimator, a component: gigpo (SPEC §2), grpo, rloo, the import path (package.module.Class) of an Estimator subclass of your own, or {class_path: package.module.Class, init_args: {...}} (scpo_lightning/estimators.py).
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
        temperature: Rollout temperature of training rollouts; logits are divided by it when log-probs are recomputed.
        top_p: Nucleus sampling top-p of every rollout (training and validation); 1 = the full distribution.
        max_new_tokens: Longest response in tokens.
        val_temperature: Sampling temperature of validation rollouts (0: greedy).
        generation_batch_size: Prompts per generate call of the HF engine.
        generation_autocast: Run generation under torch.autocast with this dtype (e.g. bfloat16: ~3.5x faster prompt processing on CPUs with AMX/AVX512-BF16); null = the weights' dtype.
        val_generation_autocast: The same for validation rollouts only (HF engine), which never enter a loss: bfloat16 makes held-out evaluation ~2.5x faster on CPU, faithful where updates are far larger than bf16 rounding (LoRA at lr 1e-4, not full fine-tuning at 1e-6: docs/numerics.md); null = as generation_autocast.
        engine: Rollout engine: hf (HF generate on the policy itself) or vllm (vLLM in this process, weights synced after every update; docs/vllm.md).
        engine_options: Keyword arguments of the engine (scpo_lightning.engines.vllm.VLLMEngine for vllm, e.g. gpu_memory_utilization; for hf they override generation_batch_size/generation_autocast, and val_copy_dtype: bfloat16 samples validation from a bf16 copy of the policy, rebuilt after each update: scpo_lightning/engines/sampler_copy.py).
        gradient_checkpointing: Recompute activations in the backward pass to save memory.
        reference_offload: Keep the frozen reference's shards in CPU memory and copy each layer to the GPU for its one forward per iteration (FSDP2 CPUOffloadPolicy; needs trainer.strategy ModelParallelStrategy; on CPU it changes nothing).
        lora_rank: LoRA rank for parameter-efficient training (0 = full fine-tuning; needs the lora extra); the adapters are initialised from the run's seed (seed_everything).
        cache_dir: Where converted models are cached (default: ~/.cache/scpo_lightning).
        bf16_grid: auto (round fp32 weights onto the bf16 grid once at load when bf16 compute is configured: trainer.precision bf16-*, generation_autocast bfloat16 or a bf16 vLLM copy, so that an update moves the bf16 model by what it accumulated, not by flipping tied weights), snap (always) or keep (never; warns on tied weights). docs/numerics.md.
        old_logprobs: recompute (the trainer recomputes π_old, SPEC §4) or rollout (use the engine's own log-probs of π as π_old, one forward pass fewer; only where rollout/logprob_diff_* is measured small).
        rollout_correction: Correction for rollout-vs-train log-prob mismatch: mode none (the published recipe), tis (truncated importance sampling, weight min(ρ, cap)) or mask (drop tokens with ρ outside [1/cap, cap]); ρ = π_old / π_rollout per token (scpo_lightning.losses.rollout_correction).
        logprob_prefix_sharing: Encode the prompt prefixes the rows of a micro-batch share once in the trainer's log-prob passes (old, reference, update; scpo_lightning/logprobs.py), as the hf engine's prefix_sharing does for generation: log-probs and gradients move by float noise only; one process, without gradient_checkpointing.
        trust_remote_code: Run Python code shipped inside the policy's model folder (its config's auto_map) when loading it; off unless set, since that code runs with this process's rights.
    """

    def __init__(
        self,
        policy: str = "smollm2-gguf",
        torch_dtype: str = "float32",
        estimator: str | dict[str, Any] = "gigpo",
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
        top_p: float = 1.0,
        max_new_tokens: int = 512,
        val_temperature: float = 0.4,
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
        logprob_prefix_sharing: bool = False,
        trust_remote_code: bool = False,
    ):
        super().__init__()
        check_module(SCPOModule, locals())  # every value, before anything loads (scpo_lightning/module_rules.py)
        self.estimator = build_estimator(estimator)
        # What this machine may lack, all of it (--dry_run lists each): the model, the engine's package, peft.
        check_all(lambda: check_policy(policy), lambda: check_engine_installed(engine),
                  lambda: lora_rank == 0 or require(f"model.lora_rank={lora_rank}", "peft", LORA_INSTALL))
        self.save_hyperparameters()
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
        self.engine_kind: EngineKind = engine_kind(engine)  # asked what differs between engines, never by name
        # Handed over in setup; None for batches replayed without a RolloutDataModule or SCPO.
        self.env_spec: Any = None  # envs.spec.EnvSpec: the validation metrics' families and score
        self.action_mode: str | None = None
        self.shaping: ShapingSource | None = None

    # ----------------------------------------------------------------- model
    @property
    def reference(self) -> torch.nn.Module | None:
        """The frozen initial policy of the KL term (None when model.kl_coef is 0)."""
        return self._reference[0] if self._reference else None

    def setup(self, stage: str) -> None:
        data = self.trainer.datamodule
        if isinstance(data, RolloutDataModule):
            self.env_spec, self.action_mode = data.spec, data.rollout.action_mode
        self.shaping = shaping_source(self.trainer.callbacks)
        self.check_trainer(self.trainer.strategy, self.action_mode, stage)

    def check_trainer(self, strategy: Any, action_mode: str | None, stage: str) -> None:
        """The rules that need the trainer and the data (module_rules.check_trainer); --dry_run runs them too."""
        check_trainer(self.hparams, self.correction, self.engine_kind, strategy, action_mode, stage == "fit")

    def configure_model(self) -> None:
        """Load the policy (and the frozen reference copy) once; shard both under ModelParallelStrategy."""
        if self.policy is not None:
            return
        from scpo_lightning.policy import load_policy

        hp = self.hparams
        strategy = self._trainer.strategy if self._trainer is not None else None
        mesh = data_parallel_mesh(strategy, self.device_mesh)  # setup checked the strategy (check_trainer)
        if self.global_rank == 0:
            print(f"Loading the policy {hp.policy} ({hp.torch_dtype})", flush=True)
        policy, self.tokenizer = load_policy(hp.policy, torch_dtype=hp.torch_dtype, cache_dir=hp.cache_dir,
                                             trust_remote_code=hp.trust_remote_code)
        precision = str(self._trainer.precision) if self._trainer is not None else "32-true"
        generation_dtype = self.engine_kind.generation_dtype(hp.generation_autocast, hp.engine_options)
        bf16 = bf16_compute(precision, hp.torch_dtype, generation_dtype, hp.get("val_generation_autocast"))
        done = prepare_weights(policy, bf16, hp.bf16_grid)  # before the reference copy: both the same
        if self.global_rank == 0:
            print(f"Policy precision: {done}; LM head in fp32", flush=True)
        reference = copy.deepcopy(policy).eval().requires_grad_(False) if hp.kl_coef > 0 else None
        if hp.lora_rank > 0:
            # The run's seed: seed_everything seeds torch's default generator, whose initial_seed it is.
            policy = with_lora(policy, hp.lora_rank, torch.initial_seed())
        if hp.gradient_checkpointing:
            # Non-reentrant checkpointing: the kind FSDP2 supports (it re-runs the layer's hooks in backward).
            policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if mesh is not None:
            shard(policy, mesh)
            if reference is not None:
                shard(reference, mesh, offload=hp.reference_offload)
        self._reference = (reference,) if reference is not None else ()
        self.policy = policy.train()
        options = self.engine_kind.options(hp.generation_batch_size, hp.generation_autocast, hp.engine_options)
        self.engine = make_engine(self.engine_kind.name, self.policy, self.tokenizer, **options)

    def on_fit_start(self) -> None:
        # The unsharded reference is outside the module tree, so the strategy did not move or cast it.
        ref = self.reference
        if ref is not None and not is_sharded(ref):
            ref.to(device=self.device, dtype=next(self.policy.parameters()).dtype)

    @contextlib.contextmanager
    def generation_context(self, validation: bool = False) -> Iterator[None]:
        """Around a rollout collection: sharded weights are gathered for an engine that generates
        with them (collective); a validation collection samples under ``val_generation_autocast``, in
        the engine's ``validating`` mode."""
        shared = self.engine.shares_policy_weights
        autocast = self.hparams.get("val_generation_autocast") if validation else None
        validating = self.engine.validating() if validation else contextlib.nullcontext()
        with gathered(self.policy) if shared else contextlib.nullcontext(), self.engine.autocast(autocast), validating:
            yield

    def rollout_policy(self) -> RolloutPolicy:
        """The handle the DataModule collects with (after configure_model)."""
        hp = self.hparams
        return RolloutPolicy(self.engine, self.tokenizer, self.generation_context, self.device,
                             SamplingSettings(hp.temperature, hp.top_p, hp.max_new_tokens, hp.val_temperature))

    def prompt_tokenizer(self) -> Any:
        """The policy's tokenizer without its weights: the DataModule's first-prompt check runs before they load."""
        from scpo_lightning.policy import load_tokenizer

        hp = self.hparams
        return load_tokenizer(hp.policy, hp.cache_dir, trust_remote_code=hp.trust_remote_code)

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
    def training_step(self, batch: RolloutBatch, batch_idx: int) -> dict[str, Any]:
        """One PPO epoch over the iteration's rows (scpo_lightning/ppo_epoch.py); its ``metrics`` and
        ``step_metrics`` (per optimizer step) are the ``outputs`` of callbacks' ``on_train_batch_end``."""
        hp = self.hparams
        settings = PPOSettings(hp.mini_batch_rows, hp.micro_batch_rows, hp.temperature, hp.old_logprobs, hp.grad_clip,
                               hp.clip_eps, hp.dual_clip, hp.entropy_coef, hp.kl_coef, hp.kl_clamp, self.correction,
                               hp.logprob_prefix_sharing)
        learner = Learner(self.policy, self.reference, self.engine, self.optimizers(), self.manual_backward,
                          self.advantages, self.tokenizer.pad_token_id, self.device)
        result = run_epoch(learner, settings, batch, self.shaping, self.update_steps, self.skipped_steps)
        self.step_metrics, self.last_metrics = result.step_metrics, result.metrics
        self.update_steps, self.skipped_steps = self.update_steps + result.steps, self.skipped_steps + result.skipped
        return {"metrics": result.metrics, "step_metrics": result.step_metrics}

    # ------------------------------------------------------------ validation
    # torchmetrics syncs metric by metric, in key order, so every rank must hold the same keys even
    # when its share of episodes lacks a family: all keys are created when validation starts.
    def on_validation_epoch_start(self) -> None:
        spec = self.env_spec  # the env's declared families and score (envs/spec.py)
        keys = ["valid_action_ratio", "success", "episode_length", "success/unknown"]  # unknown: reset failed
        keys += [f"success/{f}" for f in spec.families] + (["score"] if spec.scored else [])
        self.val_metrics = {k: torchmetrics.MeanMetric().to(self.device) for k in keys}

    def validation_step(self, batch: RolloutBatch, batch_idx: int) -> None:
        """Validation rollouts arrive collected; accumulate per-episode metrics (synced across ranks)."""
        valid = batch.is_action_valid.astype(np.float64)
        self._val_update("valid_action_ratio", valid.mean() if len(valid) else 0.0, len(valid))
        for traj in batch.trajectories:  # the same per-episode values as rollout/ (scpo_lightning/metrics.py)
            for key, value in episode_values(traj, scored="score" in self.val_metrics).items():
                self._val_update(key, value)

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
