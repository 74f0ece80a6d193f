"""The embedded search ranks as WebShop's Lucene index does: hand-computed scores and ties.

Lucene's BM25 (k1 = 0.9, b = 0.4): score = w - w / (1 + tf / (k1 * (1 - b + b * L / avgdl))),
w = count_in_query * ln(1 + (N - df + 0.5) / (df + 0.5)), L the length decoded from its one-byte
norm; equal scores go to the smaller id. Agreement with real Lucene on 200 queries is measured
by benchmarks/webshop_fidelity.py.
"""

from __future__ import annotations

import math

import pytest

from tests.conftest import require

require("Stemmer", extra="webshop")

from envs.webshop.search import Analyzer, LuceneBM25, decode_length, encode_length, tokenize  # noqa: E402

# Distinct words that survive analysis unchanged (not stop words, Porter leaves them alone).
FILLER = [f"w{i}x" for i in range(60)]


def test_one_byte_length_norm():
    # Lengths under 24 are exact; above, 24 + a 4-bit float: 41 - 24 = 17 -> 16 (2 mantissa
    # bits at shift 1) -> 40; 100 - 24 = 76 = 0b1001100 -> 0b1001 << 3 = 72 -> 96.
    assert [decode_length(encode_length(n)) for n in (0, 23, 24, 40, 41, 100)] == [0, 23, 24, 40, 40, 96]
    assert encode_length(2**31 - 1) == 255
    codes = [encode_length(n) for n in range(5000)]
    assert codes == sorted(codes)  # monotone, so longer documents never score higher


def test_tokenizer_keeps_numbers_and_possessives_whole():
    assert tokenize("3.5 ounce, 1,000 count; men's t-shirt a.1 e.g. x_y") == [
        "3.5", "ounce", "1,000", "count", "men's", "t", "shirt", "a", "1", "e.g", "x_y"]
    assert Analyzer()("Men's Running Shoes for the technology") == ["men", "run", "shoe", "technolog"]


def test_hand_computed_score():
    # N = 2, df = 1: idf = ln 2. Both documents have 3 terms, so avgdl = 3 and
    # score = ln 2 * (1 - 1 / (1 + 1 / 0.9)) = ln 2 / 1.9.
    engine = LuceneBM25(["B1", "B2"], ["shoe red blue", "hat red blue"])
    assert engine.scores("shoe")[0] == pytest.approx(math.log(2) / 1.9, rel=1e-6)
    # a repeated query term counts twice
    assert engine.scores("shoe shoe")[0] == pytest.approx(2 * math.log(2) / 1.9, rel=1e-6)
    assert engine.search("shoe") == ["B1"]  # zero scores are not hits
    assert engine.search("nothing here") == []


def test_equal_scores_go_to_the_smaller_id_not_the_catalog_order():
    engine = LuceneBM25(["B9", "B3", "B5"], ["red shoe"] * 3)
    assert engine.search("shoe") == ["B3", "B5", "B9"]


def test_lossy_norm_creates_the_tie_lucene_has():
    # Lengths 40 and 41 share a norm byte, so one match scores the same in both: the tie goes to
    # the smaller id, B1, although its document is longer (exact lengths would rank B2 first).
    long_doc = " ".join(["shoe"] + FILLER[:40])  # 41 terms
    short_doc = " ".join(["shoe"] + FILLER[:39])  # 40 terms
    engine = LuceneBM25(["B1", "B2", "B3"], [long_doc, short_doc, "hat"])
    scores = engine.scores("shoe")
    assert scores[0] == scores[1]
    assert engine.search("shoe") == ["B1", "B2"]
    # 39 terms has its own byte: shorter wins outright over the smaller id.
    engine = LuceneBM25(["B1", "B2", "B3"], [long_doc, " ".join(["shoe"] + FILLER[:38]), "hat"])
    assert engine.search("shoe") == ["B2", "B1"]


def test_number_query_matches_the_whole_number_only():
    engine = LuceneBM25(["B1", "B2"], ["3.5 ounce jar", "3 5 ounce jar"])
    assert engine.search("3.5") == ["B1"]
