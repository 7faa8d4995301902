"""The generated shell tasks: deterministic, train and val disjoint, the held-out family only in val, every task of
both splits right (its tests fail on the untouched folder and pass after the reference solution, run as the env
runs them), and the ``terminal_tasks`` dataset's cache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentr1_env_terminal.harbor import read_task, read_tasks, solution_commands
from agentr1_env_terminal.tasks.families import FAMILIES, HELD_OUT_FAMILIES, TRAIN_FAMILIES
from agentr1_env_terminal.tasks.generate import SPLITS, STAMP, instances, load_generated, write_tasks
from agentr1_env_terminal.tasks.verify import family_table, verify_tasks


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode & 0o777)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_same_bytes_other_seed_other_tasks(tmp_path):
    for split in SPLITS:
        write_tasks(tmp_path / "a" / split, split)
        write_tasks(tmp_path / "b" / split, split)
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
    write_tasks(tmp_path / "c", "train", count=20, seed=1)
    first = tree(tmp_path / "a" / "train")
    other = tree(tmp_path / "c")
    changed = [k for k in other if k.endswith("instruction.md") and other[k][0] != first[k][0]]
    assert len(changed) >= 15


def test_split_sizes_families_and_held_out_family():
    train, val = instances("train"), instances("val")
    assert (len(train), len(val)) == (240, 48)
    train_families = {inst.family for _, inst in train}
    val_families = [inst.family for _, inst in val]
    assert train_families == set(TRAIN_FAMILIES)
    assert set(val_families) == set(TRAIN_FAMILIES + HELD_OUT_FAMILIES)
    assert all(val_families.count(f) == 6 for f in set(val_families))
    assert set(HELD_OUT_FAMILIES).isdisjoint(train_families)
    assert set(FAMILIES) == set(TRAIN_FAMILIES + HELD_OUT_FAMILIES)


def test_no_instance_repeats_within_or_across_splits():
    train, val = instances("train"), instances("val")
    train_keys = [inst.key() for _, inst in train]
    val_keys = [inst.key() for _, inst in val]
    assert len(set(train_keys)) == len(train_keys) and len(set(val_keys)) == len(val_keys)
    assert not set(train_keys) & set(val_keys)
    # not even the same starting files under another instruction
    train_files = {tuple(sorted(inst.files.items())) for _, inst in train}
    assert not [name for name, inst in val if tuple(sorted(inst.files.items())) in train_files]


def test_instances_are_small_and_their_solutions_one_line_commands():
    for name, inst in instances("train") + instances("val"):
        assert len(inst.instruction) < 240 and inst.instruction.count(". ") <= 2, name
        assert 1 <= len(inst.solution) <= 3 and all("\n" not in c for c in inst.solution), name
        assert all(text.count("\n") <= 30 for text in inst.files.values()), name


def test_written_task_folder_is_harbor_format(tmp_path):
    folder = write_tasks(tmp_path, "train", count=1)[0]
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert {"instruction.md", "task.toml", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh"} <= set(files)
    assert any(f.startswith("environment/app/") for f in files)
    assert (folder / "environment" / "Dockerfile").read_text() == \
        "FROM python:3.12-slim\nWORKDIR /app\nCOPY app/ /app/\n"
    task = read_task(folder, require_solution=True)
    assert (task.category, task.family, task.verifier_timeout_sec, task.agent_timeout_sec) == \
        ("count", "count", 30.0, 120.0)
    assert task.tags == ("shell", "count", "train") and task.config["metadata"]["seed"] == 0
    assert solution_commands(task) == list(instances("train", count=1)[0][1].solution)


@pytest.mark.parametrize("split", [pytest.param("train", marks=pytest.mark.slow), "val"])  # train: ~15 s
def test_every_generated_task_fails_untouched_and_passes_after_its_solution(tmp_path, split, sandbox_factory):
    write_tasks(tmp_path, split)
    verdicts = verify_tasks(read_tasks(tmp_path), sandbox_factory, jobs=2)
    bad = [f"{v.task.name}: {v.detail}" for v in verdicts if not v.ok]
    assert not bad, family_table(verdicts) + "\n" + "\n".join(bad[:10])
    assert len(verdicts) == SPLITS[split][0]


def test_load_generated_writes_the_cache_once_and_again_when_stale(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTR1_CACHE_DIR", str(tmp_path))
    rows = load_generated("val")
    split_dir = tmp_path / "terminal-tasks" / "v1" / "val"
    assert len(rows) == 48 and rows[0]["env_kwargs"]["task_dir"] == str((split_dir / "0000-count").resolve())
    assert rows[0]["data_source"] == "terminal/count" and rows[0]["task_name"] == "0000-count"
    marker = split_dir / "0000-count" / "marker"
    marker.write_text("kept while the stamp matches")
    assert load_generated("val", limit=5) == rows[:5] and marker.exists()
    heldout = load_generated("val", families=["head_tail"])
    assert len(heldout) == 6 and {r["data_source"] for r in heldout} == {"terminal/head_tail"}
    stamp = json.loads((split_dir / STAMP).read_text())
    (split_dir / STAMP).write_text(json.dumps({**stamp, "code": "older"}))
    assert load_generated("val") == rows and not marker.exists()  # written again
    assert sorted(p.name for p in split_dir.parent.iterdir()) == ["val"]  # no temporary folder left
    assert len(load_generated("train", root=str(tmp_path / "elsewhere"), limit=3)) == 3
    assert (tmp_path / "elsewhere" / "train" / STAMP).is_file()
