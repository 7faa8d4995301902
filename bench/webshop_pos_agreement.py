"""How often the offline noun source changes WebShop's title score, measured against spaCy's en_core_web_sm.

Input: the spaCy parses written by ``bench/webshop_spacy_nouns.py`` (run once where spaCy and an en_core_web_sm model
are installed). Pairs scored: for every distinct goal name (the goal product's title), the goal product itself plus
the top-10 BM25 results for one of its goal instructions -- the products a policy would plausibly buy. For each pair
both rules compute ``title_score`` and ``r_type`` (query/category matches are the same for both); we count pairs where
they differ. Also reported: token-level noun/non-noun agreement where both tokenisations coincide, and the same
numbers for a naive rule (every alphabetic token is a noun) to show what the tagger buys.

    python bench/webshop_pos_agreement.py --data ../shared/data/webshop --spacy bench/results/webshop_spacy_parses.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import agentr1_env_webshop
from agentr1_env_webshop.catalog import load_catalog, read_json_records
from agentr1_env_webshop.nouns import NOUN_TAGS, perceptron_tags
from common import parse_args, write_result

ROOT = Path(__file__).resolve().parent
SAMPLE = Path(agentr1_env_webshop.__file__).parent / "data" / "sample"  # the catalogue sample in the wheel
GOAL_FILES = ("goals_synthetic_derived_seed0.json", "goals_human_derived_seed0.json")  # those present are read


def score(purchased: list[str], desired: list[str]) -> float:
    return 0.2 if not desired else len(set(purchased) & set(desired)) / len(desired)


def r_type(title: float, query_match: bool, category_match: bool) -> float:
    r = 1.0 if (query_match or category_match or title > 0.2) else 0.5
    return 0.0 if title == 0.0 else 0.1 if title < 0.1 else r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent.parent / "shared" / "data" / "webshop"))
    ap.add_argument("--spacy", default=str(ROOT / "results" / "webshop_spacy_parses.json.gz"))
    ap.add_argument("--out", default=None, help="result file (default: bench/results/webshop_pos_agreement.json)")
    args = parse_args(ap, smoke={"data": str(SAMPLE)})
    data = Path(args.data)
    raw = Path(args.spacy).read_bytes()
    ref = json.loads(gzip.decompress(raw) if args.spacy.endswith(".gz") else raw)
    parses = ref["parses"]
    cat = load_catalog(str(data / "products_1k_processed.jsonl"), str(data / "product_prices_seed0.json"))
    goals = [g for name in GOAL_FILES if (data / name).is_file() for g in read_json_records(data / name)]

    rules = {
        "spacy": lambda t: [w.lower() for w, p in parses[t] if p in NOUN_TAGS],
        "perceptron": lambda t: [w.lower() for w, p in perceptron_tags(t) if p in NOUN_TAGS],
        "all_alpha": lambda t: [w.lower() for w, _ in perceptron_tags(t) if w.isalpha()],
    }
    by_name: dict[str, dict] = {}
    for g in goals:
        by_name.setdefault(g["name"], g)
    pairs = []
    for name, g in by_name.items():
        cands = list(dict.fromkeys([g["asin"], *cat.search(g["instruction_text"], 10)]))
        pairs += [(g, cat.products[a]) for a in cands]
    out: dict = {"reference": ref["meta"], "distinct_goal_names": len(by_name), "pairs": len(pairs)}
    for rule in ("perceptron", "all_alpha"):
        diff_title = diff_type = 0
        abs_delta = 0.0
        for g, p in pairs:
            qm = p["query"] == g["query"]
            cm = len({x.strip() for x in p["product_category"].split("\u203a")}
                     & {x.strip() for x in g["product_category"].split("\u203a")}) >= 2
            s_ref = score(rules["spacy"](p["name"]), rules["spacy"](g["name"]))
            s_new = score(rules[rule](p["name"]), rules[rule](g["name"]))
            diff_title += s_ref != s_new
            abs_delta += abs(s_ref - s_new)
            diff_type += r_type(s_ref, qm, cm) != r_type(s_new, qm, cm)
        out[rule] = {"title_score_differs": diff_title / len(pairs), "r_type_differs": diff_type / len(pairs),
                     "mean_abs_title_delta": abs_delta / len(pairs)}
    agree = total = same_tok = 0
    for text, toks in parses.items():
        ref_toks = [(w, p) for w, p in toks if w.strip()]
        mine = perceptron_tags(text)
        if [w for w, _ in ref_toks] == [w for w, _ in mine]:
            same_tok += 1
            for (_, a), (_, b) in zip(ref_toks, mine):
                total += 1
                agree += (a in NOUN_TAGS) == (b in NOUN_TAGS)
    out["tokenisation_identical_share"] = same_tok / len(parses)
    out["token_noun_agreement"] = agree / total
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=2), encoding="utf-8")
    else:
        write_result("webshop_pos_agreement", out)
    print(f"reference: {ref['meta']}; {len(pairs)} (goal, candidate) pairs over {len(by_name)} goal names")
    print(f"{'rule':<12}{'title differs':>15}{'r_type differs':>16}{'mean |d title|':>16}")
    for rule in ("perceptron", "all_alpha"):
        r = out[rule]
        print(f"{rule:<12}{r['title_score_differs']:>15.3f}{r['r_type_differs']:>16.3f}"
              f"{r['mean_abs_title_delta']:>16.3f}")
    print(f"token noun/non-noun agreement {out['token_noun_agreement']:.3f} "
          f"(on the {out['tokenisation_identical_share']:.1%} of names tokenised identically)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
