"""Rebuild the shipped sample data (package data and test slices) from a checkout of the multi-hop QA fixtures.

Usage: python scripts/make_sample_data.py /path/to/data/multihop_qa

Writes ``agentr1_tools_search/data/`` (HotpotQA dev sample with contexts, HotpotQA train sample without contexts,
and one retrieval corpus made of the context paragraphs of both) and the small slices under ``tests/data/``.
It is a maintenance script: nothing at run time reads the source folder.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PKG_DATA = HERE / "agentr1_tools_search" / "data"
TEST_DATA = HERE / "tests" / "data"


def paragraph_text(sentences: list[str]) -> str:
    return "".join(sentences).strip()


def main(src: Path) -> None:
    PKG_DATA.mkdir(parents=True, exist_ok=True)
    TEST_DATA.mkdir(parents=True, exist_ok=True)
    dev = json.loads((src / "hotpotqa/hotpot_dev_distractor_sample50.json").read_text())
    train = json.loads((src / "hotpotqa/hipporag_hotpotqa_train100.json").read_text())
    (PKG_DATA / "hotpotqa_dev50.json").write_text(json.dumps(dev, ensure_ascii=False))
    train_light = [{k: v for k, v in q.items() if k != "context"} for q in train]
    (PKG_DATA / "hotpotqa_train100.json").write_text(json.dumps(train_light, ensure_ascii=False))

    lines, seen = [], set()
    with (src / "hotpotqa/hotpot_dev_sample100_context_corpus.jsonl").open() as fh:
        for line in fh:
            rec = json.loads(line)
            seen.add(rec["title"])
            lines.append({"id": f"hotpot-dev-{rec['id']}", "title": rec["title"], "contents": rec["contents"]})
    n = 0
    for q in train:
        for title, sentences in q["context"]:
            if title in seen:
                continue
            seen.add(title)
            lines.append({"id": f"hotpot-train-{n}", "title": title,
                          "contents": f"\"{title}\"\n{paragraph_text(sentences)}"})
            n += 1
    with (PKG_DATA / "hotpotqa_sample_corpus.jsonl").open("w") as fh:
        for rec in lines:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")

    musique = json.loads((src / "musique/hipporag_musique_train100.json").read_text())
    with (TEST_DATA / "musique_train5.jsonl").open("w") as fh:
        for q in musique[:5]:
            fh.write(json.dumps(q, ensure_ascii=False) + "\n")
    for name, rel, k in [("nq_open_dev20.jsonl", "nq/NQ-open.dev.jsonl", 20),
                         ("bamboogle20.jsonl", "bamboogle/r1searcher_bamboogle125.jsonl", 20),
                         ("2wiki_dev20.jsonl", "2wikimultihopqa/r1searcher_2wiki_dev500_qa_only.jsonl", 20),
                         ("flashrag_nq_format5.jsonl", "corpus_examples/flashrag_quickstart_nq_test_format.jsonl", 5),
                         ("search_r1_corpus_format.jsonl",
                          "corpus_examples/search_r1_example_corpus_wiki18_format.jsonl", 10)]:
        with (src / rel).open() as fh:
            head = [next(fh) for _ in range(k)]
        (TEST_DATA / name).write_text("".join(head))
    print(f"corpus: {len(lines)} passages; dev {len(dev)}, train {len(train)} questions")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
