"""Write the WebShop sample shipped in the wheel (agentr1_env_webshop/data/sample) from the full data files.

The sample keeps the file names of the full data so that ``WEBSHOP_DATA`` can point at either folder:
products_1k_processed.jsonl  the products of the test slice (fields the env reads)
product_prices_seed0.json    their drawn prices (seed 0)
goals_synthetic_derived_seed0.json  every synthetic goal on those products, at most 60 per product, in file order
                             (1,804 goals: enough for WebShop's index splits test [0, 500), val [500, 1500),
                             train [1500, end) to be non-empty).

Usage: python scripts/make_sample_data.py FULL_WEBSHOP_FOLDER
"""

from __future__ import annotations

import json
import shutil
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
SLICE = HERE / "tests" / "data"
OUT = HERE / "agentr1_env_webshop" / "data" / "sample"
PER_PRODUCT = 60


def main(full: Path) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SLICE / "products_slice.jsonl", OUT / "products_1k_processed.jsonl")
    shutil.copyfile(SLICE / "prices_slice.json", OUT / "product_prices_seed0.json")
    shutil.copyfile(SLICE / "LICENSE.WebShop.MIT.txt", OUT / "LICENSE.WebShop.MIT.txt")
    asins = {json.loads(line)["asin"] for line in (OUT / "products_1k_processed.jsonl").open(encoding="utf-8")}
    taken: Counter[str] = Counter()
    goals = []
    for goal in json.loads((full / "goals_synthetic_derived_seed0.json").read_text(encoding="utf-8")):
        if goal["asin"] in asins and taken[goal["asin"]] < PER_PRODUCT:
            taken[goal["asin"]] += 1
            goals.append(goal)
    (OUT / "goals_synthetic_derived_seed0.json").write_text(json.dumps(goals, separators=(",", ":")),
                                                            encoding="utf-8")
    print(f"{len(asins)} products, {len(goals)} goals on {len(taken)} of them -> {OUT}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
