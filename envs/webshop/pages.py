"""WebShop's pages as lists of visible elements, and its page flow.

One list of ``Element``s per page is the single source of both renderings: the text mode the
agent reads (visible strings joined by " [SEP] ", as WebShop's ``convert_html_to_text`` in
simple mode) and the HTML the Flask site serves. The strings and their order follow the
WebShop copy of the published recipe (verl-agent): results show "Page N (Total results: M)",
"< Prev" from page 2 on and "Next >" on every page; item and sub pages go back with "< Prev".

Clickables (WebShop's ``text_to_clickable``): the lower-cased text of every button, then every
product link (asin), then every option value; ``click[search]`` is listed on the search page but
refused, as in WebShop. As in WebShop's text env, ``search[...]`` is accepted on every page,
though the action list offers it only where the search bar shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from envs.webshop.catalog import Catalog, Goal, Product
from envs.webshop.reward import Score, purchase_score
from envs.webshop.search import PRODUCTS_PER_PAGE, SearchEngine

BACK_TO_SEARCH = "Back to Search"
NEXT_PAGE = "Next >"
PREV_PAGE = "< Prev"
BUY_NOW = "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")
#: Cached result lists per process; cleared when full (training issues many distinct queries).
_CACHE_SIZE = 4096


@dataclass(frozen=True)
class Element:
    kind: str  # "text" | "button" | "link" (product asin) | "option" | "heading" (option name)
    text: str
    group: str = ""  # option name, for kind "option"


@dataclass(frozen=True)
class State:
    """Where the shopper is; equal states mean the page did not change (SPEC: WebShop no-op)."""

    page: str = "search"  # search | results | item | description | features | reviews | done
    keywords: tuple[str, ...] = ()
    page_num: int = 1
    asin: str | None = None
    options: tuple[tuple[str, str], ...] = ()  # chosen (name, value)


@dataclass
class Outcome:
    state: State
    accepted: bool  # the action did something on this page (WebShop did not refuse it)
    score: Score | None = None  # set when the step bought something
    error: str = ""


@dataclass
class Shop:
    """A catalog with its search engine; one per process, shared by its envs."""

    catalog: Catalog
    engine: SearchEngine
    _cache: dict[tuple[str, ...], list[str]] = field(default_factory=dict)

    def results(self, keywords: tuple[str, ...]) -> list[str]:
        if keywords not in self._cache:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[keywords] = self.engine.search(" ".join(keywords))
        return self._cache[keywords]

    def clear_cache(self) -> None:
        self._cache.clear()

    def product(self, asin: str) -> Product:
        return self.catalog.by_asin[asin]


def _header(goal: Goal) -> list[Element]:
    return [Element("text", "Instruction:"), Element("text", goal.instruction_text)]


def page_elements(shop: Shop, goal: Goal, state: State, score: Score | None = None) -> list[Element]:
    """The visible elements of ``state``'s page, in document order."""
    if state.page == "search":
        return [Element("text", "WebShop"), *_header(goal), Element("button", "Search")]
    if state.page == "done":
        return done_elements(state, score.total if score is not None else 0.0)
    out = [*_header(goal), Element("button", BACK_TO_SEARCH)]
    if state.page == "results":
        hits = shop.results(state.keywords)
        out.append(Element("text", f"Page {state.page_num} (Total results: {len(hits)})"))
        if state.page_num > 1:
            out.append(Element("button", PREV_PAGE))
        out.append(Element("button", NEXT_PAGE))
        start = (state.page_num - 1) * PRODUCTS_PER_PAGE
        for asin in hits[start:start + PRODUCTS_PER_PAGE]:
            p = shop.product(asin)
            out += [Element("link", asin), Element("text", p.title), Element("text", p.price_tag)]
        return out
    product = shop.product(state.asin)
    out.append(Element("button", PREV_PAGE))
    if state.page == "item":
        for name, values in product.options.items():
            out.append(Element("heading", name))
            out += [Element("option", v, group=name) for v in values]
        out += [Element("text", product.title), Element("text", f"Price: {product.price_tag}"),
                Element("text", "Rating: N.A.")]
        out += [Element("button", s) for s in SUB_PAGES] + [Element("button", BUY_NOW)]
    elif state.page == "description":
        if product.description:  # WebShop's empty paragraph has no text at all
            out.append(Element("text", product.description))
    elif state.page == "features":
        out += [Element("text", b) for b in product.bullets]
    # "reviews": WebShop's data ships no reviews, so the page has only its buttons.
    return out


