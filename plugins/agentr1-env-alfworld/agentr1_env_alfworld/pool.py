"""A pool of game worker processes shared by every ALFWorld env in a process.

Loading a game grounds its PDDL problem (seconds), so games live in long-lived worker processes
(``multiprocessing``, ``spawn`` by default: safe next to torch and threads). An episode is pinned to one worker at
reset (the least busy one, preferring a worker that recently held the same game, whose cached copy resets faster);
a worker hosts many episodes and serves their requests in order. Callers ``await`` replies: a reader thread per
worker resolves the asyncio futures, so the event loop never blocks and other episodes keep stepping.

Failures never hang a run: a worker whose process exits fails every pending request of its episodes with
``WorkerLost`` (naming the exit code); a worker that makes no progress on a request for ``hang_timeout`` seconds is
killed the same way. Either way a fresh worker takes its slot at once. The pool does not retry requests; the env
decides (it truncates the episode).
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import multiprocessing
import threading
import time
from collections import OrderedDict
from typing import Any

from agentr1_env_alfworld.game import worker_main


class WorkerLost(RuntimeError):
    """The worker serving an episode crashed or hung; its games are gone."""


class GameError(RuntimeError):
    """The game raised while handling a request (the worker is fine)."""


class GameWorker:
    """One worker process, its pipe, and the requests waiting for its replies."""

    def __init__(self, ctx: Any, slot: int, cache_games: int) -> None:
        parent, child = ctx.Pipe()
        self.process = ctx.Process(target=worker_main, args=(child, cache_games), daemon=True,
                                   name=f"alfworld-game-worker-{slot}")
        self.process.start()
        child.close()
        self.slot = slot
        self.conn = parent
        self.lock = threading.Lock()
        self.pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future, float]] = {}
        self.ids = itertools.count()
        self.last_reply = time.monotonic()
        self.episodes: set[str] = set()
        self.recent_games: OrderedDict[str, None] = OrderedDict()
        self.cache_games = cache_games
        self.lost: str | None = None
        self.reader = threading.Thread(target=self._read, daemon=True, name=f"alfworld-reader-{slot}")
        self.reader.start()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def _read(self) -> None:
        while True:
            try:
                request_id, ok, payload = self.conn.recv()
            except (EOFError, OSError):
                self.process.join(timeout=2.0)
                self.fail(f"game worker process {self.pid} exited (exit code {self.process.exitcode})")
                return
            with self.lock:
                self.last_reply = time.monotonic()
                entry = self.pending.pop(request_id, None)
            if entry is not None:
                loop, fut, _sent = entry
                result = payload if ok else GameError(str(payload))
                _resolve(loop, fut, result)

    def fail(self, reason: str) -> None:
        """Mark the worker lost and fail every pending request with ``reason``."""
        with self.lock:
            if self.lost is None:
                self.lost = reason
            pending, self.pending = self.pending, {}
        for loop, fut, _sent in pending.values():
            _resolve(loop, fut, WorkerLost(self.lost))

    def kill(self, reason: str) -> None:
        self.fail(reason)
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5.0)
        try:
            self.conn.close()
        except OSError:
            pass

    def submit(self, op: str, episode: str, arg: Any) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self.lock:
            if self.lost is not None:
                raise WorkerLost(self.lost)
            request_id = next(self.ids)
            self.pending[request_id] = (loop, fut, time.monotonic())
            try:
                self.conn.send((request_id, op, episode, arg))
            except (BrokenPipeError, OSError) as exc:
                self.pending.pop(request_id, None)
                self.lost = f"game worker process {self.pid} is gone ({type(exc).__name__})"
                raise WorkerLost(self.lost) from exc
        return fut

    def stalled_for(self) -> float:
        """Seconds the request now being served has taken (0 when idle)."""
        with self.lock:
            if not self.pending:
                return 0.0
            oldest = min(sent for _loop, _fut, sent in self.pending.values())
            return time.monotonic() - max(oldest, self.last_reply)

    def note_game(self, gamefile: str) -> None:
        self.recent_games[gamefile] = None
        self.recent_games.move_to_end(gamefile)
        while len(self.recent_games) > max(1, self.cache_games):
            self.recent_games.popitem(last=False)


def _resolve(loop: asyncio.AbstractEventLoop, fut: asyncio.Future, result: Any) -> None:
    def apply() -> None:
        if fut.done():
            return
        if isinstance(result, BaseException):
            fut.set_exception(result)
        else:
            fut.set_result(result)

    if not loop.is_closed():
        try:
            loop.call_soon_threadsafe(apply)
        except RuntimeError:  # loop closed in between
            pass


class GamePool:
    """``workers`` game processes; ``assign`` pins an episode to one, ``call`` sends it a request."""

    def __init__(self, workers: int = 2, hang_timeout: float = 120.0, cache_games: int = 4,
                 start_method: str = "spawn", check_interval: float = 0.25) -> None:
        if workers < 1:
            raise ValueError(f"the game pool needs at least one worker, got {workers}")
        self.ctx = multiprocessing.get_context(start_method)
        self.hang_timeout = float(hang_timeout)
        self.cache_games = cache_games
        self.check_interval = check_interval
        self.lock = threading.Lock()
        self.slots: list[GameWorker] = [GameWorker(self.ctx, i, cache_games) for i in range(workers)]
        self.replaced = 0
        self.closed = False

    def _replace(self, worker: GameWorker, reason: str) -> None:
        worker.kill(reason)
        with self.lock:
            if self.closed or self.slots[worker.slot] is not worker:
                return
            self.slots[worker.slot] = GameWorker(self.ctx, worker.slot, self.cache_games)
            self.replaced += 1

    def assign(self, episode: str, gamefile: str) -> GameWorker:
        """The worker that will host ``episode``: live, least busy, preferring one that recently held the game."""
        with self.lock:
            if self.closed:
                raise RuntimeError("the game pool is closed")
            dead = [w for w in self.slots if w.lost is not None]
        for w in dead:
            self._replace(w, w.lost or "lost")
        with self.lock:
            least = min(len(w.episodes) for w in self.slots)
            warm = [w for w in self.slots if gamefile in w.recent_games and len(w.episodes) <= least + 1]
            worker = warm[0] if warm else min(self.slots, key=lambda w: len(w.episodes))
            worker.episodes.add(episode)
            worker.note_game(gamefile)
            return worker

    def release(self, worker: GameWorker, episode: str) -> None:
        with self.lock:
            worker.episodes.discard(episode)

    async def call(self, worker: GameWorker, op: str, episode: str, arg: Any = None) -> Any:
        """Send a request and await the reply; ``WorkerLost`` if the worker dies or hangs meanwhile."""
        fut = worker.submit(op, episode, arg)
        while True:
            try:
                return await asyncio.wait_for(asyncio.shield(fut), self.check_interval)
            except asyncio.TimeoutError:
                stalled = worker.stalled_for()
                if stalled > self.hang_timeout:
                    self._replace(worker, f"game worker process {worker.pid} hung: no reply for {stalled:.1f} s "
                                          f"(hang_timeout {self.hang_timeout:g} s); killed and replaced")

    def pids(self) -> list[int | None]:
        return [w.pid for w in self.slots]

    def close(self) -> None:
        with self.lock:
            self.closed = True
            slots = list(self.slots)
        for w in slots:
            w.kill("the game pool was closed")


_POOLS: dict[tuple, GamePool] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(workers: int = 2, hang_timeout: float = 120.0, cache_games: int = 4) -> GamePool:
    """The process-wide pool for these settings (created on first use, closed at interpreter exit)."""
    key = (workers, float(hang_timeout), cache_games)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None or pool.closed:
            pool = _POOLS[key] = GamePool(workers, hang_timeout, cache_games)
        return pool


def close_shared_pools() -> None:
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()


atexit.register(close_shared_pools)
