"""The source against real servers, through both transports (the toolbox server over stdio and over streamable HTTP
on 127.0.0.1): every page of the listing, the schemas exactly as listed, what each kind of result gives the model,
tool errors counted by ToolEnv, references and rename, calls of concurrent episodes that overlap in the server."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest
from agentr1_core.tool_formats import HermesFormat
from agentr1_core.tool_sources import ToolSourceError
from agentr1_core.tools import call_tool

ALL_TOOLS = ["echo", "shout", "slow", "fail", "picture", "document", "crash", "whoami", "meet"]


@pytest.fixture(params=["stdio", "http"])
def box(request, start_source, toolbox):
    """A started source with one toolbox server ``box``, over each transport."""
    if request.param == "stdio":
        return start_source({"box": toolbox()})
    url, _ = request.getfixturevalue("http_toolbox")
    return start_source({"box": {"url": url}})


def call(tool, arguments):
    return asyncio.run(call_tool(tool, arguments))


def test_every_page_of_the_listing_with_each_schema_exactly_as_the_server_gives_it(box, toolbox):
    tools = box.tools("box")
    assert [t.name for t in tools] == ALL_TOOLS  # four pages of two (and one of one), in the server's order
    listed = {t.name: t for t in toolbox.module.TOOLS}
    for tool in tools:
        assert tool.description == listed[tool.name].description
        assert json.dumps(tool.parameters) == json.dumps(listed[tool.name].input_schema)  # keys in their order too
    assert box.listing()["box"][0] == {"type": "function", "function": {
        "name": "echo", "description": "Say the text back.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}


def test_text_structured_content_errors_and_what_a_text_model_cannot_read(box):
    tools = {t.name: t for t in box.tools("box")}
    assert call(tools["echo"], {"text": "héllo"}).text == "héllo"
    shout = call(tools["shout"], {"text": "hi"})
    assert (shout.text, shout.error) == ('{"shouted": "HI"}', None)  # structured content only: shown as JSON
    failed = call(tools["fail"], {"message": "the database is locked"})
    assert (failed.text, failed.error) == ("Error: fail: the database is locked", "tool_error")
    for name, what in (("picture", "an image"), ("document", "an embedded resource")):
        refused = call(tools[name], {})
        assert refused.error == "unsupported_output"
        assert refused.text == (f"Error: {name} returned {what}, which this agent cannot read (only text and "
                                f"structured content are shown to the model)")
    assert call(tools["echo"], {"text": 3}).error == "bad_arguments"  # checked against the listed schema first


def test_a_tool_env_counts_tool_errors_and_the_episode_goes_on(box):
    from agentr1_core.envs import ToolEnv
    from agentr1_core.mdp import Action

    env = ToolEnv(tools=[box.tools("box/echo")[0], box.tools("box/fail")[0]], max_turns=3)
    fmt = HermesFormat()

    async def episode():
        await env.reset({"prompt": "go"})
        both = fmt.format_call("fail", {"message": "no"}) + fmt.format_call("echo", {"text": "yes"})
        first = await env.step(Action(text=both, token_ids=[], logprobs=[]))
        second = await env.step(Action(text=fmt.format_call("echo", {"text": "again"}), token_ids=[], logprobs=[]))
        return first, second

    first, second = asyncio.run(episode())
    assert first.info["tool_errors"] == {"tool_error": 1} and not first.done
    assert [c["output"] for c in first.info["calls"]] == ["Error: fail: no", "yes"]
    assert second.info["calls"][0]["output"] == "again" and second.info["tool_errors"] == {}


def test_calls_of_concurrent_episodes_overlap_in_the_server(box):
    """Four calls of ``meet`` (each answers only once four are in the server at once): two episodes in one loop and
    two on another thread's loop, as Ray-less rollouts and the checks around them call tools."""
    meet = box.tools("box/meet")[0]
    answers: list[str] = []

    async def two():
        results = await asyncio.gather(call_tool(meet, {"count": 4}), call_tool(meet, {"count": 4}))
        answers.extend(r.text for r in results)

    other = threading.Thread(target=lambda: asyncio.run(two()))
    other.start()
    asyncio.run(two())
    other.join()
    assert answers == ["met"] * 4


def test_references_and_rename(start_source, toolbox):
    source = start_source({"box": toolbox("--only", "echo,shout", rename={"echo": "repeat"})})
    assert [t.name for t in source.tools("box")] == ["repeat", "shout"]
    (repeat,) = source.tools("box/echo")  # the server's name or the one shown
    assert source.tools("box/repeat") == [repeat] and repeat.server_tool == "echo"
    assert call(repeat, {"text": "hi"}).text == "hi"
    with pytest.raises(ToolSourceError, match=r"^config error at mcp.servers.box: env.tools names mcp:box/shot, but "
                                              r"the server has no tool 'shot' \(did you mean 'shout'\?\); its tools: "
                                              r"repeat, shout$"):
        source.tools("box/shot")
    with pytest.raises(ToolSourceError, match=r"no server 'bx' is configured \(did you mean 'box'\?\); servers: box"):
        source.tools("bx")


def test_a_call_past_the_servers_timeout_is_a_timeout_error_and_the_next_call_is_answered(start_source, toolbox):
    source = start_source({"box": toolbox(timeout=1)})
    tools = {t.name: t for t in source.tools("box")}
    late = call(tools["slow"], {"seconds": 30})
    assert (late.text, late.error) == ("Error: slow timed out after 1s", "timeout")
    assert call(tools["echo"], {"text": "still here"}).text == "still here"
