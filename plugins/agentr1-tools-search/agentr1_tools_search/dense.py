"""Optional dense retrieval: passages embedded with a local sentence-transformers model, searched with faiss.

Needs the ``dense`` extra (``pip install agentr1-tools-search[dense]``) and an embedding model the user has on disk
(a folder or any id their sentence-transformers can load). faiss and sentence-transformers are imported only when a
dense index is built or opened; without them the error says what to install. Vectors are L2-normalised and searched
by inner product (cosine similarity) with an exact ``IndexFlatIP``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from agentr1_tools_search.bm25 import INDEX_FORMAT, INDEX_VERSION, Hit, corpus_fingerprint, read_meta
from agentr1_tools_search.corpus import CorpusError, PassageStore, count_lines, scan_corpus

ENCODE_CHUNK = 1024


def _imports():
    try:
        import faiss
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise CorpusError("dense retrieval needs faiss and sentence-transformers: "
                          "pip install 'agentr1-tools-search[dense]'") from exc
    return faiss, SentenceTransformer


def build_dense_index(corpus: str | os.PathLike, out_dir: str | os.PathLike, model: str,
                      progress: bool = True, batch_size: int = 64) -> dict[str, Any]:
    """Embed every passage of ``corpus`` with ``model`` and save a faiss index in ``out_dir``."""
    faiss, SentenceTransformer = _imports()
    from tqdm.auto import tqdm

    if not model:
        raise CorpusError("a dense index needs an embedding model (dense_model / --dense-model)")
    corpus, out = Path(corpus), Path(out_dir)
    started = time.perf_counter()
    encoder = SentenceTransformer(model)
    offsets: list[int] = []
    chunk: list[str] = []
    index = None
    total = count_lines(corpus) if corpus.is_file() else None

    def flush() -> None:
        nonlocal index
        vecs = encoder.encode(chunk, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True)
        vecs = np.asarray(vecs, dtype=np.float32)
        if index is None:
            index = faiss.IndexFlatIP(vecs.shape[1])
        index.add(vecs)

    with tqdm(total=total, desc=f"embedding {corpus.name}", unit="passage", disable=not progress) as bar:
        for offset, passage in scan_corpus(corpus):
            offsets.append(offset)
            chunk.append(passage.index_text())
            if len(chunk) >= ENCODE_CHUNK:
                flush()
                bar.update(len(chunk))
                chunk = []
        if chunk:
            flush()
            bar.update(len(chunk))
    if index is None:
        raise CorpusError(f"{corpus}: the corpus has no passages")
    offsets.append(corpus.stat().st_size)
    out.mkdir(parents=True, exist_ok=True)
    faiss.write_index(index, str(out / "dense.faiss"))
    np.save(out / "offsets.npy", np.asarray(offsets, dtype=np.int64))
    meta = {"format": INDEX_FORMAT, "version": INDEX_VERSION, "retriever": "dense", "model": model,
            "num_passages": len(offsets) - 1, "build_seconds": round(time.perf_counter() - started, 3),
            **corpus_fingerprint(corpus)}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta


class DenseRetriever:
    """A loaded faiss index, its encoder and the corpus; same ``search`` interface as ``BM25Retriever``."""

    def __init__(self, index_dir: str | os.PathLike, corpus: str | os.PathLike | None = None,
                 model: str = "") -> None:
        faiss, SentenceTransformer = _imports()
        self.index_dir = Path(index_dir)
        self.meta = read_meta(self.index_dir)
        corpus_path = Path(corpus) if corpus else Path(self.meta["corpus"])
        self.encoder = SentenceTransformer(model or self.meta["model"])
        self.index = faiss.read_index(str(self.index_dir / "dense.faiss"))
        self.store = PassageStore(corpus_path, np.load(self.index_dir / "offsets.npy"))
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.store)

    def search(self, query: str, k: int = 3) -> list[Hit]:
        return self.search_many([query], k)[0]

    def search_many(self, queries: list[str], k: int = 3) -> list[list[Hit]]:
        k = max(1, min(int(k), len(self.store)))
        with self._lock:
            vecs = self.encoder.encode(list(queries), normalize_embeddings=True, convert_to_numpy=True)
        scores, docs = self.index.search(np.asarray(vecs, dtype=np.float32), k)
        return [[Hit(self.store.get(int(d)), float(s)) for d, s in zip(row_d, row_s) if d >= 0]
                for row_d, row_s in zip(docs, scores)]

    def close(self) -> None:
        self.store.close()
