"""One run reports every problem a user brings, one line each, exit code 2, before the model loads: config keys and
values, plugin names in the allow/block lists, unreadable lines and bad rows of every rows file, tools a row names,
and the calls a row's expert makes.

Each case runs the installed console script from a scratch folder. "Before the model loads" is checked by the
absence of the ``[setup]`` line and by the time it takes being far from a model load (no assertion on seconds: the
model path is a folder that does not load, so reaching it would be an error of another kind).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CLI = str(Path(sys.executable).parent / "agentr1-core")
CALL = '<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>'


def _call(name: str, **args: str) -> str:
    return CALL.format(name=name, args=json.dumps(args))


def _rows(path: Path) -> Path:
    lines = [
        json.dumps({"prompt": "What is 2+3?", "reward_model": {"ground_truth": "5"},
                    "expert_actions": [_call("calculater", expression="2+3"), "<answer>5</answer>"]}),
        "this line is not JSON",
        json.dumps({"prompt": "What is 4*3?", "reward_model": {"ground_truth": "12"},
                    "env_kwargs": {"tools": ["calculator", "serch"]}}),
        json.dumps({"prompt": "What is 4*5?"}),
        json.dumps({"prompt": "What is 4*6?", "reward_model": {"ground_truth": "24"},
                    "expert_actions": [_call("calculator", expr="4*6")]}),
        "[1, 2]",
        json.dumps({"prompt": "What is 1+1?", "reward_model": {"ground_truth": "2"},
                    "expert_actions": ['<tool_call>{"name": "calculator", "arguments": </tool_call>']}),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TQDM_DISABLE": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run([CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _lines(proc: subprocess.CompletedProcess) -> list[str]:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert all(line.startswith("agentr1-core: error: ") for line in lines), lines
    assert "[setup]" not in proc.stdout and "Traceback" not in proc.stderr
    return [line.removeprefix("agentr1-core: error: ") for line in lines]


def _expect(lines: list[str], *parts: str) -> None:
    assert any(all(p in line for p in parts) for line in lines), f"no line with {parts}:\n" + "\n".join(lines)


def test_one_run_lists_config_plugin_json_row_tool_and_expert_problems(tmp_path):
    rows = _rows(tmp_path / "rows.jsonl")
    val = tmp_path / "val.jsonl"
    val.write_text('{"prompt": "x", "reward_model": {"ground_truth": "1"}}\n{broken\n', encoding="utf-8")
    lines = _lines(_run("run", "tiny", f"data.train={{name: jsonl, path: {rows}}}",
                        f"data.val={{name: jsonl, path: {val}}}", "plugins.block=[agentr1-libary]",
                        "trainer.totl_steps=3", "rollout.n=0", "stages=[sft, rl]", f"run_dir={tmp_path / 'run'}",
                        cwd=tmp_path))
    _expect(lines, "config error at trainer.totl_steps", "did you mean 'total_steps'")  # a config typo
    _expect(lines, "config error at rollout.n", ">= 1")  # a value
    _expect(lines, "plugins.block[0]", "'agentr1-libary' is not an installed plugin")  # the typo'd block list
    _expect(lines, f"{rows}:2: not valid JSON")  # a bad JSON line ...
    _expect(lines, f"{rows}:6: each line must be a JSON object")
    _expect(lines, f"{val}:2: not valid JSON")  # ... of every rows file
    _expect(lines, f"{rows}:4: missing reward_model.ground_truth")  # ... beside the other bad rows
    _expect(lines, f"{rows}:3: env_kwargs.tools names unknown tool 'serch'", "did you mean 'search'")
    _expect(lines, f"{rows}:1: expert_actions[0] calls unknown tool 'calculater'", "did you mean 'calculator'")
    _expect(lines, f"{rows}:5: expert_actions[0]", "missing required argument(s): expression")
    _expect(lines, f"{rows}:7: expert_actions[0]: the tool call cannot be read")
    assert len(lines) == len(set(lines)) == 11, "\n".join(lines)


def test_expert_calls_are_checked_only_when_a_warm_start_replays_them(tmp_path):
    rows = _rows(tmp_path / "rows.jsonl")
    lines = _lines(_run("run", "tiny", f"data.train={{name: jsonl, path: {rows}}}", "data.val=null", "stages=[rl]",
                        f"run_dir={tmp_path / 'run'}", cwd=tmp_path))
    assert not any("expert_actions" in line for line in lines), lines
    _expect(lines, "unknown tool 'serch'")


def test_a_misspelled_allow_list_names_the_plugin_not_the_tools_it_hides(tmp_path):
    lines = _lines(_run("run", "tiny", "plugins.allow=[agentr1-tools-serch]", f"run_dir={tmp_path / 'run'}",
                        cwd=tmp_path))
    _expect(lines, "config error at plugins.allow[0]", "'agentr1-tools-serch' is not an installed plugin",
            "did you mean 'agentr1-tools-search'")
    assert len(lines) == 1, lines


def test_the_environment_lists_are_checked_too_and_the_core_cannot_be_blocked(tmp_path):
    env = {**os.environ, "TQDM_DISABLE": "1", "AGENTR1_PLUGINS_BLOCK": "webshoop"}
    proc = subprocess.run([CLI, "run", "tiny", "plugins.block=[agentr1-core]", f"run_dir={tmp_path / 'run'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    lines = _lines(proc)
    _expect(lines, "config error at plugins.block[0]", "is the core")
    _expect(lines, "AGENTR1_PLUGINS_BLOCK", "'webshoop' is not an installed plugin", "did you mean 'webshop'")


def test_a_distribution_blocked_by_its_import_name_is_blocked(tmp_path):
    """``agentr1_tools_search`` and ``agentr1-tools-search`` name one distribution, as pip compares them."""
    lines = _lines(_run("run", "tiny", "plugins.block=[agentr1_tools_search]", "env.tools=[calculator, search]",
                        f"run_dir={tmp_path / 'run'}", cwd=tmp_path))
    _expect(lines, "env.tools[1]", "unknown tool 'search'", "agentr1-tools-search declares it but is blocked")


def test_config_show_reports_every_key_and_value_problem(tmp_path):
    lines = _lines(_run("config", "show", "tiny", "trainer.totl_steps=3", "rollout.n=0", "rollout.top_p=abc",
                        "env.name=tool_envv", cwd=tmp_path))
    _expect(lines, "trainer.totl_steps")
    _expect(lines, "rollout.top_p")
    _expect(lines, "rollout.n")
    _expect(lines, "unknown env 'tool_envv'")


@pytest.mark.parametrize("bad_lines", [3, 25])
def test_bad_lines_are_capped_with_a_count(tmp_path, bad_lines):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join(["{"] * bad_lines + ['{"prompt": "x", "reward_model": {"ground_truth": "1"}}']))
    lines = _lines(_run("run", "tiny", f"data.train={{name: jsonl, path: {rows}}}", f"run_dir={tmp_path / 'run'}",
                        cwd=tmp_path))
    unreadable = [line for line in lines if "not valid JSON" in line]
    assert len(unreadable) == min(bad_lines, 10)
    if bad_lines > 10:
        _expect(lines, f"{rows}: {bad_lines - 10} more lines that could not be read")
