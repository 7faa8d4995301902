"""One ALFWorld text game, and the loop a game worker process runs.

``AlfworldGame`` loads a ``game.tw-pddl`` file through TextWorld's gym interface with ALFWorld's
``AlfredDemangler`` (readable entity names, without which walkthrough commands fail) and ``AlfredInfos`` wrappers,
and returns plain dicts (feedback, admissible commands, won, walkthrough, a state anchor) that cross a process pipe.
A loaded game can be reset again without re-reading and re-grounding the file: the gym env's ``reset`` always
reloads, so a repeated reset of the same game calls the wrapped batch env's ``reset`` directly.

``worker_main`` serves requests from ``agentr1_env_alfworld.pool`` over a ``multiprocessing`` pipe. It keeps the
games of open episodes and a small cache of finished ones for fast resets. It does not apply the step cap or
rewards (the env does) and knows nothing about prompts.
"""

from __future__ import annotations

import hashlib
import traceback
from collections import OrderedDict
from typing import Any

REQUESTED_EXTRAS = ["gamefile", "walkthrough"]
# Facts that record what the agent has looked at ("look" adds checked(location)); they change nothing the agent can
# do or see, so they are left out of the state anchor.
BOOKKEEPING_FACTS = ("checked(",)


def _state_anchor(facts: list[Any]) -> str:
    """A short digest of the PDDL state (every true fact but bookkeeping): equal anchors, same game state."""
    kept = sorted(f for f in map(str, facts) if not f.startswith(BOOKKEEPING_FACTS))
    digest = hashlib.sha1("\n".join(kept).encode("utf-8")).hexdigest()
    return digest[:20]


class AlfworldGame:
    """A single game file behind the TextWorld gym interface; ``reset``/``step`` return JSON-friendly dicts."""

    def __init__(self, gamefile: str) -> None:
        import textworld
        import textworld.gym
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=True, extras=REQUESTED_EXTRAS)
        env_id = textworld.gym.register_game(gamefile, infos, max_episode_steps=None,
                                             wrappers=[AlfredDemangler(), AlfredInfos])
        self.gamefile = gamefile
        self.env = textworld.gym.make(env_id)
        self.loaded = False

    def reset(self) -> dict[str, Any]:
        if not self.loaded:
            feedback, info = self.env.reset()  # loads (grounds) the game file, then resets
            self.loaded = True
        else:
            obs, infos = self.env.batch_env.reset()  # same game: skip the reload
            self.env.last_commands, self.env.obs = [None], obs
            feedback, info = obs[0], {k: v[0] for k, v in infos.items()}
        out = self._pack(feedback, info)
        out["walkthrough"] = list(info.get("extra.walkthrough") or [])
        return out

    def step(self, command: str) -> dict[str, Any]:
        feedback, _score, _done, info = self.env.step(command)
        return self._pack(feedback, info)

    @staticmethod
    def _pack(feedback: str, info: dict[str, Any]) -> dict[str, Any]:
        return {"feedback": feedback, "admissible": list(info.get("admissible_commands") or []),
                "won": bool(info.get("won")), "anchor": _state_anchor(info.get("facts") or [])}

    def close(self) -> None:
        try:
            self.env.close()
        except Exception:
            pass


class GameHost:
    """The games one worker holds: one per open episode plus up to ``cache_games`` finished ones to reuse."""

    def __init__(self, cache_games: int = 4) -> None:
        self.cache_games = cache_games
        self.open: dict[str, AlfworldGame] = {}
        self.idle: OrderedDict[str, list[AlfworldGame]] = OrderedDict()

    def _release(self, episode: str) -> None:
        game = self.open.pop(episode, None)
        if game is None:
            return
        self.idle.setdefault(game.gamefile, []).append(game)
        self.idle.move_to_end(game.gamefile)
        while sum(len(v) for v in self.idle.values()) > self.cache_games:
            oldest = next(iter(self.idle))
            self.idle[oldest].pop(0).close()
            if not self.idle[oldest]:
                del self.idle[oldest]

    def handle(self, op: str, episode: str, arg: Any) -> Any:
        if op == "reset":
            self._release(episode)
            cached = self.idle.get(arg)
            game = cached.pop() if cached else AlfworldGame(arg)
            if cached is not None and not cached:
                del self.idle[arg]
            self.open[episode] = game
            return game.reset()
        if op == "step":
            game = self.open.get(episode)
            if game is None:
                raise KeyError(f"no open game for episode {episode!r} (reset first)")
            return game.step(str(arg))
        if op == "close":
            self._release(episode)
            return None
        if op == "ping":
            return "pong"
        raise ValueError(f"unknown request {op!r}")


def worker_main(conn: Any, cache_games: int = 4) -> None:
    """Serve ``(request_id, op, episode, arg)`` tuples until the pipe closes; reply ``(request_id, ok, payload)``.
    A game error is sent back as text; the worker keeps serving."""
    host = GameHost(cache_games)
    import textworld.gym  # noqa: F401  (import once, before the first request is timed)

    while True:
        try:
            request_id, op, episode, arg = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = (request_id, True, host.handle(op, episode, arg))
        except Exception as exc:
            reply = (request_id, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}")
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            return
