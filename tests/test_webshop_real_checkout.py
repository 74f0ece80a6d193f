"""WebShop's own code (``web_agent_site``) on a tiny generated catalog, through our adapter.

Runs only when ``WEBSHOP_CHECKOUT`` names a WebShop checkout and its imports are installed
(docs/webshop.md); skips otherwise. ``WEBSHOP_SPACY_MODEL`` names a spaCy model package to load
where WebShop loads ``en_core_web_sm``. The checkout's ``web_agent_site`` is copied into a
temporary folder beside a 40-product catalog from our generator, in WebShop's small layout.
The one part that is not WebShop's: the search index. WebShop queries pyserini (Java >= 21);
here a ``pyserini.search.lucene`` module backed by our ``LuceneBM25`` (which agrees with Lucene
on the first page of 200 of 200 measured queries) reads the documents WebShop's indexing script
would write. Everything else (loader, prices, goals, pages, clicks, reward) is WebShop's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

CHECKOUT = os.environ.get("WEBSHOP_CHECKOUT")
NEEDED = ("spacy", "thefuzz", "bs4", "gym", "cleantext", "rank_bm25", "flask", "rich", "torch", "Stemmer")
if not CHECKOUT or not (Path(CHECKOUT) / "web_agent_site").is_dir():
    pytest.skip("set WEBSHOP_CHECKOUT to a WebShop checkout to run its own code", allow_module_level=True)
_missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
if _missing:
    pytest.skip(f"WebShop's imports are not installed: {', '.join(_missing)}", allow_module_level=True)

from envs.webshop.config import WebShopConfig  # noqa: E402
from envs.webshop.env import WebShopEnv, make_webshop_env  # noqa: E402
from envs.webshop.generate import generate_catalog  # noqa: E402
from envs.webshop.policies import goal_query  # noqa: E402
from envs.webshop.search import LuceneBM25  # noqa: E402

PRODUCTS = 40
GROUP = 4


class _Hit:
    def __init__(self, docid: str):
        self.docid = docid


class _Doc:
    def __init__(self, raw: str):
        self._raw = raw

    def raw(self) -> str:
        return self._raw


class _Searcher:
    """pyserini's LuceneSearcher surface that WebShop uses, over documents.jsonl in the index folder."""

    def __init__(self, index_dir: str):
        lines = (Path(index_dir) / "documents.jsonl").read_text().splitlines()
        docs = [json.loads(line) for line in lines]
        self._raw = {d["id"]: json.dumps({"id": d["id"]}) for d in docs}
        self._engine = LuceneBM25([d["id"] for d in docs], [d["contents"] for d in docs])

    def search(self, query: str, k: int = 10) -> list[_Hit]:
        return [_Hit(asin) for asin in self._engine.search(query, k)]

    def doc(self, docid: str) -> _Doc:
        return _Doc(self._raw[docid])


def install_stand_ins() -> None:
    """The pyserini module above, and the spaCy model alias (WEBSHOP_SPACY_MODEL)."""
    lucene = types.ModuleType("pyserini.search.lucene")
    lucene.LuceneSearcher = _Searcher
    for name in ("pyserini", "pyserini.search"):
        sys.modules.setdefault(name, types.ModuleType(name))
    sys.modules["pyserini.search.lucene"] = lucene
    alias = os.environ.get("WEBSHOP_SPACY_MODEL")
    if alias:
        import spacy

        load = spacy.load
        spacy.load = lambda name, *a, **k: load(alias if name == "en_core_web_sm" else name, *a, **k)


def write_checkout(root: Path) -> Path:
    """WebShop's code plus a tiny catalog in its small layout (and the index documents)."""
    shutil.copytree(Path(CHECKOUT) / "web_agent_site", root / "web_agent_site")
    products, attributes, human = generate_catalog(PRODUCTS, seed=3)
    (root / "data").mkdir()
    for name, content in (("items_shuffle_1000.json", products), ("items_ins_v2_1000.json", attributes),
                          ("items_human_ins.json", human)):
        (root / "data" / name).write_text(json.dumps(content))
    index = root / "search_engine" / "indexes_1k"
    index.mkdir(parents=True)
    shop = WebShopEnv(WebShopConfig(catalog_dir=None, num_products=PRODUCTS, catalog_seed=3)).shop
    from envs.webshop.search import product_document

    index.joinpath("documents.jsonl").write_text(
        "".join(json.dumps({"id": p.asin, "contents": product_document(p)}) + "\n" for p in shop.catalog.products))
    return root


