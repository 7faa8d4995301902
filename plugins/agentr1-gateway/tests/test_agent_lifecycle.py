"""An agent past its timeout stops affecting the run: in a thread it ends at its next model call (or its next Python
bytecode), in a process it is killed, the episodes after it run, and the run's process never waits for one that
nothing can stop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import openai  # noqa: F401 - imported once here, not in the first agent's own time

from agentr1_core.flows import FlowContext
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.rollout.driver import rollout_async
from agentr1_gateway.flow import OpenAIAgentFlow, load_agent

AGENTS = Path(__file__).with_name("agent_functions.py")


class PerRow(OpenAIAgentFlow):
    """The row names its agent (``agent``) and may set its own timeout (``timeout``)."""

    async def run(self, row):
        self.agent_spec = f"{AGENTS}:{row['agent']}"
        self.agent = load_agent(self.agent_spec)
        self.timeout = float(row.get("timeout", self.timeout))
        return await super().run(row)


def run_rows(rows, context, **params):
    return asyncio.run(rollout_async(rows, 1, lambda: PerRow(context, agent=f"{AGENTS}:ask", **params),
                                     progress=False))


def context_of(engine, tokenizer):
    return FlowContext(engine=engine, tokenizer=tokenizer, sampling=SamplingParams(max_new_tokens=8), max_turns=50)


def test_in_a_thread_an_agent_past_its_timeout_ends_at_its_next_call_or_bytecode_and_the_next_episodes_run(
        tokenizer, scripted):
    engine = scripted(["ok"])
    context = context_of(engine, tokenizer)
    rows = [{"prompt": "retrier", "agent": "retries_past_its_timeout"},
            {"prompt": "spinner", "agent": "spins_after_one_call"}]
    retrier, spinner = run_rows(rows, context, timeout=1.0)
    for traj in (retrier, spinner):
        assert traj.termination == "env_error" and "did not return within 1s" in traj.info["error"]
    assert len(spinner.steps) == 1 and len(retrier.steps) >= 1
    threads = load_agent(f"{AGENTS}:ask").__globals__["THREADS"]
    for name in ("retrier", "spinner"):  # the retrier at its next call, the spinner at its next bytecode
        threads[name].join(timeout=60)
        assert not threads[name].is_alive(), name
    # nothing it sent after its episode ended reached the model, and the next episodes run as usual
    assert sum("retrier" in tokenizer.decode(p) for p in engine.prompts) == len(retrier.steps)
    after = run_rows([{"prompt": "next", "agent": "ask"}, {"prompt": "and next", "agent": "ask"}], context)
    assert [t.termination for t in after] == ["done", "done"]


def test_in_a_process_an_agent_past_its_timeout_is_killed_and_one_that_returns_or_raises_is_recorded(
        tokenizer, scripted, tmp_path):
    pid_file = tmp_path / "pid"
    rows = [{"prompt": "spinner", "agent": "spins_after_one_call", "pid_file": str(pid_file), "timeout": 5},
            {"prompt": "What is 6*7?", "agent": "returns_reward"}, {"prompt": "hi", "agent": "raises"}]
    spinner, paid, raised = run_rows(rows, context_of(scripted(["ok"]), tokenizer), timeout=120, isolation="process")
    assert spinner.termination == "env_error" and "did not return within 5s" in spinner.info["error"]
    pid = int(pid_file.read_text())
    assert pid != os.getpid()
    try:
        os.kill(pid, 0)
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive  # killed and reaped with its episode
    assert paid.termination == "done" and paid.final_reward == 0.75 and paid.metrics["hops"] == 2.0
    assert len(paid.steps) == 1 and "What is 6*7?" in paid.steps[0].observation.messages[0]["content"]
    assert raised.termination == "env_error" and "RuntimeError: agent bug" in raised.info["error"]
    assert len(raised.steps) == 1


def test_the_runs_process_ends_without_waiting_for_an_agent_nothing_can_stop(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import asyncio
        from agentr1_core.flows import FlowContext
        from agentr1_core.models import load_tokenizer
        from agentr1_core.rollout.base import Generation, SamplingParams
        from agentr1_core.rollout.driver import rollout_async
        from agentr1_gateway.flow import OpenAIAgentFlow

        tokenizer = load_tokenizer("smollm2-135m-instruct")

        class Engine:
            async def generate(self, prompt_ids, sampling):
                ids = tokenizer.encode("ok", add_special_tokens=False) + [tokenizer.eos_token_id]
                return Generation(ids, [-0.5] * len(ids), "ok", "stop")

        context = FlowContext(engine=Engine(), tokenizer=tokenizer, sampling=SamplingParams(max_new_tokens=8))
        trajs = asyncio.run(rollout_async([{{"prompt": "x"}}], 1, lambda: OpenAIAgentFlow(
            context, agent="{AGENTS}:stuck_in_c_after_one_call", timeout=3), progress=False))
        print("episodes", [(t.termination, len(t.steps)) for t in trajs], flush=True)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "episodes [('env_error', 1)]" in done.stdout  # its one call served, then stuck past its timeout
