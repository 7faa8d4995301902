"""Agents that rewrite their history, for the branch tests: ordinary OpenAI-client code on the calculator task."""

import json

from agentr1_gateway.examples.calculator_agent import SYSTEM, TOOLS, calculate

HELPER_SYSTEM = "You are a careful helper. Work out the user's sub-question with the calculator and reply in words."
HELPER_TOOLS = [{"type": "function", "function": {
    "name": "ask_helper", "description": "Ask a helper agent a sub-question; it answers in words.",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}}}]


def _calls(client, messages, tools, run_tool, max_calls):
    """Call the model until it answers without a tool call or ``max_calls`` calls were made; ``run_tool(name,
    arguments)`` answers each tool call. Returns the final text (None when it never gave one)."""
    for _ in range(max_calls):
        reply = client.chat.completions.create(model="policy", messages=messages, tools=tools).choices[0].message
        if not reply.tool_calls:
            return reply.content
        messages.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id,
                             "content": run_tool(call.function.name, json.loads(call.function.arguments))})
    return None


def compacting(task, client, keep_calls=2, max_calls=4):
    """After ``keep_calls`` calculator calls it replaces its whole history with the system prompt and one user
    message summarising the work so far, then carries on from there."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["prompt"]}]
    done = []
    for _ in range(keep_calls):
        answer = _calls(client, messages, TOOLS, lambda name, args: _calculator(args, done), max_calls=1)
        if answer is not None:
            return answer
    summary = (f"Summary of the work so far on: {task['prompt']}\nComputed: " + "; ".join(done)
               + "\nContinue from here.")
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": summary}]
    return _calls(client, messages, TOOLS, lambda name, args: _calculator(args, done), max_calls)


def _calculator(args, done):
    result = calculate(str(args.get("expression", "")))
    done.append(f"{args.get('expression')} = {result}")
    return result


def with_subagent(task, client, max_calls=4):
    """The main conversation may call ``ask_helper``: a second conversation, with its own system prompt and the
    calculator, answers the question, and its final text is the tool result the main conversation sees."""
    def ask_helper(question):
        helper = [{"role": "system", "content": HELPER_SYSTEM}, {"role": "user", "content": question}]
        answer = _calls(client, helper, TOOLS, lambda name, args: calculate(args["expression"]), max_calls)
        return answer or "no answer"

    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["prompt"]}]
    return _calls(client, messages, HELPER_TOOLS, lambda name, args: ask_helper(args["question"]), max_calls)


def subagent_with_branch_rewards(task, client, rewards=None):
    """``with_subagent``, returning rewards of their own for branches (default: 0.5 for the helper's, branch 1)."""
    answer = with_subagent(task, client)
    return {"answer": answer, "branch_rewards": rewards if rewards is not None else {1: 0.5}}
