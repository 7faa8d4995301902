"""The calculator task as an OpenAI Agents SDK agent (``pip install openai-agents``, the ``agents-sdk`` extra): an
``Agent`` with a ``@function_tool`` calculator, run by the SDK's own loop, which calls the model, runs the tools it
asked for and calls the model again until it answers without a tool call (or ``max_turns`` model calls are spent).
Nothing in it knows agentr1: ``endpoint`` could point at any server that speaks the OpenAI Responses API (the SDK's
default model) or chat completions (``api="chat"``).

The task, system prompt, tool name, description and parameter schema are ``calculator_agent``'s, so the model is
shown the same prompts, token for token, whichever of the two agents (and APIs) asks. The tool is the same bounded
evaluator.

The SDK raises when the model fails it: no final output within ``max_turns`` model calls (``MaxTurnsExceeded``), a
reply cut by the token cap (on the Responses API an ``incomplete`` response), a call to a tool the agent does not
have (``ModelBehaviorError``). Those are the model's failures, not the environment's: the agent returns None, a
failed episode (reward 0). The chat-completions agent of ``calculator_agent`` returns a cut reply's text instead.

Two entry points, the same agent: ``agent`` runs ``Runner.run`` in ``asyncio.run`` (a fresh event loop, closed with
the client when the function returns); ``agent_run_sync`` calls ``Runner.run_sync``, which needs a thread with no
running event loop. The ``openai_agent`` flow gives it one: the function runs in a thread of its own (``isolation:
thread``) or in a child process's main thread (``isolation: process``), never on the flow's loop. The client is
closed on the loop it ran on (an async client left to the garbage collector would close its connections on whatever
loop runs then: the rollout's).
"""

from __future__ import annotations

import asyncio

from agents import (Agent, MaxTurnsExceeded, ModelBehaviorError, OpenAIChatCompletionsModel, OpenAIResponsesModel,
                    Runner, function_tool, set_tracing_disabled)
from openai import AsyncOpenAI

from agentr1_gateway.examples.calculator_agent import SYSTEM, TOOLS, calculate

set_tracing_disabled(True)  # the SDK would otherwise send traces to OpenAI's servers
SCHEMA = TOOLS[0]["function"]
APIS = ("responses", "chat")


@function_tool(name_override=SCHEMA["name"], description_override=SCHEMA["description"], strict_mode=False)
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression with + - * / // % ** and parentheses.

    Args:
        expression: for example (12 + 3) * 4
    """
    return calculate(expression)


# the chat agent's parameter schema, key for key (the one derived from the signature adds titles and would change
# the prompt); the arguments are still checked against the signature when the tool runs
calculator.params_json_schema = SCHEMA["parameters"]


def build(client: AsyncOpenAI, model: str, api: str = "responses") -> Agent:
    """The agent on ``api``: ``responses`` (``OpenAIResponsesModel``, the SDK's default) or ``chat``
    (``OpenAIChatCompletionsModel``)."""
    if api not in APIS:
        raise ValueError(f"api must be one of {', '.join(APIS)}, got {api!r}")
    model_class = OpenAIResponsesModel if api == "responses" else OpenAIChatCompletionsModel
    return Agent(name="calculator", instructions=SYSTEM, tools=[calculator],
                 model=model_class(model=model, openai_client=client))


def _client(endpoint) -> AsyncOpenAI:
    # max_retries=0: a refused call (the episode's max_turns, a prompt too long) is final, retrying only waits
    return AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)


async def solve(task, endpoint, api: str = "responses", max_turns: int = 3) -> str | None:
    """The final output (e.g. ``<answer>42</answer>``); None when the model gave none (see the module's docstring)."""
    client = _client(endpoint)
    try:
        result = await Runner.run(build(client, endpoint.model, api), task["prompt"], max_turns=max_turns)
        return str(result.final_output)
    except (MaxTurnsExceeded, ModelBehaviorError):
        return None
    finally:
        await client.close()


def agent(task, client, endpoint, api: str = "responses", max_turns: int = 3) -> str | None:
    """The flow's entry point: ``client`` (the sync OpenAI client the flow hands over) is not used, the SDK builds
    its own async one from ``endpoint``."""
    return asyncio.run(solve(task, endpoint, api, max_turns))


def agent_run_sync(task, client, endpoint, api: str = "responses", max_turns: int = 3) -> str | None:
    """``agent`` with ``Runner.run_sync`` instead of ``asyncio.run(Runner.run(...))``. ``run_sync`` runs on this
    thread's default event loop (making one if there is none, and leaving it open); the loop is made here, so that
    the client's connections can be closed on it and the loop with them when the episode's work is done."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    async_client = _client(endpoint)
    try:
        result = Runner.run_sync(build(async_client, endpoint.model, api), task["prompt"], max_turns=max_turns)
        return str(result.final_output)
    except (MaxTurnsExceeded, ModelBehaviorError):
        return None
    finally:
        loop.run_until_complete(async_client.close())
        asyncio.set_event_loop(None)
        loop.close()
