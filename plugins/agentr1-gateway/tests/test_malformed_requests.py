"""Every malformed request gets a 400 in OpenAI's error shape naming the field, and the episode serves on: one case
per field the gateway reads (and per field it refuses because it cannot give its meaning), sent by the official
``openai`` client where it can send it, as raw HTTP otherwise."""

from __future__ import annotations

import asyncio
import copy
import json

import httpx
import openai
import pytest

USER = {"role": "user", "content": "What is 6*7?"}
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "calculator", "arguments": "{\"expression\": \"6*7\"}"}}
TOOL = {"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}


def nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def with_call(**changes):
    """A history whose assistant turn holds ``CALL`` changed by ``changes`` (None removes a key); ``function``
    changes go into the call's function."""
    call = copy.deepcopy(CALL)
    for key, value in changes.items():
        target = call if key in ("id", "type", "function") else call["function"]
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    return [USER, {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "42"}]


def tool(**function_changes):
    entry = copy.deepcopy(TOOL)
    for key, value in function_changes.items():
        if value is None:
            entry["function"].pop(key, None)
        else:
            entry["function"][key] = value
    return entry


# name, request (keyword arguments of chat.completions.create, or raw bytes), the field named (param)
CASES = [
    ("body_not_json", b"{oops", None),
    ("body_nested_100000_deep", b"[" * 100_000, None),
    ("body_not_an_object", b"[1, 2]", None),
    ("messages_missing", b'{"model": "m"}', "messages"),
    ("messages_not_a_list", {"messages": 5}, "messages"),
    ("messages_an_object", {"messages": {"role": "user", "content": "x"}}, "messages"),
    ("messages_empty", {"messages": []}, "messages"),
    ("messages_nested_100000_deep", b'{"messages": ' + b"[" * 100_000 + b"}", None),
    ("message_not_an_object", {"messages": ["hi"]}, "messages[0]"),
    ("role_missing", {"messages": [{"content": "x"}]}, "messages[0].role"),
    ("role_not_a_string", {"messages": [{"role": 5, "content": "x"}]}, "messages[0].role"),
    ("role_unknown", {"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ("content_a_number", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("content_an_object", {"messages": [{"role": "user", "content": {"text": "x"}}]}, "messages[0].content"),
    ("content_part_not_an_object", {"messages": [{"role": "user", "content": ["x"]}]}, "messages[0].content[0]"),
    ("content_part_an_image", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x"}}]}]}, "messages[0].content[0].type"),
    ("content_part_text_a_number", {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
     "messages[0].content[0].text"),
    ("content_part_text_missing", {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
     "messages[0].content[0].text"),
    ("tool_calls_an_object", {"messages": [USER, {"role": "assistant", "tool_calls": CALL}]}, "messages[1].tool_calls"),
    ("tool_call_a_string", {"messages": [USER, {"role": "assistant", "tool_calls": ["calculator"]}]},
     "messages[1].tool_calls[0]"),
    ("tool_call_id_a_number", {"messages": with_call(id=5)}, "messages[1].tool_calls[0].id"),
    ("tool_call_type_unknown", {"messages": with_call(type="retrieval")}, "messages[1].tool_calls[0].type"),
    ("tool_call_function_missing", {"messages": with_call(function=None)}, "messages[1].tool_calls[0].function"),
    ("tool_call_function_a_string", {"messages": with_call(function="calculator")},
     "messages[1].tool_calls[0].function"),
    ("tool_call_name_missing", {"messages": with_call(name=None)}, "messages[1].tool_calls[0].function.name"),
    ("tool_call_name_a_number", {"messages": with_call(name=7)}, "messages[1].tool_calls[0].function.name"),
    ("tool_call_name_empty", {"messages": with_call(name="")}, "messages[1].tool_calls[0].function.name"),
    ("tool_call_arguments_not_json", {"messages": with_call(arguments="{oops")},
     "messages[1].tool_calls[0].function.arguments"),
    ("tool_call_arguments_a_number", {"messages": with_call(arguments=5)},
     "messages[1].tool_calls[0].function.arguments"),
    ("tool_call_arguments_a_list", {"messages": with_call(arguments=[1])},
     "messages[1].tool_calls[0].function.arguments"),
    ("tool_call_arguments_nested_200_deep", {"messages": with_call(arguments=json.dumps(nested(200)))},
     "messages[1].tool_calls[0].function.arguments"),
    ("tool_message_call_id_a_number", {"messages": with_call()[:2] + [
        {"role": "tool", "tool_call_id": 1, "content": "42"}]}, "messages[2].tool_call_id"),
    ("tool_message_name_a_list", {"messages": with_call()[:2] + [
        {"role": "tool", "tool_call_id": "call_1", "name": ["calculator"], "content": "42"}]}, "messages[2].name"),
    ("tools_an_object", {"messages": [USER], "tools": TOOL}, "tools"),
    ("tool_a_string", {"messages": [USER], "tools": ["calculator"]}, "tools[0]"),
    ("tool_type_missing", {"messages": [USER], "tools": [{"function": TOOL["function"]}]}, "tools[0].type"),
    ("tool_type_unknown", {"messages": [USER], "tools": [{**TOOL, "type": "code_interpreter"}]}, "tools[0].type"),
    ("tool_function_missing", {"messages": [USER], "tools": [{"type": "function"}]}, "tools[0].function"),
    ("tool_function_a_list", {"messages": [USER], "tools": [{"type": "function", "function": []}]},
     "tools[0].function"),
    ("tool_name_missing", {"messages": [USER], "tools": [tool(name=None)]}, "tools[0].function.name"),
    ("tool_description_a_number", {"messages": [USER], "tools": [tool(description=3)]},
     "tools[0].function.description"),
    ("tool_parameters_a_string", {"messages": [USER], "tools": [tool(parameters="object")]},
     "tools[0].function.parameters"),
    ("tool_parameters_nested_200_deep", {"messages": [USER], "tools": [tool(parameters={"x": nested(200)})]},
     "tools[0]"),
    ("stream_a_string", {"messages": [USER], "stream": "yes"}, "stream"),
    ("n_2", {"messages": [USER], "n": 2}, "n"),
    ("n_a_string", {"messages": [USER], "n": "1"}, "n"),
    ("n_true", {"messages": [USER], "n": True}, "n"),
    ("max_tokens_zero", {"messages": [USER], "max_tokens": 0}, "max_tokens"),
    ("max_tokens_a_string", {"messages": [USER], "max_tokens": "16"}, "max_tokens"),
    ("max_tokens_a_fraction", {"messages": [USER], "max_tokens": 1.5}, "max_tokens"),
    ("max_completion_tokens_negative", {"messages": [USER], "max_completion_tokens": -3}, "max_completion_tokens"),
    ("stop_a_number", {"messages": [USER], "stop": 5}, "stop"),
    ("stop_an_object", {"messages": [USER], "stop": {"a": 1}}, "stop"),
    ("stop_list_with_a_number", {"messages": [USER], "stop": ["\n", 5]}, "stop[1]"),
    ("stop_empty_string", {"messages": [USER], "stop": ""}, "stop"),
    ("stop_five_strings", {"messages": [USER], "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ("model_a_number", {"messages": [USER], "model": 5}, "model"),
    ("model_1000_characters", {"messages": [USER], "model": "m" * 1000}, "model"),
    ("stream_options_a_string", {"messages": [USER], "stream_options": "usage"}, "stream_options"),
    ("stream_options_include_usage_a_string", {"messages": [USER], "stream_options": {"include_usage": "yes"}},
     "stream_options.include_usage"),
    ("parallel_tool_calls_a_string", {"messages": [USER], "parallel_tool_calls": "no"}, "parallel_tool_calls"),
    ("tool_strict_a_string", {"messages": [USER], "tools": [tool(strict="yes")]}, "tools[0].function.strict"),
    ("tool_choice_unknown", {"messages": [USER], "tools": [TOOL], "tool_choice": "always"}, "tool_choice"),
    ("tool_choice_a_number", {"messages": [USER], "tools": [TOOL], "tool_choice": 1}, "tool_choice"),
    ("tool_choice_required_without_tools", {"messages": [USER], "tool_choice": "required"}, "tool_choice"),
    ("tool_choice_type_unknown", {"messages": [USER], "tools": [TOOL], "tool_choice": {"type": "file_search"}},
     "tool_choice.type"),
    ("tool_choice_function_not_in_tools", {"messages": [USER], "tools": [TOOL], "tool_choice": {
        "type": "function", "function": {"name": "weather"}}}, "tool_choice.function.name"),
    # fields whose meaning the gateway cannot give: refused by name
    ("response_format_json_schema", {"messages": [USER], "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object"}}}}, "response_format"),
    ("response_format_json_object", {"messages": [USER], "response_format": {"type": "json_object"}},
     "response_format"),
    ("response_format_a_string", {"messages": [USER], "response_format": "text"}, "response_format"),
    ("logprobs_true", {"messages": [USER], "logprobs": True}, "logprobs"),
    ("top_logprobs_3", {"messages": [USER], "top_logprobs": 3}, "top_logprobs"),
    ("functions_legacy", {"messages": [USER], "functions": [TOOL["function"]]}, "functions"),
    ("modalities_audio", {"messages": [USER], "modalities": ["text", "audio"]}, "modalities"),
]


def send(client: openai.OpenAI, gateway, request) -> httpx.Response:
    """The gateway's HTTP response to ``request``: through the openai client for keyword arguments (its error
    carries the response), as raw bytes otherwise."""
    if isinstance(request, bytes):
        return httpx.post(f"{gateway.base_url}/chat/completions", content=request, trust_env=False,
                          headers={"Authorization": f"Bearer {gateway.key}", "Content-Type": "application/json"})
    kwargs = {"model": "m", **request}
    try:
        client.chat.completions.create(**kwargs)
    except openai.APIStatusError as exc:
        return exc.response
    raise AssertionError("the gateway served a malformed request")


@pytest.mark.parametrize("name,request_,param", CASES, ids=[c[0] for c in CASES])
def test_a_malformed_field_gets_an_openai_400_naming_it_and_the_episode_serves_on(serve, openai_client, name,
                                                                                  request_, param):
    async def go():
        async with serve(["fine"]) as gateway:
            client = openai_client(gateway)
            try:
                refused = await asyncio.to_thread(send, client, gateway, request_)
                served = await asyncio.to_thread(client.chat.completions.create, model="m", messages=[USER])
            finally:
                client.close()
            return refused, served, gateway

    refused, served, gateway = asyncio.run(go())
    assert refused.status_code == 400, refused.text
    assert refused.headers["content-type"].startswith("application/json")
    body = refused.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    error = body["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert error["code"] in ("invalid_json", "invalid_type", "invalid_value", "missing_required_parameter")
    assert isinstance(error["message"], str) and (param is None or f"'{param}'" in error["message"])
    assert served.choices[0].message.content == "fine"  # the same episode answers its next, well-formed call
    assert [r.status for r in gateway.refusals] == [400] and len(gateway.calls) == 1


def test_a_chat_template_that_refuses_the_messages_is_a_400_on_messages(serve, tokenizer, openai_client):
    strict = copy.deepcopy(tokenizer)
    strict.chat_template = ("{% for m in messages %}{% if m['role'] == 'system' %}"
                            "{{ raise_exception('System role not supported') }}{% endif %}"
                            "{{ m['content'] }}{% endfor %}")

    async def go():
        async with serve(tokenizer=strict) as gateway:
            client = openai_client(gateway)
            try:
                return await asyncio.to_thread(send, client, gateway, {"messages": [
                    {"role": "system", "content": "be brief"}, USER]})
            finally:
                client.close()

    refused = asyncio.run(go())
    assert refused.status_code == 400
    assert refused.json()["error"]["param"] == "messages"
    assert "System role not supported" in refused.json()["error"]["message"]


def test_unknown_paths_methods_and_oversized_bodies_get_openai_shaped_errors(serve):
    async def go():
        async with serve() as gateway:
            auth = {"Authorization": f"Bearer {gateway.key}"}
            async with httpx.AsyncClient(trust_env=False, timeout=120) as client:
                return {
                    404: await client.get(f"{gateway.base_url}/embeddings", headers=auth),
                    405: await client.get(f"{gateway.base_url}/chat/completions", headers=auth),
                    413: await client.post(f"{gateway.base_url}/chat/completions", headers=auth,
                                           content=b'{"messages": "' + b"x" * (17 * 1024 ** 2) + b'"}'),
                }, [r.code for r in gateway.refusals]

    out, codes = asyncio.run(go())
    for status, response in out.items():
        assert response.status_code == status and set(response.json()["error"]) == {"message", "type", "param",
                                                                                     "code"}
    assert out[413].json()["error"]["code"] == "request_too_large" and codes == ["request_too_large"]
