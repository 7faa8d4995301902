"""The order in which an RL run uses its training rows, and the pass-rate curriculum that may skip some of them.

``DataOrder``: the rows shuffled with the run's seed and reshuffled at every epoch; ``take(count)`` gives the next
rows, ``take_indexed`` the same with each row's index in the dataset. Its ``state_dict`` goes into every checkpoint,
so a resumed run takes exactly the rows the uninterrupted run would have.

``Curriculum`` (``data.curriculum``, prime-rl's difficulty pool and AReaL's rejection of solved prompts): after each
rollout, every row rolled out records one visit, its pass rate (the share of its sampled episodes that succeeded,
``Trajectory.success``, as the run's ``success_rate`` counts them; greedy baseline episodes left out). A row whose
last ``window`` visits were all solved (pass rate 1, ``skip_solved``) or all failed (pass rate 0, ``skip_failed``)
is passed over from then on: it has nothing left to teach a group baseline. Its history is part of the data
order's state, so resume is exact, rollouts ahead of the update included (the state is taken where the rows are).
When every row would be passed over, the curriculum steps aside for that draw rather than stop the run: the rows
are taken as without it, and ``curriculum/exhausted`` says so.

What it does not do: weight rows by difficulty, or bring a skipped row back later (none of its visits change).
"""

from __future__ import annotations

import random
import threading
from typing import Any, Sequence

from agentr1_core.rollout.driver import is_greedy_baseline


class Curriculum:
    def __init__(self, window: int = 2, skip_solved: bool = True, skip_failed: bool = True) -> None:
        if window < 1:
            raise ValueError("data.curriculum.window must be >= 1")
        self.window, self.skip_solved, self.skip_failed = int(window), bool(skip_solved), bool(skip_failed)
        self.history: dict[int, list[float]] = {}  # row index -> its last ``window`` pass rates, oldest first
        self.lock = threading.Lock()  # the pipeline's producer takes rows while the trainer reads the counts

    def record(self, index: int, pass_rate: float) -> None:
        with self.lock:
            rates = self.history.setdefault(int(index), [])
            rates.append(float(pass_rate))
            del rates[:-self.window]

    def verdict(self, index: int) -> str | None:
        """``solved`` or ``failed`` when the row is to be skipped, else None."""
        rates = self.history.get(int(index), [])
        if len(rates) < self.window:
            return None
        if self.skip_solved and all(r >= 1.0 for r in rates):
            return "solved"
        if self.skip_failed and all(r <= 0.0 for r in rates):
            return "failed"
        return None

    def skips(self, index: int) -> bool:
        return self.verdict(index) is not None

    def counts(self) -> dict[str, int]:
        with self.lock:
            verdicts = [self.verdict(i) for i in list(self.history)]
        return {"solved_rows": verdicts.count("solved"), "failed_rows": verdicts.count("failed")}

    def state_dict(self) -> dict[str, Any]:
        with self.lock:
            return {str(i): list(r) for i, r in self.history.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with self.lock:
            self.history = {int(i): [float(x) for x in r][-self.window:] for i, r in state.items()}


class DataOrder:
    """The training rows in the run's order (see the module docstring); ``curriculum`` may pass some over."""

    def __init__(self, rows: list[dict[str, Any]], seed: int, curriculum: Curriculum | None = None) -> None:
        self.rows = rows
        self.rng = random.Random(seed)
        self.order = list(range(len(rows)))
        self.rng.shuffle(self.order)
        self.epoch = 0
        self.cursor = 0
        self.curriculum = curriculum
        self.skipped = 0  # rows passed over since ``take_counts`` was last read
        self.exhausted = 0  # draws in which every row would have been passed over

    def take(self, count: int) -> list[dict[str, Any]]:
        return [row for _, row in self.take_indexed(count)]

    def take_indexed(self, count: int) -> list[tuple[int, dict[str, Any]]]:
        """The next ``count`` rows with their indices in the dataset, passing over those the curriculum skips."""
        skip = self.curriculum.skips if self.curriculum is not None else None
        if skip is not None and all(skip(i) for i in range(len(self.rows))):
            self.exhausted += 1  # nothing left to pass over to: take them as they come
            skip = None
        out: list[tuple[int, dict[str, Any]]] = []
        while len(out) < count:
            if self.cursor >= len(self.order):
                self.epoch += 1
                self.cursor = 0
                self.rng.shuffle(self.order)
            index = self.order[self.cursor]
            self.cursor += 1
            if skip is not None and skip(index):
                self.skipped += 1
                continue
            out.append((index, self.rows[index]))
        return out

    def record(self, indices: Sequence[int], prefix: str, trajectories: Sequence[Any]) -> None:
        """One visit of each row rolled out under ``prefix`` (rows ``indices``, in the order they were handed to
        the rollout: the driver's group ids are ``<prefix><position>``)."""
        if self.curriculum is None:
            return
        tally: dict[str, list[int]] = {}
        for traj in trajectories:
            if not is_greedy_baseline(traj):
                tally.setdefault(traj.group_id, []).append(int(traj.success()))
        for position, index in enumerate(indices):
            outcomes = tally.get(f"{prefix}{position}")
            if outcomes:
                self.curriculum.record(index, sum(outcomes) / len(outcomes))

    def take_counts(self) -> dict[str, int]:
        """``curriculum/*`` metrics since the last call: rows passed over, draws without a row left to pass over
        to, and the rows currently skipped as solved or failed. Empty without a curriculum."""
        if self.curriculum is None:
            return {}
        out = {"curriculum/skipped_rows": self.skipped, "curriculum/exhausted": self.exhausted,
               **{f"curriculum/{k}": v for k, v in self.curriculum.counts().items()}}
        self.skipped = self.exhausted = 0
        return out

    def state_dict(self) -> dict[str, Any]:
        state = {"epoch": self.epoch, "cursor": self.cursor, "order": list(self.order), "rng": self.rng.getstate()}
        if self.curriculum is not None:
            state["curriculum"] = self.curriculum.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["order"]) != len(self.rows):
            raise ValueError(f"the checkpoint's data order has {len(state['order'])} rows, data.train has "
                             f"{len(self.rows)}")
        self.epoch, self.cursor, self.order = int(state["epoch"]), int(state["cursor"]), list(state["order"])
        self.rng.setstate(as_tuples(state["rng"]))
        if self.curriculum is not None:
            self.curriculum.load_state_dict(state.get("curriculum") or {})


def as_tuples(value: Any) -> Any:
    """A ``random.Random`` state that went through JSON (lists) back to the tuples ``setstate`` wants."""
    return tuple(as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value
