"""Subgoal progress and the ``alfworld_progress`` reward: along the walkthroughs of the six shipped games (real game
feedback), on the failure seen after SFT (an object picked up and put back where it was), and through the plugin's
entry point."""

from __future__ import annotations

import asyncio

import pytest

from agentr1_core.mdp import Action, Step, Trajectory
from agentr1_core.plugins import configure_registry
from agentr1_env_alfworld.env import AlfworldEnv
from agentr1_env_alfworld.progress import AlfworldProgress, episode_progress, subgoals_reached, target_of
from agentr1_env_alfworld.rewards import AlfworldWon

from agentr1_core.testing import run_async as run

# Progress after each walkthrough command of the shipped games, counting the win (1.0 at the last command).
EXPECTED = {
    "look_at_obj_in_light": [0, 1 / 3, 1.0],
    "pick_and_place_simple": [0, 1 / 3, 2 / 3, 1.0],
    "pick_clean_then_place_in_recep": [0, 0.25, 0.25, 0.5, 0.75, 0.75, 1.0],
    "pick_cool_then_place_in_recep": [0, 0.25, 0.25, 1.0],  # this game is won as soon as the pan is cool
    "pick_heat_then_place_in_recep": [0, 0.25, 0.25, 0.5, 0.75, 1.0],
    "pick_two_obj_and_place": [0, 0.25, 0.25, 0.5, 0.5, 0.75, 0.75, 1.0],
}


def act(text: str) -> Action:
    return Action(text, [0], [0.0])


def trajectory(feedbacks: list[str], won: bool = False) -> Trajectory:
    steps = [Step(prompt_ids=[1], response_ids=[2], response_logprobs=[0.0], feedback=text,
                  info={"won": won and i == len(feedbacks) - 1}) for i, text in enumerate(feedbacks)]
    return Trajectory(steps=steps)


@pytest.mark.slow
def test_progress_rises_along_the_walkthrough_of_every_shipped_game(rows, pool):
    async def replay(row):
        env = AlfworldEnv(pool=pool)
        await env.reset(row)
        feedbacks, values = [], []
        while (command := env.expert_action()) is not None:
            result = await env.step(act(command))
            feedbacks.append(result.feedback)
            values.append(episode_progress(target_of(row["extra_info"]["task_dir"]), feedbacks, result.info["won"]))
        await env.close()
        return values

    async def all_games():
        return await asyncio.gather(*(replay(row) for row in rows))

    for row, values in zip(rows, run(all_games())):
        assert values == pytest.approx(EXPECTED[row["data_source"]]), row["data_source"]


def test_an_object_put_back_where_it_was_counts_only_as_picked():
    target = target_of("pick_and_place_simple-Box-None-Sofa-229")
    loop = ["You arrive at diningtable 1. On the diningtable 1, you see a box 1, a laptop 2.",
            "You pick up the box 1 from the diningtable 1.", "You move the box 1 to the diningtable 1.",
            "You pick up the box 1 from the diningtable 1.", "You move the box 1 to the diningtable 1."]
    assert subgoals_reached(target, loop) == {"picked"}
    assert episode_progress(target, loop, won=False) == pytest.approx(1 / 3)
    # arriving at the target with empty hands is not progress; arriving there holding the box is
    assert subgoals_reached(target, loop + ["You arrive at sofa 1. On the sofa 1, you see nothing."]) == {"picked"}
    carried = loop + ["You pick up the box 1 from the diningtable 1.", "You arrive at sofa 1. On the sofa 1, ..."]
    assert subgoals_reached(target, carried) == {"picked", "at_target"}


def test_other_objects_and_untreated_objects_earn_nothing():
    clean = target_of("pick_clean_then_place_in_recep-Ladle-None-Drawer-8")
    wrong_object = ["You pick up the knife 3 from the diningtable 2.", "You clean the knife 3 using the sinkbasin 1.",
                    "You arrive at drawer 1. The drawer 1 is closed."]
    assert subgoals_reached(clean, wrong_object) == set()
    not_cleaned = ["You pick up the ladle 1 from the countertop 3.", "You arrive at drawer 1. The drawer 1 is closed."]
    assert subgoals_reached(clean, not_cleaned) == {"picked"}  # the target is reached only with a clean ladle
    cleaned = ["You pick up the ladle 1 from the countertop 3.", "You clean the ladle 1 using the sinkbasin 1.",
               "You arrive at drawer 1. The drawer 1 is closed."]
    assert subgoals_reached(clean, cleaned) == {"picked", "treated", "at_target"}


def test_pick_two_needs_a_different_second_object():
    two = target_of("pick_two_obj_and_place-SoapBar-None-GarbageCan-418")
    first = ["You pick up the soapbar 3 from the countertop 1.", "You move the soapbar 3 to the garbagecan 1."]
    assert subgoals_reached(two, first) == {"picked", "placed_one"}
    same_again = first + ["You pick up the soapbar 3 from the garbagecan 1."]
    assert subgoals_reached(two, same_again) == {"picked", "placed_one"}
    second = first + ["You pick up the soapbar 2 from the countertop 1."]
    assert subgoals_reached(two, second) == {"picked", "placed_one", "picked_second"}


def test_a_folder_outside_alfworld_naming_has_only_the_win():
    assert target_of("my_games") is None and target_of("unknown_task-Box-None-Sofa-1") is None
    assert episode_progress(None, ["You pick up the box 1 from the sofa 1."], won=False) == 0.0
    assert episode_progress(None, [], won=True) == 1.0


def test_the_reward_pays_progress_below_a_win_and_records_metrics():
    row = {"extra_info": {"task_dir": "pick_and_place_simple-Box-None-Sofa-229"}}
    picked = trajectory(["You pick up the box 1 from the diningtable 1."])
    assert AlfworldProgress()(picked, row) == pytest.approx(1 / 3)
    assert picked.metrics == {"won": 0.0, "progress": pytest.approx(1 / 3)}
    assert AlfworldProgress(partial_weight=0.5)(picked, row) == pytest.approx(1 / 6)
    assert AlfworldProgress(partial_weight=0.0)(picked, row) == 0.0
    won = trajectory(["You pick up the box 1 from the diningtable 1.", "You move the box 1 to the sofa 1."], won=True)
    assert AlfworldProgress()(won, row) == 1.0 and won.metrics == {"won": 1.0, "progress": 1.0}
    # the win-only reward records the same metrics, so held-out progress is reported whichever reward trains
    picked_again = trajectory(["You pick up the box 1 from the diningtable 1."])
    assert AlfworldWon()(picked_again, row) == 0.0 and picked_again.metrics["progress"] == pytest.approx(1 / 3)
    # the task folder is also found from the game file's path
    by_path = {"gamefile": "/data/json_2.1.1/valid_seen/pick_and_place_simple-Box-None-Sofa-229/trial_1/game.tw-pddl"}
    assert AlfworldProgress()(trajectory(["You pick up the box 1 from the sofa 1."]), by_path) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="partial_weight"):
        AlfworldProgress(partial_weight=1.5)


def test_the_reward_is_found_by_name_through_the_installed_plugin():
    registry = configure_registry()
    assert "alfworld_progress" in registry.names("reward")
    reward = registry.load("reward", "alfworld_progress")(partial_weight=0.5)
    assert isinstance(reward, AlfworldProgress) and reward.partial_weight == 0.5
