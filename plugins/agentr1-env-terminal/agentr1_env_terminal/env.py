"""``terminal``: a task in a sandbox. The agent runs commands with its tools; the task's tests decide the reward.

One episode: a sandbox of its own is started (``env.sandbox``, default ``local``), the task's environment files are
copied into its working folder, and the tools (``bash`` by default, ``python``) are bound to it. The episode is
plain multi-turn tool use (``ToolEnv``): it ends when the model answers without a call, at ``max_turns``, or when
the task's agent time limit (``task.toml`` ``[agent] timeout_sec``) has passed. Then the task's ``tests/`` are
copied in (the agent never saw them) and ``tests/test.sh`` runs in the same sandbox; what it reports (Harbor's
reward file, else its exit code) is the last step's reward, and the test's exit code and last output lines are in
that step's ``info["tests"]``.

Without ``task_dir`` (GSM8K with a ``python`` tool) the episode has an empty folder and no tests: the config's
reward function scores it.

The expert for the SFT warm start replays the task's ``solution/solve.sh`` as ``bash`` calls, then answers
``Done.``; a row's own ``expert_actions`` win when given.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from agentr1_core.envs import ToolEnv
from agentr1_core.mdp import Action, Observation, StepResult
from agentr1_core.sandbox import Sandbox, build_sandbox

from agentr1_env_terminal.harbor import HarborTask, copy_environment, read_task, run_tests, solution_commands

SYSTEM_PROMPT = ("You work in a Linux shell, in the task's folder. Run commands with the tools to do the task. "
                 "When it is done, reply with a short final message and no tool call.")
DONE = "Done."


class TerminalEnv(ToolEnv):
    """A Harbor task (``task_dir``) in a sandbox per episode. ``sandbox``: a sandbox name or ``{name: ...,
    **params}``; ``tools``: the tools, bound to the episode's sandbox (``bash``, ``python``); ``test_timeout``
    overrides the task's verifier time limit."""

    def __init__(self, task_dir: str | None = None, sandbox: Any = "local", tools: list[Any] | None = None,
                 tool_format: str = "hermes", system_prompt: str = SYSTEM_PROMPT, max_turns: int = 6,
                 context: str = "append", window: int = 2, tool_timeout: float | None = None,
                 test_timeout: float | None = None) -> None:
        super().__init__(tools=list(tools) if tools else ["bash"], tool_format=tool_format,
                         system_prompt=system_prompt, max_turns=max_turns, context=context, window=window,
                         tool_timeout=tool_timeout)
        self.task: HarborTask | None = read_task(task_dir) if task_dir else None
        self.sandbox_config = sandbox
        build_sandbox(sandbox)  # a sandbox that cannot run here is refused before the first episode
        self.test_timeout = test_timeout
        self.box: Sandbox | None = None
        self.started = 0.0
        self.tested = False

    # -- expert -----------------------------------------------------------------------------------------------------
    def load_expert(self, row: dict[str, Any]) -> None:
        super().load_expert(row)
        if self._expert_actions is None and self.task is not None and self.task.solution_script is not None:
            calls = [self.format.format_call("bash", {"command": c}) for c in solution_commands(self.task)]
            self._expert_actions = calls + [DONE] if calls else None

    # -- episode ----------------------------------------------------------------------------------------------------
    def _start_box(self) -> Sandbox:
        box = build_sandbox(self.sandbox_config)
        box.start()
        if self.task is not None:
            copy_environment(self.task, box)
        return box

    async def reset(self, row: dict[str, Any]) -> Observation:
        if self.box is not None:  # a second reset on one env: a fresh sandbox
            await asyncio.to_thread(self.box.close)
        self.box = await asyncio.to_thread(self._start_box)
        for tool in self.tools.values():
            bind = getattr(tool, "bind_sandbox", None)
            if callable(bind):
                bind(self.box)
        self.started, self.tested = time.monotonic(), False
        return await super().reset(row)

    def out_of_time(self) -> bool:
        limit = self.task.agent_timeout_sec if self.task is not None else None
        return bool(limit) and time.monotonic() - self.started > float(limit)

    async def step(self, action: Action) -> StepResult:
        result = await super().step(action)
        if not result.done and not result.truncated and self.out_of_time():
            result.truncated = True
            result.info["out_of_time"] = True
        if (result.done or result.truncated) and self.task is not None and not self.tested:
            self.tested = True
            reward, outcome = await asyncio.to_thread(run_tests, self.task, self.box, self.test_timeout)
            result.reward = float(result.reward) + reward
            lines = (outcome.stdout + outcome.stderr).strip().splitlines()[-10:]
            result.info["tests"] = {"reward": reward, "exit_code": outcome.exit_code, "killed": outcome.killed,
                                    "output": "\n".join(lines)}
        return result

    async def close(self) -> None:
        box, self.box = self.box, None
        if box is not None:
            await asyncio.to_thread(box.close)

