"""The pass-rate curriculum (``data.curriculum``, ``trainers.data_order``): rows solved or failed on each of their
last ``window`` visits are passed over; the pool's state is in the checkpoint, so a resumed run takes the rows the
uninterrupted one took. Unit checks of the rules, then real runs of the tiny model through the CLI."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from agentr1_core.cli import main
from agentr1_core.mdp import Step, Trajectory
from agentr1_core.rollout.driver import GREEDY_INFO_KEY
from agentr1_core.trainers.data_order import Curriculum, DataOrder
from agentr1_core.trainers.dynamic_sampling import sample_rollout


def test_a_row_is_skipped_after_window_visits_all_solved_or_all_failed():
    cur = Curriculum(window=2)
    cur.record(0, 1.0)
    assert not cur.skips(0)  # one visit of two
    cur.record(0, 1.0)
    assert cur.verdict(0) == "solved"
    for rate in (0.0, 0.5, 0.0):
        cur.record(1, rate)
    assert cur.verdict(1) is None  # the window is the last two visits: 0.5 then 0.0
    cur.record(1, 0.0)
    assert cur.verdict(1) == "failed"
    assert cur.counts() == {"solved_rows": 1, "failed_rows": 1}
    only_failed = Curriculum(window=1, skip_solved=False)
    only_failed.record(0, 1.0)
    only_failed.record(1, 0.0)
    assert not only_failed.skips(0) and only_failed.skips(1)
    with pytest.raises(ValueError, match="window must be >= 1"):
        Curriculum(window=0)


def test_the_data_order_passes_skipped_rows_over_and_steps_aside_when_every_row_is_skipped():
    cur = Curriculum(window=1)
    order = DataOrder([{"i": i} for i in range(4)], seed=1, curriculum=cur)
    plain = DataOrder([{"i": i} for i in range(4)], seed=1)
    first = [i for i, _ in order.take_indexed(2)]
    assert first == [i for i, _ in plain.take_indexed(2)]  # nothing recorded yet: the same order
    cur.record(first[0], 1.0)
    rest = [i for i, _ in order.take_indexed(2)]
    assert first[0] not in rest and len(set(first + rest)) == 4  # the epoch's other two rows
    nxt = [i for i, _ in order.take_indexed(3)]  # the next epoch: three of the four, never the solved one
    assert first[0] not in nxt and len(set(nxt)) == 3
    assert order.take_counts() == {"curriculum/skipped_rows": 1, "curriculum/exhausted": 0,
                                   "curriculum/solved_rows": 1, "curriculum/failed_rows": 0}
    for i in range(4):
        cur.record(i, 0.0)
    assert len(order.take_indexed(2)) == 2  # every row failed: taken anyway, and said
    assert order.take_counts()["curriculum/exhausted"] == 1


def test_the_curriculum_state_goes_through_json_and_gives_the_same_next_rows():
    cur = Curriculum(window=2)
    order = DataOrder([{"i": i} for i in range(6)], seed=3, curriculum=cur)
    for i, _ in order.take_indexed(4):
        cur.record(i, 1.0)
        cur.record(i, 1.0 if i % 2 else 0.5)
    state = json.loads(json.dumps(order.state_dict()))
    twin = DataOrder([{"i": i} for i in range(6)], seed=99, curriculum=Curriculum(window=2))
    twin.load_state_dict(state)
    assert [i for i, _ in twin.take_indexed(5)] == [i for i, _ in order.take_indexed(5)]
    older = {k: v for k, v in state.items() if k != "curriculum"}  # a checkpoint from before the curriculum
    DataOrder([{"i": i} for i in range(6)], seed=3, curriculum=Curriculum()).load_state_dict(older)


def test_each_rollout_records_a_visit_of_its_rows_by_their_position_in_the_call():
    cur = Curriculum(window=1)
    data = DataOrder([{"r": 0}, {"r": 1}, {"r": 2}], seed=0, curriculum=cur)
    data.order = [2, 0, 1]

    def rollout(rows, n, sampling, desc, prefix, **kw):
        out = []
        for p, row in enumerate(rows):  # row 2's episodes succeed, the others fail; a greedy episode succeeds
            reward = 1.0 if row["r"] == 2 else 0.0
            out += [Trajectory(steps=[Step([1], [2], [-1.0])], uid=f"{prefix}{p}/{k}", group_id=f"{prefix}{p}",
                               final_reward=reward) for k in range(n)]
            greedy = Trajectory(steps=[Step([1], [2], [-1.0])], uid=f"{prefix}{p}/greedy", group_id=f"{prefix}{p}",
                                final_reward=1.0)
            greedy.info[GREEDY_INFO_KEY] = True
            out.append(greedy)
        return out, 0.5

    loop = SimpleNamespace(settings=SimpleNamespace(batch_size=2, n=2, dynamic_sampling=False), data=data,
                           sampling=None, rollout=rollout)
    out = sample_rollout(loop, 1, {})
    assert [r["r"] for r in out.rows] == [2, 0]
    assert cur.history == {2: [1.0], 0: [0.0]}
    assert out.metrics["curriculum/solved_rows"] == 1 and out.metrics["curriculum/failed_rows"] == 1


def iteration_rows(run_dir) -> dict[int, list[str]]:
    """The dataset rows (task ids) each RL iteration rolled out, from its kept episodes (all of them here)."""
    out = {}
    for path in sorted((run_dir / "episodes" / "train").glob("iter_*.jsonl")):
        episodes = [json.loads(line) for line in path.read_text().splitlines()]
        out[int(path.stem.split("_")[1])] = sorted({e["task_id"] for e in episodes})
    return out


def test_a_real_run_skips_what_it_solved_or_failed_and_resumes_with_the_same_rows(tmp_path, tiny_model_dir,
                                                                                  monkeypatch):
    """Four rows, two per iteration: iteration 3 starts the second epoch, where the rows whose one visit scored all
    0 or all 1 (a reward of even or odd reply token sums) are passed over. A run stopped after iteration 2 and
    resumed takes the same rows in iteration 3 as the run that went through."""
    monkeypatch.setenv("AGENTR1_PLUGIN_MODULES", "agentr1_core.testing.rewards")
    common = [f"model.path={tiny_model_dir}", "stages=[rl]", "data.val=null", "reward.name=response_parity",
              "data.train.train_size=4", "rollout.batch_size=2", "rollout.n=2", "rollout.max_new_tokens=6",
              "rollout.max_turns=1", "rollout.temperature=1.0", "data.curriculum.enabled=true",
              "data.curriculum.window=1", "trainer.keep_train_episodes=8", "trainer.checkpoint_every=1", "seed=2"]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert main(["run", "tiny", f"run_dir={whole}", "trainer.total_steps=3", *common]) == 0
    assert main(["run", "tiny", f"run_dir={parts}", "trainer.total_steps=2", *common]) == 0
    assert main(["run", "tiny", f"run_dir={parts}", "trainer.total_steps=3", "--resume", *common]) == 0
    records = [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines()]
    its = {r["iteration"]: r for r in records if "iteration" in r and "event" not in r}
    skipped = its[3]["curriculum/solved_rows"] + its[3]["curriculum/failed_rows"]
    assert skipped >= 1 and its[3]["curriculum/skipped_rows"] >= 1 and its[3]["curriculum/exhausted"] == 0
    rows = iteration_rows(whole)
    assert sorted(rows[1] + rows[2]) == sorted(set(rows[1] + rows[2])) and len(rows[1] + rows[2]) == 4
    assert len(rows[3]) == 2  # the epoch's rows that are left, then the next epoch's first that is not skipped
    assert iteration_rows(parts)[3] == rows[3]
