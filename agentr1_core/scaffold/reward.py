"""The ``reward`` kind: a reward function (graded answer: partial credit for a close number) on the calculator task.

The function has the shape the core calls, ``fn(trajectory, row, **params) -> float``, with its params set in the
config; it also puts per-episode numbers in ``trajectory.metrics`` (``rel_error``, ``used_tool``), which the
validation results average and the episode logs keep. The named config is the default calculator run with this
reward in place of ``answer_match``.
"""

from __future__ import annotations

from agentr1_core.scaffold.common import CALCULATOR_README, Kind, calculator_rows

COMPONENT = '''"""$Title: a graded answer reward. An example: replace ``graded_answer`` with your scoring.

A reward function is called once per episode as ``fn(trajectory, row, **params)``, its params from the config
(``reward: {name: $ident, close: 0.5}``), and returns the episode reward, which goes on the last step; an episode
whose reward is >= 1.0 counts as a success. The numbers it puts in ``trajectory.metrics`` are averaged in the
validation results and kept in the episode logs.
"""

import re

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def _number(text):
    try:
        return float(str(text).replace(",", "").strip())
    except ValueError:
        return None


def graded_answer(traj, row, close: float = 0.5, tolerance: float = 0.01) -> float:
    """1.0 for the exact number, ``close`` for a number within ``tolerance`` (relative) of the row's
    ``reward_model.ground_truth``, else 0.0; an episode that did not end with an ``<answer>`` gets 0.0.
    Metrics: ``rel_error`` (capped at 1; 1 without an answer) and ``used_tool`` (1 if any turn called a tool)."""
    truth = _number((row.get("reward_model") or {}).get("ground_truth"))
    last = traj.steps[-1].action_text if traj.steps and traj.termination == "done" else ""
    tagged = _ANSWER.findall(last)
    answer = _number(tagged[-1]) if tagged else None
    if answer is None or truth is None:
        error = 1.0
    else:
        error = min(1.0, abs(answer - truth) / max(abs(truth), 1e-9))
    traj.metrics["rel_error"] = error
    traj.metrics["used_tool"] = float(any(step.info.get("tool_calls") for step in traj.steps))
    if error < 1e-9:
        return 1.0
    return close if error <= tolerance else 0.0
'''

CONFIG = '''# The calculator task scored by the $ident reward (partial credit for a close number): SFT, then GRPO
# The default run (base: default) with this reward in place of answer_match and the rows shipped in this package.
base: default
run_dir: runs/$name
reward: {name: $ident, close: 0.5, tolerance: 0.01}
data:
  train: {name: jsonl, path: "$${package_data:$package,data/train.jsonl}"}
  val: {name: jsonl, path: "$${package_data:$package,data/val.jsonl}"}
validation: {max_rows: 32}
'''

TESTS = '''"""The $ident reward: exact, close, wrong and missing answers, its metrics, and the expert's episodes."""

import pytest

from agentr1_core.mdp import Step, Trajectory
from agentr1_core.plugins import get_registry

from $package.reward import graded_answer

ROW = {"prompt": "What is 10 * 100?", "reward_model": {"ground_truth": "1000"}}


def episode(*actions, termination="done", tool_calls=1):
    steps = [Step([1], [2], [0.0], action_text=text) for text in actions]
    steps[0].info["tool_calls"] = tool_calls
    return Trajectory(steps=steps, termination=termination)


@pytest.mark.parametrize("answer,expected", [
    ("<answer>1000</answer>", 1.0), ("<answer>1,000</answer>", 1.0), ("<answer>1005</answer>", 0.5),
    ("<answer>2000</answer>", 0.0), ("<answer>a lot</answer>", 0.0), ("1000", 0.0),
])
def test_exact_close_wrong_and_missing_answers(answer, expected):
    assert graded_answer(episode("<tool_call>...</tool_call>", answer), ROW) == expected


def test_params_and_an_episode_cut_before_its_answer():
    assert graded_answer(episode("call", "<answer>1005</answer>"), ROW, close=0.2, tolerance=0.01) == 0.2
    assert graded_answer(episode("call", "<answer>1005</answer>"), ROW, tolerance=0.001) == 0.0
    assert graded_answer(episode("<answer>1000</answer>", termination="max_turns"), ROW) == 0.0
    params = get_registry().get("reward", "$ident").parameters()
    assert {"close", "tolerance"} <= set(params)


def test_metrics():
    close = episode("call", "<answer>1005</answer>")
    graded_answer(close, ROW)
    assert close.metrics["rel_error"] == pytest.approx(0.005) and close.metrics["used_tool"] == 1.0
    guessed = episode("<answer>7</answer>", tool_calls=0)
    assert graded_answer(guessed, ROW) == 0.0
    assert guessed.metrics["rel_error"] == pytest.approx(0.993) and guessed.metrics["used_tool"] == 0.0


def test_the_run_scores_expert_episodes_with_this_reward(load_rows, expert_episode):
    for row in load_rows("val")[:8]:
        traj = expert_episode(row)
        assert traj.final_reward == 1.0 and traj.metrics["rel_error"] == 0.0 and traj.metrics["used_tool"] == 1.0
    row = load_rows("val")[0]
    wrong = expert_episode(dict(row, expert_actions=[row["expert_actions"][0], "<answer>1</answer>"]))
    assert wrong.final_reward == 0.0 and not wrong.success() and wrong.metrics["rel_error"] > 0.9
'''

README = '''## The task

`$package/reward.py` has `graded_answer(traj, row, close=0.5, tolerance=0.01)`: 1.0 for the exact number,
`close` for a number within `tolerance` (relative) of `reward_model.ground_truth`, else 0.0. It also records
`rel_error` and `used_tool` in `traj.metrics`: the validation line prints their means and the episode logs keep
them. Success is a reward >= 1.0, so a close answer helps GRPO without counting as solved.

$calculator_readme'''

KIND = Kind(kind="reward", component=COMPONENT, config=CONFIG, tests=TESTS, readme=README, rows=calculator_rows,
            factory_attr="graded_answer",
            extra_fields=lambda fields: {"calculator_readme": CALCULATOR_README},
            description="A graded answer reward: partial credit for a close number, with per-episode metrics")
