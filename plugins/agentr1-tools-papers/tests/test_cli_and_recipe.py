"""The distribution through its installed entry points: the configs and components it registers, the ``papers``
command, a run whose paper service is unreachable (stops before the model loads), and the ``papersearch-cpu``
recipe end to end at smoke size with the real SmolLM2-135M-Instruct."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

CLI = shutil.which("agentr1-core", path=str(Path(sys.executable).parent)) or "agentr1-core"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_configs_and_components_come_from_the_installed_distribution(tmp_path):
    listed = json.loads(cli("config", "list", "--json", cwd=tmp_path).stdout)
    ours = {r["name"] for r in listed if r["distribution"] == "agentr1-tools-papers"}
    assert ours == {"papersearch", "papersearch-cpu", "papersearch-gpu"}
    plugins = cli("plugins", "--json", cwd=tmp_path)
    assert plugins.returncode == 0
    text = plugins.stdout
    for name in ("paper_search", "paper_expand", "scholar_queries", "paper_recall", "paper_selector"):
        assert f'"{name}"' in text


def test_papers_query_prints_what_the_tool_shows(tmp_path):
    out = cli("papers", "query", "graph attention networks", "--year-max", "2018", "--top-k", "3", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3 and lines[0] == "[1710.10903] Graph Attention Networks (2017)"


def test_an_unreachable_paper_service_stops_the_run_before_the_model_loads(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    out = cli("run", "papersearch-cpu", f"run_dir={tmp_path / 'run'}",
              f"env.tools=[{{name: paper_search, url: '{url}', timeout: 1.0, retries: 0}}]", cwd=tmp_path)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and url in out.stderr and "unreachable" in out.stderr
    assert "[setup] model" not in out.stdout and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_papersearch_cpu_recipe_runs_end_to_end_at_smoke_size(tmp_path):
    run_dir = tmp_path / "run"
    out = cli("run", "papersearch-cpu", f"run_dir={run_dir}", "validation.max_rows=2", "sft.rows=4",
              "sft.batch_size=4", "rollout.batch_size=1", "rollout.n=2", "rollout.max_new_tokens=32",
              "trainer.total_steps=1", "trainer.train_layers=2", "trainer.threads=1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    validations = {r["label"]: r for r in records if r.get("event") == "validation"}
    assert set(validations) == {"before_sft", "after_sft", "after_rl"}
    for v in validations.values():
        assert v["cases"] == 2 and {"crawl_recall", "f1", "precision", "recall", "searches"} <= set(v)
    sft = next(r for r in records if r.get("event") == "sft")
    # the expert searches, searches a missing gold title, then selects the gold it found: every episode finishes
    assert sft["expert_episodes"] == 4 and sft["expert_terminations"] == {"done": 4}
    assert sft["expert_reward_mean"] > 0 and sft["weight_change"] > 0
    iters = [r for r in records if "iteration" in r and "event" not in r]
    assert [r["iteration"] for r in iters] == [1] and iters[0]["episodes"] == 2
