"""Dataset loaders for the multi-hop QA recipe: HotpotQA, MuSiQue, 2WikiMultihopQA, NQ-open, Bamboogle, plain JSONL.

Each returns rows ``{prompt, agent_name, data_source, reward_model: {style, ground_truth: [aliases]}, env_kwargs,
extra_info: {id, question, supporting_titles, ...}}``. ``supporting_titles`` (gold paragraphs, in reasoning order
where the data says it) feed the env's scripted expert and retrieval metrics. Files may be a JSON list (or
``{"data": [...]}``) or JSONL; a bad record is an error naming the file and the line or record number. ``hotpotqa``
with no path reads the shipped sample (``split: dev`` = 50 dev questions, ``train`` = 100 train questions).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Iterator

from agentr1_core.errors import UserError
from agentr1_core.jsonl import JsonlError, iter_jsonl

DATA_DIR = Path(__file__).parent / "data"
SAMPLES = {"dev": DATA_DIR / "hotpotqa_dev50.json", "train": DATA_DIR / "hotpotqa_train100.json"}
AGENT_NAME = "agent_env_loop"


class DatasetError(UserError):
    """A dataset file problem (one line, naming the file and record)."""


def read_records(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, record)`` for each record of a JSON list / JSONL / CSV file; ``where`` is ``file:line``."""
    file = Path(path)
    if not file.is_file():
        raise DatasetError(f"dataset file not found: {file}")
    if file.suffix == ".csv":
        with file.open(encoding="utf-8", newline="") as fh:
            for i, rec in enumerate(csv.DictReader(fh), 2):
                yield f"{file}:{i}", {k.strip().lower(): v for k, v in rec.items() if k}
        return
    with file.open(encoding="utf-8") as fh:
        head = fh.read(4096).lstrip()
    if head.startswith("[") or (head.startswith("{") and file.suffix == ".json"):
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{file}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
        if isinstance(data, dict):
            data = data.get("data", [data])
        for i, rec in enumerate(data):
            if not isinstance(rec, dict):
                raise DatasetError(f"{file}: record {i}: expected a JSON object")
            yield f"{file}: record {i}", rec
        return
    try:  # every line that is not a JSON object, one file:line each, once the file was read
        yield from iter_jsonl(file)
    except JsonlError as exc:
        raise DatasetError(str(exc)) from None


def qa_row(question: str, answers: list[str], source: str, qid: str, titles: list[str] | None = None,
           **extra: Any) -> dict[str, Any]:
    return {
        "prompt": question,
        "agent_name": AGENT_NAME,
        "data_source": source,
        "reward_model": {"style": "rule", "ground_truth": answers},
        "env_kwargs": {},
        "extra_info": {"id": qid, "question": question, "supporting_titles": list(titles or []), **extra},
    }


def _answers(rec: dict[str, Any], where: str) -> list[str]:
    for key in ("answers", "golden_answers", "answer"):
        if key in rec and rec[key] is not None:
            value = rec[key]
            out = [value] if isinstance(value, (str, int, float)) else list(value)
            out = [str(a) for a in out if str(a).strip()]
            aliases = rec.get("answer_aliases") or []
            out += [str(a) for a in aliases if str(a) not in out]
            if out:
                return out
    raise DatasetError(f"{where}: missing field 'answer' (or 'answers' / 'golden_answers')")


def _question(rec: dict[str, Any], where: str) -> str:
    q = rec.get("question")
    if not isinstance(q, str) or not q.strip():
        raise DatasetError(f"{where}: missing field 'question'")
    return q.strip()


def _ordered_unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _take(rows: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    return rows[:limit] if limit and limit > 0 else rows


def load_hotpotqa(path: str = "", split: str = "dev", limit: int = 0,
                  data_source: str = "hotpotqa") -> list[dict[str, Any]]:
    """HotpotQA official format (``_id``, ``question``, ``answer``, ``supporting_facts``, ``context``?), or any
    file with ``question``/``answer`` (2WikiMultihopQA uses the same format)."""
    if not path:
        if split not in SAMPLES:
            raise DatasetError(f"hotpotqa: no shipped sample for split {split!r}; valid: {', '.join(SAMPLES)}")
        path = str(SAMPLES[split])
    rows = []
    for i, (where, rec) in enumerate(read_records(path)):
        facts = rec.get("supporting_facts") or []
        titles = _ordered_unique([str(f[0]) for f in facts if isinstance(f, (list, tuple)) and f])
        rows.append(qa_row(_question(rec, where), _answers(rec, where), data_source,
                           str(rec.get("_id", rec.get("id", rec.get("idx", i)))), titles,
                           type=rec.get("type", ""), level=rec.get("level", "")))
        if limit and len(rows) >= limit:
            break
    return rows


def load_2wiki(path: str = "", limit: int = 0, data_source: str = "2wikimultihopqa") -> list[dict[str, Any]]:
    """2WikiMultihopQA: the HotpotQA-style official format, or ``{question, answer}`` JSONL."""
    if not path:
        raise DatasetError("2wiki: set data.*.path to a 2WikiMultihopQA file")
    return load_hotpotqa(path, limit=limit, data_source=data_source)


def load_musique(path: str = "", limit: int = 0, data_source: str = "musique",
                 include_unanswerable: bool = False) -> list[dict[str, Any]]:
    """MuSiQue official format (``paragraphs`` with ``is_supporting``, ``question_decomposition``,
    ``answer_aliases``, ``answerable``); supporting titles follow the decomposition order."""
    if not path:
        raise DatasetError("musique: set data.*.path to a MuSiQue file")
    rows = []
    for i, (where, rec) in enumerate(read_records(path)):
        if rec.get("answerable") is False and not include_unanswerable:
            continue
        paragraphs = {p.get("idx", j): p for j, p in enumerate(rec.get("paragraphs") or [])}
        order = [d.get("paragraph_support_idx") for d in rec.get("question_decomposition") or []]
        titles = [paragraphs[k]["title"] for k in order if k in paragraphs]
        titles += [p["title"] for p in paragraphs.values() if p.get("is_supporting")]
        hops = len(rec.get("question_decomposition") or [])
        rows.append(qa_row(_question(rec, where), _answers(rec, where), data_source,
                           str(rec.get("id", rec.get("idx", i))), _ordered_unique(titles), hops=hops))
        if limit and len(rows) >= limit:
            break
    return rows


def load_qa_jsonl(path: str = "", limit: int = 0, data_source: str = "qa") -> list[dict[str, Any]]:
    """Plain ``{question, answer | answers | golden_answers}`` records (JSONL, JSON list or CSV)."""
    if not path:
        raise DatasetError(f"{data_source}: set data.*.path to a question/answer file")
    rows = []
    for i, (where, rec) in enumerate(read_records(path)):
        rows.append(qa_row(_question(rec, where), _answers(rec, where), data_source,
                           str(rec.get("id", rec.get("idx", i)))))
        if limit and len(rows) >= limit:
            break
    return rows


def load_nq(path: str = "", limit: int = 0, data_source: str = "nq") -> list[dict[str, Any]]:
    """NQ-open (``{question, answer: [...]}``) or the FlashRAG format (``golden_answers``)."""
    return load_qa_jsonl(path, limit, data_source)


def load_bamboogle(path: str = "", limit: int = 0, data_source: str = "bamboogle") -> list[dict[str, Any]]:
    """Bamboogle: ``{question, answer}`` JSONL, or the original CSV with ``Question``/``Answer`` columns."""
    return load_qa_jsonl(path, limit, data_source)
