"""The shop's pages in WebShop's text mode: a pure state machine over search, results, item and sub-pages.

Actions are ``search[query]`` (search page only) and ``click[label]`` with a lower-cased label from the page:
``back to search``, ``next >`` / ``< prev`` (results pagination; on an item page ``< prev`` returns to the results,
on a description/features/reviews page to the item), an ASIN on a results page, an option value, ``description``,
``features``, ``reviews`` and ``buy now`` on an item page. ``Shop.act`` returns an ``Outcome``: an invalid or
malformed action leaves the state unchanged and says why. Pages render as ``[SEP]``-separated text like the
original's ``text`` observation mode. Nothing here computes rewards.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agentr1_env_webshop.catalog import Catalog

ACTION_RE = re.compile(r"\b(search|click)\[([^\]\n]*)\]", re.IGNORECASE)
SEP = " [SEP] "
SUB_PAGES = ("description", "features", "reviews")


def parse_action(text: str) -> tuple[str, str] | None:
    """The first ``search[...]`` / ``click[...]`` in ``text`` as ``(verb, argument)``, or None."""
    m = ACTION_RE.search(text or "")
    if not m:
        return None
    return m.group(1).lower(), m.group(2).strip()


@dataclass
class Outcome:
    valid: bool
    bought: bool = False
    error: str = ""


@dataclass
class Shop:
    """One shopping session on ``catalog``."""

    catalog: Catalog
    top_k: int = 50
    per_page: int = 10
    page: str = "search"  # search | results | item | sub
    query: str = ""
    results: list[str] = field(default_factory=list)
    page_num: int = 1
    asin: str = ""
    sub: str = ""
    options: dict[str, str] = field(default_factory=dict)

    # ---- what the current page offers -------------------------------------------------------------------------
    @property
    def num_pages(self) -> int:
        return max(1, -(-len(self.results) // self.per_page))

    def page_results(self) -> list[str]:
        start = (self.page_num - 1) * self.per_page
        return self.results[start:start + self.per_page]

    def option_labels(self) -> dict[str, tuple[str, str]]:
        """Lower-cased option value -> (option type, value) of the current item (first type wins on a clash)."""
        labels: dict[str, tuple[str, str]] = {}
        for kind, values in (self.catalog.products[self.asin].get("options") or {}).items():
            for v in values:
                labels.setdefault(v.lower(), (kind, v))
        return labels

    def clickables(self) -> list[str]:
        if self.page == "results":
            out = ["back to search"]
            if self.page_num > 1:
                out.append("< prev")
            if self.page_num < self.num_pages:
                out.append("next >")
            return out + [a.lower() for a in self.page_results()]
        if self.page == "item":
            return ["back to search", "< prev", *self.option_labels(), *SUB_PAGES, "buy now"]
        if self.page == "sub":
            return ["back to search", "< prev"]
        return []

    def available_actions(self) -> list[str]:
        head = ["search[<your query>]"] if self.page == "search" else []
        return head + [f"click[{c}]" for c in self.clickables()]

    def anchor(self) -> str:
        """A hashable summary of the page state (identical states share it)."""
        if self.page == "results":
            return f"results|{self.query.lower()}|{self.page_num}"
        if self.page in ("item", "sub"):
            chosen = ",".join(f"{k}={v}" for k, v in sorted(self.options.items()))
            return f"{self.page}|{self.asin}|{self.sub}|{chosen}"
        return "search"

    # ---- transitions ------------------------------------------------------------------------------------------
    def act(self, text: str) -> Outcome:
        parsed = parse_action(text)
        if parsed is None:
            return Outcome(False, error="no action found; write one action such as search[...] or click[...]")
        verb, arg = parsed
        if verb == "search":
            if self.page != "search":
                return Outcome(False, error="search is only possible on the search page; click[back to search]")
            if not arg:
                return Outcome(False, error="search[] needs a query")
            self.query, self.results, self.page_num, self.page = arg, self.catalog.search(arg, self.top_k), 1, "results"
            return Outcome(True)
        label = arg.lower()
        if label not in self.clickables():
            return Outcome(False, error=f"click[{arg}] is not available on this page")
        if label == "back to search":
            self.page, self.query, self.results, self.asin, self.sub, self.options = "search", "", [], "", "", {}
        elif self.page == "results":
            if label == "next >":
                self.page_num += 1
            elif label == "< prev":
                self.page_num -= 1
            else:
                self.asin = next(a for a in self.page_results() if a.lower() == label)
                self.page, self.options = "item", {}
        elif self.page == "item":
            if label == "< prev":
                self.page, self.asin, self.options = "results", "", {}
            elif label in SUB_PAGES:
                self.page, self.sub = "sub", label
            elif label == "buy now":
                return Outcome(True, bought=True)
            else:
                kind, value = self.option_labels()[label]
                self.options[kind] = value
        elif self.page == "sub" and label == "< prev":
            self.page, self.sub = "item", ""
        return Outcome(True)

    # ---- rendering --------------------------------------------------------------------------------------------
    def render(self, instruction: str = "") -> str:
        if self.page == "search":
            return SEP.join(["WebShop", "Instruction:", instruction, "Search"])
        if self.page == "results":
            parts = ["Back to Search", f"Page {self.page_num} (Total results: {len(self.results)})"]
            if self.page_num > 1:
                parts.append("< Prev")
            if self.page_num < self.num_pages:
                parts.append("Next >")
            for a in self.page_results():
                p = self.catalog.products[a]
                parts += [a, p["Title"], str(p.get("Price", ""))]
            return SEP.join(parts)
        p = self.catalog.products[self.asin]
        if self.page == "sub":
            return SEP.join(["Back to Search", "< Prev", _sub_page_text(p, self.sub)])
        parts = ["Back to Search", "< Prev"]
        for kind, values in (p.get("options") or {}).items():
            parts.append(kind)
            parts += [f"{v} (selected)" if self.options.get(kind) == v else v for v in values]
        parts += [p["Title"], f"Price: {p.get('Price', '')}", f"Rating: {p.get('Rating', 'N.A.')}",
                  "Description", "Features", "Reviews", "Buy Now"]
        return SEP.join(parts)


def _sub_page_text(p: dict[str, Any], sub: str) -> str:
    if sub == "description":
        return p.get("Description") or "N.A."
    if sub == "features":
        return SEP.join(b.strip() for b in p.get("BulletPoints") or []) or "N.A."
    reviews = p.get("Reviews") or []
    texts = [str(r.get("body", r)) if isinstance(r, dict) else str(r) for r in reviews]
    return SEP.join(texts) or "N.A."
