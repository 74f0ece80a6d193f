"""Catalog generator (WebShop's three-file schema) and loader errors."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tests.conftest import require

require("Stemmer", extra="webshop")

from envs.webshop.catalog import (  # noqa: E402
    ATTRIBUTES_FILE,
    GOALS_FILE,
    NUM_VALID_GOALS,
    PRODUCTS_FILE,
    CatalogError,
    load_catalog,
)
from envs.webshop.generate import generate_catalog, write_catalog  # noqa: E402


@pytest.fixture(scope="module")
def catalog_dir(tmp_path_factory):
    return write_catalog(tmp_path_factory.mktemp("catalog"), num_products=1000, seed=0)


def test_generator_is_deterministic_and_covers_five_categories(catalog_dir, tmp_path):
    again = write_catalog(tmp_path, num_products=1000, seed=0)
    for name in (PRODUCTS_FILE, ATTRIBUTES_FILE, GOALS_FILE):
        assert (again / name).read_bytes() == (catalog_dir / name).read_bytes()
    other, _, _ = generate_catalog(1000, seed=1)
    products = json.loads((catalog_dir / PRODUCTS_FILE).read_text())
    assert other != products
    assert len(products) == 1000
    counts = Counter(p["category"] for p in products)
    assert set(counts) == {"beauty", "food", "fashion", "furniture", "electronics"}
    assert min(counts.values()) == 200


def test_records_follow_webshop_schema(catalog_dir):
    products = json.loads((catalog_dir / PRODUCTS_FILE).read_text())
    attrs = json.loads((catalog_dir / ATTRIBUTES_FILE).read_text())
    human = json.loads((catalog_dir / GOALS_FILE).read_text())
    p = products[0]
    assert {"asin", "name", "category", "query", "product_category", "pricing", "small_description",
            "full_description", "customization_options", "images"} <= set(p)
    assert " › " in p["product_category"] and p["pricing"].startswith("$")
    assert all({"value", "image"} <= set(v) for vs in p["customization_options"].values() for v in vs)
    assert set(attrs[p["asin"]]) >= {"attributes", "instruction", "instruction_attributes"}
    rec = human[p["asin"]][0]
    assert set(rec) >= {"instruction", "instruction_attributes", "instruction_options"}
    # every instruction asks for attributes and option values its product really has
    options = {v["value"].lower() for vs in p["customization_options"].values() for v in vs}
    assert set(rec["instruction_options"]) <= options
    assert set(rec["instruction_attributes"]) <= set(attrs[p["asin"]]["attributes"])


def test_loader_prices_goals_and_split(catalog_dir):
    catalog = load_catalog(catalog_dir, goal_seed=233)
    assert len(catalog.products) == 1000 and len(catalog.goals) > NUM_VALID_GOALS + 1000
    g = catalog.goals[0]
    assert g.instruction_text.endswith(f", and price lower than {g.price_upper:.2f} dollars")
    assert g.instruction_text.startswith(("i ", "find me", "get me", "looking for"))
    # the bound is one of the next four multiples of 10 above the target's price, never the first
    price = catalog.by_asin[g.asin].price
    assert price < g.price_upper <= (price // 10 + 4) * 10 and g.price_upper % 10 == 0
    assert load_catalog(catalog_dir, goal_seed=233).goals == catalog.goals
    assert load_catalog(catalog_dir, goal_seed=1).goals != catalog.goals


def _corrupt(src, dst, name, edit):
    for n in (PRODUCTS_FILE, ATTRIBUTES_FILE, GOALS_FILE):
        (dst / n).write_bytes((src / n).read_bytes())
    data = json.loads((dst / name).read_text())
    (dst / name).write_text(json.dumps(edit(data)))


def test_missing_file_error_names_the_file(catalog_dir, tmp_path):
    (tmp_path / PRODUCTS_FILE).write_bytes((catalog_dir / PRODUCTS_FILE).read_bytes())
    with pytest.raises(CatalogError, match=ATTRIBUTES_FILE + ".*missing.*envs.webshop.generate"):
        load_catalog(tmp_path)
    with pytest.raises(CatalogError, match="does not exist"):
        load_catalog(tmp_path / "nowhere")


def test_malformed_fields_name_file_and_field(catalog_dir, tmp_path):
    def drop_pricing(products):
        del products[3]["pricing"]
        return products

    _corrupt(catalog_dir, tmp_path, PRODUCTS_FILE, drop_pricing)
    with pytest.raises(CatalogError, match=r"items_shuffle.json: product #3 .*'pricing' is missing"):
        load_catalog(tmp_path)

    def bad_price(products):
        products[0]["pricing"] = "twelve dollars"
        return products

    _corrupt(catalog_dir, tmp_path, PRODUCTS_FILE, bad_price)
    with pytest.raises(CatalogError, match=r"product #0 .*'pricing' 'twelve dollars'"):
        load_catalog(tmp_path)

    def drop_options(human):
        asin = next(iter(human))
        del human[asin][0]["instruction_options"]
        return human

    _corrupt(catalog_dir, tmp_path, GOALS_FILE, drop_options)
    with pytest.raises(CatalogError, match=r"items_human_ins.json: asin \w+ instruction #0: field 'instruction_opt"):
        load_catalog(tmp_path)

    (tmp_path / ATTRIBUTES_FILE).write_text("{not json")
    with pytest.raises(CatalogError, match="items_ins_v2.json is not valid JSON"):
        load_catalog(tmp_path)
