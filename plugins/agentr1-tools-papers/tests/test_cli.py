"""The distribution through its installed entry points: the configs and components it registers, the ``papers``
command, a run whose paper service is unreachable (it stops before the model loads), and ``papers serve`` until
Ctrl-C."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agentr1_core.testing.fixtures import ctrl_c_reaches_it
from agentr1_tools_papers.http_service import HttpPaperService


def test_configs_and_components_come_from_the_installed_distribution(cli, tmp_path):
    listed = json.loads(cli("config", "list", "--json", cwd=tmp_path).stdout)
    ours = {r["name"] for r in listed if r["distribution"] == "agentr1-tools-papers"}
    assert ours == {"papersearch", "papersearch-cpu", "papersearch-gpu"}
    plugins = cli("plugins", "--json", cwd=tmp_path)
    assert plugins.returncode == 0
    text = plugins.stdout
    for name in ("paper_search", "paper_expand", "scholar_queries", "paper_recall", "paper_selector"):
        assert f'"{name}"' in text


def test_papers_query_prints_what_the_tool_shows(cli, tmp_path):
    out = cli("papers", "query", "graph attention networks", "--year-max", "2018", "--top-k", "3", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 3 and lines[0] == "[1710.10903] Graph Attention Networks (2017)"


def test_an_unreachable_paper_service_stops_the_run_before_the_model_loads(cli, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    out = cli("run", "papersearch-cpu", f"run_dir={tmp_path / 'run'}",
              f"env.tools=[{{name: paper_search, url: '{url}', timeout: 1.0, retries: 0}}]", cwd=tmp_path)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and url in out.stderr and "unreachable" in out.stderr
    assert "[setup] model" not in out.stdout and not (tmp_path / "run").exists()


def test_papers_serve_answers_until_ctrl_c(small_corpus, tmp_path):
    exe = shutil.which("agentr1-core", path=str(Path(sys.executable).parent)) or "agentr1-core"
    proc = subprocess.Popen([exe, "papers", "serve", "--corpus", str(small_corpus), "--port", "0"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=ctrl_c_reaches_it,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = proc.stdout.readline()
        assert " at http://127.0.0.1:" in line, line + proc.stderr.read()
        url = line.split(" at ")[1].split()[0]
        assert HttpPaperService(url, timeout=10.0).paper("p1").title
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}/paper/search?query=x&limit=Infinity", timeout=10)
        assert refused.value.code == 400
        assert "limit must be an integer from 1 to 100" in json.loads(refused.value.read())["error"]["message"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
