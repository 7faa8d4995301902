"""Retrieval corpora in the JSONL line format ``{"id", "title"?, "contents"}`` (Search-R1 / FlashRAG wiki-18 style).

``contents`` may start with the quoted title on its own line (``"Title"\\ntext``), as in wiki-18; ``title`` is then
optional. ``text`` is accepted in place of ``contents``. A bad line is a ``CorpusError`` naming the file and line.

Passages are not kept in memory: ``scan_corpus`` records the byte offset of every line, and ``PassageStore`` reads a
passage back with ``os.pread`` (thread-safe, so concurrent searches share one open file). This module does not
tokenise or score anything.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

from agentr1_core.errors import UserError

SAMPLE_CORPUS = Path(__file__).parent / "data" / "hotpotqa_sample_corpus.jsonl"


class CorpusError(UserError):
    """A corpus or index problem, reported as one line (the CLI exits with code 2)."""


@dataclass
class Passage:
    id: str
    title: str
    text: str  # the body, without the leading title line

    def index_text(self) -> str:
        """What the index sees: title and body."""
        return f"{self.title}\n{self.text}" if self.title else self.text


def split_title(contents: str) -> tuple[str, str]:
    """``'"Title"\\nbody'`` -> ``("Title", "body")``; contents without a quoted first line -> ``("", contents)``."""
    first, sep, rest = contents.partition("\n")
    if sep and len(first) >= 2 and first.startswith('"') and first.endswith('"'):
        return first[1:-1], rest
    return "", contents


def parse_passage(record: object, where: str) -> Passage:
    """A ``Passage`` from one decoded corpus line; ``where`` (``file:line``) goes into the error message."""
    if not isinstance(record, dict):
        raise CorpusError(f"{where}: a corpus line must be a JSON object, got {type(record).__name__}")
    if "id" not in record or record["id"] is None or str(record["id"]) == "":
        raise CorpusError(f"{where}: missing field 'id'")
    contents = record.get("contents", record.get("text"))
    if not isinstance(contents, str) or not contents.strip():
        raise CorpusError(f"{where}: missing field 'contents' (a non-empty string; 'text' is also accepted)")
    title = record.get("title")
    if title is not None and not isinstance(title, str):
        raise CorpusError(f"{where}: field 'title' must be a string")
    quoted, body = split_title(contents)
    if title and quoted and quoted != title:
        body = contents  # the first line is not this passage's title: keep it
    return Passage(str(record["id"]), title or quoted, body.strip())


def decode_line(raw: bytes, where: str) -> Passage:
    try:
        record = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorpusError(f"{where}: not valid JSON ({getattr(exc, 'msg', exc)})") from exc
    return parse_passage(record, where)


def scan_corpus(path: str | os.PathLike) -> Iterator[tuple[int, Passage]]:
    """Yield ``(byte_offset, passage)`` for every non-blank line; raise ``CorpusError`` on the first bad line."""
    file = Path(path)
    if not file.is_file():
        raise CorpusError(f"corpus file not found: {file}")
    offset = 0
    with file.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            start, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            yield start, decode_line(raw, f"{file}:{lineno}")


def count_lines(path: str | os.PathLike) -> int:
    """Number of lines (for progress bars), counted in 1 MiB blocks."""
    n = 0
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            n += block.count(b"\n")
    return n


class PassageStore:
    """Random access to passages of a corpus file by position, through the byte offsets of its lines."""

    def __init__(self, corpus: str | os.PathLike, offsets: np.ndarray) -> None:
        self.corpus = Path(corpus)
        if not self.corpus.is_file():
            raise CorpusError(f"corpus file not found: {self.corpus}")
        self.offsets = offsets  # int64, one per passage, plus the file size at the end
        self._fd = os.open(self.corpus, os.O_RDONLY)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def get(self, position: int) -> Passage:
        start, end = int(self.offsets[position]), int(self.offsets[position + 1])
        raw = os.pread(self._fd, end - start, start)
        return decode_line(raw, f"{self.corpus} (passage {position})")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
