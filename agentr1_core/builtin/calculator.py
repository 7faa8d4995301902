"""The built-in ``calculator`` tool: a safe arithmetic evaluator (no ``eval``), and the example ``BaseTool``.

It parses the expression with ``ast`` and walks only number literals and the operators + - * / // % ** and unary
minus/plus, with caps on exponent size and result magnitude so that a model cannot hang the process.
"""

from __future__ import annotations

import ast
import operator
from typing import Any

from agentr1_core.tools import BaseTool

_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
MAX_EXPONENT = 100
MAX_MAGNITUDE = 1e100
MAX_LENGTH = 500


class CalculatorError(ValueError):
    pass


def evaluate(expression: str) -> int | float:
    """Value of an arithmetic expression; ``CalculatorError`` for anything else."""
    if len(expression) > MAX_LENGTH:
        raise CalculatorError(f"expression longer than {MAX_LENGTH} characters")
    try:
        tree = ast.parse(expression.replace("^", "**").replace("×", "*").replace("÷", "/"), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"cannot parse {expression!r}") from exc
    return _eval(tree.body)


def _eval(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        if abs(node.value) > MAX_MAGNITUDE:  # a literal such as 1e400 (inf) or a 500-digit integer
            raise CalculatorError("number out of range")
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} is too large (max {MAX_EXPONENT})")
        try:
            value = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError as exc:
            raise CalculatorError("division by zero") from exc
        except ArithmeticError as exc:  # a float power that overflows: (1e50) ** 100
            raise CalculatorError("result out of range") from exc
        if isinstance(value, complex) or abs(value) > MAX_MAGNITUDE:
            raise CalculatorError("result out of range")
        return value
    raise CalculatorError(f"unsupported syntax: {ast.dump(node)[:60]}")


def format_number(value: int | float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}" if isinstance(value, float) else str(value)


class CalculatorTool(BaseTool):
    name = "calculator"
    description = "Evaluate an arithmetic expression with + - * / // % ** and parentheses."
    parameters = {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "for example (12 + 3) * 4"}},
        "required": ["expression"],
    }
    runs_in_thread = False  # bounded pure arithmetic: never blocks, so it runs on the rollout's loop

    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout

    async def execute(self, **arguments: Any) -> str:
        try:
            return format_number(evaluate(arguments["expression"]))
        except CalculatorError as exc:
            return f"Error: {exc}"
