"""Prompt template and action projection (SPEC §6)."""

import pytest

from scpo_lightning.prompts import build_prompt, format_admissible, project_action, prompt_style
from scpo_lightning.rollout import constrained_choices

ALFWORLD, WEBSHOP = prompt_style("alfworld", "prompts"), prompt_style("webshop", "prompts")


@pytest.mark.parametrize(
    "text, action, valid",
    [
        ("<think>go</think><action>Go To Cabinet 1</action>", "go to cabinet 1", True),
        ("<think>x</think> <action>  open fridge 1 \n</action> trailing", "open fridge 1", True),
        # Several action blocks: the first one counts.
        ("<think>x</think><action>look</action><action>inventory</action>", "look", True),
        # Think tags missing: the extracted action is sent, the row is invalid.
        ("<action>look</action>", "look", False),
        # CJK anywhere: invalid.
        ("<think>思考</think><action>look</action>", "look", False),
        # No action block: the last 30 characters of the lower-cased text, invalid.
        ("<think>x</think> I would like to go to the countertop 2 now", "ike to go to the countertop 2 now"[-30:], False),
        # An unclosed action tag is a missing tag.
        ("<think>x</think><action>look", "<think>x</think><action>look"[-30:], False),
        ("", "", False),
    ],
)
def test_alfworld_projection(text, action, valid):
    p = project_action(text, ALFWORLD)
    assert (p.action, p.valid) == (action, valid)


def test_webshop_fallback_is_20_characters_and_unknown_env_is_named():
    assert project_action("a" * 50, WEBSHOP).action == "a" * 20
    with pytest.raises(ValueError, match="unknown env 'minecraft' for action projection"):
        prompt_style("minecraft", "action projection")


def test_constrained_mode_needs_no_think_block():
    assert project_action("<action>look</action>", ALFWORLD, require_think=False).valid


def test_admissible_formatting_drops_help():
    assert format_admissible(["go to desk 1", "help", "look"]) == "'go to desk 1'\n 'look'"


def test_prompt_history_keeps_the_last_pairs():
    history = [("obs A", "act a"), ("obs B", "act b"), ("obs C", "act c")]
    text = build_prompt(ALFWORLD, "put a mug in the fridge", "obs D", ["look"], history, step=3, history_length=2)
    assert "Your task is to: put a mug in the fridge" in text
    assert "[Observation 2: 'obs B', Action 2: 'act b']\n[Observation 3: 'obs C', Action 3: 'act c']" in text
    assert "obs A" not in text and "step 4" in text and "obs D" in text
    first = build_prompt(ALFWORLD, "task", "obs 0", ["look", "help"], [], step=0)
    assert "Observation 1" not in first and "'look'" in first and "'help'" not in first


def test_constrained_search_uses_the_task_as_query():
    placeholder = WEBSHOP.search_placeholder
    assert constrained_choices(["search[<your query>]", "click[back to search]", "help"], "red shoes", placeholder) == [
        "search[red shoes]", "click[back to search]"]


def test_system_prompt_replaces_the_templates_default(tmp_path):
    from scpo_lightning.rollout import RolloutConfig, tokenize_prompt
    from scpo_lightning.testing import build_tiny_llama
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(build_tiny_llama(tmp_path / "tiny"))
    default = tok.decode(tokenize_prompt(tok, "hello", RolloutConfig()))
    empty = tok.decode(tokenize_prompt(tok, "hello", RolloutConfig(system_prompt="")))
    mine = tok.decode(tokenize_prompt(tok, "hello", RolloutConfig(system_prompt="Be brief.")))
    # The tiny model's template adds no default system message; SmolLM2's and Qwen's do, which "" replaces.
    assert default == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    assert empty == "<|im_start|>system\n<|im_end|>\n" + default
    assert mine == "<|im_start|>system\nBe brief.<|im_end|>\n" + default
