"""Stop a run at a safe point on SIGTERM (what schedulers send before preemption) or SIGINT (Ctrl-C).

``GracefulStop`` is a context manager and a training-loop callback: inside it, the first SIGTERM or SIGINT only sets
a flag; at the end of the current RL iteration (or of the SFT stage) the loop writes a checkpoint (unless it has just
written one) and the run ends with ``RunStopped`` (the CLI prints one line and exits with 128 + the signal number,
143 for SIGTERM, 130 for SIGINT). A second signal interrupts at once (``KeyboardInterrupt``). Outside the main thread, or outside
the context, signals keep their usual behaviour.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class RunStopped(Exception):
    """The run stopped at a safe point after a signal; ``exit_code`` is 128 + the signal number."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = int(signum)
        self.exit_code = 128 + int(signum)

    def __reduce__(self) -> tuple[Any, ...]:  # crosses process boundaries (a trainer in a Ray actor)
        return (RunStopped, (str(self), self.signum))


class GracefulStop:
    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "GracefulStop":
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def reinstall(self) -> None:
        """Take SIGTERM / SIGINT back after a library installed its own handlers (Ray's driver does in
        ``ray.init``: its handler would end the process at once)."""
        if self._previous and threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                signal.signal(sig, self._handle)

    def on_backend_ready(self, trainer: Any) -> None:
        self.reinstall()

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum
        print(f"agentr1-core: {signal.Signals(signum).name} received; stopping after the current iteration with a "
              f"checkpoint (send it again to stop at once)", file=sys.stderr, flush=True)

    def on_iteration_end(self, trainer: Any, metrics: dict[str, Any]) -> None:
        self._stop_if_signalled(trainer, f"iteration {trainer.iteration}")

    def on_stage_end(self, trainer: Any, stage: str) -> None:
        self._stop_if_signalled(trainer, f"the {stage} stage")

    def _stop_if_signalled(self, trainer: Any, where: str) -> None:
        if self.signum is None:
            return
        last = trainer.save_checkpoint()  # the loop skips it when this iteration's checkpoint exists
        raise RunStopped(f"stopped by {signal.Signals(self.signum).name} after {where}; checkpoint {last}; "
                         f"continue with --resume", self.signum)
