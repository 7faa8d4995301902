"""The same conversation is the same prompt whatever protocol carries it: a system prompt, a user turn, a tool call
the model made, the tool's result and a follow-up, sent through chat completions, Anthropic Messages and OpenAI
Responses by their official clients, give the engine identical prompt ids (and so does a history whose tool call
the agent wrote itself)."""

from __future__ import annotations

import asyncio
import json

import anthropic
import pytest

SYSTEM = "Solve the user's arithmetic problem with the calculator."
QUESTION = "What is 6*7?"
FOLLOW_UP = "Reply with the number only."
SCHEMA = {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]}
DESCRIPTION = "Evaluate an arithmetic expression."
CALL_TEXT = '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>'
OWN_ID = "call_written_by_the_agent"  # a tool call the gateway never issued: written with the tool format


def chat(client, own):
    tools = [{"type": "function", "function": {"name": "calculator", "strict": False, "parameters": SCHEMA,
                                                "description": DESCRIPTION}}]  # key order and strict do not matter
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    if own:
        call = {"id": OWN_ID, "type": "function",
                "function": {"name": "calculator", "arguments": json.dumps({"expression": "6*7"})}}
    else:
        call = client.chat.completions.create(model="m", messages=messages, tools=tools).choices[0].message \
            .tool_calls[0].model_dump()
    messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": call["id"], "content": "42"},
                 {"role": "user", "content": FOLLOW_UP}]
    client.chat.completions.create(model="m", messages=messages, tools=tools)


def messages_api(client, own):
    tools = [{"name": "calculator", "description": DESCRIPTION, "input_schema": SCHEMA}]
    history = [{"role": "user", "content": QUESTION}]
    if own:
        content, call_id = [{"type": "tool_use", "id": OWN_ID, "name": "calculator",
                             "input": {"expression": "6*7"}}], OWN_ID
    else:
        content = client.messages.create(model="m", max_tokens=32, system=SYSTEM, messages=history,
                                         tools=tools).content
        call_id = next(block.id for block in content if block.type == "tool_use")
    history += [{"role": "assistant", "content": content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "42"},
                                             {"type": "text", "text": FOLLOW_UP}]}]
    client.messages.create(model="m", max_tokens=32, system=[{"type": "text", "text": SYSTEM}], messages=history,
                           tools=tools)


def responses(client, own):
    tools = [{"type": "function", "name": "calculator", "description": DESCRIPTION, "parameters": SCHEMA,
              "strict": False}]
    history = [{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}]
    if own:
        output = [{"type": "function_call", "call_id": OWN_ID, "name": "calculator",
                   "arguments": json.dumps({"expression": "6*7"})}]
    else:
        first = client.responses.create(model="m", instructions=SYSTEM, input=history, tools=tools)
        output = [item.model_dump(exclude_none=True) for item in first.output]
    call_id = next(item["call_id"] for item in output if item["type"] == "function_call")
    history += output + [{"type": "function_call_output", "call_id": call_id, "output": "42"},
                         {"role": "user", "content": FOLLOW_UP}]
    client.responses.create(model="m", instructions=SYSTEM, input=history, tools=tools)


@pytest.mark.parametrize("own", [False, True], ids=["the_models_call", "a_call_the_agent_wrote"])
def test_one_conversation_is_one_prompt_through_every_protocol(serve, openai_client, own):
    def anthropic_client(gateway):
        return anthropic.Anthropic(base_url=gateway.base_url.removesuffix("/v1"), api_key=gateway.key,
                                   max_retries=0, timeout=120,
                                   http_client=anthropic.DefaultHttpxClient(trust_env=False))

    async def episode(work, client_of):
        async with serve([CALL_TEXT, "42"]) as gateway:
            client = client_of(gateway)
            try:
                await asyncio.to_thread(work, client, own)
            finally:
                client.close()
            assert gateway.refusals == []
            return [call.prompt_ids for call in gateway.calls], [call.observation.messages for call in gateway.calls]

    async def go():
        return [await episode(chat, openai_client), await episode(messages_api, anthropic_client),
                await episode(responses, openai_client)]

    (chat_ids, chat_shown), (messages_ids, _), (responses_ids, _) = asyncio.run(go())
    assert chat_ids == messages_ids == responses_ids and len(chat_ids) == (1 if own else 2)
    last = chat_shown[-1]
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "user"]
    assert last[2]["content"] == CALL_TEXT  # the model's own text, or the same call written by the tool format
    assert json.loads(last[0]["content"].split("<tools>\n")[1].split("\n</tools>")[0]) == {
        "type": "function", "function": {"name": "calculator", "description": DESCRIPTION, "parameters": SCHEMA}}
