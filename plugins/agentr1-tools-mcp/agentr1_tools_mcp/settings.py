"""The ``mcp.servers`` section: each server's settings, checked, with every problem found at once.

::

    mcp:
      servers:
        calc: {command: python, args: [-m, my_calc_server], env: {}, cwd: null, timeout: 30}   # stdio
        docs: {url: "http://127.0.0.1:9000/mcp", headers: {}, timeout: 30}                   # streamable HTTP
        time: {command: python, args: [-m, mcp_server_time], rename: {convert_time: timezone_converter}}

``timeout`` bounds each tool call, ``start_timeout`` (default 60 s) starting the server and listing its tools.
``command: python`` (or ``python3``) is the interpreter of the run itself, so a server module installed beside
agentr1 is found in an environment that is not activated; give a path for another one. ``rename`` maps a
server's tool name to the name the model sees. Nothing here starts a server (``connection``).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any

from agentr1_core.errors import suggest

STDIO_KEYS = ("command", "args", "env", "cwd", "timeout", "start_timeout", "rename")
HTTP_KEYS = ("url", "headers", "timeout", "start_timeout", "rename")
DEFAULT_TIMEOUT = 30.0  # a tool call
DEFAULT_START_TIMEOUT = 60.0  # starting a server and listing its tools (an interpreter's imports take seconds)
SERVER_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
THIS_PYTHON = ("python", "python3")


@dataclass(frozen=True)
class ServerSettings:
    """One server of ``mcp.servers``: stdio (``command``) or streamable HTTP (``url``)."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    rename: dict[str, str] = field(default_factory=dict)
    start_timeout: float = DEFAULT_START_TIMEOUT

    @property
    def key(self) -> str:
        return f"mcp.servers.{self.name}"

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "streamable HTTP"

    def executable(self) -> str:
        """The command to run: ``python`` is the run's own interpreter."""
        return sys.executable if self.command in THIS_PYTHON else self.command

    def describe(self) -> str:
        """The command line or the URL, as a user would write it."""
        return " ".join([self.command, *self.args]) if self.command else self.url


def _string_map(value: Any, key: str, problems: list[str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                              and not isinstance(v, bool) for k, v in value.items()):
        problems.append(f"config error at {key}: expected a mapping of names to strings")
        return {}
    return {k: str(v) for k, v in value.items()}


def parse_server(name: Any, raw: Any) -> tuple[ServerSettings | None, list[str]]:
    """The settings of the server ``name`` of ``mcp.servers``, or None and its problems (one line each)."""
    key = f"mcp.servers.{name}"
    if not isinstance(name, str) or not SERVER_NAME.match(name):
        return None, [f"config error at {key}: a server's name is letters, digits, '_', '.' and '-' (it is "
                      f"written mcp:NAME and mcp:NAME/TOOL in env.tools)"]
    if not isinstance(raw, dict):
        return None, [f"config error at {key}: expected {{command: ..., args: [...]}} (stdio) or {{url: ...}} "
                      f"(streamable HTTP), got {type(raw).__name__}"]
    problems: list[str] = []
    has_command, has_url = raw.get("command") is not None, raw.get("url") is not None
    if has_command == has_url:
        problems.append(f"config error at {key}: give either command (a server started over stdio) or url (a "
                        f"streamable HTTP server){', not both' if has_command else ''}")
    valid = STDIO_KEYS if has_command or not has_url else HTTP_KEYS
    if has_command and has_url:  # said once above; the keys of either kind are no further mistake
        valid = tuple(dict.fromkeys(STDIO_KEYS + HTTP_KEYS))
    for unknown in [k for k in raw if k not in valid]:
        hint = suggest(str(unknown), valid)
        if not hint and unknown in STDIO_KEYS + HTTP_KEYS:
            hint = f" (a {'stdio' if has_command else 'streamable HTTP'} server has no {unknown})"
        problems.append(f"config error at {key}.{unknown}: unknown key{hint}; valid: {', '.join(valid)}")
    for text_key in ("command", "url", "cwd"):
        value = raw.get(text_key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            problems.append(f"config error at {key}.{text_key}: expected a non-empty string, got {value!r}")
    url = raw.get("url")
    if isinstance(url, str) and url.strip() and not re.match(r"^https?://", url):
        problems.append(f"config error at {key}.url: expected an http:// or https:// URL, got {url!r}")
    args = raw.get("args")
    if args is None:
        args = []
    elif not isinstance(args, list) or not all(isinstance(a, (str, int, float)) and not isinstance(a, bool)
                                               for a in args):
        problems.append(f"config error at {key}.args: expected a list of strings, got {args!r}")
        args = []
    timeout = _seconds(raw, "timeout", DEFAULT_TIMEOUT, key, problems)
    start_timeout = _seconds(raw, "start_timeout", DEFAULT_START_TIMEOUT, key, problems)
    env = _string_map(raw.get("env"), f"{key}.env", problems)
    headers = _string_map(raw.get("headers"), f"{key}.headers", problems)
    rename = _string_map(raw.get("rename"), f"{key}.rename", problems)
    shown = list(rename.values())
    for twice in sorted({n for n in shown if shown.count(n) > 1}):
        problems.append(f"config error at {key}.rename: two tools renamed to {twice!r}")
    if problems:
        return None, problems
    return ServerSettings(name=name, command=str(raw.get("command") or ""), args=tuple(str(a) for a in args),
                          env=env, cwd=raw.get("cwd"), url=str(raw.get("url") or ""), headers=headers,
                          timeout=timeout, rename=rename, start_timeout=start_timeout), []


def _seconds(raw: dict[str, Any], name: str, default: float, key: str, problems: list[str]) -> float:
    value = raw.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        problems.append(f"config error at {key}.{name}: expected a number of seconds above 0, got {value!r}")
        return default
    return float(value)


def parse_servers(servers: Any) -> tuple[list[ServerSettings], list[str]]:
    """Every server of ``mcp.servers`` that is well formed, and the problems of the others."""
    if servers is None:
        return [], []
    if not isinstance(servers, dict):
        return [], [f"config error at mcp.servers: expected a mapping of server names to settings, got "
                    f"{type(servers).__name__}"]
    parsed: list[ServerSettings] = []
    problems: list[str] = []
    for name, raw in servers.items():
        settings, found = parse_server(name, raw)
        problems.extend(found)
        if settings is not None:
            parsed.append(settings)
    return parsed, problems
