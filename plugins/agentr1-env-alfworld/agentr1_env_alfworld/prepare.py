"""``agentr1-core alfworld prepare --out DIR``: the full ALFWorld text games for the ``alfworld`` recipe.

Fetches the TextWorld-PDDL game archive of the original ALFWorld release (the file ``alfworld-download`` gets),
unpacks it into ``DIR`` (``DIR/json_2.1.1/<split>/<task>/<trial>/game.tw-pddl``), counts the games per split and
prints ``export ALFWORLD_DATA=DIR``. ``--source games=URL_OR_PATH`` replaces the original URL (a mirror, or an
archive downloaded before).
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from agentr1_core.fetch import FetchError, add_prepare_command, fetch, remove, sources_from_args, unpack_zip

from agentr1_env_alfworld.datasets import GAME_FILE

SOURCES = {"games": "https://github.com/alfworld/alfworld/releases/download/0.4.0/json_2.1.2_tw-pddl.zip"}


def games_per_split(root: Path) -> Counter[str]:
    """Games under ``root/json_2.1.1/<split>/...`` by split."""
    counts: Counter[str] = Counter()
    for game in (root / "json_2.1.1").rglob(GAME_FILE):
        counts[game.relative_to(root / "json_2.1.1").parts[0]] += 1
    return counts


def cmd_prepare(args: argparse.Namespace) -> int:
    out = Path(args.out).expanduser().resolve()
    source = sources_from_args(args, SOURCES)["games"]
    archive = fetch(source, out / ".download" / "games.zip", quiet=args.quiet)
    try:
        unpack_zip(archive, out)
    except Exception as exc:  # zipfile.BadZipFile and friends
        if isinstance(exc, FetchError):
            raise
        raise FetchError(f"{source}: not a zip archive of ALFWorld games ({exc})") from exc
    finally:
        remove(out / ".download")
    counts = games_per_split(out)
    if not counts:
        raise FetchError(f"{source}: no json_2.1.1/<split>/.../{GAME_FILE} in the archive")
    print("games: " + ", ".join(f"{split} {n}" for split, n in sorted(counts.items())))
    print(f"export ALFWORLD_DATA={out}")
    return 0


def register(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="alfworld_command", metavar="ACTION", required=True)
    add_prepare_command(sub, "fetch and unpack the full ALFWorld text games", SOURCES,
                        "folder to unpack the games into (then: export ALFWORLD_DATA=DIR)", cmd_prepare)
