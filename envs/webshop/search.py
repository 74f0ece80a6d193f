"""Product search: Lucene's BM25 over WebShop's product documents, top 50.

A product's document is what WebShop indexes: title, description, first bullet point and the
option text ("size: small, large, and color: red"), lower-cased. Two engines:

* ``bm25s`` (default; the name is kept from its first implementation, on the bm25s package):
  ``LuceneBM25``, our pure-Python re-implementation of what WebShop's pyserini index returns:
  pyserini's default English analysis (``Analyzer``), Lucene 8's ``BM25Similarity`` with
  pyserini's k1 = 0.9, b = 0.4 in float32 arithmetic, document lengths stored in Lucene's lossy
  one-byte norm (``encode_length`` / ``decode_length``), scores of repeated query terms
  multiplied by their count, only documents that match a term returned, and equal scores
  ordered by the document id (the asin) ascending, as pyserini's searcher sorts them.
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
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from envs.webshop.catalog import Product

SEARCH_RETURN_N = 50
PRODUCTS_PER_PAGE = 10
MIN_JAVA = 21
K1, B = np.float32(0.9), np.float32(0.4)
#: Lucene's English stop words (EnglishAnalyzer.ENGLISH_STOP_WORDS_SET, pyserini's default).
STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)


def product_document(product: Product) -> str:
    option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product.options.items())
    first_bullet = product.bullets[0] if product.bullets else ""
    return " ".join([product.title, product.description, first_bullet, option_text]).lower()


class SearchEngine(Protocol):
    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        """ASINs of the best ``k`` matches, best first."""


# Lucene's StandardTokenizer follows Unicode word boundaries (UAX #29): a punctuation mark joins
# the characters either side when both are letters (MidLetter/MidNumLet: "men's", "e.g") or both
# are digits (MidNum/MidNumLet: "3.5", "1,000"); "t-shirt" and "a.1" split. Underscores join
# (ExtendNumLet). Ideographic scripts, which Lucene cuts per character, do not occur in catalogs.
_RUN = re.compile(r"\w+")
_MID_LETTER = frozenset(":\u00b7\u0387\u05f4\u2027\ufe13\ufe55\uff1a")
_MID_NUM = frozenset(",;\u037e\u0589\u060c\u060d\u066c\u07f8\u2044\ufe10\ufe14\ufe50\ufe54\uff0c\uff1b")
_MID_NUM_LET = frozenset(".'\u2018\u2019\u2024\ufe52\uff07\uff0e")
_POSSESSIVE = ("'s", "\u2019s", "\uff07s")  # EnglishPossessiveFilter's suffixes


def _joins(left: str, mid: str, right: str) -> bool:
    if left.isalpha() and right.isalpha():
        return mid in _MID_LETTER or mid in _MID_NUM_LET
    if left.isdigit() and right.isdigit():
        return mid in _MID_NUM or mid in _MID_NUM_LET
    return False


def tokenize(text: str) -> list[str]:
    """Lucene StandardTokenizer's tokens of ``text`` (see the comment above)."""
    tokens: list[str] = []
    end = -2
    for m in _RUN.finditer(text):
        start = m.start()
        if tokens and start == end + 1 and _joins(text[end - 1], text[end], text[start]):
            tokens[-1] += text[end] + m.group()
        else:
            tokens.append(m.group())
        end = m.end()
    return [t for t in tokens if t.strip("_")]


class Analyzer:
    """Text -> index terms, as pyserini's default English analyzer (WebShop's index uses it).

    StandardTokenizer, possessive "'s" dropped, lower-cased, Lucene's English stop words
    dropped, Porter-stemmed. Lucene ports Porter's own C implementation, which differs from
    PyStemmer's Snowball Porter in two measured ways, corrected here: words of one or two
    letters are not stemmed (Snowball turns "s" into "" and "is" into "i"), and "-logi" becomes
    "-log" when a syllable precedes it ("technology" -> "technolog", Snowball "technologi").
    """

    def __init__(self):
        import Stemmer

        self._stemmer = Stemmer.Stemmer("porter")

    def __call__(self, text: str) -> list[str]:
        words = (w[:-2] if w.lower().endswith(_POSSESSIVE) else w for w in tokenize(text))
        kept = [w for w in (w.lower() for w in words) if w and w not in STOP_WORDS]
        terms = [w if len(w) <= 2 else _logi(s) for w, s in zip(kept, self._stemmer.stemWords(kept))]
        return [t for t in terms if t]


