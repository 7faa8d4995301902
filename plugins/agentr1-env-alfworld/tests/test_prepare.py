"""``agentr1-core alfworld prepare``: fetch and unpack the game archive (a zip of the shipped sample games stands in
for the original release URL, which is unreachable here) into the layout the recipe reads."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import agentr1_env_alfworld
from agentr1_env_alfworld.datasets import load_alfworld

SAMPLE = Path(agentr1_env_alfworld.__file__).parent / "data" / "alfworld_sample"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentr1_core.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=dict(os.environ), timeout=300)


def test_prepare_unpacks_the_games_for_alfworld_data(tmp_path):
    archive = tmp_path / "json_2.1.2_tw-pddl.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for game in sorted(SAMPLE.rglob("game.tw-pddl")):
            zf.write(game, game.relative_to(SAMPLE).as_posix())
    out = tmp_path / "alfworld_data"
    done = cli("alfworld", "prepare", "--out", str(out), "--source", f"games={archive.as_uri()}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "games: valid_seen 6" in done.stdout and done.stdout.strip().endswith(f"export ALFWORLD_DATA={out}")
    rows = load_alfworld(str(out), split="valid_seen")
    assert len(rows) == 6 and not (out / ".download").exists()


def test_an_archive_without_games_is_a_one_line_error(tmp_path):
    archive = tmp_path / "empty.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("README.txt", "no games here")
    done = cli("alfworld", "prepare", "--out", str(tmp_path / "o"), "--source", f"games={archive}", cwd=tmp_path)
    assert done.returncode == 2 and "no json_2.1.1/<split>/.../game.tw-pddl" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
