"""The game pool under failure: a worker killed mid-episode, a hung worker, a game file that cannot load.
The failures are real (SIGKILL / SIGSTOP sent to the worker process, a broken file on disk)."""

from __future__ import annotations

import os
import signal

import pytest

from agentr1_core.mdp import Action
from agentr1_env_alfworld.env import AlfworldEnv
from agentr1_env_alfworld.pool import GamePool

from agentr1_core.testing import run_async as run


def act(text: str) -> Action:
    return Action(text, [0], [0.0])


@pytest.mark.slow
def test_worker_killed_mid_episode_truncates_that_episode_and_the_run_goes_on(rows, short_row):
    pool = GamePool(workers=2, hang_timeout=300.0)
    other_row = next(r for r in rows if r["data_source"] == "pick_and_place_simple")

    async def go():
        victim, bystander = AlfworldEnv(pool=pool), AlfworldEnv(pool=pool)
        await victim.reset(short_row)
        await bystander.reset(other_row)
        assert victim.worker is not bystander.worker  # the least busy worker takes each new episode
        ok = await victim.step(act(victim.expert_action()))
        assert not ok.truncated
        dead_pid = victim.worker.pid
        os.kill(dead_pid, signal.SIGKILL)
        lost = await victim.step(act(victim.expert_action()))
        assert lost.truncated and not lost.done and lost.observation is None
        assert lost.info["reason"].startswith("worker_lost: game worker process") and "exit code -9" in lost.info["reason"]
        # the other episode is untouched
        step = await bystander.step(act(bystander.expert_action()))
        assert not step.truncated and step.info["admissible"]
        # the next episode gets a fresh worker in the dead one's slot and plays to the end
        again = AlfworldEnv(pool=pool)
        await again.reset(short_row)
        assert dead_pid not in pool.pids() and pool.replaced == 1
        while (command := again.expert_action()) is not None:
            last = await again.step(act(command))
        assert last.done and last.info["won"]
        for env in (victim, bystander, again):
            await env.close()

    try:
        run(go())
    finally:
        pool.close()


@pytest.mark.slow
def test_hung_worker_is_killed_and_replaced(short_row):
    pool = GamePool(workers=1, hang_timeout=300.0, check_interval=0.1)

    async def go():
        env = AlfworldEnv(pool=pool)
        await env.reset(short_row)
        pool.hang_timeout = 2.0  # after the (seconds-long) load, so that only the stopped process trips it
        hung_pid = env.worker.pid
        os.kill(hung_pid, signal.SIGSTOP)  # a real hang: the process stops answering
        result = await env.step(act("go to desk 1"))
        assert result.truncated and "hung: no reply" in result.info["reason"]
        assert "killed and replaced" in result.info["reason"]
        assert pool.replaced == 1 and pool.pids() != [hung_pid]
        pool.hang_timeout = 300.0
        fresh = AlfworldEnv(pool=pool)
        await fresh.reset(short_row)
        assert not (await fresh.step(act("go to desk 1"))).truncated
        await fresh.close()

    try:
        run(go())
    finally:
        pool.close()


def test_unloadable_game_file_is_a_clear_reset_error_and_the_worker_survives(tmp_path, pool):
    broken = tmp_path / "game.tw-pddl"
    broken.write_text('{"pddl_domain": "(define"}')
    pids = pool.pids()
    with pytest.raises(RuntimeError, match="could not load .*game.tw-pddl"):
        run(AlfworldEnv(pool=pool).reset({"gamefile": str(broken)}))
    assert pool.pids() == pids
