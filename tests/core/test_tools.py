"""BaseTool safety: argument validation, timeouts, exceptions, huge and non-UTF-8 output; the calculator tool."""

from __future__ import annotations

import asyncio

import pytest

from agentr1_core.builtin.calculator import CalculatorError, CalculatorTool, evaluate
from agentr1_core.testing import check_tool, run_async
from agentr1_core.tools import BaseTool, ToolResult, call_tool


class _Tool(BaseTool):
    name = "probe"
    description = "test tool"
    parameters = {"type": "object", "properties": {"mode": {"type": "string"}, "n": {"type": "integer"}},
                  "required": ["mode"]}
    timeout = 0.2

    async def execute(self, mode: str, n: int = 0):
        if mode == "raise":
            raise RuntimeError("boom")
        if mode == "hang":
            await asyncio.sleep(30)
        if mode == "huge":
            return "x" * 1_000_000
        if mode == "bytes":
            return b"ok \xff\xfe bad"
        if mode == "reward":
            return ToolResult("rewarded", reward=0.5)
        return f"ok {n}"


@pytest.mark.parametrize("expr,value", [
    ("1 + 2 * 3", 7), ("(12 + 3) * 4", 60), ("2 ** 10", 1024), ("-3 + +5", 2), ("7 / 2", 3.5), ("7 // 2", 3),
    ("2 ^ 3", 8), ("17 % 5", 2), ("1.5 * 4", 6.0),
])
def test_calculator_evaluates_arithmetic(expr, value):
    assert evaluate(expr) == value


@pytest.mark.parametrize("expr", [
    "__import__('os').system('true')", "open('x')", "a + 1", "2 ** 100000", "1 / 0", "[1, 2]", "1 +", "9" * 600,
    "lambda: 1",
])
def test_calculator_rejects_everything_else(expr):
    with pytest.raises(CalculatorError):
        evaluate(expr)


def test_calculator_passes_conformance_check():
    result = check_tool(CalculatorTool(), {"expression": "6 * 7"})
    assert result.text == "42"
    assert run_async(CalculatorTool().execute(expression="1/0")).startswith("Error: division by zero")


@pytest.mark.parametrize("args,error,fragment", [
    ({}, "bad_arguments", "missing required argument(s): mode"),
    ({"mode": 3}, "bad_arguments", "argument 'mode' must be string"),
    ({"mode": "ok", "n": True}, "bad_arguments", "argument 'n' must be integer"),
    ({"mode": "ok", "zzz": 1}, "bad_arguments", "unknown argument(s): zzz"),
    (["mode"], "bad_arguments", "must be a JSON object"),
    ({"mode": "raise"}, "exception", "RuntimeError: boom"),
    ({"mode": "hang"}, "timeout", "timed out after 0.2s"),
])
def test_call_tool_turns_failures_into_error_results(args, error, fragment):
    result = run_async(call_tool(_Tool(), args))
    assert result.error == error
    assert fragment in result.text


def test_call_tool_caps_huge_output_and_cleans_bytes():
    huge = run_async(call_tool(_Tool(), {"mode": "huge"}))
    assert huge.error is None and len(huge.text) < 4100 and "truncated 996000 characters" in huge.text
    cleaned = run_async(call_tool(_Tool(), {"mode": "bytes"}))
    assert cleaned.text == "ok \ufffd\ufffd bad"
    assert run_async(call_tool(_Tool(), {"mode": "reward"})).reward == 0.5


def test_openai_schema_shape():
    schema = CalculatorTool().openai_schema()
    assert schema["type"] == "function"
    assert schema["function"]["name"] == "calculator"
    assert schema["function"]["parameters"]["required"] == ["expression"]
