"""``agentr1-core new-plugin NAME --kind tool|env|reward|flow|sandbox [--tool TOOL ...]``: write an installable plugin
package that trains.

The package ``agentr1-NAME`` holds the component, ``plugin.py`` (its hook and the named configs), a named run config
``agentr1_NAME/configs/NAME.yaml`` that exercises the component (warm-start SFT on expert episodes, then GRPO, sized
for a 2-core CPU), a small seeded dataset (``data/train.jsonl``, ``data/val.jsonl``; every file under ``data/`` is
package data), a README and tests. Its text speaks of the component by the given name (``the NAME tool``); the
working example it trains (a unit converter, a guessing game, a graded reward or a flow on the calculator task) sits
in one marked ``EXAMPLE`` block per file, the part a user replaces. The shipped tests read the row counts and caps
they check from the run config. ``pip install ./agentr1-NAME`` makes the component and the config show in
``agentr1-core plugins`` and ``agentr1-core config list``; ``agentr1-core run NAME`` trains.

A sandbox package ships no rows: its example is a sandbox on this machine in the shape of a remote sandbox's adapter,
its config runs the terminal recipe of ``agentr1-env-terminal`` (a dependency of the package) in it, and its tests
check it against the ``Sandbox`` interface with agentr1-core alone, training nothing.

A tool package holds one tool named after the plugin, or the tools named by ``--tool`` (repeated): each its own class,
module (``<tool>.py``; ``tool.py`` when there is one), registration and tests, all given to the model by the run
config. Other kinds hold one component, named after the plugin.

Each kind is a module of this package (``tool``, ``env``, ``reward``, ``flow``, ``sandbox``) that exports ``KIND``: its
templates and the function that writes its rows; ``common`` has what every kind shares.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from agentr1_core.scaffold.common import Kind, render_package

KIND_MODULES = ("tool", "env", "reward", "flow", "sandbox")


def load_kind(kind: str) -> Kind:
    """The templates of ``kind`` (imported on use, so that ``agentr1-core --help`` stays light)."""
    import importlib

    return importlib.import_module(f"agentr1_core.scaffold.{kind}").KIND


def write_plugin(name: str, kind: str, directory: Path, tools: list[str] | None = None) -> Path:
    """Write the package folder ``directory/agentr1-NAME`` for a component of ``kind`` (for a tool package, the
    tools named ``tools``, default one named after the plugin); returns that folder."""
    if kind not in KIND_MODULES:
        raise ValueError(f"unknown kind {kind!r}; valid: {', '.join(KIND_MODULES)}")
    if not re.fullmatch(r"[a-z][a-z0-9_-]*", name):
        raise ValueError(f"plugin name {name!r} must be lower-case letters, digits, '-' or '_'")
    if tools and kind != "tool":
        raise ValueError(f"--tool is for --kind tool; a package of kind {kind} holds one component, named after "
                         f"the plugin")
    if tools:
        from agentr1_core.scaffold.tool import check_tools

        check_tools(list(tools))
    root = Path(directory) / f"agentr1-{name}"
    if root.exists():
        raise FileExistsError(f"{root} already exists")
    files = render_package(name, load_kind(kind), list(tools) if tools else None)
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _cmd(args: argparse.Namespace) -> int:
    from agentr1_core.errors import UserError

    try:
        root = write_plugin(args.name, args.kind, Path(args.dir), args.tools)
    except (ValueError, FileExistsError) as exc:
        raise UserError(str(exc)) from exc
    print(f"wrote {root}\nnext: pip install -e {root} && agentr1-core plugins && agentr1-core run {args.name}\n"
          f"tests: cd {root} && pytest")
    return 0


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="plugin name, e.g. inventory (the distribution is agentr1-NAME)")
    parser.add_argument("--kind", choices=KIND_MODULES, default="tool",
                        help="the component to write: a tool, an env, a reward function, an agent flow or a "
                             "sandbox (where an episode's commands run)")
    parser.add_argument("--tool", dest="tools", action="append", metavar="TOOL",
                        help="a tool of a tool package (repeat it for several: --tool forecast --tool alerts); "
                             "default one tool named after the plugin")
    parser.add_argument("--dir", default=".", help="where to create the package folder")
    parser.set_defaults(func=_cmd)
