"""Export the trained policy in Hugging Face format at the end of training."""

from __future__ import annotations

from pathlib import Path

import lightning as L

from envs.common.rules import FLAG, TEXT, check, optional
from scpo_lightning.sharding import full_state_dict, is_sharded


class HFExport(L.Callback):
    """Save the policy and tokenizer with ``save_pretrained`` when fit ends (rank 0).

    Args:
        dirpath: Output directory (default: <log dir>/hf_policy).
        merge_lora: Merge LoRA adapters into the base weights before saving.
    """

    def __init__(self, dirpath: str | None = None, merge_lora: bool = True):
        check("HFExport", HFExport, locals(), {"dirpath": optional(TEXT), "merge_lora": FLAG})
        self.dirpath, self.merge_lora = dirpath, merge_lora

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        policy = pl_module.policy
        # With several ranks both are collective, so every rank joins in: trainer.log_dir broadcasts
        # rank 0's folder, and a sharded (FSDP2) policy is gathered.
        out = Path(self.dirpath or Path(trainer.log_dir or ".") / "hf_policy")
        state = full_state_dict(policy) if is_sharded(policy) else None
        if not trainer.is_global_zero:
            return
        if self.merge_lora and hasattr(policy, "merge_and_unload"):
            policy = policy.merge_and_unload()
        policy.save_pretrained(out, state_dict=state)
        pl_module.tokenizer.save_pretrained(out)
        trainer.print(f"[export] policy saved in Hugging Face format to {out}")
