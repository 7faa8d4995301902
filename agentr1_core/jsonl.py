"""Reading JSON Lines files: the one reader behind every JSONL file agentr1 reads (dataset rows, metrics, episodes,
catalogues, corpora).

``read_jsonl(path)`` returns the records as ``FileRows`` (a list that remembers each record's line, so a later check
can name ``FILE:LINE``). A line that is not JSON, or not an object where objects are expected, is never skipped in
silence: by default every such line is collected and ``JsonlError`` is raised once the whole file has been read,
with one line per problem (``FILE:LINE: not valid JSON (...)``, the first ``max_problems`` of them and a count of the
rest) and the good records (``error.rows``), so that a caller checking several things can report the other
problems of the same file too. ``on_bad="skip"`` reads files agentr1 did not necessarily write (a metrics file
edited by hand, a truncated last line) and hands the problems to ``warn`` instead. ``iter_jsonl`` streams a file
too large to hold and raises its unreadable lines together at the end.

Blank lines are ignored. ``NaN`` and ``Infinity`` are read as floats, as Python's ``json`` writes them. Nothing here
imports anything beyond the standard library and ``agentr1_core.errors``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from agentr1_core.errors import ConfigError

MAX_PROBLEMS = 10  # problem lines listed per file; the count of the others follows


class FileRows(list):
    """Records read from one file, with the line each came from, so that a bad record is reported as ``FILE:LINE``."""

    def __init__(self, path: Any, rows: Iterable[Any] = (), lines: Iterable[int] = ()) -> None:
        super().__init__(rows)
        self.path = str(path)
        self.lines = list(lines)

    def where(self, index: int) -> str | None:
        return f"{self.path}:{self.lines[index]}" if 0 <= index < len(self.lines) else None

    def add(self, record: Any, line: int) -> None:
        self.append(record)
        self.lines.append(line)


class JsonlError(ConfigError):
    """Lines of a JSONL file that could not be read; ``problems`` has one line each (capped), ``rows`` the records
    that could."""

    def __init__(self, problems: list[str], rows: FileRows) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems
        self.rows = rows


def _parse(line: str, objects: bool, decode: Callable[[str], Any]) -> tuple[Any, str | None]:
    try:
        record = decode(line)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at column {exc.colno})"
    except RecursionError:
        return None, "not valid JSON (nested too deeply)"
    if objects and not isinstance(record, dict):
        return None, f"each line must be a JSON object, got {type(record).__name__}"
    return record, None


def parse_jsonl(lines: Iterable[str], where: str, *, objects: bool = True, limit: int = 0, on_bad: str = "raise",
                warn: Callable[[str], None] | None = None, max_problems: int = MAX_PROBLEMS,
                transform: Callable[[Any, int], Any] | None = None,
                decode: Callable[[str], Any] = json.loads) -> FileRows:
    """The records of ``lines`` (the lines of the file ``where``; objects only unless ``objects=False``), at most
    ``limit`` (0: all).

    ``on_bad="raise"``: every unreadable line is collected and ``JsonlError`` raised after the whole input was read.
    ``on_bad="skip"``: unreadable lines are left out; ``warn`` (when given) gets one line naming the first and how
    many. ``transform(record, line)`` maps each record (a row with a default ``data_source``, a record checked field
    by field); a ``ValueError`` it raises makes that line a problem like a line that is not JSON. ``decode``: the
    JSON parser (``json.loads``; the viewer's keeps non-finite numbers as words)."""
    if on_bad not in ("raise", "skip"):
        raise ValueError(f"on_bad must be 'raise' or 'skip', got {on_bad!r}")
    rows = FileRows(where)
    problems: list[str] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        record, problem = _parse(line, objects, decode)
        if problem is None and transform is not None:
            try:
                record = transform(record, lineno)
            except ValueError as exc:
                problem = str(exc)
        if problem is not None:
            problems.append(f"{where}:{lineno}: {problem}")
            continue
        rows.add(record, lineno)
        if limit and len(rows) >= limit:
            break
    if problems and on_bad == "raise":
        raise JsonlError(capped(problems, max_problems, f"{where}: {{more}} more lines that could not be read"), rows)
    if problems and warn is not None:
        more = f" and {len(problems) - 1} more unreadable lines" if len(problems) > 1 else ""
        warn(f"skipped {problems[0]}{more}")
    return rows


def iter_jsonl(path: str | os.PathLike, *, objects: bool = True,
               max_problems: int = MAX_PROBLEMS) -> Iterator[tuple[str, Any]]:
    """``(FILE:LINE, record)`` for each readable line of ``path`` as it is read, for files too large to hold (a
    corpus streamed into an index); the unreadable lines are raised together as ``JsonlError`` once the end is
    reached. A missing file is a one-line ``ConfigError``."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"file not found: {file}")
    problems: list[str] = []
    with open(file, encoding="utf-8", errors="replace") as handle:
        for lineno, line in enumerate(handle, 1):
            if not line.strip():
                continue
            record, problem = _parse(line, objects, json.loads)
            if problem is not None:
                problems.append(f"{file}:{lineno}: {problem}")
                continue
            yield f"{file}:{lineno}", record
    if problems:
        raise JsonlError(capped(problems, max_problems, f"{file}: {{more}} more lines that could not be read"),
                         FileRows(file))


def read_jsonl(path: str | os.PathLike, **options: Any) -> FileRows:
    """``parse_jsonl`` over the file ``path`` (options as there); undecodable bytes become U+FFFD and a missing
    file is a one-line ``ConfigError``."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"file not found: {file}")
    with open(file, encoding="utf-8", errors="replace") as handle:
        return parse_jsonl(handle, str(file), **options)


def capped(lines: list[str], limit: int, more: str) -> list[str]:
    """The first ``limit`` of ``lines`` and, when there were more, ``more`` with ``{more}`` set to their count."""
    if len(lines) <= limit:
        return list(lines)
    return lines[:limit] + [more.format(more=len(lines) - limit)]
