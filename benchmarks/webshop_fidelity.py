"""Measure how closely the embedded WebShop scores and ranks as WebShop's own code does.

    python -m benchmarks.webshop_fidelity --checkout /path/to/WebShop [--spacy-model NAME]
        [--lucene-jars /usr/share/java] [--products 1000] [--queries 200]

Three comparisons on a catalog from our generator (seed 0), written to
``benchmarks/results/webshop_fidelity.json``:

* reward: ``purchase_score`` against the checkout's ``web_agent_site.engine.goal.get_reward``
  on generated purchases (exact, wrong options, budget, wrong product, colours, random); equal
  means the same float. Needs the checkout's reward imports (spaCy, thefuzz 0.19, rich). Its
  module loads ``en_core_web_sm``; ``--spacy-model`` names the installed package to load in
  its place (the model's authors do not publish it on PyPI).
* nouns: ``title_nouns`` against that spaCy model's NOUN/PROPN tokens on every catalog title.
* search: the first results page (10 asins) of ``LuceneBM25`` against real Lucene (the jars of
  Debian's ``liblucene8-java``: ``--lucene-jars``), indexed and queried as pyserini does
  (StandardTokenizer, possessive, lower case, English stop words, Porter; BM25 k1 0.9, b 0.4;
  ties by id), through a small Java program compiled here with ``javac``.
Each part is skipped, with the reason in the JSON, when its reference is missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import random
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import RESULTS, machine, write_result
from envs.webshop.catalog import Catalog, Goal, Product, build_catalog
from envs.webshop.generate import generate_catalog
from envs.webshop.policies import goal_query
from envs.webshop.reward import purchase_score, title_nouns
from envs.webshop.search import LuceneBM25, product_document

CASES_PER_KIND = 1400
#: Colour phrases in the style of WebShop's options (modifiers its colour list also holds).
COLOUR_PHRASES = [f"{m} {c}".strip() for m in ("", "dark", "light", "heather", "royal", "midnight", "natural",
                                                 "steel", "stone", "slate", "lemon", "navy")
                  for c in ("grey", "blue", "green", "black", "white", "red", "pink", "brown")]

LUCENE_REF = r"""
import java.nio.file.*; import java.util.*;
import org.apache.lucene.analysis.*; import org.apache.lucene.analysis.en.*;
import org.apache.lucene.analysis.standard.StandardTokenizer;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.apache.lucene.document.*; import org.apache.lucene.index.*; import org.apache.lucene.search.*;
import org.apache.lucene.search.similarities.BM25Similarity; import org.apache.lucene.store.ByteBuffersDirectory;
import org.apache.lucene.util.BytesRef;
public class LuceneRef {
  static Analyzer analyzer() { return new Analyzer() {
    protected TokenStreamComponents createComponents(String f) {
      StandardTokenizer src = new StandardTokenizer();
      TokenStream t = new PorterStemFilter(new StopFilter(new LowerCaseFilter(new EnglishPossessiveFilter(src)),
          EnglishAnalyzer.ENGLISH_STOP_WORDS_SET));
      return new TokenStreamComponents(src, t); } }; }
  static List<String> terms(Analyzer a, String text) throws Exception {
    List<String> out = new ArrayList<>();
    try (TokenStream ts = a.tokenStream("contents", text)) {
      CharTermAttribute term = ts.addAttribute(CharTermAttribute.class); ts.reset();
      while (ts.incrementToken()) out.add(term.toString()); ts.end(); }
    return out; }
  public static void main(String[] args) throws Exception {
    Analyzer a = analyzer(); ByteBuffersDirectory dir = new ByteBuffersDirectory();
    IndexWriterConfig cfg = new IndexWriterConfig(a).setSimilarity(new BM25Similarity(0.9f, 0.4f));
    List<String> docs = Files.readAllLines(Paths.get(args[0]));
    try (IndexWriter w = new IndexWriter(dir, cfg)) {
      for (int i = 0; i + 1 < docs.size(); i += 2) {
        Document d = new Document(); String id = docs.get(i);
        d.add(new StringField("id", id, Field.Store.YES)); d.add(new SortedDocValuesField("id", new BytesRef(id)));
        d.add(new TextField("contents", docs.get(i + 1), Field.Store.NO)); w.addDocument(d);
        System.out.println("D\t" + id + "\t" + String.join(" ", terms(a, docs.get(i + 1)))); } }
    IndexSearcher s = new IndexSearcher(DirectoryReader.open(dir)); s.setSimilarity(new BM25Similarity(0.9f, 0.4f));
    Sort byScoreThenId = new Sort(SortField.FIELD_SCORE, new SortField("id", SortField.Type.STRING_VAL));
    for (String q : Files.readAllLines(Paths.get(args[1]))) {
      BooleanQuery.Builder b = new BooleanQuery.Builder();
      for (String t : terms(a, q)) b.add(new TermQuery(new Term("contents", t)), BooleanClause.Occur.SHOULD);
      TopDocs top = s.search(b.build(), 50, byScoreThenId, true); List<String> ids = new ArrayList<>();
      for (ScoreDoc sd : top.scoreDocs) ids.add(s.doc(sd.doc).get("id"));
      System.out.println("Q\t" + String.join(",", ids)); } } }
