"""The `bge` scorer on a tiny local cross-encoder: FlagEmbedding's real FlagReranker code path
(``backend: flagembedding``), and ``backend: transformers`` equal to it here and in the vLLM
environment (transformers 5, no FlagEmbedding)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import require
from tests.tiny_reranker import LONG_PAIRS, PAIRS, WORDS, build_tiny_reranker
from tests.vllm_env import run_in_vllm_env

BACKENDS = ("flagembedding", "transformers")
#: (batch_size, max_length): one pair per batch up to all in one; no cut, the reference cut to
#: 3/4, the candidate cut to fit, and (max_length 10) a candidate too short to absorb the cut.
SETTINGS = [(2, 64), (3, 12), (128, 78), (1, 10)]


@pytest.fixture(scope="module")
def tiny_reranker_dir(tmp_path_factory):
    require("FlagEmbedding", extra="bge")
    return build_tiny_reranker(tmp_path_factory.mktemp("tiny_bge"))


def _reference_scores(model_dir, pairs):
    """sigmoid(logit) of each pair, computed one pair at a time with plain transformers."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    out = []
    with torch.no_grad():
        for ref, cand in pairs:
            logit = model(**tok(ref, cand, return_tensors="pt")).logits.item()
            out.append(1.0 / (1.0 + np.exp(-logit)))
    return np.array(out)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bge_scores_match_plain_transformers_in_pair_order(tiny_reranker_dir, backend):
    from scpo_lightning.scorers.bge import BGEScorer

    # batch_size 2 < 5 pairs: pairs are sorted by length, padded and batched; we must get the
    # scores back in the caller's order and sigmoid-normalised.
    scorer = BGEScorer(tiny_reranker_dir, backend=backend, device="cpu", batch_size=2, max_length=64)
    got = scorer.score(PAIRS)
    assert got.shape == (len(PAIRS),) and got.dtype == np.float64
    assert np.all((got >= 0) & (got <= 1))
    want = _reference_scores(tiny_reranker_dir, PAIRS)
    assert np.ptp(want) > 0.01, "the tiny model should separate the pairs"
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert scorer.score([]).shape == (0,)


@pytest.mark.parametrize("batch_size, max_length", SETTINGS)
def test_transformers_backend_equals_flagreranker_with_truncation(tiny_reranker_dir, batch_size, max_length):
    from scpo_lightning.scorers.bge import BGEScorer

    pairs = PAIRS + LONG_PAIRS
    flag, ours = (BGEScorer(tiny_reranker_dir, backend=b, device="cpu", batch_size=batch_size, max_length=max_length)
                  for b in BACKENDS)
    want, got = flag.score(pairs), ours.score(pairs)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    if max_length < 64:  # the cut changes what is scored: the long pairs score otherwise than uncut
        uncut = BGEScorer(tiny_reranker_dir, backend="transformers", device="cpu", max_length=78).score(pairs)
        assert np.abs(uncut[len(PAIRS):] - got[len(PAIRS):]).max() > 1e-3


@pytest.mark.vllm
def test_transformers_backend_in_the_vllm_env_equals_flagreranker_here_and_trains(tiny_reranker_dir, tmp_path):
    """In .venv-vllm (transformers 5, vLLM): the same folder and pairs score as FlagReranker scores
    them in this environment (<= 1e-5), and one SCPO iteration with vLLM + bge runs (tests/vllm_bge_check.py)."""
    from scpo_lightning.scorers.bge import BGEScorer

    pairs = PAIRS + LONG_PAIRS
    cases = [{"batch_size": b, "max_length": m, "pairs": pairs,
              "scores": BGEScorer(tiny_reranker_dir, device="cpu", batch_size=b, max_length=m).score(pairs).tolist()}
             for b, m in SETTINGS]
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"model_dir": str(tiny_reranker_dir), "cases": cases}))
    result = run_in_vllm_env("vllm_bge_check.py", str(request))
    assert result["vllm_bge_check"] == "ok" and result["max_score_diff"] <= 1e-5, result
    assert result["pairs_scored"] > 0, result


def test_bge_fp16_only_on_cuda(tiny_reranker_dir):
    from scpo_lightning.scorers.bge import BGEScorer

    scorer = BGEScorer(tiny_reranker_dir, device="cpu", use_fp16=True, max_length=64)
    assert scorer.use_fp16 is False


@pytest.mark.parametrize("backend", BACKENDS)
def test_bge_max_length_beyond_the_model_positions_is_refused(tiny_reranker_dir, backend):
    from scpo_lightning.scorers.bge import BGEScorer

    with pytest.raises(ValueError, match=r"scorer_options.max_length=100 exceeds the 78 token positions"):
        BGEScorer(tiny_reranker_dir, backend=backend, device="cpu", max_length=100)
    longest = BGEScorer(tiny_reranker_dir, backend=backend, device="cpu", max_length=78)  # the largest that fits
    long_text = " ".join(WORDS * 10)
    assert longest.score([(long_text, long_text)]).shape == (1,)  # 78 tokens run


def test_bge_missing_model_dir_names_the_config_field(tmp_path):
    require("FlagEmbedding", extra="bge")
    from scpo_lightning.scorers.bge import BGEScorer

    with pytest.raises(FileNotFoundError, match=r"scorer_options\.model_dir=.*no such directory"):
        BGEScorer(tmp_path / "bge-reranker-v2-m3")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        BGEScorer(tmp_path)


def test_transformers_backend_needs_the_tokenizer_json(tiny_reranker_dir, tmp_path):
    import shutil

    from scpo_lightning.scorers.bge import BGEScorer

    folder = shutil.copytree(tiny_reranker_dir, tmp_path / "no_fast_tokenizer")
    (folder / "tokenizer.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"backend=transformers needs .*tokenizer\.json"):
        BGEScorer(folder, backend="transformers", device="cpu", max_length=64)


def test_unknown_backend_is_refused_before_anything_loads(tmp_path):
    from scpo_lightning.scorers.bge import BGEScorer

    with pytest.raises(ValueError, match=r"scorer_options\.backend='vllm': choose one of \['flagembedding', 'transformers'\]"):
        BGEScorer(tmp_path / "missing", backend="vllm")


def test_a_backend_whose_package_is_missing_names_the_other(monkeypatch, tmp_path):
    """No silent fallback: the chosen backend's package missing is an error that says what to set."""
    import importlib.util

    from callbacks.scpo import SCPOCallback

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "FlagEmbedding" else real(name, *a))
    with pytest.raises(ImportError, match=r"backend=flagembedding needs `FlagEmbedding`.*scorer_options\.backend: transformers"):
        SCPOCallback(scorer="bge", scorer_options={"model_dir": str(tmp_path)})
    with pytest.raises(ValueError, match=r"scorer_options\.backend='flag'"):
        SCPOCallback(scorer="bge", scorer_options={"model_dir": str(tmp_path), "backend": "flag"})
    # transformers is found: only the model folder is missing now.
    with pytest.raises(FileNotFoundError, match=r"scorer_options\.model_dir="):
        SCPOCallback(scorer="bge", scorer_options={"model_dir": str(tmp_path), "backend": "transformers"})
