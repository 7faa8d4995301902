"""``BaseTool``: an executable tool with a JSON-schema signature, and the safe way to call one.

A tool declares ``name``, ``description`` and ``parameters`` (a JSON schema object) and implements
``execute(**arguments)``, async or plain. ``call_tool`` validates arguments, enforces the timeout, caps and sanitises
output and turns every failure into a ``ToolResult`` with ``error`` set: a tool never raises into the rollout.

Each call runs in a thread of its own (with its own event loop for an async ``execute``), so a tool that blocks
(``time.sleep``, a synchronous HTTP client, heavy CPU work) neither stalls the other episodes nor outlives its
timeout: the episode gets a timeout error after ``timeout`` seconds; an awaiting tool is cancelled, a blocking one
finishes in the background and its result is dropped. A tool that never blocks and holds objects bound to the
rollout's event loop sets ``runs_in_thread = False`` and is awaited on that loop.

Output that had to be repaired is listed in ``ToolResult.info["output_problems"]``: ``output_truncated``,
``invalid_utf8``, ``non_string_output`` (a dict, list or number, sent to the model as JSON). A tool that returns
``None`` is an error (``bad_output``).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

MAX_OUTPUT_CHARS = 4000

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list,), "object": (dict,), "null": (type(None),),
}


@dataclass
class ToolResult:
    """What a tool call produced: text for the model, an optional reward, and an error kind if it failed."""

    text: str
    reward: float = 0.0
    error: str | None = None  # None | bad_arguments | unknown_tool | exception | timeout | parse_error | bad_output
    info: dict[str, Any] = field(default_factory=dict)  # output_problems: [output_truncated, invalid_utf8]


class BaseTool:
    """Subclass and set ``name``, ``description``, ``parameters``; implement ``execute(**kwargs)`` (async or plain).

    ``execute`` returns a string or a ``ToolResult`` (to give a per-call reward). Raising is fine: the caller turns
    the exception into an error observation. ``timeout`` (seconds) bounds one call, whether the tool awaits or
    blocks (see ``runs_in_thread``).
    """

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}, "required": []}
    timeout: float = 10.0
    runs_in_thread: bool = True  # False: awaited on the rollout's event loop (the tool must never block)

    async def execute(self, **arguments: Any) -> str | ToolResult:
        raise NotImplementedError

    def openai_schema(self) -> dict[str, Any]:
        """The tool as an OpenAI function schema (what chat templates render into the system prompt)."""
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def validate_arguments(self, arguments: Any) -> str | None:
        """A one-line problem with ``arguments`` or None. Checks object shape, required keys, unknown keys, types."""
        if not isinstance(arguments, dict):
            return f"arguments must be a JSON object, got {type(arguments).__name__}"
        props = self.parameters.get("properties", {})
        missing = [k for k in self.parameters.get("required", []) if k not in arguments]
        if missing:
            return f"missing required argument(s): {', '.join(missing)}"
        if self.parameters.get("additionalProperties", False) is False:
            unknown = [k for k in arguments if k not in props]
            if unknown:
                return f"unknown argument(s): {', '.join(unknown)}; expected: {', '.join(props) or 'none'}"
        for key, value in arguments.items():
            expected = props.get(key, {}).get("type")
            if expected is None:
                continue
            types = expected if isinstance(expected, list) else [expected]
            ok = any(isinstance(value, _JSON_TYPES.get(t, object)) for t in types)
            if isinstance(value, bool) and "boolean" not in types:
                ok = False
            if not ok:
                return f"argument {key!r} must be {' or '.join(types)}, got {type(value).__name__}"
        return None


def clean_output(text: Any, limit: int = MAX_OUTPUT_CHARS) -> str:
    """Tool output as printable text: bytes decoded with replacement, capped at ``limit`` characters."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        try:
            text = json.dumps(text, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = str(text)
    text = text.encode("utf-8", errors="replace").decode("utf-8")
    if len(text) > limit:
        text = text[:limit] + f"... [truncated {len(text) - limit} characters]"
    return text


def output_problems(text: Any, limit: int = MAX_OUTPUT_CHARS) -> list[str]:
    """What ``clean_output`` will repair in ``text``: ``invalid_utf8`` (undecodable bytes or lone surrogates) and
    ``output_truncated`` (longer than ``limit`` characters). The output still reaches the model, cleaned."""
    problems = []
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            problems.append("invalid_utf8")
            text = text.decode("utf-8", errors="replace")
    if isinstance(text, str):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            problems.append("invalid_utf8")
        if len(text) > limit:
            problems.append("output_truncated")
    return problems


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def in_daemon_thread(fn: Callable[[], Any], name: str) -> asyncio.Future[Any]:
    """Start ``fn()`` in a daemon thread (with the caller's context variables); the returned future of the running
    loop gets its result or exception. Nobody joins the thread, so one that never returns does not keep the process
    alive; a result that arrives after the loop closed is dropped."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if done.done():
            return
        if ok:
            done.set_result(value)
        else:
            done.set_exception(value)

    def work() -> None:
        try:
            outcome: tuple[bool, Any] = (True, fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's loop, raised there
            outcome = (False, exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the caller's loop is closed: nobody waits for this result any more
            pass

    threading.Thread(target=contextvars.copy_context().run, args=(work,), daemon=True, name=name).start()
    return done


async def _execute_in_thread(tool: BaseTool, arguments: dict[str, Any], limit: float) -> Any:
    """``tool.execute`` in a daemon thread with an event loop of its own; ``asyncio.TimeoutError`` after ``limit``
    seconds (an awaiting tool is cancelled in its loop; a blocking one runs to its end, unobserved)."""
    inner: dict[str, Any] = {}

    def work() -> Any:
        own_loop = asyncio.new_event_loop()
        try:
            out = tool.execute(**arguments)
            if inspect.isawaitable(out):
                task = own_loop.create_task(_awaited(out))
                inner["cancel"] = lambda: own_loop.call_soon_threadsafe(task.cancel)
                out = own_loop.run_until_complete(task)
            return out
        finally:
            own_loop.close()

    done = in_daemon_thread(work, f"agentr1-tool-{tool.name}")
    try:
        return await asyncio.wait_for(done, timeout=limit)
    except asyncio.TimeoutError:
        cancel = inner.get("cancel")
        if cancel is not None:
            try:
                cancel()
            except RuntimeError:  # its loop already finished
                pass
        raise


async def _execute(tool: BaseTool, arguments: dict[str, Any], limit: float) -> Any:
    if tool.runs_in_thread:
        return await _execute_in_thread(tool, arguments, limit)

    async def on_loop() -> Any:
        out = tool.execute(**arguments)
        return await out if inspect.isawaitable(out) else out

    return await asyncio.wait_for(on_loop(), timeout=limit)


async def call_tool(tool: BaseTool, arguments: Any, timeout: float | None = None) -> ToolResult:
    """Run one tool call safely: never raises (except cancellation), always returns a ``ToolResult``."""
    problem = tool.validate_arguments(arguments)
    if problem:
        return ToolResult(f"Error: {tool.name}: {problem}", error="bad_arguments")
    limit = tool.timeout if timeout is None else timeout
    try:
        out = await _execute(tool, arguments, limit)
    except asyncio.TimeoutError:
        return ToolResult(f"Error: {tool.name} timed out after {limit:g}s", error="timeout")
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        return ToolResult(f"Error: {tool.name} failed: {type(exc).__name__}: {clean_output(str(exc), 300)}",
                          error="exception")
    raw = out.text if isinstance(out, ToolResult) else out
    result = out if isinstance(out, ToolResult) else ToolResult("")
    if raw is None:
        return ToolResult(f"Error: {tool.name} returned None; a tool returns a string or a ToolResult",
                          error="bad_output")
    problems = output_problems(raw)
    if not isinstance(raw, (str, bytes)):
        problems.append("non_string_output")
    result.text = clean_output(raw)
    if problems:
        result.info["output_problems"] = problems
    return result
