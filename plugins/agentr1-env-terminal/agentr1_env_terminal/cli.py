"""``agentr1-core terminal``: the recipe's generated tasks.

``terminal generate --split train|val|all --out DIR`` writes a split's task folders into ``DIR`` (``all``: into
``DIR/train`` and ``DIR/val``). ``terminal check DIR... [--sandbox local]`` runs, for every task folder, its tests
on the untouched task (they must give reward 0) and after the reference solution (reward 1), each in a fresh
sandbox exactly as the env does; it prints a table per family and the failing tasks by name, and exits 1 when any
fails. Folders that are not valid tasks are listed one line each, exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO


def cmd_generate(args: argparse.Namespace) -> int:
    from agentr1_env_terminal.tasks.generate import SPLITS, write_tasks

    splits = list(SPLITS) if args.split == "all" else [args.split]
    for split in splits:
        out = Path(args.out) / split if args.split == "all" else Path(args.out)
        folders = write_tasks(out, split, count=args.count, seed=args.seed)
        print(f"{split}: {len(folders)} tasks in {out}")
    return 0


def check_folders(folders: list[str], sandbox_factory, jobs: int = 1, out: TextIO | None = None) -> int:
    """``terminal check`` on folders of tasks with sandboxes from ``sandbox_factory``: 0 when every task is right,
    1 otherwise (task folders with problems raise ``HarborTaskError``, every problem at once)."""
    from agentr1_env_terminal.harbor import HarborTaskError, read_tasks
    from agentr1_env_terminal.tasks.verify import family_table, verify_tasks

    out = out or sys.stdout
    tasks, problems = [], []
    for folder in folders:
        try:
            tasks += read_tasks(folder)
        except HarborTaskError as exc:
            problems += exc.problems
    if problems:
        raise HarborTaskError(problems)
    verdicts = verify_tasks(tasks, sandbox_factory, jobs=jobs)
    print(family_table(verdicts), file=out)
    failed = [v for v in verdicts if not v.ok]
    for verdict in failed:
        print(f"FAIL {verdict.task.dir}: {verdict.detail}", file=out)
    print(f"{len(verdicts) - len(failed)} of {len(verdicts)} tasks pass" if failed else
          f"all {len(verdicts)} tasks pass: reward 0 untouched, 1 after the solution", file=out)
    return 1 if failed else 0


def cmd_check(args: argparse.Namespace) -> int:
    from agentr1_core.errors import UserError
    from agentr1_core.sandbox import SandboxUnavailable, build_sandbox

    try:
        build_sandbox(args.sandbox, where="--sandbox")  # refuses a sandbox that cannot run here, in one line
    except SandboxUnavailable as exc:
        raise UserError(str(exc)) from None
    return check_folders(args.folders, lambda: build_sandbox(args.sandbox, where="--sandbox"), jobs=args.jobs)


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="terminal_command", metavar="ACTION", required=True)
    gen = sub.add_parser("generate", help="write the generated shell tasks as Harbor task folders")
    gen.add_argument("--split", choices=["train", "val", "all"], default="all",
                     help="which split (all: DIR/train and DIR/val)")
    gen.add_argument("--out", required=True, metavar="DIR", help="the folder to write the task folders into")
    gen.add_argument("--seed", type=int, default=0, help="the generator's seed (default 0: the recipe's tasks)")
    gen.add_argument("--count", type=int, default=None, help="how many tasks (default: the split's size)")
    gen.set_defaults(func=cmd_generate)
    check = sub.add_parser("check", help="each task's tests: reward 0 untouched, 1 after its solution")
    check.add_argument("folders", nargs="+", metavar="DIR", help="a folder of task folders (or one task folder)")
    check.add_argument("--sandbox", default="local", help="the sandbox to run the tests in (default: local)")
    check.add_argument("--jobs", type=int, default=2, help="tasks checked at a time (default 2)")
    check.set_defaults(func=cmd_check)
