"""An MCP server for the tests, on the SDK's low-level ``Server``: ``python toolbox_server.py [options]``.

Tools: ``echo`` (text back), ``shout`` (structured content only), ``slow`` (sleeps, then answers), ``fail`` (an
``isError`` result), ``picture`` (an image), ``document`` (an embedded resource), ``crash`` (the server exits in the
middle of the call), ``whoami`` (its process id), ``meet`` (answers ``met`` once ``count`` calls are in the server
at once, ``alone`` after 20 s: calls that do not overlap never meet). ``tools/list`` answers two tools a page.

Options: ``--http`` serves streamable HTTP on a free 127.0.0.1 port and prints ``PORT n``; ``--log FILE`` appends
``pid ppid`` at start; ``--stubborn`` keeps running after its input ends (only a signal stops it); ``--no-tools``
lists nothing; ``--fail-start`` writes to stderr and exits 3 before it serves; ``--only NAMES`` (comma-separated)
lists those tools only; ``--crash-once-file FILE``: ``crash`` exits only while FILE does not exist (and creates it).
"""

from __future__ import annotations

import argparse
import base64
import os
import socket
import sys
import time

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOLS = [
    types.Tool(name="echo", description="Say the text back.",
               input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    types.Tool(name="shout", description="The text in capitals, as structured content.",
               input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    types.Tool(name="slow", description="Sleep, then answer.",
               input_schema={"type": "object", "properties": {"seconds": {"type": "number"}},
                             "required": ["seconds"]}),
    types.Tool(name="fail", description="Always fails.",
               input_schema={"type": "object", "properties": {"message": {"type": "string"}}, "required": []}),
    types.Tool(name="picture", description="A small image.", input_schema={"type": "object", "properties": {}}),
    types.Tool(name="document", description="An embedded resource.", input_schema={"type": "object", "properties": {}}),
    types.Tool(name="crash", description="The server exits during the call.",
               input_schema={"type": "object", "properties": {}}),
    types.Tool(name="whoami", description="The server's process id.",
               input_schema={"type": "object", "properties": {}}),
    types.Tool(name="meet", description="Answers once `count` calls are in the server at the same time.",
               input_schema={"type": "object", "properties": {"count": {"type": "integer"}}, "required": ["count"]}),
]
PAGE = 2


def build(options: argparse.Namespace) -> Server:
    listed = [] if options.no_tools else [t for t in TOOLS if not options.only or t.name in options.only.split(",")]

    async def list_tools(ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        start = int(params.cursor) if params is not None and params.cursor else 0
        more = start + PAGE < len(listed)
        return types.ListToolsResult(tools=listed[start:start + PAGE], next_cursor=str(start + PAGE) if more else None)

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        args = params.arguments or {}
        text = lambda s: types.CallToolResult(content=[types.TextContent(type="text", text=s)])  # noqa: E731
        if params.name == "echo":
            return text(args["text"])
        if params.name == "shout":
            return types.CallToolResult(content=[], structured_content={"shouted": args["text"].upper()})
        if params.name == "slow":
            await anyio.sleep(float(args["seconds"]))
            return text(f"slept {args['seconds']}")
        if params.name == "fail":
            return types.CallToolResult(content=[types.TextContent(type="text", text=args.get("message", "no"))],
                                        is_error=True)
        if params.name == "picture":
            png = base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()
            return types.CallToolResult(content=[types.ImageContent(type="image", data=png, mime_type="image/png")])
        if params.name == "document":
            resource = types.TextResourceContents(uri="file:///notes.txt", text="notes", mime_type="text/plain")
            return types.CallToolResult(content=[types.EmbeddedResource(type="resource", resource=resource)])
        if params.name == "crash":
            if not options.crash_once_file or not os.path.exists(options.crash_once_file):
                if options.crash_once_file:
                    open(options.crash_once_file, "w").close()
                os._exit(7)
            return text("survived")
        if params.name == "meet":
            return text(await meet(int(args["count"])))
        if params.name == "whoami":
            return text(str(os.getpid()))
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"Unknown tool: {params.name}")],
                                    is_error=True)

    waiting: list[anyio.Event] = []

    async def meet(count: int) -> str:
        arrived = anyio.Event()
        waiting.append(arrived)
        if len(waiting) >= count:
            for event in waiting:
                event.set()
            waiting.clear()
        with anyio.move_on_after(20):
            await arrived.wait()
            return "met"
        return "alone"

    return Server("toolbox", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(server: Server) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_http(server: Server) -> None:
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)  # connections wait in the backlog until uvicorn serves: the port works once printed
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(server.streamable_http_app(host="127.0.0.1"), fd=sock.fileno(), log_level="warning")
    uvicorn.Server(config).run()


def main() -> None:
    parser = argparse.ArgumentParser()
    for flag in ("--http", "--stubborn", "--no-tools", "--fail-start"):
        parser.add_argument(flag, action="store_true")
    parser.add_argument("--log")
    parser.add_argument("--only")
    parser.add_argument("--crash-once-file")
    options = parser.parse_args()
    if options.log:
        with open(options.log, "a") as log:
            log.write(f"{os.getpid()} {os.getppid()}\n")
    if options.fail_start:
        print("toolbox: cannot open the database", file=sys.stderr, flush=True)
        sys.exit(3)
    server = build(options)
    if options.http:
        serve_http(server)
        return
    anyio.run(serve_stdio, server)
    while options.stubborn:  # its input ended: a well-behaved server would stop here
        time.sleep(60)


if __name__ == "__main__":
    main()
