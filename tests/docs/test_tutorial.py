"""docs/tutorial.md, executed: its ```bash blocks run in order, in a temporary folder, as the tutorial's reader would
type them (``pip install -e ./agentr1-unitconv``, ``agentr1-core run guess``, ...).

So that ``pip install`` does not touch this project's virtualenv, the commands run in a throwaway venv in the
temporary folder whose ``site-packages`` sees the project's through a ``.pth`` file (``site.addsitedir``, so the
project's own ``.pth`` files, its editable installs, are read too); its ``bin`` comes first on PATH and holds
``pip`` and ``agentr1-core`` launchers for its interpreter. pip runs offline (``PIP_NO_INDEX``) and without build
isolation (the build backend, setuptools, comes from the project's venv).

HTML comments right above a block steer the test:

- ``<!-- shrink -->``: a training run. The test appends ``SHRINK`` (a few episodes, one RL iteration, two held-out
  rows, one thread) to each ``agentr1-core run`` line of the block, so the whole tutorial takes a few minutes on 2
  cores; the tutorial's measured numbers come from the same commands without them.
- ``<!-- expect: TEXT -->``: the block's output (stdout and stderr) contains TEXT.
- ``<!-- files: PATH ... -->``: after the block these paths exist in the working folder.

A block that exits non-zero fails the test. At the end, each run's reported success is checked against its
episode files, and the env run's episode rewards against the env's step rewards (the env pays the reward).

The section on a tool's own reward (``ToolResult(text, reward=...)``) also runs on its own, quickly: its block
against the package Part 1 writes, then its tool through whole expert episodes, under both reward rules, to check
what the section says of where the reward goes (the step, the episode's reward and success, the return).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from agentr1_core.components import build_reward_fn
from agentr1_core.envs import ToolEnv
from agentr1_core.flows import AgentEnvLoop, FlowContext
from agentr1_core.lifecycle.metrics import episode_record
from agentr1_core.plugins import get_registry
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.scaffold import write_plugin
from agentr1_core.trainers.metrics import rollout_metrics

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"
# One thread: tiny batches gain nothing from a second one, and on a busy runner two OpenMP threads cost dearly (a
# shrunk run took 222 s with two, 58 s with one, next to other jobs).
SHRINK = ["sft.rows=4", "trainer.total_steps=1", "validation.max_rows=2", "rollout.batch_size=2", "rollout.n=2",
          "trainer.threads=1"]
_MARKER = re.compile(r"^<!--\s*(shrink|expect|files)\s*(?::\s*(.*?))?\s*-->$")


@dataclass
class Block:
    line: int  # where the block starts in the tutorial (1-based), for messages
    script: str
    section: str = ""  # the heading it is under, without its #s
    shrink: bool = False
    expect: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def bash_blocks(text: str) -> list[Block]:
    """The ```bash blocks of ``text`` in order, with the markers on the lines right above each."""
    lines = text.splitlines()
    blocks, i, section = [], 0, ""
    while i < len(lines):
        fence = lines[i].strip()
        if not fence.startswith("```"):
            if lines[i].startswith("#"):
                section = lines[i].lstrip("#").strip()
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        assert end is not None, f"tutorial line {i + 1}: a code block is not closed"
        if lines[i] == "```bash":
            block = Block(line=i + 1, script="\n".join(lines[i + 1:end]) + "\n", section=section)
            k = i - 1
            while k >= 0 and _MARKER.match(lines[k].strip()):
                kind, value = _MARKER.match(lines[k].strip()).groups()
                if kind == "shrink":
                    block.shrink = True
                elif kind == "expect":
                    block.expect.append(value)
                else:
                    block.files.extend(value.split())
                k -= 1
            blocks.append(block)
        i = end + 1
    return blocks


def shrunk(script: str) -> str:
    return "\n".join(line + " " + " ".join(SHRINK) if line.startswith("agentr1-core run ") else line
                     for line in script.splitlines()) + "\n"


def throwaway_venv(root: Path) -> Path:
    """A venv at ``root`` that sees this interpreter's site-packages, with ``pip`` and ``agentr1-core`` in bin."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    python = root / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    base = sysconfig.get_paths()["purelib"]
    Path(purelib, "agentr1_base.pth").write_text(f"import site; site.addsitedir({base!r})\n", encoding="utf-8")
    launchers = {"pip": f'#!/bin/sh\nexec "{python}" -m pip "$@"\n',
                 "agentr1-core": f"#!{python}\nimport sys\nfrom agentr1_core.cli import entry\nsys.exit(entry())\n"}
    for name, text in launchers.items():
        path = root / "bin" / name
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)
    return root / "bin"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def check_reported_success(run_dir: Path, env_paid: bool) -> None:
    """summary.json's success per validation equals the share of episodes in episodes/<label>.jsonl whose reward is
    >= 1; with ``env_paid``, each episode's reward is the sum of its step rewards and only a found number pays."""
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    assert set(summary["validation"]) == {"before_sft", "after_sft", "after_rl"}
    for label, result in summary["validation"].items():
        episodes = read_jsonl(run_dir / "episodes" / f"{label}.jsonl")
        assert len(episodes) == result["cases"] == 2, (label, result)
        wins = sum(ep["reward"] >= 1.0 for ep in episodes)
        assert result["success_rate"] == pytest.approx(wins / len(episodes)), (label, result, episodes)
        if env_paid:
            for ep in episodes:
                assert ep["reward"] == pytest.approx(sum(step["reward"] for step in ep["steps"])), ep
                found = bool(ep["steps"]) and ep["steps"][-1]["feedback"].endswith("is correct")
                assert (ep["reward"] >= 1.0) == found == (ep["termination"] == "done"), ep


