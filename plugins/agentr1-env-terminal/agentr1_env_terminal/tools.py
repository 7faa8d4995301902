"""The tools that run in an episode's sandbox: ``bash`` (a shell command) and ``python`` (code for an interpreter).

The ``terminal`` env gives each its episode's sandbox (``bind_sandbox``) before the first turn; a tool used without
one (in ``tool_env``) says so in an error observation instead of running anything on the host. What a command does
(a non-zero exit, a crash, output that is binary or too long) is the command's result, shown to the model with its
exit code; a command killed at the sandbox's wall-time limit is a ``timeout`` tool error, any other kill (CPU time,
a signal) is counted as ``killed``.
"""

from __future__ import annotations

from typing import Any

from agentr1_core.sandbox import CommandResult, Sandbox
from agentr1_core.tools import BaseTool, ToolResult


class SandboxTool(BaseTool):
    """A tool whose calls run in the episode's sandbox. ``timeout`` is the wall-time limit of one call in the
    sandbox (lowered to the sandbox's own limit when that is lower); the tool call itself waits a little longer so
    that the sandbox, not the caller, stops the command and says how it ended. ``output_chars`` caps what the model
    is shown."""

    def __init__(self, timeout: float = 10.0, output_chars: int = 2000) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        self.command_timeout = float(timeout)
        self.timeout = float(timeout) + 5.0
        self.output_chars = int(output_chars)
        self.sandbox: Sandbox | None = None

    def bind_sandbox(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def command(self, arguments: dict[str, Any]) -> tuple[str | list[str], str | None]:
        """The command to run and its stdin."""
        raise NotImplementedError

    def execute(self, **arguments: Any) -> ToolResult:
        if self.sandbox is None:
            return ToolResult(f"Error: {self.name} runs in an episode's sandbox; use it in the terminal env "
                              f"(env: {{name: terminal, tools: [{self.name}]}})", error="no_sandbox")
        command, stdin = self.command(arguments)
        result = self.sandbox.run(command, timeout=self.command_timeout, stdin=stdin)
        return _as_tool_result(result, self.output_chars)


def _as_tool_result(result: CommandResult, limit: int) -> ToolResult:
    text = result.describe()
    if len(text) > limit:
        head, tail = text[: limit // 2], text[-(limit // 2):]
        text = f"{head}\n... [{len(text) - 2 * (limit // 2)} characters cut] ...\n{tail}"
    error = None
    if result.killed:
        error = "timeout" if result.killed == "wall_time" else "killed"
    info = {"exit_code": result.exit_code, "seconds": round(result.seconds, 3)}
    if result.killed:
        info["killed"] = result.killed
    if result.truncated:
        info["output_problems"] = ["output_truncated"]
    return ToolResult(text, error=error, info=info)


class BashTool(SandboxTool):
    name = "bash"
    description = ("Run a bash command in the task's working folder and get its output and exit code. "
                   "Each call starts in that folder; files persist between calls.")
    parameters = {"type": "object", "properties": {"command": {"type": "string", "description": "The command line"}},
                  "required": ["command"]}

    def command(self, arguments: dict[str, Any]) -> tuple[str | list[str], str | None]:
        return str(arguments["command"]), None


class PythonTool(SandboxTool):
    """Code is given to the interpreter on its standard input (no file is left in the task's folder)."""

    name = "python"
    description = ("Run Python code in the task's working folder and get what it prints (stdout and stderr). "
                   "Use print() to see a value.")
    parameters = {"type": "object", "properties": {"code": {"type": "string", "description": "Python source code"}},
                  "required": ["code"]}

    def __init__(self, timeout: float = 10.0, output_chars: int = 2000, interpreter: str = "python3") -> None:
        super().__init__(timeout=timeout, output_chars=output_chars)
        self.interpreter = interpreter

    def command(self, arguments: dict[str, Any]) -> tuple[str | list[str], str | None]:
        return [self.interpreter, "-"], str(arguments["code"])
