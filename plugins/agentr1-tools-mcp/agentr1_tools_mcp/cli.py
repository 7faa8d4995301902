"""``agentr1-core mcp list CONFIG [key=value ...]``: start the MCP servers of a run config's ``mcp.servers``, print
each one's tools with their JSON schemas as the model will see them (``rename`` applied; ``--json``: one object of
servers to OpenAI function schemas) and stop them. No model is loaded. Problems are one line each, exit code 2."""

from __future__ import annotations

import argparse
import json


def cmd_list(args: argparse.Namespace) -> int:
    from agentr1_core.tool_sources import references as source_references
    from agentr1_core.config import load_config
    from agentr1_core.plugins import get_registry
    from agentr1_core.tool_sources import sections_of

    cfg = load_config(args.config, list(args.overrides))
    section = sections_of(cfg, ["mcp"])["mcp"]
    source = get_registry().build("tool_source", "mcp", section, where="mcp")
    used = {name.partition(":")[2] for _, name in source_references(cfg) if name.startswith("mcp:")}
    try:
        source.start()
        listing = source.listing()
    finally:
        source.close()
    if args.json:
        print(json.dumps(listing, ensure_ascii=False, indent=2))
        return 0
    if not listing:
        print("no MCP servers in this config (mcp.servers)")
    for settings in source.settings:
        schemas = listing[settings.name]
        print(f"{settings.name} ({settings.transport}: {settings.describe()}): {len(schemas)} tool(s)")
        for schema in schemas:
            function = schema["function"]
            mark = " [env.tools]" if settings.name in used or f"{settings.name}/{function['name']}" in used else ""
            print(f"  {function['name']}{mark}: {function['description']}")
            print(f"    {json.dumps(function['parameters'], ensure_ascii=False)}")
    return 0


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="mcp_command", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="start the config's MCP servers, print their tools and schemas, stop them")
    listing.add_argument("config", metavar="CONFIG", help="a named config or a YAML file")
    listing.add_argument("overrides", nargs="*", metavar="key=value", help="overrides, as for agentr1-core run")
    listing.add_argument("--json", action="store_true", help="servers and their tools' OpenAI function schemas")
    listing.set_defaults(func=cmd_list)
