"""Every marked table in README.md and docs/*.md is what benchmarks.doc_tables prints from the
committed result files (fix: python -m benchmarks.doc_tables --write)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.common import RESULTS
from benchmarks.doc_tables import BLOCK, BLOCKS, DOCS, blocks, render, result_files, rewrite

pytest.importorskip("statsmodels", reason="the dev extra: pip install -e '.[dev]'")


@pytest.mark.parametrize("doc", DOCS, ids=str)
def test_doc_tables_equal_what_the_result_files_give(doc):
    for name, body in blocks(doc.read_text()):
        assert body == render(name), f"{doc}: table {name} differs from {BLOCKS[name][0]}; " \
                                     "run python -m benchmarks.doc_tables --write"


def test_every_table_with_committed_results_is_in_a_doc():
    """learning.json's tables wait for the method grid's results; every other registered table is published."""
    names = {name for doc in DOCS for name, _ in blocks(doc.read_text())}
    ready = {name for name in BLOCKS if all((RESULTS / f).is_file() for f in result_files(name))}
    assert ready <= names, f"registered, results committed, but in no doc: {sorted(ready - names)}"
    assert {"learning-dev-3dd2314", "numerics-one-step", "numerics-bf16-sampler", "benchmarks-roofline"} <= ready


def test_benchmarks_md_pastes_no_table_but_the_summary():
    """A table outside the markers is checked by nothing: only the Summary (figures from many files) may be."""
    text = BLOCK.sub("", Path("docs/benchmarks.md").read_text())
    headers = [line for line in text.splitlines() if line.startswith("|---")]
    assert len(headers) == 1 and "| question | target | measured |" in text, \
        "mark the table as a block (benchmarks.doc_tables.BLOCKS)"


def test_a_changed_figure_is_caught_and_rewritten(tmp_path):
    doc = "text\n<!-- table: numerics-one-step -->\n| stale |\n<!-- /table -->\nmore\n"
    [(name, body)] = blocks(doc)
    assert name == "numerics-one-step" and body == "| stale |" != render(name)
    assert blocks(rewrite(doc))[0][1] == render(name)
    with pytest.raises(KeyError, match="not in benchmarks.doc_tables.BLOCKS"):
        render("no-such-table")


def test_an_empty_block_is_filled_without_swallowing_the_next_one():
    # Two blocks not yet written: each is its own block, and rewriting fills each in place.
    doc = ("<!-- table: numerics-one-step -->\n<!-- /table -->\nbetween\n"
           "<!-- table: benchmarks-numerics -->\n<!-- /table -->\n")
    assert blocks(doc) == [("numerics-one-step", ""), ("benchmarks-numerics", "")]
    filled = rewrite(doc)
    assert "\nbetween\n" in filled and blocks(filled) == [("numerics-one-step", render("numerics-one-step")),
                                                          ("benchmarks-numerics", render("benchmarks-numerics"))]
    assert rewrite(filled) == filled
