"""The calculator task as an ordinary OpenAI-client agent: apart from its calculator, it knows nothing of agentr1 and
would run against any OpenAI-compatible server. ``agent(task, client)`` answers ``task["prompt"]`` with the help of
a Python tool.

The tool is the core's safe evaluator (``agentr1_core.builtin.calculator``): no ``eval``, exponents and every
intermediate result capped, so a model's ``(((9**64)**64)**64)**64`` is refused at once instead of holding the
interpreter, and its results are written exactly as the native ``tool_env`` writes them. Copy an evaluator with such
caps when you lift this agent out of agentr1.
"""

import json

from agentr1_core.builtin.calculator import CalculatorError, evaluate, format_number

SYSTEM = ("Solve the user's arithmetic problem. First call the calculator tool with the expression, then reply with "
          "only the result as <answer>NUMBER</answer>.")
TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression with + - * / // % ** and parentheses.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string",
                                                                   "description": "for example (12 + 3) * 4"}},
                   "required": ["expression"]}}}]


def calculate(expression: str) -> str:
    """The tool's answer: the value, or ``Error: ...`` (what the model sees either way)."""
    try:
        return format_number(evaluate(expression))
    except (CalculatorError, ArithmeticError) as exc:  # ArithmeticError: a float power that overflows
        return f"Error: {exc}"


def agent(task, client, max_calls=3):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["prompt"]}]
    for _ in range(max_calls):
        reply = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS).choices[0].message
        if not reply.tool_calls:
            return reply.content  # the answer, e.g. <answer>42</answer>
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            args = json.loads(call.function.arguments)
            expression = str(args.get("expression", "")) if isinstance(args, dict) else ""
            result = calculate(expression) if call.function.name == "calculator" else "unknown tool"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None
