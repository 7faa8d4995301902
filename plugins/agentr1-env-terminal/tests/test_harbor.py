"""The Harbor task-folder reader: a real-format task read, each problem of a bad folder named, the problems of
several folders raised together, the ``harbor`` dataset's rows, the expert's commands and the verifier's reward."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from agentr1_env_terminal.harbor import (HarborTaskError, copy_environment, load_tasks, read_task, run_tests,
                                         solution_commands, task_problems)

TOML = """\
version = "1.0"

[metadata]
author_name = "someone"
difficulty = "medium"
category = "file-operations"
tags = ["bash", "files"]

[verifier]
timeout_sec = 120.0

[agent]
timeout_sec = 900.0

[environment]
build_timeout_sec = 600.0
cpus = 2
memory_mb = 4096
storage_mb = 10240
"""


def make_task(root: Path, name: str = "hello", *, instruction: str = "Write hello to hello.txt.\n",
              toml: str | None = TOML, test: str | None = None, solve: str | None = "echo hello > hello.txt\n",
              app: dict[str, str] | None = None) -> Path:
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text("FROM python:3.12-slim\nWORKDIR /app\nCOPY app/ /app/\n")
    for rel, text in (app or {}).items():
        (task / "environment" / "app" / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / "environment" / "app" / rel).write_text(text)
    if instruction is not None:
        (task / "instruction.md").write_text(instruction)
    if toml is not None:
        (task / "task.toml").write_text(toml)
    if test is not False:
        (task / "tests").mkdir()
        (task / "tests" / "test.sh").write_text(test or textwrap.dedent("""\
            #!/bin/bash
            mkdir -p "$LOGS_DIR/verifier"
            if [ "$(cat hello.txt 2>/dev/null)" = hello ]; then echo 1 > "$LOGS_DIR/verifier/reward.txt"
            else echo 0 > "$LOGS_DIR/verifier/reward.txt"; fi
            """))
    if solve is not None:
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
    return task


def test_read_task_gives_the_fields_the_env_needs(tmp_path):
    path = make_task(tmp_path, instruction="<!-- canary GUID 1234 -->\n\nWrite hello to hello.txt.\n",
                     app={"data/a.txt": "x\n"})
    task = read_task(path)
    assert task.name == "hello" and task.dir == path.resolve()
    assert task.instruction == "Write hello to hello.txt.\n"  # the canary line goes, as in Harbor
    assert (task.verifier_timeout_sec, task.agent_timeout_sec, task.build_timeout_sec) == (120.0, 900.0, 600.0)
    assert (task.cpus, task.memory_mb, task.storage_mb, task.docker_image) == (2, 4096, 10240, None)
    assert (task.category, task.difficulty, task.tags) == ("file-operations", "medium", ("bash", "files"))
    assert task.env_files_dir == (path / "environment" / "app").resolve()
    assert task.test_script == (path / "tests" / "test.sh").resolve()
    assert task.solution_script == (path / "solution" / "solve.sh").resolve()
    assert task.config["metadata"]["author_name"] == "someone"
    assert task.data_source == "terminal/file-operations"


def test_defaults_of_a_sparse_task_toml_are_harbors(tmp_path):
    task = read_task(make_task(tmp_path, toml='[task]\nname = "org/sparse"\n\n[environment]\nmemory = "2G"\n',
                               solve=None))
    assert task.name == "org/sparse"  # [task] name wins over the folder's, as in Harbor
    assert (task.verifier_timeout_sec, task.agent_timeout_sec, task.build_timeout_sec) == (600.0, None, 600.0)
    assert (task.cpus, task.memory_mb, task.category, task.tags) == (None, 2048, "", ())
    assert task.env_files_dir is None and task.solution_script is None and task.family == "task"


@pytest.mark.parametrize("change, problem", [
    (dict(instruction=None), "no instruction.md"),
    (dict(instruction="  \n"), "instruction.md is empty"),
    (dict(toml=None), "no task.toml"),
    (dict(toml="[verifier]\ntimeout_sec = = 3\n"), "task.toml is not valid TOML: .* line 2"),
    (dict(toml="[verifier]\ntimeout_sec = 0\n"), r"\[verifier\].timeout_sec must be a positive number, got 0"),
    (dict(toml="[verifier]\ntimeout_sec = -5.0\n"), "must be a positive number, got -5.0"),
    (dict(toml="[verifier]\ntimeout_sec = 'long'\n"), "must be a positive number, got 'long'"),
    (dict(toml="[verifier]\ntimeout_sec = 1e9\n"), r"timeout_sec = 1e\+09 is more than 86400 s"),
    (dict(toml="[agent]\ntimeout_sec = nan\n"), r"\[agent\].timeout_sec must be a positive number"),
    (dict(toml="[environment]\nmemory_mb = 1.5\n"), "memory_mb must be a positive integer"),
    (dict(toml="verifier = 3\n"), r"\[verifier\] must be a table"),
    (dict(test=False), "no tests/test.sh"),
    (dict(solve=None), "no solution/solve.sh"),
])
def test_each_problem_of_a_bad_folder_is_one_line_naming_it(tmp_path, change, problem):
    path = make_task(tmp_path, **change)
    problems = task_problems(path)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}: ")
    assert re.search(problem, problems[0]), problems[0]


def test_a_folder_without_environment_needs_a_docker_image(tmp_path):
    path = make_task(tmp_path)
    for file in (path / "environment").iterdir():
        file.unlink()
    (path / "environment").rmdir()
    assert task_problems(path) == [f"{path}: no environment/ folder and no [environment].docker_image"]
    (path / "task.toml").write_text('[environment]\ndocker_image = "python:3.12-slim"\n')
    assert task_problems(path) == [] and read_task(path).docker_image == "python:3.12-slim"


def test_every_problem_of_every_folder_is_raised_at_once(tmp_path):
    make_task(tmp_path, "a-good")
    make_task(tmp_path, "b-two-problems", instruction="", toml="[agent]\ntimeout_sec = -1\n")
    make_task(tmp_path, "c-no-tests", test=False, solve=None)
    with pytest.raises(HarborTaskError) as info:
        load_tasks(str(tmp_path))
    lines = str(info.value).splitlines()
    assert lines == info.value.problems and len(lines) == 4
    assert [line.split(": ")[0] for line in lines] == [str(tmp_path / f) for f in
                                                       ("b-two-problems", "b-two-problems", "c-no-tests",
                                                        "c-no-tests")]
    assert "instruction.md is empty" in lines[0] and "[agent].timeout_sec" in lines[1]
    assert "no tests/test.sh" in lines[2] and "no solution/solve.sh" in lines[3]
    assert len(load_tasks(str(tmp_path / "a-good"))) == 1  # a task folder itself is a dataset of one


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing", "no such folder of Harbor tasks"),
    (lambda p: p, "no task folders in it"),
])
def test_a_missing_or_empty_folder_is_one_clear_line(tmp_path, make, message):
    with pytest.raises(HarborTaskError) as info:
        load_tasks(str(make(tmp_path)))
    assert len(str(info.value).splitlines()) == 1 and message in str(info.value)


def test_load_tasks_rows_sorted_filtered_and_limited(tmp_path):
    for name, category in (("t2", "sort"), ("t1", "count"), ("t3", "count")):
        make_task(tmp_path, name, toml=f'[metadata]\ncategory = "{category}"\n')
    rows = load_tasks(str(tmp_path))
    assert [r["task_name"] for r in rows] == ["t1", "t2", "t3"]
    assert rows[0] == {"prompt": "Write hello to hello.txt.", "data_source": "terminal/count",
                       "env_kwargs": {"task_dir": str((tmp_path / "t1").resolve())}, "task_name": "t1"}
    assert [r["task_name"] for r in load_tasks(str(tmp_path), families=["count"])] == ["t1", "t3"]
    assert [r["task_name"] for r in load_tasks(str(tmp_path), limit=2)] == ["t1", "t2"]
    with pytest.raises(Exception, match="no tasks of \\['grep'\\]"):
        load_tasks(str(tmp_path), families=["grep"])


@pytest.mark.parametrize("script, expected", [
    ("set -euo pipefail\n# sort them\nsort names.txt > sorted.txt\n\nwc -l < sorted.txt > answer.txt\n",
     ["sort names.txt > sorted.txt", "wc -l < sorted.txt > answer.txt"]),
    ("for f in *.txt; do mv \"$f\" \"${f%.txt}.md\"; done\n", ['for f in *.txt; do mv "$f" "${f%.txt}.md"; done']),
    ("cat > answer.txt <<'EOF'\n42\nEOF\n", ["cat > answer.txt <<'EOF'\n42\nEOF"]),
    ("cd /app\nls > listing.txt\n", ["cd /app\nls > listing.txt"]),
    ("set -e\nif [ -f a ]; then\n  rm a\nfi\n", ["set -e\nif [ -f a ]; then\n  rm a\nfi"]),
    ("echo one \\\n  two > out.txt\n", ["echo one \\\n  two > out.txt"]),
    ("X=3\necho $X > out.txt\n", ["X=3\necho $X > out.txt"]),
    ("python3 - <<EOF\nprint(1)\nEOF\n", ["python3 - <<EOF\nprint(1)\nEOF"]),
])
def test_solution_commands_split_lines_or_keep_the_script_whole(tmp_path, script, expected):
    task = read_task(make_task(tmp_path, solve=script))
    assert solution_commands(task) == expected


def test_run_tests_follows_harbors_reward_rules(tmp_path, sandbox_factory):
    path = make_task(tmp_path, app={"seed.txt": "x\n"})
    task = read_task(path)
    box = sandbox_factory()
    box.start()
    try:
        copy_environment(task, box)
        assert (box.host_path("app") / "seed.txt").read_text() == "x\n"
        assert run_tests(task, box)[0] == 0.0
        for command in solution_commands(task):
            assert box.run(command).ok
        reward, result = run_tests(task, box)
        assert reward == 1.0 and result.info["reward_from"] == "reward.txt"
        assert (box.host_path("tests") / "test.sh").is_file()
        cases = [('echo \'{"reward": 0.25, "other": 1}\' > "$LOGS_DIR/verifier/reward.json"; exit 1', 0.25,
                  "reward.json"),
                 ("exit 0", 1.0, "exit code (no reward file)"), ("exit 3", 0.0, "exit code (no reward file)"),
                 ('echo oops > "$LOGS_DIR/verifier/reward.txt"', 1.0, "exit code (unreadable reward file")]
        for body, reward, source in cases:
            (path / "tests" / "test.sh").write_text(f"#!/bin/bash\n{body}\n")
            got, result = run_tests(task, box)
            assert (got, result.info["reward_from"][:len(source)]) == (reward, source), body
    finally:
        box.close()


def test_run_tests_passes_tests_and_logs_folders_and_verifier_env(tmp_path, sandbox_factory):
    path = make_task(tmp_path, toml='[verifier]\nenv = {GREETING = "hi"}\n',
                     test='#!/bin/bash\nprintf \'{"reward": 1, "cwd": "%s", "tests": "%s", "g": "%s"}\' '
                          '"$(pwd)" "$TESTS_DIR" "$GREETING" > "$LOGS_DIR/verifier/reward.json"\n')
    box = sandbox_factory()
    box.start()
    try:
        reward, _ = run_tests(read_task(path), box)
        written = json.loads((box.host_path("logs") / "verifier" / "reward.json").read_text())
        assert reward == 1.0
        assert written == {"reward": 1, "cwd": box.path("app"), "tests": box.path("tests"), "g": "hi"}
    finally:
        box.close()
