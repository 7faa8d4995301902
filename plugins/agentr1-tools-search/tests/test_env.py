"""The ``search_qa`` env: context modes, bad actions, step cap, the scripted expert through ``AgentEnvLoop`` with the
real SmolLM2 tokenizer, and the framework's conformance checkers."""

from __future__ import annotations

from pathlib import Path

import asyncio
import json

import pytest

from agentr1_core.flows import AgentEnvLoop, FlowContext
from agentr1_core.mdp import Action
from agentr1_core.rollout.base import SamplingParams
from agentr1_tools_search.datasets import load_hotpotqa, load_nq
from agentr1_tools_search.env import NO_ACTION, SearchQAEnv
from agentr1_tools_search.rewards import QAExactMatch
from agentr1_tools_search.tool import SearchTool

DATA = Path(__file__).parent / "data"

ROWS = load_hotpotqa(split="dev")


def call(query: str, note: str = "") -> str:
    return note + "<tool_call>" + json.dumps({"name": "search", "arguments": {"query": query}}) + "</tool_call>"


def act(env: SearchQAEnv, text: str):
    return asyncio.run(env.step(Action(text, [1], [0.0])))


def make_env(**kw) -> SearchQAEnv:
    return SearchQAEnv(tools=[{"name": "search", "top_k": 2}], **kw)


def test_summary_mode_rebuilds_one_bounded_user_message():
    env = make_env(max_passages=3, max_notes=2, note_chars=40, max_turns=8)
    obs = asyncio.run(env.reset(ROWS[0]))
    assert [m["role"] for m in obs.messages] == ["system", "user"]
    assert "<tool_call>" in obs.messages[0]["content"] and '"name": "search"' in obs.messages[0]["content"]
    sizes = []
    for i, query in enumerate(["VIVA Media", "Gesellschaft mit beschränkter Haftung", "Constantin Medien",
                               "VIVA Poland", "Blic newspaper"]):
        result = act(env, call(query, note=f"note {i} " + "x" * 100 + "\n"))
        assert not result.done and result.reward == 0.0
        msgs = result.observation.messages
        assert [m["role"] for m in msgs] == ["system", "user"]
        sizes.append(len(msgs[1]["content"]))
    text = msgs[1]["content"]
    assert text.startswith(f"Question: {ROWS[0]['prompt']}")
    assert text.count("\n[") == 3  # only the newest 3 distinct passages are kept
    assert "note 4" in text and "note 3" in text and "note 2" not in text
    assert '"Blic newspaper"' in text and "<tool_call>" not in text
    assert max(sizes[2:]) - min(sizes[2:]) < 400  # flat, not growing with every turn


def test_append_and_window_modes_keep_transcript_turns():
    env = make_env(context="append", max_turns=8)
    asyncio.run(env.reset(ROWS[0]))
    for q in ["VIVA Media", "Constantin Medien", "Blic"]:
        result = act(env, call(q))
    roles = [m["role"] for m in result.observation.messages]
    assert roles == ["system", "user"] + ["assistant", "tool"] * 3
    assert "<tool_response>" in result.observation.messages[-1]["content"]
    env = make_env(context="window", window=1, max_turns=8)
    asyncio.run(env.reset(ROWS[0]))
    for q in ["VIVA Media", "Constantin Medien", "Blic"]:
        result = act(env, call(q))
    assert [m["role"] for m in result.observation.messages] == ["system", "user", "assistant", "tool"]
    assert "Blic" in result.observation.messages[2]["content"]


def test_answer_ends_the_episode_and_no_action_does_not():
    env = make_env(max_turns=3)
    asyncio.run(env.reset(ROWS[0]))
    result = act(env, "I am not sure what to do")
    assert not result.done and not result.truncated and result.feedback == NO_ACTION
    assert result.info["tool_errors"] == {"no_action": 1}
    result = act(env, '<tool_call>{"name": "search", "arguments": {"query": ""}}</tool_call>')
    assert result.info["tool_errors"] == {"bad_arguments": 1} and "empty" in result.feedback
    assert "(tool error)" in result.observation.messages[-1]["content"]
    result = act(env, "<answer>GmbH</answer>")
    assert result.done and result.info["answer"] == "GmbH"


