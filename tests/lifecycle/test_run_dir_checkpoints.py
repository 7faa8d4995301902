"""``--resume`` accepts a run directory holding a complete checkpoint of either trainer (local ``step_N`` or verl
``verl_iter_N``) and refuses one holding only unfinished checkpoints."""

from __future__ import annotations

from agentr1_core.lifecycle.run_dir import VERL_STATE_FILE, has_checkpoint


def test_verl_checkpoints_count_only_when_complete(tmp_path):
    assert not has_checkpoint(tmp_path)
    unfinished = tmp_path / "checkpoints" / "verl_iter_000002.tmp"
    unfinished.mkdir(parents=True)
    (unfinished / VERL_STATE_FILE).write_text("{}", encoding="utf-8")
    assert not has_checkpoint(tmp_path)
    (tmp_path / "checkpoints" / "verl_iter_000003").mkdir()
    assert not has_checkpoint(tmp_path)  # no state file yet
    (tmp_path / "checkpoints" / "verl_iter_000003" / VERL_STATE_FILE).write_text("{}", encoding="utf-8")
    assert has_checkpoint(tmp_path)

