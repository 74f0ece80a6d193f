"""WebShop's purchase score, as WebShop's ``get_reward`` computes it.

score = r_type * (attribute matches + option matches + [price <= bound])
                 / (#goal attributes + #goal options + 1)

* attribute match: a goal attribute fuzzy-matches one of the bought product's attributes
  (token-set ratio > 85), or is a substring of its title, bullet points or description;
* option match: a goal option fuzzy-matches (token-set ratio > 85) one of the chosen options,
  both first colour-normalised (the first of WebShop's 102 colour words the value contains);
* r_type (type score): 1.0, or 0.5 when neither the query nor >= 2 category levels nor more
  than 20 % of the goal title's nouns match, 0.1 when under 10 % of the nouns match, 0.0 when
  none do.

Fuzzy ratio: WebShop pins thefuzz 0.19, whose ``token_set_ratio`` (without the optional
python-Levenshtein) drops the Latin-1 range U+0080-U+00FF, turns every non-word character into
a space, lower-cases, and scores the three token-set strings with ``difflib.SequenceMatcher``,
each ratio rounded to an integer. ``fuzzy_ratio`` does the same with the standard library:
difflib's matching blocks are not always a longest common subsequence, so an LCS-based ratio
(rapidfuzz, thefuzz >= 0.20) scores some pairs higher than WebShop does.

Nouns without spaCy. WebShop keeps the NOUN/PROPN tokens of spaCy's ``en_core_web_sm`` tagging
of the two titles; that model is not on PyPI from its authors. ``title_nouns`` approximates it
with spaCy's tokenisation of titles (hyphens and "'s" split off, bare numbers dropped) and the
tag the model gives most title-cased product words: every word is a noun except function
words. The model's other choices depend on context (it tags "Plus", "Nordic" or "Hooded" a noun
in one title and not in the next), which no word list reproduces. Agreement with the model on the catalog's titles is
measured by ``benchmarks/webshop_fidelity.py`` (docs/webshop.md). Nouns only move r_type when
the bought product is not the goal's own product (the goal's title is the product's title).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher

from envs.webshop.catalog import Goal, Product

#: WebShop's 102 colour words (its normalize.py COLOR_SET), checked in this (alphabetical) order:
#: an option becomes the first one it contains, by list order, not by position in the option:
#: "dark grey" -> "dark", "light blue" -> "blue" ("blue" precedes "light").
COLOR_WORDS = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue",
    "blush", "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne",
    "charcoal", "cheetah", "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper",
    "coral", "cranberry", "cream", "crystal", "dark", "denim", "eggplant", "elephant", "espresso",
    "fuchsia", "gold", "granite", "grape", "graphite", "grass", "gray", "green", "grey", "heather",
    "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac", "lime",
    "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom",
    "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum",
    "purple", "rainbow", "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver",
    "skull", "slate", "steel", "stone", "stonewash", "sunflower", "tan", "taupe", "teal", "tiger",
    "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)

#: Function words (determiners, pronouns, prepositions, conjunctions, auxiliaries, particles).
FUNCTION_WORDS = frozenset(
    "a an the this that these those my your his her its our their i you he she it we they me "
    "him us them of in on at by for with from to into onto under about after before "
    "between through during without within along across behind beyond up down out off "
    "and or but nor so yet if than as is are was were be been being am do does did have has "
    "had will would shall should can could may might must not very too also just only "
    "all any both each few more most other some such own same per via vs".split()
)

MATCH_THRESHOLD = 85  # fuzzy scores must be strictly above this

_NON_WORD = re.compile(r"\W")
_LATIN1 = dict.fromkeys(range(128, 256))  # thefuzz's force_ascii drops exactly these code points
# spaCy's tokens of a title, as far as nouns go: alphanumeric runs (hyphen and apostrophe split).
_WORD = re.compile(r"[^\W_]+")
_POSSESSIVE = re.compile(r"['\u2019]s\b")  # spaCy's separate "'s" token (a particle, not a noun)


def _process(text: str) -> str:
    return _NON_WORD.sub(" ", text.translate(_LATIN1)).lower().strip()


def _ratio(a: str, b: str) -> int:
    if a == b:
        return 100
    if not a or not b:
        return 0
    return int(round(100 * SequenceMatcher(None, a, b).ratio()))


def fuzzy_ratio(a: str, b: str) -> int:
    """thefuzz 0.19's ``token_set_ratio`` (see the module docstring); 0 if one side is empty."""
    a, b = _process(a), _process(b)
    if not a or not b:
        return 0
    tokens_a, tokens_b = set(a.split()), set(b.split())
    common = " ".join(sorted(tokens_a & tokens_b))
    comb_a = (common + " " + " ".join(sorted(tokens_a - tokens_b))).strip()
    comb_b = (common + " " + " ".join(sorted(tokens_b - tokens_a))).strip()
    return max(_ratio(common, comb_a), _ratio(common, comb_b), _ratio(comb_a, comb_b))


def normalize_color(value: str) -> str:
    """The first colour word contained in ``value`` (substring test), else ``value`` itself."""
    for color in COLOR_WORDS:
        if color in value:
            return color
    return value


def title_nouns(title: str) -> list[str]:
    """Noun approximation for a product title (see the module docstring)."""
    return [w for w in _WORD.findall(_POSSESSIVE.sub("", title.lower())) if not w.isdigit() and w not in FUNCTION_WORDS]


@dataclass(frozen=True)
class Score:
    """The purchase score and its parts (WebShop's ``verbose`` reward info)."""

    total: float
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float
    num_attr_matches: int
    num_option_matches: int
    r_price: bool

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def type_score(product: Product, goal: Goal) -> tuple[float, bool, bool, float]:
    """(r_type, query_match, category_match, title_score)."""
    query_match = product.query == goal.query
    bought = {x.strip() for x in product.product_category.split("›")}
    wanted = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(bought & wanted) >= 2
    desired = title_nouns(goal.name)
    purchased = title_nouns(product.title)
    if desired:
        title_score = len(set(purchased) & set(desired)) / len(desired)
    else:
        title_score = 0.2
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def attribute_matches(product: Product, goal: Goal) -> int:
    text_fields = (product.title.lower(), " ".join(product.bullets).lower(), product.description.lower())
    matches = 0
    for wanted in goal.attributes:
        if any(fuzzy_ratio(have, wanted) > MATCH_THRESHOLD for have in product.attributes):
            matches += 1
        elif any(wanted in field for field in text_fields):
            matches += 1
    return matches


def option_matches(chosen: list[str], goal_options: tuple[str, ...]) -> int:
    chosen_n = [normalize_color(o) for o in chosen]
    matches = 0
    for wanted in (normalize_color(o) for o in goal_options):
        if any(fuzzy_ratio(have, wanted) > MATCH_THRESHOLD for have in chosen_n):
            matches += 1
    return matches


def purchase_score(product: Product, goal: Goal, price: float, options: dict[str, str]) -> Score:
    """Score buying ``product`` at ``price`` with the chosen ``options`` {name: value}."""
    r_type, query_match, category_match, title_score = type_score(product, goal)
    r_price = price <= goal.price_upper
    n_attr = attribute_matches(product, goal)
    n_opt = option_matches(list(options.values()), goal.goal_options)
    total = (n_attr + n_opt + r_price) / (len(goal.attributes) + len(goal.goal_options) + 1)
    return Score(
        total=total * r_type,
        r_type=r_type,
        query_match=query_match,
        category_match=category_match,
        title_score=title_score,
        num_attr_matches=n_attr,
        num_option_matches=n_opt,
        r_price=r_price,
    )
