"""BaseTool safety: argument validation, timeouts, exceptions, huge and non-UTF-8 output; the calculator tool."""

from __future__ import annotations

import asyncio
import json

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
    "lambda: 1", "(1e50) ** 100", "(((9**64)**64)**64)**64", "1e400 - 1", "9" * 200,
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


class _Blocking(BaseTool):
    """Blocks its thread like a synchronous client inside async code."""

    name = "blocking"
    description = "sleeps without awaiting"
    timeout = 0.3

    def __init__(self, seconds: float = 2.0):
        self.seconds = seconds

    async def execute(self):
        import time

        time.sleep(self.seconds)
        return "done"


def test_a_blocking_tool_times_out_without_stalling_the_event_loop():
    async def go():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.ensure_future(ticker())
        result = await call_tool(_Blocking(), {})
        seen = ticks
        task.cancel()
        return result, seen

    result, ticks = run_async(go())
    assert result.error == "timeout" and "timed out after 0.3s" in result.text
    assert ticks > 0  # the other episodes' coroutines kept running while the tool blocked


def test_a_fast_blocking_tool_and_a_plain_function_tool_return_normally():
    class Plain(BaseTool):
        name = "plain"
        description = "a synchronous execute"
        parameters = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}

        def execute(self, x):
            return str(x * 2)

    assert run_async(call_tool(_Blocking(seconds=0.01), {})).text == "done"
    assert run_async(call_tool(Plain(), {"x": 21})).text == "42"


def test_a_hanging_awaiting_tool_in_its_thread_is_cancelled_after_the_timeout():
    import threading
    import time

    result = run_async(call_tool(_Tool(), {"mode": "hang"}))
    assert result.error == "timeout"
    for _ in range(200):  # its thread ends once the cancellation reaches the tool's own loop
        if not any(t.name == "agentr1-tool-probe" for t in threading.enumerate()):
            break
        time.sleep(0.01)
    assert not any(t.name == "agentr1-tool-probe" for t in threading.enumerate())


@pytest.mark.parametrize("value,error,problems", [
    (None, "bad_output", None),
    ({"answer": 42}, None, ["non_string_output"]),
    ([1, 2], None, ["non_string_output"]),
    (7, None, ["non_string_output"]),
])
def test_non_string_results_are_errors_or_flagged(value, error, problems):
    class Odd(BaseTool):
        name = "odd"
        description = "returns something that is not a string"

        async def execute(self):
            return value

    result = run_async(call_tool(Odd(), {}))
    assert result.error == error
    assert result.info.get("output_problems") == problems
    if error:
        assert "returned None" in result.text
    else:
        assert result.text == json.dumps(value)
