"""LoRA (model.lora_rank > 0): one real iteration trains only the adapters; export merges them."""

from __future__ import annotations

import lightning as L
import torch
from transformers import AutoModelForCausalLM

from callbacks.export import HFExport
from callbacks.scpo import SCPOCallback
from scpo_lightning.testing import build_tiny_llama
from tests.conftest import require
from tests.test_app_e2e import make


def test_lora_iteration_moves_only_adapters_and_export_merges_them(tmp_path):
    require("peft", extra="lora")
    tiny = str(build_tiny_llama(tmp_path / "tiny"))
    module, data = make(tiny, lora_rank=4)
    export = tmp_path / "hf"
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, limit_val_batches=0, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[SCPOCallback(scorer="lexical"), HFExport(dirpath=str(export))])
    seen: dict[str, torch.Tensor] = {}
    after: dict[str, torch.Tensor] = {}

    class Snapshot(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.update({k: v.detach().clone() for k, v in pl_module.policy.named_parameters()})

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            after.update({k: v.detach().clone() for k, v in pl_module.policy.named_parameters()})
            after.update({f"grad:{k}": torch.tensor(v.requires_grad) for k, v in pl_module.policy.named_parameters()})

    trainer.callbacks.insert(0, Snapshot())
    torch.manual_seed(0)  # the adapters' A are drawn from torch.initial_seed() in configure_model: the same A every run
    trainer.fit(module, datamodule=data)
    trainable = {k: bool(after.pop(f"grad:{k}")) for k in list(seen)}
    lora = [k for k in after if "lora_" in k]
    assert lora, "no LoRA parameters were created"
    assert all(trainable[k] == ("lora_" in k) for k in seen)
    # lora_B starts at zero, so any optimizer step moves it; the frozen base weights never move.
    assert any(not torch.equal(seen[k], after[k]) for k in lora if "lora_B" in k)
    assert all(torch.equal(seen[k], after[k]) for k in after if "lora_" not in k)
    assert torch.isfinite(torch.tensor(module.last_metrics["train/loss"]))

    # HFExport merged the adapters: a plain HF model (no adapter keys) carrying the trained update.
    loaded = AutoModelForCausalLM.from_pretrained(export)
    base = AutoModelForCausalLM.from_pretrained(tiny)
    assert not any("lora" in k for k in loaded.state_dict())
    assert any(not torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), base.state_dict().values()))


def test_lora_initialisation_is_the_seeds_and_leaves_the_global_generator_alone(tmp_path):
    require("peft", extra="lora")
    from scpo_lightning.model_setup import with_lora

    tiny = str(build_tiny_llama(tmp_path / "tiny"))

    def adapters(seed: int) -> dict[str, torch.Tensor]:
        model = with_lora(AutoModelForCausalLM.from_pretrained(tiny), 4, seed)
        return {k: v.detach().clone() for k, v in model.named_parameters() if "lora_A" in k}

    torch.manual_seed(123)
    state = torch.get_rng_state()
    one = adapters(1)
    assert torch.equal(torch.get_rng_state(), state)  # the draw came from a generator of its own
    torch.manual_seed(999)  # whatever ran before does not change the seed's initialisation
    again, other = adapters(1), adapters(2)
    assert one and all(torch.equal(one[k], again[k]) for k in one)
    assert all(not torch.equal(one[k], other[k]) for k in one)
