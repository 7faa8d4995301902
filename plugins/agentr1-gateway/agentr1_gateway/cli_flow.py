"""``cli_agent``: train a harness that is its own program (a coding CLI, mini-swe-agent, a script), unchanged.

Per episode: the gateway starts (``agentr1_gateway.server``), a working folder is made from the row, the command
runs there in a new session with the endpoint in its environment, and each model call it makes is one step.

* **Working folder.** A fresh temporary folder; when the row names a Harbor task (``env_kwargs.task_dir``, as the
  ``terminal_tasks`` and ``harbor`` datasets give), it is the ``app`` folder of a sandbox of the
  ``agentr1-env-terminal`` plugin (``test_sandbox``; by default the config's ``env.sandbox`` when the env is
  ``terminal``, else ``local``) with the task's environment files copied in (``harbor.copy_environment``), and the
  task's tests run in that sandbox after the command exits. The plugin is imported only for such rows.
* **Environment.** Not the run's whole environment (its secrets would reach the harness and every command the
  model writes): only the variables ``PASS_ENV`` names (``PATH``, ``HOME``, locale, proxies, ``PYTHONPATH``, ...)
  and those ``pass_env`` adds (names or ``fnmatch`` patterns; ``["*"]`` passes all), plus ``OPENAI_BASE_URL``
  (``.../v1``), ``OPENAI_API_KEY``, ``ANTHROPIC_BASE_URL`` (the root), ``ANTHROPIC_API_KEY``, ``AGENTR1_MODEL``,
  ``AGENTR1_TASK`` (the row's prompt), ``AGENTR1_TASK_FILE`` (the row as JSON, without ``reward_model`` and
  ``expert_actions``), ``AGENTR1_WORKDIR`` and the config's ``env``; the run's interpreter's folder first on
  ``PATH`` (``python`` is the run's Python).
* **Placeholders** in ``command`` (and ``verifier``): ``{prompt}``, ``{task_file}``, ``{workdir}``, ``{base_url}``,
  ``{anthropic_base_url}``, ``{api_key}``, ``{model}``, ``{python}``, and any other top-level text or number field
  of the row by its name (``{data_source}``, ``{task_name}``). Anything else in braces is left as written.
* **Concurrency.** At most ``concurrency`` episodes' commands run at once in a process (default 4 per CPU core):
  a harness process costs seconds of CPU to start (mini-swe-agent with LiteLLM: about 4), and 64 starting together
  on 2 cores would spend their whole ``timeout`` starting. The others wait; their time starts with their command.
* **Time.** ``timeout`` is the command's own time, as ``openai_agent`` counts it: wall time less the time its model
  calls spend in the gateway (a busy engine times no one out); at the limit its process group is killed. In a
  sandbox (``sandbox:``) it is plain wall time, the sandbox's own limit.
* **Endings.** ``done`` when the command exits after at least one model call (its exit code, if not 0, is in
  ``info["exit_code"]``); ``max_turns`` / ``context_limit`` / ``engine_error`` as ``openai_agent``; ``env_error``
  when it exits without calling the model (a crash at start, a harness that never asks) or runs past ``timeout``,
  with the last stderr lines in ``info["error"]``.
* **Reward.** The ``verifier`` command's (``agentr1_gateway.verifier.run_verifier``) when the config has one, else
  the task's tests when the row names a Harbor task, else the config's ``reward`` over ``info["answer"]`` (the
  command's last non-empty stdout line).
* **Sandboxed command.** ``sandbox: none`` (default) runs the command on the host; ``sandbox: local`` / ``bwrap`` /
  ``{name: ..., ...}`` runs it in that sandbox of ``agentr1-env-terminal`` (which must let it reach the endpoint on
  127.0.0.1: ``network: true``), the working folder being the sandbox's ``app`` and its tests running there.

Warm-start SFT (``policy = "expert"``): the gateway answers the i-th call with the row's i-th ``expert_actions``
text; a Harbor row without them gets its ``solution/solve.sh`` as ``bash`` calls in the flow's tool format, then
``Done.`` (as the ``terminal`` env builds its expert), unless ``expert_from_task: false``. A harness that ends on a
command rather than on a reply without a tool call gets that command as the last ``bash`` call instead of
``Done.``: ``expert_submit`` (mini-swe-agent's ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``).
"""