#: WebShop's done page as its text mode reads it: the template's hidden debugging block is
#: visible text there, with the fields WebShop's server leaves unset rendered as "None" or "".
_DONE_LABELS = ("Target", "asin", "options", "attrs", "price upper", "instuction text", "category",
                "product category", "query", "Goal", "None", "Reward", "Your score (min 0.0, max 1.0)")


def _tojson(options: dict[str, str]) -> str:
    """Flask's ``tojson`` filter: sorted keys, HTML-significant characters escaped."""
    text = json.dumps(options, sort_keys=True)
    for ch, code in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("'", "\\u0027")):
        text = text.replace(ch, code)
    return text


def done_elements(state: State, total: float) -> list[Element]:
    texts = ["Thank you for shopping with us!", "Your code:", "None", "(Paste it in your MTurk interface.)",
             "Purchased", "asin", state.asin or "None", "options", _tojson(dict(state.options)),
             "attrs", "None", "category", "None", "query", "None", "product category", "None",
             *_DONE_LABELS, str(total), "Reward Details", "None"]
    return [Element("text", t) for t in texts]


def render_text(elements: list[Element]) -> str:
    """WebShop's simple text mode: every visible string, stripped, joined by " [SEP] "."""
    return " [SEP] ".join(e.text.strip() for e in elements)


def clickables(elements: list[Element]) -> dict[str, Element]:
    """WebShop's ``text_to_clickable``: buttons, then product links, then option values."""
    table: dict[str, Element] = {}
    for kinds in (("button",), ("link",), ("option",)):
        for e in elements:
            if e.kind in kinds:
                table[e.text.lower()] = e
    return table


def admissible(state: State, table: dict[str, Element]) -> list[str]:
    """verl-agent's action list: the search placeholder where a search bar shows, then clicks."""
    actions = ["search[<your query>]"] if state.page == "search" else []
    return actions + [f"click[{name}]" for name in table]


def parse_action(action: str) -> tuple[str, str | None]:
    """WebShop's parser: what ``re.match(r"(.+)\\[(.+)\\]", action)`` returns, else no argument.

    Computed in linear time: the regex backtracks quadratically (a 100k-character action of
    brackets took ~30 s), and an action is model text. ``.`` stops at a newline, so the match
    lies in the first line; both groups are greedy, so the argument ends at the line's last
    ``]`` and starts after the last ``[`` that leaves it non-empty and the name non-empty.
    """
    line = action.split("\n", 1)[0]
    close = line.rfind("]")
    open_ = line.rfind("[", 1, close - 1) if close >= 3 else -1
    if open_ < 1:
        return action, None
    return line[:open_], line[open_ + 1 : close]


def apply_action(shop: Shop, goal: Goal, state: State, action: str) -> Outcome:
    """WebShop's ``step`` on ``state``: the next state, or the same one for a refused action."""
    name, arg = parse_action(action)
    arg = arg.lower() if arg is not None else None
    if name == "search" and arg:
        return Outcome(State("results", tuple(arg.split(" ")), 1), True)
    if name not in ("search", "click") or arg is None:
        return Outcome(state, False, error=(
            f"unknown action syntax {action!r}: expected search[<query>] or click[<clickable>]"))
    table = clickables(page_elements(shop, goal, state))
    if name == "search" or arg not in table or arg == "search":
        return Outcome(state, False, error=f"{action!r} is not clickable on the {state.page} page")
    target = table[arg]
    if arg == BUY_NOW.lower():
        product = shop.product(state.asin)
        score = purchase_score(product, goal, product.price, dict(state.options))
        return Outcome(replace(state, page="done"), True, score=score)
    if arg == BACK_TO_SEARCH.lower():
        return Outcome(State(), True)
    if arg == NEXT_PAGE.lower() and state.page == "results":
        return Outcome(replace(state, page_num=state.page_num + 1), True)
    if arg == PREV_PAGE.lower():
        if state.page == "results":
            return Outcome(replace(state, page_num=state.page_num - 1), True)
        if state.page == "item":  # back to the results page re-runs the search: options reset
            return Outcome(State("results", state.keywords, state.page_num), True)
        return Outcome(replace(state, page="item"), True)
    if arg in (s.lower() for s in SUB_PAGES):
        return Outcome(replace(state, page=arg), True)
    if target.kind == "link":
        return Outcome(replace(state, page="item", asin=target.text.upper(), options=()), True)
    chosen = dict(state.options)
    chosen[target.group] = target.text
    return Outcome(replace(state, options=tuple(chosen.items())), True)

