"""Chat completions with ``stream: true``, read by the official ``openai`` client (``create(stream=True)`` and the
``.stream()`` helper): the streamed text and tool calls are the plain reply's, the recorded prompt is the same, and
the fields clients send by default are accepted."""

from __future__ import annotations

import asyncio
import json

import pytest

USER = {"role": "user", "content": "What is 6*7? Use the calculator."}
TOOL = {"type": "function", "function": {
    "name": "calculator", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"],
                   "additionalProperties": False}, "strict": True}}
CALL_TEXT = ('Let me compute that with the calculator first. '
             '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7 + 0*123456789"}}</tool_call>')
LONG_TEXT = "The answer is 42, because six times seven is forty-two; no tool was needed for this one."


def plain(client, **kw):
    reply = client.chat.completions.create(model="m", **kw)
    message = reply.choices[0].message
    calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or []]
    return message.content, calls, reply.choices[0].finish_reason, reply.usage.model_dump()


def streamed(client, **kw):
    """What ``create(stream=True)`` delivers, accumulated the way an agent does it."""
    content, calls, finish, usage, roles = "", {}, None, None, []
    for chunk in client.chat.completions.create(model="m", stream=True, stream_options={"include_usage": True},
                                                **kw):
        if chunk.usage is not None:
            usage = chunk.usage.model_dump()
        for choice in chunk.choices:
            roles += [choice.delta.role] if choice.delta.role else []
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                if call.id:
                    assert entry["id"] is None and call.type == "function"  # id, type and name come once, first
                    entry["id"], entry["name"] = call.id, call.function.name
                entry["arguments"] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    assert roles == ["assistant"]
    ordered = [calls[i] for i in sorted(calls)]
    assert all(c["id"].startswith("call_") for c in ordered)
    return content or None, [(c["name"], c["arguments"]) for c in ordered], finish, usage


def helper(client, **kw):
    """What the ``.stream()`` helper accumulates."""
    deltas = []
    with client.chat.completions.stream(model="m", **kw) as stream:
        for event in stream:
            if event.type == "content.delta":
                deltas.append(event.delta)
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert "".join(deltas) == (message.content or "")
    return (message.content or None, [(c.function.name, c.function.arguments) for c in message.tool_calls or []],
            final.choices[0].finish_reason)


@pytest.mark.parametrize("answer", [CALL_TEXT, LONG_TEXT], ids=["tool_call", "text"])
def test_a_streamed_reply_is_the_plain_reply_and_the_prompt_is_the_same(serve, openai_client, answer):
    kw = {"messages": [{"role": "system", "content": "Be exact."}, USER], "tools": [TOOL]}

    async def go():
        async with serve([answer]) as gateway:
            client = openai_client(gateway)
            try:
                return (await asyncio.to_thread(plain, client, **kw), await asyncio.to_thread(streamed, client, **kw),
                        await asyncio.to_thread(helper, client, **kw), gateway)
            finally:
                client.close()

    reference, by_chunks, by_helper, gateway = asyncio.run(go())
    content, calls, finish, usage = reference
    if answer == CALL_TEXT:
        assert content == "Let me compute that with the calculator first." and finish == "tool_calls"
        assert calls == [("calculator", json.dumps({"expression": "6*7 + 0*123456789"}))]
    else:
        assert content == LONG_TEXT and calls == [] and finish == "stop"
    assert by_chunks == reference  # text, calls, finish reason and the usage chunk
    assert by_helper == reference[:3]
    assert len(gateway.calls) == 3 and gateway.refusals == []
    assert gateway.calls[0].prompt_ids == gateway.calls[1].prompt_ids == gateway.calls[2].prompt_ids
    assert len({json.dumps(c.observation.messages) for c in gateway.calls}) == 1


def test_a_streamed_tool_call_sent_back_shows_the_model_its_own_text(serve, openai_client, tokenizer):
    def episode(client):
        with client.chat.completions.stream(model="m", messages=[USER], tools=[TOOL]) as stream:
            message = stream.get_final_completion().choices[0].message
        history = [USER, message.model_dump(exclude_none=True, exclude={"parsed"}),
                   {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "42"}]
        for call in history[1]["tool_calls"]:
            call["function"].pop("parsed_arguments", None)
        client.chat.completions.create(model="m", messages=history, tools=[TOOL])

    async def go():
        async with serve([CALL_TEXT, "42"]) as gateway:
            client = openai_client(gateway)
            try:
                await asyncio.to_thread(episode, client)
            finally:
                client.close()
            return gateway

    gateway = asyncio.run(go())
    shown = gateway.calls[1].observation.messages
    assert shown[2] == {"role": "assistant", "content": CALL_TEXT}  # the exact text, not a re-written call
    assert gateway.calls[1].prompt_ids[:len(gateway.calls[0].prompt_ids)] == gateway.calls[0].prompt_ids


@pytest.mark.parametrize("fields", [
    {"parallel_tool_calls": False},
    {"tool_choice": "auto"},
    {"tool_choice": "required"},
    {"tool_choice": {"type": "function", "function": {"name": "calculator"}}},
    {"response_format": {"type": "text"}},
    {"n": 1, "temperature": 0.2, "top_p": 0.9, "seed": 3, "user": "u", "metadata": {"k": "v"}, "store": False},
], ids=lambda f: "+".join(f))
def test_fields_clients_send_by_default_are_accepted(serve, openai_client, fields):
    async def go():
        async with serve([CALL_TEXT]) as gateway:
            client = openai_client(gateway)
            try:
                return await asyncio.to_thread(plain, client, messages=[USER], tools=[TOOL], **fields)
            finally:
                client.close()

    content, calls, finish, _ = asyncio.run(go())
    assert calls and finish == "tool_calls"  # required/named choices are accepted, not enforced: the reply as is


def test_tool_choice_none_returns_the_whole_text_as_content(serve, openai_client):
    async def go():
        async with serve([CALL_TEXT]) as gateway:
            client = openai_client(gateway)
            try:
                return (await asyncio.to_thread(plain, client, messages=[USER], tools=[TOOL], tool_choice="none"),
                        await asyncio.to_thread(streamed, client, messages=[USER], tools=[TOOL], tool_choice="none"))
            finally:
                client.close()

    reference, by_chunks = asyncio.run(go())
    assert reference[:3] == (CALL_TEXT, [], "stop") and by_chunks == reference