from __future__ import annotations

import asyncio
import fnmatch
import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
import traceback
import weakref
from pathlib import Path
from typing import Any

from agentr1_core.errors import ConfigError
from agentr1_core.flows import AgentFlowBase, FlowContext
from agentr1_core.mdp import Action, Step, Trajectory
from agentr1_core.rollout.base import SamplingParams
from agentr1_gateway.flow import ENDINGS, HIDDEN_FROM_AGENT, _ExpertReplies, _news
from agentr1_gateway.server import EpisodeGateway
from agentr1_gateway.verifier import Finished, Tail, harbor, run_command, run_verifier, task_dir

__all__ = ["CLIAgentFlow", "DONE", "expand"]

DONE = "Done."  # the expert's last answer after a task's solution commands (the terminal env's)
FIXED_PLACEHOLDERS = ("prompt", "task_file", "workdir", "base_url", "anthropic_base_url", "api_key", "model",
                      "python")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# what of the run's environment a command gets by default: what programs need to start, find files, speak the
# user's locale and reach the network as the machine does; no tokens or keys (pass_env adds names)
PASS_ENV = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "TMPDIR", "LANG", "LANGUAGE", "LC_*",
            "PYTHONPATH", "VIRTUAL_ENV", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
            "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "XDG_*")


def passed_environment(patterns: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The variables of the run's environment whose names match one of ``patterns`` (``fnmatch``, case-sensitive)."""
    return {k: v for k, v in os.environ.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)}


def expand(argv: list[str], values: dict[str, str]) -> list[str]:
    """``argv`` with each ``{name}`` whose name is in ``values`` replaced; other braces stay as written."""
    return [_PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), part) for part in argv]


def _argv(value: Any, where: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, (str, int, float)) for v in value):
        raise ConfigError(f"config error at agent_flow.{where}: a command is a non-empty list of strings, "
                          f"got {value!r}")
    return [str(v) for v in value]


_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Semaphore]] = \
    weakref.WeakKeyDictionary()


def command_slots(limit: int) -> asyncio.Semaphore:
    """The running event loop's semaphore for ``limit`` concurrent commands (shared by every episode of a rollout:
    each episode is a flow object of its own)."""
    per_loop = _SLOTS.setdefault(asyncio.get_running_loop(), {})
    return per_loop.setdefault(limit, asyncio.Semaphore(limit))


def run_path() -> str:
    """The ``PATH`` a command runs with: the run's interpreter's folder first (``python`` is the run's Python)."""
    bin_dir = os.path.dirname(sys.executable)
    return os.pathsep.join([bin_dir] + [p for p in os.environ.get("PATH", "").split(os.pathsep)
                                        if p and p != bin_dir])


def _check_program(program: str, where: str) -> None:
    """A program named without a folder (``mini``) or by an absolute path must exist before the first episode: one
    line, not an ``env_error`` per episode. Relative paths (to the working folder) and placeholders are left to
    the episode."""
    if "{" in program or (os.sep in program and not os.path.isabs(program)):
        return
    if shutil.which(program, path=run_path()) is None:
        raise ConfigError(f"config error at agent_flow.{where}: no program {program!r} "
                          f"({'not an executable file' if os.path.isabs(program) else 'not on PATH'}); "
                          f"install it or give its full path")