def test_step_cap_truncates_and_search_reward_is_configurable():
    env = make_env(max_turns=2, search_reward=0.1)
    asyncio.run(env.reset(ROWS[0]))
    first = act(env, call("VIVA Media"))
    assert first.reward == pytest.approx(0.1) and not first.truncated
    second = act(env, call("zzqxw blorfnik"))  # finds nothing: no search reward
    assert second.reward == 0.0 and second.truncated
    with pytest.raises(ValueError, match="context must be one of"):
        make_env(context="growing")


def test_conformance_checkers():
    from agentr1_core.testing import check_env, check_tool

    good = check_tool(SearchTool(top_k=2), {"query": "VIVA Media"})
    assert good.text.startswith("[1] VIVA Media")
    steps = check_env(make_env(max_turns=3), ROWS[1], actions=[call("Adam Clayton Powell"), "<answer>x</answer>"])
    assert steps == 2


def _flow(tokenizer, context: str = "summary", max_turns: int = 4) -> AgentEnvLoop:
    ctx = FlowContext(engine=None, tokenizer=tokenizer, sampling=SamplingParams(),
                      env_config={"name": "search_qa", "context": context, "max_turns": max_turns,
                                  "tools": [{"name": "search", "top_k": 3}]},
                      reward_fn=QAExactMatch(), max_turns=max_turns, policy="expert")
    return AgentEnvLoop(ctx)


@pytest.mark.slow  # loads transformers and the real tokenizer (~15 s here)
def test_expert_rollout_through_agent_env_loop_with_the_real_tokenizer(smollm2_tokenizer):
    tok = smollm2_tokenizer
    traj = asyncio.run(_flow(tok).run(ROWS[0]))
    assert traj.termination == "done" and traj.final_reward == 1.0
    assert len(traj.steps) == 3  # two title searches, then the answer
    assert [s.reward for s in traj.steps] == [0.0, 0.0, 1.0]
    for step in traj.steps:
        assert step.response_ids[-1] == tok.eos_token_id and len(step.response_logprobs) == len(step.response_ids)
        assert tok.decode(step.response_ids[:-1]) == step.action_text  # ids are the expert's text, unchanged
    last_prompt = tok.decode(traj.steps[-1].prompt_ids)
    assert "Passages found so far" in last_prompt and "[1] Gesellschaft mit beschränkter Haftung\n" in last_prompt
    assert "] VIVA Media\n" in last_prompt  # the first search's best hit is still shown
    assert traj.steps[-1].action_text == "<answer>Gesellschaft mit beschränkter Haftung</answer>"
    # the summary context keeps prompts shorter than the full transcript
    full = asyncio.run(_flow(tok, context="append").run(ROWS[0]))
    assert full.final_reward == 1.0 and len(traj.steps[-1].prompt_ids) < len(full.steps[-1].prompt_ids)


@pytest.mark.slow
def test_expert_finds_both_gold_titles_on_most_dev_questions(smollm2_tokenizer):
    flow = _flow(smollm2_tokenizer)
    hits = 0
    for row in ROWS:
        traj = asyncio.run(flow.run(row))
        assert traj.final_reward == 1.0
        seen = " ".join(smollm2_tokenizer.decode(traj.steps[-1].prompt_ids).split())
        hits += all(f"] {t} " in seen for t in row["extra_info"]["supporting_titles"])
    print(f"expert episodes with both gold passages in context: {hits}/{len(ROWS)}")
    assert hits / len(ROWS) >= 0.9


@pytest.mark.slow
def test_expert_without_supporting_titles_searches_the_question(smollm2_tokenizer):
    row = load_nq(str(DATA / "nq_open_dev20.jsonl"), limit=1)[0]
    traj = asyncio.run(_flow(smollm2_tokenizer).run(row))
    assert len(traj.steps) == 2 and row["prompt"] in traj.steps[0].action_text
    assert traj.final_reward == 1.0  # the expert answers with the gold answer
