"""The WebShop catalogue: products, their drawn prices, and a BM25 search engine over product text.

Files are the ones WebShop's engine works with, given by path (nothing is downloaded, no default location):
``products`` a JSONL (or JSON list) of processed products (asin, name, Title, query, category, product_category,
Description, BulletPoints, Attributes, options, Price, pricing, Rating ...), ``prices`` a JSON ``{asin: price}``
(the one price per product the reward checks; when absent, ``pricing[0]``, or 100.0 without pricing, is used).

Search indexes title, description, bullet points and option values with ``bm25s`` (English stop words, Snowball
stemmer from ``PyStemmer``) and returns up to ``top_k`` ASINs. ``load_catalog`` caches one catalogue per set of paths
so that the many env instances of a rollout share it.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from agentr1_core.jsonl import parse_jsonl

REQUIRED_FIELDS = ("asin", "name", "Title", "query", "product_category", "Attributes")


def read_json_records(path: str | Path) -> list[dict[str, Any]]:
    """A JSON list or a JSONL file; broken lines are one error naming each file and line (``agentr1_core.jsonl``)."""
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(
            f"WebShop data file not found: {file} (set WEBSHOP_DATA to a folder with products_1k_processed.jsonl, "
            "product_prices_seed0.json and goals_synthetic_derived_seed0.json, or unset it to use the shipped sample)")
    text = file.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return list(json.loads(text))
    return list(parse_jsonl(text.splitlines(), str(file)))


def product_text(p: dict[str, Any]) -> str:
    """What the search engine indexes for one product."""
    options = " ".join(v for values in (p.get("options") or {}).values() for v in values)
    return " ".join([p.get("Title", ""), p.get("Description", ""), " ".join(p.get("BulletPoints") or []), options])


@dataclass
class Catalog:
    products: dict[str, dict[str, Any]]
    prices: dict[str, float]
    order: list[str] = field(default_factory=list)  # ASINs in index order
    _index: Any = None
    _stemmer: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_records(cls, records: list[dict[str, Any]], prices: dict[str, float] | None = None) -> "Catalog":
        products: dict[str, dict[str, Any]] = {}
        for i, p in enumerate(records):
            missing = [f for f in REQUIRED_FIELDS if f not in p]
            if missing:
                raise ValueError(f"product #{i} ({p.get('asin', '?')}) lacks {', '.join(missing)}")
            p.setdefault("Description", "")
            p.setdefault("BulletPoints", [])
            p.setdefault("options", {})
            products[p["asin"]] = p
        drawn = dict(prices or {})
        for asin, p in products.items():
            if asin not in drawn:
                pricing = p.get("pricing") or []
                drawn[asin] = float(pricing[0]) if pricing else 100.0
        cat = cls(products, {k: float(v) for k, v in drawn.items()}, list(products))
        cat._build_index()
        return cat

    def _build_index(self) -> None:
        import bm25s
        import Stemmer

        self._stemmer = Stemmer.Stemmer("english")
        corpus = [product_text(self.products[a]) for a in self.order]
        tokens = bm25s.tokenize(corpus, stopwords="en", stemmer=self._stemmer, show_progress=False)
        self._index = bm25s.BM25()
        self._index.index(tokens, show_progress=False)

    def search(self, query: str, top_k: int = 50) -> list[str]:
        """ASINs of the best ``top_k`` products for ``query``, best first (products scoring 0 are left out)."""
        import bm25s

        k = min(top_k, len(self.order))
        if k <= 0 or not query.strip():
            return []
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=self._stemmer, show_progress=False)
        if not tokens.ids or not tokens.ids[0]:
            return []
        with self._lock:  # bm25s retrieval is not documented as thread-safe
            docs, scores = self._index.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [self.order[int(d)] for d, s in zip(docs[0], scores[0]) if s > 0]


@lru_cache(maxsize=4)
def load_catalog(products: str, prices: str = "") -> Catalog:
    """The catalogue from ``products`` (JSONL/JSON) and optional ``prices`` (JSON ``{asin: price}``), cached."""
    records = read_json_records(products)
    price_map = json.loads(Path(prices).read_text(encoding="utf-8")) if prices else None
    return Catalog.from_records(records, price_map)
