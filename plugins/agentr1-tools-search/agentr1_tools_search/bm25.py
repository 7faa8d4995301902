"""Sparse retrieval with ``bm25s``: build an index from a JSONL corpus, save it in a folder, load and query it.

The index folder holds the bm25s matrices, the tokenizer vocabulary (English stop words, Snowball stemmer from
PyStemmer), the byte offsets of the corpus lines and ``meta.json`` (corpus path, size and mtime, passage count). The
passages themselves stay in the corpus file. A corpus that changed after indexing is an error telling how to rebuild.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentr1_tools_search.corpus import CorpusError, Passage, PassageStore, count_lines, scan_corpus

INDEX_FORMAT = "agentr1-bm25"
INDEX_VERSION = 1
STEMMER_LANGUAGE = "english"
STOPWORDS = "en"
TOKENIZE_CHUNK = 8192


@dataclass
class Hit:
    """One retrieved passage with its score (higher is better)."""

    passage: Passage
    score: float

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.passage.id, "title": self.passage.title, "text": self.passage.text, "score": self.score}


def _tokenizer():
    import Stemmer
    from bm25s.tokenization import Tokenizer

    return Tokenizer(stemmer=Stemmer.Stemmer(STEMMER_LANGUAGE), stopwords=STOPWORDS)


def corpus_fingerprint(corpus: Path) -> dict[str, Any]:
    st = corpus.stat()
    return {"corpus": str(corpus.resolve()), "corpus_size": st.st_size, "corpus_mtime_ns": st.st_mtime_ns}


def build_bm25_index(corpus: str | os.PathLike, out_dir: str | os.PathLike, progress: bool = True,
                     k1: float = 1.5, b: float = 0.75) -> dict[str, Any]:
    """Index ``corpus`` into ``out_dir`` (written to a temporary folder, then renamed). Returns the metadata."""
    import bm25s
    from tqdm.auto import tqdm

    corpus, out = Path(corpus), Path(out_dir)
    started = time.perf_counter()
    if not corpus.is_file():
        raise CorpusError(f"corpus file not found: {corpus}")
    total = count_lines(corpus)
    tokenizer = _tokenizer()
    offsets: list[int] = []
    token_ids: list[list[int]] = []
    chunk: list[str] = []
    with tqdm(total=total, desc=f"indexing {corpus.name}", unit="passage", disable=not progress) as bar:
        for offset, passage in scan_corpus(corpus):
            offsets.append(offset)
            chunk.append(passage.index_text())
            if len(chunk) >= TOKENIZE_CHUNK:
                token_ids.extend(tokenizer.tokenize(chunk, update_vocab=True, return_as="ids", show_progress=False))
                bar.update(len(chunk))
                chunk = []
        if chunk:
            token_ids.extend(tokenizer.tokenize(chunk, update_vocab=True, return_as="ids", show_progress=False))
            bar.update(len(chunk))
    if not offsets:
        raise CorpusError(f"{corpus}: the corpus has no passages")
    offsets.append(corpus.stat().st_size)
    retriever = bm25s.BM25(k1=k1, b=b)
    retriever.index(token_ids, show_progress=progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    # the vocabulary of an index built from token ids has int keys: bm25s writes them with orjson when that is
    # installed, which refuses int keys, and with json otherwise, which writes them as strings; strings either way
    retriever.vocab_dict = {str(k): v for k, v in retriever.vocab_dict.items()}
    retriever.save(str(tmp), show_progress=False)
    tokenizer.save_vocab(str(tmp))
    tokenizer.save_stopwords(str(tmp))
    np.save(tmp / "offsets.npy", np.asarray(offsets, dtype=np.int64))
    meta = {"format": INDEX_FORMAT, "version": INDEX_VERSION, "retriever": "bm25", "num_passages": len(offsets) - 1,
            "stemmer": STEMMER_LANGUAGE, "stopwords": STOPWORDS, "k1": k1, "b": b,
            "build_seconds": round(time.perf_counter() - started, 3), **corpus_fingerprint(corpus)}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2))
    if out.exists():
        import shutil

        shutil.rmtree(out)
    os.replace(tmp, out)
    return meta


def read_meta(index_dir: Path) -> dict[str, Any]:
    meta_file = index_dir / "meta.json"
    if not meta_file.is_file():
        raise CorpusError(f"no search index at {index_dir} (meta.json missing); build one with: "
                          f"agentr1-core search index CORPUS.jsonl --out {index_dir}")
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as exc:
        raise CorpusError(f"{meta_file}: not valid JSON ({exc.msg})") from exc
    if meta.get("format") != INDEX_FORMAT:
        raise CorpusError(f"{index_dir} is not an agentr1 search index (format {meta.get('format')!r})")
    return meta


def top_k_positive(scores: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` highest positive scores, best first (ties: lower position first).

    Only the non-zero scores are partitioned: most documents score 0 for a query, and numpy's partition is slow
    on arrays full of equal values.
    """
    candidates = np.flatnonzero(scores > 0)
    if candidates.size > k:
        values = scores[candidates]
        kth = np.partition(values, values.size - k)[values.size - k]  # the k-th highest score
        above = candidates[values > kth]
        candidates = np.concatenate([above, candidates[values == kth][: k - above.size]])
    return candidates[np.lexsort((candidates, -scores[candidates]))]


class BM25Retriever:
    """A loaded BM25 index plus random access to its corpus. ``search`` is safe to call from several threads."""

    def __init__(self, index_dir: str | os.PathLike, corpus: str | os.PathLike | None = None) -> None:
        import bm25s

        self.index_dir = Path(index_dir)
        meta = read_meta(self.index_dir)
        corpus_path = Path(corpus) if corpus else Path(meta["corpus"])
        if not corpus_path.is_file():
            raise CorpusError(f"the corpus of index {self.index_dir} is missing: {corpus_path}")
        now = corpus_fingerprint(corpus_path)
        if (now["corpus_size"], now["corpus_mtime_ns"]) != (meta["corpus_size"], meta["corpus_mtime_ns"]):
            raise CorpusError(f"index {self.index_dir} is out of date: {corpus_path} changed after indexing; "
                              f"rebuild with: agentr1-core search index {corpus_path} --out {self.index_dir}")
        self.meta = meta
        self.model = bm25s.BM25.load(str(self.index_dir), mmap=False, show_progress=False)
        self.tokenizer = _tokenizer()
        self.tokenizer.load_vocab(str(self.index_dir))
        self.tokenizer.load_stopwords(str(self.index_dir))
        self.store = PassageStore(corpus_path, np.load(self.index_dir / "offsets.npy"))
        self._lock = threading.Lock()  # the bm25s tokenizer keeps mutable state

    def __len__(self) -> int:
        return len(self.store)

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """Top ``k`` passages with a positive score (an all-stop-word or unknown-word query finds nothing)."""
        return self.search_many([query], k)[0]

    def search_many(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        k = max(1, min(int(k), len(self.store)))
        with self._lock:
            ids = self.tokenizer.tokenize(list(queries), update_vocab=False, return_as="ids", show_progress=False)
        out = []
        for query_ids in ids:
            scores = self.model.get_scores_from_ids(query_ids)
            out.append([Hit(self.store.get(int(d)), float(scores[d])) for d in top_k_positive(scores, k)])
        return out

    def close(self) -> None:
        self.store.close()
