"""The ``flow`` kind: an ``AgentEnvLoop`` subclass (constructor ``(ctx, **params)``) in the user's words, trained on
the calculator task.

The example flow runs the generic env loop, records per-episode metrics (``tool_calls``, ``answered``) and, with
``require_tool``, scores an answer given without any tool call as 0 by wrapping the configured reward function:
the two things a flow most often adds (what to log, what an episode is worth). The named config is the default
calculator run with this flow in place of ``agent_env_loop``.
"""

from __future__ import annotations

from agentr1_core.scaffold.common import CALCULATOR_README, Kind, calculator_rows

COMPONENT = """\"\"\"$Title for agentr1: an agent flow, which turns one dataset row into one ``Trajectory``.

A flow is built once per episode as ``$cls(ctx, **params)``: the params come from the config
(``agent_flow: {name: $ident, ...}``), ``ctx`` (a ``FlowContext``) holds the engine, tokenizer, sampling settings,
env config and reward function. ``AgentEnvLoop`` builds the env, then alternates the model's turn (``self.act``)
and ``env.step`` until the episode ends, and ``self.finish`` sets the episode reward; subclass ``AgentFlowBase``
instead (``async run(row) -> Trajectory``) to write the whole episode yourself.
\"\"\"

import dataclasses

from agentr1_core.flows import AgentEnvLoop


class $cls(AgentEnvLoop):
    # EXAMPLE: replace from here to END EXAMPLE (the class's body and the helper after it) with your flow's. The
    # example records ``tool_calls`` and ``answered`` in ``traj.metrics`` (the validation line prints their means)
    # and, with ``require_tool``, scores an episode that made no tool call as 0.
    def __init__(self, ctx, max_turns: int | None = None, require_tool: bool = True) -> None:
        if require_tool and ctx.reward_fn is not None:
            reward_fn = ctx.reward_fn

            def checked(traj, row):
                return reward_fn(traj, row) if tool_calls(traj) > 0 else 0.0

            ctx = dataclasses.replace(ctx, reward_fn=checked)
        super().__init__(ctx, max_turns)
        self.require_tool = require_tool

    async def run(self, row):
        traj = await super().run(row)  # the env loop, then finish(): the episode reward
        traj.metrics["tool_calls"] = float(tool_calls(traj))
        last = traj.steps[-1].action_text if traj.steps else ""
        traj.metrics["answered"] = float(traj.termination == "done" and "<answer>" in last)
        return traj


def tool_calls(traj):
    \"\"\"How many tool calls the episode made (``ToolEnv`` counts them per step).\"\"\"
    return sum(int(step.info.get("tool_calls", 0)) for step in traj.steps)
# END EXAMPLE
"""

CONFIG = """# $Title: SFT on expert episodes, then GRPO (minutes on a 2-core CPU)
# Every episode of the run is played by the $ident flow. The rows ship in this package (data/).
run_dir: runs/$name
stages: [sft, rl]
data:
  train: {name: jsonl, path: "$${package_data:$package,data/train.jsonl}"}
  val: {name: jsonl, path: "$${package_data:$package,data/val.jsonl}"}
validation: {max_rows: 32}
# EXAMPLE: the example plays the default run's calculator task (base: default: its model, tool env, reward and
# sizes) with the flow's rule on tool use; set your task's env and reward, and the flow's params
base: default
agent_flow: {name: $ident, require_tool: true}
# END EXAMPLE
"""

TESTS = """\"\"\"The $ident flow: built with the params the config sets, and the expert's episodes through it.\"\"\"

from agentr1_core.config import component, load_config
from agentr1_core.flows import AgentFlowBase
from agentr1_core.plugins import get_registry

from $package.flow import $cls


def test_a_flow_registered_with_every_param_the_config_sets(config):
    assert issubclass($cls, AgentFlowBase)
    name, params = component(config, "agent_flow")
    assert name == "$ident"
    assert set(params) <= set(get_registry().get("agent_flow", "$ident").parameters())


def test_the_expert_episodes_through_the_flow_keep_their_steps(load_rows, expert_episode):
    for row in load_rows("val")[:8]:
        traj = expert_episode(row)
        assert traj.success() and [s.action_text for s in traj.steps] == row["expert_actions"]


# EXAMPLE: replace from here to END EXAMPLE with tests of your flow's own work (these check the example's metrics,
# its rule on tool use and an episode cut before its answer).
def test_expert_episodes_call_the_tool_and_report_metrics(load_rows, expert_episode):
    for row in load_rows("val")[:8]:
        traj = expert_episode(row)
        assert traj.final_reward == 1.0
        assert traj.metrics["tool_calls"] == 1.0 and traj.metrics["answered"] == 1.0


def test_an_answer_without_a_tool_call_earns_nothing_unless_allowed(load_rows, expert_episode):
    row = load_rows("val")[0]
    guessed = dict(row, expert_actions=[row["expert_actions"][-1]])  # the right answer, no calculator call
    traj = expert_episode(guessed)
    assert traj.termination == "done" and traj.metrics["tool_calls"] == 0.0
    assert traj.final_reward == 0.0 and not traj.success()
    allowed = load_config("$name", ["agent_flow.require_tool=false"])
    assert expert_episode(guessed, allowed).final_reward == 1.0


def test_an_episode_cut_before_its_answer(load_rows, expert_episode):
    row = load_rows("val")[0]
    calls_only = dict(row, expert_actions=[row["expert_actions"][0]] * 5)
    traj = expert_episode(calls_only)
    assert traj.termination in ("truncated", "max_turns") and traj.metrics["answered"] == 0.0
    assert traj.final_reward == 0.0
# END EXAMPLE
"""

EXAMPLE = """`$package/flow.py` has `$cls`, an `AgentEnvLoop` subclass built per episode as `$cls(ctx, **params)`.
It runs the env loop, records `tool_calls` and `answered` in `traj.metrics` (the validation line prints their
means, the episode logs keep them) and, with `require_tool: true`, scores an answer given without any tool call
as 0 by wrapping the configured reward function.

$calculator_readme"""

KIND = Kind(kind="flow", component=COMPONENT, config=CONFIG, tests=TESTS, example=EXAMPLE, rows=calculator_rows,
            registry_kind="agent_flow",
            extra_fields=lambda fields: {"calculator_readme": CALCULATOR_README})
