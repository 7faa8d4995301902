"""``agentr1-core webshop prepare``: WebShop's raw release files (a stand-in written from the test slice in the raw
scraped format, since the Google Drive URLs are unreachable here) -> processed products, prices and goals that the
env plays; bad files are one-line errors."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentr1_core.mdp import Action
from agentr1_env_webshop.catalog import load_catalog
from agentr1_env_webshop.data import load_goals
from agentr1_env_webshop.env import WebShopEnv
from agentr1_env_webshop.prepare import HUMAN, PRICES, PRODUCTS, SYNTHETIC

DATA = Path(__file__).parent / "data"
ENV_FIELDS = ("Title", "Description", "BulletPoints", "pricing", "Price", "options", "Attributes", "query",
              "category", "product_category")


def _price_text(pricing: list[float]) -> str:
    return " - ".join(f"${p:.2f}" for p in pricing)


def _raw_release(tmp_path: Path):
    """The slice's products back in WebShop's raw format, the attribute file with two instructions, human ones."""
    products = []
    for line in (DATA / "products_slice.jsonl").read_text().splitlines():
        product = json.loads(line)
        if product["asin"] not in {p["asin"] for p in products}:  # the slice holds one ASIN twice
            products.append(product)
    raw = []
    for p in products:
        options = {name.title(): [{"value": v.upper() if name == "color" else v, "image": f"img-{v}"} for v in values]
                   for name, values in p["options"].items()}
        raw.append({"asin": p["asin"], "name": p["Title"], "full_description": p["Description"],
                    "small_description": p["BulletPoints"], "pricing": _price_text(p["pricing"]),
                    "customization_options": options or "", "images": [f"main-{p['asin']}"],
                    "category": p["category"], "query": " " + p["query"].upper(),
                    "product_category": p["product_category"], "brand": "dropped by processing"})
    raw.insert(3, dict(raw[0], name="a duplicate ASIN is dropped"))
    raw.append(dict(raw[1], asin="nan"))
    with_options = [p for p in products if len(p["options"]) == 2][0]
    plain = [p for p in products if not p["options"] and p["Attributes"] != ["DUMMY_ATTR"]][0]
    attributes = {p["asin"]: {"attributes": p["Attributes"]} for p in products if p["Attributes"] != ["DUMMY_ATTR"]}
    attributes[with_options["asin"]].update(instruction="i need this one",
                                           instruction_attributes=with_options["Attributes"][:2])
    attributes[plain["asin"]].update(instruction="find me that", instruction_attributes=plain["Attributes"][:1])
    human = {plain["asin"]: [
        {"instruction": "i want the plain one.", "instruction_attributes": plain["Attributes"][:1],
         "instruction_options": []},
        {"instruction": "no attributes: skipped", "instruction_attributes": [], "instruction_options": []}]}
    files = {}
    for name, value in (("products", raw), ("attributes", attributes), ("human", human)):
        files[name] = tmp_path / f"{name}.json"
        files[name].write_text(json.dumps(value))
    return products, files, with_options, plain


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentr1_core.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=dict(os.environ), timeout=300)


def test_prepare_processes_the_release_into_files_the_env_plays(tmp_path):
    products, files, with_options, plain = _raw_release(tmp_path)
    out = tmp_path / "webshop_data"
    sources = [arg for name, path in files.items() for arg in ("--source", f"{name}={path.as_uri()}")]
    done = cli("webshop", "prepare", "--out", str(out), "--quiet", *sources, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    n_goals = len(with_options["options"][sorted(with_options["options"])[0]]) * \
        len(with_options["options"][sorted(with_options["options"])[1]]) + 1
    assert f"products: {len(products)}, synthetic goals: {n_goals}, human goals: 1" in done.stdout
    assert done.stdout.strip().endswith(f"export WEBSHOP_DATA={out}")

    processed = [json.loads(line) for line in (out / PRODUCTS).read_text().splitlines()]
    assert [p["asin"] for p in processed] == [p["asin"] for p in products]  # duplicate and 'nan' dropped
    for mine, theirs in zip(processed, products):
        assert {f: mine[f] for f in ENV_FIELDS} == {f: theirs[f] for f in ENV_FIELDS}, mine["asin"]
        assert "brand" not in mine and mine["MainImage"] == f"main-{mine['asin']}"
    assert processed[0]["Title"] != "a duplicate ASIN is dropped"
    prices = json.loads((out / PRICES).read_text())
    for p in products:
        assert min(p["pricing"]) <= prices[p["asin"]] <= max(p["pricing"])

    goals = json.loads((out / SYNTHETIC).read_text())
    assert len(goals) == n_goals and {g["asin"] for g in goals} == {with_options["asin"], plain["asin"]}
    option_goal = next(g for g in goals if g["asin"] == with_options["asin"])
    first, second = sorted(with_options["options"])
    assert option_goal["instruction_text"].startswith(
        f"i need this one with {first}: {option_goal['goal_options'][first]}, and {second}: ")
    assert option_goal["price_upper"] > prices[with_options["asin"]]
    assert option_goal["instruction_text"].endswith(f", and price lower than {option_goal['price_upper']:.2f} dollars")
    human = json.loads((out / HUMAN).read_text())
    assert [g["instruction_text"].split(", and price")[0] for g in human] == ["i want the plain one"]

    env = WebShopEnv(catalog=load_catalog(str(out / PRODUCTS), str(out / PRICES)))
    for row in load_goals(str(out / SYNTHETIC), split="all")[:3] + load_goals(str(out / HUMAN), split="all"):
        asyncio.run(env.reset(row))
        for _ in range(env.max_steps):
            result = asyncio.run(env.step(Action(env.expert_action(), [], [])))
            if result.done:
                break
        assert result.done and result.info["bought"] == row["goal"]["asin"] and result.reward > 0


def test_same_seed_same_files_and_another_seed_other_draws(tmp_path):
    from agentr1_env_webshop.prepare import prepare

    _, files, _, _ = _raw_release(tmp_path)
    outs = [tmp_path / name for name in ("a", "b", "c")]
    for out, seed in zip(outs, (0, 0, 1)):
        out.mkdir()
        prepare(files, out, seed=seed)
    read = [json.loads((out / SYNTHETIC).read_text()) for out in outs]
    assert read[0] == read[1]
    assert [g["price_upper"] for g in read[0]] != [g["price_upper"] for g in read[2]] or \
        (outs[0] / PRICES).read_text() != (outs[2] / PRICES).read_text()


@pytest.mark.parametrize("broken, message", [
    ("not json", "the products file is not JSON"),
    ('{"a": 1}', "the products file should hold a JSON list"),
    ('[{"asin": "B1"}]', "not WebShop's product format (missing or bad 'name')"),
])
def test_bad_release_files_are_one_line_errors(tmp_path, broken, message):
    _, files, _, _ = _raw_release(tmp_path)
    files["products"].write_text(broken)
    sources = [arg for name, path in files.items() for arg in ("--source", f"{name}={path}")]
    done = cli("webshop", "prepare", "--out", str(tmp_path / "o"), *sources, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
