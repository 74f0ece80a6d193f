"""Every marked table in README.md and docs/*.md is what benchmarks.doc_tables prints from the
committed result files (fix: python -m benchmarks.doc_tables --write)."""

from __future__ import annotations

import pytest

from benchmarks.doc_tables import BLOCKS, DOCS, blocks, render, rewrite

pytest.importorskip("statsmodels", reason="the dev extra: pip install -e '.[dev]'")


@pytest.mark.parametrize("doc", DOCS, ids=str)
def test_doc_tables_equal_what_the_result_files_give(doc):
    for name, body in blocks(doc.read_text()):
        assert body == render(name), f"{doc}: table {name} differs from {BLOCKS[name][0]}; " \
                                     "run python -m benchmarks.doc_tables --write"


def test_the_learning_and_numerics_docs_carry_their_tables():
    names = {name for doc in DOCS for name, _ in blocks(doc.read_text())}
    assert {"learning-dev-3dd2314", "numerics-one-step", "benchmarks-numerics"} <= names


def test_a_changed_figure_is_caught_and_rewritten(tmp_path):
    doc = "text\n<!-- table: numerics-one-step -->\n| stale |\n<!-- /table -->\nmore\n"
    [(name, body)] = blocks(doc)
    assert name == "numerics-one-step" and body == "| stale |" != render(name)
    assert blocks(rewrite(doc))[0][1] == render(name)
    with pytest.raises(KeyError, match="not in benchmarks.doc_tables.BLOCKS"):
        render("no-such-table")
