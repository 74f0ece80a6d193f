"""make_scorer: scorers chosen by config name, with clear errors for bad names and options."""

from __future__ import annotations

import pytest

from tests.conftest import require

from scpo_lightning.scorers import SCORERS, LexicalScorer, StepScorer, make_scorer


def test_lexical_by_name():
    scorer = make_scorer("lexical")
    assert isinstance(scorer, LexicalScorer) and isinstance(scorer, StepScorer)


def test_unknown_name_lists_the_choices():
    with pytest.raises(ValueError, match=r"scorer='bert'.*bge.*minilm.*lexical"):
        make_scorer("bert")
    assert set(SCORERS) == {"bge", "minilm", "lexical"}


def test_unknown_option_lists_the_accepted_ones():
    with pytest.raises(ValueError, match=r"takes no option\(s\) \['batch_size'\]"):
        make_scorer("lexical", batch_size=4)


def test_bge_missing_dir_error_comes_before_any_model_work(tmp_path):
    require("FlagEmbedding", extra="bge")
    with pytest.raises(FileNotFoundError, match="scorer_options.model_dir"):
        make_scorer("bge", model_dir=tmp_path / "missing")


def test_minilm_options_are_checked_before_the_model_loads(tmp_path):
    # A mapping given as a config dict becomes a CosineMap (bad knots fail at once) ...
    with pytest.raises(ValueError, match="knots must satisfy"):
        make_scorer("minilm", mapping={"zero": 0.8, "at_theta": 0.7})
    # ... and a folder without a model names the config field.
    with pytest.raises(FileNotFoundError, match=r"scorer_options\.model_dir=.*no config.json"):
        make_scorer("minilm", model_dir=tmp_path, mapping={"zero": 0.1, "at_theta": 0.7})


def test_every_scorer_name_builds_its_own_class():
    # A scorer listed in SCORERS but missing from the class table must fail, not build another scorer.
    from scpo_lightning.scorers import factory

    assert set(factory._CLASSES) == set(factory.SCORERS)
    assert factory._scorer_class("lexical").__name__ == "LexicalScorer"