@pytest.mark.slow
def test_the_tutorial_runs_as_written(tmp_path):
    blocks = bash_blocks(TUTORIAL.read_text(encoding="utf-8"))
    assert sum(b.shrink for b in blocks) == 2 and any(b.files for b in blocks)
    work = tmp_path / "work"
    work.mkdir()
    bin_dir = throwaway_venv(tmp_path / "venv")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
               VIRTUAL_ENV=str(bin_dir.parent), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_BUILD_ISOLATION="0")  # pip reads "0" here as: do not isolate the build
    env.pop("PYTHONHOME", None)
    timings = []
    for block in blocks:
        script = shrunk(block.script) if block.shrink else block.script
        started = time.perf_counter()
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
        timings.append((block.line, round(time.perf_counter() - started, 1)))
        where = f"tutorial line {block.line}:\n{script}\n--- output (tail) ---\n{done.stdout[-4000:]}"
        assert done.returncode == 0, where
        for text in block.expect:
            assert text in done.stdout, f"expected {text!r}; {where}"
        missing = [f for f in block.files if not (work / f).exists()]
        assert not missing, f"missing after the block: {missing}; {where}"
    print("seconds per block (tutorial line, seconds):", timings)
    assert (work / "runs" / "unitconv" / "curves.png").stat().st_size > 0
    check_reported_success(work / "runs" / "unitconv", env_paid=False)
    check_reported_success(work / "runs" / "guess", env_paid=True)
    config = yaml.safe_load((work / "runs" / "guess" / "config.yaml").read_text(encoding="utf-8"))
    assert config["reward"] is None and config["sft"]["rows"] == 4  # the env pays; the run was shrunk


def test_blocks_and_markers_are_read_as_documented():
    text = ("intro\n```bash\necho one\n```\n### Two\n<!-- shrink -->\n<!-- expect: held-out -->\n"
            "<!-- files: a/b c -->\n```bash\nagentr1-core run x\necho two\n```\n```text\n```bash\n```\n"
            "  ```python\n# not a heading\nprint()\n  ```\n")
    first, second = bash_blocks(text)
    assert (first.script, first.shrink, first.expect, first.files, first.section) == ("echo one\n", False, [], [], "")
    assert second.shrink and second.expect == ["held-out"] and second.files == ["a/b", "c"]
    assert second.section == "Two"
    assert shrunk(second.script) == f"agentr1-core run x {' '.join(SHRINK)}\necho two\n"


REWARD_SECTION = "A reward from the tool"


def heredoc(script: str) -> str:
    """The Python of a block's ``python - <<'EOF'`` heredoc."""
    return script.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]


def test_the_tool_reward_section_runs_and_its_reward_reaches_the_step_the_episode_and_the_return(
        tmp_path, monkeypatch, capsys, smol_tokenizer):
    (block,) = [b for b in bash_blocks(TUTORIAL.read_text(encoding="utf-8")) if b.section == REWARD_SECTION]
    assert block.expect
    package = write_plugin("unitconv", "tool", tmp_path)  # what Part 1 wrote, importable from its folder
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join([str(package), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.script], cwd=tmp_path, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert done.returncode == 0, done.stdout
    for text in block.expect:
        assert text in done.stdout, (text, done.stdout)

    # the section's tool, through whole episodes: a held-out row of the package played by its expert
    monkeypatch.syspath_prepend(str(package))
    namespace: dict = {}
    exec(compile(heredoc(block.script), "tutorial", "exec"), namespace)
    capsys.readouterr()
    paying = namespace["PayingUnitconvTool"]
    row = json.loads((package / "agentr1_unitconv" / "data" / "val.jsonl").read_text().splitlines()[0])

    class Loop(AgentEnvLoop):
        def make_env(self, row):
            return ToolEnv(tools=[paying()], max_turns=3)

    def episode(reward_fn):
        ctx = FlowContext(engine=None, tokenizer=smol_tokenizer, sampling=SamplingParams(), reward_fn=reward_fn,
                          max_turns=3, max_prompt_tokens=1024, policy="expert")
        return asyncio.run(Loop(ctx).run(row))

    env_paid = episode(None)  # reward: null: the episode's reward is the sum of its step rewards
    assert [s.reward for s in env_paid.steps] == [0.1, 0.0] and env_paid.termination == "done"
    assert env_paid.final_reward == pytest.approx(0.1) and not env_paid.success()
    record = episode_record(env_paid)
    assert [s["reward"] for s in record["steps"]] == [0.1, 0.0] and record["reward"] == pytest.approx(0.1)
    answer_match = build_reward_fn(OmegaConf.create({"reward": {"name": "answer_match"}}), get_registry())
    graded = episode(answer_match)  # a reward function: the episode's reward is its result; the return has both
    assert [s.reward for s in graded.steps] == [0.1, 1.0]
    assert graded.final_reward == 1.0 and graded.success() and graded.total_reward == pytest.approx(1.1)
    metrics = rollout_metrics([graded], 1.0)
    assert metrics["reward_mean"] == 1.0 and metrics["return_mean"] == pytest.approx(1.1)
