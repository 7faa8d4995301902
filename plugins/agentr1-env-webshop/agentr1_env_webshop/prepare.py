"""``agentr1-core webshop prepare --out DIR``: WebShop's full 1000-product setting for the ``webshop`` recipe.

Fetches the three files of the original release (the ones WebShop's ``setup.sh -d small`` downloads: the products
``items_shuffle_1000.json``, the attribute/instruction file ``items_ins_v2_1000.json`` and the human instructions
``items_human_ins.json``) and turns them into the files the recipe reads, with WebShop's own procedures:

- ``products_1k_processed.jsonl``: the products as WebShop's engine loads them (duplicates, bad ASINs and seller
  fields dropped, ``Title``/``Description``/``BulletPoints``, prices parsed from the price text, option values
  lower-cased with ``/`` written `` | ``, ``Attributes`` from the attribute file or ``['DUMMY_ATTR']``, human
  instructions attached);
- ``product_prices_seed0.json``: one price per product (the single price, or a uniform draw in a price range);
- ``goals_synthetic_derived_seed0.json``: one goal per option combination of every product with an instruction
  (price cap drawn from the four tens above the price, weight from attribute rarity);
- ``goals_human_derived_seed0.json``: one goal per human instruction that names attributes.

Prices, then synthetic goals, then human goals draw from one random stream seeded with ``--seed`` (0): with WebShop's
products this reproduces, exactly, the goal files the shipped sample was cut from (1,000 prices, 6,910 synthetic
and 13 human goals). The file names keep ``seed0`` whatever the seed, so that ``WEBSHOP_DATA`` finds them.

Prints ``export WEBSHOP_DATA=DIR``. ``--source NAME=URL_OR_PATH`` replaces one original URL (a mirror, or a file
downloaded before); the full catalogue (``items_shuffle.json`` + ``items_ins_v2.json``) goes through the same
options, but the raw file alone is several GB: loading it and indexing it for search takes a large-memory machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

from agentr1_core.fetch import FetchError, add_prepare_command, fetch, sources_from_args

_DRIVE = "https://drive.usercontent.google.com/download?export=download&confirm=t&id="
SOURCES = {  # the Google Drive files of WebShop's setup.sh (small setting)
    "products": _DRIVE + "1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib",
    "attributes": _DRIVE + "1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu",
    "human": _DRIVE + "14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O",
}
DOWNLOADS = {"products": "items_shuffle_1000.json", "attributes": "items_ins_v2_1000.json",
             "human": "items_human_ins.json"}
PRODUCTS, PRICES = "products_1k_processed.jsonl", "product_prices_seed0.json"
SYNTHETIC, HUMAN = "goals_synthetic_derived_seed0.json", "goals_human_derived_seed0.json"
PRICE_RANGE = [10.0 * i for i in range(1, 100)]
DROPPED_KEYS = {"product_information", "brand", "brand_url", "list_price", "availability_quantity",  # not shown
                "availability_status", "total_reviews", "total_answered_questions", "seller_id", "seller_name",
                "fulfilled_by_amazon", "fast_track_message", "aplus_present", "small_description_old"}


def _price_list(text: Any) -> list[float]:
    """``"$12.99"`` -> [12.99]; ``"$5.00 - $9.50"`` -> [5.0, 9.5]; empty -> [100.0] (WebShop's default)."""
    if not text:
        return [100.0]
    prices = [float(Decimal(re.sub(r"[^\d.]", "", part))) for part in str(text).split("$")[1:]]
    return prices[:2] if prices else [100.0]


def process_products(raw: list[dict], attributes: dict, human: dict) -> list[dict[str, Any]]:
    """WebShop's product loading: the raw scraped records -> the products its engine and reward read."""
    seen: set[str] = set()
    products = []
    for p in raw:
        asin = str(p.get("asin", ""))
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        q = {k: v for k, v in p.items() if k not in DROPPED_KEYS}
        q["Title"] = p["name"]
        q["Description"] = p.get("full_description", "")
        q["Reviews"], q["Rating"] = [], "N.A."
        bullets = p.get("small_description", [])
        q["BulletPoints"] = bullets if isinstance(bullets, list) else [bullets]
        pricing = _price_list(p.get("pricing"))
        q["pricing"] = pricing
        q["Price"] = f"${pricing[0]}" if len(pricing) == 1 else f"${pricing[0]} to ${pricing[1]}"
        options: dict[str, list[str]] = {}
        option_to_image: dict[str, Any] = {}
        for name, contents in (p.get("customization_options") or {}).items():
            if contents is None:
                continue
            values = []
            for content in contents:
                value = content["value"].strip().replace("/", " | ").lower()
                values.append(value)
                option_to_image[value] = content.get("image")
            options[name.lower()] = values
        q["options"], q["option_to_image"] = options, option_to_image
        record = attributes.get(asin) or {}
        q["Attributes"] = record["attributes"] if "attributes" in record else ["DUMMY_ATTR"]  # [] stays []
        if asin in human:
            q["instructions"] = human[asin]
        images = p.get("images") or [None]
        q["MainImage"] = images[0]
        q["query"] = str(p.get("query", "")).lower().strip()
        products.append(q)
    return products


def draw_prices(products: list[dict], rng: random.Random) -> dict[str, float]:
    """One price per product: its price, or a uniform draw in its price range."""
    prices = {}
    for p in products:
        pricing = p["pricing"]
        prices[p["asin"]] = 100.0 if not pricing else pricing[0] if len(pricing) == 1 else rng.uniform(*pricing[:2])
    return prices


def _price_cap(price: float, rng: random.Random) -> tuple[float, str]:
    above = [p for p in PRICE_RANGE if p > price][:4]
    if len(above) < 2:
        return 1000000, ""
    upper = sorted(rng.sample(above, 2))[1]
    return upper, f", and price lower than {upper:.2f} dollars"


def _goal(p: dict, text: str, attributes: list[str], upper: float, options: Any, price: float) -> dict[str, Any]:
    return {"asin": p["asin"], "category": p["category"], "query": p["query"], "name": p["Title"],
            "product_category": p["product_category"], "instruction_text": text, "attributes": attributes,
            "price_upper": upper, "goal_options": options, "product_price": price}


def synthetic_goals(products: list[dict], attributes: dict, prices: dict[str, float],
                    rng: random.Random) -> list[dict[str, Any]]:
    """One goal per full option combination of each product whose attribute record has an instruction."""
    goals, counts = [], defaultdict(int)
    for p in products:
        record = attributes.get(p["asin"], {})
        if record.get("instruction") is None:
            continue
        wanted = record.get("instruction_attributes") or []
        if not wanted:
            raise FetchError(f"attributes file: {p['asin']} has an instruction but no instruction_attributes")
        upper, price_text = _price_cap(prices[p["asin"]], rng)
        names = sorted(p["options"])
        for combination in itertools.product(*(p["options"][n] for n in names)):
            chosen = dict(zip(names, combination))
            option_text = ", and ".join(f"{k}: {v}" for k, v in chosen.items())
            text = record["instruction"] + (f" with {option_text}" if option_text else "") + price_text
            goals.append(_goal(p, text, wanted, upper, chosen, prices[p["asin"]]))
            for attribute in wanted:
                counts[attribute] += 1
    for g in goals:
        g["weight"] = sum(1.0 / counts[a] for a in g["attributes"]) / len(g["attributes"])
    return goals


def human_goals(products: list[dict], prices: dict[str, float], rng: random.Random) -> list[dict[str, Any]]:
    """One goal per human instruction that names attributes (weight 1)."""
    goals = []
    for p in products:
        for instruction in p.get("instructions") or []:
            if not instruction.get("instruction_attributes"):
                continue
            upper, price_text = _price_cap(prices[p["asin"]], rng)
            text = instruction["instruction"].strip(".") + price_text
            goal = _goal(p, text, instruction["instruction_attributes"], upper,
                         instruction.get("instruction_options") or [], prices[p["asin"]])
            goal["weight"] = 1
            goals.append(goal)
    return goals


def _read_json(path: Path, name: str, kind: type) -> Any:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FetchError(f"{path}: the {name} file is not JSON ({exc})") from exc
    if not isinstance(value, kind):
        raise FetchError(f"{path}: the {name} file should hold a JSON {kind.__name__}")
    return value


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.part")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def prepare(files: dict[str, Path], out: Path, seed: int = 0) -> dict[str, int]:
    """Process the downloaded files into ``out``; returns counts (products, synthetic and human goals)."""
    raw = _read_json(files["products"], "products", list)
    attributes = _read_json(files["attributes"], "attributes", dict)
    human = _read_json(files["human"], "human instructions", dict)
    try:
        products = process_products(raw, attributes, human)
    except (KeyError, TypeError, AttributeError) as exc:
        raise FetchError(f"{files['products']}: not WebShop's product format (missing or bad {exc})") from exc
    if not products:
        raise FetchError(f"{files['products']}: no products")
    rng = random.Random(seed)
    prices = draw_prices(products, rng)
    synthetic = synthetic_goals(products, attributes, prices, rng)
    human_rows = human_goals(products, prices, rng)
    _write(out / PRODUCTS, "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in products))
    _write(out / PRICES, json.dumps(prices))
    _write(out / SYNTHETIC, json.dumps(synthetic, ensure_ascii=False))
    _write(out / HUMAN, json.dumps(human_rows, ensure_ascii=False))
    return {"products": len(products), "synthetic": len(synthetic), "human": len(human_rows)}


def cmd_prepare(args: argparse.Namespace) -> int:
    out = Path(args.out).expanduser().resolve()
    sources = sources_from_args(args, SOURCES)
    files = {name: fetch(src, out / "downloads" / DOWNLOADS[name], quiet=args.quiet) for name, src in sources.items()}
    counts = prepare(files, out, seed=args.seed)
    print(f"products: {counts['products']:,}, synthetic goals: {counts['synthetic']:,}, "
          f"human goals: {counts['human']:,} (seed {args.seed})")
    print(f"export WEBSHOP_DATA={out}")
    return 0


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="webshop_command", metavar="ACTION", required=True)
    p = add_prepare_command(sub, "fetch WebShop's 1000-product files and derive prices and goals", SOURCES,
                            "folder for the processed files (then: export WEBSHOP_DATA=DIR)", cmd_prepare)
    p.add_argument("--seed", type=int, default=0, help="seed of the price and price-cap draws (default 0)")
