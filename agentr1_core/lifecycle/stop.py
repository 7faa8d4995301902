"""Stop a run at a safe point on SIGTERM (what schedulers send before preemption) or SIGINT (Ctrl-C).

``GracefulStop`` is a context manager and a trainer callback: inside it, the first SIGTERM or SIGINT only sets a
flag; at the end of the current RL iteration the trainer writes a checkpoint (unless it has just written one) and
the run ends with ``RunStopped`` (the CLI prints one line and exits with 128 + the signal number, 143 for SIGTERM,
130 for SIGINT). A second signal interrupts at once (``KeyboardInterrupt``). Outside the main thread, or outside
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
        self.exit_code = 128 + int(signum)


class GracefulStop:
    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "GracefulStop":
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

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
        if self.signum is None:
            return
        from agentr1_core.lifecycle.checkpoint import latest_checkpoint

        run_dir, save = getattr(trainer, "run_dir", None), getattr(trainer, "save_checkpoint", None)
        last = latest_checkpoint(run_dir) if run_dir is not None else None
        if callable(save) and (last is None or int(last.name.split("_")[-1]) != int(trainer.iteration)):
            last = save()
        raise RunStopped(f"stopped by {signal.Signals(self.signum).name} after iteration {trainer.iteration}; "
                         f"checkpoint {last}; continue with --resume", self.signum)
