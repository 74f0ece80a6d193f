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
