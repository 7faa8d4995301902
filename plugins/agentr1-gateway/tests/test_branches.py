"""Episodes whose harness rewrites its history: each call is linked, on token ids, to the call it continues or the
call it branched from (``agentr1_gateway.branches``), first over plain id lists (a chain, a compaction half-way, a
subagent, parallel calls), then through the real gateway and flow with the expert policy (an agent that compacts its
history, an agent that calls a subagent), down to the training rows and GRPO advantages of such episodes, and the
``branch_rewards: per_branch`` setting."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentr1_core.algorithms.advantages import grpo_advantages
from agentr1_core.builtin.rewards import AnswerMatch
from agentr1_core.flows import FlowContext
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.trainers.batching import build_step_batch, trajectories_to_rows
from agentr1_gateway.branches import Link, common_prefix, link_calls
from agentr1_gateway.examples.calculator_agent import SYSTEM
from agentr1_gateway.flow import OpenAIAgentFlow

AGENTS = Path(__file__).with_name("branch_agents.py")
FUNCTIONS = Path(__file__).with_name("agent_functions.py")


def calc(expression: str) -> str:
    return f'<tool_call>{{"name": "calculator", "arguments": {{"expression": "{expression}"}}}}</tool_call>'


# -- links over id lists ------------------------------------------------------------------------------------------
SYS, HELPER = [1, 2, 3, 4], [1, 9, 8]


def test_a_chain_continues_one_branch():
    calls = [(SYS + [10], [20]), (SYS + [10, 20, 11], [21]), (SYS + [10, 20, 11, 21, 12], [22])]
    assert link_calls(calls) == [Link(None, 0), Link(0, 0), Link(1, 0)]


def test_a_compaction_half_way_starts_a_branch_from_the_latest_step_it_shares_the_most_with():
    first, second = (SYS + [10], [20]), (SYS + [10, 20, 11], [21])
    compacted = (SYS + [30, 31], [23])  # the system prompt, then a summary instead of the turns
    after = (SYS + [30, 31, 23, 13], [24])
    assert link_calls([first, second, compacted, after]) == [
        Link(None, 0), Link(0, 0), Link(None, 1, branch_of=1, shared_prefix_tokens=len(SYS)), Link(2, 1)]


def test_the_main_agent_goes_on_with_its_own_branch_after_a_subagent():
    main = (SYS + [10], [20])  # asks the subagent
    sub = [(HELPER + [40], [41]), (HELPER + [40, 41, 42], [43])]
    main_again = (SYS + [10, 20, 44], [45])  # the subagent's answer as a tool result
    second_sub = (HELPER + [50], [51])  # another subagent later: its prefix is the helper's system prompt
    links = link_calls([main, *sub, main_again, second_sub])
    assert links == [Link(None, 0), Link(None, 1, branch_of=0, shared_prefix_tokens=1), Link(1, 1), Link(0, 0),
                     Link(None, 2, branch_of=2, shared_prefix_tokens=len(HELPER))]


def test_parallel_calls_from_one_prefix():
    # two first calls that differ after a shared prefix: the second branches from the first
    assert link_calls([(SYS + [7], [20]), (SYS + [8], [21])]) == [
        Link(None, 0), Link(None, 1, branch_of=0, shared_prefix_tokens=len(SYS))]
    # two calls that both continue one reply: the first to arrive keeps the branch, the other forks from it
    root = (SYS + [10], [20])
    a, b = (SYS + [10, 20, 11], [21]), (SYS + [10, 20, 12], [22])
    a_next, b_next = (SYS + [10, 20, 11, 21, 13], [23]), (SYS + [10, 20, 12, 22, 14], [24])
    assert link_calls([root, a, b, b_next, a_next]) == [
        Link(None, 0), Link(0, 0), Link(None, 1, branch_of=0, shared_prefix_tokens=len(SYS) + 2), Link(2, 1),
        Link(1, 0)]


def test_nothing_shared_and_identical_retries():
    assert link_calls([([1], [2]), ([5], [6])]) == [Link(None, 0), Link(None, 1, branch_of=0, shared_prefix_tokens=0)]
    # the same prompt sent twice (a retry) is a second branch sharing the whole prompt
    assert link_calls([([1, 2], [3]), ([1, 2], [4])])[1] == Link(None, 1, branch_of=0, shared_prefix_tokens=2)


@pytest.mark.parametrize("n,cut", [(0, 0), (5, 5), (600, 0), (600, 255), (600, 256), (600, 599), (600, 600)])
def test_common_prefix_finds_the_first_difference(n, cut):
    a = list(range(n))
    b = a[:cut] + [-1] * (n - cut)
    assert common_prefix(a, b) == cut and common_prefix(a, a[:cut]) == cut


# -- through the gateway and the flow -----------------------------------------------------------------------------
class Recording(OpenAIAgentFlow):
    """The flow, keeping every prompt the policy was given and every action it returned."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.seen = []

    async def _respond(self, prompt_ids, sampling, expert):
        action = await super()._respond(prompt_ids, sampling, expert)
        self.seen.append((list(prompt_ids), list(action.token_ids), list(action.logprobs)))
        return action