def _measure(stem: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``stem``."""
    m, prev_vowel = 0, False
    for i, ch in enumerate(stem):
        vowel = ch in "aeiou" or (ch == "y" and i > 0 and not prev_vowel)
        m += prev_vowel and not vowel
        prev_vowel = vowel
    return m


def _logi(stem: str) -> str:
    return stem[:-1] if stem.endswith("logi") and _measure(stem[:-4]) > 0 else stem


# Lucene's SmallFloat.intToByte4 / byte4ToInt: lengths below 24 are exact; above, 3 mantissa
# bits are kept (rounding down), so e.g. 41 -> 40 and 100 -> 96.
_EXACT_NORMS = 24


def _long_to_int4(i: int) -> int:
    bits = i.bit_length()
    if bits < 4:
        return i
    shift = bits - 4
    return ((i >> shift) & 0x07) | ((shift + 1) << 3)


def _int4_to_long(i: int) -> int:
    bits, shift = i & 0x07, (i >> 3) - 1
    return bits if shift == -1 else (bits | 0x08) << shift


def encode_length(length: int) -> int:
    """The norm byte (0..255) Lucene stores for a field of ``length`` terms."""
    return length if length < _EXACT_NORMS else _EXACT_NORMS + _long_to_int4(length - _EXACT_NORMS)


def decode_length(byte: int) -> int:
    """The length Lucene scores with for a stored norm byte."""
    return byte if byte < _EXACT_NORMS else _EXACT_NORMS + _int4_to_long(byte - _EXACT_NORMS)


class LuceneBM25:
    """Lucene's BM25 ranking over documents ``texts`` with ids ``ids`` (see the module docstring)."""

    def __init__(self, ids: Sequence[str], texts: Sequence[str]):
        self.analyze = Analyzer()
        self._asins = list(ids)
        docs = [self.analyze(t) for t in texts]
        n = len(docs)
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for d, terms in enumerate(docs):
            for term, tf in Counter(terms).items():
                ids_, tfs = postings.setdefault(term, ([], []))
                ids_.append(d)
                tfs.append(tf)
        self._postings = {t: (np.array(i), np.array(f, dtype=np.float32)) for t, (i, f) in postings.items()}
        self._idf = {t: np.float32(np.log(1 + (n - len(i) + 0.5) / (len(i) + 0.5))) for t, (i, _) in postings.items()}
        avgdl = np.float32(sum(map(len, docs)) / n)
        scored_len = np.array([decode_length(encode_length(len(d))) for d in docs], dtype=np.float32)
        one = np.float32(1)
        self._inv_norm = one / (K1 * ((one - B) + B * scored_len / avgdl))
        self._tie_rank = np.argsort(np.argsort(np.array(self._asins)))  # position in id order

    @classmethod
    def for_products(cls, products: Sequence[Product]) -> LuceneBM25:
        return cls([p.asin for p in products], [product_document(p) for p in products])

    def scores(self, query: str) -> np.ndarray:
        """float32 score of every document (0 where no query term matches)."""
        total = np.zeros(len(self._asins))
        one = np.float32(1)
        for term, count in Counter(self.analyze(query)).items():
            if term not in self._postings:
                continue  # Lucene ignores terms no document has
            ids, tfs = self._postings[term]
            weight = np.float32(count) * self._idf[term]
            total[ids] += weight - weight / (one + tfs * self._inv_norm[ids])
        return total.astype(np.float32)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[str]:
        scores = self.scores(query)
        hits = np.flatnonzero(scores > 0)
        order = hits[np.lexsort((self._tie_rank[hits], -scores[hits]))][:k]
        return [self._asins[i] for i in order]


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
