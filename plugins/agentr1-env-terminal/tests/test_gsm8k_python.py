"""gsm8k_python: the core's GSM8K rows with the expert's calculator calls written as python calls."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from agentr1_core.plugins import get_registry
from agentr1_env_terminal.gsm8k_python import as_python_call


def _code(action: str) -> str:
    return json.loads(re.search(r"<tool_call>(.*?)</tool_call>", action, re.S).group(1))["arguments"]["code"]


def test_calculator_calls_become_python_prints_and_answers_stay():
    call = '<tool_call>{"name": "calculator", "arguments": {"expression": "48/2"}}</tool_call>'
    assert _code(as_python_call(call)) == "print(48/2)"
    assert as_python_call("<answer>72</answer>") == "<answer>72</answer>"
    other = '<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>'
    assert as_python_call(other) == other


def test_rows_through_the_registry_match_the_core_rows_and_each_python_step_prints_the_annotation_value():
    registry = get_registry()
    python_rows = registry.build("dataset", "gsm8k_python", {"split": "train", "expert_only": True})
    core_rows = registry.build("dataset", "gsm8k", {"split": "train", "expert_only": True})
    assert [r["prompt"] for r in python_rows] == [r["prompt"] for r in core_rows]
    assert len(python_rows) > 100
    for py, core in zip(python_rows[:40], core_rows[:40]):
        assert py["expert_actions"][-1] == core["expert_actions"][-1]  # the same <answer>
        for action in py["expert_actions"][:-1]:
            out = subprocess.run([sys.executable, "-c", _code(action)], capture_output=True, text=True, timeout=10)
            assert out.returncode == 0 and out.stdout.strip(), action
