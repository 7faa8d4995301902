"""``agentr1-core terminal``: ``generate`` writes the splits, ``check`` passes the generated tasks, names a task whose
solution no longer passes (exit 1), and refuses an unknown sandbox or bad task folders in one line each (exit 2)."""

from __future__ import annotations

import io

import pytest

from agentr1_core.cli import main
from agentr1_env_terminal.cli import check_folders
from agentr1_env_terminal.harbor import HarborTaskError


def test_generate_all_writes_both_splits(tmp_path, capsys):
    assert main(["terminal", "generate", "--split", "all", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"train: 240 tasks in {tmp_path / 'train'}",
                                                    f"val: 48 tasks in {tmp_path / 'val'}"]
    assert len(list((tmp_path / "val").iterdir())) == 48
    assert main(["terminal", "generate", "--split", "val", "--count", "3", "--out", str(tmp_path / "few")]) == 0
    assert sorted(p.name for p in (tmp_path / "few").iterdir()) == ["0000-count", "0001-find", "0002-sort"]


def test_check_passes_good_tasks_and_names_a_broken_one(tmp_path, sandbox_factory):
    assert main(["terminal", "generate", "--split", "val", "--count", "16", "--out", str(tmp_path)]) == 0
    out = io.StringIO()
    assert check_folders([str(tmp_path)], sandbox_factory, out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["family", "tasks", "pass", "fail"]
    assert lines[1].split() == ["count", "2", "2", "0"] and lines[-1].startswith("all 16 tasks pass")
    (tmp_path / "0003-grep" / "solution" / "solve.sh").write_text("#!/bin/bash\necho 0 > answer.txt\n")
    out = io.StringIO()
    assert check_folders([str(tmp_path)], sandbox_factory, out=out) == 1
    assert f"FAIL {(tmp_path / '0003-grep').resolve()}: the solution gets reward 0" in out.getvalue()
    assert out.getvalue().splitlines()[-1] == "15 of 16 tasks pass"


def test_check_refuses_bad_folders_and_an_unknown_sandbox(tmp_path, sandbox_factory, capsys):
    (tmp_path / "broken").mkdir()
    with pytest.raises(HarborTaskError, match="broken: no instruction.md"):
        check_folders([str(tmp_path)], sandbox_factory)
    assert main(["terminal", "check", str(tmp_path), "--sandbox", "no-such-sandbox"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no-such-sandbox" in err[0]
