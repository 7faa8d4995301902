"""Anthropic Messages through the official ``anthropic`` client: plain, ``stream=True`` and the ``messages.stream``
helper give the same reply for the same prompt; tool uses come back with the gateway's ids and, sent back, show the
model its own text; stop reasons, ``count_tokens`` and every refusal in Anthropic's error shape."""

from __future__ import annotations

import asyncio
import dataclasses

import anthropic
import httpx
import pytest

TOOL = {"name": "calculator", "description": "Evaluate an arithmetic expression.",
        "input_schema": {"type": "object", "properties": {"expression": {"type": "string"}},
                         "required": ["expression"]}}
USER = {"role": "user", "content": "What is 6*7? Use the calculator."}
CALL_TEXT = ('I will use the calculator for this one. '
             '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7 + 0*123456789"}}</tool_call>')
ANSWER = "The product of six and seven is 42, as the calculator confirmed."


@pytest.fixture
def anthropic_client():
    """``anthropic_client(gateway)``: the official client pointed at ``gateway`` (its base URL has no ``/v1``)."""
    def make(gateway, key=None):
        return anthropic.Anthropic(base_url=gateway.base_url.removesuffix("/v1"), api_key=key or gateway.key,
                                   max_retries=0, timeout=120,
                                   http_client=anthropic.DefaultHttpxClient(trust_env=False))

    return make


def run(serve, client_of, answers, work, **gateway_kw):
    """``work(client)`` in a thread against a gateway answering ``answers``; returns (its result, the gateway)."""
    async def go():
        async with serve(answers, **gateway_kw) as gateway:
            client = client_of(gateway)
            try:
                return await asyncio.to_thread(work, client), gateway
            finally:
                client.close()

    return asyncio.run(go())


def blocks(message):
    return [block.model_dump(exclude_none=True, exclude={"parsed_output", "caller"}) for block in message.content]


@pytest.mark.parametrize("answer", [CALL_TEXT, ANSWER], ids=["tool_use", "text"])
def test_plain_streamed_and_helper_replies_are_the_same_and_so_is_the_prompt(serve, anthropic_client, answer):
    kw = {"model": "claude-any", "max_tokens": 64, "system": "Be exact.", "messages": [USER], "tools": [TOOL]}

    def work(client):
        plain = client.messages.create(**kw)
        events = list(client.messages.create(stream=True, **kw))
        with client.messages.stream(**kw) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        return plain, events, text, final

    (plain, events, text, final), gateway = run(serve, anthropic_client, [answer], work)
    assert plain.type == "message" and plain.role == "assistant" and plain.model == "agentr1-policy"
    if answer == CALL_TEXT:
        assert plain.stop_reason == "tool_use"
        assert [b.type for b in plain.content] == ["text", "tool_use"]
        assert plain.content[0].text == "I will use the calculator for this one."
        call = plain.content[1]
        assert call.id.startswith("toolu_") and call.name == "calculator"
        assert call.input == {"expression": "6*7 + 0*123456789"}
    else:
        assert plain.stop_reason == "end_turn" and blocks(plain) == [{"type": "text", "text": ANSWER}]
    assert plain.usage.input_tokens == len(gateway.calls[0].prompt_ids)
    assert plain.usage.output_tokens == len(gateway.calls[0].action.token_ids)
    # the raw events: start, each block's start, deltas and stop, the stop reason and usage, the end
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == len(plain.content)
    assert events[-2].delta.stop_reason == plain.stop_reason and events[-2].usage.output_tokens == \
        plain.usage.output_tokens
    streamed = {"text": "", "json": ""}
    for event in events:
        if event.type == "content_block_delta":
            streamed["text" if event.delta.type == "text_delta" else "json"] += getattr(
                event.delta, "text", None) or getattr(event.delta, "partial_json", None) or ""
    assert streamed["text"] == text == "".join(b.text for b in plain.content if b.type == "text")
    # the helper's accumulated message is the plain one, ids aside (each reply issues its own)
    assert [{k: v for k, v in b.items() if k != "id"} for b in blocks(final)] == \
        [{k: v for k, v in b.items() if k != "id"} for b in blocks(plain)]
    assert final.stop_reason == plain.stop_reason and final.usage.output_tokens == plain.usage.output_tokens
    assert len(gateway.calls) == 3 and len({tuple(c.prompt_ids) for c in gateway.calls}) == 1


