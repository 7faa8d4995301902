"""The example agent's calculator: bounded like the native tool (a tower of powers is refused at once, never
computed) and answering exactly what the native ``calculator`` tool answers, so the model sees the same text."""

from __future__ import annotations

import asyncio

import pytest

from agentr1_core.builtin.calculator import CalculatorTool
from agentr1_gateway.examples.calculator_agent import calculate


@pytest.mark.parametrize("expression", ["(((9**64)**64)**64)**64", "9**9**9", "2**2**2**2**2**2", "(1e50)**100",
                                        "1e-300**-100", "1/0", "__import__('os')", "9" * 600])
def test_expressions_that_would_hold_the_interpreter_or_raise_come_back_as_errors(expression):
    assert calculate(expression).startswith("Error: ")


@pytest.mark.parametrize("expression", ["6*7", "(12 + 3) * 4", "7/2", "2**10", "10**20", "1e20", "-3 % 5", "2**0.5",
                                        "(9**64)", "1/3"])
def test_results_are_written_as_the_native_tool_writes_them(expression):
    assert calculate(expression) == asyncio.run(CalculatorTool().execute(expression=expression))
