"""OpenAI Responses through the official ``openai`` client: plain, ``stream=True`` and the ``.stream()`` helper give
the same output for the same prompt; function calls sent back (as items, or through ``previous_response_id``) show
the model its own text; every bad or unsupported field is a 400 in OpenAI's shape naming it."""

from __future__ import annotations

import asyncio
import dataclasses

import openai
import pytest

TOOL = {"type": "function", "name": "calculator", "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"], "additionalProperties": False}, "strict": True}
USER = {"role": "user", "content": "What is 6*7? Use the calculator."}
CALL_TEXT = ('I will use the calculator for this one. '
             '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7 + 0*123456789"}}</tool_call>')
ANSWER = "The product of six and seven is 42, as the calculator confirmed."


def run(serve, openai_client, answers, work, **gateway_kw):
    async def go():
        async with serve(answers, **gateway_kw) as gateway:
            client = openai_client(gateway)
            try:
                return await asyncio.to_thread(work, client), gateway
            finally:
                client.close()

    return asyncio.run(go())


def items(response):
    """The output items without their ids (each response issues its own)."""
    return [item.model_dump(exclude_none=True, exclude={"id", "call_id", "parsed_arguments"})
            for item in response.output]


@pytest.mark.parametrize("answer", [CALL_TEXT, ANSWER], ids=["function_call", "text"])
def test_plain_streamed_and_helper_responses_are_the_same_and_so_is_the_prompt(serve, openai_client, answer):
    kw = {"model": "m", "instructions": "Be exact.", "input": [USER], "tools": [TOOL]}

    def work(client):
        plain = client.responses.create(**kw)
        events = list(client.responses.create(stream=True, **kw))
        with client.responses.stream(**kw) as stream:
            deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
            final = stream.get_final_response()
        return plain, events, deltas, final

    (plain, events, deltas, final), gateway = run(serve, openai_client, [answer], work)
    assert plain.object == "response" and plain.status == "completed" and plain.model == "agentr1-policy"
    if answer == CALL_TEXT:
        assert [i.type for i in plain.output] == ["message", "function_call"]
        assert plain.output_text == "I will use the calculator for this one."
        call = plain.output[1]
        assert call.call_id.startswith("call_") and call.id.startswith("fc_") and call.name == "calculator"
        assert call.arguments == '{"expression": "6*7 + 0*123456789"}'
    else:
        assert [i.type for i in plain.output] == ["message"] and plain.output_text == ANSWER
    assert plain.usage.input_tokens == len(gateway.calls[0].prompt_ids)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == len(plain.output)
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == plain.output_text
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert arguments == "".join(i.arguments for i in plain.output if i.type == "function_call")
    assert items(events[-1].response) == items(plain) == items(final)
    assert "".join(deltas) == final.output_text == plain.output_text
    assert len(gateway.calls) == 3 and len({tuple(c.prompt_ids) for c in gateway.calls}) == 1


def test_calls_sent_back_as_items_or_by_previous_response_id_show_the_model_its_own_text(serve, openai_client):
    def work(client):
        first = client.responses.create(model="m", instructions="Be exact.", input=[USER], tools=[TOOL])
        call = next(i for i in first.output if i.type == "function_call")
        result = {"type": "function_call_output", "call_id": call.call_id, "output": "42"}
        history = [USER] + [i.model_dump(exclude_none=True) for i in first.output] + [result]
        by_items = client.responses.create(model="m", instructions="Be exact.", input=history, tools=[TOOL])
        by_id = client.responses.create(model="m", instructions="Be exact.", previous_response_id=first.id,
                                        input=[result], tools=[TOOL])
        chained = client.responses.create(model="m", instructions="Be exact.", previous_response_id=by_id.id,
                                          input="Thanks.", tools=[TOOL])
        return by_items, by_id, chained

    (by_items, by_id, chained), gateway = run(serve, openai_client, [CALL_TEXT, ANSWER], work)
    assert by_items.output_text == by_id.output_text == ANSWER
    shown = gateway.calls[1].observation.messages
    assert shown[1:] == [USER, {"role": "assistant", "content": CALL_TEXT},
                         {"role": "tool", "name": "calculator", "content": "<tool_response>\n42\n</tool_response>"}]
    assert gateway.calls[1].prompt_ids == gateway.calls[2].prompt_ids  # the same conversation, either way
    assert gateway.calls[3].observation.messages[1:] == shown[1:] + [{"role": "assistant", "content": ANSWER},
                                                                     {"role": "user", "content": "Thanks."}]


