"""Product search: BM25 over WebShop's product documents, top 50.

A product's document is what WebShop indexes: title, description, first bullet point and the
option text ("size: small, large, and color: red"), lower-cased. Two engines:

* ``bm25s`` (default): Lucene's BM25 variant with pyserini's defaults k1 = 0.9, b = 0.4, over
  documents and queries analysed as pyserini's default English analyzer does (``analyze``):
  words split at Unicode word boundaries, possessive "'s" dropped, Lucene's English stop words
  removed, the Porter stemmer applied. Zero scores are dropped (Lucene returns only documents
  that match a term). Ties go to the earlier product in the catalog file.
* ``pyserini``: Lucene itself through pyserini's ``LuceneSearcher``, as WebShop does; needs
  ``pip install pyserini`` (Python >= 3.12) and Java >= 21. The index is built once into
  ``index_dir``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from envs.webshop.catalog import Product

SEARCH_RETURN_N = 50
PRODUCTS_PER_PAGE = 10
MIN_JAVA = 21


def product_document(product: Product) -> str:
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product.options.items())
    first_bullet = product.bullets[0] if product.bullets else ""
    return " ".join([product.title, product.description, first_bullet, option_text]).lower()


class SearchEngine(Protocol):
    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """ASINs of the best ``k`` matches, best first."""


# A word as Lucene's StandardTokenizer (Unicode word boundaries) cuts it: "men's", "2.5", "1,000"
# and "e.g" stay whole, and one-letter words ("s", "x") are kept.
_WORD = re.compile(r"\w+(?:(?:['\u2019\uff07.]|(?<=\d),(?=\d))\w+)*")
# EnglishPossessiveFilter: a trailing apostrophe-s goes ("men's" -> "men").
_POSSESSIVE = re.compile(r"['\u2019\uff07]s$")


class Analyzer:
    """Text -> index terms, as pyserini's default English analyzer (what WebShop's Lucene index uses).

    Tokenize, drop possessives, lower-case, drop Lucene's English stop words, Porter-stem. Words
    of one or two letters are not stemmed: the reference Porter implementation (the one Lucene
    ports) leaves them alone, whereas PyStemmer's Snowball Porter turns "s" into "" and "is"
    into "i". Never yields an empty term, so every query scores (an empty term has no row in
    the index and made bm25s raise).
    """

    def __init__(self):
        import Stemmer
        from bm25s.stopwords import STOPWORDS_EN  # Lucene's ENGLISH_STOP_WORDS_SET, the same 33 words

        self._stemmer = Stemmer.Stemmer("porter")
        self._stopwords = frozenset(STOPWORDS_EN)

    def __call__(self, text: str) -> list[str]:
        words = (_POSSESSIVE.sub("", w) for w in _WORD.findall(text.lower()))
        kept = [w for w in words if w and w not in self._stopwords]
        terms = [w if len(w) <= 2 else s for w, s in zip(kept, self._stemmer.stemWords(kept))]
        return [t for t in terms if t]


class BM25Search:
    """bm25s engine (see module docstring)."""

    def __init__(self, products: Sequence[Product]):
        import bm25s

        self.analyze = Analyzer()
        self._asins = [p.asin for p in products]
        self._index = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
        self._index.index([self.analyze(product_document(p)) for p in products], show_progress=False)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        # Terms no product has are left out, as Lucene ignores them; none left means no hits.
        terms = [t for t in self.analyze(query) if t in self._index.vocab_dict]
        if not terms:
            return []
        scores = self._index.get_scores(terms)
        order = np.lexsort((np.arange(len(scores)), -scores))[:k]
        return [self._asins[i] for i in order if scores[i] > 0]


def java_major_version(java: str | None = None) -> int | None:
    """Major version of ``java`` on PATH (or the given binary); None if there is none."""
    java = java or shutil.which("java")
    if java is None:
        return None
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 else major  # "1.8" style means 8


class PyseriniSearch:
    """Lucene through pyserini, over an index built from the same documents."""

    def __init__(self, products: Sequence[Product], index_dir: str | Path):
        version = java_major_version()
        if version is None or version < MIN_JAVA:
            found = "no java on PATH" if version is None else f"java {version} on PATH"
            raise RuntimeError(
                f"search_backend='pyserini' needs Java >= {MIN_JAVA} ({found}); install a JDK "
                f"{MIN_JAVA}+ and put it first on PATH, or use search_backend='bm25s'"
            )
        try:
            from pyserini.search.lucene import LuceneSearcher
        except ImportError as exc:
            raise RuntimeError(
                "search_backend='pyserini' needs `pip install pyserini` (Python >= 3.12); "
                f"or use search_backend='bm25s': {exc}"
            ) from exc
        index_dir = Path(index_dir)
        if not (index_dir / "segments.gen").exists() and not any(index_dir.glob("segments_*")):
            self._build(products, index_dir)
        self._searcher = LuceneSearcher(str(index_dir))

    @staticmethod
    def _build(products: Sequence[Product], index_dir: Path) -> None:
        docs = index_dir.parent / f"{index_dir.name}_docs"
        docs.mkdir(parents=True, exist_ok=True)
        with open(docs / "documents.jsonl", "w", encoding="utf-8") as f:
            for p in products:
                f.write(json.dumps({"id": p.asin, "contents": product_document(p)}) + "\n")
        subprocess.run(
            [sys.executable, "-m", "pyserini.index.lucene", "--collection", "JsonCollection",
             "--input", str(docs), "--index", str(index_dir), "--generator",
             "DefaultLuceneDocumentGenerator", "--threads", "1", "--storeRaw"],
            check=True,
        )

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        return [hit.docid for hit in self._searcher.search(query, k=k)]
