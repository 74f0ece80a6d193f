"""WebShop reward, component by component, against hand-computed values.

Fuzzy scores are thefuzz's token_set_ratio: with sect = sorted common tokens and
comb_x = sect + the tokens only in x, the score is max(ratio(sect, comb_a), ratio(sect, comb_b),
ratio(comb_a, comb_b)), ratio = 100 * 2M / (len_a + len_b), M = matched characters (LCS).
"""

from __future__ import annotations

import pytest

from tests.conftest import require

require("Stemmer", extra="webshop")

from envs.webshop.catalog import Goal, Product  # noqa: E402
from envs.webshop.config import env_reward  # noqa: E402
from envs.webshop.reward import (  # noqa: E402
    attribute_matches,
    fuzzy_ratio,
    normalize_color,
    option_matches,
    purchase_score,
    title_nouns,
    type_score,
)

PATH = "Beauty & Personal Care › Personal Care › Deodorants"


def product(**kw) -> Product:
    base = dict(
        asin="B000000001", title="Earth Mama Deodorant Stick - Sensitive Skin", category="beauty",
        query="deodorant", product_category=PATH, description="A natural deodorant with coconut oil.",
        bullets=("Paraben Free formula",), price_tag="$9.0", price=9.0,
        options={"scent": ("bright citrus", "light blue"), "size": ("2.5 ounce (pack of 1)",)},
        attributes=("aluminum free", "long lasting"), image="",
    )
    base.update(kw)
    return Product(**base)


def goal(**kw) -> Goal:
    base = dict(
        asin="B000000001", category="beauty", query="deodorant",
        name="Earth Mama Deodorant Stick - Sensitive Skin", product_category=PATH,
        instruction_text="i need a deodorant", attributes=("aluminium free", "paraben free", "dry skin"),
        goal_options=("navy blue", "3 ounce (pack of 2)"), price_upper=10.0,
    )
    base.update(kw)
    return Goal(**base)


def test_fuzzy_ratio_near_misses():
    # "aluminum free" vs "aluminium free": comb strings "free aluminum" (13) / "free aluminium" (14),
    # LCS 13 -> 2*13/27 = 96.3 -> 96: matches (> 85).
    assert fuzzy_ratio("aluminum free", "aluminium free") == 96
    # "dry skin" vs "oily skin": "skin dry" (8) / "skin oily" (9), LCS "skin " + "y" = 6 -> 70.6 -> 71.
    assert fuzzy_ratio("dry skin", "oily skin") == 71
    # punctuation and case are processed away
    assert fuzzy_ratio("Long-Lasting", "long lasting") == 100
    assert fuzzy_ratio("", "anything") == 0


def test_attribute_component():
    p = product()
    # aluminium free: fuzzy 96 with "aluminum free" -> match; paraben free: substring of the
    # bullets ("paraben free formula") -> match; dry skin: fuzzy below 86 with both attributes
    # and not a substring of title, bullets or description -> no match.
    assert attribute_matches(p, goal()) == 2
    assert attribute_matches(p, goal(attributes=("coconut oil",))) == 1  # in the description
    assert attribute_matches(p, goal(attributes=("cruelty free",))) == 0


def test_option_component_with_colour_normalisation_and_fuzzy_sizes():
    # "navy blue" and "light blue" both normalise to "blue" -> match.
    assert normalize_color("navy blue") == normalize_color("light blue") == "blue"
    # "3 ounce (pack of 2)" vs chosen "2.5 ounce (pack of 1)": sect "2 of ounce pack" (15),
    # comb "2 of ounce pack 3" (17) -> 2*15/32 = 93.75 -> 94 > 85 -> match (a near miss counts).
    assert fuzzy_ratio("2.5 ounce (pack of 1)", "3 ounce (pack of 2)") == 94
    chosen = ["light blue", "2.5 ounce (pack of 1)"]
    assert option_matches(chosen, ("navy blue", "3 ounce (pack of 2)")) == 2
    assert option_matches(["bright citrus"], ("navy blue", "lavender")) == 0
    assert option_matches([], ("navy blue",)) == 0


def test_type_component():
    p = product()
    assert type_score(p, goal()) == (1.0, True, True, 1.0)
    # Nouns of the goal title: earth mama deodorant stick sensitive skin (6); a bought title
    # sharing only "deodorant": 1/6; different query and category -> r_type 0.5.
    other = product(title="Lumiere Deodorant", query="soap", product_category="Home › Kitchen › Soap")
    r_type, query_match, category_match, title_score = type_score(other, goal())
    assert (query_match, category_match) == (False, False)
    assert title_score == pytest.approx(1 / 6)
    assert r_type == 0.5
    # Same query keeps r_type 1.0 despite the weak title overlap.
    assert type_score(product(title="Lumiere Deodorant"), goal())[0] == 1.0
    # 1 of 11 goal nouns in common: title_score 1/11 = 0.091 < 0.1 -> r_type 0.1.
    long_name = "deodorant alpha bravo charlie delta echo foxtrot golf hotel india juliet"
    assert type_score(product(title="Deodorant"), goal(name=long_name))[0] == 0.1
    # No common noun -> 0, whatever the query says.
    assert type_score(product(title="Garden Hose"), goal())[0] == 0.0
    # Two common category levels are a category match.
    two = "Beauty & Personal Care › Personal Care › Soap"
    assert type_score(product(product_category=two), goal())[2] is True


def test_title_nouns_without_spacy():
    nouns = title_nouns("Earth Mama Deodorant Stick - Sensitive Skin, 3 Ounce (Pack of 2) for Women's")
    assert nouns == ["earth", "mama", "deodorant", "stick", "sensitive", "skin", "ounce", "pack", "women"]


def test_total_score_and_env_reward():
    p = product()
    # attributes 2/3, options 2/2, price 9 <= 10: (2 + 2 + 1) / (3 + 2 + 1) = 5/6, r_type 1.
    s = purchase_score(p, goal(), p.price, {"scent": "light blue", "size": "2.5 ounce (pack of 1)"})
    assert s.total == pytest.approx(5 / 6)
    assert (s.num_attr_matches, s.num_option_matches, s.r_price, s.r_type) == (2, 2, True, 1.0)
    # over the bound: price component 0 -> 4/6; no options chosen -> 2/6.
    chosen = {"scent": "light blue", "size": "2.5 ounce (pack of 1)"}
    assert purchase_score(p, goal(), 12.0, chosen).total == pytest.approx(4 / 6)
    assert purchase_score(p, goal(), 9.0, {}).total == pytest.approx(3 / 6)
    # a perfect purchase is exactly 1.0
    perfect = goal(attributes=("aluminum free",), goal_options=("bright citrus",))
    assert purchase_score(p, perfect, 9.0, {"scent": "bright citrus"}).total == 1.0
    # SPEC §1 reward modes
    assert env_reward(1.0, "binary") == 10.0 and env_reward(5 / 6, "binary") == 0.0
    assert env_reward(0.5, "graded") == 5.0