def expert_run(tokenizer, agent, row, **params):
    ctx = FlowContext(engine=None, tokenizer=tokenizer, sampling=SamplingParams(max_new_tokens=48),
                      reward_fn=AnswerMatch(), max_turns=6, policy="expert")
    flow = Recording(ctx, agent=f"{AGENTS}:{agent}", **params)
    traj = asyncio.run(flow.run(row))
    return traj, flow.seen


def check_ids(traj, seen):
    """Every step holds exactly the prompt ids the policy was given and the ids and log-probs it returned."""
    assert [(s.prompt_ids, s.response_ids, s.response_logprobs) for s in traj.steps] == seen


def links_of(traj):
    return [(s.info["parent"], s.info["branch"], s.info.get("branch_of")) for s in traj.steps]


def step_advantages(trajs):
    """GRPO's advantage of every step, per trajectory, from the training rows the trainer builds."""
    rows = trajectories_to_rows(trajs).rows
    adv = grpo_advantages(build_step_batch(rows)).advantages[:, 0]
    out = [[] for _ in trajs]
    for row, value in zip(rows, adv.tolist()):
        out[row.traj].append(value)
    return rows, out


COMPACT_ROW = {"prompt": "What is (2+3)*4-1?", "reward_model": {"ground_truth": "19"},
               "expert_actions": [calc("2+3"), calc("5*4"), calc("20-1"), "<answer>19</answer>"]}


def test_an_agent_that_compacts_its_history_half_way(tokenizer):
    traj, seen = expert_run(tokenizer, "compacting", COMPACT_ROW)
    assert traj.termination == "done" and traj.final_reward == 1.0 and len(traj.steps) == 4
    check_ids(traj, seen)
    assert links_of(traj) == [(None, 0, None), (0, 0, None), (None, 1, 1), (2, 1, None)]
    assert traj.info["branches"] == 2 and traj.metrics["branches"] == 2.0
    compacted, before = traj.steps[2], traj.steps[1]
    shared = compacted.info["shared_prefix_tokens"]
    assert shared == common_prefix(compacted.prompt_ids, before.prompt_ids + before.response_ids)
    head = tokenizer.decode(compacted.prompt_ids[:shared])
    assert SYSTEM in head and head.rstrip().endswith("user")  # the system message is what the branches share
    assert "Summary of the work so far" in compacted.observation.messages[-1]["content"]
    # feedback comes from the next call of the same branch: none after the compacted-away step
    assert traj.steps[0].feedback == "<tool_response>\n5\n</tool_response>" and before.feedback == ""
    assert before.next_observation is None and compacted.next_observation is traj.steps[3].observation
    # every step of both branches trains with the episode's reward: GRPO gives each the trajectory's advantage
    failed, _ = expert_run(tokenizer, "compacting", {**COMPACT_ROW, "expert_actions": [
        *COMPACT_ROW["expert_actions"][:3], "<answer>18</answer>"]})
    assert failed.final_reward == 0.0 and links_of(failed) == links_of(traj)
    traj.group_id = failed.group_id = "g"
    rows, adv = step_advantages([traj, failed])
    assert [r.reward for r in rows] == [0.0, 0.0, 0.0, 1.0] + [0.0] * 4
    assert [r.done for r in rows] == ([False] * 3 + [True]) * 2
    assert [r.prompt_ids for r in rows[:4]] == [s.prompt_ids for s in traj.steps]
    assert len(adv[0]) == len(adv[1]) == 4 and adv[0][0] > 0 > adv[1][0]
    assert all(a == pytest.approx(adv[0][0]) for a in adv[0]) and all(a == pytest.approx(adv[1][0]) for a in adv[1])


