"""A user's own env and tools, installed as a real distribution and run through the installed CLI: the episode's
reward when the env pays it, SFT on a custom env's rows, tool errors in expert demonstrations, a blocking tool's
timeout, the traceback of an env error, and ``--resume`` against the run's saved config.

The model is a tiny random Llama with the real SmolLM2 tokenizer: these tests check what is reported, not what is
learnt (the env pays for any action, and the SFT stage only replays the rows' demonstrations)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf

IMPL = '''
import time

from agentr1_core.envs import AgentEnv
from agentr1_core.mdp import Observation, StepResult
from agentr1_core.tools import BaseTool


class PaysEnv(AgentEnv):
    """Pays 1.0 for any action; raises in step for a row with env_kwargs {crash: true}. No expert code of its own."""

    def __init__(self, crash: bool = False, max_turns: int = 2):
        self.crash = crash

    async def reset(self, row):
        self.task = str(row["prompt"])
        return Observation(messages=[{"role": "user", "content": self.task}])

    async def step(self, action):
        if self.crash:
            scores = {}
            return StepResult(observation=None, reward=scores["scoreboard missing"])
        return StepResult(observation=None, reward=1.0, done=True, feedback="correct")


class SleepyTool(BaseTool):
    name = "sleepy"
    description = "Blocks the thread (a synchronous client inside async code)."
    timeout = 0.5

    async def execute(self):
        time.sleep(3)
        return "woke up"


class NothingTool(BaseTool):
    name = "nothing"
    description = "Returns None."

    async def execute(self):
        return None


class MappingTool(BaseTool):
    name = "mapping"
    description = "Returns a dict instead of a string."

    def execute(self):
        return {"answer": 42}


class BoomTool(BaseTool):
    name = "boom"
    description = "Raises."

    async def execute(self):
        raise RuntimeError("tool exploded")
'''

PLUGIN = '''
from agentr1_core import EnvSpec, ToolSpec, hookimpl


@hookimpl
def agentr1_envs():
    return [EnvSpec("pays", "ownpkg_impl:PaysEnv", "pays 1.0 for any action")]


@hookimpl
def agentr1_tools():
    return [ToolSpec(n, f"ownpkg_impl:{c}", n) for n, c in
            (("sleepy", "SleepyTool"), ("nothing", "NothingTool"), ("mapping", "MappingTool"), ("boom", "BoomTool"))]
'''

PYPROJECT = '''
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"
[project]
name = "agentr1-ownpkg"
version = "0.1.0"
[project.entry-points.agentr1]
ownpkg = "ownpkg_plugin"
[tool.setuptools]
py-modules = ["ownpkg_plugin", "ownpkg_impl"]
'''


def _call(name: str) -> str:
    return f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>'


@pytest.fixture(scope="module")
def own_site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ownpkg")
    src = root / "agentr1-ownpkg"
    src.mkdir()
    (src / "pyproject.toml").write_text(PYPROJECT)
    (src / "ownpkg_impl.py").write_text(textwrap.dedent(IMPL))
    (src / "ownpkg_plugin.py").write_text(textwrap.dedent(PLUGIN))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(root / "site"), str(src)], check=True, timeout=300)
    return root / "site"


def _rows(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def agentr1(own_site, tmp_path):
    """``agentr1(*args)``: the installed CLI with the user's distribution importable, run in ``tmp_path``."""

    def run(*args: str) -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(own_site), os.environ.get("PYTHONPATH", "")]))
        return subprocess.run([sys.executable, "-m", "agentr1_core.cli", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=600)

    return run


def _pays_config(tmp_path: Path, model: str, expert: bool = True) -> Path:
    train = [{"prompt": f"Say something about {i}.", "data_source": "own",
              **({"expert_actions": [f"Something about {i}."]} if expert else {})} for i in range(4)]
    val = [{"prompt": "Say yes.", "data_source": "own"},
           {"prompt": "Say no.", "data_source": "own", "env_kwargs": {"crash": True}}]
    config = {
        "base": "tiny", "model": {"path": model}, "stages": ["sft", "rl"],
        "env": {"name": "pays"}, "reward": None,
        "data": {"train": {"name": "jsonl", "path": _rows(tmp_path / "train.jsonl", train)},
                 "val": {"name": "jsonl", "path": _rows(tmp_path / "val.jsonl", val)}},
        "rollout": {"max_new_tokens": 8}, "sft": {"rows": 4},
    }
    path = tmp_path / "pays.yaml"
    path.write_text(OmegaConf.to_yaml(config))
    return path


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_env_paid_reward_sft_on_custom_rows_and_env_error_traceback(agentr1, tmp_path, tiny_model_dir):
    run_dir = tmp_path / "runs" / "pays"
    done = agentr1("run", str(_pays_config(tmp_path, tiny_model_dir)), f"run_dir={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    records = _records(run_dir)
    # the env pays 1.0 for any action: every episode that did not crash succeeded, and the numbers say so
    validations = {r["label"]: r for r in records if r.get("event") == "validation"}
    assert set(validations) == {"before_sft", "after_sft", "after_rl"}
    for v in validations.values():
        assert v["success_rate"] == 0.5 and v["reward_mean"] == 0.5 and v["terminations"] == {"done": 1,
                                                                                            "env_error": 1}
    iteration = next(r for r in records if r.get("iteration") == 1 and "event" not in r)
    assert iteration["success_rate"] == 1.0 and iteration["reward_mean"] == 1.0 == iteration["return_mean"]
    episodes = [json.loads(x) for x in (run_dir / "episodes" / "after_rl.jsonl").read_text().splitlines()]
    paid = next(e for e in episodes if e["termination"] == "done")
    assert paid["reward"] == 1.0 and paid["success"] is True and paid["steps"][0]["feedback"] == "correct"
    # SFT learnt from the rows' expert_actions although the env has no expert code
    sft = next(r for r in records if r.get("event") == "sft")
    assert sft["sft_steps"] == 4 and sft["expert_success_rate"] == 1.0 and sft["optimizer_steps"] >= 1
    # an env error: its full traceback, down to the user's own line, in errors.log and in the episode record
    crashed = next(e for e in episodes if e["termination"] == "env_error")
    assert 'scores["scoreboard missing"]' in crashed["error"] and "ownpkg_impl.py" in crashed["error"]
    log = (run_dir / "errors.log").read_text()
    assert log.count("KeyError: 'scoreboard missing'") == 1 and "in step" in log  # logged once, not per episode
    assert f"traceback in {run_dir / 'errors.log'}" in done.stdout


@pytest.mark.slow
def test_sft_without_any_expert_step_stops_with_exit_2(agentr1, tmp_path, tiny_model_dir):
    run_dir = tmp_path / "runs" / "noexpert"
    done = agentr1("run", str(_pays_config(tmp_path, tiny_model_dir, expert=False)), f"run_dir={run_dir}",
                   "validation.before=false")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "sft: the expert produced no steps in 4 episodes" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_tool_errors_in_expert_demonstrations_are_counted_and_a_blocking_tool_times_out(agentr1, tmp_path,
                                                                                         tiny_model_dir):
    names = ["sleepy", "nothing", "mapping", "boom"]
    train = [{"prompt": f"Use the {name} tool.", "data_source": "own",
              "expert_actions": [_call(name), "<answer>done</answer>"]} for name in names]
    config = {"base": "tiny", "model": {"path": tiny_model_dir}, "stages": ["sft"], "reward": None,
              "env": {"tools": names}, "validation": {"before": False},
              "data": {"train": {"name": "jsonl", "path": _rows(tmp_path / "tools.jsonl", train)}, "val": None},
              "sft": {"rows": 4}}
    path = tmp_path / "tools.yaml"
    path.write_text(OmegaConf.to_yaml(config))
    run_dir = tmp_path / "runs" / "tools"
    done = agentr1("run", str(path), f"run_dir={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    sft = next(r for r in _records(run_dir) if r.get("event") == "sft")
    # the blocking tool hit its 0.5 s timeout (it sleeps 3 s), None is an error, a dict is flagged
    assert sft["expert_tool_errors"] == {"timeout": 1, "bad_output": 1, "non_string_output": 1, "exception": 1}
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("[sft]"))
    assert "tool errors bad_output:1,exception:1,non_string_output:1,timeout:1" in line


@pytest.mark.slow
def test_resume_uses_the_saved_config_and_refuses_another(agentr1, tmp_path, tiny_model_dir):
    config = _pays_config(tmp_path, tiny_model_dir)
    run_dir = tmp_path / "runs" / "resume"
    first = agentr1("run", str(config), f"run_dir={run_dir}", "stages=[rl]", "trainer.total_steps=2",
                    "trainer.checkpoint_every=1", "validation.before=false")
    assert first.returncode == 0, first.stderr[-3000:]
    summary = (run_dir / "summary.json").read_text()

    other = agentr1("run", "tiny", f"run_dir={run_dir}", f"model.path={tiny_model_dir}", "--resume")
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert "differs from the run's saved" in other.stderr and "env.name (saved 'pays', now 'tool_env')" in \
        other.stderr
    assert (run_dir / "summary.json").read_text() == summary  # nothing of the run was touched

    # an interrupted run (its last checkpoint gone) resumed without repeating trainer.total_steps=2 ends at 2
    last = sorted((run_dir / "checkpoints").iterdir())[-1]
    assert last.name == "step_000002"
    subprocess.run(["rm", "-rf", str(last)], check=True)
    again = agentr1("run", str(config), f"run_dir={run_dir}", "stages=[rl]", "trainer.checkpoint_every=1",
                    "validation.before=false", "--resume")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "[resume] trainer.total_steps: keeping the run's 2 (the config given says 1)" in again.stdout
    assert json.loads((run_dir / "summary.json").read_text())["iterations"] == 2

    # the run directory stands for its own config; a longer run is an allowed, logged change
    longer = agentr1("run", str(run_dir), "trainer.total_steps=3", "--resume")
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert "[resume] trainer.total_steps: 2 -> 3 (from the command line)" in longer.stdout
    assert json.loads((run_dir / "summary.json").read_text())["iterations"] == 3


def test_small_mistakes_get_clear_lines_and_leave_no_trace(agentr1, tmp_path):
    refused = agentr1("run", "tiny", f"run_dir={tmp_path / 'new' / 'deeper'}", "env.name=no_such_env")
    assert refused.returncode == 2 and "no_such_env" in refused.stderr
    assert not (tmp_path / "new").exists()  # a refused run creates no run directory

    plot = agentr1("plot", str(tmp_path / "missing"))
    assert plot.returncode == 2 and "run directory not found" in plot.stderr
    (tmp_path / "empty").mkdir()
    evaluated = agentr1("eval", str(tmp_path / "empty"))
    assert evaluated.returncode == 2 and "without a saved config.yaml, so not a run directory" in evaluated.stderr

    helped = agentr1("run", "--help")
    assert helped.returncode == 0 and "key.path=value" in helped.stdout and "--resume" in helped.stdout