def real_config(root: Path) -> WebShopConfig:
    return WebShopConfig(webshop_checkout=str(root), webshop_num_products=1000)


def first_look(env, index: int) -> dict:
    """What a group member sees: instruction, price bound, first results page."""
    reset = env.reset("valid", index)
    goal = env._env.server.goals[int(reset.task_id.split("/")[1])]
    page = env.step(f"search[{goal_query(reset.task)}]").observation
    return {"task": reset.task, "price_upper": goal["price_upper"], "first_page": page}


def dump(root: str) -> None:
    """Entry point of the subprocess: a fresh process's view of the first goals, as JSON."""
    install_stand_ins()
    env = make_webshop_env(real_config(Path(root)))
    print(json.dumps([first_look(env, i) for i in range(5)]))


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    install_stand_ins()
    root = write_checkout(tmp_path_factory.mktemp("webshop"))
    yield root
    for name in [m for m in sys.modules if m.startswith("web_agent_site")]:
        del sys.modules[name]


def test_group_siblings_share_the_task_in_webshops_own_code(checkout):
    envs = [make_webshop_env(real_config(checkout)) for _ in range(GROUP)]
    assert len({id(e._env.server) for e in envs}) == 1  # one server per process
    for index in range(5):
        looks = [first_look(e, index) for e in envs]
        assert all(look == looks[0] for look in looks)
        assert "Page 1 (Total results:" in looks[0]["first_page"]
    # Another process (a fresh server) sees the same tasks: prices and bounds come from goal_seed.
    out = subprocess.run([sys.executable, "-c", f"import tests.test_webshop_real_checkout as t; t.dump({str(checkout)!r})"],
                         capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent)
    assert json.loads(out.stdout.splitlines()[-1]) == [first_look(envs[0], i) for i in range(5)]


def test_siblings_do_not_share_a_session(checkout):
    a, b = make_webshop_env(real_config(checkout)), make_webshop_env(real_config(checkout))
    a.reset("valid", 0)
    start = b.reset("valid", 0)
    a.step("search[anything at all]")
    assert b.step("click[nothing]").observation == start.observation  # b is still on its search page


def test_embedded_pages_equal_webshops_text(checkout):
    """Same catalog, goal seed and actions: the embedded shop's text is WebShop's, done page included."""
    real = make_webshop_env(real_config(checkout))
    embedded = WebShopEnv(WebShopConfig(num_products=PRODUCTS, catalog_seed=3))
    for index in range(4):
        seen = []
        for env in (real, embedded):
            reset = env.reset("valid", index)
            pages = [reset.observation]
            step = env.step(f"search[{goal_query(reset.task)}]")
            pages.append(step.observation)
            option = next((a for a in reversed(step.admissible) if a.startswith("click[b0")), None)
            for action in (option, "click[description]", "click[< prev]", "click[features]", "click[< prev]",
                           "click[reviews]", "click[< prev]", "click[next >]"):
                step = env.step(action)
                pages.append((step.observation, step.admissible))
            step = env.step(option)
            pages.append(env.step(step.admissible[-1]).observation)  # choose an option value
            pages.append(env.step("click[buy now]").observation)
            seen.append(pages)
        assert seen[0] == seen[1]


def test_bad_actions_never_raise_and_a_purchase_scores(checkout):
    env = make_webshop_env(real_config(checkout))
    reset = env.reset("valid", 1)
    for action in ("", "click[nothing]", "search[]", "]]][[[", "click[buy now]"):
        step = env.step(action)
        assert step.reward == 0 and not step.done
    step = env.step(f"search[{goal_query(reset.task)}]")
    asin = next(a for a in step.admissible if a.startswith("click[b0"))
    env.step(asin)
    bought = env.step("click[buy now]")
    assert bought.done and 0.0 <= bought.info["score"] <= 1.0


def test_embedded_siblings_share_the_task():
    config = WebShopConfig(num_products=200)
    envs = [WebShopEnv(config) for _ in range(GROUP)]
    for index in range(5):
        looks = []
        for env in envs:
            reset = env.reset("valid", index)
            goal = env.shop.catalog.goals[int(reset.task_id.split("/")[1])]
            page = env.step(f"search[{goal_query(reset.task)}]").observation
            looks.append((reset.task, goal.price_upper, page))
        assert all(look == looks[0] for look in looks)