def test_a_tool_use_sent_back_shows_the_model_its_own_text(serve, anthropic_client, tokenizer):
    def work(client):
        first = client.messages.create(model="m", max_tokens=64, messages=[USER], tools=[TOOL])
        call = next(b for b in first.content if b.type == "tool_use")
        history = [USER, {"role": "assistant", "content": first.content},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "42"},
                                                {"type": "text", "text": "Now answer."}]}]
        second = client.messages.create(model="m", max_tokens=64, messages=history, tools=[TOOL])
        return second

    second, gateway = run(serve, anthropic_client, [CALL_TEXT, ANSWER], work)
    assert second.content[0].text == ANSWER
    shown = gateway.calls[1].observation.messages
    assert shown[1:] == [USER, {"role": "assistant", "content": CALL_TEXT},
                         {"role": "tool", "name": "calculator", "content": "<tool_response>\n42\n</tool_response>"},
                         {"role": "user", "content": "Now answer."}]
    assert gateway.calls[1].prompt_ids[:len(gateway.calls[0].prompt_ids)] == gateway.calls[0].prompt_ids


def test_stop_reasons_max_tokens_and_stop_sequence(serve, anthropic_client):
    def work(client):
        stopped = client.messages.create(model="m", max_tokens=64, messages=[USER], stop_sequences=["</answer>"])
        capped = client.messages.create(model="m", max_tokens=3, messages=[USER])
        return stopped, capped

    async def go():
        async with serve(["<answer>42</answer>"]) as gateway:
            respond = gateway.respond

            async def capped_at_the_cap(prompt_ids, sampling):
                action = await respond(prompt_ids, sampling)
                return dataclasses.replace(action, finish_reason="length") if sampling.max_new_tokens == 3 else action

            gateway.respond = capped_at_the_cap
            client = anthropic_client(gateway)
            try:
                return await asyncio.to_thread(work, client)
            finally:
                client.close()

    stopped, capped = asyncio.run(go())
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "</answer>"
    assert capped.stop_reason == "max_tokens" and capped.stop_sequence is None


def test_system_blocks_are_the_system_string_and_count_tokens_is_the_prompts_length(serve, anthropic_client):
    def work(client):
        counted = client.messages.count_tokens(model="m", system=[{"type": "text", "text": "Be "},
                                                                  {"type": "text", "text": "exact."}],
                                               messages=[USER], tools=[TOOL])
        client.messages.create(model="m", max_tokens=8, system="Be exact.", messages=[USER], tools=[TOOL])
        client.messages.create(model="m", max_tokens=8, messages=[USER],
                               system=[{"type": "text", "text": "Be exact.", "cache_control": {"type": "ephemeral"}}],
                               tools=[TOOL], metadata={"user_id": "u"}, extra_body={"temperature": 0.3, "top_p": 0.9},
                               tool_choice={"type": "auto"}, thinking={"type": "disabled"},
                               extra_headers={"anthropic-version": "2023-06-01"})
        return counted

    counted, gateway = run(serve, anthropic_client, ["ok"], work)
    assert len(gateway.calls) == 2 and gateway.calls[0].prompt_ids == gateway.calls[1].prompt_ids
    assert counted.input_tokens == len(gateway.calls[0].prompt_ids)


ERRORS = [  # name, request (keyword arguments of messages.create), what the message must name
    ("max_tokens_missing", {"raw": {"model": "m", "messages": [USER]}}, "max_tokens"),
    ("max_tokens_zero", {"max_tokens": 0, "messages": [USER]}, "max_tokens"),
    ("messages_empty", {"max_tokens": 8, "messages": []}, "messages"),
    ("role_system", {"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ("image_block", {"max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]},
     "messages[0].content[0].type"),
    ("tool_use_without_id", {"max_tokens": 8, "messages": [USER, {"role": "assistant", "content": [
        {"type": "tool_use", "name": "calculator", "input": {}}]}]}, "messages[1].content[0].id"),
    ("tool_use_input_a_list", {"max_tokens": 8, "messages": [USER, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t", "name": "calculator", "input": [1]}]}]}, "messages[1].content[0].input"),
    ("tool_result_without_id", {"max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "content": "42"}]}]}, "messages[0].content[0].tool_use_id"),
    ("tool_result_is_error_a_string", {"max_tokens": 8, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "42", "is_error": "yes"}]}]},
     "messages[0].content[0].is_error"),
    ("tool_without_schema", {"max_tokens": 8, "messages": [USER], "tools": [{"name": "calculator"}]},
     "tools[0].input_schema"),
    ("server_tool", {"max_tokens": 8, "messages": [USER], "tools": [{"type": "web_search_20250305",
                                                                     "name": "web_search"}]}, "tools[0].type"),
    ("tool_choice_unknown_tool", {"max_tokens": 8, "messages": [USER], "tools": [TOOL],
                                  "tool_choice": {"type": "tool", "name": "weather"}}, "tool_choice.name"),
    ("stop_sequence_empty", {"max_tokens": 8, "messages": [USER], "stop_sequences": [""]}, "stop_sequences[0]"),
    ("thinking_enabled", {"max_tokens": 2048, "messages": [USER], "thinking": {"type": "enabled",
                                                                               "budget_tokens": 1024}}, "thinking"),
    ("output_config_format", {"max_tokens": 8, "messages": [USER], "output_config": {"format": {
        "type": "json_schema", "schema": {"type": "object"}}}}, "output_config.format"),
    ("mcp_servers", {"max_tokens": 8, "messages": [USER], "extra_body": {"mcp_servers": [{"type": "url"}]}},
     "mcp_servers"),
]


