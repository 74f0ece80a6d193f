"""bf16 grid snapping and the fp32 LM head (scpo_lightning.precision), on hand-made values and the tiny model."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from scpo_lightning.precision import (
    bf16_tie_fraction,
    fp32_output_head,
    off_bf16_grid_fraction,
    prepare_weights,
    snap_to_bf16_grid_,
)
from scpo_lightning.testing import build_tiny_llama


def _from_bits(*bits: int) -> torch.Tensor:
    return torch.tensor(list(bits), dtype=torch.int64).to(torch.int32).view(torch.float32)


def test_ties_are_found_and_snapped_like_autocast_rounds_them():
    # 1.0 = 0x3F800000 (on the grid). 0x3F808000 lies exactly between the bf16 values 0x3F80 and
    # 0x3F81: a tie, rounded to the even one, 0x3F80 = 1.0. 0x3F818000: a tie between 0x3F81 and
    # 0x3F82, rounded to the even 0x3F82. 0x3F800001: off the grid, no tie, rounds down to 1.0.
    w = torch.nn.Parameter(_from_bits(0x3F800000, 0x3F808000, 0x3F818000, 0x3F800001))
    model = torch.nn.Module()
    model.w = w
    assert bf16_tie_fraction(model) == 0.5
    assert off_bf16_grid_fraction(model) == 0.75
    bf16_view = w.detach().to(torch.bfloat16)
    assert snap_to_bf16_grid_(model) == 3
    assert w.detach().view(torch.int32).tolist() == list(_from_bits(0x3F800000, 0x3F800000, 0x3F820000, 0x3F800000)
                                                         .view(torch.int32).tolist())
    assert torch.equal(w.detach().to(torch.bfloat16), bf16_view)  # what bf16 compute sees is unchanged
    assert bf16_tie_fraction(model) == 0.0 and off_bf16_grid_fraction(model) == 0.0


def test_a_small_update_flips_tied_weights_but_not_snapped_ones():
    # The failure this module exists for: a 1e-6 step moves a tie's bf16 value by half a bf16 step.
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(_from_bits(*[0x3F808000] * 4))  # ties between 1.0 and 1.0078125
    before = model.w.detach().to(torch.bfloat16).clone()
    with torch.no_grad():
        model.w.add_(1e-6)
    assert (model.w.detach().to(torch.bfloat16) != before).all()  # each flipped by 1/128
    snapped = copy.deepcopy(model)
    with torch.no_grad():
        snapped.w.sub_(1e-6)
    snap_to_bf16_grid_(snapped)
    before = snapped.w.detach().to(torch.bfloat16).clone()
    with torch.no_grad():
        snapped.w.add_(1e-6)
    assert torch.equal(snapped.w.detach().to(torch.bfloat16), before)


def test_fp32_head_gives_unrounded_logits_under_autocast(tmp_path):
    model = AutoModelForCausalLM.from_pretrained(build_tiny_llama(tmp_path / "tiny"), dtype=torch.float32).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    keys = list(model.state_dict())
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        rounded = model(input_ids=ids).logits
        fp32_output_head(model)
        fp32_output_head(model)  # idempotent
        logits = model(input_ids=ids).logits
        hidden = model.model(input_ids=ids).last_hidden_state
    assert rounded.dtype == torch.bfloat16 and logits.dtype == torch.float32
    expected = hidden.float() @ model.lm_head.weight.T
    assert torch.allclose(logits, expected, atol=1e-5, rtol=0)
    assert list(model.state_dict()) == keys  # names and checkpoints unchanged
    copied = copy.deepcopy(model)  # the patched forward is rebound to the copy, not the original
    with torch.no_grad():
        copied.lm_head.weight.zero_()
        assert torch.equal(copied(input_ids=ids).logits, torch.zeros_like(logits))
        assert not torch.equal(model(input_ids=ids).logits, torch.zeros_like(logits))


def test_prepare_weights_snaps_under_bf16_and_warns_when_told_to_keep_ties(tmp_path):
    path = build_tiny_llama(tmp_path / "tiny", bf16_ties=0.1)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    assert bf16_tie_fraction(model) == pytest.approx(0.1, abs=0.01)
    assert "weights kept" in prepare_weights(copy.deepcopy(model), bf16_compute=False, mode="auto")
    with pytest.warns(UserWarning, match=r"sit exactly between two bf16 values.*model\.bf16_grid"):
        prepare_weights(copy.deepcopy(model), bf16_compute=True, mode="keep")
    assert "rounded onto the bf16 grid" in prepare_weights(model, bf16_compute=True, mode="auto")
    assert off_bf16_grid_fraction(model) == 0.0
    with pytest.raises(ValueError, match=r"model\.bf16_grid must be one of"):
        prepare_weights(model, bf16_compute=True, mode="round")
