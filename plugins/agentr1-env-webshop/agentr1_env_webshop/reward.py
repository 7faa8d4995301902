"""WebShop's purchase reward, following the rules of the benchmark's ``get_reward`` (see the README).

``total = (attribute matches + option matches + price ok) / (attributes + options + 1) * r_type``:

* attribute: a goal attribute matches when any product ``Attributes`` entry has ``thefuzz`` token-set ratio > 85
  with it, else when the (raw) attribute is a substring of the lower-cased title, bullet points or description;
* option: chosen option values and goal options are colour-normalised, a goal option matches when any chosen value
  has token-set ratio > 85 with it. Synthetic goals keep options as a dict and are compared as ``(name, value)``
  pairs, exactly as the original does (``thefuzz`` compares the pair's string form);
* price: the product's one drawn price is at most the goal's ``price_upper``;
* ``r_type``: 1, or 0.5 when neither the search query, two category levels nor the title nouns (> 0.2 overlap)
  match, 0.1 when the title overlap is below 0.1, 0 when it is 0.

Pure functions; the noun source for the title overlap is chosen with ``noun_tagger`` (see ``nouns``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from thefuzz import fuzz

from agentr1_env_webshop.colors import normalize_color
from agentr1_env_webshop.nouns import noun_tokens

FUZZ_THRESHOLD = 85


@dataclass
class RewardBreakdown:
    reward: float
    r_type: float
    title_score: float
    query_match: bool
    category_match: bool
    attribute_matches: int
    option_matches: int
    price_ok: bool

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def title_score(purchased_name: str, goal_name: str, noun_tagger: str = "perceptron") -> float:
    """Share of the goal name's noun tokens (counted with repeats) whose word appears among the product's nouns."""
    desired = noun_tokens(goal_name, noun_tagger)
    if not desired:
        return 0.2
    return len(set(noun_tokens(purchased_name, noun_tagger)) & set(desired)) / len(desired)


def _categories(text: str) -> set[str]:
    return {x.strip() for x in text.split("\u203a")}


def type_reward(product: dict[str, Any], goal: dict[str, Any], noun_tagger: str = "perceptron"
                ) -> tuple[float, float, bool, bool]:
    """``(r_type, title_score, query_match, category_match)``."""
    query_match = product["query"] == goal["query"]
    category_match = len(_categories(product["product_category"]) & _categories(goal["product_category"])) >= 2
    score = title_score(product["name"], goal["name"], noun_tagger)
    r_type = 1.0
    if not (query_match or category_match or score > 0.2):
        r_type = 0.5
    if score < 0.1:
        r_type = 0.1
    if score == 0.0:
        r_type = 0.0
    return r_type, score, query_match, category_match


def attribute_matches(product: dict[str, Any], goal_attributes: list[str]) -> int:
    """Goal attributes found in the product. Like the original scorer, the title, bullet points and description are
    only read for an attribute that no ``Attributes`` entry matched, in that order; a product without one of them
    (or without ``Attributes``) is scored on what it has instead of raising ``KeyError``."""
    texts = (lambda: str(product.get("Title") or "").lower(),
             lambda: " ".join(product.get("BulletPoints") or []).lower(),
             lambda: str(product.get("Description") or "").lower())
    have = product.get("Attributes") or []
    count = 0
    for wanted in goal_attributes:
        if any(fuzz.token_set_ratio(attr, wanted) > FUZZ_THRESHOLD for attr in have):
            count += 1
        elif any(wanted in text() for text in texts):
            count += 1
    return count


def option_matches(chosen_values: list[str], goal_options: Any) -> int:
    """Goal options hit by the chosen values. ``goal_options``: a list of values (human goals) or a dict of
    ``{option type: value}`` (synthetic goals, compared as pairs)."""
    wanted = list(goal_options.items()) if isinstance(goal_options, dict) else list(goal_options)
    chosen = [normalize_color(v) for v in chosen_values]
    count = 0
    for goal_option in (normalize_color(o) for o in wanted):
        if any(fuzz.token_set_ratio(value, goal_option) > FUZZ_THRESHOLD for value in chosen):
            count += 1
    return count


def webshop_reward(product: dict[str, Any], goal: dict[str, Any], price: float, options: dict[str, str],
                   noun_tagger: str = "perceptron") -> RewardBreakdown:
    """The reward for buying ``product`` at ``price`` with the clicked ``options`` ({type: value}) for ``goal``."""
    r_type, score, query_match, category_match = type_reward(product, goal, noun_tagger)
    price_ok = price <= goal["price_upper"]
    n_attr = attribute_matches(product, goal["attributes"])
    n_opt = option_matches(list(options.values()), goal["goal_options"])
    total = (n_attr + n_opt + int(price_ok)) / (len(goal["attributes"]) + len(goal["goal_options"]) + 1)
    return RewardBreakdown(total * r_type, r_type, score, query_match, category_match, n_attr, n_opt, price_ok)
