"""The calculator task as an ordinary OpenAI-client agent: it knows nothing of agentr1 and would run against any
OpenAI-compatible server. ``agent(task, client)`` answers ``task["prompt"]`` with the help of a Python tool."""

import ast
import json
import operator

SYSTEM = ("Solve the user's arithmetic problem. First call the calculator tool with the expression, then reply with "
          "only the result as <answer>NUMBER</answer>.")
TOOLS = [{"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression with + - * / // % ** and parentheses.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string",
                                                                   "description": "for example (12 + 3) * 4"}},
                   "required": ["expression"]}}}]
OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
       ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.USub: operator.neg, ast.UAdd: operator.pos}


def calculate(expression: str) -> str:
    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            base, power = value(node.left), value(node.right)
            if abs(power) > 64:
                raise ValueError("exponent too large")
            return base ** power
        if isinstance(node, ast.BinOp) and type(node.op) in OPS:
            return OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in OPS:
            return OPS[type(node.op)](value(node.operand))
        raise ValueError("unsupported expression")
    try:
        result = value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError) as exc:
        return f"Error: {exc}"
    return str(int(result)) if float(result).is_integer() else f"{result:.10g}"


def agent(task, client, max_calls=3):
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["prompt"]}]
    for _ in range(max_calls):
        reply = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS).choices[0].message
        if not reply.tool_calls:
            return reply.content  # the answer, e.g. <answer>42</answer>
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            args = json.loads(call.function.arguments)
            result = calculate(str(args.get("expression", ""))) if call.function.name == "calculator" else "unknown tool"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return None
