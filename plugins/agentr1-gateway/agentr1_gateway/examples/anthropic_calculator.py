"""The calculator task written with the ``anthropic`` client (``pip install anthropic``, the ``anthropic`` extra):
Messages API calls with a ``calculator`` tool, its ``tool_use`` blocks answered with ``tool_result`` blocks, until
the model replies without a tool call. Nothing in it knows agentr1: ``endpoint`` could point at any server that
speaks Anthropic Messages (the SDK adds ``/v1/messages`` to the root it is given).

The task, system prompt, tool name, description and parameter schema are ``calculator_agent``'s, so the model is
shown the same prompts, token for token, as the chat-completions agent. The tool is the same bounded evaluator.

``agent`` waits for each whole message; ``streaming_agent`` (or ``stream=True``) reads each reply as a stream of
events with ``client.messages.stream(...)`` and takes the message it adds up to.
"""

from __future__ import annotations

import anthropic

from agentr1_gateway.examples.calculator_agent import SYSTEM, TOOLS, calculate

ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in TOOLS]
MAX_TOKENS = 512  # Messages requires it; the run's own cap (rollout.max_new_tokens) is lower and wins


def agent(task, client, endpoint, max_calls: int = 3, stream: bool = False) -> str | None:
    """The flow's entry point; ``client`` (the OpenAI client the flow hands over) is not used."""
    claude = anthropic.Anthropic(base_url=endpoint.base_url.removesuffix("/v1"), api_key=endpoint.api_key,
                                 max_retries=0)  # a refused call (max_turns, a prompt too long) is final
    try:
        messages = [{"role": "user", "content": task["prompt"]}]
        for _ in range(max_calls):
            request = {"model": endpoint.model, "max_tokens": MAX_TOKENS, "system": SYSTEM, "messages": messages,
                       "tools": ANTHROPIC_TOOLS}
            if stream:
                with claude.messages.stream(**request) as events:
                    reply = events.get_final_message()
            else:
                reply = claude.messages.create(**request)
            calls = [block for block in reply.content if block.type == "tool_use"]
            if not calls:
                return "".join(block.text for block in reply.content if block.type == "text")
            messages.append({"role": "assistant", "content": [block.model_dump(exclude_none=True)
                                                              for block in reply.content]})
            results = []
            for call in calls:
                expression = str(call.input.get("expression", "")) if isinstance(call.input, dict) else ""
                result = calculate(expression) if call.name == "calculator" else "unknown tool"
                results.append({"type": "tool_result", "tool_use_id": call.id, "content": result})
            messages.append({"role": "user", "content": results})
        return None
    finally:
        claude.close()


def streaming_agent(task, client, endpoint, max_calls: int = 3) -> str | None:
    """``agent`` reading every reply as a stream."""
    return agent(task, client, endpoint, max_calls=max_calls, stream=True)