class CLIAgentFlow(AgentFlowBase):
    def __init__(self, ctx: FlowContext, command: Any, timeout: float = 300.0, verifier: Any = None,
                 reward_file: str | None = None, verifier_timeout: float = 120.0, sandbox: Any = "none",
                 test_sandbox: Any = None, test_timeout: float | None = None, env: dict[str, Any] | None = None,
                 tool_format: str | None = None, model_name: str = "agentr1-policy", output_lines: int = 50,
                 expert_from_task: bool = True, expert_submit: str | None = None,
                 pass_env: list[str] | None = None, concurrency: int | None = None) -> None:
        super().__init__(ctx)
        from agentr1_core.plugins import get_registry

        self.command = _argv(command, "command")
        self.verifier = _argv(verifier, "verifier")
        if sandbox in (None, "none", False):  # in a sandbox, its own PATH decides
            for where, argv in (("command", self.command), ("verifier", self.verifier)):
                if argv:
                    _check_program(argv[0], where)
        for name, value in (("timeout", timeout), ("verifier_timeout", verifier_timeout)):
            if value is None or value <= 0:
                raise ConfigError(f"config error at agent_flow.{name}: must be positive, got {value!r}")
        self.timeout, self.verifier_timeout = float(timeout), float(verifier_timeout)
        self.test_timeout = test_timeout
        self.reward_file = reward_file
        self.extra_env = {str(k): str(v) for k, v in (env or {}).items()}
        if pass_env is not None and (not isinstance(pass_env, (list, tuple))
                                     or not all(isinstance(p, str) and p for p in pass_env)):
            raise ConfigError(f"config error at agent_flow.pass_env: a list of variable names or patterns, "
                              f"got {pass_env!r}")
        self.pass_env = (*PASS_ENV, *(pass_env or ()))
        if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                        or concurrency < 1):
            raise ConfigError(f"config error at agent_flow.concurrency: a positive number of commands, "
                              f"got {concurrency!r}")
        self.concurrency = concurrency or 4 * (os.cpu_count() or 1)
        env_config = dict(ctx.env_config or {})
        tool_format = tool_format or env_config.get("tool_format") or "hermes"
        self.tool_format = get_registry().build("tool_format", tool_format, where="agent_flow.tool_format")
        self.model_name = model_name
        self.output_lines = int(output_lines)
        self.expert_from_task = bool(expert_from_task)
        if expert_submit is not None and (not isinstance(expert_submit, str) or not expert_submit.strip()):
            raise ConfigError(f"config error at agent_flow.expert_submit: a command line, got {expert_submit!r}")
        self.expert_submit = expert_submit
        self.sandbox = None if sandbox in (None, "none", False) else sandbox
        if test_sandbox is None:
            test_sandbox = self.sandbox or (env_config.get("sandbox") if env_config.get("name") == "terminal"
                                            else None) or "local"
        self.test_sandbox = test_sandbox
        if importlib.util.find_spec("agentr1_env_terminal") is not None:  # refused here, before the first episode
            self._build_box(test_sandbox, "agent_flow.test_sandbox")
        if self.sandbox is not None:
            box = self._build_box(self.sandbox, "agent_flow.sandbox")
            if getattr(box, "network", True) is False:
                raise ConfigError("config error at agent_flow.sandbox: the command must reach the episode's "
                                  "endpoint on 127.0.0.1; give its sandbox network: true "
                                  "(e.g. {name: local, network: true, wall_seconds: 600})")

    @staticmethod
    def _build_box(spec: Any, where: str) -> Any:
        harbor()  # the sandboxes are the terminal plugin's: one line naming the install when it is missing
        from agentr1_core.sandbox import build_sandbox

        return build_sandbox(spec, where=where)

    # -- the episode ------------------------------------------------------------------------------------------------
    def _expert(self, row: dict[str, Any], task: Any) -> _ExpertReplies | None:
        if self.ctx.policy != "expert":
            return None
        expert = _ExpertReplies(row)
        if not expert.actions and task is not None and self.expert_from_task:
            commands = harbor().solution_commands(task)
            if commands:
                if self.expert_submit:
                    commands = [*commands, self.expert_submit]
                expert.actions = [self.tool_format.format_call("bash", {"command": c}) for c in commands]
                if not self.expert_submit:
                    expert.actions.append(DONE)
        return expert

    async def _respond(self, prompt_ids: list[int], sampling: SamplingParams, expert: _ExpertReplies | None) -> Action:
        if expert is not None:
            return await self.act(prompt_ids, expert)
        gen = await self.ctx.engine.generate(prompt_ids, sampling)
        return Action(gen.text, list(gen.token_ids), list(gen.logprobs), finish_reason=gen.finish_reason)

    def _open_box(self, task: Any) -> Any:
        """The sandbox whose ``app`` folder is the working folder (None: a plain temporary folder)."""
        spec = self.sandbox if self.sandbox is not None else (self.test_sandbox if task is not None else None)
        if spec is None:
            return None
        box = self._build_box(spec, "agent_flow.sandbox" if self.sandbox is not None else "agent_flow.test_sandbox")
        box.start()
        try:
            if task is not None:
                harbor().copy_environment(task, box)
        except BaseException:
            box.close()
            raise
        return box

    async def run(self, row: dict[str, Any]) -> Trajectory:
        async with command_slots(self.concurrency):  # its timeout starts with the command, after the wait
            return await self._episode(row)

    async def _episode(self, row: dict[str, Any]) -> Trajectory:
        traj = Trajectory(data_source=str(row.get("data_source", "default")))
        folder = task_dir(row)
        expert: _ExpertReplies | None = None
        gateway = EpisodeGateway(respond=lambda ids, sampling: self._respond(ids, sampling, expert),
                                 tokenizer=self.ctx.tokenizer, tool_format=self.tool_format,
                                 sampling=self.ctx.sampling, max_prompt_tokens=self.ctx.max_prompt_tokens,
                                 max_calls=self.ctx.max_turns, model_name=self.model_name)
        scratch = Path(tempfile.mkdtemp(prefix="agentr1-cli-"))
        task = box = finished = None
        workdir, env, values = scratch / "work", {}, {}
        error: str | None = None
        try:
            task = await asyncio.to_thread(harbor().read_task, folder) if folder else None
            expert = await asyncio.to_thread(self._expert, row, task)
            box = await asyncio.to_thread(self._open_box, task)
            if box is not None:
                workdir = box.host_path("app")
            workdir.mkdir(exist_ok=True)
            base_url = await gateway.start()
            env, values = self._environment(row, base_url, gateway.key, scratch, box, workdir)
            finished = await self._run_command(expand(self.command, values), workdir, env, box, gateway)
            if finished.timed_out:
                error = f"TimeoutError: the command did not exit within {self.timeout:g}s"
            elif not gateway.calls:
                error = f"RuntimeError: the command exited with code {finished.exit_code} without calling the model"
        except ConfigError as exc:  # a missing plugin, a task folder that cannot be read: one line
            error = str(exc)
        except Exception:
            error = traceback.format_exc()
        finally:
            await gateway.close()
        try:
            self._record(traj, gateway, finished, error)
            if traj.steps:
                await self._reward(traj, row, task, box, workdir, env, values)
        finally:
            if box is not None:
                await asyncio.to_thread(box.close)
            shutil.rmtree(scratch, ignore_errors=True)
        return self.finish(traj, row)

    def _environment(self, row: dict[str, Any], base_url: str, key: str, scratch: Path, box: Any,
                     workdir: Path) -> tuple[dict[str, str], dict[str, str]]:
        """The command's environment and the placeholders' values."""
        task = {k: v for k, v in row.items() if k not in HIDDEN_FROM_AGENT}
        if self.sandbox is not None:  # the file must be visible inside the sandbox
            task_file_host = box.make_dir("logs", "agent") / "task.json"
            task_file = f"{box.path('logs')}/agent/task.json"
            cwd = box.path("app")
        else:
            task_file_host = scratch / "task.json"
            task_file, cwd = str(task_file_host), str(workdir)
        task_file_host.write_text(json.dumps(task, default=str))
        prompt = str(row.get("prompt", ""))
        root = base_url.removesuffix("/v1")
        ours = {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": key, "ANTHROPIC_BASE_URL": root,
                "ANTHROPIC_API_KEY": key, "AGENTR1_MODEL": self.model_name, "AGENTR1_TASK": prompt,
                "AGENTR1_TASK_FILE": task_file, "AGENTR1_WORKDIR": cwd}
        env = passed_environment(self.pass_env)
        env["PATH"] = run_path()
        no_proxy = [p for p in env.get("NO_PROXY", env.get("no_proxy", "")).split(",") if p]
        env["NO_PROXY"] = env["no_proxy"] = ",".join(no_proxy + ["127.0.0.1", "localhost"])
        env.update(ours)
        env.update(self.extra_env)
        values = {k: str(v) for k, v in task.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)}
        values.update(prompt=prompt, task_file=task_file, workdir=cwd, base_url=base_url, anthropic_base_url=root,
                      api_key=key, model=self.model_name, python=sys.executable)
        return env, values

    async def _run_command(self, argv: list[str], workdir: Path, env: dict[str, str], box: Any,
                           gateway: EpisodeGateway) -> Finished:
        if self.sandbox is None:  # the time its calls spend in the gateway (the model) does not count
            return await run_command(argv, workdir, env, self.timeout, self.output_lines, gateway.model_seconds)
        # in the sandbox: its own environment (PATH, HOME, ...) plus ours and the run's PYTHONPATH
        extra = {k: env[k] for k in env if k.startswith(("OPENAI_", "ANTHROPIC_", "AGENTR1_"))}
        extra.update(self.extra_env)
        if os.environ.get("PYTHONPATH"):
            extra.setdefault("PYTHONPATH", os.environ["PYTHONPATH"])
        result = await asyncio.to_thread(box.run, argv, timeout=self.timeout, env=extra)
        out, err = Tail(self.output_lines), Tail(self.output_lines)
        out.feed(result.stdout)
        out.close()
        err.feed(result.stderr)
        err.close()
        return Finished(result.exit_code, result.killed == "wall_time", result.seconds, out, err,
                        {"killed": result.killed} if result.killed else {})

    def _record(self, traj: Trajectory, gateway: EpisodeGateway, finished: Finished | None,
                error: str | None) -> None:
        calls = sorted(gateway.calls, key=lambda c: c.index)
        for i, call in enumerate(calls):
            after = calls[i + 1].observation if i + 1 < len(calls) else None
            traj.steps.append(Step(call.prompt_ids, call.action.token_ids, call.action.logprobs,
                                   action_text=call.action.text, observation=call.observation, next_observation=after,
                                   feedback=_news(call.observation, after),
                                   info={"finish_reason": call.action.finish_reason, "call": call.index,
                                         "requested_model": call.model}))
        if finished is not None:
            traj.info["exit_code"] = finished.exit_code
            traj.info["stdout"] = finished.stdout.text()
            traj.info["stderr"] = finished.stderr.text()
            traj.info.update(finished.info)
            answer = finished.stdout.last_line()
            if answer:
                traj.info["answer"] = answer
            traj.metrics["command_seconds"] = round(finished.seconds, 3)
        limits = [ENDINGS[r.code] for r in gateway.refusals if r.code in ENDINGS]
        if limits:
            traj.termination = limits[0]
        elif error is not None:
            traj.termination = "env_error"
        else:
            traj.termination = "done"
            traj.steps[-1].done = True
        if error is not None:  # its last line (what the run prints) says why, and what the command said last
            stderr = finished.stderr.text() if finished is not None else ""
            traj.info["error"] = (f"--- the command's last stderr lines ---\n{stderr}\n---\n{error.rstrip()} "
                                  f"(its last stderr line: {finished.stderr.last_line()})" if stderr else error)
        if traj.termination != "done" and traj.steps:
            traj.steps[-1].truncated = True
        if gateway.refusals:
            traj.info["refusals"] = [f"{r.status} {r.code}: {r.message}" for r in gateway.refusals]
        traj.metrics["model_calls"] = float(len(gateway.calls))

    async def _reward(self, traj: Trajectory, row: dict[str, Any], task: Any, box: Any, workdir: Path,
                      env: dict[str, str], values: dict[str, str]) -> None:
        """The verifier's or the task's tests' reward, added to the last step (the config's ``reward`` function, if
        any, is applied by ``finish`` on top)."""
        if self.verifier is not None:
            env = dict(env, AGENTR1_ANSWER=traj.info.get("answer", ""),
                       AGENTR1_EXIT_CODE=str(traj.info.get("exit_code")))
            for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
                env.pop(key, None)  # the endpoint is closed: the verifier is no model call
            reward, info = await run_verifier(expand(self.verifier, values), workdir, env, self.verifier_timeout,
                                              self.reward_file, self.output_lines)
            traj.info["verifier"] = info
        elif task is not None and box is not None:
            from agentr1_core.sandbox import owned_like

            app = box.host_path("app")
            await asyncio.to_thread(owned_like, app, app)  # what the command wrote, the sandbox's user may change
            reward, outcome = await asyncio.to_thread(harbor().run_tests, task, box, self.test_timeout)
            lines = (outcome.stdout + outcome.stderr).strip().splitlines()[-10:]
            traj.info["tests"] = {"reward": reward, "exit_code": outcome.exit_code, "killed": outcome.killed,
                                  "output": "\n".join(lines), "reward_from": outcome.info.get("reward_from")}
        else:
            return
        traj.metrics["verifier_reward"] = float(reward)
        traj.steps[-1].reward += float(reward)

