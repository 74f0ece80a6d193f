"""Generate a shop catalog in WebShop's three-file schema, deterministically from a seed.

    python -m envs.webshop.generate --out data/webshop --products 1000 --seed 0

Products spread evenly over WebShop's five categories (see ``vocab.py``); each gets 1-3
human-style instructions (attributes + options it really has), so every goal has a product that
scores 1.0. Same seed and count, byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import random
import string
from pathlib import Path

from envs.common.cli_args import ArgumentParser, integer
from envs.webshop.catalog import ATTRIBUTES_FILE, GOALS_FILE, PRODUCTS_FILE
from envs.webshop.vocab import BRANDS, DESCRIPTORS, OPENINGS, TYPES

_ASIN_CHARS = string.ascii_uppercase + string.digits


def _asin(rng: random.Random, taken: set[str]) -> str:
    while True:
        asin = "B0" + "".join(rng.choice(_ASIN_CHARS) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def _title_case(text: str) -> str:
    return " ".join(w[:1].upper() + w[1:] for w in text.split())


def _product(rng: random.Random, category: str, kind: dict, asin: str) -> tuple[dict, list[str]]:
    brand = rng.choice(BRANDS[category])
    noun = rng.choice(kind["nouns"])
    attrs = rng.sample(kind["attrs"], k=min(len(kind["attrs"]), rng.randint(3, 4)))
    shown = attrs[: rng.randint(1, 2)]  # the title names some attributes; the rest live in text
    title = f"{brand} {_title_case(rng.choice(DESCRIPTORS))} {_title_case(noun)}"
    title += " - " + ", ".join(_title_case(a) for a in shown)
    options = {}
    for name, values in kind["options"].items():
        picked = sorted(rng.sample(range(len(values)), k=rng.randint(2, len(values))))
        options[_title_case(name)] = [{"value": _title_case(values[i]), "image": None} for i in picked]
    lo, hi = kind["price"]
    low = round(rng.uniform(lo, hi), 2)
    pricing = f"${low:.2f}"
    if rng.random() < 0.2:  # some products list a price range, as scraped Amazon pages do
        pricing += f" - ${low * rng.uniform(1.05, 1.3):.2f}"
    bullets = [f"{_title_case(a)}: this {noun} is made to be {a}." for a in attrs[1:]]
    bullets.append(f"Trusted by customers: {brand} {noun} backed by a 30-day guarantee.")
    description = (
        f"The {brand} {noun} is a {rng.choice(DESCRIPTORS)} choice for everyday use. "
        f"It is {attrs[0]} and {attrs[-1]}, and ships in recyclable packaging."
    )
    record = {
        "asin": asin,
        "name": title,
        "category": category,
        "query": kind["query"],
        "product_category": kind["path"],
        "pricing": pricing,
        "small_description": bullets,
        "full_description": description,
        "customization_options": options,
        "images": [""],  # WebShop's loader reads images[0]; no image files are generated
        "brand": brand,
    }
    return record, attrs


def _instruction(rng: random.Random, noun: str, attrs: list[str], options: dict) -> dict:
    asked = rng.sample(attrs, k=rng.randint(1, 2))
    opening = rng.choice(OPENINGS)
    if rng.random() < 0.5:
        text = f"{opening} {noun} that is {' and '.join(asked)}"
    else:
        text = f"{opening} {asked[0]} {noun}" + (f" with {asked[1]}" if len(asked) > 1 else "")
    chosen = []
    for name, values in options.items():
        if rng.random() < 0.8:
            chosen.append((name.lower().replace(" name", ""), rng.choice(values)["value"].lower()))
    for k, (name, value) in enumerate(chosen):
        text += f" {'in' if k == 0 else 'and'} {value} {name}"
    return {
        "instruction": text,
        "instruction_attributes": asked,
        "instruction_options": [value for _, value in chosen],
    }


def generate_catalog(num_products: int = 1000, seed: int = 0) -> tuple[list, dict, dict]:
    """Return (products, attributes, human instructions) as WebShop stores them."""
    if num_products < len(TYPES):
        raise ValueError(f"num_products={num_products}: need at least one per category ({len(TYPES)})")
    rng = random.Random(seed)
    kinds = [(cat, kind) for cat, kinds in TYPES.items() for kind in kinds]
    taken: set[str] = set()
    products, attributes, human = [], {}, {}
    for i in range(num_products):
        category, kind = kinds[i % len(kinds)]
        asin = _asin(rng, taken)
        record, attrs = _product(rng, category, kind, asin)
        products.append(record)
        noun = kind["nouns"][0]
        goals = [_instruction(rng, noun, attrs, record["customization_options"])
                 for _ in range(rng.randint(1, 3))]
        attributes[asin] = {
            "attributes": attrs,
            "instruction": goals[0]["instruction"],
            "instruction_attributes": goals[0]["instruction_attributes"],
        }
        human[asin] = [{"asin": asin, **g} for g in goals]
    rng.shuffle(products)  # WebShop's file is items_*shuffle*.json
    return products, attributes, human


def write_catalog(out: str | Path, num_products: int = 1000, seed: int = 0) -> Path:
    """Generate and write the three files into ``out``; returns the folder."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    products, attributes, human = generate_catalog(num_products, seed)
    for name, data in ((PRODUCTS_FILE, products), (ATTRIBUTES_FILE, attributes), (GOALS_FILE, human)):
        (out / name).write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder to write the three JSON files into")
    parser.add_argument("--products", type=integer(len(TYPES)), default=1000,
                        help=f"number of products (>= {len(TYPES)}: one per category)")
    parser.add_argument("--seed", type=integer(0), default=0, help="generator seed; same seed, same files")
    args = parser.parse_args(argv)
    folder = write_catalog(args.out, args.products, args.seed)
    print(f"wrote {args.products} products to {folder}")


if __name__ == "__main__":
    main()
