"""One event loop on a thread of its own, where a source's MCP sessions live.

An MCP client session is bound to the event loop that opened it, while episodes run on the rollout's loop (and a
Ray worker's, and the checks before a run on none at all). ``LoopThread`` keeps the sessions on one loop for the
life of the source: ``submit`` hands it a coroutine from any thread and returns a ``concurrent.futures.Future``;
calls submitted by concurrent episodes run concurrently there. Cancelling that future (an episode's tool timeout)
cancels the coroutine on the loop. The thread also starts the stdio servers, so that their parent-death signal
(``launcher``) fires when it ends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Coroutine


class LoopThread:
    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future:
        """Run ``coro`` on the loop; its future, from any thread."""
        if not self.running:
            coro.close()
            raise RuntimeError("the MCP event loop is stopped")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float | None = None) -> Any:
        """Run ``coro`` on the loop and wait for its result (from a thread other than the loop's)."""
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise

    def stop(self, timeout: float = 5.0) -> None:
        """Cancel what still runs on the loop, stop it and wait for the thread; safe to call twice."""
        if not self.running:
            return

        async def cancel_the_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            self.run(cancel_the_rest(), timeout)
        except (concurrent.futures.TimeoutError, RuntimeError):
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
