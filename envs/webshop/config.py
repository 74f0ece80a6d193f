"""Settings of the WebShop environment (embedded shop or a real WebShop checkout)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envs.common.packages import check_all, require
from envs.common.rules import FLAG, TEXT, check, count, number, optional
from envs.webshop.catalog import CATALOG_FILES

REWARD_MODES = ("binary", "graded")
SEARCH_BACKENDS = ("bm25s", "pyserini")
#: A real WebShop's ``num_products`` -> its search index folder under ``search_engine/``.
INDEX_DIRS = {None: "indexes", 100: "indexes_100", 1000: "indexes_1k", 100000: "indexes_100k"}
#: What a real checkout's code imports beyond the project's own packages (docs/webshop.md; its
#: search engine's pyserini and spaCy's en_core_web_sm model are loaded by WebShop itself).
CHECKOUT_PACKAGES = ("spacy", "thefuzz", "bs4", "gym", "cleantext", "rank_bm25", "flask", "rich")
CHECKOUT_INSTALL = "install the packages docs/webshop.md lists for a real checkout (not its requirements.txt)"


@dataclass(frozen=True)
class WebShopConfig:
    """WebShop environment settings.

    Args:
        catalog_dir: Folder with WebShop's three catalog files (items_shuffle.json,
            items_ins_v2.json, items_human_ins.json). None: generate the catalog in memory from
            ``catalog_seed`` and ``num_products``.
        catalog_seed: Seed of the generated catalog (used when catalog_dir is None).
        num_products: Number of generated products (used when catalog_dir is None).
        goal_seed: Seed that draws product prices inside price ranges, the goals' price bounds
            and the goal order (WebShop: 233).
        reward_mode: "binary": r = 10 at purchase iff the score is 1.0 (published recipe);
            "graded": r = 10 x score.
        max_steps: Episode step limit (published recipe: 15).
        search_backend: "bm25s" (default, pure Python) or "pyserini" (Lucene; needs pyserini,
            Python >= 3.12 and Java >= 21).
        pyserini_index: Folder for the pyserini Lucene index (built on first use); required
            with search_backend="pyserini".
        webshop_checkout: Path of a real WebShop git checkout with its data files; when set, the
            env drives WebShop's own text environment and the catalog settings are unused.
        webshop_num_products: Real WebShop only: its ``num_products`` (None = full index,
            1000 = the small data set and indexes_1k).
        webshop_human_goals: Real WebShop only: use the human instructions (True, the published
            recipe) or the synthetic ones.
    """

    catalog_dir: str | None = None
    catalog_seed: int = 0
    num_products: int = 1000
    goal_seed: int = 233
    reward_mode: str = "binary"
    max_steps: int = 15
    search_backend: str = "bm25s"
    pyserini_index: str | None = None
    webshop_checkout: str | None = None
    webshop_num_products: int | None = None
    webshop_human_goals: bool = True

    def __post_init__(self) -> None:
        check("WebShopConfig", WebShopConfig, vars(self), {
            "catalog_dir": optional(TEXT), "catalog_seed": number(integer=True), "num_products": count(1),
            "goal_seed": number(integer=True), "max_steps": count(1), "pyserini_index": optional(TEXT),
            "webshop_checkout": optional(TEXT), "webshop_num_products": optional(count(1)), "webshop_human_goals": FLAG,
        })
        if self.webshop_num_products is not None and not self.webshop_checkout:
            raise ValueError(f"WebShopConfig.webshop_num_products={self.webshop_num_products} is set but only a real "
                             "checkout reads it; set webshop_checkout too, or remove webshop_num_products")
        if self.reward_mode not in REWARD_MODES:
            raise ValueError(f"WebShopConfig.reward_mode={self.reward_mode!r}: choose one of {REWARD_MODES}")
        if self.search_backend not in SEARCH_BACKENDS:
            raise ValueError(
                f"WebShopConfig.search_backend={self.search_backend!r}: choose one of {SEARCH_BACKENDS}")
        if self.search_backend == "pyserini" and not self.pyserini_index:
            raise ValueError("WebShopConfig.search_backend='pyserini' needs pyserini_index (a folder path)")
        # Packages and paths are checked here, at start-up (envs.registry builds the config before
        # any model loads), not when the first worker opens the shop; --dry_run lists each missing one.
        check_all(self._check_packages, self._check_paths)

    def _check_packages(self) -> None:
        if self.webshop_checkout:  # WebShop's own code runs, not the embedded shop
            require("data.env_options.webshop_checkout", CHECKOUT_PACKAGES, CHECKOUT_INSTALL)
        elif self.search_backend == "pyserini":
            require("data.env_options.search_backend=pyserini", "pyserini", "pip install pyserini (Python >= 3.12, "
                    "Java >= 21); or search_backend: bm25s")
        else:
            require("data.env=webshop", "Stemmer", "pip install -e '.[webshop]'")

    def _check_paths(self) -> None:
        if self.webshop_checkout:
            check_checkout(Path(self.webshop_checkout).expanduser().resolve(), self.webshop_num_products)
        elif self.catalog_dir is not None:
            folder = Path(self.catalog_dir).expanduser()
            missing = [name for name in CATALOG_FILES if not (folder / name).is_file()]
            if missing:
                raise ValueError(
                    f"WebShopConfig.catalog_dir={self.catalog_dir} lacks {', '.join(missing)}; write a catalog there with "
                    f"`python -m envs.webshop.generate --out {self.catalog_dir}`, or leave catalog_dir unset")


@dataclass(frozen=True)
class CheckoutFiles:
    """The files of a real WebShop checkout that its loader reads."""

    products: Path  # data/items_shuffle[_1000].json
    attributes: Path  # data/items_ins_v2[_1000].json
    human_goals: Path  # data/items_human_ins.json
    index: Path  # search_engine/indexes*/


def check_checkout(checkout: Path, num_products: int | None) -> CheckoutFiles:
    """The data files WebShop will read for ``num_products``; a ``ValueError`` naming what is missing
    (a folder the user named that lacks what it must hold is a wrong value, failing the dry run too).

    WebShop's small layout (``setup.sh -d small``, num_products=1000) has ``items_shuffle_1000.json``
    and ``items_ins_v2_1000.json``; the full one (``-d all``) has ``items_shuffle.json`` and
    ``items_ins_v2.json``. (WebShop's loader itself always reads ``items_ins_v2_1000.json``; the
    adapter points it at the attributes file of the chosen layout.)
    """
    if not checkout.is_dir():  # a path named but absent is an error, as ALFWorld's data_path (README)
        raise ValueError(f"webshop_checkout={checkout} does not exist on this machine; point it at a WebShop git "
                         "checkout (git clone https://github.com/princeton-nlp/WebShop), or remove webshop_checkout "
                         "for the embedded shop")
    if not (checkout / "web_agent_site").is_dir():
        raise ValueError(
            f"webshop_checkout={checkout}: no web_agent_site/ package there; point it at a "
            "WebShop git checkout (git clone https://github.com/princeton-nlp/WebShop)"
        )
    if num_products not in INDEX_DIRS:
        raise ValueError(f"webshop_num_products={num_products}: WebShop supports {sorted(INDEX_DIRS, key=str)}")
    data = checkout / "data"
    suffix = "_1000" if num_products == 1000 else ""
    files = CheckoutFiles(data / f"items_shuffle{suffix}.json", data / f"items_ins_v2{suffix}.json",
                          data / "items_human_ins.json", checkout / "search_engine" / INDEX_DIRS[num_products])
    missing = [str(p) for p in vars(files).values() if not p.exists()]
    if missing:
        layout = "small (setup.sh -d small)" if num_products == 1000 else "full (setup.sh -d all)"
        raise ValueError(
            f"webshop_checkout={checkout} lacks WebShop's data for webshop_num_products={num_products}, the "
            f"{layout} layout: {', '.join(missing)}; run the checkout's setup.sh with that -d flag, or set "
            "webshop_num_products to match the data it has (1000 for the small set, null for the full one)"
        )
    return files


def env_reward(score: float, reward_mode: str) -> float:
    """SPEC §1: binary 10 iff score == 1.0, graded 10 x score."""
    if reward_mode == "binary":
        return 10.0 if score == 1.0 else 0.0
    return 10.0 * score