@pytest.mark.parametrize("name,request_,field", ERRORS, ids=[e[0] for e in ERRORS])
def test_a_bad_or_unsupported_field_is_an_anthropic_400_naming_it_and_the_episode_serves_on(serve, anthropic_client,
                                                                                            name, request_, field):
    def work(client):
        with pytest.raises(anthropic.BadRequestError) as refused:
            if "raw" in request_:  # a body that messages.create would not send: the client's own post
                client.post("/v1/messages", body=request_["raw"], cast_to=anthropic.types.Message)
            else:
                client.messages.create(model="m", **request_)
        served = client.messages.create(model="m", max_tokens=8, messages=[USER])
        return refused.value, served

    (refused, served), gateway = run(serve, anthropic_client, ["fine"], work)
    assert refused.status_code == 400 and refused.body["type"] == "error"
    assert refused.body["error"]["type"] == "invalid_request_error" and f"'{field}'" in refused.body["error"]["message"]
    assert served.content[0].text == "fine" and [r.status for r in gateway.refusals] == [400]


def test_keys_paths_sizes_and_long_prompts_get_anthropic_shaped_errors(serve, anthropic_client):
    huge = {"role": "user", "content": "word " * 2000}

    def work(client, wrong):
        out = {}
        for name, call, kind in [
            ("key", lambda: wrong.messages.create(model="m", max_tokens=8, messages=[USER]),
             anthropic.AuthenticationError),
            ("long", lambda: client.messages.create(model="m", max_tokens=8, messages=[huge]),
             anthropic.BadRequestError),
            ("count_long", lambda: client.messages.count_tokens(model="m", messages=[huge]),
             anthropic.BadRequestError),
        ]:
            with pytest.raises(kind) as refused:
                call()
            out[name] = refused.value.body
        return out

    async def go():
        async with serve(max_prompt_tokens=200) as gateway:
            client, wrong = anthropic_client(gateway), anthropic_client(gateway, key="sk-ant-wrong")
            headers = {"x-api-key": gateway.key, "anthropic-version": "2023-06-01"}
            root = gateway.base_url.removesuffix("/v1")
            try:
                out = await asyncio.to_thread(work, client, wrong)
                async with httpx.AsyncClient(trust_env=False, timeout=120) as raw:
                    out["path"] = (await raw.post(f"{root}/v1/messages/batches", headers=headers, json={})).json()
                    big = b'{"messages": "' + b"x" * (17 * 1024 ** 2) + b'"}'
                    out["size"] = (await raw.post(f"{root}/v1/messages", headers=headers, content=big)).json()
            finally:
                client.close()
                wrong.close()
            return out, gateway

    out, gateway = asyncio.run(go())
    assert out["key"]["error"]["type"] == "authentication_error"
    assert out["long"]["error"]["type"] == "invalid_request_error"
    assert out["long"]["error"]["message"].startswith("prompt is too long: ")
    assert out["count_long"]["error"]["message"].startswith("prompt is too long: ")
    assert out["path"] == {"type": "error", "error": {"type": "not_found_error", "message": out["path"]["error"][
        "message"]}}
    assert out["size"]["error"]["type"] == "request_too_large"
    # count_tokens is not a model call: only the long prompt and the body's size were refusals of the episode
    assert [r.code for r in gateway.refusals] == ["context_length_exceeded", "request_too_large"]
