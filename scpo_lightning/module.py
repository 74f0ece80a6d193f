"""The LightningModule: the policy, its frozen reference, and the PPO update on rollout rows (SPEC §4).

One training "epoch" is one RL iteration: the DataModule yields one collected batch, the SCPO
callback shapes its step returns, and ``training_step`` computes advantages, recomputes old and
reference log-probs, and runs one PPO epoch of sequential mini-batches (one optimizer step each,
gradient accumulation over micro-batches) with manual optimisation.
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
from scpo_lightning.engines.factory import ENGINES, make_engine
from scpo_lightning.engines.hf import HFEngine
from scpo_lightning.gigpo import MODES, gigpo_advantage, grpo_advantage, rloo_advantage
from scpo_lightning.logprobs import response_logprobs
from scpo_lightning.losses import policy_loss
from scpo_lightning.policy import check_model_source
from scpo_lightning.sharding import gathered, is_sharded, shard

ESTIMATORS = ("gigpo", "grpo", "rloo")
#: The loss terms logged as train/<name> (fields of losses.policy_loss's result).
LOSS_PARTS = ("loss", "pg_loss", "entropy", "kl", "clip_frac", "approx_kl_old")

# The frozen reference model is in eval mode on purpose; Lightning warns about any such module.
warnings.filterwarnings("ignore", message=r".*module\(s\) in eval mode at the start of training.*")
# Validation creates a metric per task family up front; a family without episodes computes NaN, left out.
warnings.filterwarnings("ignore", message=r".*MeanMetric was called before the ``update`` method.*")


class SCPOModule(L.LightningModule):
    """Policy optimisation with GiGPO/GRPO/RLOO advantages (SCPO shaping arrives via the callback).

    Args:
        policy: HF causal-LM directory or hub-style path, or "smollm2-gguf" for the offline SmolLM2-135M-Instruct.
        torch_dtype: Parameter dtype of the policy: float32, bfloat16 or float16.
        estimator: Advantage estimator: gigpo (SPEC §2), grpo or rloo.
        norm_mode: Group normalisation: mean_std_norm (ALFWorld recipe) or mean_norm (WebShop recipe).
        omega: Weight ω of the step-level advantage in A = A_E + ω A_S.
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
        engine: Rollout engine: hf (HF generate on the policy itself) or vllm (vLLM in this process, weights synced after every update; docs/vllm.md).
        engine_options: Keyword arguments of the engine (scpo_lightning.engines.vllm.VLLMEngine for vllm, e.g. gpu_memory_utilization; for hf they override generation_batch_size/generation_autocast).
        gradient_checkpointing: Recompute activations in the backward pass to save memory.
        reference_offload: Keep the frozen reference's shards in CPU memory and copy each layer to the GPU for its one forward per iteration (FSDP2 CPUOffloadPolicy; needs trainer.strategy ModelParallelStrategy; on CPU it changes nothing).
        lora_rank: LoRA rank for parameter-efficient training (0 = full fine-tuning; needs the lora extra).
        cache_dir: Where converted models are cached (default: ~/.cache/scpo_lightning).
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
        engine: str = "hf",
        engine_options: dict[str, Any] | None = None,
        gradient_checkpointing: bool = False,
        reference_offload: bool = False,
        lora_rank: int = 0,
        cache_dir: str | None = None,
        trust_remote_code: bool = False,
    ):
        super().__init__()
        checks = [
            (estimator in ESTIMATORS, f"model.estimator must be one of {ESTIMATORS}; got {estimator!r}"),
            (norm_mode in MODES, f"model.norm_mode must be one of {MODES}; got {norm_mode!r}"),
            (torch_dtype in ("float32", "bfloat16", "float16"), f"model.torch_dtype must be float32, bfloat16 or float16; got {torch_dtype!r}"),
            (mini_batch_rows >= 1 and micro_batch_rows >= 1, "model.mini_batch_rows and model.micro_batch_rows must be >= 1"),
            (temperature > 0, f"model.temperature must be > 0; got {temperature}"),
            (engine in ENGINES, f"model.engine must be one of {ENGINES}; got {engine!r}"),
            (lora_rank >= 0, f"model.lora_rank must be >= 0; got {lora_rank}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        try:
            check_model_source(policy)  # fail before anything loads
        except (FileNotFoundError, ImportError) as exc:
            raise type(exc)(f"model.policy: {exc}") from None
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.policy: torch.nn.Module | None = None
        # The frozen reference is the initial policy, not training state: it is held outside the
        # module tree, so it is in no state dict and no checkpoint (half the size, and a sharded
        # checkpoint's keys match the sharded policy exactly), and the strategy never wraps it.
        self._reference: tuple[torch.nn.Module, ...] = ()
        self.tokenizer: Any = None
        self.engine: Any = None
        self.skipped_steps = 0
        self.last_metrics: dict[str, float] = {}
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
        mesh = self._data_parallel_mesh()  # checks the strategy before anything loads
        if self.global_rank == 0:
            print(f"Loading the policy {hp.policy} ({hp.torch_dtype})", flush=True)
        policy, self.tokenizer = load_policy(hp.policy, torch_dtype=hp.torch_dtype, cache_dir=hp.cache_dir,
                                             trust_remote_code=hp.trust_remote_code)
        reference = copy.deepcopy(policy).eval().requires_grad_(False) if hp.kl_coef > 0 else None
        if hp.lora_rank > 0:
            policy = self._with_lora(policy, hp.lora_rank)
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

    def _data_parallel_mesh(self) -> Any:
        """The data-parallel device mesh under ModelParallelStrategy; None on a single device."""
        from lightning.pytorch.strategies import ModelParallelStrategy, SingleDeviceStrategy

        hp = self.hparams
        strategy = self._trainer.strategy if self._trainer is not None else None
        if isinstance(strategy, ModelParallelStrategy):
            if self.device_mesh["tensor_parallel"].size() != 1:
                raise ValueError("trainer.strategy: ModelParallelStrategy needs tensor_parallel_size: 1 (HF models "
                                 "have no tensor-parallel plan here); set data_parallel_size to the device count")
            if hp.lora_rank > 0:
                raise ValueError("model.lora_rank > 0 is not supported with ModelParallelStrategy (LoRA under "
                                 "FSDP2 is untested); train LoRA on one device or set lora_rank: 0")
            return self.device_mesh["data_parallel"]
        if strategy is not None and not isinstance(strategy, SingleDeviceStrategy):
            # DDP/FSDP1/DeepSpeed: several backward passes and optimizer steps per training_step break
            # DDP's reducer, and FSDP1 cannot keep weights gathered for generation (scpo_lightning.sharding).
            raise ValueError(
                f"trainer.strategy: {type(strategy).__name__} is not supported; for several devices use "
                "ModelParallelStrategy (FSDP2) with data_parallel_size: <devices> and tensor_parallel_size: 1 "
                "(docs/scaling.md)")
        if hp.reference_offload:
            raise ValueError("model.reference_offload offloads the sharded reference: it needs trainer.strategy "
                             "ModelParallelStrategy; set it to false on one device")
        return None

    def on_fit_start(self) -> None:
        # The unsharded reference is outside the module tree, so the strategy did not move or cast it.
        ref = self.reference
        if ref is not None and not is_sharded(ref):
            ref.to(device=self.device, dtype=next(self.policy.parameters()).dtype)

    @contextlib.contextmanager
    def generation_context(self) -> Iterator[None]:
        """Around a rollout collection: sharded weights are gathered for the HF engine (collective)."""
        with gathered(self.policy) if isinstance(self.engine, HFEngine) else contextlib.nullcontext():
            yield

    @staticmethod
    def _with_lora(policy: torch.nn.Module, rank: int) -> torch.nn.Module:
        try:
            import peft
        except ImportError as exc:
            raise ImportError("model.lora_rank > 0 needs peft: pip install -e '.[lora]'") from exc
        config = peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", task_type="CAUSAL_LM")
        return peft.get_peft_model(policy, config)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        hp = self.hparams
        params = [p for p in self.policy.parameters() if p.requires_grad]
        return torch.optim.AdamW(params, lr=hp.lr, betas=tuple(hp.betas), weight_decay=hp.weight_decay)

    # ------------------------------------------------------------ advantages
    def advantages(self, batch: RolloutBatch) -> np.ndarray:
        """Per-row A from the batch; the step level sees SCPO's G̃ when the callback set it."""
        hp = self.hparams
        if hp.estimator == "grpo":
            return grpo_advantage(batch.episode_scores, batch.group_ids, hp.norm_mode)
        if hp.estimator == "rloo":
            return rloo_advantage(batch.episode_scores, batch.traj_returns, batch.traj_ids, batch.group_ids)
        returns = batch.shaped_returns if batch.shaped_returns is not None else batch.step_returns
        return gigpo_advantage(batch.episode_scores, returns, batch.group_ids, batch.anchors, hp.norm_mode, hp.omega)

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
    def _logprobs(self, model: torch.nn.Module, batch: RolloutBatch, n: int) -> list[torch.Tensor]:
        """Per-row response log-probs (1-D tensors) of rows 0..n-1, micro-batch by micro-batch, no grad."""
        out: list[torch.Tensor] = []
        step = self.hparams.micro_batch_rows
        passes = math.ceil(n / step)
        (agreed,) = distributed.all_reduce([passes], "max", self.device)
        for k in range(int(agreed)):
            if k >= passes:
                self._idle_pass(model, backward=False)
                continue
            idx = range(k * step, min(n, (k + 1) * step))
            logp, _, mask = response_logprobs(model, [batch.prompt_ids[i] for i in idx], [batch.response_ids[i] for i in idx],
                                              self.tokenizer.pad_token_id, self.hparams.temperature, with_entropy=False,
                                              device=self.device)
            out.extend(lp[m.bool()] for lp, m in zip(logp, mask))
        return out

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
        self.policy.eval()  # no dropout while recomputing old log-probs (SPEC §4)
        old = self._logprobs(self.policy, batch, n)
        # Without a reference model (kl_coef 0) the KL term has weight 0; its logged value is then
        # the drift from the rollout policy.
        ref = self._logprobs(self.reference, batch, n) if self.reference is not None else old
        self.policy.train()
        t1 = time.perf_counter()
        batch.wait_shaping()  # the scorer ran while the log-probs were recomputed
        t2 = time.perf_counter()
        adv = torch.as_tensor(self.advantages(batch), dtype=torch.float32, device=self.device)
        t3 = time.perf_counter()
        opt = self.optimizers()
        sums: dict[str, float] = {}
        steps = skipped = bad_loss_steps = 0
        for micros, real in distributed.update_plan(n, hp.mini_batch_rows, hp.micro_batch_rows, self.device):
            # Real micro-batches of all ranks weigh equally (SPEC §4); FSDP averages gradients over ranks.
            weight = distributed.world_size() / real
            opt.zero_grad(set_to_none=True)
            loss_finite = True
            for micro in micros:
                if micro is None:
                    self._idle_pass(self.policy, backward=True)
                    continue
                logp, entropy, mask = response_logprobs(
                    self.policy, [batch.prompt_ids[i] for i in micro], [batch.response_ids[i] for i in micro],
                    self.tokenizer.pad_token_id, hp.temperature, with_entropy=True)
                width = logp.shape[1]
                out = policy_loss(logp, self._pad([old[i] for i in micro], width), self._pad([ref[i] for i in micro], width),
                                  adv[micro], mask, entropy, hp.clip_eps, hp.dual_clip, hp.entropy_coef, hp.kl_coef, hp.kl_clamp)
                # Checked before backward: a non-finite loss skips this mini-batch's step below even
                # when its gradient comes out finite. The backward still runs, because every rank must
                # run the same passes (FSDP pairs their collectives); its gradient is thrown away.
                finite = bool(torch.isfinite(out.loss.detach()))
                loss_finite &= finite
                self.manual_backward(out.loss * weight)
                for key in LOSS_PARTS:
                    value = float(getattr(out, key).detach()) / real
                    sums[key] = sums.get(key, 0.0) + (value if finite else 0.0)  # counted below, not a NaN mean
            grad_norm = self._clip_gradients()
            # One rank's non-finite loss skips the step on every rank (the grad norm is global already).
            bad_loss = distributed.all_reduce([0.0 if loss_finite else 1.0], "max", self.device)[0] > 0
            if not bad_loss and math.isfinite(grad_norm):
                opt.step()
                sums["grad_norm"] = sums.get("grad_norm", 0.0) + grad_norm
            else:
                opt.zero_grad(set_to_none=True)  # reaches neither the weights nor AdamW's moments
                skipped += 1
                bad_loss_steps += bad_loss
            steps += 1
        self.skipped_steps += skipped
        self.engine.sync_weights()  # the next rollouts use the updated weights (vLLM copies them in)
        self.last_metrics = self._train_metrics(sums, steps, skipped, adv, [t0, t1, t2, t3, time.perf_counter()])
        self.last_metrics.update({"train/skipped_nonfinite_loss": float(bad_loss_steps),
                                  "train/skipped_nonfinite_grad": float(skipped - bad_loss_steps)})

    def _train_metrics(self, sums: dict[str, float], steps: int, skipped: int, adv: torch.Tensor,
                       marks: list[float]) -> dict[str, float]:
        """This iteration's training scalars over all ranks (collective): loss parts are the global
        mini-batch losses (each rank summed its share), advantage statistics cover every row, and
        times are the slowest rank's. Grad norms and step counts are global already."""
        a = adv.double()
        # Fixed keys: a rank without rows (idle passes only) must send a vector of the same length.
        reduced = distributed.all_reduce([sums.get(k, 0.0) for k in LOSS_PARTS] + [a.sum(), (a * a).sum(), len(a)],
                                         "sum", self.device)
        a_sum, a_sq, rows = reduced[len(LOSS_PARTS):]
        mean = a_sum / rows if rows else 0.0
        std = math.sqrt(max(a_sq - rows * mean * mean, 0.0) / (rows - 1)) if rows > 1 else 0.0
        applied = max(steps - skipped, 1)
        metrics = {f"train/{k}": v / steps for k, v in zip(LOSS_PARTS, reduced)} if steps else {}
        if "grad_norm" in sums:
            metrics["train/grad_norm"] = sums["grad_norm"] / applied
        names = ("time/logprobs_s", "time/shaping_wait_s", "time/advantage_s", "time/update_s")
        times = distributed.all_reduce([b - a for a, b in zip(marks, marks[1:])], "max", self.device)
        metrics.update(dict(zip(names, times)))
        metrics.update({
            "train/optimizer_steps": float(steps - skipped), "train/skipped_steps": float(skipped),
            "train/skipped_steps_total": float(self.skipped_steps),
            "train/advantage_mean": mean, "train/advantage_std": std, "train/rows": float(rows),
        })
        return metrics

    # ------------------------------------------------------------ validation
    # torchmetrics syncs metric by metric, in key order, so every rank must hold the same keys even
    # when its share of episodes lacks a family: all keys are created when validation starts.
    def on_validation_epoch_start(self) -> None:
        from envs.registry import SCORED, task_families

        env = self.trainer.datamodule.env
        keys = ["valid_action_ratio", "success", "episode_length", "success/unknown"]  # unknown: reset failed
        keys += [f"success/{f}" for f in task_families(env)] + (["score"] if env in SCORED else [])
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
            raise KeyError(f"validation metric {key!r} was not created up front; envs.registry.task_families "
                           "must list every family the env reports")
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
                                    "engine": self.engine.state_dict()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        state = checkpoint["scpo_state"]
        torch.set_rng_state(state["torch_rng"])
        self.skipped_steps = state["skipped_steps"]
        self.engine.load_state_dict(state["engine"])
