"""Registers the sandboxes (``local``, ``bwrap``, ``docker``), the tools that run in them (``bash``, ``python``), the
``terminal`` env (a Harbor task per episode, rewarded by its tests), the datasets ``harbor`` (a folder of task
folders) and ``terminal_tasks`` (the recipe's generated tasks), the ``agentr1-core terminal`` command and the named
configs of ``configs/``.

Every factory is a lazy ``"module:attr"`` string: listing plugins starts no process and reads no task.
"""

from __future__ import annotations

from agentr1_core.hookspecs import hookimpl
from agentr1_core.named_configs import package_configs
from agentr1_core.specs import CommandSpec, DatasetSpec, EnvSpec, SandboxSpec, ToolSpec

PKG = "agentr1_env_terminal"


@hookimpl
def agentr1_sandboxes():
    return [
        SandboxSpec("local", f"{PKG}.sandboxes.local:LocalSandbox",
                    "A folder per episode; commands as a process group under resource limits, no network where "
                    "the kernel allows a private namespace"),
        SandboxSpec("bwrap", f"{PKG}.sandboxes.bwrap:BwrapSandbox",
                    "bubblewrap: the host's files read-only, only the task's folders writable, no network"),
        SandboxSpec("docker", f"{PKG}.sandboxes.docker:DockerSandbox",
                    "A container per episode from the task's image (needs a Docker daemon)"),
    ]


@hookimpl
def agentr1_tools():
    return [
        ToolSpec("bash", f"{PKG}.tools:BashTool", "Run a shell command in the episode's sandbox"),
        ToolSpec("python", f"{PKG}.tools:PythonTool", "Run Python code in the episode's sandbox"),
    ]


@hookimpl
def agentr1_envs():
    return [EnvSpec("terminal", f"{PKG}.env:TerminalEnv",
                    "A task in a sandbox: the agent runs commands, the task's tests decide the reward",
                    row_fields=("prompt",))]


@hookimpl
def agentr1_datasets():
    return [
        DatasetSpec("harbor", f"{PKG}.harbor:load_tasks",
                    "A folder of Harbor task folders (instruction.md, task.toml, environment/, tests/, solution/)",
                    row_fields=("prompt", "env_kwargs.task_dir")),
        DatasetSpec("terminal_tasks", f"{PKG}.tasks.generate:load_generated",
                    "The recipe's generated shell tasks (count, find, sort, sum, rename, fix...), as Harbor folders",
                    row_fields=("prompt", "env_kwargs.task_dir")),
        DatasetSpec("gsm8k_python", f"{PKG}.gsm8k_python:gsm8k_python_rows",
                    "GSM8K rows (the core's) with the expert's calculator calls written as python calls",
                    row_fields=("prompt", "reward_model.ground_truth")),
    ]


@hookimpl
def agentr1_cli_commands():
    return [CommandSpec("terminal", f"{PKG}.cli:register", "Terminal tasks: generate, check (each solution passes)",
                        help="terminal tasks: generate, check")]


@hookimpl
def agentr1_configs():
    return package_configs(PKG)
