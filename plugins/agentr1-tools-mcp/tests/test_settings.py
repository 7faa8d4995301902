"""``mcp.servers`` as written in a config: every mistake of every server is one line naming its key, reported by
``start`` together with the problems of the servers that were started."""

from __future__ import annotations

import sys

import pytest

from agentr1_core.tool_sources import ToolSourceError
from agentr1_tools_mcp.settings import parse_servers


def test_well_formed_servers():
    (stdio, http), problems = parse_servers({
        "calc": {"command": "python", "args": ["-m", "calc", 3], "env": {"LEVEL": 2}, "timeout": 5},
        "docs": {"url": "https://example.org/mcp", "headers": {"Authorization": "Bearer x"},
                 "rename": {"search": "lookup"}}})
    assert problems == []
    assert (stdio.transport, stdio.executable(), stdio.args, stdio.env, stdio.timeout) == (
        "stdio", sys.executable, ("-m", "calc", "3"), {"LEVEL": "2"}, 5.0)
    assert (http.transport, http.url, http.headers, http.rename, http.timeout) == (
        "streamable HTTP", "https://example.org/mcp", {"Authorization": "Bearer x"}, {"search": "lookup"}, 30.0)
    assert (stdio.start_timeout, http.start_timeout) == (60.0, 60.0)  # a call's timeout does not bound the start


@pytest.mark.parametrize("raw, line", [
    ({"args": ["x"]}, "config error at mcp.servers.s: give either command (a server started over stdio) or url (a "
                      "streamable HTTP server)"),
    ({"command": "a", "url": "http://h/mcp"}, "config error at mcp.servers.s: give either command (a server started "
                                              "over stdio) or url (a streamable HTTP server), not both"),
    ({"url": "http://h/mcp", "args": []}, "config error at mcp.servers.s.args: unknown key (a streamable HTTP server "
                                          "has no args); valid: url, headers, timeout, "
                                          "start_timeout, rename"),
    ({"command": "a", "timeout": 0}, "config error at mcp.servers.s.timeout: expected a number of seconds above 0, "
                                     "got 0"),
    ({"command": "a", "start_timeout": "1m"}, "config error at mcp.servers.s.start_timeout: expected a number of "
                                              "seconds above 0, got '1m'"),
    ({"command": "a", "args": "-m x"}, "config error at mcp.servers.s.args: expected a list of strings, got '-m x'"),
    ({"command": "a", "env": ["X=1"]}, "config error at mcp.servers.s.env: expected a mapping of names to strings"),
    ({"url": "127.0.0.1:9000/mcp"}, "config error at mcp.servers.s.url: expected an http:// or https:// URL, got "
                                    "'127.0.0.1:9000/mcp'"),
    ({"command": "a", "rename": {"x": "y", "z": "y"}}, "config error at mcp.servers.s.rename: two tools renamed to "
                                                       "'y'"),
    ("python -m x", "config error at mcp.servers.s: expected {command: ..., args: [...]} (stdio) or {url: ...} "
                    "(streamable HTTP), got str"),
])
def test_each_mistake_is_one_line_naming_its_key(raw, line):
    assert parse_servers({"s": raw}) == ([], [line])


def test_a_server_name_cannot_hold_a_slash():
    assert parse_servers({"a/b": {"command": "x"}})[1] == [
        "config error at mcp.servers.a/b: a server's name is letters, digits, '_', '.' and '-' (it is written "
        "mcp:NAME and mcp:NAME/TOOL in env.tools)"]


def test_start_reports_the_mistakes_with_the_servers_problems(start_source, toolbox):
    with pytest.raises(ToolSourceError) as err:
        start_source({"good": toolbox(), "empty": toolbox("--no-tools"), "typo": {"comand": "python"}})
    assert str(err.value).splitlines() == [
        "config error at mcp.servers.typo: give either command (a server started over stdio) or url (a streamable "
        "HTTP server)",
        "config error at mcp.servers.typo.comand: unknown key (did you mean 'command'?); valid: command, args, env, "
        "cwd, timeout, start_timeout, rename",
        f"config error at mcp.servers.empty: the server lists no tools (python {toolbox()['args'][0]} --no-tools)"]
