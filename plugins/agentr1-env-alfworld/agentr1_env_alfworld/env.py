"""``AlfworldEnv``: an ALFWorld text game as an ``AgentEnv``.

Each episode plays one ``game.tw-pddl`` file (from the constructor's ``gamefile`` or the row's ``gamefile``) in a
shared pool of game worker processes (see ``pool.py``), so resets and steps never block the event loop. The action
is a plain command (see ``prompt.py``); an invalid one gets the game's own "Nothing happens.". The episode ends
``done`` when the PDDL goal holds (``info["won"]``, reward ``win_reward``) and is ``truncated`` at ``max_steps``
(``info["reason"] = "step_cap"``) or when its worker crashes or hangs (``info["reason"]`` says which; the pool
replaces the worker). Optional shaping: ``step_penalty`` on every step, ``invalid_penalty`` on a command that was
not admissible. ``show_room: false`` leaves the room as first seen out of the context (the admissible ``go to``
commands name the same receptacles; the room is 32-40% of the first prompt's tokens on valid_seen games).
``Observation.anchor`` is a digest of the full game state, for GiGPO's step groups.

``expert_action()`` gives the game's walkthrough command for the next step while the episode is on the walkthrough
(commands that leave the game state as it was, such as an invalid one or "look", do not leave it); once the state
moves off the walkthrough it returns ``None``. It gives scripted episodes for a warm-start SFT stage and does not
replan from other states.
"""

from __future__ import annotations

import uuid
from typing import Any

from agentr1_core.envs import AgentEnv
from agentr1_core.mdp import Action, Observation, StepResult
from agentr1_env_alfworld.pool import GameError, GamePool, GameWorker, WorkerLost, shared_pool
from agentr1_env_alfworld.prompt import (
    DEFAULT_SYSTEM_PROMPT, parse_command, render_messages, render_user_message, split_intro,
)


class AlfworldEnv(AgentEnv):
    """See the module docstring. ``history`` is k, the number of recent (action, observation) pairs shown."""

    def __init__(self, gamefile: str = "", max_steps: int = 50, history: int = 3, win_reward: float = 1.0,
                 step_penalty: float = 0.0, invalid_penalty: float = 0.0, system_prompt: str = DEFAULT_SYSTEM_PROMPT,
                 show_room: bool = True, workers: int = 2, hang_timeout: float = 120.0, cache_games: int = 4,
                 pool: GamePool | None = None) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        if history < 0:
            raise ValueError(f"history must be >= 0, got {history}")
        self.gamefile = gamefile
        self.max_steps = max_steps
        self.history_size = history
        self.win_reward = win_reward
        self.step_penalty = step_penalty
        self.invalid_penalty = invalid_penalty
        self.system_prompt = system_prompt
        self.show_room = show_room
        self.pool_settings = (workers, hang_timeout, cache_games)
        self.pool = pool
        self.worker: GameWorker | None = None
        self.episode = ""
        self.task = self.room = ""
        self.history: list[tuple[str, str]] = []
        self.admissible: list[str] = []
        self.anchor = ""
        self.walkthrough: list[str] = []
        self.expert_next = 0
        self.off_walkthrough = False
        self.steps = 0
        self.won = False
        self.over = False

    # -- episode lifecycle -------------------------------------------------------------------------------------
    async def reset(self, row: dict[str, Any]) -> Observation:
        gamefile = self.gamefile or row.get("gamefile") or (row.get("env_kwargs") or {}).get("gamefile")
        if not gamefile:
            raise ValueError("the alfworld env needs a game file: set env.gamefile or give rows a 'gamefile'")
        await self.close()
        if self.pool is None:
            self.pool = shared_pool(*self.pool_settings)
        state = None
        for attempt in (1, 2):  # a worker lost during reset gets one retry on a fresh worker
            self.episode = uuid.uuid4().hex
            self.worker = self.pool.assign(self.episode, str(gamefile))
            try:
                state = await self.pool.call(self.worker, "reset", self.episode, str(gamefile))
                break
            except WorkerLost as exc:
                self.pool.release(self.worker, self.episode)
                self.worker = None
                if attempt == 2:
                    raise RuntimeError(f"alfworld reset of {gamefile} failed twice: {exc}") from exc
            except GameError as exc:
                await self.close()
                raise RuntimeError(f"alfworld could not load {gamefile}: {exc}") from exc
        assert state is not None
        self.task, self.room = split_intro(state["feedback"])
        self.history, self.steps, self.expert_next, self.off_walkthrough = [], 0, 0, False
        self.walkthrough = list(state.get("walkthrough") or [])
        self.admissible, self.anchor = list(state["admissible"]), state["anchor"]
        self.won = self.over = False
        return self.observation()

    async def close(self) -> None:
        worker, episode = self.worker, self.episode
        self.worker = None
        if worker is None or self.pool is None:
            return
        self.pool.release(worker, episode)
        try:
            await self.pool.call(worker, "close", episode)
        except (WorkerLost, GameError):
            pass

    # -- acting ------------------------------------------------------------------------------------------------
    def observation(self) -> Observation:
        recent = self.history[-self.history_size:] if self.history_size else []
        user = render_user_message(self.task, self.room if self.show_room else "", recent, self.admissible, self.steps,
                                   self.max_steps)
        return Observation(messages=render_messages(self.system_prompt, user), anchor=f"alfworld:{self.anchor}")

    def _truncate(self, reason: str, command: str = "") -> StepResult:
        self.over = True
        return StepResult(observation=None, truncated=True, feedback="",
                          info={"won": False, "reason": reason, "command": command, "steps": self.steps})

    async def step(self, action: Action) -> StepResult:
        if self.worker is None or self.over:
            return self._truncate("episode_over: reset() first" if self.worker is None else "episode_over")
        command = parse_command(action.text)
        valid = command in self.admissible
        self.steps += 1
        try:
            state = await self.pool.call(self.worker, "step", self.episode, command)
        except WorkerLost as exc:
            return self._truncate(f"worker_lost: {exc}", command)
        except GameError as exc:
            return self._truncate(f"game_error: {exc}", command)
        feedback = state["feedback"]
        if not self.off_walkthrough:
            if self.expert_next < len(self.walkthrough) and command == self.walkthrough[self.expert_next]:
                self.expert_next += 1
            elif state["anchor"] != self.anchor:
                self.off_walkthrough = True
        self.history.append((command, feedback))
        self.admissible, self.anchor, self.won = list(state["admissible"]), state["anchor"], bool(state["won"])
        reward = self.step_penalty + (0.0 if valid else self.invalid_penalty) + (self.win_reward if self.won else 0.0)
        info: dict[str, Any] = {"won": self.won, "admissible": valid, "command": command, "steps": self.steps}
        truncated = not self.won and self.steps >= self.max_steps
        if truncated:
            info["reason"] = "step_cap"
        self.over = self.won or truncated
        return StepResult(observation=self.observation(), reward=reward, done=self.won, truncated=truncated,
                          feedback=feedback, info=info)

    def expert_action(self) -> str | None:
        """The walkthrough's next command while the episode is on the walkthrough, else ``None``."""
        if self.over or self.off_walkthrough or self.expert_next >= len(self.walkthrough):
            return None
        return self.walkthrough[self.expert_next]
