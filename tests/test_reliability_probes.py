"""The reliability probes (tests/reliability_cases.py): each bad value or odd request gets one clear
line or a 4xx page, never a traceback; their results are the table of docs/reliability.md."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import require
from tests.reliability_cases import PROBES, prepare
from tests.reliability_probes import DOC, RESULT, TABLE_END, TABLE_START, run_probe, table


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    require("flask", extra="webshop")
    from envs.webshop.config import WebShopConfig
    from envs.webshop.env import build_shop
    from envs.webshop.site import create_app

    tmp = tmp_path_factory.mktemp("probes")
    replays = prepare(tmp)
    config = WebShopConfig()
    client = create_app(build_shop(config), config, replays).test_client()
    found = [run_probe(probe, tmp, client) for probe in PROBES]
    RESULT.write_text(json.dumps({"what": "tests/reliability_cases.py, run by tests/test_reliability_probes.py",
                                  "probes": found}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return found


@pytest.mark.slow
def test_every_probe_gets_its_expected_answer(results):
    failed = [r for r in results if not r["passed"]]
    assert not failed, "\n".join(f"{r['command']}: expected {r['expected']}, got {r['status']}: {r['observed']}"
                                 for r in failed)


@pytest.mark.slow
def test_the_docs_table_is_the_result_file(results):
    text = DOC.read_text(encoding="utf-8")
    shown = text[text.index(TABLE_START) + len(TABLE_START):text.index(TABLE_END)].strip()
    assert shown == table(results), "docs/reliability.md is stale: python -m tests.reliability_probes"
