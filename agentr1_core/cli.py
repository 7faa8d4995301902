"""The ``agentr1-core`` command line: run | config show | config list | plugins, plus subcommands that plugins add.

User mistakes (unknown plugin name, bad config key, type or value, missing file, unwritable or occupied run
directory, full disk, a usage mistake) print one line to stderr and exit with code 2, without a traceback (several
mistakes found at once, such as two misspelled names or two bad rows: one line each); overrides may come before or
after flags. A run stopped by SIGTERM/SIGINT at a safe point exits with 128 + the signal number.
``plugins`` imports no heavy library.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from agentr1_core import __version__
from agentr1_core.errors import UserError
from agentr1_core.plugins import get_registry

EXIT_USAGE = 2


def cmd_run(args: argparse.Namespace) -> int:
    from agentr1_core.config import config_from_items
    from agentr1_core.lifecycle.run_dir import resume_config
    from agentr1_core.runner import run

    given = config_from_items(args.items)
    cfg, source = given.cfg, given.run_folder
    if args.resume:
        cfg.trainer.resume = "auto"
        cfg = resume_config(cfg, given.overrides)
        source = str(cfg.run_dir)  # the resumed run's saved config decides what runs
    run(cfg, overwrite=args.overwrite, problems=given.problems, code_source=source, trust_code=args.trust_code)
    return 0


RUN_EPILOG = """\
CONFIG is a named config (agentr1-core config list), a YAML file, or a run directory (its saved config.yaml).
Overrides set any key of the resolved config (agentr1-core config show CONFIG prints it):
  key.path=value           trainer.total_steps=20  rollout.n=8  model.path=Qwen/Qwen2.5-0.5B-Instruct
  a component by name      env.name=my_env  reward=null  (a new name starts that component's params afresh)
  lists and mappings       stages=[rl]  env.tools=[calculator,search]  data.train={name: jsonl, path: rows.jsonl}
  list items               env.tools.0.timeout=5
With --resume, the run's saved config is used; overrides may only change how long it runs and how it checkpoints
and validates (trainer.total_steps, trainer.checkpoint_every, validation.every, ...); any other difference is
refused with the keys that differ.
A config read from a run folder (RUN_DIR, --resume) may name code to import (a gateway agent, agent_flow.agent):
each is printed with where it lives, and code outside the installed packages is refused unless --trust-code.
Checkpoints load as data only, always.
"""


def cmd_config_show(args: argparse.Namespace) -> int:
    """Print the resolved config after the checks ``run`` makes before building anything (values, names, params,
    model path): an invalid merge exits with code 2."""
    from omegaconf import OmegaConf

    from agentr1_core.config import config_from_items
    from agentr1_core.plugins import configure_registry
    from agentr1_core.preflight import preflight

    given = config_from_items(args.items)
    cfg = given.cfg
    preflight(cfg, configure_registry(cfg.plugins.allow, cfg.plugins.block), build=False, problems=given.problems)
    print(OmegaConf.to_yaml(cfg), end="")
    return 0


def config_rows() -> list[dict[str, Any]]:
    """``{name, distribution, plugin, description, path}`` of every available named config, sorted by name."""
    registry = get_registry()
    rows = []
    for name in registry.names("config"):
        owner = registry.components["config"][name]
        try:
            path = str(owner.spec.load()())
        except (OSError, ValueError, ModuleNotFoundError) as exc:
            path = f"(missing: {exc})"
        rows.append({"name": name, "distribution": owner.distribution, "plugin": owner.plugin,
                     "description": owner.spec.description, "path": path})
    return rows


def cmd_config_list(args: argparse.Namespace) -> int:
    rows = config_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'config':<16} {'distribution':<24} description")
    for r in rows:
        print(f"{r['name']:<16} {r['distribution']:<24} {r['description']}")
        if args.verbose:
            print(f"{'':<16} {'':<24} {r['path']}")
    return 0


def _plugins_table(rows: list[dict[str, Any]], verbose: bool) -> str:
    lines = [f"{'plugin':<20} {'distribution':<26} {'version':<9} {'status':<8} components"]
    for r in rows:
        comps = "; ".join(f"{k}: {', '.join(v)}" for k, v in r["components"].items()) or "-"
        lines.append(f"{r['plugin']:<20} {r['distribution']:<26} {r['version']:<9} {r['status']:<8} {comps}")
        if r["status"] == "error":
            err = r["error"].rstrip().splitlines()
            lines.extend("    " + ln for ln in (err if verbose else err[-1:]))
    return "\n".join(lines)


def cmd_plugins(args: argparse.Namespace) -> int:
    registry = get_registry()
    rows = registry.table()
    conflicts = [registry.conflict_message(kind, name) for kind, name in sorted(registry.conflicts)]
    if args.json:
        print(json.dumps({"plugins": rows, "conflicts": conflicts}, indent=2))
    else:
        print(_plugins_table(rows, args.verbose))
        for line in conflicts:
            print(f"conflict: {line}")
    return 0


class _Parser(argparse.ArgumentParser):
    """Usage mistakes are one line on stderr (exit code 2), like every other user error; no abbreviated flags."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"agentr1-core: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="agentr1-core", description="Train multi-turn tool-using LLM agents with RL.")
    parser.add_argument("--version", action="version", version=f"agentr1-core {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run_p = sub.add_parser("run", help="train: [CONFIG] [key=value ...] (no CONFIG: the embedded default)",
                           epilog=RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    run_p.add_argument("items", nargs="*", metavar="CONFIG_OR_OVERRIDE")
    run_p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in run_dir")
    run_p.add_argument("--overwrite", action="store_true",
                       help="start afresh in a run_dir that holds a previous run (its files are deleted)")
    run_p.add_argument("--trust-code", action="store_true",
                       help="import code that a run folder's config names outside the installed packages")
    run_p.set_defaults(func=cmd_run)

    cfg_p = sub.add_parser("config", help="inspect configs")
    cfg_sub = cfg_p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show_p = cfg_sub.add_parser("show", help="print the resolved config: [CONFIG] [key=value ...]")
    show_p.add_argument("items", nargs="*", metavar="CONFIG_OR_OVERRIDE")
    show_p.set_defaults(func=cmd_config_show)
    list_p = cfg_sub.add_parser("list", help="named configs of the installed distributions (run NAME)")
    list_p.add_argument("--json", action="store_true", help="machine-readable output")
    list_p.add_argument("--verbose", "-v", action="store_true", help="also the YAML file of each")
    list_p.set_defaults(func=cmd_config_list)

    plug_p = sub.add_parser("plugins", help="list installed plugins and their components")
    plug_p.add_argument("--json", action="store_true", help="machine-readable output")
    plug_p.add_argument("--verbose", "-v", action="store_true", help="full tracebacks of broken plugins")
    plug_p.set_defaults(func=cmd_plugins)

    registry = get_registry()
    for name in registry.names("command"):
        spec = registry.get("command", name)
        cmd_p = sub.add_parser(name, help=getattr(spec, "help", "") or spec.description,
                               description=spec.description)
        try:
            registry.load("command", name)(cmd_p)
        except UserError as exc:
            cmd_p.set_defaults(func=lambda _a, _e=exc: _fail(str(_e)))
    return parser


def _fail(message: str) -> int:
    """Each line of ``message`` (several problems found at once: one a line) as its own ``error:`` line."""
    for line in message.splitlines() or [message]:
        print(f"agentr1-core: error: {line}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra and isinstance(getattr(args, "items", None), list) and not any(x.startswith("-") for x in extra):
            args.items += extra  # overrides after a flag: run tiny --resume trainer.total_steps=1
        elif extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if not getattr(args, "func", None):
            parser.print_help()
            return EXIT_USAGE
        return int(args.func(args) or 0)
    except UserError as exc:  # ConfigError, PluginError, RunDirInUseError, ... (agentr1_core.errors)
        return _fail(str(exc))
    except BrokenPipeError:  # output piped into head & co: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError) as exc:
        return _fail(f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc))
    except OSError as exc:
        from agentr1_core.lifecycle.checkpoint import RunDirError

        if isinstance(exc, RunDirError):  # unwritable run directory or disk full, found before training starts
            return _fail(str(exc))
        raise
    except Exception as exc:
        from agentr1_core.lifecycle.stop import RunStopped

        if isinstance(exc, RunStopped):  # SIGTERM / SIGINT, stopped at a safe point with a checkpoint
            print(f"agentr1-core: {exc}", file=sys.stderr)
            return exc.exit_code
        raise
    except KeyboardInterrupt:
        print("agentr1-core: interrupted", file=sys.stderr)
        return 130


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
