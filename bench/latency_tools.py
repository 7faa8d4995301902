"""Tools with an added latency per call, the way a web API answers: ``slow_search`` (the search tool of
agentr1-tools-search) and ``slow_calculator`` (the core calculator). Each call sleeps a time drawn uniformly from
``[latency_s, latency_max_s]`` (a fixed ``latency_s`` when ``latency_max_s`` is 0) before it answers; the sleep
does not hold a CPU. The model sees the original tool's name, schema and output. For ``bench_async.py``: loaded in a run with ``AGENTR1_PLUGIN_MODULES=latency_tools`` and
``bench/`` on ``PYTHONPATH``. Nothing here is part of the installed packages.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from agentr1_core.hookspecs import hookimpl
from agentr1_core.specs import ToolSpec
from agentr1_core.tools import BaseTool


class LatencyMixin:
    def set_latency(self, latency_s: float, latency_max_s: float, seed: int) -> None:
        if latency_s < 0 or (latency_max_s and latency_max_s < latency_s):
            raise ValueError("latency_s must be >= 0 and latency_max_s 0 or >= latency_s")
        self.latency = (float(latency_s), float(latency_max_s or latency_s))
        self.rng = random.Random(seed)

    async def wait(self) -> None:
        await asyncio.sleep(self.rng.uniform(*self.latency))


class SlowSearchTool(LatencyMixin, BaseTool):
    """``search`` with a latency per call."""

    runs_in_thread = False

    def __init__(self, corpus: str = "", index: str = "", top_k: int = 3, max_chars: int = 400,
                 latency_s: float = 1.0, latency_max_s: float = 0.0, seed: int = 0) -> None:
        from agentr1_tools_search.tool import SearchTool

        self.inner = SearchTool(corpus=corpus, index=index, top_k=top_k, max_chars=max_chars)
        self.name, self.description, self.parameters = "search", SearchTool.description, SearchTool.parameters
        self.set_latency(latency_s, latency_max_s, seed)

    async def execute(self, **arguments: Any) -> Any:
        await self.wait()
        return await self.inner.execute(**arguments)


class SlowCalculatorTool(LatencyMixin, BaseTool):
    """``calculator`` with a latency per call."""

    runs_in_thread = False

    def __init__(self, latency_s: float = 1.0, latency_max_s: float = 0.0, seed: int = 0) -> None:
        from agentr1_core.builtin.calculator import CalculatorTool

        self.inner = CalculatorTool()
        self.name, self.description, self.parameters = ("calculator", CalculatorTool.description,
                                                        CalculatorTool.parameters)
        self.set_latency(latency_s, latency_max_s, seed)

    async def execute(self, **arguments: Any) -> Any:
        await self.wait()
        result = self.inner.execute(**arguments)
        return await result if asyncio.iscoroutine(result) else result


@hookimpl
def agentr1_tools():
    return [ToolSpec("slow_search", "latency_tools:SlowSearchTool", "search with a latency per call (bench)"),
            ToolSpec("slow_calculator", "latency_tools:SlowCalculatorTool", "calculator with a latency per call (bench)")]
