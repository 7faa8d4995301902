"""Dump spaCy's part-of-speech reading of every WebShop product name and title (the reference for the title score).

Runs only where spaCy and an ``en_core_web_sm`` model are installed (not a dependency of agentr1); the output is
read by ``bench/webshop_pos_agreement.py``. Usage::

    python bench/webshop_spacy_nouns.py DATA_DIR OUT.json [MODEL_NAME]   # then gzip OUT.json

where DATA_DIR holds ``products_1k_processed.jsonl`` and the goal files (those present are read). Writes
``{text: [[token, pos], ...]}``. ``--smoke`` reads the catalogue sample shipped with agentr1-env-webshop through a
blank English pipeline (``blank:en``: spaCy's tokenizer without a tagger, so every ``pos`` is empty): it checks the
script, not the tags.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import parse_args, results_dir

GOAL_FILES = ("goals_synthetic_derived_seed0.json", "goals_human_derived_seed0.json")


def load_pipeline(name: str):
    import spacy

    return spacy.blank(name.split(":", 1)[1]) if name.startswith("blank:") else spacy.load(name)


def main() -> int:
    import agentr1_env_webshop
    import spacy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", help="folder with products_1k_processed.jsonl and the goal files")
    ap.add_argument("out", nargs="?", help="output JSON (default: bench/results/webshop_spacy_parses.json)")
    ap.add_argument("model", nargs="?", default="en_core_web_sm", help="a spaCy model, or blank:LANG")
    args = parse_args(ap, smoke={"data": str(Path(agentr1_env_webshop.__file__).parent / "data" / "sample"),
                                 "model": "blank:en"})
    if not args.data:
        ap.error("name the WebShop data folder")
    data = Path(args.data)
    out = Path(args.out) if args.out else results_dir() / "webshop_spacy_parses.json"
    nlp = load_pipeline(args.model)
    texts: set[str] = set()
    with (data / "products_1k_processed.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            p = json.loads(line)
            texts.update([p["name"], p["Title"]])
    for name in GOAL_FILES:
        if (data / name).is_file():
            texts.update(g["name"] for g in json.loads((data / name).read_text(encoding="utf-8")))
    ordered = sorted(texts)
    parsed = {t: [[tok.text, tok.pos_] for tok in doc] for t, doc in zip(ordered, nlp.pipe(ordered))}
    meta = {"model": nlp.meta.get("name"), "model_version": nlp.meta.get("version"), "spacy": spacy.__version__}
    result = {"meta": meta, "parses": parsed, **({"smoke": True} if args.smoke else {})}
    out.write_text(json.dumps(result, ensure_ascii=False), encoding="utf-8")
    print(f"{len(parsed)} texts -> {out} ({meta})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
