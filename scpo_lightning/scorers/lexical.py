"""A deterministic, dependency-free lexical scorer: the fallback and the test scorer."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from scpo_lightning.scorers.base import ScorerRules

_TOKEN = re.compile(r"[a-z0-9]+")


def _bag(text: str) -> Counter[str]:
    return Counter(_TOKEN.findall(text.lower()))


class LexicalScorer(ScorerRules):
    """Dice coefficient of the two texts' lower-cased word multisets.

    ``2 |A ∩ B| / (|A| + |B|)`` with multiset intersection: 1.0 for texts with the same words,
    0.0 for texts that share none; two texts without any word score 1.0 if equal, else 0.0. It
    is symmetric and needs no model, which makes it the scorer for unit tests and the fallback
    when no neural scorer is installed; it knows nothing of synonyms or paraphrase.
    """

    def score(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        bags: dict[str, Counter[str]] = {}
        out = np.empty(len(pairs), dtype=np.float64)
        for i, (ref, cand) in enumerate(pairs):
            a = bags.get(ref)
            if a is None:
                a = bags[ref] = _bag(ref)
            b = bags.get(cand)
            if b is None:
                b = bags[cand] = _bag(cand)
            total = sum(a.values()) + sum(b.values())
            if total == 0:
                out[i] = 1.0 if ref == cand else 0.0
            else:
                out[i] = 2.0 * sum((a & b).values()) / total
        return out
