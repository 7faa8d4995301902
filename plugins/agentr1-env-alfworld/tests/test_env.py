"""The alfworld env on real game files: walkthroughs win, invalid commands, the step cap, the flat context, the
conformance checker, and the generic agent loop with the scripted expert and the real SmolLM2 tokenizer."""

from __future__ import annotations

import asyncio

import pytest

from agentr1_core.flows import AgentEnvLoop, FlowContext
from agentr1_core.mdp import Action
from agentr1_core.rollout.base import SamplingParams
from agentr1_core.testing import check_env
from agentr1_env_alfworld.env import AlfworldEnv
from agentr1_env_alfworld.rewards import alfworld_won

from agentr1_core.testing import run_async as run


def act(text: str) -> Action:
    return Action(text, [0], [0.0])


async def replay_walkthrough(env: AlfworldEnv, row: dict) -> list:
    await env.reset(row)
    results = []
    while (command := env.expert_action()) is not None:
        results.append(await env.step(act(command)))
    await env.close()
    return results


@pytest.mark.slow
def test_replaying_the_walkthrough_wins_every_shipped_game(rows, pool):
    envs = [AlfworldEnv(pool=pool) for _ in rows]

    async def all_games():
        return await asyncio.gather(*(replay_walkthrough(e, r) for e, r in zip(envs, rows)))

    outcomes = run(all_games())
    for env, row, results in zip(envs, rows, outcomes):
        assert results, row["data_source"]
        assert len(results) == len(env.walkthrough)
        last = results[-1]
        assert last.done and not last.truncated and last.info["won"] and last.reward == 1.0, row["data_source"]
        assert all(not r.done and r.reward == 0.0 and r.info["admissible"] for r in results[:-1])
        assert env.expert_action() is None


def test_invalid_commands_and_step_cap(short_row, pool):
    async def go():
        env = AlfworldEnv(pool=pool, max_steps=4, history=2, invalid_penalty=-0.1, step_penalty=-0.01)
        obs = await env.reset(short_row)
        first_anchor, first = obs.anchor, env.expert_action()
        assert obs.anchor.startswith("alfworld:") and first == "go to desk 1"
        bad = await env.step(act("fly to the moon"))
        assert bad.feedback == "Nothing happens."
        assert not bad.done and not bad.truncated and bad.info == {
            "won": False, "admissible": False, "command": "fly to the moon", "steps": 1}
        assert bad.reward == pytest.approx(-0.11)
        assert bad.observation.anchor == first_anchor  # nothing changed in the game
        assert env.expert_action() == first  # still on the walkthrough
        moved = await env.step(act("Go to desk 1."))
        assert moved.feedback.startswith("You arrive at desk 1") and moved.reward == pytest.approx(-0.01)
        assert moved.observation.anchor != first_anchor
        await env.step(act("look"))
        assert env.expert_action() == "use desklamp 1"  # look leaves the state as it was
        capped = await env.step(act("inventory"))
        assert capped.truncated and not capped.done and capped.info["reason"] == "step_cap"
        after = await env.step(act("use desklamp 1"))
        assert after.truncated and after.info["reason"] == "episode_over"
        user = capped.observation.messages[-1]["content"]
        assert user.count("\n> ") == 2 and "> look" in user and "> inventory" in user  # last k=2 pairs only
        assert "fly to the moon" not in user
        await env.close()

    run(go())


def test_context_stays_flat_as_the_episode_grows(short_row, pool):
    async def go():
        env = AlfworldEnv(pool=pool, history=2)
        lengths = [len((await env.reset(short_row)).messages[-1]["content"])]
        for _ in range(6):
            lengths.append(len((await env.step(act("look"))).observation.messages[-1]["content"]))
        await env.close()
        return lengths

    lengths = run(go())
    assert lengths[3] == lengths[4] == lengths[5] == lengths[6]  # after k steps the size no longer grows


def test_the_room_can_be_left_out_of_the_context(short_row, pool):
    async def first_prompts():
        prompts = []
        for show_room in (True, False):
            env = AlfworldEnv(pool=pool, show_room=show_room)
            prompts.append((await env.reset(short_row)).messages[-1]["content"])
            await env.close()
        return prompts

    with_room, without_room = run(first_prompts())
    assert "At the start: You are in the middle of a room." in with_room and "At the start" not in without_room
    kept = [part for part in with_room.split("\n\n") if not part.startswith("At the start: ")]
    assert "\n\n".join(kept) == without_room  # the rest of the context is the same
    assert "go to desk 1" in without_room and without_room.startswith("Your task is to: examine the bowl")


def test_conformance_checker_passes(short_row, pool):
    env = AlfworldEnv(pool=pool, max_steps=5)
    assert check_env(env, short_row) == 5


def test_reset_without_a_game_file_is_a_clear_error(pool):
    with pytest.raises(ValueError, match="needs a game file"):
        run(AlfworldEnv(pool=pool).reset({"prompt": "x"}))


@pytest.mark.slow
def test_agent_env_loop_with_the_expert_and_the_real_tokenizer(short_row, pool, smollm2_tokenizer, monkeypatch):
    from agentr1_env_alfworld import env as env_module

    monkeypatch.setattr(env_module, "shared_pool", lambda *a: pool)  # the env built by the registry uses it
    ctx = FlowContext(engine=None, tokenizer=smollm2_tokenizer, sampling=SamplingParams(),
                      env_config={"name": "alfworld", "win_reward": 0.0}, reward_fn=alfworld_won,
                      max_turns=50, max_prompt_tokens=4096, policy="expert")
    traj = run(AgentEnvLoop(ctx).run(short_row))
    assert traj.termination == "done" and traj.final_reward == 1.0 and traj.success()
    assert traj.data_source == "look_at_obj_in_light" and len(traj.steps) == 3
    assert [s.action_text for s in traj.steps] == ["go to desk 1", "use desklamp 1", "take bowl 1 from desk 1"]
    for step in traj.steps:
        assert step.anchor and step.anchor.startswith("alfworld:")
        assert step.response_ids[-1] == smollm2_tokenizer.eos_token_id
        text = smollm2_tokenizer.decode(step.prompt_ids)
        assert "Your task is to: examine the bowl with the desklamp." in text and "<|im_start|>assistant" in text
    assert len({s.anchor for s in traj.steps}) == 3
    assert [s.reward for s in traj.steps] == [0.0, 0.0, 1.0]