"""


def _webshop_product(p: Product) -> dict:
    return {"query": p.query, "product_category": p.product_category, "name": p.title, "Title": p.title,
            "Attributes": list(p.attributes), "BulletPoints": list(p.bullets), "Description": p.description}


def _webshop_goal(g: Goal) -> dict:
    return {"query": g.query, "product_category": g.product_category, "name": g.name,
            "attributes": list(g.attributes), "goal_options": list(g.goal_options), "price_upper": g.price_upper}


def _group_of(product: Product, value: str) -> str | None:
    return next((name for name, values in product.options.items() if value in values), None)


def reward_cases(catalog: Catalog, rng: random.Random):
    """(kind, product, goal, price, options) purchases, CASES_PER_KIND of each kind."""
    goals, products = catalog.goals, catalog.products
    colour_goals = [g for g in goals if "color" in catalog.by_asin[g.asin].options]
    for _ in range(CASES_PER_KIND):
        g = rng.choice(goals)
        p = catalog.by_asin[g.asin]
        exact = {_group_of(p, o): o for o in g.goal_options if _group_of(p, o)}
        yield "exact", p, g, p.price, exact
        yield "wrong_options", p, g, p.price, {n: rng.choice(v) for n, v in p.options.items()}
        yield "budget", p, g, g.price_upper + rng.choice([-0.01, 0.0, 0.01, rng.uniform(1, 50)]), exact
        other = rng.choice(products)
        yield "wrong_product", other, g, other.price, {n: rng.choice(v) for n, v in other.options.items()}
        cg = rng.choice(colour_goals)
        cg = dataclasses.replace(cg, goal_options=(rng.choice(COLOUR_PHRASES),))
        yield "colours", catalog.by_asin[cg.asin], cg, 0.0, {"color": rng.choice(COLOUR_PHRASES)}
        rp = rng.choice(products)
        opts = {n: rng.choice(v) for n, v in rp.options.items() if rng.random() < 0.5}
        yield "random", rp, g, rng.uniform(0, 2 * g.price_upper), opts


def measure_reward(catalog: Catalog, checkout: Path, spacy_model: str) -> dict:
    import spacy

    load = spacy.load
    spacy.load = lambda name, *a, **k: load(spacy_model if name == "en_core_web_sm" else name, *a, **k)
    sys.path.insert(0, str(checkout))
    try:
        goal_module = importlib.import_module("web_agent_site.engine.goal")
    finally:
        spacy.load = load
    rng = random.Random(0)
    counts: dict[str, list[int]] = {}
    colour_binary = [0, 0]
    disagreements = []
    for kind, p, g, price, options in reward_cases(catalog, rng):
        ours = purchase_score(p, g, price, options).total
        theirs = goal_module.get_reward(_webshop_product(p), _webshop_goal(g), price=price, options=options)
        row = counts.setdefault(kind, [0, 0])
        row[0] += ours == theirs
        row[1] += 1
        if kind == "colours":
            colour_binary[0] += (ours == 1.0) == (theirs == 1.0)
            colour_binary[1] += 1
        if ours != theirs and len(disagreements) < 20:
            disagreements.append({"kind": kind, "asin": p.asin, "goal": g.asin, "ours": ours, "webshop": theirs})
    agree, total = sum(r[0] for r in counts.values()), sum(r[1] for r in counts.values())
    return {"cases": total, "agreement": agree / total,
            "by_kind": {k: {"cases": n, "agreement": a / n} for k, (a, n) in counts.items()},
            "colour_binary_agreement": colour_binary[0] / colour_binary[1],
            "spacy_model": spacy_model, "first_disagreements": disagreements}


def measure_nouns(catalog: Catalog, spacy_model: str) -> dict:
    import spacy

    nlp = spacy.load(spacy_model)
    titles = [p.title for p in catalog.products]
    same_list = same_set = 0
    for doc, title in zip(nlp.pipe(titles), titles):
        ref = [t.text.lower() for t in doc if t.pos_ in ("NOUN", "PROPN")]
        ours = title_nouns(title)
        same_list += ours == ref
        same_set += set(ours) == set(ref)
    return {"titles": len(titles), "same_noun_list": same_list / len(titles),
            "same_noun_set": same_set / len(titles), "spacy_model": f"{spacy_model} {nlp.meta['version']}"}


def search_queries(catalog: Catalog, n: int) -> list[str]:
    """Mostly the goals' instructions (what the oracle types), a quarter short tie-prone queries."""
    rng = random.Random(1)
    long = [goal_query(g.instruction_text) for g in catalog.goals[: n - n // 4]]
    short = sorted({p.query for p in catalog.products} | {p.title.split(" - ")[0].split()[-1] for p in catalog.products})
    return long + rng.sample(short, min(n // 4, len(short)))


def measure_search(catalog: Catalog, jars: Path, n_queries: int) -> dict:
    classpath = ":".join(str(jars / f"lucene-{m}-8.7.0.jar") for m in ("core", "analyzers-common"))
    queries = search_queries(catalog, n_queries)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "LuceneRef.java").write_text(LUCENE_REF)
        subprocess.run(["javac", "-cp", classpath, "-d", tmp, str(work / "LuceneRef.java")], check=True)
        (work / "docs.txt").write_text(
            "".join(f"{p.asin}\n{product_document(p).replace(chr(10), ' ')}\n" for p in catalog.products))
        (work / "queries.txt").write_text("\n".join(q.replace("\n", " ") for q in queries) + "\n")
        out = subprocess.run(["java", "-cp", f"{classpath}:{tmp}", "LuceneRef", str(work / "docs.txt"),
                              str(work / "queries.txt")], check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    doc_terms = {ln.split("\t")[1]: ln.split("\t")[2].split() for ln in lines if ln.startswith("D\t")}
    lucene = [ln[2:].split(",") if ln[2:] else [] for ln in lines if ln.startswith("Q\t")]
    engine = LuceneBM25.for_products(catalog.products)
    same_terms = sum(engine.analyze(product_document(p)) == doc_terms[p.asin] for p in catalog.products)
    first_page = sum(engine.search(q)[:10] == ref[:10] for q, ref in zip(queries, lucene))
    all_50 = sum(engine.search(q) == ref for q, ref in zip(queries, lucene))
    misses = [{"query": q, "ours": engine.search(q)[:10], "lucene": ref[:10]}
              for q, ref in zip(queries, lucene) if engine.search(q)[:10] != ref[:10]][:10]
    return {"queries": len(queries), "first_page_agreement": first_page / len(queries),
            "top50_agreement": all_50 / len(queries), "documents_with_identical_terms": same_terms / len(catalog.products),
            "reference": "Apache Lucene 8.7.0 (Debian liblucene8-java), StandardTokenizer + EnglishPossessiveFilter + "
                         "LowerCaseFilter + StopFilter(ENGLISH_STOP_WORDS_SET) + PorterStemFilter, "
                         "BM25Similarity(0.9, 0.4), sorted by score then id",
            "first_misses": misses}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", type=Path, default=None, help="WebShop checkout (for the reward)")
    parser.add_argument("--spacy-model", default="en_core_web_sm", help="spaCy model package standing for en_core_web_sm")
    parser.add_argument("--lucene-jars", type=Path, default=Path("/usr/share/java"), help="folder of Lucene 8.7 jars")
    parser.add_argument("--products", type=int, default=1000, help="catalog size")
    parser.add_argument("--queries", type=int, default=200, help="search queries")
    parser.add_argument("--out", type=Path, default=RESULTS / "webshop_fidelity.json", help="JSON result file")
    args = parser.parse_args()
    catalog = build_catalog(*generate_catalog(args.products, 0))
    result: dict = {"machine": machine(), "products": args.products}
    if args.checkout is None:
        result["reward"] = result["nouns"] = {"skipped": "no --checkout given"}
    else:
        result["reward"] = measure_reward(catalog, args.checkout, args.spacy_model)
        result["nouns"] = measure_nouns(catalog, args.spacy_model)
    if (args.lucene_jars / "lucene-core-8.7.0.jar").is_file():
        result["search"] = measure_search(catalog, args.lucene_jars, args.queries)
    else:
        result["search"] = {"skipped": f"no lucene-core-8.7.0.jar in {args.lucene_jars} (apt-get install liblucene8-java)"}
    write_result("webshop_fidelity", result, args.out)


if __name__ == "__main__":
    main()
