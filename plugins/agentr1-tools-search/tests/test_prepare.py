"""``agentr1-core search prepare``: fetch the HotpotQA files (a local file in the official format stands in for the
original URLs, which are unreachable here), write the corpus, and point the ``hotpotqa`` recipe at them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import agentr1_tools_search

SAMPLE_DEV = Path(agentr1_tools_search.__file__).parent / "data" / "hotpotqa_dev50.json"


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "agentr1_core.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=full_env, timeout=300)


def test_prepare_writes_the_files_and_a_corpus_the_recipe_reads(tmp_path):
    out = tmp_path / "hotpot"
    done = cli("search", "prepare", "--out", str(out), "--source", f"train={SAMPLE_DEV.as_uri()}",
               "--source", f"dev={SAMPLE_DEV}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    records = json.loads(SAMPLE_DEV.read_text(encoding="utf-8"))
    titles = {title for rec in records for title, _ in rec["context"]}
    corpus = [json.loads(line) for line in (out / "hotpotqa_corpus.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(corpus) == len(titles) and {p["title"] for p in corpus} == titles
    assert all(p["contents"].startswith(f"\"{p['title']}\"\n") for p in corpus)
    assert (out / "hotpot_train_v1.1.json").read_bytes() == SAMPLE_DEV.read_bytes()
    exports = done.stdout.strip().splitlines()[-1]
    assert exports.startswith("export ") and f"HOTPOTQA_CORPUS={out / 'hotpotqa_corpus.jsonl'}" in exports
    env = dict(item.split("=", 1) for item in exports[len("export "):].split())
    shown = cli("config", "show", "hotpotqa", cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    assert f"path: {out / 'hotpot_dev_distractor_v1.json'}" in shown.stdout
    assert f"corpus: {out / 'hotpotqa_corpus.jsonl'}" in shown.stdout


def test_unreachable_or_unknown_sources_are_one_line_errors(tmp_path):
    down = cli("search", "prepare", "--out", str(tmp_path / "x"), "--source", "train=http://127.0.0.1:9/train.json",
               "--source", f"dev={SAMPLE_DEV}", cwd=tmp_path)
    assert down.returncode == 2 and "cannot fetch http://127.0.0.1:9/train.json" in down.stderr
    assert len(down.stderr.strip().splitlines()) == 1 and not list((tmp_path / "x").glob("*.json"))
    typo = cli("search", "prepare", "--out", str(tmp_path / "x"), "--source", "trian=a.json", cwd=tmp_path)
    assert typo.returncode == 2 and "NAME one of: train, dev" in typo.stderr
