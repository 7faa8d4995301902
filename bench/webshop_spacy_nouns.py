"""Dump spaCy's part-of-speech reading of every WebShop product name and title (the reference for the title score).

Runs only where spaCy and an ``en_core_web_sm`` model are installed (not a dependency of agentr1); the output is
read by ``bench/webshop_pos_agreement.py``. Usage::

    python bench/webshop_spacy_nouns.py DATA_DIR OUT.json [MODEL_NAME]   # then gzip OUT.json

where DATA_DIR holds ``products_1k_processed.jsonl`` and the goal files. Writes ``{text: [[token, pos], ...]}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    import spacy

    data, out = Path(sys.argv[1]), Path(sys.argv[2])
    model = sys.argv[3] if len(sys.argv) > 3 else "en_core_web_sm"
    nlp = spacy.load(model)
    texts: set[str] = set()
    with (data / "products_1k_processed.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            p = json.loads(line)
            texts.update([p["name"], p["Title"]])
    for name in ("goals_synthetic_derived_seed0.json", "goals_human_derived_seed0.json"):
        texts.update(g["name"] for g in json.loads((data / name).read_text(encoding="utf-8")))
    ordered = sorted(texts)
    parsed = {t: [[tok.text, tok.pos_] for tok in doc] for t, doc in zip(ordered, nlp.pipe(ordered))}
    meta = {"model": nlp.meta.get("name"), "model_version": nlp.meta.get("version"), "spacy": spacy.__version__}
    out.write_text(json.dumps({"meta": meta, "parses": parsed}, ensure_ascii=False), encoding="utf-8")
    print(f"{len(parsed)} texts -> {out} ({meta})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
