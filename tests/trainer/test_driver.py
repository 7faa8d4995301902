"""The rollout driver: all episodes of a call are in flight at once, a crashing flow becomes an ``env_error``
trajectory, ids are set per row and sample; and real episodes (ToolEnv + calculator + the transformers engine on a
tiny random model with the real tokenizer) go through it."""

from __future__ import annotations

import asyncio

import pytest

from agentr1_core.flows import AgentEnvLoop, FlowContext
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.rollout.driver import rollout, rollout_async


class BarrierFlow:
    """Finishes only once ``expected`` episodes have started: proves they all run at the same time."""

    def __init__(self, state: dict) -> None:
        self.state = state

    async def run(self, row):
        self.state["started"] += 1
        self.state["peak"] = max(self.state["peak"], self.state["started"] - self.state["finished"])
        if self.state["started"] == self.state["expected"]:
            self.state["all_in"].set()
        await asyncio.wait_for(self.state["all_in"].wait(), timeout=5)
        self.state["finished"] += 1
        if row.get("crash"):
            raise RuntimeError("flow exploded")
        return Trajectory(steps=[Step([1], [2], [-0.5], reward=1.0, done=True)], data_source=row["data_source"])


def test_all_episodes_are_in_flight_at_once_and_a_crash_becomes_an_error_trajectory():
    rows = [{"data_source": "a"}, {"data_source": "b", "crash": True}, {"data_source": "c"}]

    async def main():
        state = {"started": 0, "finished": 0, "peak": 0, "expected": 12, "all_in": asyncio.Event()}
        trajs = await rollout_async(rows, 4, lambda: BarrierFlow(state), group_prefix="it1-", progress=False)
        return state, trajs

    state, trajs = asyncio.run(main())
    assert state["peak"] == 12
    assert len(trajs) == 12
    assert [t.group_id for t in trajs] == ["it1-0"] * 4 + ["it1-1"] * 4 + ["it1-2"] * 4
    assert [t.uid for t in trajs[:4]] == ["it1-0/0", "it1-0/1", "it1-0/2", "it1-0/3"]
    assert len({t.uid for t in trajs}) == 12
    crashed = trajs[4:8]
    assert all(t.termination == "env_error" and not t.steps and t.data_source == "b" for t in crashed)
    assert all("flow exploded" in t.info["error"] for t in crashed)
    assert all(t.termination == "done" and t.steps for t in trajs[:4] + trajs[8:])


def test_a_flow_returning_the_wrong_type_or_failing_to_build_is_an_error_trajectory():
    class Wrong:
        async def run(self, row):
            return {"not": "a trajectory"}

    def broken_factory():
        raise ValueError("bad flow params")

    t1 = rollout([{"prompt": "x"}], 1, Wrong, progress=False)[0]
    t2 = rollout([{"prompt": "x"}], 2, broken_factory, progress=False)
    assert t1.termination == "env_error" and "expected Trajectory" in t1.info["error"]
    assert [t.termination for t in t2] == ["env_error", "env_error"] and "bad flow params" in t2[0].info["error"]


def test_n_must_be_positive():
    with pytest.raises(ValueError, match="n must be >= 1"):
        rollout([{}], 0, lambda: None, progress=False)


@pytest.fixture(scope="module")
def tiny_engine(tiny_model, smol_tokenizer):
    from agentr1_core.rollout.transformers_engine import TransformersEngine

    engine = TransformersEngine(tiny_model, smol_tokenizer, max_batch_size=16, seed=0)
    yield engine
    engine.close()


def _ctx(engine, tokenizer, policy):
    from agentr1_core.builtin.rewards import AnswerMatch

    return FlowContext(engine=engine, tokenizer=tokenizer, sampling=SamplingParams(temperature=1.0, max_new_tokens=8),
                       env_config={"name": "tool_env", "tools": ["calculator"], "max_turns": 3},
                       reward_fn=AnswerMatch(), max_turns=3, policy=policy)


def test_real_episodes_through_the_driver(tiny_engine, smol_tokenizer):
    from agentr1_core.builtin.datasets import arithmetic_rows

    rows = arithmetic_rows("train", train_size=3, val_size=0, seed=1)
    expert = rollout(rows, 2, lambda: AgentEnvLoop(_ctx(tiny_engine, smol_tokenizer, "expert")), progress=False)
    assert [t.termination for t in expert] == ["done"] * 6
    assert all(t.num_steps == 2 and t.final_reward == 1.0 for t in expert)
    # the second prompt contains the first prompt, the expert's call and the calculator's answer, as token ids
    first, second = expert[0].steps
    assert second.prompt_ids[:len(first.prompt_ids)] == first.prompt_ids
    assert smol_tokenizer.decode(second.prompt_ids).count(rows[0]["reward_model"]["ground_truth"]) == 1

    sampled = rollout(rows, 3, lambda: AgentEnvLoop(_ctx(tiny_engine, smol_tokenizer, "model")), progress=False)
    assert len(sampled) == 9 and all(t.termination != "env_error" for t in sampled)
    for t in sampled:
        for s in t.steps:
            assert 1 <= len(s.response_ids) <= 8 and len(s.response_logprobs) == len(s.response_ids)
            assert all(lp <= 0 for lp in s.response_logprobs)
