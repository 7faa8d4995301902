"""One MCP server's session, on the source's event loop (``loop.LoopThread``): connect, list the tools, call them.

The session is the MCP SDK's ``Client`` over its ``stdio_client`` (the server started through ``launcher``, its
stderr kept to its last lines for the errors) or ``streamable_http_client``. A task of the loop holds the session
open until ``aclose``, since the SDK's contexts must be left by the task that entered them; calls come from other
tasks of the same loop and overlap.

A server whose connection closes under a call (a stdio server that died, an HTTP server gone) makes that call an
error observation; the next call starts it again (reconnects, for HTTP) once per process; after that its calls are
error observations. A call that the server answers with ``isError`` is a tool error, not a dead server.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections import deque
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agentr1_core.tools import ToolResult
from agentr1_tools_mcp import launcher
from agentr1_tools_mcp.results import to_tool_result
from agentr1_tools_mcp.settings import ServerSettings

MAX_PAGES = 1000  # tools/list pages read at most: a server whose cursor never ends cannot hang a run
STDERR_LINES = 3  # of a server's stderr, shown in an error
RESTARTS = 1  # a server that dies is started again this many times per process
CONNECTION_LOST = (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)


class ServerDown(Exception):
    """The server's connection is gone (it died, or its HTTP endpoint stopped answering)."""


class StderrTail:
    """A pipe for a stdio server's stderr, read by a daemon thread that keeps its last lines."""

    def __init__(self, keep: int = 50) -> None:
        read_fd, write_fd = os.pipe()
        self.writer = open(write_fd, "w", encoding="utf-8")  # noqa: SIM115 - closed by release
        self._lines: deque[str] = deque(maxlen=keep)
        self._reader = threading.Thread(target=self._read, args=(read_fd,), daemon=True, name="agentr1-mcp-stderr")
        self._reader.start()

    def _read(self, fd: int) -> None:
        with open(fd, "rb") as pipe:
            for line in pipe:
                text = line.decode("utf-8", errors="replace").rstrip()
                if text:
                    self._lines.append(text)

    def release(self) -> None:
        """Close this process's end of the pipe (the server holds its own)."""
        if not self.writer.closed:
            self.writer.close()

    def last(self, count: int = STDERR_LINES, wait: float = 0.0) -> str:
        """The last ``count`` lines, joined; ``wait`` seconds at most for a stopped server's last output."""
        if wait > 0:
            self._reader.join(wait)
        return " | ".join(list(self._lines)[-count:])


def launch_parameters(settings: ServerSettings) -> StdioServerParameters:
    """The SDK's parameters for a stdio server, started through ``launcher`` (it dies with this process)."""
    args = ["-I", str(Path(launcher.__file__)), str(os.getpid()), settings.executable(), *settings.args]
    return StdioServerParameters(command=sys.executable, args=args, env=dict(settings.env) or None,
                                 cwd=settings.cwd)


