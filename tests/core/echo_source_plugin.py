"""A tool source for the tests of ``agentr1_core.tool_sources``: ``echoes`` gives one ``echo_<word>`` tool per word
of its section (``echoes: {words: [a, b]}``) and counts its starts and stops, so a test can see what a run did."""

from __future__ import annotations

from typing import Any

from agentr1_core import ToolSourceSpec, hookimpl
from agentr1_core.errors import suggest
from agentr1_core.tool_sources import ToolSource, ToolSourceError
from agentr1_core.tools import BaseTool

EVENTS: list[str] = []


class EchoTool(BaseTool):
    description = "Say the word back."
    parameters = {"type": "object", "properties": {"times": {"type": "integer"}}, "required": []}

    def __init__(self, word: str) -> None:
        self.name = f"echo_{word}"
        self.word = word

    async def execute(self, times: int = 1) -> str:
        return " ".join([self.word] * times)


class Echoes(ToolSource):
    def __init__(self, words: list[str] | None = None, fail_to_start: bool = False, name_as: str = "") -> None:
        self.words = list(words or [])
        self.fail_to_start = fail_to_start
        self.name_as = name_as
        self.started: dict[str, EchoTool] = {}

    def start(self) -> None:
        EVENTS.append("start")
        if self.fail_to_start:
            raise ToolSourceError("config error at echoes: the echo server did not start (exit code 3); its last "
                                  "output: no words today")
        self.started = {w: EchoTool(w) for w in self.words}
        if self.name_as:
            self.started[self.words[0]].name = self.name_as

    def tools(self, reference: str) -> list[BaseTool]:
        if reference == "all":
            return list(self.started.values())
        if reference not in self.started:
            raise ToolSourceError(f"config error at echoes: no word {reference!r}{suggest(reference, self.started)}; "
                                  f"words: {', '.join(self.started)}")
        return [self.started[reference]]

    def listing(self) -> dict[str, Any]:
        return {"words": [t.openai_schema() for t in self.started.values()]}

    def close(self) -> None:
        EVENTS.append("close")


@hookimpl
def agentr1_tool_sources():
    return [ToolSourceSpec("echoes", "echo_source_plugin:Echoes", "one echo tool per configured word")]
