"""``agentr1-core search prepare --out DIR``: the full HotpotQA data for the ``hotpotqa`` recipe.

Fetches the official HotpotQA train set and dev (distractor) set from the original release, and writes a search
corpus of every context paragraph in them (``{"id", "title", "contents"}`` lines, one per distinct title, the format
of the shipped sample corpus). Prints the environment variables the recipe reads: ``HOTPOTQA_TRAIN``,
``HOTPOTQA_DEV``, ``HOTPOTQA_CORPUS``. ``--source NAME=URL_OR_PATH`` replaces one original URL (a mirror, or a file
downloaded before).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from agentr1_core.fetch import FetchError, add_prepare_command, fetch, sources_from_args

SOURCES = {
    "train": "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_train_v1.1.json",
    "dev": "http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json",
}
FILES = {"train": "hotpot_train_v1.1.json", "dev": "hotpot_dev_distractor_v1.json"}
CORPUS = "hotpotqa_corpus.jsonl"


def write_corpus(question_files: list[Path], out: Path) -> int:
    """One passage per distinct context title of the question files; returns the number written."""
    seen: set[str] = set()
    tmp = out.with_suffix(".part")
    with open(tmp, "w", encoding="utf-8") as handle:
        for path in question_files:
            try:
                records = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise FetchError(f"{path}: not a HotpotQA JSON file ({exc.msg})") from exc
            for rec in records:
                for title, sentences in rec.get("context") or []:
                    if title in seen:
                        continue
                    seen.add(title)
                    text = "".join(sentences).strip()
                    handle.write(json.dumps({"id": f"hotpot-{len(seen) - 1}", "title": title,
                                             "contents": f"\"{title}\"\n{text}"}, ensure_ascii=False) + "\n")
    if not seen:
        tmp.unlink()
        raise FetchError(f"no context paragraphs in {', '.join(map(str, question_files))}")
    tmp.replace(out)
    return len(seen)


def cmd_prepare(args: argparse.Namespace) -> int:
    out = Path(args.out).expanduser().resolve()
    sources = sources_from_args(args, SOURCES)
    files = {name: fetch(src, out / FILES[name], quiet=args.quiet) for name, src in sources.items()}
    passages = write_corpus(list(files.values()), out / CORPUS)
    print(f"wrote {out / CORPUS} ({passages:,} passages); build its index once with: "
          f"agentr1-core search index {out / CORPUS}")
    print(f"export HOTPOTQA_TRAIN={files['train']} HOTPOTQA_DEV={files['dev']} HOTPOTQA_CORPUS={out / CORPUS}")
    return 0


def register_prepare(sub) -> None:
    add_prepare_command(sub, "fetch the full HotpotQA data and write its search corpus", SOURCES,
                        "folder for the HotpotQA files and the corpus", cmd_prepare)
