"""A tiny command-line agent with one ``bash`` tool: a standalone program, the ``cli_agent`` flow's example.

    OPENAI_BASE_URL=... OPENAI_API_KEY=... AGENTR1_TASK="Count the .md files ..." \\
        python -m agentr1_gateway.examples.shell_agent [--max-turns 20] [--command-timeout 30]

It asks the model (through the ``openai`` client, the OpenAI tools API) what to do about ``AGENTR1_TASK``, runs
each ``bash`` call it gets in its working folder (a subprocess with a time limit, its output capped), sends the
output back, and stops when the model answers without a tool call: that answer is its last line on stdout. What it
did goes to stderr. Its system prompt and tool are the ``terminal`` env's, so the model sees the prompts it sees
there, and a command's result is shown the same way (the output, then ``[exit code N]``).

It knows nothing of agentr1: any OpenAI-compatible endpoint serves it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys

SYSTEM_PROMPT = ("You work in a Linux shell, in the task's folder. Run commands with the tools to do the task. "
                 "When it is done, reply with a short final message and no tool call.")
BASH = {"type": "function", "function": {
    "name": "bash",
    "description": ("Run a bash command in the task's working folder and get its output and exit code. "
                    "Each call starts in that folder; files persist between calls."),
    "parameters": {"type": "object", "properties": {"command": {"type": "string", "description": "The command line"}},
                   "required": ["command"]}}}


def cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... [{len(text) - 2 * half} characters cut] ...\n{text[-half:]}"


def run_bash(command: str, timeout: float, limit: int) -> str:
    """``command`` in bash in the current folder, as the model sees its result."""
    try:
        proc = subprocess.Popen(["bash", "-c", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        return f"Error: cannot run bash: {exc}"
    try:
        out, err = proc.communicate(timeout=timeout)
        status = f"[exit code {proc.returncode}]"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        status = f"[killed: wall_time after {timeout:g}s]"
    parts = [p.decode("utf-8", errors="replace").rstrip("\n") for p in (out, err) if p.strip()]
    return cap("\n".join(parts + [status]), limit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-turns", type=int, default=20, help="model calls at most")
    parser.add_argument("--command-timeout", type=float, default=30.0, help="seconds per bash command")
    parser.add_argument("--output-chars", type=int, default=2000, help="characters of a result shown to the model")
    parser.add_argument("--model", default=os.environ.get("AGENTR1_MODEL", "any"))
    args = parser.parse_args(argv)
    task = os.environ.get("AGENTR1_TASK")
    if not task:
        print("shell_agent: AGENTR1_TASK is not set (the task to do)", file=sys.stderr)
        return 2
    import openai

    client = openai.OpenAI(max_retries=0, timeout=3600.0)  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    messages: list[dict] = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task}]
    try:
        for _ in range(args.max_turns):
            reply = client.chat.completions.create(model=args.model, messages=messages, tools=[BASH])
            message = reply.choices[0].message
            calls = message.tool_calls or []
            messages.append(message.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
            if not calls:
                print(message.content or "")
                return 0
            for call in calls:
                try:
                    command = str(json.loads(call.function.arguments or "{}")["command"])
                except (ValueError, KeyError, TypeError) as exc:
                    result = f"Error: bad arguments for {call.function.name}: {exc}"
                else:
                    if call.function.name != "bash":
                        result = f"Error: unknown tool {call.function.name!r}; the tool is bash"
                    else:
                        print(f"$ {command}", file=sys.stderr, flush=True)
                        result = run_bash(command, args.command_timeout, args.output_chars)
                        print(result, file=sys.stderr, flush=True)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    finally:
        client.close()
    print(f"shell_agent: no final answer within {args.max_turns} model calls", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
