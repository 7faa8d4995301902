"""The expert policy through the core's AgentEnvLoop with the real SmolLM2 tokenizer, the installed plugin as the
CLI lists it, and the goal every row carries for the env."""

from __future__ import annotations

import asyncio
import json
import sys
import subprocess
from pathlib import Path

import pytest

from agentr1_core.flows import AgentEnvLoop, FlowContext
from agentr1_core.rollout.base import SamplingParams
from agentr1_env_webshop.data import load_goals

DATA = Path(__file__).parent / "data"
PRODUCTS = str(DATA / 'products_slice.jsonl')
PRICES = str(DATA / 'prices_slice.json')
SYNTHETIC = str(DATA / 'goals_synthetic_slice.json')


def test_expert_episodes_through_agent_env_loop(smollm2_tokenizer):
    ctx = FlowContext(engine=None, tokenizer=smollm2_tokenizer, sampling=SamplingParams(),
                      env_config={"name": "webshop", "products": PRODUCTS, "prices": PRICES, "max_steps": 12},
                      max_turns=12, policy="expert")
    rows = load_goals(SYNTHETIC, shuffle_seed=None, end=4)  # file order: targets that score 1.0
    trajs = [asyncio.run(AgentEnvLoop(ctx).run(row)) for row in rows]
    for traj, row in zip(trajs, rows):
        assert traj.termination == "done", traj.info
        last = traj.steps[-1]
        assert last.done and last.action_text == "click[buy now]" and last.info["bought"] == row["goal"]["asin"]
        assert traj.total_reward == last.reward == 1.0
        assert traj.steps[0].action_text.startswith("search[") and traj.steps[0].anchor == "search"
        for step in traj.steps:
            assert step.response_ids[-1] == smollm2_tokenizer.eos_token_id
            assert smollm2_tokenizer.decode(step.response_ids[:-1]) == step.action_text
            assert step.prompt_ids and step.anchor
            assert step.info["valid_action"]
    prompts = [len(s.prompt_ids) for t in trajs for s in t.steps]
    assert max(prompts) < 2048


def test_plugin_listed_by_installed_cli():
    exe = Path(sys.executable).parent / "agentr1-core"  # the console script installed beside this interpreter
    assert exe.is_file(), "agentr1-core is not installed"
    out = subprocess.run([exe, "plugins", "--json"], capture_output=True, text=True, timeout=120, check=True)
    plugins = {p["plugin"]: p for p in json.loads(out.stdout)["plugins"]}
    entry = plugins["webshop"]
    assert entry["distribution"] == "agentr1-env-webshop" and entry["status"] == "ok"
    assert "webshop" in entry["components"]["env"] and "webshop" in entry["components"]["dataset"]


def test_the_recipe_rows_carry_the_goal_the_env_reads():
    from agentr1_core.config import load_config
    from agentr1_core.errors import ConfigError
    from agentr1_core.plugins import get_registry
    from agentr1_core.preflight import check_rows, load_rows

    cfg, registry = load_config("webshop-cpu"), get_registry()
    rows = {key: load_rows(cfg, registry, key) for key in ("data.train", "data.val")}
    check_rows(cfg, registry, rows)
    prompt_only = {"prompt": rows["data.val"][0]["prompt"]}
    with pytest.raises(ConfigError) as raised:
        check_rows(cfg, registry, {"data.val": [rows["data.val"][0], prompt_only, {**prompt_only, "goal": {}}]})
    assert str(raised.value) == ("data.val row 2: missing goal.asin, which dataset 'webshop' and env 'webshop' read "
                                 "(2 of 3 rows of data.val)")
