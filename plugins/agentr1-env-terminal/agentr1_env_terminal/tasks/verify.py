"""Checking a task the way the env will run it: the untouched task must fail its tests (reward 0) and the reference
solution must pass them (reward 1). ``verify_task`` is one task; ``verify_tasks`` many, a few at a time."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from agentr1_core.sandbox import Sandbox
from agentr1_env_terminal.harbor import HarborTask, copy_environment, run_tests, solution_commands

SandboxFactory = Callable[[], Sandbox]


@dataclass(frozen=True)
class Verdict:
    task: HarborTask
    before: float
    after: float
    detail: str

    @property
    def ok(self) -> bool:
        return self.before == 0.0 and self.after == 1.0


def _tail(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else "..." + text[-limit:]


def _episode(task: HarborTask, factory: SandboxFactory, commands: list[str]) -> tuple[float, list[str]]:
    notes = []
    sandbox = factory()
    try:
        sandbox.start()
        copy_environment(task, sandbox)
        for command in commands:
            result = sandbox.run(command, timeout=task.agent_timeout_sec)
            if not result.ok:
                notes.append(f"solution command {command!r} ended with {_tail(result.describe())}")
        reward, result = run_tests(task, sandbox)
        notes.append(f"test ({result.info.get('reward_from')}): {_tail(result.stdout + result.stderr)}")
        return reward, notes
    finally:
        sandbox.close()


def verify_task(task: HarborTask, sandbox_factory: SandboxFactory) -> tuple[float, float, str]:
    """``(reward before, reward after, detail)``: the tests run on the untouched task, then on a fresh sandbox after
    the solution's commands (``solution_commands``), each as the env runs it (``copy_environment``, then
    ``sandbox.run``, then ``run_tests``). ``detail`` is empty when the task is right (0 before, 1 after), else it
    says what went wrong."""
    before, before_notes = _episode(task, sandbox_factory, [])
    after, after_notes = _episode(task, sandbox_factory, solution_commands(task))
    problems = []
    if before != 0.0:
        problems.append(f"the untouched task already gets reward {before:g} ({'; '.join(before_notes)})")
    if after != 1.0:
        problems.append(f"the solution gets reward {after:g} ({'; '.join(after_notes)})")
    return before, after, "; ".join(problems)


def verify_tasks(tasks: list[HarborTask], sandbox_factory: SandboxFactory, jobs: int = 1) -> list[Verdict]:
    """``verify_task`` of each task, ``jobs`` at a time, in the order given."""
    def one(task: HarborTask) -> Verdict:
        return Verdict(task, *verify_task(task, sandbox_factory))

    if jobs <= 1:
        return [one(task) for task in tasks]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, tasks))


def family_table(verdicts: list[Verdict]) -> str:
    """Tasks, passed and failed per family, one line each and a total."""
    rows: dict[str, list[int]] = {}
    for verdict in verdicts:
        counts = rows.setdefault(verdict.task.family, [0, 0])
        counts[0 if verdict.ok else 1] += 1
    width = max([len("family"), len("total")] + [len(f) for f in rows])
    lines = [f"{'family':<{width}}  tasks  pass  fail"]
    for family, (passed, failed) in sorted(rows.items()):
        lines.append(f"{family:<{width}}  {passed + failed:>5}  {passed:>4}  {failed:>4}")
    passed = sum(v.ok for v in verdicts)
    lines.append(f"{'total':<{width}}  {len(verdicts):>5}  {passed:>4}  {len(verdicts) - passed:>4}")
    return "\n".join(lines)
