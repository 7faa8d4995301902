"""The installed distribution: ``agentr1-core plugins``, ``agentr1-core search ...`` through the console script,
and the recipe config ``hotpotqa`` (shipped in the package) resolving to this plugin's components."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentr1_core.components import check_components
from agentr1_core.config import ConfigError, load_config
from agentr1_core.plugins import get_registry

RECIPE = "hotpotqa"  # the named config this distribution ships (agentr1_tools_search/configs/hotpotqa.yaml)
CLI = shutil.which("agentr1-core") or str(Path(sys.executable).parent / "agentr1-core")


def run_cli(*args: str, env_cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENTR1_CACHE": str(env_cache)}
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300, env=env)


def test_plugins_json_lists_the_installed_distribution(isolated_cache):
    out = run_cli("plugins", "--json", env_cache=isolated_cache)
    assert out.returncode == 0, out.stderr
    rows = {r["plugin"]: r for r in json.loads(out.stdout)["plugins"]}
    row = rows["search"]
    assert row["distribution"] == "agentr1-tools-search" and row["status"] == "ok" and row["version"] == "0.1.0"
    assert row["components"] == {
        "command": ["search"], "config": ["hotpotqa", "hotpotqa-cpu", "hotpotqa-gpu"],
        "dataset": ["2wiki", "bamboogle", "hotpotqa", "musique", "nq", "qa_jsonl"],
        "env": ["search_qa"], "reward": ["qa_em", "qa_f1"], "tool": ["search"]}


def test_cli_index_writes_next_to_the_corpus_then_query_uses_it(tmp_path, dev_corpus, isolated_cache):
    corpus = tmp_path / "corpus.jsonl"
    shutil.copy(dev_corpus, corpus)
    out = run_cli("search", "index", str(corpus), env_cache=isolated_cache)
    assert out.returncode == 0, out.stderr
    assert "indexed 1000 passages" in out.stdout
    assert "passage/s" in out.stderr or "passage" in out.stderr  # the tqdm progress bar
    meta = json.loads((tmp_path / "corpus.jsonl.bm25" / "meta.json").read_text())
    assert meta["num_passages"] == 1000 and meta["corpus"] == str(corpus.resolve())
    q = run_cli("search", "query", "VIVA Media", "--corpus", str(corpus), "--top-k", "1", "--json",
                env_cache=isolated_cache)
    assert q.returncode == 0, q.stderr
    assert json.loads(q.stdout)["hits"][0]["title"] == "VIVA Media"


def test_cli_index_out_dir_and_one_line_errors(tmp_path, isolated_cache):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "1", "contents": "\\"Alpha\\"\\nalpha text"}\n{"id": "2"}\n')
    bad = run_cli("search", "index", str(corpus), "--out", str(tmp_path / "idx"), "--quiet",
                  env_cache=isolated_cache)
    assert bad.returncode == 2
    assert bad.stderr.strip() == f"agentr1-core: error: {corpus}:2: missing field 'contents' " \
                                 "(a non-empty string; 'text' is also accepted)"
    corpus.write_text('{"id": "1", "contents": "\\"Alpha\\"\\nalpha text"}\n')
    good = run_cli("search", "index", str(corpus), "--out", str(tmp_path / "idx"), "--quiet",
                   env_cache=isolated_cache)
    assert good.returncode == 0 and (tmp_path / "idx" / "meta.json").is_file()
    missing = run_cli("search", "query", "x", "--index", str(tmp_path / "nope"), env_cache=isolated_cache)
    assert missing.returncode == 2 and "search index not found" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_recipe_config_resolves_to_this_plugins_components():
    cfg = load_config(RECIPE)
    check_components(cfg, get_registry())
    assert cfg.env.name == "search_qa" and cfg.env.tools[0].name == "search"
    assert cfg.data.train.name == "hotpotqa" and cfg.reward.name == "qa_em" and list(cfg.stages) == ["sft", "rl"]
    assert cfg.model.path == "smollm2-135m-instruct"
    scaled = load_config(RECIPE, ["model.path=Qwen/Qwen2.5-3B-Instruct", "data.train.path=/data/train.json",
                                       "env.tools=[{name: search, index: /data/wiki.bm25, top_k: 5}]"])
    check_components(scaled, get_registry())
    assert scaled.env.tools[0].index == "/data/wiki.bm25" and scaled.data.train.path == "/data/train.json"
    with pytest.raises(ConfigError, match=r"env.tools\[0\].topk: unknown parameter .*did you mean 'top_k'"):
        check_components(load_config(RECIPE, ["env.tools=[{name: search, topk: 5}]"]), get_registry())
    with pytest.raises(ConfigError, match="env.contxt"):
        check_components(load_config(RECIPE, ["env.contxt=window"]), get_registry())


def test_recipe_components_build_from_the_config():
    cfg = load_config(RECIPE)
    registry = get_registry()
    train = {k: v for k, v in dict(cfg.data.train).items() if k != "name"}
    rows = registry.build("dataset", cfg.data.train.name, train)
    assert len(rows) == 100
    reward = registry.build("reward", cfg.reward.name, {"format_reward": cfg.reward.format_reward})
    env_params = {k: v for k, v in dict(cfg.env).items() if k != "name"}
    env_params["tools"] = [dict(t) for t in cfg.env.tools]
    env = registry.build("env", "search_qa", env_params)
    assert env.tools["search"].top_k == 3 and callable(reward)


def test_config_show_prints_the_recipe(isolated_cache):
    out = run_cli("config", "show", RECIPE, "env.context=window", env_cache=isolated_cache)
    assert out.returncode == 0, out.stderr
    assert "name: search_qa" in out.stdout and "context: window" in out.stdout