class ServerConnection:
    """The session with one server of ``mcp.servers``; every coroutine runs on the source's loop."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.tools: list[types.Tool] = []
        self.client: Client | None = None
        self.restarts_left = RESTARTS
        self.down: str = ""  # why the server is down ("" while it serves)
        self.generation = 0
        self._tail: StderrTail | None = None
        self._holder: asyncio.Task | None = None
        self._closing: asyncio.Event | None = None
        self._lock: asyncio.Lock | None = None
        self._cleanup: asyncio.Task | None = None

    # -- starting and stopping ------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and list every tool; a ``ServerDown`` with the reason (and the server's last stderr lines)."""
        self._lock = self._lock or asyncio.Lock()
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._closing = asyncio.Event()
        self._tail = StderrTail() if self.settings.command else None
        self._holder = asyncio.get_running_loop().create_task(self._hold(ready, self._closing, self._tail))
        try:
            with anyio.fail_after(self.settings.start_timeout):
                self.client = await asyncio.shield(ready)
                self.tools = await self._list_tools(self.client)
        except BaseException as exc:
            reason = self._reason(exc, starting=True)
            await self._stop_holder()
            raise ServerDown(reason) from exc
        self.generation += 1
        self.down = ""

    async def _hold(self, ready: asyncio.Future, closing: asyncio.Event, tail: StderrTail | None) -> None:
        """Open the session, hand it over through ``ready``, keep it open until ``closing`` is set."""
        try:
            async with AsyncExitStack() as stack:
                if self.settings.command:
                    transport: Any = stdio_client(launch_parameters(self.settings), errlog=tail.writer)
                else:
                    import httpx2

                    timeout = httpx2.Timeout(self.settings.timeout, read=max(300.0, self.settings.timeout + 5))
                    http = await stack.enter_async_context(
                        httpx2.AsyncClient(headers=self.settings.headers, timeout=timeout))
                    transport = streamable_http_client(self.settings.url, http_client=http)
                try:
                    client = await stack.enter_async_context(Client(transport))
                finally:
                    if tail is not None:
                        tail.release()  # the server has its own copy of the pipe (or never started)
                if not ready.done():
                    ready.set_result(client)
                await closing.wait()
        except BaseException as exc:  # noqa: BLE001 - handed to start() through ready, or the session just ended
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def _list_tools(self, client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                return tools
        raise RuntimeError(f"tools/list gave more than {MAX_PAGES} pages")

    async def _stop_holder(self) -> None:
        """Leave the session (a stdio server: its input closed, then SIGTERM and SIGKILL to its process group)."""
        holder, self._holder, self.client = self._holder, None, None
        if holder is None:
            return
        if self._closing is not None:
            self._closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(holder), timeout=15)
        except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - a session that ends badly is still ended
            holder.cancel()

    async def aclose(self) -> None:
        self.down = self.down or "closed"
        await self._stop_holder()

    # -- calls ----------------------------------------------------------------------------------------------------

    async def call(self, name: str, shown: str, arguments: dict[str, Any]) -> ToolResult:
        """Call the server's tool ``name`` (shown to the model as ``shown``); never raises for a dead server."""
        try:
            client, generation = await self._serving()
        except ServerDown as exc:
            return ToolResult(f"Error: {shown}: {exc}", error="server_unavailable")
        try:
            result = await client.call_tool(name, arguments)
        except MCPError as exc:
            if exc.error.code != types.CONNECTION_CLOSED:  # the server refused the call itself
                return ToolResult(f"Error: {shown}: {exc.error.message}", error="tool_error")
            return self._lost(shown, generation, exc)
        except CONNECTION_LOST as exc:
            return self._lost(shown, generation, exc)
        except Exception as exc:
            if _is_http_error(exc):
                return self._lost(shown, generation, exc)
            raise
        return to_tool_result(shown, result)

    async def _serving(self) -> tuple[Client, int]:
        """The live session, after starting the server again if it went down and a restart is left."""
        if self.client is not None and not self.down:
            return self.client, self.generation
        assert self._lock is not None
        async with self._lock:
            if self.client is not None and not self.down:
                return self.client, self.generation
            if self.down == "closed":
                raise ServerDown(f"the MCP server {self.settings.name} is closed")
            if self.restarts_left <= 0:
                raise ServerDown(f"the MCP server {self.settings.name} stopped again and is not restarted "
                                 f"({self.down})")
            self.restarts_left -= 1
            await self._stop_holder()
            try:
                await self.start()
            except ServerDown as exc:
                self.down = str(exc)
                raise ServerDown(f"the MCP server {self.settings.name} stopped and did not start again: {exc}") from exc
            return self.client, self.generation  # type: ignore[return-value]

    def _lost(self, shown: str, generation: int, exc: BaseException) -> ToolResult:
        if self.down == "closed":  # the source closed under the call (the end of a run)
            return ToolResult(f"Error: {shown}: the MCP server {self.settings.name} was closed during the call",
                              error="server_unavailable")
        if generation == self.generation and not self.down:
            self.down = self._reason(exc, starting=False)
            self._cleanup = asyncio.get_running_loop().create_task(self._stop_holder())  # reap it, close its pipes
        again = "it is started again at the next call" if self.restarts_left > 0 else "it is not started again"
        return ToolResult(f"Error: {shown}: the MCP server {self.settings.name} stopped during the call "
                          f"({self.down}); {again}", error="server_unavailable")

    def _reason(self, exc: BaseException, starting: bool) -> str:
        """One line: what went wrong, the command or URL, and a stdio server's last stderr lines."""
        s = self.settings
        exc = _innermost(exc)
        if isinstance(exc, TimeoutError):
            what = (f"no answer within its start_timeout of {s.start_timeout:g}s" if starting
                    else f"no answer within its timeout of {s.timeout:g}s")
        elif isinstance(exc, FileNotFoundError):
            what = "command not found"
        elif isinstance(exc, MCPError) and exc.error.code == types.CONNECTION_CLOSED:
            what = ("it exited before it answered" if s.command else "it closed the connection") if starting \
                else "its connection closed"
        else:
            what = describe_error(exc)
        where = f"command: {s.describe()}" if s.command else f"url: {s.url}"
        stderr = self._tail.last(wait=1.0 if starting else 0.2) if self._tail is not None else ""
        return f"{what}; {where}" + (f"; its stderr: {stderr}" if stderr else "")


def _is_http_error(exc: BaseException) -> bool:
    """An error of the HTTP client (connection refused or reset, a protocol error): the server is gone."""
    return type(exc).__module__.split(".")[0] in ("httpx2", "httpcore2")


def _innermost(exc: BaseException) -> BaseException:
    """The first exception of an exception group (anyio's task groups raise them), else ``exc``."""
    while getattr(exc, "exceptions", None):
        exc = exc.exceptions[0]
    return exc


def describe_error(exc: BaseException) -> str:
    """The message of ``exc`` (exception groups unwrapped), on one line."""
    exc = _innermost(exc)
    if isinstance(exc, MCPError):
        return exc.error.message
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text
