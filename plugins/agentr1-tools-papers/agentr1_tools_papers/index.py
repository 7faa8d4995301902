"""``OfflineIndex``: a paper service over a corpus JSONL, with BM25 (``bm25s``) over titles and abstracts.

The papers are held in memory (id -> paper, with their citation lists when the corpus has them); the BM25 matrices
are built once per corpus and cached in a folder (``$AGENTR1_CACHE/papers`` or ``~/.cache/agentr1/papers``, or
``--out`` of ``agentr1-core papers index``), keyed by the corpus's path, size and modification time, so a changed
corpus is re-indexed, never served stale. Opened indexes are shared within a process (both paper tools and every
episode use one). A citation list may name papers outside the corpus: those are left out of ``neighbours``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from agentr1_tools_papers.papers import DIRECTIONS, CorpusError, Paper, read_corpus

INDEX_FORMAT = "agentr1-papers-bm25"
INDEX_VERSION = 1
NO_YEAR = np.iinfo(np.int32).min  # a paper without a year passes every year cut-off

_open: dict[str, "OfflineIndex"] = {}
_open_lock = threading.Lock()


def _tokenizer() -> Any:
    import Stemmer
    from bm25s.tokenization import Tokenizer

    return Tokenizer(stemmer=Stemmer.Stemmer("english"), stopwords="en")


def cache_root() -> Path:
    env = os.environ.get("AGENTR1_CACHE")
    return (Path(env) if env else Path.home() / ".cache" / "agentr1") / "papers"


def fingerprint(corpus: Path) -> dict[str, Any]:
    st = corpus.stat()
    return {"corpus": str(corpus.resolve()), "corpus_size": st.st_size, "corpus_mtime_ns": st.st_mtime_ns}


def default_index_dir(corpus: Path) -> Path:
    digest = hashlib.sha256(json.dumps(fingerprint(corpus), sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / f"{corpus.stem}-{digest}.bm25"


def index_text(paper: Paper) -> str:
    return f"{paper.title}. {paper.abstract}" if paper.abstract else paper.title


def build_index(corpus: str | os.PathLike, out_dir: str | os.PathLike | None = None,
                papers: list[Paper] | None = None, progress: bool = False) -> Path:
    """Write the BM25 index of ``corpus`` to ``out_dir`` (default: the cache folder); returns the folder."""
    import bm25s

    corpus = Path(corpus)
    papers = papers if papers is not None else list(read_corpus(corpus))
    if not papers:
        raise CorpusError(f"{corpus}: the corpus has no papers")
    out = Path(out_dir) if out_dir else default_index_dir(corpus)
    started = time.perf_counter()
    tokenizer = _tokenizer()
    ids = tokenizer.tokenize([index_text(p) for p in papers], update_vocab=True, return_as="ids",
                             show_progress=progress)
    model = bm25s.BM25()
    model.index(ids, show_progress=progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    tmp.mkdir(parents=True, exist_ok=True)
    # the vocabulary of an index built from token ids has int keys: bm25s writes them with orjson when that is
    # installed, which refuses int keys, and with json otherwise, which writes them as strings; strings either way
    model.vocab_dict = {str(k): v for k, v in model.vocab_dict.items()}
    model.save(str(tmp), show_progress=False)
    tokenizer.save_vocab(str(tmp))
    tokenizer.save_stopwords(str(tmp))
    meta = {"format": INDEX_FORMAT, "version": INDEX_VERSION, "num_papers": len(papers),
            "build_seconds": round(time.perf_counter() - started, 3), **fingerprint(corpus)}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    return out


def _read_meta(index_dir: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((index_dir / "meta.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return meta if meta.get("format") == INDEX_FORMAT and meta.get("version") == INDEX_VERSION else None


class OfflineIndex:
    """A ``PaperService`` over one corpus file. ``search`` is safe to call from several threads."""

    def __init__(self, corpus: str | os.PathLike, index_dir: str | os.PathLike | None = None) -> None:
        import bm25s

        self.corpus = Path(corpus)
        self.papers = list(read_corpus(self.corpus))
        if not self.papers:
            raise CorpusError(f"{self.corpus}: the corpus has no papers")
        self.by_id = {p.id: p for p in self.papers}
        if len(self.by_id) != len(self.papers):
            raise CorpusError(f"{self.corpus}: {len(self.papers) - len(self.by_id)} paper ids appear twice")
        self.years = np.array([NO_YEAR if p.year is None else p.year for p in self.papers], dtype=np.int64)
        folder = Path(index_dir) if index_dir else default_index_dir(self.corpus)
        meta = _read_meta(folder)
        now = fingerprint(self.corpus)
        if meta is None or (meta["corpus_size"], meta["corpus_mtime_ns"]) != (now["corpus_size"],
                                                                            now["corpus_mtime_ns"]):
            if index_dir:  # an index the user named must match; the cache is rebuilt silently
                if meta is None:
                    raise CorpusError(f"no paper index at {folder}; build one with: "
                                      f"agentr1-core papers index {self.corpus} --out {folder}")
                raise CorpusError(f"paper index {folder} is out of date: {self.corpus} changed after indexing; "
                                  f"rebuild with: agentr1-core papers index {self.corpus} --out {folder}")
            build_index(self.corpus, folder, papers=self.papers)
        self.index_dir = folder
        self.model = bm25s.BM25.load(str(folder), mmap=False, show_progress=False)
        self.tokenizer = _tokenizer()
        self.tokenizer.load_vocab(str(folder))
        self.tokenizer.load_stopwords(str(folder))
        self._lock = threading.Lock()  # the bm25s tokenizer keeps mutable state

    @classmethod
    def open(cls, corpus: str | os.PathLike, index_dir: str | os.PathLike | None = None) -> "OfflineIndex":
        """The process's shared index of ``corpus`` (built or loaded on first use)."""
        key = f"{Path(corpus).resolve()}|{index_dir or ''}"
        with _open_lock:
            if key not in _open:
                _open[key] = cls(corpus, index_dir)
            return _open[key]

    def __len__(self) -> int:
        return len(self.papers)

    def search(self, query: str, k: int, year_max: int | None = None) -> list[Paper]:
        """Top ``k`` papers with a positive BM25 score, published in or before ``year_max`` when given."""
        with self._lock:
            ids = self.tokenizer.tokenize([query], update_vocab=False, return_as="ids", show_progress=False)[0]
        if not ids:
            return []
        scores = np.asarray(self.model.get_scores_from_ids(ids), dtype=np.float64)
        if year_max is not None:
            scores[self.years > int(year_max)] = 0.0
        hits = np.flatnonzero(scores > 0)
        best = hits[np.lexsort((hits, -scores[hits]))][: max(int(k), 0)]
        return [self.papers[int(i)] for i in best]

    def paper(self, paper_id: str) -> Paper | None:
        return self.by_id.get(str(paper_id))

    def neighbours(self, paper_id: str, direction: str, k: int) -> list[Paper]:
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}")
        paper = self.by_id.get(str(paper_id))
        if paper is None:
            return []
        linked = (self.by_id.get(i) for i in getattr(paper, direction))
        return [p for p in linked if p is not None][: max(int(k), 0)]

    @property
    def has_citations(self) -> bool:
        return any(p.references or p.citations for p in self.papers)


def forget_open_indexes() -> None:
    """Drop the process-wide cache (tests use it after rewriting a corpus)."""
    with _open_lock:
        _open.clear()