SUBAGENT_ROW = {"prompt": "What is (2+3)*4?", "reward_model": {"ground_truth": "20"},
                "expert_actions": ['<tool_call>{"name": "ask_helper", "arguments": {"question": "Compute (2+3)*4."}}'
                                   '</tool_call>', calc("(2+3)*4"), "The result is 20.", "<answer>20</answer>"]}


def test_an_agent_that_calls_a_subagent(tokenizer):
    traj, seen = expert_run(tokenizer, "with_subagent", SUBAGENT_ROW)
    assert traj.termination == "done" and traj.final_reward == 1.0 and len(traj.steps) == 4
    check_ids(traj, seen)
    # main asks, the helper calls the calculator and answers, main answers: the helper is branch 1
    assert links_of(traj) == [(None, 0, None), (None, 1, 0), (1, 1, None), (0, 0, None)]
    main, helper = traj.steps[0], traj.steps[1]
    assert "careful helper" in helper.observation.messages[0]["content"]
    shared = helper.info["shared_prefix_tokens"]
    assert 0 < shared == common_prefix(helper.prompt_ids, main.prompt_ids + main.response_ids) < 8  # "system" only
    # the main step's feedback is the helper's answer, the tool result its own next call carries
    assert main.feedback == "<tool_response>\nThe result is 20.\n</tool_response>"
    assert main.next_observation is traj.steps[3].observation
    assert traj.steps[3].prompt_ids[:len(main.prompt_ids) + len(main.response_ids)] == \
        main.prompt_ids + main.response_ids
    failed, _ = expert_run(tokenizer, "with_subagent", {**SUBAGENT_ROW, "reward_model": {"ground_truth": "21"}})
    traj.group_id = failed.group_id = "g"
    rows, adv = step_advantages([traj, failed])
    assert [r.reward for r in rows[:4]] == [0.0, 0.0, 0.0, 1.0] and [r.step_index for r in rows[:4]] == [0, 1, 2, 3]
    assert adv[0] == pytest.approx([adv[0][0]] * 4) and adv[0][0] > 0 > adv[1][0]


def test_per_branch_rewards_go_to_each_branchs_last_step(tokenizer):
    traj, _ = expert_run(tokenizer, "subagent_with_branch_rewards", SUBAGENT_ROW, branch_rewards="per_branch")
    assert traj.termination == "done" and traj.final_reward == 1.0  # the reward function's, as ever
    assert [s.reward for s in traj.steps] == [0.0, 0.0, 0.5, 1.0] and traj.metrics["branch_reward/1"] == 0.5
    rows = trajectories_to_rows([traj]).rows
    assert [r.reward for r in rows] == [0.0, 0.0, 0.5, 1.0]
    # without per_branch, or with a branch the episode does not have, the agent's return is an error
    plain, _ = expert_run(tokenizer, "subagent_with_branch_rewards", SUBAGENT_ROW)
    assert plain.termination == "env_error" and "branch_rewards: per_branch" in plain.info["error"]
    assert [s.reward for s in plain.steps] == [0.0] * 4
    unknown, _ = expert_run(tokenizer, "subagent_with_branch_rewards", SUBAGENT_ROW, branch_rewards="per_branch",
                            agent_params={"rewards": {2: 1.0}})
    assert unknown.termination == "env_error" and "has branch 2; this episode has branches 0..1" in \
        unknown.info["error"]


def test_parallel_first_calls_through_the_gateway(tokenizer, scripted):
    ctx = FlowContext(engine=scripted(["ok"]), tokenizer=tokenizer, sampling=SamplingParams(max_new_tokens=8),
                      max_turns=4)
    traj = asyncio.run(OpenAIAgentFlow(ctx, agent=f"{FUNCTIONS}:two_in_parallel").run({"prompt": "apples"}))
    assert traj.termination == "done" and links_of(traj) == [(None, 0, None), (None, 1, 0)]
    first, second = traj.steps
    assert second.info["shared_prefix_tokens"] == common_prefix(first.prompt_ids + first.response_ids,
                                                                 second.prompt_ids) > 0


def test_branch_rewards_must_be_a_known_setting(tokenizer):
    ctx = FlowContext(engine=None, tokenizer=tokenizer, sampling=SamplingParams())
    with pytest.raises(ValueError, match="branch_rewards must be one of episode, per_branch"):
        OpenAIAgentFlow(ctx, agent=f"{AGENTS}:compacting", branch_rewards="per_step")
