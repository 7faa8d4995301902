"""Fetch the full data of a recipe (the ``prepare`` commands of the recipe distributions).

``fetch(source, target)`` copies one file from an ``http(s)://`` or ``file://`` URL or a local path to ``target``,
through a temporary file renamed into place (an interrupted download never leaves a half-written file), and checks
its SHA-256 when one is given. ``add_prepare_command`` / ``sources_from_args`` give every ``prepare`` command the same
``--out`` and ``--source NAME=URL_OR_PATH`` options, so that a mirror or an already-downloaded file can stand in for
an original release URL. Nothing here runs at training time: installed recipes read shipped samples or the folder the
user points at.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable

from agentr1_core.errors import FetchError

CHUNK = 1 << 20


def _open(source: str):
    scheme = urllib.parse.urlparse(source).scheme
    if scheme in ("http", "https", "file"):
        return urllib.request.urlopen(source, timeout=60)  # noqa: S310 (the user chose the URL)
    return open(Path(source).expanduser(), "rb")


def fetch(source: str, target: Path, sha256: str = "", quiet: bool = False) -> Path:
    """Copy ``source`` (URL or path) to ``target`` atomically; a wrong SHA-256 or an unreachable source raises."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as out, _open(source) as src:
            while block := src.read(CHUNK):
                out.write(block)
                digest.update(block)
        if sha256 and digest.hexdigest() != sha256:
            raise FetchError(f"{source}: SHA-256 is {digest.hexdigest()}, expected {sha256}")
        os.replace(tmp, target)
    except FetchError:
        os.unlink(tmp)
        raise
    except OSError as exc:  # urllib's URLError is an OSError too
        os.unlink(tmp)
        raise FetchError(f"cannot fetch {source}: {getattr(exc, 'reason', None) or exc}") from exc
    if not quiet:
        print(f"fetched {source} -> {target} ({target.stat().st_size:,} bytes)")
    return target


def add_source_args(parser: argparse.ArgumentParser, sources: dict[str, str], out_help: str) -> None:
    """``--out DIR`` and ``--source NAME=URL_OR_PATH`` (repeatable) over the named ``sources``."""
    parser.add_argument("--out", required=True, help=out_help)
    names = ", ".join(f"{k} ({v})" for k, v in sources.items())
    parser.add_argument("--source", action="append", default=[], metavar="NAME=URL_OR_PATH",
                        help=f"use another URL or a local file for one input; inputs: {names}")
    parser.add_argument("--quiet", action="store_true", help="no per-file messages")


def add_prepare_command(subparsers: Any, help: str, sources: dict[str, str], out_help: str,
                        func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    """The ``prepare`` sub-command of a recipe's command group: ``--out``, ``--source`` and ``--quiet``."""
    parser = subparsers.add_parser("prepare", help=help)
    add_source_args(parser, sources, out_help)
    parser.set_defaults(func=func)
    return parser


def sources_from_args(args: argparse.Namespace, sources: dict[str, str]) -> dict[str, str]:
    chosen = dict(sources)
    for item in args.source:
        name, sep, value = item.partition("=")
        if not sep or name not in sources:
            raise FetchError(f"--source {item!r} must be NAME=URL_OR_PATH with NAME one of: {', '.join(sources)}")
        chosen[name] = value
    return chosen


def unpack_zip(archive: Path, out: Path) -> None:
    """Extract a zip archive into ``out`` (members that would land outside ``out`` are refused)."""
    import zipfile

    root = out.resolve()
    with zipfile.ZipFile(archive) as zf:
        for member in zf.namelist():
            if not (root / member).resolve().is_relative_to(root):
                raise FetchError(f"{archive}: member {member!r} points outside {out}")
        zf.extractall(out)


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