def test_unstored_or_unknown_previous_responses_and_cut_replies(serve, openai_client):
    def work(client):
        unstored = client.responses.create(model="m", input="hi", store=False, max_output_tokens=3)
        out = {"cut": unstored}
        for name, previous in (("unstored", unstored.id), ("unknown", "resp_nope")):
            with pytest.raises(openai.BadRequestError) as refused:
                client.responses.create(model="m", input="again", previous_response_id=previous)
            out[name] = refused.value
        return out

    async def go():
        async with serve(["a long answer"]) as gateway:
            respond = gateway.respond

            async def cut(prompt_ids, sampling):
                return dataclasses.replace(await respond(prompt_ids, sampling), finish_reason="length")

            gateway.respond = cut
            client = openai_client(gateway)
            try:
                return await asyncio.to_thread(work, client)
            finally:
                client.close()

    out = asyncio.run(go())
    assert out["cut"].status == "incomplete" and out["cut"].incomplete_details.reason == "max_output_tokens"
    for name in ("unstored", "unknown"):
        assert out[name].code == "previous_response_not_found" and out[name].param == "previous_response_id"


ERRORS = [  # name, keyword arguments of responses.create, the field named (param)
    ("input_missing", {}, "input"),
    ("input_a_number", {"input": 5}, "input"),
    ("item_an_image", {"input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "http://x/y.png"}]}]}, "input[0].content[0].type"),
    ("item_reasoning", {"input": [{"type": "reasoning", "id": "rs_1", "summary": []}]}, "input[0].type"),
    ("item_role_unknown", {"input": [{"role": "wizard", "content": "x"}]}, "input[0].role"),
    ("function_call_arguments_not_json", {"input": [USER, {"type": "function_call", "call_id": "c", "name": "f",
                                                          "arguments": "{oops"}]}, "input[1].arguments"),
    ("function_call_output_without_call_id", {"input": [{"type": "function_call_output", "output": "42"}]},
     "input[0].call_id"),
    ("tool_web_search", {"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
    ("tool_without_name", {"input": "x", "tools": [{"type": "function", "parameters": {}}]}, "tools[0].name"),
    ("tool_choice_unknown_tool", {"input": "x", "tools": [TOOL], "tool_choice": {"type": "function",
                                                                                 "name": "weather"}},
     "tool_choice.name"),
    ("max_output_tokens_zero", {"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ("text_format_json_schema", {"input": "x", "text": {"format": {"type": "json_schema", "name": "x",
                                                                   "schema": {"type": "object"}}}}, "text.format"),
    ("background", {"input": "x", "background": True}, "background"),
    ("conversation", {"input": "x", "conversation": "conv_1"}, "conversation"),
    ("top_logprobs", {"input": "x", "top_logprobs": 2}, "top_logprobs"),
    ("instructions_a_list", {"input": "x", "instructions": ["be brief"]}, "instructions"),
]


@pytest.mark.parametrize("name,request_,param", ERRORS, ids=[e[0] for e in ERRORS])
def test_a_bad_or_unsupported_field_is_an_openai_400_naming_it_and_the_episode_serves_on(serve, openai_client, name,
                                                                                         request_, param):
    def work(client):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="m", **request_)
        served = client.responses.create(model="m", input="hi", reasoning={"effort": "low"}, temperature=0.2,
                                         parallel_tool_calls=False, store=True, metadata={"k": "v"})
        return refused.value, served

    (refused, served), gateway = run(serve, openai_client, ["fine"], work)
    assert refused.status_code == 400 and set(refused.body) == {"message", "type", "param", "code"}
    assert refused.param == param and f"'{param}'" in refused.message
    assert served.output_text == "fine" and [r.status for r in gateway.refusals] == [400]
