"""The ``reward`` kind: a reward function in the user's words, with a graded answer (partial credit for a close number)
on the calculator task as the example.

The function has the shape the core calls, ``fn(trajectory, row, **params) -> float``, with its params set in the
config; the example also puts per-episode numbers in ``trajectory.metrics`` (``rel_error``, ``used_tool``), which the
validation results average and the episode logs keep. The named config is the default calculator run with this
reward in place of ``answer_match``.
"""

from __future__ import annotations

from agentr1_core.scaffold.common import CALCULATOR_README, Kind, calculator_rows

COMPONENT = """\"\"\"$Title for agentr1: a reward function, called once per episode.

Called as ``$obj(traj, row, **params)``, it returns the episode reward (added to the last
step); its params come from the config (``reward: {name: $ident, ...}``). An episode whose reward is >= 1.0 counts
as a success, so a reward below 1 can still tell GRPO which of its samples did better. Values it puts in
``traj.metrics`` are averaged in the validation results and kept in the episode logs. ``traj.steps`` holds the
episode's turns (``action_text``, ``info``) and ``traj.termination`` how it ended (``done`` when the env finished
it); ``row`` is the dataset row.
\"\"\"

import re


# EXAMPLE: replace from here to END EXAMPLE with your scoring, keeping the function's name, $obj
# (plugin.py registers it). The example grades a numeric answer: 1.0 exact, ``close`` within ``tolerance``.
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def _number(text):
    try:
        return float(str(text).replace(",", "").strip())
    except ValueError:
        return None


def $obj(traj, row, close: float = 0.5, tolerance: float = 0.01) -> float:
    \"\"\"1.0 for the exact number, ``close`` for a number within ``tolerance`` (relative) of the row's
    ``reward_model.ground_truth``, else 0.0; an episode that did not end with an ``<answer>`` gets 0.0.
    Metrics: ``rel_error`` (capped at 1; 1 without an answer) and ``used_tool`` (1 if any turn called a tool).\"\"\"
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
# END EXAMPLE
"""

CONFIG = """# $Title: SFT on expert episodes, then GRPO (minutes on a 2-core CPU)
# Every episode of the run is scored by the $ident reward. The rows ship in this package (data/).
run_dir: runs/$name
stages: [sft, rl]
data:
  train: {name: jsonl, path: "$${package_data:$package,data/train.jsonl}"}
  val: {name: jsonl, path: "$${package_data:$package,data/val.jsonl}"}
validation: {max_rows: 32}
# EXAMPLE: the example scores the default run's calculator task (base: default: its model, tool env, system prompt
# and sizes); set your task's env, and the reward's params
base: default
reward: {name: $ident, close: 0.5, tolerance: 0.01}
# END EXAMPLE
"""

TESTS = """\"\"\"The $ident reward: registered with the params the config sets, and what it pays.\"\"\"

import math

import pytest

from agentr1_core.config import component
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.plugins import get_registry

from $package.reward import $obj


def test_registered_with_every_param_the_config_sets(config):
    name, params = component(config, "reward")
    assert name == "$ident"
    assert set(params) <= set(get_registry().get("reward", "$ident").parameters())


def test_the_expert_episodes_of_the_held_out_rows_are_paid_at_least_1(config, load_rows, expert_episode):
    params = component(config, "reward")[1]
    for row in load_rows("val")[:8]:
        traj = expert_episode(row)
        assert traj.success() and $obj(traj, row, **params) == pytest.approx(traj.final_reward)


def test_an_empty_or_garbled_episode_is_paid_a_finite_reward_below_1(config, load_rows):
    row, params = load_rows("val")[0], component(config, "reward")[1]
    garbled = Step([1], [2], [0.0], action_text="\\x00<<garbage>> {not json")
    for traj in (Trajectory(steps=[], termination="max_turns"), Trajectory(steps=[garbled], termination="done")):
        reward = $obj(traj, row, **params)
        assert math.isfinite(reward) and reward < 1.0, traj


# EXAMPLE: replace from here to END EXAMPLE with tests of your scoring (these check the example's graded answers,
# its params and its metrics).
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
    assert $obj(episode("<tool_call>...</tool_call>", answer), ROW) == expected


def test_params_and_an_episode_cut_before_its_answer():
    assert $obj(episode("call", "<answer>1005</answer>"), ROW, close=0.2, tolerance=0.01) == 0.2
    assert $obj(episode("call", "<answer>1005</answer>"), ROW, tolerance=0.001) == 0.0
    assert $obj(episode("<answer>1000</answer>", termination="max_turns"), ROW) == 0.0


def test_metrics():
    close = episode("call", "<answer>1005</answer>")
    $obj(close, ROW)
    assert close.metrics["rel_error"] == pytest.approx(0.005) and close.metrics["used_tool"] == 1.0
    guessed = episode("<answer>7</answer>", tool_calls=0)
    assert $obj(guessed, ROW) == 0.0
    assert guessed.metrics["rel_error"] == pytest.approx(0.993) and guessed.metrics["used_tool"] == 0.0


def test_a_row_without_its_ground_truth_stops_the_run_before_the_model_loads(config, load_rows):
    \"\"\"plugin.py declares the field the reward reads (``row_fields``): a run checks every row for it first.\"\"\"
    from agentr1_core.config import ConfigError
    from agentr1_core.preflight import check_rows

    rows = load_rows("val")[:3]
    rows[1] = {k: v for k, v in rows[1].items() if k != "reward_model"}
    with pytest.raises(ConfigError, match="reward_model.ground_truth"):
        check_rows(config, get_registry(), {"data.val": rows})


def test_the_run_pays_nothing_for_a_wrong_answer(load_rows, expert_episode):
    for row in load_rows("val")[:8]:
        traj = expert_episode(row)
        assert traj.metrics["rel_error"] == 0.0 and traj.metrics["used_tool"] == 1.0
    row = load_rows("val")[0]
    wrong = expert_episode(dict(row, expert_actions=[row["expert_actions"][0], "<answer>1</answer>"]))
    assert wrong.final_reward == 0.0 and not wrong.success() and wrong.metrics["rel_error"] > 0.9
# END EXAMPLE
"""

EXAMPLE = """`$package/reward.py` has `$obj(traj, row, close=0.5, tolerance=0.01)`: 1.0 for the exact number,
`close` for a number within `tolerance` (relative) of `reward_model.ground_truth`, else 0.0. It also records
`rel_error` and `used_tool` in `traj.metrics`: the validation line prints their means and the episode logs keep
them. Success is a reward >= 1.0, so a close answer helps GRPO without counting as solved.

$calculator_readme"""

KIND = Kind(kind="reward", component=COMPONENT, config=CONFIG, tests=TESTS, example=EXAMPLE, rows=calculator_rows,
            factory_attr="$ident_reward", row_fields=("reward_model.ground_truth",),
            extra_fields=lambda fields: {"calculator_readme": CALCULATOR_README})
